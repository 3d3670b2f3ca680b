//! Client-side rate limiting and backoff (client-go's util/flowcontrol).

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A token bucket that refills at `qps` up to `burst` and starts full, like
/// client-go's `NewTokenBucketRateLimiter` (golang.org/x/time/rate). Callers
/// reserve a token and sleep until it is due, so waiters are served in order.
#[derive(Debug)]
pub struct TokenBucket {
    qps: f64,
    burst: f64,
    state: Mutex<Bucket>,
}

#[derive(Debug)]
struct Bucket {
    tokens: f64,
    last: Instant,
}

impl TokenBucket {
    /// `qps` must be > 0; `burst` is at least 1.
    pub fn new(qps: f32, burst: u32) -> TokenBucket {
        let burst = f64::from(burst.max(1));
        TokenBucket {
            qps: f64::from(qps).max(f64::MIN_POSITIVE),
            burst,
            state: Mutex::new(Bucket {
                tokens: burst,
                last: Instant::now(),
            }),
        }
    }

    /// Takes one token, sleeping until it is available. A wait longer than
    /// `max_wait` is not started (the token is given back) and returns Err with it.
    pub fn wait(&self, max_wait: Duration) -> Result<Duration, Duration> {
        let delay = self.reserve();
        if delay > max_wait {
            self.cancel();
            return Err(delay);
        }
        if !delay.is_zero() {
            std::thread::sleep(delay);
        }
        Ok(delay)
    }

    /// Takes a token (the count may go negative: a queue of reservations) and
    /// returns how long until it is due.
    pub(crate) fn reserve(&self) -> Duration {
        let mut b = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        let elapsed = now.saturating_duration_since(b.last).as_secs_f64();
        b.tokens = (b.tokens + elapsed * self.qps).min(self.burst);
        b.last = now;
        b.tokens -= 1.0;
        if b.tokens >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-b.tokens / self.qps)
        }
    }

    fn cancel(&self) {
        let mut b = self.state.lock().unwrap_or_else(|e| e.into_inner());
        b.tokens = (b.tokens + 1.0).min(self.burst);
    }
}

/// Exponential backoff with jitter, reset after a quiet period (client-go's
/// `NewExponentialBackoffManager`).
#[derive(Debug)]
pub struct Backoff {
    initial: Duration,
    max: Duration,
    reset_after: Duration,
    jitter: f64,
    next: Duration,
    last: Option<Instant>,
}

impl Backoff {
    pub fn new(initial: Duration, max: Duration, reset_after: Duration, jitter: f64) -> Backoff {
        Backoff {
            initial,
            max,
            reset_after,
            jitter,
            next: initial,
            last: None,
        }
    }

    /// The delay to wait now; doubles the next one.
    pub fn next_delay(&mut self) -> Duration {
        let now = Instant::now();
        if self
            .last
            .is_some_and(|t| now.saturating_duration_since(t) > self.reset_after)
        {
            self.next = self.initial;
        }
        self.last = Some(now);
        let base = self.next;
        self.next = (self.next * 2).min(self.max);
        base.mul_f64(1.0 + self.jitter * random_unit())
    }

    pub fn reset(&mut self) {
        self.next = self.initial;
        self.last = None;
    }
}

/// A random number in [0, 1) from std's per-process random hash keys: enough
/// for jitter, without a random-number crate.
pub fn random_unit() -> f64 {
    let nanos = Instant::now().elapsed().as_nanos() ^ u128::from(std::process::id());
    let bits = RandomState::new().hash_one(nanos);
    (bits >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bucket_allows_burst_then_paces() {
        let b = TokenBucket::new(10.0, 3);
        for _ in 0..3 {
            assert_eq!(b.wait(Duration::from_secs(1)), Ok(Duration::ZERO));
        }
        let start = Instant::now();
        let waited = b.wait(Duration::from_secs(1)).expect("within bound");
        assert!(waited > Duration::from_millis(50), "{waited:?}");
        assert!(start.elapsed() >= Duration::from_millis(50));
    }

    #[test]
    fn bucket_refuses_waits_beyond_bound() {
        let b = TokenBucket::new(1.0, 1);
        assert_eq!(b.wait(Duration::ZERO), Ok(Duration::ZERO));
        assert!(b.wait(Duration::from_millis(10)).is_err());
        // The refused reservation was returned: the next wait is still ~1 s, not 2 s.
        let err = b.wait(Duration::ZERO).expect_err("still empty");
        assert!(err <= Duration::from_secs(1), "{err:?}");
    }

    #[test]
    fn backoff_doubles_to_cap_and_resets() {
        let mut b = Backoff::new(
            Duration::from_millis(100),
            Duration::from_millis(350),
            Duration::from_secs(60),
            0.0,
        );
        let got: Vec<_> = (0..4).map(|_| b.next_delay().as_millis()).collect();
        assert_eq!(got, vec![100, 200, 350, 350]);
        b.reset();
        assert_eq!(b.next_delay().as_millis(), 100);
    }

    #[test]
    fn random_unit_in_range() {
        for _ in 0..100 {
            let r = random_unit();
            assert!((0.0..1.0).contains(&r));
        }
    }
}
