//! The raw module API table and the small helpers every file of this
//! folder uses: entry lookup, string access, owned strings, constants, and
//! the handle types passed to the upper layers.

use std::ffi::{c_char, CString};
use std::ptr;
use std::slice;
use std::sync::OnceLock;

use redis_module::raw;

/// The address of a blocked client: identifies a waiter.
pub type WaiterHandle = usize;
pub type TimerId = raw::RedisModuleTimerID;

pub type RawCtx = *mut raw::RedisModuleCtx;
pub type RawArgv = *mut *mut raw::RedisModuleString;

/// The API table is filled by Redis at load; a missing entry is a Redis too
/// old for this module, which `init` refuses before any command can run.
pub(super) fn api<T>(entry: Option<T>) -> T {
    match entry {
        Some(f) => f,
        None => std::process::abort(),
    }
}

/// The bytes of a Redis string; empty for a null pointer.
pub(super) fn string_bytes<'a>(s: *mut raw::RedisModuleString) -> &'a [u8] {
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
pub(super) struct OwnedString(*mut raw::RedisModuleString);

impl OwnedString {
    pub(super) fn new(bytes: &[u8]) -> OwnedString {
        // SAFETY: CreateString copies `bytes`; a NULL context means the
        // string lives until FreeString (Drop).
        OwnedString(unsafe {
            api(raw::RedisModule_CreateString)(ptr::null_mut(), bytes.as_ptr().cast::<c_char>(), bytes.len())
        })
    }

    pub(super) fn ptr(&self) -> *mut raw::RedisModuleString {
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
pub(super) fn c_string(text: &str) -> CString {
    let clean: Vec<u8> =
        text.bytes().map(|b| if matches!(b, 0 | b'\r' | b'\n') { b' ' } else { b }).collect();
    CString::new(clean).unwrap_or_default()
}

/// Strings the hot paths pass to Redis, created once and kept for the life
/// of the process, so that no call allocates them again.
#[derive(Clone, Copy)]
pub(super) enum Constant {
    Pxat,
    Released,
    Expired,
}

pub(super) fn constant(which: Constant) -> *mut raw::RedisModuleString {
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
