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
/// Grants refused because of a quarantine (of the node, a database or a
/// key).
pub static QUARANTINED: Counter = Counter::new();
/// Grants refused because `maxmemory-policy` may evict lock keys.
pub static REFUSED_EVICTABLE: Counter = Counter::new();
/// Locks possibly in force that another command removed or changed
/// (keyspace events), each followed by a quarantine of its key.
pub static LOCKS_REMOVED: Counter = Counter::new();
/// Of those, the ones evicted under `maxmemory`.
pub static LOCKS_EVICTED: Counter = Counter::new();
/// FLUSHDB / FLUSHALL / SWAPDB events that quarantined a database.
pub static DB_QUARANTINES: Counter = Counter::new();
/// Locks freed by LOCK.REVOKE.
pub static REVOKED: Counter = Counter::new();

use std::sync::Mutex;

use crate::core::histogram::{Histogram, Summary};
use crate::core::hotkeys::{HotKey, HotKeys};

/// How long served waiters waited (WAIT until granted), in ms.
static WAIT_TIMES: Mutex<Histogram> = Mutex::new(Histogram::new());
/// How long locks were held until released (RELEASE, EXIT to 0, MRELEASE),
/// in ms. Locks that expire are counted in `expiries` instead.
static HOLD_TIMES: Mutex<Histogram> = Mutex::new(Histogram::new());
/// The most contended keys lately (fixed memory, see `core/hotkeys.rs`).
static HOT_KEYS: Mutex<HotKeys> = Mutex::new(HotKeys::new());

fn with<T, R>(lock: &Mutex<T>, f: impl FnOnce(&mut T) -> R) -> R {
    let mut guard = lock.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    f(&mut guard)
}

pub fn record_wait(ms: i64) {
    with(&WAIT_TIMES, |h| h.record(ms));
}

pub fn record_hold(ms: i64) {
    with(&HOLD_TIMES, |h| h.record(ms));
}

pub fn wait_times() -> Summary {
    with(&WAIT_TIMES, |h| h.summary())
}

pub fn hold_times() -> Summary {
    with(&HOLD_TIMES, |h| h.summary())
}

/// A grant refused because the key was held or had waiters.
pub fn record_contended(db: i32, key: &[u8], now_ms: i64) {
    with(&HOT_KEYS, |t| t.record(db, key, now_ms));
}

/// Up to `n` of the most contended keys lately, the most contended first.
pub fn most_contended(n: usize, now_ms: i64) -> Vec<HotKey> {
    with(&HOT_KEYS, |t| t.top(n, now_ms))
}
