//! Waiting with a deadline.

use std::thread::sleep;
use std::time::{Duration, Instant};

/// Polls `check` every 10 ms until it returns true or `within` passes.
pub fn wait_until(within: Duration, what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if check() {
            return;
        }
        sleep(Duration::from_millis(10));
    }
    panic!("timed out after {within:?} waiting for {what}");
}
