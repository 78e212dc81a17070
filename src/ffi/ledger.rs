//! The node's ledger in every RDB: module aux data. Redis hands a module's
//! aux data only to a data type, so the module registers one, `lockledgr`,
//! that holds no key: its only use is the hook that writes the ledger
//! before the keys of every RDB (`SAVE`, `BGSAVE`, a replica's full sync,
//! the RDB preamble of a rewritten AOF) and reads it back before them.
//!
//! What that costs (docs/operations.md, "Persistence"): an RDB or AOF
//! written by a node with the module needs the module to be read (as an AOF
//! with `LOCK.FENCE` in it already did), and `MODULE UNLOAD` is refused, as
//! for every module that registers a data type. The ledger is one string
//! (`core::ledger`'s form): a corrupt or newer one is read whole and then
//! ignored with a warning, so the load goes on and the node counts as having
//! no ledger (an `always` start is then quarantined).

use std::ffi::{c_char, c_int};

use redis_module::native_types::RedisType;
use redis_module::raw;

use super::api::{api, RawCtx};
use super::handlers::handlers;

/// The module's options: its aux loader checks every read
/// (`REDISMODULE_OPTIONS_HANDLE_IO_ERRORS`), so replicas may load a full
/// sync straight from the socket (`repl-diskless-load`), which Redis allows
/// a module with a data type only then.
pub(super) const MODULE_OPTIONS: c_int = raw::REDISMODULE_OPTIONS_HANDLE_IO_ERRORS as c_int;

/// Sets [`MODULE_OPTIONS`] (at load).
// Raw pointers come from Redis itself and are only passed back to it.
#[allow(clippy::not_unsafe_ptr_arg_deref)]
pub fn set_module_options(ctx: RawCtx) {
    // SAFETY: called from OnLoad with its live context.
    unsafe { api(raw::RedisModule_SetModuleOptions)(ctx, MODULE_OPTIONS) };
}

/// The data type's encoding version; the ledger's own form is versioned
/// inside the string it saves.
const ENCODING_VERSION: i32 = 1;

pub static LEDGER_TYPE: RedisType = RedisType::new(
    "lockledgr",
    ENCODING_VERSION,
    raw::RedisModuleTypeMethods {
        version: raw::REDISMODULE_TYPE_METHOD_VERSION as u64,
        rdb_load: None,
        rdb_save: None,
        aof_rewrite: None,
        free: None,
        mem_usage: None,
        digest: None,
        aux_load: Some(aux_load),
        aux_save: Some(aux_save),
        // Written before the keys, so that the counter and the quarantines
        // are in place when the first key loads.
        aux_save_triggers: raw::REDISMODULE_AUX_BEFORE_RDB as c_int,
        // Redis 7.2+ would use it instead of aux_save; it could leave the
        // ledger out when empty, but an `always` start must tell "no
        // ledger" (an older writer) from an empty one, so it is always
        // written.
        aux_save2: None,
        free_effort: None,
        unlink: None,
        copy: None,
        defrag: None,
        copy2: None,
        free_effort2: None,
        mem_usage2: None,
        unlink2: None,
    },
);

/// Runs in the process that writes the RDB (a fork child for BGSAVE, a
/// rewrite and a full sync): it sees the node as of the fork.
extern "C" fn aux_save(io: *mut raw::RedisModuleIO, when: c_int) {
    if when != raw::REDISMODULE_AUX_BEFORE_RDB as c_int {
        return;
    }
    let bytes =
        handlers().and_then(|h| std::panic::catch_unwind(|| (h.ledger_save)()).ok()).unwrap_or_default();
    // SAFETY: `io` is the live RDB stream Redis passed; the buffer is copied.
    unsafe { api(raw::RedisModule_SaveStringBuffer)(io, bytes.as_ptr().cast::<c_char>(), bytes.len()) };
}

extern "C" fn aux_load(io: *mut raw::RedisModuleIO, _encver: c_int, when: c_int) -> c_int {
    if when != raw::REDISMODULE_AUX_BEFORE_RDB as c_int {
        return raw::REDISMODULE_OK as c_int;
    }
    let mut len: usize = 0;
    // SAFETY: `io` is the live RDB stream; LoadStringBuffer returns a buffer
    // allocated by Redis (freed below) or NULL with the IO error flag set.
    let buffer = unsafe { api(raw::RedisModule_LoadStringBuffer)(io, &mut len) };
    // SAFETY: as above.
    if buffer.is_null() || unsafe { api(raw::RedisModule_IsIOError)(io) } != 0 {
        return raw::REDISMODULE_ERR as c_int;
    }
    // SAFETY: Redis returned `len` readable bytes at `buffer`.
    let bytes = unsafe { std::slice::from_raw_parts(buffer.cast::<u8>(), len) };
    if let Some(h) = handlers() {
        let _ = std::panic::catch_unwind(|| (h.ledger_load)(bytes));
    }
    // SAFETY: the buffer came from LoadStringBuffer, freed once here.
    unsafe { api(raw::RedisModule_Free)(buffer.cast()) };
    raw::REDISMODULE_OK as c_int
}
