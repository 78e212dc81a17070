//! `lock`: a Redis module for distributed locks.
//!
//! Where things live, each layer importing only the ones below it:
//! - `commands.rs`: one thin handler per command: parse, run one `core`
//!   transition through `keystate`, reply; `handoff.rs`: WAIT queues and
//!   the hand-off of a freed lock to its waiters;
//! - `keystate.rs`: read a lock key, run a transaction, store + replicate;
//! - `node.rs`: node-wide state (fencing counter, quarantine);
//! - `ffi/`: every `unsafe` call into the Redis module API (a leaf: the
//!   callbacks it needs are handed to it here, in `init`);
//! - `core/`: the pure lock logic (state machine, stored forms, fencing
//!   counter, queues, argument parsing). No Redis import; unit- and
//!   property-tested;
//! - `clock.rs`, `config.rs`, `stats.rs`, `errors.rs`: the module clock,
//!   settings, INFO counters, error replies;
//! - this file: registration and wiring only.
#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::panic,
        clippy::indexing_slicing,
        clippy::todo,
        clippy::unimplemented
    )
)]

pub mod clock;
pub mod commands;
pub mod config;
pub mod core;
pub mod errors;
pub mod ffi;
pub mod handoff;
pub mod keystate;
pub mod node;
pub mod stats;

#[cfg(not(test))]
mod module {
    use std::ffi::c_int;
    use std::sync::atomic::Ordering;

    use redis_module::configuration::ConfigurationFlags;
    use redis_module::{redis_module, Context, RedisString, Status};

    use crate::commands;
    use crate::config;
    use crate::ffi::{self, CommandDef, InfoValue, Keys, RawArgv, RawCtx};
    use crate::stats;

    macro_rules! entry {
        ($name:ident => $handler:path) => {
            extern "C" fn $name(ctx: RawCtx, argv: RawArgv, argc: c_int) -> c_int {
                ffi::dispatch(ctx, argv, argc, $handler)
            }
        };
    }
    entry!(acquire_entry => commands::acquire);
    entry!(release_entry => commands::release);
    entry!(extend_entry => commands::extend);
    entry!(enter_entry => commands::enter);
    entry!(exit_entry => commands::exit);
    entry!(fence_entry => commands::fence);
    entry!(info_entry => commands::info);
    entry!(check_entry => commands::check);
    entry!(renew_entry => commands::renew);
    entry!(shared_entry => commands::shared);
    entry!(exclusive_entry => commands::exclusive);
    entry!(semaphore_entry => commands::semaphore);
    extern "C" fn acquire_all_entry(ctx: RawCtx, argv: RawArgv, argc: c_int) -> c_int {
        ffi::dispatch_counted_keys(
            ctx,
            argv,
            argc,
            crate::core::args::MULTI_FIRST_KEY - 1,
            commands::acquire_all,
        )
    }
    entry!(release_all_entry => commands::release_all);
    entry!(waiters_entry => commands::waiters);
    entry!(revoke_entry => commands::revoke);
    entry!(contended_entry => commands::contended_keys);

    // Key-spec flags (REDISMODULE_CMD_KEY_*), see redismodule.h.
    const RO: u64 = 1 << 0;
    const RW: u64 = 1 << 1;
    const ACCESS: u64 = 1 << 4;
    const UPDATE: u64 = 1 << 5;
    const DELETE: u64 = 1 << 7;

    fn command_table() -> [CommandDef; 17] {
        [
            CommandDef {
                name: c"lock.acquire",
                entry: acquire_entry,
                flags: c"write deny-oom",
                arity: -4,
                key_flags: RW | UPDATE,
                keys: Keys::Range(1, 1),
                summary: c"Take a plain lock; reply: fencing token or nil",
            },
            CommandDef {
                name: c"lock.release",
                entry: release_entry,
                flags: c"write fast",
                arity: 3,
                key_flags: RW | DELETE,
                keys: Keys::Range(1, 1),
                summary: c"Free a lock held by token; reply: 1 or 0",
            },
            CommandDef {
                name: c"lock.extend",
                entry: extend_entry,
                flags: c"write deny-oom fast",
                arity: 4,
                key_flags: RW | UPDATE,
                keys: Keys::Range(1, 1),
                summary: c"Reset the TTL of a lock held by token; reply: 1 or 0",
            },
            CommandDef {
                name: c"lock.enter",
                entry: enter_entry,
                flags: c"write deny-oom",
                arity: -4,
                key_flags: RW | UPDATE,
                keys: Keys::Range(1, 1),
                summary: c"Enter a reentrant lock; reply: fencing token or nil",
            },
            CommandDef {
                name: c"lock.exit",
                entry: exit_entry,
                flags: c"write fast",
                arity: -3,
                key_flags: RW | UPDATE,
                keys: Keys::Range(1, 1),
                summary: c"Drop one hold of a reentrant lock; reply: holds left or nil",
            },
            CommandDef {
                name: c"lock.fence",
                entry: fence_entry,
                flags: c"write fast",
                arity: 4,
                key_flags: RW | ACCESS,
                keys: Keys::Range(1, 1),
                summary: c"Raise this node's fencing counter while holding the lock; reply: 1 or 0",
            },
            CommandDef {
                name: c"lock.info",
                entry: info_entry,
                flags: c"readonly fast",
                arity: 2,
                key_flags: RO | ACCESS,
                keys: Keys::Range(1, 1),
                summary: c"Describe the lock at key; reply: field/value array or nil",
            },
            CommandDef {
                name: c"lock.check",
                entry: check_entry,
                flags: c"readonly fast",
                arity: 3,
                key_flags: RO | ACCESS,
                keys: Keys::Range(1, 1),
                summary: c"Is this fencing token the current grant of key? reply: 1 or 0",
            },
            CommandDef {
                name: c"lock.renew",
                entry: renew_entry,
                flags: c"write deny-oom",
                arity: -4,
                key_flags: RW | UPDATE,
                keys: Keys::Range(3, -1),
                summary: c"Extend many locks held by one token; reply: 1 or 0 per key",
            },
            CommandDef {
                name: c"lock.shared",
                entry: shared_entry,
                flags: c"write deny-oom",
                arity: -4,
                key_flags: RW | UPDATE,
                keys: Keys::Range(1, 1),
                summary: c"Take a read (shared) hold of a read-write lock; reply: fencing token or nil",
            },
            CommandDef {
                name: c"lock.exclusive",
                entry: exclusive_entry,
                flags: c"write deny-oom",
                arity: -4,
                key_flags: RW | UPDATE,
                keys: Keys::Range(1, 1),
                summary: c"Take the write (exclusive) hold of a read-write lock; reply: fencing token or nil",
            },
            CommandDef {
                name: c"lock.semaphore",
                entry: semaphore_entry,
                flags: c"write deny-oom",
                arity: -5,
                key_flags: RW | UPDATE,
                keys: Keys::Range(1, 1),
                summary: c"Take one of a semaphore's permits; reply: fencing token or nil",
            },
            CommandDef {
                name: c"lock.macquire",
                entry: acquire_all_entry,
                flags: c"write deny-oom getkeys-api",
                arity: -5,
                key_flags: RW | UPDATE,
                keys: Keys::Counted { at: 3 },
                summary: c"Take every lock of a set or none; reply: one fencing token or nil",
            },
            CommandDef {
                name: c"lock.mrelease",
                entry: release_all_entry,
                flags: c"write",
                arity: -3,
                key_flags: RW | DELETE,
                keys: Keys::Range(2, -1),
                summary: c"Free the locks of a set held by token; reply: 1 or 0 per key",
            },
            CommandDef {
                name: c"lock.waiters",
                entry: waiters_entry,
                flags: c"readonly",
                arity: -2,
                key_flags: RO | ACCESS,
                keys: Keys::Range(1, 1),
                summary: c"List the clients waiting for a lock, head first",
            },
            CommandDef {
                name: c"lock.revoke",
                entry: revoke_entry,
                flags: c"write",
                arity: 2,
                key_flags: RW | DELETE,
                keys: Keys::Range(1, 1),
                summary: c"Free a lock without its token (an operator's deliberate release); reply: holders removed",
            },
            CommandDef {
                name: c"lock.contended",
                entry: contended_entry,
                flags: c"readonly fast",
                arity: -1,
                key_flags: 0,
                keys: Keys::None,
                summary: c"The most contended locks of this node lately",
            },
        ]
    }

    fn info_fields() -> Vec<(&'static str, InfoValue)> {
        use InfoValue::{Line, Signed, Text, Unsigned};
        let quarantine = crate::node::quarantine();
        let removal = crate::node::removal_quarantines(crate::clock::now_ms());
        let evicting = crate::node::evicting_policy();
        vec![
            ("grants", Unsigned(stats::GRANTS.get())),
            ("renewals", Unsigned(stats::RENEWALS.get())),
            ("contended", Unsigned(stats::CONTENDED.get())),
            ("releases", Unsigned(stats::RELEASES.get())),
            ("extensions", Unsigned(stats::EXTENSIONS.get())),
            ("expiries", Unsigned(stats::EXPIRIES.get())),
            ("rejected", Unsigned(stats::REJECTED.get())),
            ("waits_started", Unsigned(stats::WAITS_STARTED.get())),
            ("waits_served", Unsigned(stats::WAITS_SERVED.get())),
            ("waits_timed_out", Unsigned(stats::WAITS_TIMED_OUT.get())),
            ("waits_abandoned", Unsigned(stats::WAITS_ABANDONED.get())),
            ("waits_failed", Unsigned(stats::WAITS_FAILED.get())),
            ("waiters", Unsigned(crate::handoff::waiting_now() as u64)),
            ("wait_time_ms", Line(times(stats::wait_times()))),
            ("hold_time_ms", Line(times(stats::hold_times()))),
            ("quarantine", Unsigned(u64::from(quarantine.is_some()))),
            ("quarantine_ms_left", Signed(quarantine.map_or(0, |(_, left)| left))),
            ("quarantine_reason", Text(quarantine.map_or("none", |(reason, _)| reason.name()))),
            ("quarantined", Unsigned(stats::QUARANTINED.get())),
            ("quarantined_keys", Unsigned(removal.0 as u64)),
            ("quarantined_dbs", Unsigned(removal.1 as u64)),
            ("removal_quarantine_ms_left", Signed(removal.2)),
            ("locks_removed", Unsigned(stats::LOCKS_REMOVED.get())),
            ("locks_evicted", Unsigned(stats::LOCKS_EVICTED.get())),
            ("db_quarantines", Unsigned(stats::DB_QUARANTINES.get())),
            ("revoked", Unsigned(stats::REVOKED.get())),
            ("evictable", Unsigned(u64::from(evicting.is_some()))),
            ("maxmemory_policy_evicting", Line(evicting.clone().unwrap_or_else(|| "none".into()))),
            ("refused_evictable", Unsigned(stats::REFUSED_EVICTABLE.get())),
            ("restart_grace_ms", Signed(crate::node::restart_grace_ms(crate::clock::now_ms()))),
            ("last_fencing_token", Unsigned(crate::node::last_fence())),
            ("max_ttl_ms", Signed(config::MAX_TTL_MS.get())),
            ("clock_jump_tolerance_ms", Signed(config::CLOCK_JUMP_TOLERANCE_MS.get())),
            ("max_waiters", Signed(config::MAX_WAITERS.get())),
            ("expiry_delay_ms", Signed(config::EXPIRY_DELAY_MS.get())),
            ("max_renew_keys", Signed(config::MAX_RENEW_KEYS.get())),
            ("max_multi_keys", Signed(config::MAX_MULTI_KEYS.get())),
            ("quarantine_ms", Signed(config::QUARANTINE_MS.get())),
            ("failover_quarantine", Unsigned(u64::from(config::FAILOVER_QUARANTINE.load(Ordering::Relaxed)))),
            ("publish_freed", Unsigned(u64::from(config::PUBLISH_FREED.load(Ordering::Relaxed)))),
            ("removal_quarantine", Unsigned(u64::from(config::REMOVAL_QUARANTINE.load(Ordering::Relaxed)))),
            ("eviction_mode", Text(config::eviction_mode().name())),
            ("wall_clock_offset_ms", Signed(crate::clock::wall_offset_ms())),
        ]
    }

    /// A histogram of durations as one INFO line, in the `key=value,...`
    /// form Redis uses for `db0:keys=...`.
    fn times(s: crate::core::histogram::Summary) -> String {
        format!(
            "count={},sum={},p50={},p90={},p99={},max={}",
            s.count, s.sum_ms, s.p50_ms, s.p90_ms, s.p99_ms, s.max_ms
        )
    }

    /// The persistence settings that decide the start-up quarantine.
    fn persistence(ctx: &Context) -> (bool, String) {
        let setting = |name: &str| -> String {
            match ctx.call("CONFIG", &["GET", name][..]) {
                Ok(redis_module::RedisValue::Array(items)) => match items.get(1) {
                    Some(redis_module::RedisValue::SimpleString(v)) => v.clone(),
                    Some(redis_module::RedisValue::BulkString(v)) => v.clone(),
                    Some(redis_module::RedisValue::BulkRedisString(v)) => v.to_string_lossy(),
                    _ => String::new(),
                },
                _ => String::new(),
            }
        };
        (setting("appendonly").eq_ignore_ascii_case("yes"), setting("appendfsync"))
    }

    /// Where Redis calls the module back: the upper layers, handed to the
    /// FFI so that it never imports them.
    fn handlers() -> ffi::Handlers {
        ffi::Handlers {
            key_changed: crate::handoff::on_key_changed,
            db_flushed: crate::handoff::on_db_flushed,
            dbs_swapped: crate::handoff::on_dbs_swapped,
            keys_dropped: crate::handoff::recheck_waiters,
            keys_imported: imported,
            promoted: |call| {
                crate::node::on_promoted();
                imported(call);
            },
            loaded_from_disk: |call| {
                crate::node::on_loaded_from_disk();
                imported(call);
            },
            config_changed: memory_policy,
            key_timer: crate::handoff::on_key_timer,
            wait_timeout: crate::handoff::on_wait_timeout,
            client_unblocked: crate::handoff::on_client_unblock,
            disconnected: crate::handoff::on_disconnect,
        }
    }

    /// Locks this process did not write may now be on the node (restored
    /// from disk, kept over a promotion, imported by a slot migration):
    /// count every key as possibly holding one until the longest TTL has
    /// run out, and see every later change to a key.
    fn imported(call: &ffi::Call<'_>) {
        crate::node::note_imported_locks(crate::clock::now_ms());
        commands::watch_for_removal(call);
    }

    /// Reads `maxmemory` and `maxmemory-policy` (at load and after every
    /// CONFIG SET): whether lock keys may be evicted. Says so in the log
    /// when that changes, and tells waiters when their grants are now
    /// refused.
    fn memory_policy(call: &ffi::Call<'_>) {
        let maxmemory = call.config_get(c"maxmemory").and_then(|v| v.trim().parse::<u64>().ok()).unwrap_or(0);
        let policy = call.config_get(c"maxmemory-policy").unwrap_or_default();
        if !crate::node::set_memory_policy(maxmemory, &policy) {
            return;
        }
        match (crate::node::evicting_policy(), config::eviction_mode()) {
            (None, _) => redis_module::logging::log_notice(format!(
                "lock: maxmemory-policy {policy} (maxmemory {maxmemory}) cannot evict lock keys"
            )),
            (Some(p), config::EvictionMode::refuse) => {
                redis_module::logging::log_warning(format!(
                    "lock: maxmemory-policy {p} with maxmemory {maxmemory} can evict lock keys: new locks are \
                     refused (EVICTION) until it changes (lock.eviction-mode refuse)"
                ));
                crate::handoff::recheck_waiters(call, -1);
            }
            (Some(p), config::EvictionMode::quarantine) => redis_module::logging::log_warning(format!(
                "lock: maxmemory-policy {p} with maxmemory {maxmemory} can evict lock keys: a lock evicted while \
                 in force quarantines its key until its deadline (lock.eviction-mode quarantine)"
            )),
        }
    }

    fn removal_quarantine_set(
        _: &redis_module::configuration::ConfigurationContext,
        _: &str,
        value: &'static std::sync::atomic::AtomicBool,
    ) {
        if value.load(Ordering::Relaxed) {
            redis_module::logging::log_notice("lock.removal-quarantine set to yes");
        } else {
            crate::node::end_removal_quarantines();
            redis_module::logging::log_warning(
                "lock: lock.removal-quarantine no: a lock removed by another command, an eviction or a flush \
                 can now be granted twice; every key and database quarantine ended",
            );
        }
    }

    fn eviction_mode_set(
        _: &redis_module::configuration::ConfigurationContext,
        _: &str,
        value: &'static std::sync::Mutex<config::EvictionMode>,
    ) {
        let mode = *value.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        redis_module::logging::log_notice(format!("lock.eviction-mode set to {}", mode.name()));
    }

    /// The major version when the server is Valkey (its INFO has a
    /// `valkey_version` field; `redis_version` there says 7.2.4 for
    /// compatibility), None on Redis.
    fn valkey_major(ctx: &Context) -> Option<u32> {
        let text = match ctx.call("INFO", &["server"][..]) {
            Ok(redis_module::RedisValue::SimpleString(text)) => text,
            Ok(redis_module::RedisValue::BulkString(text)) => text,
            Ok(redis_module::RedisValue::BulkRedisString(text)) => text.to_string_lossy(),
            Ok(redis_module::RedisValue::StringBuffer(bytes)) => String::from_utf8_lossy(&bytes).into_owned(),
            _ => return None,
        };
        let version = text.lines().find_map(|line| line.strip_prefix("valkey_version:"))?;
        version.trim().split('.').next()?.parse().ok()
    }

    /// After `CONFIG SET lock.quarantine-ms`: says when that ended the
    /// quarantine in force.
    fn log_quarantine_state() {
        if crate::node::quarantine().is_none() {
            redis_module::logging::log_notice("lock: no quarantine in force now; new grants are allowed");
        }
    }

    fn init(ctx: &Context, _args: &[RedisString]) -> Status {
        std::panic::set_hook(Box::new(|info| {
            redis_module::logging::log_warning(format!("PANIC in lock module: {info}"));
        }));
        if let Some(name) = ffi::missing_api() {
            ctx.log_warning(&format!(
                "lock: this Redis lacks RedisModule_{name}; Redis 7.0 or later is required"
            ));
            return Status::Err;
        }
        crate::clock::start();
        config::on_quarantine_set(log_quarantine_state);
        for def in &command_table() {
            if let Err(e) = ffi::register_command(ctx.ctx, def) {
                ctx.log_warning(&format!("lock: {e}"));
                return Status::Err;
            }
        }
        let (appendonly, appendfsync) = persistence(ctx);
        if !crate::node::quarantine_at_start(appendonly, &appendfsync) {
            ctx.log_notice("lock: appendonly yes + appendfsync always: no start-up quarantine needed");
        }
        ffi::set_handlers(handlers());
        let call = ffi::Call::bare(ctx.ctx);
        memory_policy(&call);
        // In a cluster, locks arrive by migration (RESTORE) before this node
        // grants any: see every change to a key from the start.
        if call.in_cluster() {
            commands::watch_for_removal(&call);
        }
        if let Err(e) = ffi::subscribe_server_events(ctx.ctx) {
            ctx.log_warning(&format!("lock: {e}"));
            return Status::Err;
        }
        if let Some(major) = valkey_major(ctx).filter(|&major| major >= 9) {
            if let Err(e) = ffi::declare_atomic_slot_migration(ctx.ctx) {
                ctx.log_warning(&format!("lock: {e}"));
                return Status::Err;
            }
            ctx.log_notice(&format!("lock: Valkey {major}: declared support for CLUSTER MIGRATESLOTS"));
        }
        if let Err(e) = ffi::register_info(ctx.ctx, info_fields) {
            ctx.log_warning(&format!("lock: {e}"));
            return Status::Err;
        }
        ctx.log_notice(&format!(
            "lock: loaded; lock.max-ttl-ms={} lock.clock-jump-tolerance-ms={}",
            config::MAX_TTL_MS.get(),
            config::CLOCK_JUMP_TOLERANCE_MS.get()
        ));
        Status::Ok
    }

    redis_module! {
        name: "lock",
        version: 1,
        allocator: (redis_module::alloc::RedisAlloc, redis_module::alloc::RedisAlloc),
        data_types: [],
        init: init,
        configurations: [
            i64: [
                [config::MAX_TTL_MS.name(), &config::MAX_TTL_MS, config::MAX_TTL_MS.default, 0, i64::MAX, ConfigurationFlags::DEFAULT, None],
                [config::CLOCK_JUMP_TOLERANCE_MS.name(), &config::CLOCK_JUMP_TOLERANCE_MS, config::CLOCK_JUMP_TOLERANCE_MS.default, 0, i64::MAX, ConfigurationFlags::DEFAULT, None],
                [config::MAX_WAITERS.name(), &config::MAX_WAITERS, config::MAX_WAITERS.default, 0, i64::MAX, ConfigurationFlags::DEFAULT, None],
                [config::QUARANTINE_MS.name(), &config::QUARANTINE_MS, config::QUARANTINE_MS.default, i64::MIN, i64::MAX, ConfigurationFlags::DEFAULT, None],
                [config::EXPIRY_DELAY_MS.name(), &config::EXPIRY_DELAY_MS, config::EXPIRY_DELAY_MS.default, 0, i64::MAX, ConfigurationFlags::DEFAULT, None],
                [config::MAX_RENEW_KEYS.name(), &config::MAX_RENEW_KEYS, config::MAX_RENEW_KEYS.default, 0, i64::MAX, ConfigurationFlags::DEFAULT, None],
                [config::MAX_MULTI_KEYS.name(), &config::MAX_MULTI_KEYS, config::MAX_MULTI_KEYS.default, 0, i64::MAX, ConfigurationFlags::DEFAULT, None],
            ],
            string: [],
            bool: [
                ["failover-quarantine", &config::FAILOVER_QUARANTINE, true, ConfigurationFlags::DEFAULT, None],
                ["publish-freed", &config::PUBLISH_FREED, true, ConfigurationFlags::DEFAULT, None],
                ["removal-quarantine", &config::REMOVAL_QUARANTINE, true, ConfigurationFlags::DEFAULT, Some(Box::new(removal_quarantine_set))],
            ],
            enum: [
                ["eviction-mode", &config::EVICTION_MODE, config::EvictionMode::refuse, ConfigurationFlags::DEFAULT, Some(Box::new(eviction_mode_set))],
            ],
            module_args_as_configuration: true,
        ]
    }
}
