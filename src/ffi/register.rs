//! Registration at load: commands (with key specs), the INFO section, and
//! the check that this server has every API entry the module calls.

use std::ffi::c_int;
use std::panic::catch_unwind;
use std::ptr;

use redis_module::raw;

use super::api::{api, c_string, RawArgv, RawCtx};
use crate::core::syntax::{Arg, ArgKind};

/// One command to register: name, entry point, flags, arity, key-spec flags.
pub struct CommandDef {
    pub name: &'static std::ffi::CStr,
    pub entry: extern "C" fn(RawCtx, RawArgv, c_int) -> c_int,
    pub flags: &'static std::ffi::CStr,
    /// ACL categories, space-separated (set where the server can: Redis
    /// 7.2+ and Valkey).
    pub acl: &'static std::ffi::CStr,
    /// Redis arity: positive = exact, negative = at least.
    pub arity: c_int,
    /// REDISMODULE_CMD_KEY_* flags of the keys.
    pub key_flags: u64,
    /// Where the keys are.
    pub keys: Keys,
    pub summary: &'static std::ffi::CStr,
    /// The arguments after the name, for `COMMAND DOCS` and redis-cli's
    /// hints.
    pub args: &'static [Arg],
    /// How the cost grows (`O(1)`).
    pub complexity: &'static std::ffi::CStr,
    /// The module version the command came with.
    pub since: &'static std::ffi::CStr,
}

/// Where a command's keys are in its arguments.
#[derive(Clone, Copy, Debug)]
pub enum Keys {
    /// argv[first..=last] (last -1: to the end).
    Range(c_int, c_int),
    /// argv[at] is the number of keys, which follow it.
    Counted { at: c_int },
    /// A command about the node, not about keys.
    None,
}

/// Creates the module's own ACL category `name` (so that `+@name` and
/// `-@name` rules work), where the server lets a module add one (Redis
/// 7.4+, Valkey): true if it now exists, false if this server has no such
/// API. Only while the module loads.
// Raw pointers come from Redis itself and are only passed back to it.
#[allow(clippy::not_unsafe_ptr_arg_deref)]
pub fn add_acl_category(ctx: RawCtx, name: &std::ffi::CStr) -> Result<bool, String> {
    // SAFETY: the API table is written once by Redis before OnLoad runs and
    // only read afterwards.
    let Some(add) = (unsafe { raw::RedisModule_AddACLCategory }) else { return Ok(false) };
    // SAFETY: called from OnLoad with its live context; the name is a static
    // C string that Redis copies.
    if unsafe { add(ctx, name.as_ptr()) } != raw::REDISMODULE_OK as c_int {
        return Err(format!("cannot add the ACL category {name:?}"));
    }
    Ok(true)
}

/// Registers a command with its keys at `def.keys`, for `COMMAND GETKEYS`
/// and Cluster routing (which answers CROSSSLOT when the keys of one call
/// are in different slots), with its arity and a key spec, and its ACL
/// categories (`def.acl`, plus `category` when the module added one) where
/// the server can set them.
// Raw pointers come from Redis itself and are only passed back to it.
#[allow(clippy::not_unsafe_ptr_arg_deref)]
pub fn register_command(
    ctx: RawCtx,
    def: &CommandDef,
    category: Option<&std::ffi::CStr>,
) -> Result<(), String> {
    // SAFETY: called from RedisModule_OnLoad with its live context; names and
    // flags are static C strings.
    // The legacy (first, last, step) triple; the key spec below is what
    // Redis 7 uses. A count of keys has no legacy form.
    let legacy: (c_int, c_int, c_int) = match def.keys {
        Keys::Range(first, last) => (first, last, 1),
        Keys::Counted { .. } | Keys::None => (0, 0, 0),
    };
    let created = unsafe {
        api(raw::RedisModule_CreateCommand)(
            ctx,
            def.name.as_ptr(),
            Some(def.entry),
            def.flags.as_ptr(),
            legacy.0,
            legacy.1,
            legacy.2,
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
        match def.keys {
            Keys::Range(first, last) => {
                spec.bs.index.pos = first;
                spec.find_keys_type = raw::RedisModuleKeySpecFindKeysType_REDISMODULE_KSPEC_FK_RANGE;
                // Relative to the first key: 0 = just it, -1 = to the end.
                spec.fk.range.lastkey = if last < 0 { -1 } else { last - first };
                spec.fk.range.keystep = 1;
                spec.fk.range.limit = 0;
            }
            Keys::Counted { at } => {
                spec.bs.index.pos = at;
                spec.find_keys_type = raw::RedisModuleKeySpecFindKeysType_REDISMODULE_KSPEC_FK_KEYNUM;
                // Relative to `at`: the count there, the keys right after.
                spec.fk.keynum.keynumidx = 0;
                spec.fk.keynum.firstkey = 1;
                spec.fk.keynum.keystep = 1;
            }
            Keys::None => {}
        }
        // A zeroed spec ends the array; a command without keys has only it.
        let specs: &mut [raw::RedisModuleCommandKeySpec] = match def.keys {
            Keys::None => Box::leak(Box::new([std::mem::zeroed()])),
            _ => Box::leak(Box::new([spec, std::mem::zeroed()])),
        };
        let mut info: raw::RedisModuleCommandInfo = std::mem::zeroed();
        info.version = version;
        info.summary = def.summary.as_ptr();
        info.complexity = def.complexity.as_ptr();
        info.since = def.since.as_ptr();
        info.arity = def.arity;
        info.key_specs = specs.as_mut_ptr();
        info.args = raw_args(def.args);
        let info = Box::leak(Box::new(info));
        let command = get_command(ctx, def.name.as_ptr());
        if command.is_null() || set_info(command, info) != raw::REDISMODULE_OK as c_int {
            return Err(format!("cannot set command info of {:?}", def.name));
        }
        set_acl_categories(command, def, category)
    }
}

/// The arguments as Redis reads them: an array ended by a zeroed entry,
/// with the sub-arguments of a block or a choice the same way. Leaked, as
/// the rest of the command's info (Redis copies it; a few hundred bytes
/// once per load).
fn raw_args(args: &'static [Arg]) -> *mut raw::RedisModuleCommandArg {
    let mut out: Vec<raw::RedisModuleCommandArg> = args
        .iter()
        .map(|arg| {
            let mut flags = raw::REDISMODULE_CMD_ARG_NONE;
            if arg.optional {
                flags |= raw::REDISMODULE_CMD_ARG_OPTIONAL;
            }
            if arg.multiple {
                flags |= raw::REDISMODULE_CMD_ARG_MULTIPLE;
            }
            raw::RedisModuleCommandArg {
                name: arg.name.as_ptr(),
                type_: match arg.kind {
                    ArgKind::Key => raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_KEY,
                    ArgKind::String => raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_STRING,
                    ArgKind::Integer => raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_INTEGER,
                    ArgKind::PureToken => raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_PURE_TOKEN,
                    ArgKind::OneOf => raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_ONEOF,
                    ArgKind::Block => raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_BLOCK,
                },
                // Every command declares one key spec: its keys are in it.
                // Redis takes 0 for the other arguments too ("unset").
                key_spec_index: 0,
                token: arg.token.map_or(ptr::null(), |t| t.as_ptr()),
                summary: ptr::null(),
                // Every argument came with its command.
                since: ptr::null(),
                flags: flags as c_int,
                deprecated_since: ptr::null(),
                subargs: if arg.subargs.is_empty() { ptr::null_mut() } else { raw_args(arg.subargs) },
                display_text: ptr::null(),
            }
        })
        .collect();
    // SAFETY: all-zero is the struct's documented end-of-array marker.
    out.push(unsafe { std::mem::zeroed() });
    Box::leak(out.into_boxed_slice()).as_mut_ptr()
}

/// Puts the command in its ACL categories, where the server has the API
/// (Redis 7.2+, Valkey); on Redis 7.0 it is in none (ACL rules name it).
///
/// # Safety
/// `command` is the command just created, during OnLoad.
unsafe fn set_acl_categories(
    command: *mut raw::RedisModuleCommand,
    def: &CommandDef,
    category: Option<&std::ffi::CStr>,
) -> Result<(), String> {
    let Some(set_categories) = raw::RedisModule_SetCommandACLCategories else { return Ok(()) };
    let mut categories = def.acl.to_bytes().to_vec();
    if let Some(category) = category {
        categories.push(b' ');
        categories.extend_from_slice(category.to_bytes());
    }
    let categories = std::ffi::CString::new(categories).unwrap_or_default();
    if set_categories(command, categories.as_ptr()) != raw::REDISMODULE_OK as c_int {
        return Err(format!("cannot put {:?} in the ACL categories {categories:?}", def.name));
    }
    Ok(())
}

/// One INFO field.
pub enum InfoValue {
    Unsigned(u64),
    Signed(i64),
    Text(&'static str),
    /// A line built for this INFO call.
    Line(String),
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
                InfoValue::Line(t) => {
                    let t = c_string(&t);
                    api(raw::RedisModule_InfoAddFieldCString)(ctx, name.as_ptr(), t.as_ptr().cast_mut());
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

/// Whether the server has the defrag callbacks API (Redis 8+): without
/// it the redis-module crate logs a warning at load that needs a word.
pub fn has_defrag_callbacks() -> bool {
    // SAFETY: the API table is written once by Redis before OnLoad runs and
    // only read afterwards.
    unsafe { raw::RedisModule_RegisterDefragCallbacks }.is_some()
}

/// Checks that every API entry the module calls exists in this server.
pub fn missing_api() -> Option<&'static str> {
    // SAFETY: the API table is written once by Redis before OnLoad runs and
    // only read afterwards.
    let checks: [(&str, bool); 31] = unsafe {
        [
            ("IsKeysPositionRequest", { raw::RedisModule_IsKeysPositionRequest }.is_some()),
            ("KeyAtPos", { raw::RedisModule_KeyAtPos }.is_some()),
            ("Call", { raw::RedisModule_Call }.is_some()),
            ("FreeCallReply", { raw::RedisModule_FreeCallReply }.is_some()),
            ("CallReplyArrayElement", { raw::RedisModule_CallReplyArrayElement }.is_some()),
            ("CallReplyStringPtr", { raw::RedisModule_CallReplyStringPtr }.is_some()),
            ("SetModuleOptions", { raw::RedisModule_SetModuleOptions }.is_some()),
            ("Milliseconds", { raw::RedisModule_Milliseconds }.is_some()),
            ("StringDMA", { raw::RedisModule_StringDMA }.is_some()),
            ("StringSet", { raw::RedisModule_StringSet }.is_some()),
            ("HashGet", { raw::RedisModule_HashGet }.is_some()),
            ("HashSet", { raw::RedisModule_HashSet }.is_some()),
            ("ScanKey", { raw::RedisModule_ScanKey }.is_some()),
            ("GetAbsExpire", { raw::RedisModule_GetAbsExpire }.is_some()),
            ("SetAbsExpire", { raw::RedisModule_SetAbsExpire }.is_some()),
            ("Replicate", { raw::RedisModule_Replicate }.is_some()),
            ("GetContextFlags", { raw::RedisModule_GetContextFlags }.is_some()),
            ("RegisterInfoFunc", { raw::RedisModule_RegisterInfoFunc }.is_some()),
            ("InfoAddFieldULongLong", { raw::RedisModule_InfoAddFieldULongLong }.is_some()),
            ("ReplyWithStringBuffer", { raw::RedisModule_ReplyWithStringBuffer }.is_some()),
            ("ReplyWithMap", { raw::RedisModule_ReplyWithMap }.is_some()),
            ("BlockClient", { raw::RedisModule_BlockClient }.is_some()),
            ("SetDisconnectCallback", { raw::RedisModule_SetDisconnectCallback }.is_some()),
            ("PublishMessage", { raw::RedisModule_PublishMessage }.is_some()),
            ("PublishMessageShard", { raw::RedisModule_PublishMessageShard }.is_some()),
            ("SubscribeToServerEvent", { raw::RedisModule_SubscribeToServerEvent }.is_some()),
            ("GetDetachedThreadSafeContext", { raw::RedisModule_GetDetachedThreadSafeContext }.is_some()),
            ("RegisterCommandFilter", { raw::RedisModule_RegisterCommandFilter }.is_some()),
            ("CommandFilterArgsCount", { raw::RedisModule_CommandFilterArgsCount }.is_some()),
            ("CommandFilterArgGet", { raw::RedisModule_CommandFilterArgGet }.is_some()),
            ("GetMyClusterID", { raw::RedisModule_GetMyClusterID }.is_some()),
        ]
    };
    checks.iter().find(|(_, present)| !present).map(|(name, _)| *name)
}
