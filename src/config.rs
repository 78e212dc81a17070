//! The module's settings (`lock.*`): settable in redis.conf, as `loadmodule`
//! arguments, and with CONFIG SET / GET. They live in the node's state
//! ([`Settings`], a field of `node::Node`); a call reads the ones it needs
//! once, at its start (`node::Node::rules`), and passes them down.
//!
//! Redis is given wide bounds and every value is validated here, so that a
//! bad value (in redis.conf, on the loadmodule line, or in CONFIG SET) gets a
//! log line and an error that name the setting and its range, instead of the
//! misleading start-up failure Redis 7.0 prints on its own.

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Mutex;

use redis_module::configuration::ConfigurationContext;
use redis_module::{ConfigurationValue, RedisError};

use crate::core::args::{Limits, RENEW_KEYS_MAX};

/// An integer setting with its valid range, and the largest value it has
/// held since the module loaded.
pub struct BoundedI64 {
    name: &'static str,
    value: AtomicI64,
    /// The value before the last change (what a change callback compares
    /// with).
    previous: AtomicI64,
    high_water: AtomicI64,
    pub default: i64,
    pub min: i64,
    pub max: i64,
}

impl BoundedI64 {
    const fn new(name: &'static str, default: i64, min: i64, max: i64) -> BoundedI64 {
        BoundedI64 {
            name,
            value: AtomicI64::new(default),
            previous: AtomicI64::new(default),
            high_water: AtomicI64::new(default),
            default,
            min,
            max,
        }
    }

    pub fn get(&self) -> i64 {
        self.value.load(Ordering::Relaxed)
    }

    /// The value before the last change.
    pub fn previous(&self) -> i64 {
        self.previous.load(Ordering::Relaxed)
    }

    /// The largest value in force since load.
    pub fn high_water(&self) -> i64 {
        self.high_water.load(Ordering::Relaxed).max(self.get())
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
        self.previous.store(self.value.swap(value, Ordering::Relaxed), Ordering::Relaxed);
        self.high_water.fetch_max(value, Ordering::Relaxed);
        redis_module::logging::log_notice(format!("lock.{} set to {}", self.name, value));
        Ok(())
    }
}

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

const DAY_MS: i64 = 86_400_000;

/// A protection a setting can turn off; `INFO lock` has a field for each
/// (`lock_protection_<name>`, 1 while on) and lists those off
/// (`lock_protections_off`), and the log says so at warning level.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protection {
    /// Refuse new grants after a start that may have lost acknowledged
    /// locks: off with `lock.quarantine-ms 0`.
    StartupQuarantine,
    /// Refuse new grants after a promotion to master: off with
    /// `lock.failover-quarantine no` or `lock.quarantine-ms 0`.
    FailoverQuarantine,
    /// Quarantine a key or database whose locks another command removed:
    /// off with `lock.removal-quarantine no`.
    RemovalQuarantine,
    /// A held lock survives a forward wall-clock jump (its key's backstop
    /// expiry lies beyond its deadline): off with
    /// `lock.clock-jump-tolerance-ms 0`.
    ClockJump,
}

impl Protection {
    pub const ALL: [Protection; 4] = [
        Protection::StartupQuarantine,
        Protection::FailoverQuarantine,
        Protection::RemovalQuarantine,
        Protection::ClockJump,
    ];

    /// Its name in `lock_protections_off` (and, with `_` for `-`, in its
    /// own INFO field).
    pub fn name(self) -> &'static str {
        match self {
            Protection::StartupQuarantine => "startup-quarantine",
            Protection::FailoverQuarantine => "failover-quarantine",
            Protection::RemovalQuarantine => "removal-quarantine",
            Protection::ClockJump => "clock-jump-tolerance",
        }
    }

    /// Its INFO field.
    pub fn field(self) -> &'static str {
        match self {
            Protection::StartupQuarantine => "protection_startup_quarantine",
            Protection::FailoverQuarantine => "protection_failover_quarantine",
            Protection::RemovalQuarantine => "protection_removal_quarantine",
            Protection::ClockJump => "protection_clock_jump_tolerance",
        }
    }

    /// What is lost while it is off, and the setting that turned it off.
    pub fn risk(self) -> &'static str {
        match self {
            Protection::StartupQuarantine => {
                "lock.quarantine-ms is 0: after a restart without appendfsync always, a lock this node forgot can be granted twice"
            }
            Protection::FailoverQuarantine => {
                "lock.failover-quarantine is no or lock.quarantine-ms is 0: after a promotion, a lock the old master granted but did not replicate can be granted twice"
            }
            Protection::RemovalQuarantine => {
                "lock.removal-quarantine is no: a lock removed by another command, an eviction or a flush can be granted twice"
            }
            Protection::ClockJump => {
                "lock.clock-jump-tolerance-ms is 0: a forward wall-clock jump expires held locks early"
            }
        }
    }
}

/// Every setting, with its default and range.
pub struct Settings {
    /// The largest TTL a grant or extension may carry.
    pub max_ttl_ms: BoundedI64,
    /// How long after a lock's deadline its key's native Redis expiry is
    /// set: the largest forward wall-clock jump a held lock survives.
    pub clock_jump_tolerance_ms: BoundedI64,
    /// The most clients that may wait (WAIT) for one lock at a time; one
    /// more gets a MAXWAITERS error.
    pub max_waiters: BoundedI64,
    /// How long a node refuses new grants after a start or a promotion, in
    /// ms; -1 (the default) means lock.max-ttl-ms + 1000. 0 turns the
    /// protection off (for tests, and for nodes with appendfsync always).
    pub quarantine_ms: BoundedI64,
    /// Lock-delay: after a lock expires without being released (its holder
    /// probably died or paused), nobody may take it for this long, in ms. A
    /// normal release frees at once. 0 (the default) turns it off.
    pub expiry_delay_ms: BoundedI64,
    /// Keys one LOCK.RENEW may extend. Each costs a few microseconds of the
    /// main thread (measured: about 3 us on a loaded 2-core machine), so
    /// the default keeps a call well under a millisecond; Redisson's
    /// watchdog renews 100 per call too.
    pub max_renew_keys: BoundedI64,
    /// Keys one LOCK.MACQUIRE may grant (and one LOCK.MRELEASE release).
    /// Each costs about what a single grant costs, and a waiter for a set
    /// stands in the queue of every key of it, so a hand-off to it is
    /// O(keys); the default keeps a call far under a millisecond.
    pub max_multi_keys: BoundedI64,
    /// Quarantine after a replica is promoted to master.
    pub failover_quarantine: AtomicBool,
    /// Publish `released` / `expired` on `__lock@<db>__:<key>` when a lock
    /// is freed and no waiter takes it. About a tenth of a release's cost (a
    /// channel name built and looked up in Redis' pub/sub tables), so it can
    /// be turned off where nobody waits through pub/sub.
    pub publish_freed: AtomicBool,
    /// Quarantine a key or a database whose locks were removed by something
    /// other than a lock command (eviction, FLUSHALL/FLUSHDB, SWAPDB, DEL,
    /// RENAME, MOVE, an overwrite, ...) until those locks' deadlines have
    /// passed. `no` is for throwaway instances whose keyspace is wiped on
    /// purpose (tests, benchmarks): a lock removed that way can then be
    /// granted twice.
    pub removal_quarantine: AtomicBool,
    pub eviction_mode: Mutex<EvictionMode>,
}

impl Settings {
    pub const fn new() -> Settings {
        Settings {
            max_ttl_ms: BoundedI64::new("max-ttl-ms", 30_000, 1, DAY_MS),
            clock_jump_tolerance_ms: BoundedI64::new("clock-jump-tolerance-ms", 60_000, 0, DAY_MS),
            max_waiters: BoundedI64::new("max-waiters", 1000, 0, 100_000),
            quarantine_ms: BoundedI64::new("quarantine-ms", -1, -1, DAY_MS),
            expiry_delay_ms: BoundedI64::new("expiry-delay-ms", 0, 0, DAY_MS),
            max_renew_keys: BoundedI64::new("max-renew-keys", 100, 1, RENEW_KEYS_MAX as i64),
            max_multi_keys: BoundedI64::new("max-multi-keys", 100, 1, RENEW_KEYS_MAX as i64),
            failover_quarantine: AtomicBool::new(true),
            publish_freed: AtomicBool::new(false),
            removal_quarantine: AtomicBool::new(true),
            eviction_mode: Mutex::new(EvictionMode::refuse),
        }
    }

    /// The argument limits a command is parsed against.
    pub fn limits(&self) -> Limits {
        Limits {
            ttl_ms_max: self.max_ttl_ms.get(),
            renew_keys_max: usize::try_from(self.max_renew_keys.get()).unwrap_or(RENEW_KEYS_MAX),
            multi_keys_max: usize::try_from(self.max_multi_keys.get()).unwrap_or(RENEW_KEYS_MAX),
        }
    }

    /// How far past now a stored lock's deadline may lie and still be one
    /// this module could have written: the longest TTL in force since load,
    /// plus the clock-jump tolerance (a lock replicated or restored from a
    /// node whose clock ran that far ahead). A deadline beyond it is refused
    /// as not a lock (a value written by something else, such as a `SET` of
    /// a forged lock: it must not hold a key for years).
    pub fn deadline_ahead_max_ms(&self) -> i64 {
        self.max_ttl_ms.high_water().saturating_add(self.clock_jump_tolerance_ms.get())
    }

    /// The protections the settings turn off, with the quarantine length
    /// in force (`lock.quarantine-ms`, auto resolved).
    pub fn protections_off(&self, quarantine_length_ms: i64) -> Vec<Protection> {
        Protection::ALL
            .into_iter()
            .filter(|p| match p {
                Protection::StartupQuarantine => quarantine_length_ms == 0,
                Protection::FailoverQuarantine => {
                    quarantine_length_ms == 0 || !Settings::flag(&self.failover_quarantine)
                }
                Protection::RemovalQuarantine => !Settings::flag(&self.removal_quarantine),
                Protection::ClockJump => self.clock_jump_tolerance_ms.get() == 0,
            })
            .collect()
    }

    pub fn eviction_mode(&self) -> EvictionMode {
        *self.eviction_mode.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub fn flag(flag: &AtomicBool) -> bool {
        flag.load(Ordering::Relaxed)
    }
}

impl Default for Settings {
    fn default() -> Self {
        Settings::new()
    }
}
