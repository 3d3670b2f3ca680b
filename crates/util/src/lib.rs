//! The mechanisms every rkubelet layer shares, one of each: the
//! poison-tolerant [`lock`] and the back-off ([`Backoff`] per key,
//! [`backoff::Exponential`] for one retry loop), with the jitter they use
//! ([`jitter`], [`random_unit`]), and shutdown as a descriptor for threads
//! that wait in poll(2) ([`shutdown`]).

pub mod backoff;
pub mod shutdown;

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

pub use backoff::{Backoff, Exponential};

/// Locks `m`, taking the data as it is when another thread panicked while
/// holding it: every module runs under a panic guard that restarts it, and
/// the state it shares stays usable (each update is a whole assignment).
pub fn lock<T: ?Sized>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A random number in [0, 1) from std's per-process random hash keys: enough
/// for jitter, without a random-number crate.
pub fn random_unit() -> f64 {
    let nanos = Instant::now().elapsed().as_nanos() ^ u128::from(std::process::id());
    let bits = RandomState::new().hash_one(nanos);
    (bits >> 11) as f64 / (1u64 << 53) as f64
}

/// `d` stretched by up to `max_factor` of itself: `d * (1 + max_factor * r)`,
/// r uniform in [0, 1) (apimachinery's `wait.Jitter`).
pub fn jitter(d: Duration, max_factor: f64) -> Duration {
    d.mul_f64(1.0 + max_factor * random_unit())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_unit_in_range() {
        for _ in 0..100 {
            let r = random_unit();
            assert!((0.0..1.0).contains(&r));
        }
    }

    #[test]
    fn jitter_stays_within_its_factor() {
        let d = Duration::from_secs(10);
        for _ in 0..100 {
            let j = jitter(d, 0.04);
            assert!(j >= d && j < Duration::from_millis(10_400), "{j:?}");
        }
    }

    #[test]
    fn lock_survives_a_poisoning_panic() {
        let m = std::sync::Arc::new(Mutex::new(1));
        let m2 = m.clone();
        let _ = std::thread::spawn(move || {
            let _g = m2.lock();
            panic!("poison it");
        })
        .join();
        assert!(m.is_poisoned());
        *lock(&m) += 1;
        assert_eq!(*lock(&m), 2);
    }
}
