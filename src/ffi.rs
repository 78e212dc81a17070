//! Every `unsafe` of the module lives here: the raw Redis module API calls
//! for command entry, key access, replication, replies, command metadata and
//! INFO. The rest of the crate sees safe types: [`Call`], [`Key`], [`Reply`].
//!
//! The crate's higher-level wrappers are bypassed on the hot path on
//! purpose: they copy every argument into a retained `RedisString` and
//! allocate per replicated argument, which costs more than the lock logic.

use std::ffi::{c_char, c_int, c_longlong, c_void, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr;
use std::slice;

use redis_module::raw;

use crate::core::queue::KeyId;
use crate::errors;
use crate::handoff;

pub type RawCtx = *mut raw::RedisModuleCtx;
pub type RawArgv = *mut *mut raw::RedisModuleString;

/// Arguments read into a stack array (every single-key command fits).
const ARGS_INLINE: usize = 8;

/// A cap far above any valid call, so that a huge malformed one is refused
/// before its argument list is copied (the parsers enforce the real bounds
/// with clearer errors).
const ARGS_MAX: usize = 16 * crate::core::args::RENEW_KEYS_MAX;

/// A reply, built by safe code and written by [`Call::send`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    Int(i64),
    Nil,
    /// The whole error line without the leading `-`: `CODE message`.
    Error(String),
    /// A flat array of alternating field names and values (like XINFO).
    Fields(Vec<(&'static str, Field)>),
    /// The client was blocked; the reply comes when it is unblocked.
    Blocked,
    /// An array of integers (one per key of a multi-key command).
    Ints(Vec<i64>),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Field {
    Int(i64),
    Text(&'static str),
    Bytes(Vec<u8>),
    /// An array of field/value arrays (the holders of a group lock).
    List(Vec<Vec<(&'static str, Field)>>),
}

/// A context with one lock key: a command invocation (the key is argv[1])
/// or a timer/event callback working on one key.
pub struct Call<'a> {
    ctx: RawCtx,
    key: *mut raw::RedisModuleString,
    /// The command's arguments (empty in callbacks), for commands with
    /// several keys ([`Call::for_arg`]).
    argv: &'a [*mut raw::RedisModuleString],
}

/// Runs `handler` for a command invocation, turning a panic into an error
/// reply instead of an abort of redis-server.
// Raw pointers come from Redis itself and are only passed back to it.
#[allow(clippy::not_unsafe_ptr_arg_deref)]
pub fn dispatch(ctx: RawCtx, argv: RawArgv, argc: c_int, handler: fn(&Call<'_>, &[&[u8]]) -> Reply) -> c_int {
    let count = usize::try_from(argc).unwrap_or(0);
    let argv: &[*mut raw::RedisModuleString] = if argv.is_null() || count == 0 {
        &[]
    } else {
        // SAFETY: Redis passes `argc` valid string pointers that live for the
        // duration of the command call.
        unsafe { slice::from_raw_parts(argv, count) }
    };
    let key = argv.get(1).copied().unwrap_or(ptr::null_mut());
    let call = Call { ctx, key, argv };
    let run = |args: &[&[u8]]| {
        catch_unwind(AssertUnwindSafe(|| handler(&call, args)))
            .unwrap_or_else(|_| Reply::Error(errors::internal()))
    };
    let reply = if argv.len() > ARGS_MAX {
        Reply::Error(errors::arity(string_bytes(argv.first().copied().unwrap_or(ptr::null_mut()))))
    } else if argv.len() > ARGS_INLINE {
        let args: Vec<&[u8]> = argv.iter().map(|&arg| string_bytes(arg)).collect();
        run(&args)
    } else {
        let mut bytes: [&[u8]; ARGS_INLINE] = [&[]; ARGS_INLINE];
        for (slot, &arg) in bytes.iter_mut().zip(argv) {
            *slot = string_bytes(arg);
        }
        run(bytes.get(..argv.len()).unwrap_or(&[]))
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
        self.key
    }

    /// The same call, working on the key at argument `index` (for commands
    /// with several keys).
    pub fn for_arg(&self, index: usize) -> Call<'a> {
        Call { ctx: self.ctx, key: self.argv.get(index).copied().unwrap_or(ptr::null_mut()), argv: self.argv }
    }

    /// The lock key as (selected database, key bytes).
    pub fn key_id(&self) -> KeyId {
        // SAFETY: ctx is live for this call.
        let db = unsafe { api(raw::RedisModule_GetSelectedDb)(self.ctx) };
        (db, string_bytes(self.key).to_vec())
    }

    /// Blocks the calling client until [`unblock`]. Redis' own blocking
    /// timeout is not used: on 7.0 a timeout that races with an unblock
    /// loses the reply, and it only fires at `hz` granularity. Timeouts are
    /// module timers instead ([`Call::start_waiter_timer`]).
    /// `None` if Redis refused to block the client.
    pub fn block(&self) -> Option<WaiterHandle> {
        // SAFETY: ctx is the live context of a command call; the callbacks
        // are extern "C" functions of this module that live forever.
        unsafe {
            let bc = api(raw::RedisModule_BlockClient)(
                self.ctx,
                Some(wait_reply_callback),
                Some(wait_timeout_callback),
                Some(wait_free_callback),
                0,
            );
            if bc.is_null() {
                return None;
            }
            api(raw::RedisModule_SetDisconnectCallback)(bc, Some(wait_disconnect_callback));
            Some(bc as WaiterHandle)
        }
    }

    /// Runs `f` after `delay_ms` on Redis' main thread, with a context for
    /// the same key. Returns the timer id for [`Call::stop_timer`].
    pub fn start_timer(&self, delay_ms: i64, key: KeyId) -> TimerId {
        let data = Box::into_raw(Box::new(key)).cast::<c_void>();
        // SAFETY: ctx is live; `data` is a leaked Box<KeyId> that the
        // callback or `stop_timer` turns back into a Box exactly once.
        unsafe { api(raw::RedisModule_CreateTimer)(self.ctx, delay_ms.max(0), Some(timer_callback), data) }
    }

    /// Calls `handoff::on_wait_timeout` for `waiter` after `delay_ms`.
    pub fn start_waiter_timer(&self, delay_ms: i64, waiter: WaiterHandle) -> TimerId {
        // SAFETY: ctx is live; the data is the waiter's handle, an integer
        // carried in the pointer, never dereferenced.
        unsafe {
            api(raw::RedisModule_CreateTimer)(
                self.ctx,
                delay_ms.max(0),
                Some(waiter_timer_callback),
                waiter as *mut c_void,
            )
        }
    }

    /// Stops a waiter's timeout timer (its data owns nothing).
    pub fn stop_waiter_timer(&self, id: TimerId) {
        let mut data: *mut c_void = ptr::null_mut();
        // SAFETY: ctx is live; the returned data is a plain integer.
        unsafe {
            api(raw::RedisModule_StopTimer)(self.ctx, id, &mut data);
        }
    }

    /// Stops a key timer that has not fired and frees its data.
    pub fn stop_timer(&self, id: TimerId) {
        let mut data: *mut c_void = ptr::null_mut();
        // SAFETY: ctx is live; on success Redis hands back the data pointer
        // we gave to CreateTimer, a Box<KeyId> not yet freed.
        unsafe {
            if api(raw::RedisModule_StopTimer)(self.ctx, id, &mut data) == raw::REDISMODULE_OK as c_int
                && !data.is_null()
            {
                drop(Box::from_raw(data.cast::<KeyId>()));
            }
        }
    }

    /// Announces a freed lock on the key's channel `__lock@<db>__:<key>`
    /// (not replicated). Built to cost little when nobody listens: the
    /// channel name goes through a reused buffer and the two possible
    /// messages are created once.
    pub fn publish_freed(&self, reason: Freed) {
        thread_local! {
            static CHANNEL: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
        }
        let message = constant(match reason {
            Freed::Released => Constant::Released,
            Freed::Expired => Constant::Expired,
        });
        // SAFETY: ctx is live for this call.
        let db = unsafe { api(raw::RedisModule_GetSelectedDb)(self.ctx) };
        CHANNEL.with_borrow_mut(|channel| {
            channel.clear();
            channel.extend_from_slice(b"__lock@");
            channel.extend_from_slice(itoa::Buffer::new().format(db).as_bytes());
            channel.extend_from_slice(b"__:");
            channel.extend_from_slice(string_bytes(self.key));
            // SAFETY: ctx is live; the channel string is created and freed
            // here; the message strings live forever (above).
            unsafe {
                let channel = api(raw::RedisModule_CreateString)(
                    self.ctx,
                    channel.as_ptr().cast::<c_char>(),
                    channel.len(),
                );
                api(raw::RedisModule_PublishMessage)(self.ctx, channel, message);
                api(raw::RedisModule_FreeString)(self.ctx, channel);
            }
        });
    }

    /// Opens the command's key (argv[1]) for reading, or for writing too.
    pub fn open_key(&self, write: bool) -> Option<Key<'_>> {
        let name = self.key_name();
        if name.is_null() {
            return None;
        }
        let mode = if write { raw::REDISMODULE_READ | raw::REDISMODULE_WRITE } else { raw::REDISMODULE_READ };
        // SAFETY: ctx and the key name are live for this call; the handle is
        // closed in Drop before the call returns.
        let key = unsafe { api(raw::RedisModule_OpenKey)(self.ctx, name, mode as c_int) };
        if key.is_null() {
            return None;
        }
        Some(Key { call: self, raw: key.cast() })
    }

    /// True where a command must not block: MULTI/EXEC, a script, ...
    pub fn cannot_block(&self) -> bool {
        // SAFETY: ctx is live for this call.
        let flags = unsafe { api(raw::RedisModule_GetContextFlags)(self.ctx) } as u32;
        // DENY_BLOCKING covers MULTI, scripts and functions, RM_Call from
        // other modules, and the replication link.
        let no_block = raw::REDISMODULE_CTX_FLAGS_MULTI
            | raw::REDISMODULE_CTX_FLAGS_LUA
            | raw::REDISMODULE_CTX_FLAGS_DENY_BLOCKING;
        flags & no_block != 0
    }

    /// False when this node runs in a cluster and the key is not served here
    /// (its slot belongs to another node, or is being migrated away and the
    /// key is already gone): what the server would answer MOVED or ASK to.
    /// Asked through `RedisModule_Call`, which applies the cluster's routing
    /// check to calls that do not come from the master.
    pub fn key_is_local(&self) -> bool {
        // SAFETY: ctx is live for this call.
        let flags = unsafe { api(raw::RedisModule_GetContextFlags)(self.ctx) } as u32;
        if flags & raw::REDISMODULE_CTX_FLAGS_CLUSTER == 0 || self.key.is_null() {
            return true;
        }
        // SAFETY: the format "s" matches the one RedisModuleString argument;
        // a reply, when there is one, is freed before returning. Redis
        // answers NULL when the routing check refuses the key.
        unsafe {
            let reply = api(raw::RedisModule_Call)(self.ctx, c"EXISTS".as_ptr(), c"s".as_ptr(), self.key);
            if reply.is_null() {
                return false;
            }
            api(raw::RedisModule_FreeCallReply)(reply);
        }
        true
    }

    /// Replicates `SET key value PXAT at_ms` to replicas and the AOF.
    pub fn replicate_set_pxat(&self, value: &[u8], at_ms: i64) {
        // SAFETY: the format "sbsl" matches the arguments that follow: a
        // RedisModuleString, a buffer with its length, a RedisModuleString
        // (kept for the process's life) and a long long. Redis copies or
        // retains them before returning.
        unsafe {
            api(raw::RedisModule_Replicate)(
                self.ctx,
                c"SET".as_ptr(),
                c"sbsl".as_ptr(),
                self.key_name(),
                value.as_ptr().cast::<c_char>(),
                value.len(),
                constant(Constant::Pxat),
                at_ms as c_longlong,
            );
        }
    }

    /// True when the command comes from the master's replication stream or
    /// from the AOF being loaded (it was already checked where it first ran).
    pub fn is_replicated_or_loading(&self) -> bool {
        // SAFETY: ctx is live for this call.
        let flags = unsafe { api(raw::RedisModule_GetContextFlags)(self.ctx) } as u32;
        flags & (raw::REDISMODULE_CTX_FLAGS_REPLICATED | raw::REDISMODULE_CTX_FLAGS_LOADING) != 0
    }

    /// Replicates the command exactly as the client sent it.
    pub fn replicate_verbatim(&self) {
        // SAFETY: ctx is the live context of a command call.
        unsafe {
            api(raw::RedisModule_ReplicateVerbatim)(self.ctx);
        }
    }

    /// Replicates `DEL key`.
    pub fn replicate_del(&self) {
        // SAFETY: the format "s" matches the one RedisModuleString argument.
        unsafe {
            api(raw::RedisModule_Replicate)(self.ctx, c"DEL".as_ptr(), c"s".as_ptr(), self.key_name());
        }
    }

    fn send(&self, reply: &Reply) {
        let ctx = self.ctx;
        // SAFETY: ctx is live; strings passed are valid for the call.
        unsafe {
            match reply {
                Reply::Blocked => {}
                Reply::Ints(values) => {
                    api(raw::RedisModule_ReplyWithArray)(ctx, values.len() as std::ffi::c_long);
                    for n in values {
                        api(raw::RedisModule_ReplyWithLongLong)(ctx, *n);
                    }
                }
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
                Reply::Fields(fields) => reply_fields(ctx, fields),
            }
        }
    }
}

/// # Safety
/// `ctx` must be the live context of the current call.
unsafe fn reply_fields(ctx: RawCtx, fields: &[(&'static str, Field)]) {
    api(raw::RedisModule_ReplyWithArray)(ctx, (fields.len() * 2) as std::ffi::c_long);
    for (name, value) in fields {
        reply_bytes(ctx, name.as_bytes());
        match value {
            Field::Int(n) => {
                api(raw::RedisModule_ReplyWithLongLong)(ctx, *n);
            }
            Field::Text(t) => reply_bytes(ctx, t.as_bytes()),
            Field::Bytes(b) => reply_bytes(ctx, b),
            Field::List(items) => {
                api(raw::RedisModule_ReplyWithArray)(ctx, items.len() as std::ffi::c_long);
                for item in items {
                    reply_fields(ctx, item);
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
    let clean: Vec<u8> =
        text.bytes().map(|b| if matches!(b, 0 | b'\r' | b'\n') { b' ' } else { b }).collect();
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
            let ptr = api(raw::RedisModule_StringDMA)(self.raw, &mut len, raw::REDISMODULE_READ as c_int);
            if ptr.is_null() {
                return None;
            }
            Some(slice::from_raw_parts(ptr.cast::<u8>(), len))
        }
    }

    /// Makes the key a string of exactly `len` bytes with native expiry at
    /// the absolute wall-clock instant `expire_at_ms`, lets `fill` write the
    /// bytes in place (no intermediate copy), and returns them. `None` if
    /// Redis refused (the key was opened read-only or holds another type).
    pub fn store_with(
        &mut self,
        len: usize,
        expire_at_ms: i64,
        fill: impl FnOnce(&mut [u8]),
    ) -> Option<&[u8]> {
        // SAFETY: the key is open for writing. Truncate creates or resizes
        // the string to exactly `len` bytes; DMA in WRITE mode then gives a
        // pointer to those bytes, valid until the key is modified or closed,
        // which the returned borrow of `self` prevents.
        unsafe {
            if api(raw::RedisModule_StringTruncate)(self.raw, len) != raw::REDISMODULE_OK as c_int {
                return None;
            }
            if api(raw::RedisModule_SetAbsExpire)(self.raw, expire_at_ms) != raw::REDISMODULE_OK as c_int {
                return None;
            }
            let mut dma_len: usize = 0;
            let ptr =
                api(raw::RedisModule_StringDMA)(self.raw, &mut dma_len, raw::REDISMODULE_WRITE as c_int);
            if ptr.is_null() || dma_len != len {
                return None;
            }
            let bytes = slice::from_raw_parts_mut(ptr.cast::<u8>(), len);
            fill(bytes);
            Some(bytes)
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
    /// REDISMODULE_CMD_KEY_* flags of the keys.
    pub key_flags: u64,
    /// Where the keys are: argv[first..=last] (last -1: to the end).
    pub keys: (c_int, c_int),
    pub summary: &'static std::ffi::CStr,
}

/// Registers a command with its keys at `def.keys` (step 1), for `COMMAND
/// GETKEYS` and Cluster routing, and, where the server supports it (7.0+),
/// its arity and a key spec.
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
        spec.bs.index.pos = def.keys.0;
        spec.find_keys_type = raw::RedisModuleKeySpecFindKeysType_REDISMODULE_KSPEC_FK_RANGE;
        // Relative to the first key: 0 = just it, -1 = to the end.
        spec.fk.range.lastkey = if def.keys.1 < 0 { -1 } else { def.keys.1 - def.keys.0 };
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
                    api(raw::RedisModule_InfoAddFieldCString)(ctx, name.as_ptr(), t.as_ptr().cast_mut());
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

/// The server's wall clock in epoch ms (see `clock::wall_ms`).
pub fn server_wall_ms() -> i64 {
    // SAFETY: takes no arguments; the API table is filled before OnLoad.
    unsafe { api(raw::RedisModule_Milliseconds)() }
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
const VALKEY_SUBEVENT_ATOMIC_SLOT_MIGRATION_EXPORT_COMPLETED: u64 = 5;

/// A slot export finished on this (source) node. Valkey then deletes the
/// slot's keys without keyspace events, so the hand-off code looks at every
/// key with waiters again (and tells the waiters of moved keys to retry).
extern "C" fn slot_migration_callback(
    ctx: RawCtx,
    _eid: raw::RedisModuleEvent,
    subevent: u64,
    _data: *mut c_void,
) {
    if subevent != VALKEY_SUBEVENT_ATOMIC_SLOT_MIGRATION_EXPORT_COMPLETED || !handoff::any_waiters() {
        return;
    }
    let call = Call { ctx, key: ptr::null_mut(), argv: &[] };
    let _ = catch_unwind(AssertUnwindSafe(|| handoff::on_flush(&call, -1)));
}

/// Declares to Valkey 9+ that the module handles atomic slot migration
/// (`CLUSTER MIGRATESLOTS`): locks are plain strings, copied to the target
/// like any key, and waiters on the source learn when the export is done.
#[allow(clippy::not_unsafe_ptr_arg_deref)]
pub fn declare_atomic_slot_migration(ctx: RawCtx) -> Result<(), String> {
    let event = raw::RedisModuleEvent { id: VALKEY_EVENT_ATOMIC_SLOT_MIGRATION, dataver: 1 };
    // SAFETY: called from OnLoad with its live context, on Valkey 9 or later
    // (the caller checks), where the option bit and the event id mean what
    // the constants above say; the callback lives forever.
    unsafe {
        api(raw::RedisModule_SetModuleOptions)(ctx, VALKEY_OPTIONS_HANDLE_ATOMIC_SLOT_MIGRATION);
        let status = api(raw::RedisModule_SubscribeToServerEvent)(ctx, event, Some(slot_migration_callback));
        if status != raw::REDISMODULE_OK as c_int {
            return Err("cannot subscribe to atomic slot migration events".into());
        }
    }
    Ok(())
}

/// Checks that every API entry the module calls exists in this server.
pub fn missing_api() -> Option<&'static str> {
    // SAFETY: the API table is written once by Redis before OnLoad runs and
    // only read afterwards.
    let checks: [(&str, bool); 16] = unsafe {
        [
            ("Call", { raw::RedisModule_Call }.is_some()),
            ("FreeCallReply", { raw::RedisModule_FreeCallReply }.is_some()),
            ("SetModuleOptions", { raw::RedisModule_SetModuleOptions }.is_some()),
            ("Milliseconds", { raw::RedisModule_Milliseconds }.is_some()),
            ("StringDMA", { raw::RedisModule_StringDMA }.is_some()),
            ("StringTruncate", { raw::RedisModule_StringTruncate }.is_some()),
            ("SetAbsExpire", { raw::RedisModule_SetAbsExpire }.is_some()),
            ("Replicate", { raw::RedisModule_Replicate }.is_some()),
            ("GetContextFlags", { raw::RedisModule_GetContextFlags }.is_some()),
            ("RegisterInfoFunc", { raw::RedisModule_RegisterInfoFunc }.is_some()),
            ("InfoAddFieldULongLong", { raw::RedisModule_InfoAddFieldULongLong }.is_some()),
            ("ReplyWithStringBuffer", { raw::RedisModule_ReplyWithStringBuffer }.is_some()),
            ("BlockClient", { raw::RedisModule_BlockClient }.is_some()),
            ("SetDisconnectCallback", { raw::RedisModule_SetDisconnectCallback }.is_some()),
            ("PublishMessage", { raw::RedisModule_PublishMessage }.is_some()),
            ("SubscribeToServerEvent", { raw::RedisModule_SubscribeToServerEvent }.is_some()),
        ]
    };
    checks.iter().find(|(_, present)| !present).map(|(name, _)| *name)
}

/// Runs `f` with a context for `key` in a callback (timer, event): selects
/// the key's database and wraps the key name in a Redis string.
fn with_key_context(ctx: RawCtx, key: &KeyId, f: impl FnOnce(&Call<'_>)) {
    let (db, name) = key;
    // SAFETY: ctx is the live callback context; the string is created with
    // a NULL context (so automatic memory does not free it) and freed here.
    unsafe {
        if api(raw::RedisModule_SelectDb)(ctx, *db) != raw::REDISMODULE_OK as c_int {
            return;
        }
        let key =
            api(raw::RedisModule_CreateString)(ptr::null_mut(), name.as_ptr().cast::<c_char>(), name.len());
        let call = Call { ctx, key, argv: &[] };
        let _ = catch_unwind(AssertUnwindSafe(|| f(&call)));
        api(raw::RedisModule_FreeString)(ptr::null_mut(), key);
    }
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
    static STRINGS: std::sync::OnceLock<[usize; 3]> = std::sync::OnceLock::new();
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

/// Why a lock was freed, as published on its channel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Freed {
    Released,
    Expired,
}

/// The address of a blocked client: identifies a waiter.
pub type WaiterHandle = usize;
pub type TimerId = raw::RedisModuleTimerID;

/// What a blocked waiter is told when it is unblocked.
#[derive(Debug)]
pub enum WaitResult {
    Granted(i64),
    TimedOut,
    Failed(String),
}

/// Unblocks a waiter; its client is then sent `result`.
pub fn unblock(handle: WaiterHandle, result: WaitResult) {
    let data = Box::into_raw(Box::new(result)).cast::<c_void>();
    // SAFETY: `handle` is a blocked client this module blocked and has not
    // unblocked yet (the waiter was removed from its queue exactly once);
    // Redis hands `data` to the reply and free callbacks.
    unsafe {
        api(raw::RedisModule_UnblockClient)(handle as *mut raw::RedisModuleBlockedClient, data);
    }
}

extern "C" fn wait_reply_callback(ctx: RawCtx, _argv: RawArgv, _argc: c_int) -> c_int {
    // SAFETY: Redis calls this for a client we unblocked with a
    // Box<WaitResult> as private data; Redis still owns it (it is freed in
    // wait_free_callback), so it is only borrowed here.
    let result =
        unsafe { api(raw::RedisModule_GetBlockedClientPrivateData)(ctx).cast::<WaitResult>().as_ref() };
    let call = Call { ctx, key: ptr::null_mut(), argv: &[] };
    let reply = match result {
        Some(WaitResult::Granted(fence)) => Reply::Int(*fence),
        Some(WaitResult::Failed(line)) => Reply::Error(line.clone()),
        Some(WaitResult::TimedOut) | None => Reply::Nil,
    };
    call.send(&reply);
    raw::REDISMODULE_OK as c_int
}

/// Clients are blocked without a Redis timeout, so Redis calls this only
/// for `CLIENT UNBLOCK` (timeout mode): the waiter leaves its queue and gets
/// nil, as on a timeout.
extern "C" fn wait_timeout_callback(ctx: RawCtx, _argv: RawArgv, _argc: c_int) -> c_int {
    // SAFETY: ctx is the timeout context of a client this module blocked.
    let bc = unsafe { api(raw::RedisModule_GetBlockedClientHandle)(ctx) };
    let call = Call { ctx, key: ptr::null_mut(), argv: &[] };
    let _ = catch_unwind(AssertUnwindSafe(|| handoff::on_client_unblock(&call, bc as WaiterHandle)));
    call.send(&Reply::Nil);
    raw::REDISMODULE_OK as c_int
}

extern "C" fn waiter_timer_callback(ctx: RawCtx, data: *mut c_void) {
    let call = Call { ctx, key: ptr::null_mut(), argv: &[] };
    let _ = catch_unwind(AssertUnwindSafe(|| handoff::on_wait_timeout(&call, data as WaiterHandle)));
}

extern "C" fn wait_disconnect_callback(ctx: RawCtx, bc: *mut raw::RedisModuleBlockedClient) {
    let call = Call { ctx, key: ptr::null_mut(), argv: &[] };
    let removed =
        catch_unwind(AssertUnwindSafe(|| handoff::on_disconnect(&call, bc as WaiterHandle))).unwrap_or(false);
    if removed {
        // SAFETY: the waiter was still queued, so nobody unblocked it yet;
        // unblocking frees the handle (no reply is sent: the client is gone).
        unsafe {
            api(raw::RedisModule_UnblockClient)(bc, ptr::null_mut());
        }
    }
}

extern "C" fn wait_free_callback(_ctx: RawCtx, data: *mut c_void) {
    if !data.is_null() {
        // SAFETY: `data` is the Box<WaitResult> given to UnblockClient.
        drop(unsafe { Box::from_raw(data.cast::<WaitResult>()) });
    }
}

extern "C" fn timer_callback(ctx: RawCtx, data: *mut c_void) {
    if data.is_null() {
        return;
    }
    // SAFETY: `data` is the Box<KeyId> leaked by start_timer; a timer fires
    // at most once and is not stopped after firing, so it is freed once.
    let key = unsafe { Box::from_raw(data.cast::<KeyId>()) };
    with_key_context(ctx, &key, |call| handoff::on_timer(call, &key));
}

extern "C" fn key_event_callback(
    ctx: RawCtx,
    _type: c_int,
    _event: *const c_char,
    key: *mut raw::RedisModuleString,
) -> c_int {
    if !handoff::any_waiters() {
        return raw::REDISMODULE_OK as c_int;
    }
    // SAFETY: ctx is the live notification context.
    let db = unsafe { api(raw::RedisModule_GetSelectedDb)(ctx) };
    let call = Call { ctx, key, argv: &[] };
    let key_id = (db, string_bytes(key).to_vec());
    let _ = catch_unwind(AssertUnwindSafe(|| handoff::on_key_changed(&call, key_id)));
    raw::REDISMODULE_OK as c_int
}

extern "C" fn flush_callback(ctx: RawCtx, _eid: raw::RedisModuleEvent, subevent: u64, data: *mut c_void) {
    if subevent != raw::REDISMODULE_SUBEVENT_FLUSHDB_END || data.is_null() || !handoff::any_waiters() {
        return;
    }
    // SAFETY: for FlushDB events Redis passes a RedisModuleFlushInfo.
    let db = unsafe { (*data.cast::<raw::RedisModuleFlushInfo>()).dbnum };
    let call = Call { ctx, key: ptr::null_mut(), argv: &[] };
    let _ = catch_unwind(AssertUnwindSafe(|| handoff::on_flush(&call, db)));
}

extern "C" fn swapdb_callback(ctx: RawCtx, _eid: raw::RedisModuleEvent, _subevent: u64, data: *mut c_void) {
    if data.is_null() || !handoff::any_waiters() {
        return;
    }
    // SAFETY: for SwapDB events Redis passes a RedisModuleSwapDbInfo.
    let info = unsafe { &*data.cast::<raw::RedisModuleSwapDbInfo>() };
    let call = Call { ctx, key: ptr::null_mut(), argv: &[] };
    let _ = catch_unwind(AssertUnwindSafe(|| {
        handoff::on_flush(&call, info.dbnum_first);
        handoff::on_flush(&call, info.dbnum_second);
    }));
}

extern "C" fn role_callback(_ctx: RawCtx, _eid: raw::RedisModuleEvent, subevent: u64, _data: *mut c_void) {
    if subevent == raw::REDISMODULE_EVENT_REPLROLECHANGED_NOW_MASTER {
        let _ = catch_unwind(crate::node::on_promoted);
    }
}

type ServerEventCallback = extern "C" fn(RawCtx, raw::RedisModuleEvent, u64, *mut c_void);

/// Subscribes to the events the module needs: keyspace events and flush and
/// swapdb (a lock freed behind the module's back: hand it to a waiter), and
/// role changes (a promotion starts the failover quarantine).
#[allow(clippy::not_unsafe_ptr_arg_deref)]
pub fn subscribe_events(ctx: RawCtx) -> Result<(), String> {
    let types = raw::REDISMODULE_NOTIFY_GENERIC
        | raw::REDISMODULE_NOTIFY_STRING
        | raw::REDISMODULE_NOTIFY_EXPIRED
        | raw::REDISMODULE_NOTIFY_EVICTED;
    // SAFETY: called from OnLoad with its live context.
    let status =
        unsafe { api(raw::RedisModule_SubscribeToKeyspaceEvents)(ctx, types, Some(key_event_callback)) };
    if status != raw::REDISMODULE_OK as c_int {
        return Err("cannot subscribe to keyspace events".into());
    }
    let server_events: [(u64, ServerEventCallback, &str); 3] = [
        (raw::REDISMODULE_EVENT_REPLICATION_ROLE_CHANGED, role_callback, "role-change"),
        (raw::REDISMODULE_EVENT_SWAPDB, swapdb_callback, "swapdb"),
        (raw::REDISMODULE_EVENT_FLUSHDB, flush_callback, "flush"),
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
