//! Client-side rate limiting (client-go's util/flowcontrol); the back-off
//! and its jitter are rkubelet-util's, shared with every layer.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use rkubelet_util::lock;
/// Jitter for the kubelet's own loops, from the one source rkubelet-util keeps.
pub use rkubelet_util::random_unit;

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
        let mut b = lock(&self.state);
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
        let mut b = lock(&self.state);
        b.tokens = (b.tokens + 1.0).min(self.burst);
    }
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
}
