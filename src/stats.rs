//! Counters for `INFO lock`. Relaxed atomics: every writer runs on Redis'
//! main thread; atomics only make the statics `Sync`.

use std::sync::atomic::{AtomicU64, Ordering};

pub struct Counter(AtomicU64);

impl Counter {
    const fn new() -> Counter {
        Counter(AtomicU64::new(0))
    }

    pub fn add(&self, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }

    pub fn bump(&self) {
        self.add(1);
    }

    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// New grants (each with a new fencing token).
pub static GRANTS: Counter = Counter::new();
/// Idempotent re-acquires and reentrant entries by the current holder.
pub static RENEWALS: Counter = Counter::new();
/// Acquire attempts refused because another owner held the lock.
pub static CONTENDED: Counter = Counter::new();
pub static RELEASES: Counter = Counter::new();
pub static EXTENSIONS: Counter = Counter::new();
/// Held locks whose TTL ran out, counted when the module finds them.
pub static EXPIRIES: Counter = Counter::new();
/// Calls refused for bad arguments or a wrong key type.
pub static REJECTED: Counter = Counter::new();
/// Clients that started waiting (WAIT) for a lock.
pub static WAITS_STARTED: Counter = Counter::new();
/// Waiters that were handed the lock.
pub static WAITS_SERVED: Counter = Counter::new();
/// Waiters whose timeout passed.
pub static WAITS_TIMED_OUT: Counter = Counter::new();
/// Waiters whose client disconnected while queued.
pub static WAITS_ABANDONED: Counter = Counter::new();
/// Waiters answered with an error (the key was overwritten with a non-lock).
pub static WAITS_FAILED: Counter = Counter::new();
/// Grants refused because the node was in quarantine.
pub static QUARANTINED: Counter = Counter::new();
