//! The module clock: wall-clock milliseconds as they were when the module
//! loaded, advanced by the monotonic clock since.
//!
//! Lock deadlines are instants on this clock. While the server runs, a step of
//! the wall clock (NTP, an operator, a VM resume) moves neither a deadline
//! nor "now", so it cannot shorten or lengthen a held lock (safety property 8).
//! The values are still epoch milliseconds, so they mean the same thing on a
//! replica, after an AOF replay or an RDB load (property 6).
//!
//! Redis itself expires keys by the wall clock. The key's native expiry is
//! therefore only a backstop, set `lock.clock-jump-tolerance-ms` after the
//! deadline (see [`backstop_ms`]).

use std::sync::OnceLock;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

struct Anchor {
    wall_ms: i64,
    monotonic: Instant,
}

static ANCHOR: OnceLock<Anchor> = OnceLock::new();

fn anchor() -> &'static Anchor {
    ANCHOR.get_or_init(|| Anchor { wall_ms: wall_ms(), monotonic: Instant::now() })
}

/// Fixes the anchor; called once when the module loads.
pub fn start() {
    let _ = anchor();
}

/// The current wall clock in epoch ms (what Redis uses for key expiry).
///
/// Read through the server (`RedisModule_Milliseconds`), so that module and
/// server agree on the wall clock even where the server's clock calls are
/// interposed: Valkey loads modules with `RTLD_DEEPBIND`, so an LD_PRELOAD
/// clock shim (the clock-jump tests) moves the server's clock but not the
/// module's own libc calls. Unit tests run without a server.
pub fn wall_ms() -> i64 {
    if cfg!(test) {
        match SystemTime::now().duration_since(UNIX_EPOCH) {
            Ok(since) => i64::try_from(since.as_millis()).unwrap_or(i64::MAX),
            Err(_) => 0,
        }
    } else {
        crate::ffi::server_wall_ms()
    }
}

/// Now, on the module clock, in epoch ms.
pub fn now_ms() -> i64 {
    let anchor = anchor();
    let elapsed = anchor.monotonic.elapsed();
    // Seconds and the milliseconds of the last one: `as_millis` would work in
    // 128 bits, on every call of every command.
    let seconds = i64::try_from(elapsed.as_secs()).unwrap_or(i64::MAX / 1_000);
    let elapsed_ms = seconds.saturating_mul(1_000).saturating_add(i64::from(elapsed.subsec_millis()));
    anchor.wall_ms.saturating_add(elapsed_ms)
}

/// How far the wall clock has moved away from the module clock since load
/// (positive: the wall clock jumped forward). Shown in INFO.
pub fn wall_offset_ms() -> i64 {
    wall_ms().saturating_sub(now_ms())
}

/// The native Redis expiry (epoch ms, wall clock) for a lock whose deadline
/// is `deadline_ms` on the module clock, measured at `now_ms`.
///
/// The lock's remaining time is laid onto the later of the two clocks, then
/// `tolerance_ms` is added: a forward wall-clock jump of up to
/// `tolerance_ms` while the lock is held cannot make Redis delete the key
/// before the module considers the lock expired.
pub fn backstop_ms(deadline_ms: i64, now_ms: i64, wall_ms: i64, tolerance_ms: i64) -> i64 {
    let ahead = wall_ms.saturating_sub(now_ms).max(0);
    deadline_ms.saturating_add(ahead).saturating_add(tolerance_ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backstop_follows_the_later_clock() {
        // Clocks agree: deadline plus tolerance.
        assert_eq!(backstop_ms(1_000, 500, 500, 60), 1_060);
        // Wall clock jumped 10 s forward: keep the full remaining time on it.
        assert_eq!(backstop_ms(1_000, 500, 10_500, 60), 11_060);
        // Wall clock stepped back: the module deadline is already later.
        assert_eq!(backstop_ms(1_000, 500, 100, 60), 1_060);
    }

    #[test]
    fn module_clock_reads_epoch_milliseconds() {
        // Deadlines are absolute epoch ms (safety property 6: a replica or an
        // AOF replay reads the same instant), so without a clock step the
        // module clock agrees with the system's.
        let system = || SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap();
        let before = system();
        let now = now_ms();
        let after = system();
        assert!((before - 1_000..=after + 1_000).contains(&now), "{now} not within [{before}, {after}]");
    }

    #[test]
    fn module_clock_moves_forward() {
        let a = now_ms();
        let b = now_ms();
        assert!(b >= a);
        assert!((wall_offset_ms()).abs() < 1_000);
    }
}
