//! A command invocation or a callback working on one lock key.

use std::cell::RefCell;
use std::ffi::{c_char, c_int};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr;
use std::slice;
use std::sync::OnceLock;

use lock_protocol::freed::{self, Announce};

use redis_module::raw;

use super::api::{api, constant, string_bytes, Constant, OwnedString, RawArgv, RawCtx};
use super::reply::Reply;
use crate::core::queue::KeyId;
use crate::errors;

/// Arguments read into a stack array (every single-key command fits).
const ARGS_INLINE: usize = 8;

/// A cap far above any valid call, so that a huge malformed one is refused
/// before its argument list is copied (the parsers enforce the real bounds
/// with clearer errors).
const ARGS_MAX: usize = 16 * crate::core::args::RENEW_KEYS_MAX;

/// A context with one lock key: a command invocation (the key is argv[1])
/// or a timer/event callback working on one key.
pub struct Call<'a> {
    pub(super) ctx: RawCtx,
    pub(super) key: *mut raw::RedisModuleString,
    /// The command's arguments (empty in callbacks), for commands with
    /// several keys ([`Call::for_arg`]).
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
    handler: impl Fn(&Call<'_>, &[&[u8]]) -> Reply,
) -> c_int {
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
    let name = string_bytes(argv.first().copied().unwrap_or(ptr::null_mut()));
    let reply = if argv.len() > ARGS_MAX {
        Reply::Error(errors::arity(name))
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
    reply.for_command(name).send(ctx);
    raw::REDISMODULE_OK as c_int
}

/// [`dispatch`] for a command whose keys follow a count at `argv[count_at]`
/// (registered with the `getkeys-api` flag). Redis 7.0's cluster routing
/// (and its ACL key checks) find keys through the legacy (first, last,
/// step) triple, which cannot express a count, or through this call: so a
/// call that only asks where the keys are is answered here, and the
/// command runs otherwise.
// Raw pointers come from Redis itself and are only passed back to it.
#[allow(clippy::not_unsafe_ptr_arg_deref)]
pub fn dispatch_counted_keys(
    ctx: RawCtx,
    argv: RawArgv,
    argc: c_int,
    count_at: usize,
    handler: impl Fn(&Call<'_>, &[&[u8]]) -> Reply,
) -> c_int {
    // SAFETY: ctx is the live context of this call.
    if unsafe { api(raw::RedisModule_IsKeysPositionRequest)(ctx) } == 0 {
        return dispatch(ctx, argv, argc, handler);
    }
    let count = usize::try_from(argc).unwrap_or(0);
    let args: &[*mut raw::RedisModuleString] = if argv.is_null() || count == 0 {
        &[]
    } else {
        // SAFETY: Redis passes `argc` valid string pointers for this call.
        unsafe { slice::from_raw_parts(argv, count) }
    };
    // A count that is not a valid number names no keys: the command then
    // runs and answers the error.
    let keys = args
        .get(count_at)
        .and_then(|&arg| std::str::from_utf8(string_bytes(arg)).ok())
        .and_then(|text| text.parse::<usize>().ok())
        .filter(|&n| count_at.saturating_add(n) < args.len());
    for position in (1..=keys.unwrap_or(0)).map(|i| count_at + i) {
        // SAFETY: ctx is live and `position` is within argv.
        unsafe { api(raw::RedisModule_KeyAtPos)(ctx, position as c_int) };
    }
    raw::REDISMODULE_OK as c_int
}

/// Why a lock was freed, as published on its channel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Freed {
    Released,
    Expired,
}

impl<'a> Call<'a> {
    /// A context for callbacks that work on no key (and for the module's
    /// load).
    pub fn bare(ctx: RawCtx) -> Call<'static> {
        Call { ctx, key: ptr::null_mut(), argv: &[] }
    }

    /// A context for a callback working on `key`.
    pub(super) fn on_key(ctx: RawCtx, key: *mut raw::RedisModuleString) -> Call<'static> {
        Call { ctx, key, argv: &[] }
    }

    /// The same call, working on the key at argument `index` (for commands
    /// with several keys).
    pub fn for_arg(&self, index: usize) -> Call<'a> {
        Call { ctx: self.ctx, key: self.argv.get(index).copied().unwrap_or(ptr::null_mut()), argv: self.argv }
    }

    /// Runs `f` with a context for each of `names`, keys of the call's
    /// database: work on several keys from a callback (the hand-off of a
    /// set of keys), where the keys are not the command's arguments.
    pub fn for_keys<T>(&self, names: &[&[u8]], f: impl FnOnce(&[Call<'_>]) -> T) -> T {
        let strings: Vec<OwnedString> = names.iter().map(|name| OwnedString::new(name)).collect();
        let calls: Vec<Call<'_>> =
            strings.iter().map(|name| Call { ctx: self.ctx, key: name.ptr(), argv: &[] }).collect();
        f(&calls)
    }

    /// The lock key's bytes.
    pub fn key_name(&self) -> &[u8] {
        string_bytes(self.key)
    }

    /// The lock key as (selected database, key bytes).
    pub fn key_id(&self) -> KeyId {
        (self.db(), self.key_name().to_vec())
    }

    pub fn db(&self) -> i32 {
        // SAFETY: ctx is live for this call.
        unsafe { api(raw::RedisModule_GetSelectedDb)(self.ctx) }
    }

    fn flags(&self) -> u32 {
        // SAFETY: ctx is live for this call.
        unsafe { api(raw::RedisModule_GetContextFlags)(self.ctx) as u32 }
    }

    /// False when this node runs in a cluster and the key is not served here
    /// (its slot belongs to another node, or is being migrated away and the
    /// key is already gone): what the server would answer MOVED or ASK to.
    /// Asked through `RedisModule_Call`, which applies the cluster's routing
    /// check to calls that do not come from the master.
    pub fn key_is_local(&self) -> bool {
        if self.flags() & raw::REDISMODULE_CTX_FLAGS_CLUSTER == 0 || self.key.is_null() {
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

    /// True where a command must not block: MULTI/EXEC, a script, ...
    pub fn cannot_block(&self) -> bool {
        // DENY_BLOCKING covers MULTI, scripts and functions, RM_Call from
        // other modules, and the replication link.
        let no_block = raw::REDISMODULE_CTX_FLAGS_MULTI
            | raw::REDISMODULE_CTX_FLAGS_LUA
            | raw::REDISMODULE_CTX_FLAGS_DENY_BLOCKING;
        self.flags() & no_block != 0
    }

    /// True when the command comes from the master's replication stream or
    /// from the AOF being loaded (it was already checked where it first ran).
    pub fn is_replicated_or_loading(&self) -> bool {
        self.flags() & (raw::REDISMODULE_CTX_FLAGS_REPLICATED | raw::REDISMODULE_CTX_FLAGS_LOADING) != 0
    }

    /// Who may see which key names in this call's reply (LOCK.CONTENDED
    /// names keys that no key spec guards): the calling client's ACL user.
    pub fn key_reader(&self) -> KeyReader {
        // SAFETY: the API table is written once by Redis before OnLoad runs
        // and only read afterwards.
        let entries = unsafe {
            (
                raw::RedisModule_GetClientId,
                raw::RedisModule_GetClientUserNameById,
                raw::RedisModule_GetModuleUserFromUserName,
                raw::RedisModule_ACLCheckKeyPermissions,
                raw::RedisModule_FreeModuleUser,
            )
        };
        let (Some(client_id), Some(user_name), Some(user_from_name), Some(_), Some(_)) = entries else {
            return KeyReader(None);
        };
        // The user is read through the client's id, never from the context
        // (RedisModule_GetCurrentUserName reads a NULL user of a client the
        // server runs itself, or of another module's call, and crashes).
        // A client that is not in the server's index (a script's client,
        // another module's call) has no name here: nothing is shown then.
        // SAFETY: ctx is the live context of this call; the name string is
        // freed once, with the same context (also where Redis' automatic
        // memory holds it); the user is freed by `KeyReader`'s drop.
        unsafe {
            let name = user_name(self.ctx, client_id(self.ctx));
            if name.is_null() {
                return KeyReader(None);
            }
            let user = user_from_name(name);
            api(raw::RedisModule_FreeString)(self.ctx, name);
            KeyReader((!user.is_null()).then_some(user))
        }
    }

    /// Who sent this call, for the log of an operator's act: `client 7
    /// (user alice, 127.0.0.1:50222)`, with what the server can tell.
    pub fn client_label(&self) -> String {
        // SAFETY: the API table is written once by Redis before OnLoad runs
        // and only read afterwards.
        let entries = unsafe {
            (
                raw::RedisModule_GetClientId,
                raw::RedisModule_GetClientUserNameById,
                raw::RedisModule_GetClientInfoById,
            )
        };
        let (Some(client_id), Some(user_name), Some(client_info)) = entries else {
            return "a client".into();
        };
        // SAFETY: ctx is the live context of this call. The info struct is
        // plain C data (all-zero, then the version it is read as); the
        // address is a NUL-terminated array inside it. The user name string
        // is read, then freed once with the same context.
        unsafe {
            let id = client_id(self.ctx);
            let mut info: raw::RedisModuleClientInfo = std::mem::zeroed();
            info.version = u64::from(raw::REDISMODULE_CLIENTINFO_VERSION);
            let address = if client_info(ptr::addr_of_mut!(info).cast(), id) == raw::REDISMODULE_OK as c_int {
                let addr = std::ffi::CStr::from_ptr(info.addr.as_ptr()).to_string_lossy().into_owned();
                if info.flags & u64::from(raw::REDISMODULE_CLIENTINFO_FLAG_UNIXSOCKET) != 0 {
                    format!(", {addr} (unix socket)")
                } else {
                    format!(", {addr}:{}", info.port)
                }
            } else {
                String::new()
            };
            let name = user_name(self.ctx, id);
            let user = if name.is_null() {
                "no user".to_string()
            } else {
                let text = String::from_utf8_lossy(string_bytes(name)).into_owned();
                api(raw::RedisModule_FreeString)(self.ctx, name);
                format!("user {text}")
            };
            format!("client {id} ({user}{address})")
        }
    }

    /// True when the server runs in cluster mode.
    pub fn in_cluster(&self) -> bool {
        self.flags() & raw::REDISMODULE_CTX_FLAGS_CLUSTER != 0
    }

    /// True on a replica, or while the server loads its dataset: keys then
    /// change by the master's stream or the file being loaded, not behind
    /// the module's back.
    pub fn is_loading(&self) -> bool {
        self.flags() & raw::REDISMODULE_CTX_FLAGS_LOADING != 0
    }

    pub fn is_replica(&self) -> bool {
        self.flags() & raw::REDISMODULE_CTX_FLAGS_SLAVE != 0
    }

    pub fn is_replica_or_loading(&self) -> bool {
        self.flags() & (raw::REDISMODULE_CTX_FLAGS_SLAVE | raw::REDISMODULE_CTX_FLAGS_LOADING) != 0
    }

    /// A server setting's value as `CONFIG GET name` answers it; `None` if
    /// the server has no such setting.
    pub fn config_get(&self, name: &std::ffi::CStr) -> Option<String> {
        // SAFETY: the format "cc" matches the two C-string arguments; the
        // reply is read while alive (element 1 of the [name, value] array:
        // its bytes are copied out) and freed before returning.
        unsafe {
            let reply = api(raw::RedisModule_Call)(
                self.ctx,
                c"CONFIG".as_ptr(),
                c"cc".as_ptr(),
                c"GET".as_ptr(),
                name.as_ptr(),
            );
            if reply.is_null() {
                return None;
            }
            let value = api(raw::RedisModule_CallReplyArrayElement)(reply, 1);
            let text = if value.is_null() {
                None
            } else {
                let mut len: usize = 0;
                let ptr = api(raw::RedisModule_CallReplyStringPtr)(value, &mut len);
                (!ptr.is_null()).then(|| {
                    String::from_utf8_lossy(slice::from_raw_parts(ptr.cast::<u8>(), len)).into_owned()
                })
            };
            api(raw::RedisModule_FreeCallReply)(reply);
            text
        }
    }

    /// The text of a two-word command's string reply (`CLUSTER NODES`);
    /// `None` if it fails or answers something else.
    pub fn call_text(&self, command: &std::ffi::CStr, sub: &std::ffi::CStr) -> Option<String> {
        // SAFETY: the format "c" matches the one C-string argument; the
        // reply's bytes are copied out while it lives, and it is freed
        // before returning.
        unsafe {
            let reply = api(raw::RedisModule_Call)(self.ctx, command.as_ptr(), c"c".as_ptr(), sub.as_ptr());
            if reply.is_null() {
                return None;
            }
            let mut len: usize = 0;
            let ptr = api(raw::RedisModule_CallReplyStringPtr)(reply, &mut len);
            let text = (!ptr.is_null())
                .then(|| String::from_utf8_lossy(slice::from_raw_parts(ptr.cast::<u8>(), len)).into_owned());
            api(raw::RedisModule_FreeCallReply)(reply);
            text
        }
    }

    /// Replicates `<command> <args...>` (two or three arguments), a
    /// command with no key (`LOCK.QUARANTINED`), from a timer.
    pub fn replicate_keyless(&self, command: &std::ffi::CStr, args: &[&[u8]]) {
        // SAFETY: ctx is the live context of a timer or a callback; each
        // format matches its buffers with their lengths (copied by Redis).
        unsafe {
            match args {
                [a, b] => {
                    api(raw::RedisModule_Replicate)(
                        self.ctx,
                        command.as_ptr(),
                        c"bb".as_ptr(),
                        a.as_ptr().cast::<c_char>(),
                        a.len(),
                        b.as_ptr().cast::<c_char>(),
                        b.len(),
                    );
                }
                [a, b, c] => {
                    api(raw::RedisModule_Replicate)(
                        self.ctx,
                        command.as_ptr(),
                        c"bbb".as_ptr(),
                        a.as_ptr().cast::<c_char>(),
                        a.len(),
                        b.as_ptr().cast::<c_char>(),
                        b.len(),
                        c.as_ptr().cast::<c_char>(),
                        c.len(),
                    );
                }
                _ => {}
            }
        }
    }

    /// Replicates `LOCK.FENCE <key> <owner> <fence>` after a grant of the
    /// call's key that took the counter above what the AOF and replicas
    /// hold (see `Fencer::to_keep`): a replica or an AOF replay applies the
    /// counter raise alone.
    pub fn replicate_raise(&self, owner: &[u8], fence: u64) {
        let mut digits = itoa::Buffer::new();
        self.replicate_on_key(c"LOCK.FENCE", owner, digits.format(fence).as_bytes());
    }

    /// Replicates `LOCK.FORGOTTEN <key> <until_ms> <event>` for the call's
    /// key, from the keyspace notification of the command that removed its
    /// lock: Redis propagates it with that command, so the AOF and replicas
    /// hold the removal quarantine with the removal.
    pub fn replicate_forgotten(&self, until_ms: i64, event: &[u8]) {
        let mut digits = itoa::Buffer::new();
        self.replicate_on_key(c"LOCK.FORGOTTEN", digits.format(until_ms).as_bytes(), event);
    }

    /// Replicates `<command> <the call's key> <first> <second>`.
    fn replicate_on_key(&self, command: &std::ffi::CStr, first: &[u8], second: &[u8]) {
        // SAFETY: ctx is the live context of a command call, a notification
        // or a timer; the format "sbb" matches the key name and two buffers
        // with their lengths (copied by Redis).
        unsafe {
            api(raw::RedisModule_Replicate)(
                self.ctx,
                command.as_ptr(),
                c"sbb".as_ptr(),
                self.key,
                first.as_ptr().cast::<c_char>(),
                first.len(),
                second.as_ptr().cast::<c_char>(),
                second.len(),
            );
        }
    }

    /// Replicates the command exactly as the client sent it.
    pub fn replicate_verbatim(&self) {
        // SAFETY: ctx is the live context of a command call.
        unsafe {
            api(raw::RedisModule_ReplicateVerbatim)(self.ctx);
        }
    }

    /// Announces a freed lock on the key's channel (not replicated), as
    /// [`lock_protocol::freed`] names it: `PUBLISH` on
    /// `__lock@<db>__:<key>` on a single master; in a cluster a sharded
    /// message (`SPUBLISH`), which reaches only the nodes of the key's
    /// shard, where a classic one would be sent to every node. Built to
    /// cost little when nobody listens: the channel name goes through a
    /// reused buffer and the two possible messages are created once.
    pub fn publish_freed(&self, reason: Freed) {
        thread_local! {
            static CHANNEL: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
        }
        // Cluster mode is set at start-up and cannot change: read once.
        static CLUSTER: OnceLock<bool> = OnceLock::new();
        let cluster = *CLUSTER.get_or_init(|| self.in_cluster());
        let message = constant(match reason {
            Freed::Released => Constant::Released,
            Freed::Expired => Constant::Expired,
        });
        let db = self.db();
        CHANNEL.with_borrow_mut(|channel| {
            let how = freed::channel_into(channel, db, self.key_name(), cluster);
            // SAFETY: ctx is live; the channel string is created and freed
            // here; the message strings live forever (`constant`). Both
            // publish entries are checked present at load (`missing_api`),
            // and the API table is only read after it.
            unsafe {
                let publish = match how {
                    Announce::Classic => raw::RedisModule_PublishMessage,
                    Announce::Sharded => raw::RedisModule_PublishMessageShard,
                };
                let channel = api(raw::RedisModule_CreateString)(
                    self.ctx,
                    channel.as_ptr().cast::<c_char>(),
                    channel.len(),
                );
                api(publish)(self.ctx, channel, message);
                api(raw::RedisModule_FreeString)(self.ctx, channel);
            }
        });
    }
}

/// The ACL user of a call's client, to ask which key names it may read
/// ([`Call::key_reader`]); freed on drop. `None`: the user could not be
/// read (a script, another module's call, a server without the API), and
/// no key may be shown.
pub struct KeyReader(Option<*mut raw::RedisModuleUser>);

impl KeyReader {
    /// Whether the user may read `key` (its ACL key patterns, `%R~` or
    /// `~`).
    pub fn may_read(&self, key: &[u8]) -> bool {
        let Some(user) = self.0 else { return false };
        let key = OwnedString::new(key);
        // SAFETY: `user` is a live module user (freed only in drop), the key
        // a live string; the flag is a key-spec access flag the API takes.
        let checked = unsafe {
            api(raw::RedisModule_ACLCheckKeyPermissions)(
                user,
                key.ptr(),
                raw::REDISMODULE_CMD_KEY_ACCESS as c_int,
            )
        };
        checked == raw::REDISMODULE_OK as c_int
    }
}

impl Drop for KeyReader {
    fn drop(&mut self) {
        if let Some(user) = self.0.take() {
            // SAFETY: obtained from GetModuleUserFromUserName, freed once.
            unsafe { api(raw::RedisModule_FreeModuleUser)(user) };
        }
    }
}
