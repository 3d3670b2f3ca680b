//! Back-off bookkeeping (upstream `client-go/util/flowcontrol/backoff.go`
//! and `apimachinery/pkg/util/wait`'s exponential back-off manager).
//!
//! `Backoff` tracks one delay per key (a container, an image) and is keyed
//! on wall-clock event times because the runtime reports exit times as wall
//! clock. `Exponential` is the retry delay of a single loop, optionally
//! jittered and reset after a quiet period.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};

#[derive(Debug, Clone, Copy)]
struct Entry {
    delay: Duration,
    last_update: SystemTime,
}

/// Per-key exponential back-off: `initial`, doubling up to `max`; a key
/// whose last event is older than `reset_after` starts over at `initial`.
pub struct Backoff {
    initial: Duration,
    max: Duration,
    reset_after: Duration,
    entries: Mutex<HashMap<String, Entry>>,
}

impl Backoff {
    pub fn new(initial: Duration, max: Duration, reset_after: Duration) -> Self {
        Backoff {
            initial,
            max,
            reset_after,
            entries: Mutex::new(HashMap::new()),
        }
    }

    fn entries(&self) -> MutexGuard<'_, HashMap<String, Entry>> {
        crate::lock(&self.entries)
    }

    /// Records an event at `at` and grows the key's delay.
    pub fn next(&self, key: &str, at: SystemTime) {
        let mut entries = self.entries();
        let delay = match entries.get(key) {
            Some(e) if !self.expired(at, e.last_update) => (e.delay * 2).min(self.max),
            _ => self.initial,
        };
        entries.insert(
            key.to_string(),
            Entry {
                delay,
                last_update: at,
            },
        );
    }

    /// The remaining wait if the key is still backing off from an event at
    /// `event_time` (judged at `now`).
    pub fn remaining_since(
        &self,
        key: &str,
        event_time: SystemTime,
        now: SystemTime,
    ) -> Option<Duration> {
        let entries = self.entries();
        let e = entries.get(key)?;
        if self.expired(now, e.last_update) {
            return None;
        }
        let waited = now.duration_since(event_time).unwrap_or(Duration::ZERO);
        e.delay.checked_sub(waited).filter(|d| !d.is_zero())
    }

    /// The remaining wait counted from the key's last recorded event.
    pub fn remaining_since_update(&self, key: &str, now: SystemTime) -> Option<Duration> {
        let last = self.entries().get(key)?.last_update;
        self.remaining_since(key, last, now)
    }

    pub fn current(&self, key: &str) -> Option<Duration> {
        self.entries().get(key).map(|e| e.delay)
    }

    pub fn reset(&self, key: &str) {
        self.entries().remove(key);
    }

    /// Drops keys idle for longer than `reset_after` (upstream's GC).
    pub fn gc(&self, now: SystemTime) {
        let reset_after = self.reset_after;
        self.entries().retain(|_, e| {
            now.duration_since(e.last_update)
                .map_or(true, |d| d <= reset_after)
        });
    }

    fn expired(&self, now: SystemTime, last_update: SystemTime) -> bool {
        now.duration_since(last_update)
            .is_ok_and(|d| d > self.reset_after)
    }
}

/// A single retry delay: `initial`, doubling to `max`, reset on success.
/// With [`Exponential::jitter`] each delay is stretched by up to that
/// fraction; with [`Exponential::reset_after`] a failure after that long
/// without one starts over at `initial` (client-go's
/// `NewExponentialBackoffManager`).
#[derive(Debug, Clone)]
pub struct Exponential {
    initial: Duration,
    max: Duration,
    jitter: f64,
    reset_after: Option<Duration>,
    current: Option<Duration>,
    last: Option<Instant>,
}

impl Exponential {
    pub fn new(initial: Duration, max: Duration) -> Self {
        Exponential {
            initial,
            max,
            jitter: 0.0,
            reset_after: None,
            current: None,
            last: None,
        }
    }

    /// Each delay becomes `delay * (1 + jitter * r)`, r uniform in [0, 1).
    pub fn jitter(mut self, jitter: f64) -> Self {
        self.jitter = jitter;
        self
    }

    /// A failure more than `quiet` after the previous one starts over.
    pub fn reset_after(mut self, quiet: Duration) -> Self {
        self.reset_after = Some(quiet);
        self
    }

    /// The delay to wait after one more failure.
    pub fn next_delay(&mut self) -> Duration {
        let now = Instant::now();
        if let (Some(quiet), Some(last)) = (self.reset_after, self.last) {
            if now.saturating_duration_since(last) > quiet {
                self.current = None;
            }
        }
        self.last = Some(now);
        let d = match self.current {
            None => self.initial,
            Some(d) => (d * 2).min(self.max),
        };
        self.current = Some(d);
        if self.jitter > 0.0 {
            crate::jitter(d, self.jitter)
        } else {
            d
        }
    }

    pub fn reset(&mut self) {
        self.current = None;
        self.last = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: fn(u64) -> Duration = Duration::from_secs;

    #[test]
    fn doubles_to_max_and_resets_after_quiet_period() {
        let b = Backoff::new(S(10), S(300), S(600));
        let t0 = SystemTime::UNIX_EPOCH + S(1_000_000);
        let mut t = t0;
        let mut seen = vec![];
        for _ in 0..7 {
            b.next("c", t);
            seen.push(b.current("c").unwrap().as_secs());
            t += S(1);
        }
        assert_eq!(seen, vec![10, 20, 40, 80, 160, 300, 300]);
        // Ten quiet minutes later the delay starts over.
        b.next("c", t + S(601));
        assert_eq!(b.current("c"), Some(S(10)));
    }

    #[test]
    fn remaining_counts_from_the_event() {
        let b = Backoff::new(S(10), S(300), S(600));
        let died = SystemTime::UNIX_EPOCH + S(5000);
        b.next("c", died);
        assert_eq!(b.remaining_since("c", died, died + S(4)), Some(S(6)));
        assert_eq!(b.remaining_since("c", died, died + S(10)), None);
        assert_eq!(b.remaining_since("other", died, died), None);
    }

    #[test]
    fn gc_forgets_idle_keys() {
        let b = Backoff::new(S(10), S(300), S(600));
        let t = SystemTime::UNIX_EPOCH + S(100);
        b.next("c", t);
        b.gc(t + S(601));
        assert_eq!(b.current("c"), None);
    }

    #[test]
    fn exponential_retry_delay() {
        let mut e = Exponential::new(Duration::from_millis(100), S(5));
        let ms: Vec<u128> = (0..8).map(|_| e.next_delay().as_millis()).collect();
        assert_eq!(ms, vec![100, 200, 400, 800, 1600, 3200, 5000, 5000]);
        e.reset();
        assert_eq!(e.next_delay(), Duration::from_millis(100));
    }

    #[test]
    fn jitter_stretches_within_bound() {
        let mut e = Exponential::new(Duration::from_millis(100), S(5)).jitter(1.0);
        for base in [100, 200, 400] {
            let d = e.next_delay().as_millis();
            assert!((base..2 * base).contains(&d), "{d} for {base}");
        }
    }

    #[test]
    fn starts_over_after_a_quiet_period() {
        let mut e = Exponential::new(Duration::from_millis(100), S(5)).reset_after(Duration::ZERO);
        e.next_delay();
        std::thread::sleep(Duration::from_millis(2));
        assert_eq!(e.next_delay(), Duration::from_millis(100));
        let mut kept = Exponential::new(Duration::from_millis(100), S(5)).reset_after(S(60));
        kept.next_delay();
        assert_eq!(kept.next_delay(), Duration::from_millis(200));
    }
}
