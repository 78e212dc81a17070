//! The commands, one file each: its definition (name, usage, flags, arity,
//! keys, summary), its handler, and its parser (or a pointer to the shared
//! one in `core/src/args.rs`). Each handler is a few lines: parse, run one
//! transition of the state machine (`core::lock`) through the key-state
//! layer, answer. The decisions are all in `core`.
//!
//! Adding a command: write its file (a `COMMAND` and its handler), and add
//! its name to the list in [`commands!`] below. `lib.rs` registers every
//! command of the list.
//!
//! Shared here: a call's context ([`Cx`]: the call, its command, the node,
//! and the one instant the whole call works at), the read and write
//! helpers, and what follows a write (waiters, pub/sub).

use std::ffi::{c_int, CStr};

use crate::clock;
use crate::core::args::ArgError;
use crate::core::lock::Admission;
use crate::core::quarantine::Refusal;
use crate::core::syntax::{self, Arg};
use crate::core::txn::Txn;
use crate::core::waiting;
use crate::errors;
use crate::ffi::{self, Call, Freed, Keys, RawArgv, RawCtx, Reply};
use crate::keystate::{self, Failure, Loaded, Written};
use crate::node::{Node, NODE};
use crate::waiting as wait;

mod grant;

/// A command's definition: what Redis is told at registration, and the
/// handler.
pub struct Command {
    /// The name, lowercase (`lock.acquire`); error replies start with it.
    pub name: &'static CStr,
    /// The arguments after the name: Redis is told them (`COMMAND DOCS`,
    /// redis-cli's hints), and the usage line is rendered from them
    /// ([`Command::usage`]; docs/commands.md shows the same line).
    pub args: &'static [Arg],
    /// How the cost grows, for `COMMAND DOCS` (`O(1)`, `O(N) where ...`).
    pub complexity: &'static CStr,
    /// Redis command flags (`write deny-oom`, `readonly fast`, ...).
    pub flags: &'static CStr,
    /// ACL categories, space-separated (`read fast`): `read` or `write` as
    /// the flags say, `fast` exactly where the flags say `fast` (O(1), never
    /// blocks; 2-3 us a call, as `SET`), else `slow` (may block with
    /// `WAIT`: also `blocking`; or works on many keys or entries). The
    /// module's own `lock` category is added to every command at
    /// registration where the server can create it ([`ACL_CATEGORY`]).
    /// Redis 7.0 has no such API: there ACL rules name the commands.
    pub acl: &'static CStr,
    /// Redis arity: positive = exact, negative = at least.
    pub arity: c_int,
    /// Where the keys are.
    pub keys: Keys,
    /// REDISMODULE_CMD_KEY_* flags of the keys (see [`key_flags`]).
    pub key_flags: u64,
    pub summary: &'static CStr,
    pub run: fn(&Cx<'_>, &[&[u8]]) -> Reply,
}

/// The module version every command came with (`COMMAND DOCS`' `since`).
pub const SINCE: &CStr = c"0.1.0";

/// The ACL category every command of the module is in (`+@lock`,
/// `-@lock`), where the server lets a module add one (Redis 7.4+, Valkey).
pub const ACL_CATEGORY: &CStr = c"lock";

/// Key-spec flags (REDISMODULE_CMD_KEY_*), see redismodule.h.
pub mod key_flags {
    pub const RO: u64 = 1 << 0;
    pub const RW: u64 = 1 << 1;
    pub const ACCESS: u64 = 1 << 4;
    pub const UPDATE: u64 = 1 << 5;
    pub const DELETE: u64 = 1 << 7;
}

impl Command {
    /// The name as text (`lock.acquire`).
    pub fn label(&self) -> &'static str {
        self.name.to_str().unwrap_or("lock")
    }

    /// The usage line (`LOCK.ACQUIRE key token ttl-ms [WAIT timeout-ms]`).
    pub fn usage(&self) -> String {
        syntax::usage(self.name, self.args)
    }
}

/// The entry point Redis calls for a command.
pub type Entry = extern "C" fn(RawCtx, RawArgv, c_int) -> c_int;

/// Declares the command files and lists them with their entry points.
macro_rules! commands {
    ($($name:ident),* $(,)?) => {
        $(pub mod $name;)*

        /// Every command with its entry point, in registration order.
        pub const ALL: &[(&Command, Entry)] = &[$((&$name::COMMAND, entry::$name as Entry)),*];

        /// One `extern "C"` entry point per command (Redis passes no
        /// context of ours, so each command gets its own).
        mod entry {
            use super::*;
            $(pub extern "C" fn $name(ctx: RawCtx, argv: RawArgv, argc: c_int) -> c_int {
                dispatch(&$name::COMMAND, ctx, argv, argc)
            })*
        }
    };
}

commands! {
    acquire, enter, shared, exclusive, semaphore, macquire,
    release, mrelease, extend, renew, exit, fence,
    check, info, waiters, contended, revoke, unquarantine, forgotten, quarantined,
}

/// Runs `command` for a call: its context is built here, with the one
/// instant (module clock) the whole call works at.
fn dispatch(command: &'static Command, ctx: RawCtx, argv: RawArgv, argc: c_int) -> c_int {
    let run = |call: &Call<'_>, args: &[&[u8]]| {
        let cx = Cx { call, command, node: &NODE, now_ms: clock::now_ms() };
        (command.run)(&cx, args)
    };
    match command.keys {
        Keys::Counted { at } => {
            ffi::dispatch_counted_keys(ctx, argv, argc, usize::try_from(at).unwrap_or(0), run)
        }
        _ => ffi::dispatch(ctx, argv, argc, run),
    }
}

/// A command call: the call (its key is the first key), the command, the
/// node, and the call's instant on the module clock (read once, at its
/// start: every decision of the call is made at the same "now").
pub struct Cx<'a> {
    pub call: &'a Call<'a>,
    pub command: &'static Command,
    pub node: &'static Node,
    pub now_ms: i64,
}

impl<'a> Cx<'a> {
    /// The same call, on another key (the keys of a multi-key command).
    pub fn on<'b>(&self, call: &'b Call<'b>) -> Cx<'b> {
        Cx { call, command: self.command, node: self.node, now_ms: self.now_ms }
    }

    /// Why a newcomer may not be granted the key now, though it is free: a
    /// quarantine (of the node, the database or the key) or the eviction
    /// guard.
    pub fn refusal(&self) -> Option<Refusal> {
        self.node.refusal(self.call.db(), self.call.key_name(), self.now_ms)
    }

    /// Whether a newcomer may be granted the key now (the waiting policy).
    pub fn admission(&self, refused: bool) -> Admission {
        // Only pay for the key name when someone waits or may wait.
        let queued = if !refused && self.node.any_waiters() {
            wait::queued(self.node, &self.call.key_id())
        } else {
            0
        };
        waiting::admission(refused, queued)
    }

    /// Clients waiting for the key.
    pub fn waiters(&self) -> i64 {
        if !self.node.any_waiters() {
            return 0;
        }
        i64::try_from(wait::queued(self.node, &self.call.key_id())).unwrap_or(i64::MAX)
    }

    /// A malformed call: counted, answered with the command's name and what
    /// is wrong.
    pub fn rejected(&self, error: &ArgError) -> Reply {
        self.refused(errors::bad_args(self.command.label(), error))
    }

    /// A refused call (counted).
    pub fn refused(&self, line: String) -> Reply {
        self.node.stats.rejected.bump();
        Reply::Error(line)
    }

    /// The reply for a key that could not be used.
    pub fn failed(&self, failure: Failure) -> Reply {
        match failure {
            Failure::WriteFailed => Reply::Error(failure.line()),
            wrong => self.refused(wrong.line()),
        }
    }

    /// Runs a writing transition on the key; then hands a freed lock to its
    /// waiters. `Err` is the error reply (not a lock, write refused).
    pub fn write<'o, T>(
        &self,
        transition: impl for<'s, 'k> FnOnce(&mut Txn<'s, 'o, Loaded<'k, 'a>>) -> T,
    ) -> Result<T, Reply> {
        let (answer, written, key) =
            keystate::transact(self.call, self.node, self.now_ms, transition).map_err(|f| self.failed(f))?;
        drop(key);
        self.after_write(written);
        Ok(answer)
    }

    /// Reads the lock at the key without writing; `Err` is the WRONGTYPE
    /// reply when it is not a lock (or not one this module wrote).
    pub fn read(&self, f: impl FnOnce(&Loaded<'_, '_>) -> Reply) -> Result<Reply, Reply> {
        let Some(key) = self.call.open_key(false) else { return Ok(f(&Loaded::Free(Default::default()))) };
        let rules = self.node.rules(self.now_ms);
        let lock = keystate::load(&key, &rules).map_err(|failure| self.failed(failure))?;
        let reply = f(&lock);
        match lock.too_far(&rules) {
            Some(failure) => Err(self.failed(failure)),
            None => Ok(reply),
        }
    }

    /// The calls on the keys at `argv[from..]`, once each holds a lock (or
    /// nothing): a key that holds something else refuses the whole call
    /// before anything is written (`Err`: the reply).
    pub fn all_locks(&self, from: usize, count: usize) -> Result<Vec<Call<'a>>, Reply> {
        let calls: Vec<Call<'a>> =
            (from..from.saturating_add(count)).map(|index| self.call.for_arg(index)).collect();
        for (at, key_call) in calls.iter().enumerate() {
            self.on(key_call).read(|_| Reply::Nil).map_err(|reply| at_key(reply, at, key_call))?;
        }
        Ok(calls)
    }

    /// After a write (the key closed again): count expiries found, serve
    /// the key's waiters, and tell pub/sub subscribers when a lock was freed
    /// and nobody took it.
    pub fn after_write(&self, written: Written) {
        if written.found_expired {
            self.node.stats.expiries.bump();
        } else if written.freed {
            // Released by its holder: a lock that arrived by a migration
            // was not behind its holder's lease.
            self.node.lock_released(self.call.db(), self.call.key_name());
        }
        let handed_off = wait::serve_key(self.call, self.node, self.now_ms);
        let publish = self.node.settings.publish_freed.load(std::sync::atomic::Ordering::Relaxed);
        if written.freed && !handed_off && publish {
            self.call.publish_freed(if written.found_expired { Freed::Expired } else { Freed::Released });
        }
    }

    /// A grant refused because the key is held (or queued for): counted,
    /// and the key noted among the most contended.
    pub fn contended(&self) {
        self.node.stats.record_contended(self.call.db(), self.call.key_name(), self.now_ms);
    }
}

/// An error reply about the key at `at` of a multi-key call, naming it
/// (see [`errors::in_set`]); other replies as they are.
pub fn at_key(reply: Reply, at: usize, key: &Call<'_>) -> Reply {
    match reply {
        Reply::Error(line) => Reply::Error(errors::in_set(&line, at, key.key_name())),
        other => other,
    }
}

/// From a node's first grant on, every change to a key by another command
/// must be seen (a lock removed behind the module's back quarantines its
/// key): keyspace events are subscribed to then, so that a node that never
/// holds a lock pays nothing for them. Off (`lock.removal-quarantine no`):
/// nothing to watch for (waiters subscribe on their own), so a benchmark's
/// baseline commands on the same server pay no keyspace callback.
pub fn watch_for_removal(call: &Call<'_>, node: &Node) {
    if !node.settings.removal_quarantine.load(std::sync::atomic::Ordering::Relaxed) {
        return;
    }
    if let Err(e) = ffi::watch_keys(call) {
        redis_module::logging::log_warning(format!("lock: {e}"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(text: &CStr) -> Vec<&str> {
        text.to_str().unwrap_or_default().split(' ').collect()
    }

    #[test]
    fn acl_categories_agree_with_the_flags() {
        for &(command, _) in ALL {
            let (flags, acl) = (words(command.flags), words(command.acl));
            let name = command.label();
            assert_eq!(flags.contains(&"readonly"), acl.contains(&"read"), "{name}: readonly <=> @read");
            assert_eq!(flags.contains(&"write"), acl.contains(&"write"), "{name}: write <=> @write");
            assert_eq!(flags.contains(&"fast"), acl.contains(&"fast"), "{name}: fast <=> @fast");
            assert_ne!(acl.contains(&"fast"), acl.contains(&"slow"), "{name}: @fast or @slow");
            let waits = command.usage().contains("[WAIT timeout-ms]");
            assert_eq!(waits, acl.contains(&"blocking"), "{name}: may block (WAIT) <=> @blocking");
            let operator = [lock_protocol::command::REVOKE, lock_protocol::command::UNQUARANTINE]
                .contains(&command.name);
            assert_eq!(operator, acl.contains(&"admin") && acl.contains(&"dangerous"), "{name}");
            assert!(!acl.contains(&"lock"), "{name}: the module's category is added at registration");
        }
    }

    #[test]
    fn the_command_reference_gives_each_usage_line() {
        // COMMAND DOCS lists the same arguments (tests/discover.rs, on
        // every server).
        let docs = include_str!("../../docs/commands.md");
        for &(command, _) in ALL {
            let heading = format!("### {}\n\n`{}`\n", command.label().to_ascii_uppercase(), command.usage());
            assert!(docs.contains(&heading), "docs/commands.md lacks:\n{heading}");
        }
    }
}
