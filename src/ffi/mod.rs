//! Every `unsafe` of the module lives under this folder: the raw Redis
//! module API, behind safe types. It is a leaf: it imports nothing of the
//! module but the pure `core` types it carries and the error lines; the
//! upper layers hand it their callbacks ([`set_handlers`]) instead of it
//! calling up into them.
//!
//! - `call.rs`: a command or callback context ([`Call`]): the command entry,
//!   the key name, flags, replication, pub/sub;
//! - `key.rs`: an open key ([`Key`]): strings, hashes, expiry;
//! - `reply.rs`: replies ([`Reply`]);
//! - `block.rs`: blocked clients and timers;
//! - `events.rs`: keyspace and server events, post-notification jobs;
//! - `register.rs`: commands, INFO, the API check at load.
//!
//! The crate's higher-level wrappers are bypassed on the hot path on
//! purpose: they copy every argument into a retained `RedisString` and
//! allocate per replicated argument, which costs more than the lock logic.

use std::ffi::{c_char, CString};
use std::ptr;
use std::slice;
use std::sync::OnceLock;

use redis_module::raw;

use crate::core::queue::KeyId;

mod block;
mod call;
mod events;
mod key;
mod register;
mod reply;

pub use block::{unblock, TimerId, WaitResult, WaiterHandle};
pub use call::{dispatch, Call, Freed};
pub use events::{declare_atomic_slot_migration, subscribe_server_events, watch_keys};
pub use key::{Key, KeyKind};
pub use register::{missing_api, register_command, register_info, CommandDef, InfoValue};
pub use reply::{Field, Reply};

pub type RawCtx = *mut raw::RedisModuleCtx;
pub type RawArgv = *mut *mut raw::RedisModuleString;

/// The API table is filled by Redis at load; a missing entry is a Redis too
/// old for this module, which `init` refuses before any command can run.
fn api<T>(entry: Option<T>) -> T {
    match entry {
        Some(f) => f,
        None => std::process::abort(),
    }
}

/// The bytes of a Redis string; empty for a null pointer.
fn string_bytes<'a>(s: *mut raw::RedisModuleString) -> &'a [u8] {
    if s.is_null() {
        return &[];
    }
    let mut len: usize = 0;
    // SAFETY: `s` is a live Redis string; StringPtrLen returns a pointer to
    // its bytes, valid while the string lives (the caller's borrow).
    unsafe {
        let ptr = api(raw::RedisModule_StringPtrLen)(s, &mut len);
        if ptr.is_null() {
            return &[];
        }
        slice::from_raw_parts(ptr.cast::<u8>(), len)
    }
}

/// The server's wall clock in epoch ms (see `clock::wall_ms`).
pub fn server_wall_ms() -> i64 {
    // SAFETY: takes no arguments; the API table is filled before OnLoad.
    unsafe { api(raw::RedisModule_Milliseconds)() }
}

/// A Redis string owned by the module, freed on drop. Created without a
/// context, so Redis' automatic memory never frees it behind our back.
struct OwnedString(*mut raw::RedisModuleString);

impl OwnedString {
    fn new(bytes: &[u8]) -> OwnedString {
        // SAFETY: CreateString copies `bytes`; a NULL context means the
        // string lives until FreeString (Drop).
        OwnedString(unsafe {
            api(raw::RedisModule_CreateString)(ptr::null_mut(), bytes.as_ptr().cast::<c_char>(), bytes.len())
        })
    }

    fn ptr(&self) -> *mut raw::RedisModuleString {
        self.0
    }
}

impl Drop for OwnedString {
    fn drop(&mut self) {
        if !self.0.is_null() {
            // SAFETY: created by `new` with a NULL context, freed once here.
            // Redis keeps its own reference where it stored the string.
            unsafe { api(raw::RedisModule_FreeString)(ptr::null_mut(), self.0) };
        }
    }
}

/// A C string for an error line: NUL bytes and line breaks (which would cut
/// or corrupt the protocol line) become spaces.
fn c_string(text: &str) -> CString {
    let clean: Vec<u8> =
        text.bytes().map(|b| if matches!(b, 0 | b'\r' | b'\n') { b' ' } else { b }).collect();
    CString::new(clean).unwrap_or_default()
}

/// Strings the hot paths pass to Redis, created once and kept for the life
/// of the process, so that no call allocates them again.
#[derive(Clone, Copy)]
enum Constant {
    Pxat,
    Released,
    Expired,
}

fn constant(which: Constant) -> *mut raw::RedisModuleString {
    static STRINGS: OnceLock<[usize; 3]> = OnceLock::new();
    let strings = STRINGS.get_or_init(|| {
        // SAFETY: strings created with a NULL context are never freed
        // automatically; these live for the life of the process. Commands
        // run on the main thread, so sharing their refcounts is safe.
        [b"PXAT".as_slice(), b"released", b"expired"].map(|text| unsafe {
            api(raw::RedisModule_CreateString)(ptr::null_mut(), text.as_ptr().cast::<c_char>(), text.len())
                as usize
        })
    });
    let index = match which {
        Constant::Pxat => 0,
        Constant::Released => 1,
        Constant::Expired => 2,
    };
    strings.get(index).copied().unwrap_or(0) as *mut raw::RedisModuleString
}

/// What the upper layers do when Redis calls the module back: they register
/// these at load, so that this folder never imports them.
pub struct Handlers {
    /// A keyspace event on the call's key (deleted, overwritten, expired,
    /// evicted, ...); runs inside the notification: no writes.
    pub key_changed: fn(&Call<'_>),
    /// FLUSHDB / FLUSHALL (`db` -1) or SWAPDB touched a database, or a slot
    /// export ended (-1: Valkey's atomic slot migration).
    pub db_changed: fn(&Call<'_>, i32),
    /// This node became a master.
    pub promoted: fn(),
    /// A key timer fired (the call works on its key).
    pub key_timer: fn(&Call<'_>, &KeyId),
    /// The waiters' timeout timer fired.
    pub wait_timeout: fn(&Call<'_>),
    /// A waiter was `CLIENT UNBLOCK`ed.
    pub client_unblocked: fn(&Call<'_>, WaiterHandle),
    /// A waiter's client disconnected; true if it was still queued.
    pub disconnected: fn(&Call<'_>, WaiterHandle) -> bool,
}

static HANDLERS: OnceLock<Handlers> = OnceLock::new();

pub fn set_handlers(handlers: Handlers) {
    let _ = HANDLERS.set(handlers);
}

fn handlers() -> Option<&'static Handlers> {
    HANDLERS.get()
}
