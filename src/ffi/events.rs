//! Keyspace and server events: how the module learns that a lock was freed
//! behind its back (DEL, an overwrite, Redis' own expiry, eviction, FLUSHDB,
//! SWAPDB, a slot migrated away on Valkey 9) and that the node was promoted.
//!
//! Keyspace events are subscribed to at load ([`watch_keys`], unless
//! `lock.removal-quarantine no`): Redis builds a module context for every
//! event a module subscribes to (about 1,000 instructions per `SET` by
//! another command, measured with callgrind); the lock commands fire none,
//! so a lock node pays nothing. Redis 7.0 cannot unsubscribe, so the
//! subscription stays.

use std::ffi::{c_char, c_int, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};

use redis_module::raw;

use super::api::{api, RawCtx, TimerId};
use super::block::with_key_context;
use super::call::Call;
use super::handlers::handlers;
use crate::core::imports::SlotChange;
use crate::core::queue::KeyId;

static WATCHING: AtomicBool = AtomicBool::new(false);

/// Subscribes to every keyspace event of every type (not key misses nor
/// new keys): each command that removes or changes a key (DEL, RENAME,
/// MOVE, RESTORE, SET, the *STORE commands of every type, EXPIRE, ...),
/// Redis' own expiry, and eviction. The module's own writes fire none.
/// Idempotent.
pub fn watch_keys(call: &Call<'_>) -> Result<(), String> {
    if WATCHING.load(Ordering::Relaxed) {
        return Ok(());
    }
    let types = raw::REDISMODULE_NOTIFY_ALL;
    // SAFETY: ctx is live; the callback is an extern "C" function of this
    // module that lives forever.
    let status = unsafe {
        api(raw::RedisModule_SubscribeToKeyspaceEvents)(call.ctx, types as c_int, Some(key_event_callback))
    };
    if status != raw::REDISMODULE_OK as c_int {
        return Err("cannot subscribe to keyspace events".into());
    }
    WATCHING.store(true, Ordering::Relaxed);
    Ok(())
}

impl Call<'_> {
    /// Inside a keyspace notification: has the `key_timer` handler run for
    /// `key` as soon as the module may write. On Redis 7.2+ that is a
    /// post-notification job, right after the command that fired the event
    /// (and replicated with it); on 7.0, where writing from a notification
    /// is unsafe and there are no such jobs, a 0 ms timer. Returns the
    /// timer's id when a timer was used.
    pub fn after_notification(&self, key: KeyId) -> Option<TimerId> {
        // SAFETY: the API table is written once at load and only read after.
        let add_job = unsafe { raw::RedisModule_AddPostNotificationJob };
        let Some(add_job) = add_job else {
            return Some(self.start_timer(0, key));
        };
        let data = Box::into_raw(Box::new(key)).cast::<c_void>();
        // SAFETY: ctx is the live notification context; `data` is a leaked
        // Box<KeyId> that Redis hands to exactly one of the job or the free
        // callback, which turn it back into a Box.
        let status = unsafe { add_job(self.ctx, Some(post_job_callback), data, Some(free_key_box)) };
        if status == raw::REDISMODULE_OK as c_int {
            None
        } else {
            // SAFETY: Redis refused the job and did not take `data`.
            let key = unsafe { Box::from_raw(data.cast::<KeyId>()) };
            Some(self.start_timer(0, *key))
        }
    }
}

extern "C" fn post_job_callback(ctx: RawCtx, data: *mut c_void) {
    if data.is_null() {
        return;
    }
    // SAFETY: `data` is the Box<KeyId> given to AddPostNotificationJob;
    // Redis calls the free callback for it afterwards, so it is only
    // borrowed here.
    let key = unsafe { &*data.cast::<KeyId>() };
    if let Some(h) = handlers() {
        with_key_context(ctx, key, |call| (h.key_timer)(call, key));
    }
}

extern "C" fn free_key_box(data: *mut c_void) {
    if !data.is_null() {
        // SAFETY: the Box<KeyId> leaked in `after_notification`.
        drop(unsafe { Box::from_raw(data.cast::<KeyId>()) });
    }
}

extern "C" fn key_event_callback(
    ctx: RawCtx,
    _type: c_int,
    event: *const c_char,
    key: *mut raw::RedisModuleString,
) -> c_int {
    if let Some(h) = handlers() {
        let event: &[u8] = if event.is_null() {
            b""
        } else {
            // SAFETY: Redis passes the event's name as a NUL-terminated
            // string that lives for the duration of the notification.
            unsafe { std::ffi::CStr::from_ptr(event) }.to_bytes()
        };
        let call = Call::on_key(ctx, key);
        let _ = catch_unwind(AssertUnwindSafe(|| (h.key_changed)(&call, event)));
    }
    raw::REDISMODULE_OK as c_int
}

extern "C" fn flush_callback(ctx: RawCtx, _eid: raw::RedisModuleEvent, subevent: u64, data: *mut c_void) {
    if subevent != raw::REDISMODULE_SUBEVENT_FLUSHDB_END || data.is_null() {
        return;
    }
    // SAFETY: for FlushDB events Redis passes a RedisModuleFlushInfo.
    let db = unsafe { (*data.cast::<raw::RedisModuleFlushInfo>()).dbnum };
    if let Some(h) = handlers() {
        let call = Call::bare(ctx);
        let _ = catch_unwind(AssertUnwindSafe(|| (h.db_flushed)(&call, db)));
    }
}

extern "C" fn swapdb_callback(ctx: RawCtx, _eid: raw::RedisModuleEvent, _subevent: u64, data: *mut c_void) {
    if data.is_null() {
        return;
    }
    // SAFETY: for SwapDB events Redis passes a RedisModuleSwapDbInfo.
    let info = unsafe { &*data.cast::<raw::RedisModuleSwapDbInfo>() };
    if let Some(h) = handlers() {
        let call = Call::bare(ctx);
        let _ =
            catch_unwind(AssertUnwindSafe(|| (h.dbs_swapped)(&call, info.dbnum_first, info.dbnum_second)));
    }
}

extern "C" fn role_callback(ctx: RawCtx, _eid: raw::RedisModuleEvent, subevent: u64, _data: *mut c_void) {
    if subevent == raw::REDISMODULE_EVENT_REPLROLECHANGED_NOW_MASTER {
        if let Some(h) = handlers() {
            let call = Call::bare(ctx);
            let _ = catch_unwind(AssertUnwindSafe(|| (h.promoted)(&call)));
        }
    }
}

extern "C" fn config_callback(ctx: RawCtx, _eid: raw::RedisModuleEvent, _subevent: u64, _data: *mut c_void) {
    if let Some(h) = handlers() {
        let call = Call::bare(ctx);
        let _ = catch_unwind(AssertUnwindSafe(|| (h.config_changed)(&call)));
    }
}

/// Whether the load in progress reads this node's own AOF or RDB file (not
/// a replica's full sync).
static LOADING_FROM_DISK: AtomicBool = AtomicBool::new(false);

extern "C" fn loading_callback(ctx: RawCtx, _eid: raw::RedisModuleEvent, subevent: u64, _data: *mut c_void) {
    match subevent {
        raw::REDISMODULE_SUBEVENT_LOADING_RDB_START | raw::REDISMODULE_SUBEVENT_LOADING_AOF_START => {
            LOADING_FROM_DISK.store(true, Ordering::Relaxed);
        }
        raw::REDISMODULE_SUBEVENT_LOADING_ENDED => {
            if LOADING_FROM_DISK.swap(false, Ordering::Relaxed) {
                if let Some(h) = handlers() {
                    let call = Call::bare(ctx);
                    let _ = catch_unwind(AssertUnwindSafe(|| (h.loaded_from_disk)(&call)));
                }
            }
        }
        _ => LOADING_FROM_DISK.store(false, Ordering::Relaxed),
    }
}

/// `VALKEYMODULE_OPTIONS_HANDLE_ATOMIC_SLOT_MIGRATION` (`1 << 5`) from
/// Valkey 9's `src/valkeymodule.h` (valkey PR 2593): until every loaded
/// module sets it, Valkey refuses `CLUSTER MIGRATESLOTS`. redis-module
/// 2.0.8's bindings come from redismodule.h and lack it; on Redis the bit is
/// not Valkey's, so it is set on Valkey 9 or later only.
const VALKEY_OPTIONS_HANDLE_ATOMIC_SLOT_MIGRATION: c_int = 1 << 5;
/// `VALKEYMODULE_EVENT_ATOMIC_SLOT_MIGRATION` and its subevent
/// `VALKEYMODULE_SUBEVENT_ATOMIC_SLOT_MIGRATION_EXPORT_COMPLETED`, same
/// header (Valkey 9.0+).
const VALKEY_EVENT_ATOMIC_SLOT_MIGRATION: u64 = 19;
const VALKEY_SUBEVENT_ATOMIC_SLOT_MIGRATION_IMPORT_STARTED: u64 = 0;
const VALKEY_SUBEVENT_ATOMIC_SLOT_MIGRATION_IMPORT_ABORTED: u64 = 2;
const VALKEY_SUBEVENT_ATOMIC_SLOT_MIGRATION_IMPORT_COMPLETED: u64 = 4;
const VALKEY_SUBEVENT_ATOMIC_SLOT_MIGRATION_EXPORT_COMPLETED: u64 = 5;

/// A slot export finished on this (source) node: Valkey then deletes the
/// slot's keys without keyspace events, so every key with waiters is looked
/// at again, as after a FLUSHALL (the waiters of moved keys are told to
/// retry). A slot import finished on this (target) node: its keys, locks
/// among them, arrived without keyspace events.
///
/// An import's start, end and abort also drive the slot's wait on the
/// importing master (`core::imports`); its replicas, which track the job
/// too, grant nothing.
extern "C" fn slot_migration_callback(
    ctx: RawCtx,
    _eid: raw::RedisModuleEvent,
    subevent: u64,
    data: *mut c_void,
) {
    let Some(h) = handlers() else { return };
    let call = Call::bare(ctx);
    let master = !call.is_replica();
    match subevent {
        VALKEY_SUBEVENT_ATOMIC_SLOT_MIGRATION_EXPORT_COMPLETED => {
            let _ = catch_unwind(AssertUnwindSafe(|| (h.keys_dropped)(&call, -1)));
        }
        VALKEY_SUBEVENT_ATOMIC_SLOT_MIGRATION_IMPORT_STARTED if master => {
            super::slots::migration_changed(SlotChange::ImportStarted(super::slots::migration_slots(data)));
        }
        VALKEY_SUBEVENT_ATOMIC_SLOT_MIGRATION_IMPORT_ABORTED if master => {
            super::slots::migration_changed(SlotChange::Stable(super::slots::migration_slots(data)));
        }
        VALKEY_SUBEVENT_ATOMIC_SLOT_MIGRATION_IMPORT_COMPLETED => {
            let _ = catch_unwind(AssertUnwindSafe(|| (h.keys_imported)(&call)));
            if master {
                super::slots::migration_changed(SlotChange::Owned(super::slots::migration_slots(data)));
            }
        }
        _ => {}
    }
}

/// Declares to Valkey 9+ that the module handles atomic slot migration
/// (`CLUSTER MIGRATESLOTS`): locks are ordinary strings and hashes, copied
/// to the target like any key, and waiters on the source learn when the
/// export is done.
// Raw pointers come from Redis itself and are only passed back to it.
#[allow(clippy::not_unsafe_ptr_arg_deref)]
pub fn declare_atomic_slot_migration(ctx: RawCtx) -> Result<(), String> {
    let event = raw::RedisModuleEvent { id: VALKEY_EVENT_ATOMIC_SLOT_MIGRATION, dataver: 1 };
    // SAFETY: called from OnLoad with its live context, on Valkey 9 or later
    // (the caller checks), where the option bit and the event id mean what
    // the constants above say; the callback lives forever.
    unsafe {
        // Options are set as a whole: the ledger's IO-error handling too.
        api(raw::RedisModule_SetModuleOptions)(
            ctx,
            VALKEY_OPTIONS_HANDLE_ATOMIC_SLOT_MIGRATION | super::ledger::MODULE_OPTIONS,
        );
        let status = api(raw::RedisModule_SubscribeToServerEvent)(ctx, event, Some(slot_migration_callback));
        if status != raw::REDISMODULE_OK as c_int {
            return Err("cannot subscribe to atomic slot migration events".into());
        }
    }
    Ok(())
}

type ServerEventCallback = extern "C" fn(RawCtx, raw::RedisModuleEvent, u64, *mut c_void);

/// Subscribes to flush and swapdb (locks freed behind the module's back),
/// to role changes (a promotion starts the failover quarantine), to the
/// start-up load (locks restored from disk start the restart grace) and to
/// config changes (`maxmemory-policy` decides whether lock keys may be
/// evicted).
// Raw pointers come from Redis itself and are only passed back to it.
#[allow(clippy::not_unsafe_ptr_arg_deref)]
pub fn subscribe_server_events(ctx: RawCtx) -> Result<(), String> {
    let server_events: [(u64, ServerEventCallback, &str); 5] = [
        (raw::REDISMODULE_EVENT_REPLICATION_ROLE_CHANGED, role_callback, "role-change"),
        (raw::REDISMODULE_EVENT_LOADING, loading_callback, "loading"),
        (raw::REDISMODULE_EVENT_SWAPDB, swapdb_callback, "swapdb"),
        (raw::REDISMODULE_EVENT_FLUSHDB, flush_callback, "flush"),
        (raw::REDISMODULE_EVENT_CONFIG, config_callback, "config-change"),
    ];
    for (id, callback, what) in server_events {
        let event = raw::RedisModuleEvent { id, dataver: 1 };
        // SAFETY: called from OnLoad with its live context; the callback is
        // an extern "C" function of this module with the expected signature.
        let status = unsafe { api(raw::RedisModule_SubscribeToServerEvent)(ctx, event, Some(callback)) };
        if status != raw::REDISMODULE_OK as c_int {
            return Err(format!("cannot subscribe to {what} events"));
        }
    }
    Ok(())
}
