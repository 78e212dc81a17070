//! Every error reply the module sends, in one place. Each line starts with
//! its code (`ERR`, `WRONGTYPE`, ...) as Redis clients expect.

use crate::core::args::ArgError;
use crate::core::lock::Kind;
use crate::core::quarantine::Reason;

/// A malformed call: arity, integers, ranges, tokens, options.
pub fn bad_args(command: &str, error: &ArgError) -> String {
    match error {
        ArgError::Arity => format!("ERR wrong number of arguments for '{command}' command"),
        other => format!("ERR {command}: {other}"),
    }
}

pub fn arity(command: &[u8]) -> String {
    format!("ERR wrong number of arguments for '{}' command", String::from_utf8_lossy(command).to_lowercase())
}

/// The key exists but holds something that is not a lock at all.
pub fn not_a_lock() -> String {
    "WRONGTYPE Operation against a key holding the wrong kind of value (not a lock)".into()
}

/// The key holds a lock of the other kind (plain vs reentrant).
pub fn wrong_kind(found: Kind, wanted: Kind) -> String {
    format!(
        "WRONGTYPE Operation against a key holding the wrong kind of value (a {} lock, this command needs a {} lock)",
        found.name(),
        wanted.name()
    )
}

/// LOCK.ENTER past the hold bound.
pub fn too_many_holds(max: u32) -> String {
    format!("ERR too many holds: a reentrant lock may be entered at most {max} times")
}

/// Redis refused a key write (should not happen on a writable master).
pub fn write_failed() -> String {
    "ERR lock module: the key could not be written".into()
}

/// A panic was caught at the command boundary.
pub fn internal() -> String {
    "ERR lock module: internal error (see the server log)".into()
}

/// WAIT refused: the key already has `lock.max-waiters` waiters.
pub fn too_many_waiters(max: usize) -> String {
    format!("MAXWAITERS too many clients waiting for this lock (lock.max-waiters is {max})")
}

/// WAIT refused: the node-wide bound on waiters is reached.
pub fn too_many_waiters_node(max: usize) -> String {
    format!("MAXWAITERS too many clients waiting on this node (limit {max})")
}

/// Redis refused to block the client.
pub fn cannot_block() -> String {
    "ERR lock module: this client cannot be blocked".into()
}

/// A grant refused because the node is in quarantine.
pub fn quarantined(reason: Reason, left_ms: i64) -> String {
    format!("QUARANTINE {}, refusing new locks for {left_ms} ms", reason.describe())
}
