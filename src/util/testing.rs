//! What unit tests of several modules share.

use std::time::{Duration, Instant};

/// Waits up to 5 s for `cond`, failing the test naming `what` after that.
pub fn eventually(what: &str, cond: impl Fn() -> bool) {
    eventually_within(what, Duration::from_secs(5), cond);
}

/// Waits up to `within` for `cond`, failing the test naming `what` after that.
pub fn eventually_within(what: &str, within: Duration, cond: impl Fn() -> bool) {
    let deadline = Instant::now() + within;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}
