//! `lock`: a Redis module for distributed locks.
//!
//! Where things live, each layer importing only the ones below it:
//! - `commands/`: one file per command (its definition, handler and parser
//!   or a pointer to the shared one), and the list this file registers;
//! - `waiting.rs`: WAIT, the Redis side (blocking, timers, events); the
//!   policy is `core/src/waiting.rs`;
//! - `grants.rs`: a grant's outcome as a reply and a counter, in one place;
//! - `keystate.rs`: read a lock key, run a transaction, store + replicate;
//! - `node.rs`: the node's state as one object (`NODE`): settings, counters,
//!   fencing counter, quarantines, eviction guard, waiting state;
//! - `ffi/`: every `unsafe` call into the Redis module API (a leaf: the
//!   callbacks it needs are handed to it here, in `init`);
//! - `core`: the pure lock logic (state machine, stored forms, fencing
//!   counter, queues and the waiting policy, what the node may have
//!   forgotten, argument parsing), the crate `lock-core` in `core/`,
//!   re-exported here. No Redis import; unit- and property-tested;
//! - `clock.rs`, `config.rs`, `stats.rs`, `errors.rs`: the module clock,
//!   the settings, the counters, every error reply;
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
pub use lock_core as core;
pub mod errors;
pub mod ffi;
pub mod grants;
pub mod keystate;
pub mod node;
pub mod stats;
pub mod waiting;

/// The workspace version (Cargo.toml's `[workspace.package]`), as `INFO
/// lock` shows it (`lock_version`).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The same version as one integer, as `MODULE LIST` shows it (`ver`):
/// major * 10000 + minor * 100 + patch, so 1.2.3 is 10203 and 0.1.0 is 100.
pub const MODULE_VERSION: i32 = {
    let (major, minor, patch) = (
        version_part(env!("CARGO_PKG_VERSION_MAJOR")),
        version_part(env!("CARGO_PKG_VERSION_MINOR")),
        version_part(env!("CARGO_PKG_VERSION_PATCH")),
    );
    // A minor or patch of 100 or more would run into the next part.
    assert!(minor < 100 && patch < 100 && major < 21474, "version parts out of range");
    major * 10000 + minor * 100 + patch
};

/// The decimal number `digits` (at compile time; a non-digit fails the
/// build).
const fn version_part(digits: &str) -> i32 {
    let mut rest = digits.as_bytes();
    let mut value = 0i32;
    while let [digit, tail @ ..] = rest {
        assert!(digit.is_ascii_digit(), "a version part is not a number");
        value = value * 10 + (*digit - b'0') as i32;
        rest = tail;
    }
    value
}

#[cfg(not(test))]
mod module {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Mutex;

    use redis_module::configuration::{ConfigurationContext, ConfigurationFlags};
    use redis_module::{redis_module, Context, RedisString, Status};

    use crate::clock;
    use crate::commands;
    use crate::config::{BoundedI64, EvictionMode, Protection};
    use crate::core::ledger::Ledger;
    use crate::ffi::{self, Call, CommandDef, InfoValue, LEDGER_TYPE};
    use crate::node::{StartCause, NODE};

    fn info_fields() -> Vec<(&'static str, InfoValue)> {
        use InfoValue::{Line, Signed, Text, Unsigned};
        let node = &NODE;
        let now = clock::now_ms();
        let (s, st) = (&node.settings, &node.stats);
        let flag = |f: &AtomicBool| Unsigned(u64::from(f.load(Ordering::Relaxed)));
        let quarantine = node.quarantine(now);
        let removal = node.removal_quarantines(now);
        let evicting = node.evicting_policy();
        let mut fields = vec![
            ("version", Text(crate::VERSION)),
            ("grants", Unsigned(st.grants.get())),
            ("renewals", Unsigned(st.renewals.get())),
            ("contended", Unsigned(st.contended.get())),
            ("releases", Unsigned(st.releases.get())),
            ("extensions", Unsigned(st.extensions.get())),
            ("expiries", Unsigned(st.expiries.get())),
            ("rejected", Unsigned(st.rejected.get())),
            ("waits_started", Unsigned(st.waits_started.get())),
            ("waits_served", Unsigned(st.waits_served.get())),
            ("waits_timed_out", Unsigned(st.waits_timed_out.get())),
            ("waits_abandoned", Unsigned(st.waits_abandoned.get())),
            ("waits_failed", Unsigned(st.waits_failed.get())),
            ("waiters", Unsigned(node.waiting_now() as u64)),
            ("wait_time_ms", Line(times(st.wait_times()))),
            ("hold_time_ms", Line(times(st.hold_times()))),
            ("quarantine", Unsigned(u64::from(quarantine.is_some()))),
            ("quarantine_ms_left", Signed(quarantine.map_or(0, |(_, left)| left))),
            ("quarantine_reason", Text(quarantine.map_or("none", |(reason, _)| reason.name()))),
            ("quarantine_length_ms", Signed(node.quarantine_length_ms())),
            ("quarantined", Unsigned(st.quarantined.get())),
            ("quarantined_keys", Unsigned(removal.0 as u64)),
            ("quarantined_dbs", Unsigned(removal.1 as u64)),
            ("removal_quarantine_ms_left", Signed(removal.2)),
            ("slot_waits", Unsigned(node.slot_waits(now) as u64)),
            ("locks_removed", Unsigned(st.locks_removed.get())),
            ("locks_evicted", Unsigned(st.locks_evicted.get())),
            ("db_quarantines", Unsigned(st.db_quarantines.get())),
            ("revoked", Unsigned(st.revoked.get())),
            ("evictable", Unsigned(u64::from(evicting.is_some()))),
            ("maxmemory_policy_evicting", Line(evicting.unwrap_or_else(|| "none".into()))),
            ("refused_evictable", Unsigned(st.refused_evictable.get())),
            ("restart_grace_ms", Signed(node.restart_grace_ms(now))),
            ("last_fencing_token", Unsigned(node.last_fence())),
            ("max_ttl_ms", Signed(s.max_ttl_ms.get())),
            ("clock_jump_tolerance_ms", Signed(s.clock_jump_tolerance_ms.get())),
            ("max_waiters", Signed(s.max_waiters.get())),
            ("expiry_delay_ms", Signed(s.expiry_delay_ms.get())),
            ("max_renew_keys", Signed(s.max_renew_keys.get())),
            ("max_multi_keys", Signed(s.max_multi_keys.get())),
            ("quarantine_ms", Signed(s.quarantine_ms.get())),
            ("failover_quarantine", flag(&s.failover_quarantine)),
            ("publish_freed", flag(&s.publish_freed)),
            ("removal_quarantine", flag(&s.removal_quarantine)),
            ("eviction_mode", Text(s.eviction_mode().name())),
            ("wall_clock_offset_ms", Signed(clock::wall_offset_ms())),
            ("quarantines_ended", Unsigned(st.quarantines_ended.get())),
        ];
        // Loud when a setting turns a protection off: one field per
        // protection (1 while on), and the list of those off.
        let off = node.protections_off();
        for protection in Protection::ALL {
            fields.push((protection.field(), Unsigned(u64::from(!off.contains(&protection)))));
        }
        let names: Vec<&str> = off.iter().map(|p| p.name()).collect();
        let summary = if names.is_empty() { "none".to_string() } else { names.join(",") };
        fields.push(("protections_off", Line(summary)));
        fields
    }

    /// A histogram of durations as one INFO line, in the `key=value,...`
    /// form Redis uses for `db0:keys=...`.
    fn times(s: crate::core::histogram::Summary) -> String {
        format!(
            "count={},sum={},p50={},p90={},p99={},max={}",
            s.count, s.sum_ms, s.p50_ms, s.p90_ms, s.p99_ms, s.max_ms
        )
    }

    /// Where Redis calls the module back: the upper layers, handed to the
    /// FFI so that it never imports them. Each callback is an edge: it reads
    /// the clock once.
    fn handlers() -> ffi::Handlers {
        use crate::waiting;
        ffi::Handlers {
            key_changed: waiting::on_key_changed,
            db_flushed: waiting::on_db_flushed,
            dbs_swapped: waiting::on_dbs_swapped,
            keys_dropped: waiting::recheck_waiters,
            keys_imported: |call| {
                NODE.note_imported_locks(clock::now_ms());
                commands::watch_for_removal(call, &NODE);
            },
            promoted: |call| {
                NODE.on_promoted(clock::now_ms());
                commands::watch_for_removal(call, &NODE);
                ffi::schedule_records();
            },
            loaded_from_disk: |call| {
                if let Some(cause) = NODE.on_loaded_from_disk(clock::now_ms()) {
                    log_start_cause(cause);
                }
                commands::watch_for_removal(call, &NODE);
                ffi::schedule_records();
            },
            slots_changed: |change, check| {
                NODE.slots_changed(change, check, clock::now_ms());
                ffi::schedule_records();
            },
            records_due: |call| commands::quarantined::write_records(call, &NODE),
            ledger_save: || NODE.ledger(clock::now_ms()).encode(),
            ledger_load: |bytes| match Ledger::decode(bytes) {
                Ok(ledger) => NODE.restore_ledger(ledger, clock::now_ms()),
                Err(e) => redis_module::logging::log_warning(format!(
                    "lock: the lock ledger in this RDB cannot be read ({e}); it is ignored, as if absent"
                )),
            },
            config_changed: memory_policy,
            key_timer: waiting::on_key_timer,
            wait_timeout: waiting::on_wait_timeout,
            client_unblocked: waiting::on_client_unblock,
            disconnected: waiting::on_disconnect,
        }
    }

    /// Reads `maxmemory` and `maxmemory-policy` (at load and after every
    /// CONFIG SET): whether lock keys may be evicted. Says so in the log
    /// when that changes, and tells waiters when their grants are now
    /// refused.
    fn memory_policy(call: &Call<'_>) {
        let maxmemory = call.config_get(c"maxmemory").and_then(|v| v.trim().parse::<u64>().ok()).unwrap_or(0);
        let policy = call.config_get(c"maxmemory-policy").unwrap_or_default();
        if !NODE.set_memory_policy(maxmemory, &policy) {
            return;
        }
        match (NODE.evicting_policy(), NODE.settings.eviction_mode()) {
            (None, _) => redis_module::logging::log_notice(format!(
                "lock: maxmemory-policy {policy} (maxmemory {maxmemory}) cannot evict lock keys"
            )),
            (Some(p), EvictionMode::refuse) => {
                redis_module::logging::log_warning(format!(
                    "lock: maxmemory-policy {p} with maxmemory {maxmemory} can evict lock keys: new locks are \
                     refused (EVICTION) until it changes (lock.eviction-mode refuse)"
                ));
                crate::waiting::recheck_waiters(call, -1);
            }
            (Some(p), EvictionMode::quarantine) => redis_module::logging::log_warning(format!(
                "lock: maxmemory-policy {p} with maxmemory {maxmemory} can evict lock keys: a lock evicted while \
                 in force quarantines its key until its deadline (lock.eviction-mode quarantine)"
            )),
        }
    }

    /// Set once the module has loaded: settings applied before (redis.conf,
    /// the loadmodule line) are reported once, by `init`.
    static LOADED: AtomicBool = AtomicBool::new(false);

    /// After `lock.quarantine-ms` is set at run time: says what that did to
    /// the quarantine in force and to the protection.
    fn quarantine_set(_: &ConfigurationContext, _: &str, value: &'static BoundedI64) {
        if !LOADED.load(Ordering::Relaxed) {
            return;
        }
        let ended = NODE.quarantine_length_changed(clock::now_ms());
        if let Some((reason, left)) = ended {
            redis_module::logging::log_warning(format!(
                "lock: lock.quarantine-ms {} ended the {} quarantine in force ({left} ms were left)",
                value.get(),
                reason.name()
            ));
        }
        if value.get() == 0 {
            redis_module::logging::log_warning(
                "lock: lock.quarantine-ms 0 turns the start-up and failover quarantines OFF for every later \
                 start and promotion: a lock this node forgets can be granted twice. To end only the \
                 quarantine in force, on a node that forgot nothing, use LOCK.UNQUARANTINE",
            );
        }
    }

    /// After a setting that can turn a protection off is set at run time.
    fn protection_set<T>(_: &ConfigurationContext, _: &str, _: &'static T) {
        if LOADED.load(Ordering::Relaxed) {
            warn_protections_off();
        }
    }

    /// Each protection a setting turns off, at warning level.
    fn warn_protections_off() {
        for protection in NODE.protections_off() {
            redis_module::logging::log_warning(format!(
                "lock: protection OFF: {} ({})",
                protection.name(),
                protection.risk()
            ));
        }
    }

    fn removal_quarantine_set(_: &ConfigurationContext, _: &str, value: &'static AtomicBool) {
        if !LOADED.load(Ordering::Relaxed) {
            // At load nothing is quarantined yet; `init` reports the setting.
            return;
        }
        if value.load(Ordering::Relaxed) {
            redis_module::logging::log_notice("lock.removal-quarantine set to yes");
        } else {
            NODE.end_removal_quarantines();
            redis_module::logging::log_warning(
                "lock: lock.removal-quarantine no: a lock removed by another command, an eviction or a flush \
                 can now be granted twice; every key and database quarantine ended",
            );
        }
    }

    fn eviction_mode_set(_: &ConfigurationContext, _: &str, value: &'static Mutex<EvictionMode>) {
        let mode = *value.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        redis_module::logging::log_notice(format!("lock.eviction-mode set to {}", mode.name()));
    }

    /// The persistence settings that decide the start-up quarantine:
    /// `appendonly`, `appendfsync`, and `aof-use-rdb-preamble` (where an AOF
    /// rewrite keeps the node's ledger).
    fn persistence(call: &Call<'_>) -> (bool, String, bool) {
        let yes =
            |name: &std::ffi::CStr| call.config_get(name).unwrap_or_default().eq_ignore_ascii_case("yes");
        (
            yes(c"appendonly"),
            call.config_get(c"appendfsync").unwrap_or_default(),
            yes(c"aof-use-rdb-preamble"),
        )
    }

    /// Why the start is quarantined, when that is not the usual reason (the
    /// quarantine's own line says how long).
    fn log_start_cause(cause: StartCause) {
        match cause {
            StartCause::NotDurable => {}
            StartCause::NoPreamble => redis_module::logging::log_warning(
                "lock: appendfsync always, but aof-use-rdb-preamble no: an AOF rewrite then keeps neither \
                 the fencing counter nor the removal quarantines (the lock ledger travels in the RDB \
                 preamble), so every start is quarantined; set aof-use-rdb-preamble yes to start without one",
            ),
            StartCause::NoLedger => redis_module::logging::log_warning(
                "lock: the AOF held no lock ledger (its last rewrite was made by an older release of the \
                 module, or with aof-use-rdb-preamble no): counter raises and removal quarantines may be \
                 lost, so this start is quarantined; the next rewrite writes the ledger",
            ),
        }
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
        clock::start();
        let category = match ffi::add_acl_category(ctx.ctx, commands::ACL_CATEGORY) {
            Ok(added) => added.then_some(commands::ACL_CATEGORY),
            Err(e) => {
                // Another module took the name: the commands keep their
                // other categories.
                ctx.log_warning(&format!("lock: {e}; the commands are in no @lock category"));
                None
            }
        };
        for &(command, entry) in commands::ALL {
            let def = CommandDef {
                name: command.name,
                entry,
                flags: command.flags,
                acl: command.acl,
                arity: command.arity,
                key_flags: command.key_flags,
                keys: command.keys,
                summary: command.summary,
                args: command.args,
                complexity: command.complexity,
                since: commands::SINCE,
            };
            if let Err(e) = ffi::register_command(ctx.ctx, &def, category) {
                ctx.log_warning(&format!("lock: {e}"));
                return Status::Err;
            }
        }
        let call = Call::bare(ctx.ctx);
        let (appendonly, appendfsync, preamble) = persistence(&call);
        match NODE.quarantine_at_start(appendonly, &appendfsync, preamble, clock::now_ms()) {
            None => ctx.log_notice(
                "lock: appendonly yes + appendfsync always + aof-use-rdb-preamble yes: no start-up \
                 quarantine, provided the AOF brings the node's lock ledger back (checked when it is loaded)",
            ),
            Some(cause) => log_start_cause(cause),
        }
        ffi::set_handlers(handlers());
        memory_policy(&call);
        // Locks can arrive by `MIGRATE` (the `restore` event: a cluster's
        // resharding, or an operator's move between plain masters) before
        // this node grants any: see every change to a key from the start.
        // The lock commands fire no keyspace events, so a lock node pays
        // nothing for it.
        commands::watch_for_removal(&call, &NODE);
        if let Err(e) = ffi::subscribe_server_events(ctx.ctx) {
            ctx.log_warning(&format!("lock: {e}"));
            return Status::Err;
        }
        // A cluster node learns of the slots it takes from the commands that
        // move them; a quarantine started at load is written once it ends.
        if let Err(e) = ffi::watch_slots(ctx.ctx, call.in_cluster()) {
            ctx.log_warning(&format!("lock: {e}"));
            return Status::Err;
        }
        ffi::schedule_records();
        ffi::set_module_options(ctx.ctx);
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
            NODE.settings.max_ttl_ms.get(),
            NODE.settings.clock_jump_tolerance_ms.get()
        ));
        warn_protections_off();
        if !ffi::has_defrag_callbacks() {
            // The redis-module crate logs it at warning level on servers
            // before Redis 8; nothing is missing.
            ctx.log_notice(
                "lock: about 'Skip register defrag callbacks' above: this server has no defrag \
                 callbacks API, and the module keeps no data that needs defragmenting; nothing to do",
            );
        }
        LOADED.store(true, Ordering::Relaxed);
        Status::Ok
    }

    redis_module! {
        name: "lock",
        version: crate::MODULE_VERSION,
        allocator: (redis_module::alloc::RedisAlloc, redis_module::alloc::RedisAlloc),
        data_types: [LEDGER_TYPE],
        init: init,
        configurations: [
            i64: [
                [NODE.settings.max_ttl_ms.name(), &NODE.settings.max_ttl_ms, NODE.settings.max_ttl_ms.default, 0, i64::MAX, ConfigurationFlags::DEFAULT, None],
                [NODE.settings.clock_jump_tolerance_ms.name(), &NODE.settings.clock_jump_tolerance_ms, NODE.settings.clock_jump_tolerance_ms.default, 0, i64::MAX, ConfigurationFlags::DEFAULT, Some(Box::new(protection_set))],
                [NODE.settings.max_waiters.name(), &NODE.settings.max_waiters, NODE.settings.max_waiters.default, 0, i64::MAX, ConfigurationFlags::DEFAULT, None],
                [NODE.settings.quarantine_ms.name(), &NODE.settings.quarantine_ms, NODE.settings.quarantine_ms.default, i64::MIN, i64::MAX, ConfigurationFlags::DEFAULT, Some(Box::new(quarantine_set))],
                [NODE.settings.expiry_delay_ms.name(), &NODE.settings.expiry_delay_ms, NODE.settings.expiry_delay_ms.default, 0, i64::MAX, ConfigurationFlags::DEFAULT, None],
                [NODE.settings.max_renew_keys.name(), &NODE.settings.max_renew_keys, NODE.settings.max_renew_keys.default, 0, i64::MAX, ConfigurationFlags::DEFAULT, None],
                [NODE.settings.max_multi_keys.name(), &NODE.settings.max_multi_keys, NODE.settings.max_multi_keys.default, 0, i64::MAX, ConfigurationFlags::DEFAULT, None],
            ],
            string: [],
            bool: [
                ["failover-quarantine", &NODE.settings.failover_quarantine, true, ConfigurationFlags::DEFAULT, Some(Box::new(protection_set))],
                ["publish-freed", &NODE.settings.publish_freed, false, ConfigurationFlags::DEFAULT, None],
                ["removal-quarantine", &NODE.settings.removal_quarantine, true, ConfigurationFlags::DEFAULT, Some(Box::new(removal_quarantine_set))],
            ],
            enum: [
                ["eviction-mode", &NODE.settings.eviction_mode, EvictionMode::refuse, ConfigurationFlags::DEFAULT, Some(Box::new(eviction_mode_set))],
            ],
            module_args_as_configuration: true,
        ]
    }
}

#[cfg(test)]
mod tests {
    /// MODULE LIST's integer is the version's three parts, two digits each
    /// below the major.
    #[test]
    fn module_version_is_the_version_as_one_integer() {
        let parts: Vec<i32> = super::VERSION.split('.').map(|p| p.parse().unwrap()).collect();
        assert_eq!(super::MODULE_VERSION, parts[0] * 10000 + parts[1] * 100 + parts[2]);
        assert_eq!(super::version_part("0"), 0);
        assert_eq!(super::version_part("42"), 42);
    }
}
