//! The node's counters and histograms for `INFO lock` ([`Stats`], a field
//! of `node::Node`). Relaxed atomics: every writer runs on Redis' main
//! thread; atomics only make them `Sync`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use crate::core::histogram::{Histogram, Summary};
use crate::core::hotkeys::{HotKey, HotKeys};

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

pub struct Stats {
    /// New grants (each with a new fencing token).
    pub grants: Counter,
    /// Idempotent re-acquires and reentrant entries by the current holder.
    pub renewals: Counter,
    /// Acquire attempts refused because another owner held the lock.
    pub contended: Counter,
    pub releases: Counter,
    pub extensions: Counter,
    /// Held locks whose TTL ran out, counted when the module finds them.
    pub expiries: Counter,
    /// Calls refused for bad arguments or a wrong key type.
    pub rejected: Counter,
    /// Clients that started waiting (WAIT) for a lock.
    pub waits_started: Counter,
    /// Waiters that were handed the lock.
    pub waits_served: Counter,
    /// Waiters whose timeout passed.
    pub waits_timed_out: Counter,
    /// Waiters whose client disconnected while queued.
    pub waits_abandoned: Counter,
    /// Waiters answered with an error (the key was overwritten, or became
    /// refused to newcomers).
    pub waits_failed: Counter,
    /// Grants refused because of a quarantine (of the node, a database or a
    /// key).
    pub quarantined: Counter,
    /// Grants refused because `maxmemory-policy` may evict lock keys.
    pub refused_evictable: Counter,
    /// Locks possibly in force that another command removed or changed
    /// (keyspace events), each followed by a quarantine of its key.
    pub locks_removed: Counter,
    /// Of those, the ones evicted under `maxmemory`.
    pub locks_evicted: Counter,
    /// FLUSHDB / FLUSHALL / SWAPDB events that quarantined a database.
    pub db_quarantines: Counter,
    /// Locks freed by LOCK.REVOKE.
    pub revoked: Counter,
    /// Start-up or promotion quarantines ended by LOCK.UNQUARANTINE.
    pub quarantines_ended: Counter,
    /// How long served waiters waited (WAIT until granted), in ms.
    wait_times: Mutex<Histogram>,
    /// How long locks were held until released (RELEASE, EXIT to 0,
    /// MRELEASE), in ms. Locks that expire are counted in `expiries`
    /// instead.
    hold_times: Mutex<Histogram>,
    /// The most contended keys lately (fixed memory, see `core/src/hotkeys.rs`).
    hot_keys: Mutex<HotKeys>,
}

fn with<T, R>(lock: &Mutex<T>, f: impl FnOnce(&mut T) -> R) -> R {
    let mut guard = lock.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    f(&mut guard)
}

impl Stats {
    pub const fn new() -> Stats {
        Stats {
            grants: Counter::new(),
            renewals: Counter::new(),
            contended: Counter::new(),
            releases: Counter::new(),
            extensions: Counter::new(),
            expiries: Counter::new(),
            rejected: Counter::new(),
            waits_started: Counter::new(),
            waits_served: Counter::new(),
            waits_timed_out: Counter::new(),
            waits_abandoned: Counter::new(),
            waits_failed: Counter::new(),
            quarantined: Counter::new(),
            refused_evictable: Counter::new(),
            locks_removed: Counter::new(),
            locks_evicted: Counter::new(),
            db_quarantines: Counter::new(),
            revoked: Counter::new(),
            quarantines_ended: Counter::new(),
            wait_times: Mutex::new(Histogram::new()),
            hold_times: Mutex::new(Histogram::new()),
            hot_keys: Mutex::new(HotKeys::new()),
        }
    }

    pub fn record_wait(&self, ms: i64) {
        with(&self.wait_times, |h| h.record(ms));
    }

    pub fn record_hold(&self, ms: i64) {
        with(&self.hold_times, |h| h.record(ms));
    }

    pub fn wait_times(&self) -> Summary {
        with(&self.wait_times, |h| h.summary())
    }

    pub fn hold_times(&self) -> Summary {
        with(&self.hold_times, |h| h.summary())
    }

    /// A grant refused because the key was held or had waiters.
    pub fn record_contended(&self, db: i32, key: &[u8], now_ms: i64) {
        self.contended.bump();
        with(&self.hot_keys, |t| t.record(db, key, now_ms));
    }

    /// Up to `n` of the most contended keys lately, the most contended first.
    pub fn most_contended(&self, n: usize, now_ms: i64) -> Vec<HotKey> {
        with(&self.hot_keys, |t| t.top(n, now_ms))
    }
}

impl Default for Stats {
    fn default() -> Self {
        Stats::new()
    }
}
