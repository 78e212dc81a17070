//! Every `unsafe` of the module lives here: the raw Redis module API calls
//! for command entry, key access, replication, replies, command metadata and
//! INFO. The rest of the crate sees safe types: [`Call`], [`Key`], [`Reply`].
//!
//! The crate's higher-level wrappers are bypassed on the hot path on
//! purpose: they copy every argument into a retained `RedisString` and
//! allocate per replicated argument, which costs more than the lock logic.

use std::ffi::{c_char, c_int, c_longlong, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr;
use std::slice;

use redis_module::raw;

use crate::errors;

pub type RawCtx = *mut raw::RedisModuleCtx;
pub type RawArgv = *mut *mut raw::RedisModuleString;

/// More arguments than any LOCK.* command takes (ACQUIRE with WAIT has 6).
const ARGS_MAX: usize = 8;

/// A reply, built by safe code and written by [`Call::send`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    Int(i64),
    Nil,
    /// The whole error line without the leading `-`: `CODE message`.
    Error(String),
    /// A flat array of alternating field names and values (like XINFO).
    Fields(Vec<(&'static str, Field)>),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Field {
    Int(i64),
    Text(&'static str),
    Bytes(Vec<u8>),
}

/// One command invocation: the context and the argument bytes.
pub struct Call<'a> {
    ctx: RawCtx,
    argv: &'a [*mut raw::RedisModuleString],
}

/// Runs `handler` for a command invocation, turning a panic into an error
/// reply instead of an abort of redis-server.
// Raw pointers come from Redis itself and are only passed back to it.
#[allow(clippy::not_unsafe_ptr_arg_deref)]
pub fn dispatch(
    ctx: RawCtx,
    argv: RawArgv,
    argc: c_int,
    handler: fn(&Call<'_>, &[&[u8]]) -> Reply,
) -> c_int {
    let count = usize::try_from(argc).unwrap_or(0);
    let argv: &[*mut raw::RedisModuleString] = if argv.is_null() || count == 0 {
        &[]
    } else {
        // SAFETY: Redis passes `argc` valid string pointers that live for the
        // duration of the command call.
        unsafe { slice::from_raw_parts(argv, count) }
    };
    let call = Call { ctx, argv };
    let reply = if argv.len() > ARGS_MAX {
        Reply::Error(errors::arity(string_bytes(
            argv.first().copied().unwrap_or(ptr::null_mut()),
        )))
    } else {
        let mut bytes: [&[u8]; ARGS_MAX] = [&[]; ARGS_MAX];
        for (slot, &arg) in bytes.iter_mut().zip(argv) {
            *slot = string_bytes(arg);
        }
        let args = bytes.get(..argv.len()).unwrap_or(&[]);
        catch_unwind(AssertUnwindSafe(|| handler(&call, args)))
            .unwrap_or_else(|_| Reply::Error(errors::internal()))
    };
    call.send(&reply);
    raw::REDISMODULE_OK as c_int
}

fn string_bytes<'a>(s: *mut raw::RedisModuleString) -> &'a [u8] {
    if s.is_null() {
        return &[];
    }
    let mut len: usize = 0;
    // SAFETY: `s` is a live argument string; StringPtrLen returns a pointer
    // to its bytes, valid while the string lives (the whole command call).
    unsafe {
        let ptr = api(raw::RedisModule_StringPtrLen)(s, &mut len);
        if ptr.is_null() {
            return &[];
        }
        slice::from_raw_parts(ptr.cast::<u8>(), len)
    }
}

/// The API table is filled by Redis at load; a missing entry is a Redis too
/// old for this module, which `init` refuses before any command can run.
fn api<T>(entry: Option<T>) -> T {
    match entry {
        Some(f) => f,
        None => std::process::abort(),
    }
}

/// What a key holds, as far as locks care.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyKind {
    Empty,
    String,
    Other,
}

/// An open key (argv[1] of the current call), closed on drop.
pub struct Key<'c> {
    call: &'c Call<'c>,
    raw: *mut raw::RedisModuleKey,
}

impl<'a> Call<'a> {
    fn key_name(&self) -> *mut raw::RedisModuleString {
        self.argv.get(1).copied().unwrap_or(ptr::null_mut())
    }

    /// Opens the command's key (argv[1]) for reading, or for writing too.
    pub fn open_key(&self, write: bool) -> Option<Key<'_>> {
        let name = self.key_name();
        if name.is_null() {
            return None;
        }
        let mode = if write {
            raw::REDISMODULE_READ | raw::REDISMODULE_WRITE
        } else {
            raw::REDISMODULE_READ
        };
        // SAFETY: ctx and the key name are live for this call; the handle is
        // closed in Drop before the call returns.
        let key = unsafe { api(raw::RedisModule_OpenKey)(self.ctx, name, mode as c_int) };
        if key.is_null() {
            return None;
        }
        Some(Key {
            call: self,
            raw: key.cast(),
        })
    }

    /// True inside MULTI/EXEC or a script, where a command must not block.
    pub fn cannot_block(&self) -> bool {
        // SAFETY: ctx is live for this call.
        let flags = unsafe { api(raw::RedisModule_GetContextFlags)(self.ctx) } as u32;
        flags & (raw::REDISMODULE_CTX_FLAGS_MULTI | raw::REDISMODULE_CTX_FLAGS_LUA) != 0
    }

    /// Replicates `SET key value PXAT at_ms` to replicas and the AOF.
    pub fn replicate_set_pxat(&self, value: &[u8], at_ms: i64) {
        // SAFETY: the format "sbcl" matches the arguments that follow: a
        // RedisModuleString, a buffer with its length, a C string and a long
        // long. Redis copies them before returning.
        unsafe {
            api(raw::RedisModule_Replicate)(
                self.ctx,
                c"SET".as_ptr(),
                c"sbcl".as_ptr(),
                self.key_name(),
                value.as_ptr().cast::<c_char>(),
                value.len(),
                c"PXAT".as_ptr(),
                at_ms as c_longlong,
            );
        }
    }

    /// Replicates `DEL key`.
    pub fn replicate_del(&self) {
        // SAFETY: the format "s" matches the one RedisModuleString argument.
        unsafe {
            api(raw::RedisModule_Replicate)(
                self.ctx,
                c"DEL".as_ptr(),
                c"s".as_ptr(),
                self.key_name(),
            );
        }
    }

    fn send(&self, reply: &Reply) {
        let ctx = self.ctx;
        // SAFETY: ctx is live; strings passed are valid for the call.
        unsafe {
            match reply {
                Reply::Int(n) => {
                    api(raw::RedisModule_ReplyWithLongLong)(ctx, *n);
                }
                Reply::Nil => {
                    api(raw::RedisModule_ReplyWithNull)(ctx);
                }
                Reply::Error(line) => {
                    let line = c_string(line);
                    api(raw::RedisModule_ReplyWithError)(ctx, line.as_ptr());
                }
                Reply::Fields(fields) => {
                    api(raw::RedisModule_ReplyWithArray)(
                        ctx,
                        (fields.len() * 2) as std::ffi::c_long,
                    );
                    for (name, value) in fields {
                        reply_bytes(ctx, name.as_bytes());
                        match value {
                            Field::Int(n) => {
                                api(raw::RedisModule_ReplyWithLongLong)(ctx, *n);
                            }
                            Field::Text(t) => reply_bytes(ctx, t.as_bytes()),
                            Field::Bytes(b) => reply_bytes(ctx, b),
                        }
                    }
                }
            }
        }
    }
}

/// # Safety
/// `ctx` must be the live context of the current call.
unsafe fn reply_bytes(ctx: RawCtx, bytes: &[u8]) {
    api(raw::RedisModule_ReplyWithStringBuffer)(ctx, bytes.as_ptr().cast::<c_char>(), bytes.len());
}

/// A C string for an error line: NUL bytes and line breaks (which would cut
/// or corrupt the protocol line) become spaces.
fn c_string(text: &str) -> CString {
    let clean: Vec<u8> = text
        .bytes()
        .map(|b| {
            if matches!(b, 0 | b'\r' | b'\n') {
                b' '
            } else {
                b
            }
        })
        .collect();
    CString::new(clean).unwrap_or_default()
}

impl Key<'_> {
    pub fn kind(&self) -> KeyKind {
        // SAFETY: the key handle is open.
        let kind = unsafe { api(raw::RedisModule_KeyType)(self.raw) };
        match kind as isize {
            raw::REDISMODULE_KEYTYPE_EMPTY => KeyKind::Empty,
            raw::REDISMODULE_KEYTYPE_STRING => KeyKind::String,
            _ => KeyKind::Other,
        }
    }

    /// The string value, read in place. Valid until the key is written
    /// (writing takes `&mut self`, so the borrow checker enforces it).
    pub fn value(&self) -> Option<&[u8]> {
        if self.kind() != KeyKind::String {
            return None;
        }
        let mut len: usize = 0;
        // SAFETY: the key holds a string; DMA in READ mode returns a pointer
        // to its bytes that stays valid until the key is modified or closed.
        unsafe {
            let ptr =
                api(raw::RedisModule_StringDMA)(self.raw, &mut len, raw::REDISMODULE_READ as c_int);
            if ptr.is_null() {
                return None;
            }
            Some(slice::from_raw_parts(ptr.cast::<u8>(), len))
        }
    }

    /// Stores `value` as the key's string and sets its native expiry to the
    /// absolute wall-clock instant `expire_at_ms`. Returns false if Redis
    /// refused (the key was opened read-only or holds another type).
    pub fn store(&mut self, value: &[u8], expire_at_ms: i64) -> bool {
        // SAFETY: the key is open for writing. Truncate creates or resizes
        // the string to exactly `value.len()` bytes; DMA in WRITE mode then
        // gives a pointer to those bytes, which we fill completely.
        unsafe {
            if api(raw::RedisModule_StringTruncate)(self.raw, value.len())
                != raw::REDISMODULE_OK as c_int
            {
                return false;
            }
            let mut len: usize = 0;
            let ptr = api(raw::RedisModule_StringDMA)(
                self.raw,
                &mut len,
                raw::REDISMODULE_WRITE as c_int,
            );
            if ptr.is_null() || len != value.len() {
                return false;
            }
            ptr::copy_nonoverlapping(value.as_ptr(), ptr.cast::<u8>(), len);
            api(raw::RedisModule_SetAbsExpire)(self.raw, expire_at_ms)
                == raw::REDISMODULE_OK as c_int
        }
    }

    pub fn delete(&mut self) -> bool {
        // SAFETY: the key is open for writing.
        unsafe { api(raw::RedisModule_DeleteKey)(self.raw) == raw::REDISMODULE_OK as c_int }
    }
}

impl Drop for Key<'_> {
    fn drop(&mut self) {
        // SAFETY: the handle was opened by `open_key` and is closed once.
        unsafe { api(raw::RedisModule_CloseKey)(self.raw) };
        let _ = self.call;
    }
}

/// One command to register: name, entry point, flags, arity, key-spec flags.
pub struct CommandDef {
    pub name: &'static std::ffi::CStr,
    pub entry: extern "C" fn(RawCtx, RawArgv, c_int) -> c_int,
    pub flags: &'static std::ffi::CStr,
    /// Redis arity: positive = exact, negative = at least.
    pub arity: c_int,
    /// REDISMODULE_CMD_KEY_* flags of the one key (argv[1]).
    pub key_flags: u64,
    pub summary: &'static std::ffi::CStr,
}

/// Registers a command whose only key is argv[1], with first/last/step
/// 1/1/1 (for `COMMAND GETKEYS` and Cluster routing) and, where the server
/// supports it (7.0+), arity and a key spec.
// Raw pointers come from Redis itself and are only passed back to it.
#[allow(clippy::not_unsafe_ptr_arg_deref)]
pub fn register_command(ctx: RawCtx, def: &CommandDef) -> Result<(), String> {
    // SAFETY: called from RedisModule_OnLoad with its live context; names and
    // flags are static C strings.
    let created = unsafe {
        api(raw::RedisModule_CreateCommand)(
            ctx,
            def.name.as_ptr(),
            Some(def.entry),
            def.flags.as_ptr(),
            1,
            1,
            1,
        )
    };
    if created != raw::REDISMODULE_OK as c_int {
        return Err(format!("cannot create command {:?}", def.name));
    }
    // SAFETY: the API table is written once by Redis before OnLoad runs and
    // only read afterwards.
    let entries = unsafe { (raw::RedisModule_GetCommand, raw::RedisModule_SetCommandInfo) };
    let (Some(get_command), Some(set_info)) = entries else {
        return Ok(());
    };
    // Redis reads these during SetCommandInfo and keeps its own copies; they
    // are leaked anyway (a few hundred bytes, once per load) so that no
    // pointer can outlive them.
    let version = Box::leak(Box::new(raw::RedisModuleCommandInfoVersion {
        version: 1,
        sizeof_historyentry: std::mem::size_of::<raw::RedisModuleCommandHistoryEntry>(),
        sizeof_keyspec: std::mem::size_of::<raw::RedisModuleCommandKeySpec>(),
        sizeof_arg: std::mem::size_of::<raw::RedisModuleCommandArg>(),
    }));
    // SAFETY: the key-spec and info structs are plain C data; all-zero is
    // their documented "unset" value, and the array ends with a zeroed spec.
    unsafe {
        let mut spec: raw::RedisModuleCommandKeySpec = std::mem::zeroed();
        spec.flags = def.key_flags;
        spec.begin_search_type = raw::RedisModuleKeySpecBeginSearchType_REDISMODULE_KSPEC_BS_INDEX;
        spec.bs.index.pos = 1;
        spec.find_keys_type = raw::RedisModuleKeySpecFindKeysType_REDISMODULE_KSPEC_FK_RANGE;
        spec.fk.range.lastkey = 0;
        spec.fk.range.keystep = 1;
        spec.fk.range.limit = 0;
        let specs = Box::leak(Box::new([spec, std::mem::zeroed()]));
        let mut info: raw::RedisModuleCommandInfo = std::mem::zeroed();
        info.version = version;
        info.summary = def.summary.as_ptr();
        info.arity = def.arity;
        info.key_specs = specs.as_mut_ptr();
        let info = Box::leak(Box::new(info));
        let command = get_command(ctx, def.name.as_ptr());
        if command.is_null() || set_info(command, info) != raw::REDISMODULE_OK as c_int {
            return Err(format!("cannot set command info of {:?}", def.name));
        }
    }
    Ok(())
}

/// One INFO field.
pub enum InfoValue {
    Unsigned(u64),
    Signed(i64),
    Text(&'static str),
}

type InfoFieldsFn = fn() -> Vec<(&'static str, InfoValue)>;

static INFO_FIELDS: std::sync::OnceLock<InfoFieldsFn> = std::sync::OnceLock::new();

extern "C" fn info_callback(ctx: *mut raw::RedisModuleInfoCtx, _for_crash_report: c_int) {
    let Some(fields) = INFO_FIELDS.get() else {
        return;
    };
    let Ok(fields) = catch_unwind(fields) else {
        return;
    };
    // SAFETY: ctx is the live INFO context; a NULL section name is the
    // module's default section (named after the module: "lock").
    unsafe {
        api(raw::RedisModule_InfoAddSection)(ctx, ptr::null_mut());
        for (name, value) in fields {
            let name = c_string(name);
            match value {
                InfoValue::Unsigned(v) => {
                    api(raw::RedisModule_InfoAddFieldULongLong)(ctx, name.as_ptr(), v);
                }
                InfoValue::Signed(v) => {
                    api(raw::RedisModule_InfoAddFieldLongLong)(ctx, name.as_ptr(), v);
                }
                InfoValue::Text(t) => {
                    let t = c_string(t);
                    api(raw::RedisModule_InfoAddFieldCString)(
                        ctx,
                        name.as_ptr(),
                        t.as_ptr().cast_mut(),
                    );
                }
            }
        }
    }
}

/// Makes `INFO lock` list `fields()`. Replaces the crate's default INFO hook.
// Raw pointers come from Redis itself and are only passed back to it.
#[allow(clippy::not_unsafe_ptr_arg_deref)]
pub fn register_info(ctx: RawCtx, fields: InfoFieldsFn) -> Result<(), String> {
    let _ = INFO_FIELDS.set(fields);
    // SAFETY: called from OnLoad with its live context.
    let status = unsafe { api(raw::RedisModule_RegisterInfoFunc)(ctx, Some(info_callback)) };
    if status != raw::REDISMODULE_OK as c_int {
        return Err("cannot register the INFO callback".into());
    }
    Ok(())
}

/// Checks that every API entry the module calls exists in this server.
pub fn missing_api() -> Option<&'static str> {
    // SAFETY: the API table is written once by Redis before OnLoad runs and
    // only read afterwards.
    let checks: [(&str, bool); 8] = unsafe {
        [
            ("StringDMA", { raw::RedisModule_StringDMA }.is_some()),
            (
                "StringTruncate",
                { raw::RedisModule_StringTruncate }.is_some(),
            ),
            ("SetAbsExpire", { raw::RedisModule_SetAbsExpire }.is_some()),
            ("Replicate", { raw::RedisModule_Replicate }.is_some()),
            (
                "GetContextFlags",
                { raw::RedisModule_GetContextFlags }.is_some(),
            ),
            (
                "RegisterInfoFunc",
                { raw::RedisModule_RegisterInfoFunc }.is_some(),
            ),
            (
                "InfoAddFieldULongLong",
                { raw::RedisModule_InfoAddFieldULongLong }.is_some(),
            ),
            (
                "ReplyWithStringBuffer",
                { raw::RedisModule_ReplyWithStringBuffer }.is_some(),
            ),
        ]
    };
    checks
        .iter()
        .find(|(_, present)| !present)
        .map(|(name, _)| *name)
}
