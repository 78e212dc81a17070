//! Module configuration (`lock.*`): settable in redis.conf, as `loadmodule`
//! arguments, and with CONFIG SET / GET.
//!
//! Redis is given wide bounds and every value is validated here, so that a
//! bad value (in redis.conf, on the loadmodule line, or in CONFIG SET) gets a
//! log line and an error that name the setting and its range, instead of the
//! misleading start-up failure Redis 7.0 prints on its own.

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};

use redis_module::configuration::ConfigurationContext;
use redis_module::{ConfigurationValue, RedisError};

use crate::core::args::{Limits, RENEW_KEYS_MAX};

/// An integer setting with its valid range.
pub struct BoundedI64 {
    name: &'static str,
    value: AtomicI64,
    pub default: i64,
    pub min: i64,
    pub max: i64,
}

impl BoundedI64 {
    const fn new(name: &'static str, default: i64, min: i64, max: i64) -> BoundedI64 {
        BoundedI64 { name, value: AtomicI64::new(default), default, min, max }
    }

    pub fn get(&self) -> i64 {
        self.value.load(Ordering::Relaxed)
    }

    pub fn name(&self) -> &'static str {
        self.name
    }
}

// The module runs on Redis' main thread; config callbacks run there too.
impl ConfigurationValue<i64> for BoundedI64 {
    fn get(&self, _ctx: &ConfigurationContext) -> i64 {
        BoundedI64::get(self)
    }

    fn set(&self, _ctx: &ConfigurationContext, value: i64) -> Result<(), RedisError> {
        if value < self.min || value > self.max {
            let message =
                format!("lock.{} must be between {} and {}, got {}", self.name, self.min, self.max, value);
            redis_module::logging::log_warning(&message);
            return Err(RedisError::String(message));
        }
        self.value.store(value, Ordering::Relaxed);
        redis_module::logging::log_notice(format!("lock.{} set to {}", self.name, value));
        if self.name == MAX_TTL_MS.name {
            MAX_TTL_SEEN_MS.fetch_max(value, Ordering::Relaxed);
        }
        if self.name == QUARANTINE_MS.name {
            if let Some(hook) = QUARANTINE_SET_HOOK.get() {
                hook();
            }
        }
        Ok(())
    }
}

/// Run after `lock.quarantine-ms` is set (the node logs whether grants are
/// allowed now). A hook handed in by `lib.rs`, so that the settings do not
/// depend on the node state that reads them.
static QUARANTINE_SET_HOOK: std::sync::OnceLock<fn()> = std::sync::OnceLock::new();

pub fn on_quarantine_set(hook: fn()) {
    let _ = QUARANTINE_SET_HOOK.set(hook);
}

const DAY_MS: i64 = 86_400_000;

/// The largest TTL a grant or extension may carry.
pub static MAX_TTL_MS: BoundedI64 = BoundedI64::new("max-ttl-ms", 30_000, 1, DAY_MS);

/// The largest `lock.max-ttl-ms` in force since the module loaded: a lock
/// granted before the setting was lowered may still carry a TTL this long.
static MAX_TTL_SEEN_MS: AtomicI64 = AtomicI64::new(MAX_TTL_MS.default);

/// How far past now a stored lock's deadline may lie and still be one this
/// module could have written: the longest TTL in force since load, plus the
/// clock-jump tolerance (a lock replicated or restored from a node whose
/// clock ran that far ahead). A deadline beyond it is refused as not a
/// lock (a value written by something else, such as a `SET` of a forged
/// lock: it must not hold a key for years).
pub fn deadline_ahead_max_ms() -> i64 {
    max_ttl_seen_ms().saturating_add(CLOCK_JUMP_TOLERANCE_MS.get())
}

/// The largest `lock.max-ttl-ms` in force since load.
pub fn max_ttl_seen_ms() -> i64 {
    MAX_TTL_SEEN_MS.load(Ordering::Relaxed).max(MAX_TTL_MS.get())
}

/// How long after a lock's deadline its key's native Redis expiry is set:
/// the largest forward wall-clock jump a held lock survives.
pub static CLOCK_JUMP_TOLERANCE_MS: BoundedI64 =
    BoundedI64::new("clock-jump-tolerance-ms", 60_000, 0, DAY_MS);

pub fn limits() -> Limits {
    Limits {
        ttl_ms_max: MAX_TTL_MS.get(),
        renew_keys_max: usize::try_from(MAX_RENEW_KEYS.get()).unwrap_or(RENEW_KEYS_MAX),
        multi_keys_max: usize::try_from(MAX_MULTI_KEYS.get()).unwrap_or(RENEW_KEYS_MAX),
    }
}

/// Keys one LOCK.MACQUIRE may grant (and one LOCK.MRELEASE release). Each
/// costs about what a single grant costs, and a waiter for a set stands in
/// the queue of every key of it, so a hand-off to it is O(keys); the
/// default keeps a call far under a millisecond.
pub static MAX_MULTI_KEYS: BoundedI64 = BoundedI64::new("max-multi-keys", 100, 1, RENEW_KEYS_MAX as i64);

/// Keys one LOCK.RENEW may extend. Each costs a few microseconds of the
/// main thread (measured: about 3 us on a loaded 2-core machine), so the
/// default keeps a call well under a millisecond; Redisson's watchdog
/// renews 100 per call too.
pub static MAX_RENEW_KEYS: BoundedI64 = BoundedI64::new("max-renew-keys", 100, 1, RENEW_KEYS_MAX as i64);

/// The most clients that may wait (WAIT) for one lock at a time; one more
/// gets a MAXWAITERS error.
pub static MAX_WAITERS: BoundedI64 = BoundedI64::new("max-waiters", 1000, 0, 100_000);

/// How long a node refuses new grants after a start or a promotion, in ms;
/// -1 (the default) means lock.max-ttl-ms + 1000. 0 turns the protection
/// off (for tests, and for nodes with appendfsync always).
pub static QUARANTINE_MS: BoundedI64 = BoundedI64::new("quarantine-ms", -1, -1, DAY_MS);

/// Quarantine after a replica is promoted to master.
pub static FAILOVER_QUARANTINE: AtomicBool = AtomicBool::new(true);

/// Publish `released` / `expired` on `__lock@<db>__:<key>` when a lock is
/// freed and no waiter takes it. About a tenth of a release's cost (a
/// channel name built and looked up in Redis' pub/sub tables), so it can be
/// turned off where nobody waits through pub/sub.
pub static PUBLISH_FREED: AtomicBool = AtomicBool::new(true);

/// Quarantine a key or a database whose locks were removed by something
/// other than a lock command (eviction, FLUSHALL/FLUSHDB, SWAPDB, DEL,
/// RENAME, MOVE, an overwrite, ...) until those locks' deadlines have
/// passed. `no` is for throwaway instances whose keyspace is wiped on
/// purpose (tests, benchmarks): a lock removed that way can then be granted
/// twice.
pub static REMOVAL_QUARANTINE: AtomicBool = AtomicBool::new(true);

redis_module::enum_configuration! {
    /// What a node does while `maxmemory-policy` may evict lock keys
    /// (`maxmemory` set and a policy other than `noeviction`: lock keys carry
    /// an expiry, so `volatile-*` policies evict them too).
    #[allow(non_camel_case_types)]
    #[derive(Debug, PartialEq, Eq, Copy)]
    pub enum EvictionMode {
        /// Refuse new grants (error code EVICTION) until the policy or
        /// `maxmemory` changes: the default, for lock nodes.
        refuse = 0,
        /// Grant; a lock that gets evicted while in force quarantines its
        /// key until its deadline (for instances shared with a cache).
        quarantine = 1,
    }
}

impl EvictionMode {
    pub fn name(self) -> &'static str {
        match self {
            EvictionMode::refuse => "refuse",
            EvictionMode::quarantine => "quarantine",
        }
    }
}

pub static EVICTION_MODE: std::sync::Mutex<EvictionMode> = std::sync::Mutex::new(EvictionMode::refuse);

pub fn eviction_mode() -> EvictionMode {
    *EVICTION_MODE.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Lock-delay: after a lock expires without being released (its holder
/// probably died or paused), nobody may take it for this long, in ms. A
/// normal release frees at once. 0 (the default) turns it off.
pub static EXPIRY_DELAY_MS: BoundedI64 = BoundedI64::new("expiry-delay-ms", 0, 0, DAY_MS);
