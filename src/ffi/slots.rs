//! Slot imports on a cluster node, and the timer that writes quarantine
//! records into the AOF and the replication stream.
//!
//! Redis 7.0 and 8.2 tell a module nothing when its node takes a slot: no
//! server event, and no keyspace event for a slot whose locks were all
//! released. The node learns it from the commands that do it
//! (`CLUSTER SETSLOT ... IMPORTING | NODE | STABLE`, `CLUSTER ADDSLOTS`,
//! `ADDSLOTSRANGE`), through a command filter registered in cluster mode
//! only (a standalone node pays nothing). A filter runs before the command
//! and cannot write: what it starts is written from a 0 ms timer, created
//! on a context the module keeps for that, which also checks with
//! `CLUSTER NODES` that an import the filter saw start did start.

use std::ffi::c_void;
use std::ptr;
use std::slice;
use std::sync::atomic::{AtomicBool, AtomicPtr, Ordering};

use redis_module::raw;

use super::api::{api, string_bytes, RawCtx};
use super::call::Call;
use super::handlers::handlers;
use crate::core::imports::{slot_change, SlotChange};

/// A context kept for the life of the module, detached from any client: the
/// filter has none, and timers need one.
static KEPT_CTX: AtomicPtr<raw::RedisModuleCtx> = AtomicPtr::new(ptr::null_mut());
/// Set while a records timer is pending: one is enough.
static TIMER_ARMED: AtomicBool = AtomicBool::new(false);

/// At load: keeps a detached context, and in cluster mode registers the
/// filter that sees the commands that move slots to this node.
// Raw pointers come from Redis itself and are only passed back to it.
#[allow(clippy::not_unsafe_ptr_arg_deref)]
pub fn watch_slots(ctx: RawCtx, in_cluster: bool) -> Result<(), String> {
    // SAFETY: called from OnLoad with its live context; the detached
    // context lives until the server exits (the module cannot be
    // unloaded: it registers a data type).
    unsafe {
        let kept = api(raw::RedisModule_GetDetachedThreadSafeContext)(ctx);
        KEPT_CTX.store(kept, Ordering::Relaxed);
        if in_cluster {
            let filter = api(raw::RedisModule_RegisterCommandFilter)(
                ctx,
                Some(slot_filter),
                raw::REDISMODULE_CMDFILTER_NOSELF as i32,
            );
            if filter.is_null() {
                return Err("cannot register the command filter that sees slot imports".into());
            }
        }
    }
    Ok(())
}

/// Arms the 0 ms timer that calls the `records_due` handler, unless one is
/// pending. Main thread only (a filter, a callback, a command).
pub fn schedule_records() {
    let ctx = KEPT_CTX.load(Ordering::Relaxed);
    if ctx.is_null() || TIMER_ARMED.swap(true, Ordering::Relaxed) {
        return;
    }
    // SAFETY: the kept context is live; the timer carries no data.
    unsafe {
        api(raw::RedisModule_CreateTimer)(ctx, 0, Some(records_timer), ptr::null_mut());
    }
}

extern "C" fn records_timer(ctx: RawCtx, _data: *mut c_void) {
    TIMER_ARMED.store(false, Ordering::Relaxed);
    if let Some(h) = handlers() {
        let call = Call::bare(ctx);
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| (h.records_due)(&call)));
    }
}

/// Runs before every command of every client: cheap for any command but
/// `CLUSTER` (its name's length and first byte are checked first).
extern "C" fn slot_filter(fctx: *mut raw::RedisModuleCommandFilterCtx) {
    // SAFETY: `fctx` is the live filter context Redis passed; the argument
    // strings it returns live while the command does, past this call.
    let argv: Vec<&[u8]> = unsafe {
        let count = api(raw::RedisModule_CommandFilterArgsCount)(fctx);
        if count < 3 {
            return;
        }
        let name = string_bytes(api(raw::RedisModule_CommandFilterArgGet)(fctx, 0));
        if name.len() != 7 || !name.eq_ignore_ascii_case(b"cluster") {
            return;
        }
        (0..count).map(|i| string_bytes(api(raw::RedisModule_CommandFilterArgGet)(fctx, i))).collect()
    };
    let Some(change) = slot_change(&argv, my_id()) else { return };
    if let Some(h) = handlers() {
        let _ = std::panic::catch_unwind(|| (h.slots_changed)(&change, true));
    }
}

/// This node's cluster id (40 bytes, not terminated), or nothing.
fn my_id() -> &'static [u8] {
    // SAFETY: GetMyClusterID returns the node's name, which lives as long
    // as the node, or NULL outside cluster mode.
    unsafe {
        let id = api(raw::RedisModule_GetMyClusterID)();
        if id.is_null() {
            return &[];
        }
        slice::from_raw_parts(id.cast::<u8>(), 40)
    }
}

/// The slots this node is importing now, as the `myself` line of
/// `CLUSTER NODES` shows them (`[<slot>-<-<node>]`).
pub fn importing_slots(call: &Call<'_>) -> Vec<u16> {
    let Some(nodes) = call.call_text(c"CLUSTER", c"NODES") else { return Vec::new() };
    let Some(me) = nodes.lines().find(|line| line.contains("myself")) else { return Vec::new() };
    me.split_whitespace()
        .filter_map(|field| field.strip_prefix('[')?.split_once("-<-")?.0.parse::<u16>().ok())
        .collect()
}

/// Valkey's atomic slot migration event data
/// (`ValkeyModuleAtomicSlotMigrationInfo`, version 1, Valkey 9's
/// `valkeymodule.h`): the slot ranges of the job.
#[repr(C)]
struct SlotRange {
    start: i32,
    end: i32,
}

#[repr(C)]
struct MigrationInfo {
    version: u64,
    job_name: [u8; 41],
    slot_ranges: *const SlotRange,
    num_slot_ranges: u32,
}

/// The slots of a Valkey atomic slot migration event's data.
pub(super) fn migration_slots(data: *mut c_void) -> Vec<u16> {
    if data.is_null() {
        return Vec::new();
    }
    // SAFETY: Valkey passes a live ValkeyModuleAtomicSlotMigrationInfo
    // (version 1 layout: the event's dataver is 1) for the callback's
    // duration; its ranges array has num_slot_ranges entries.
    let ranges = unsafe {
        let info = &*data.cast::<MigrationInfo>();
        if info.slot_ranges.is_null() {
            return Vec::new();
        }
        slice::from_raw_parts(info.slot_ranges, info.num_slot_ranges as usize)
    };
    let mut slots: Vec<u16> = ranges
        .iter()
        .flat_map(|r| r.start.max(0)..=r.end.min(i32::from(lock_protocol::slot::SLOTS) - 1))
        .filter_map(|s| u16::try_from(s).ok())
        .collect();
    slots.dedup();
    slots
}

/// A Valkey atomic import started, ended or was given up.
pub(super) fn migration_changed(change: SlotChange) {
    if let Some(h) = handlers() {
        let _ = std::panic::catch_unwind(|| (h.slots_changed)(&change, false));
    }
}
