//! Every error reply the module sends, in one place. Each line starts with
//! its code (`ERR`, `WRONGTYPE`, ...) as Redis clients expect. An `ERR`
//! line is written here without the command; [`of_command`] names it
//! (`ERR lock.acquire: ...`) as the reply leaves, so that every `ERR`,
//! also one sent to a waiter later, says which command it answers.

use lock_protocol::code::{EVICTION, MAXWAITERS, QUARANTINE, TRYAGAIN, WRONGTYPE};

use crate::core::args::{ArgError, Shown};
use crate::core::forgetting::ALL_DBS;
use crate::core::kind::{Mode, Want, HOLDS_MAX};
use crate::core::lock::Grant;
use crate::core::quarantine::{Reason, Refusal};

/// The start of Redis' own arity error, which names the command its own
/// way (`ERR wrong number of arguments for 'lock.acquire' command`): Redis
/// answers it itself for too few arguments, and the module's own arity
/// errors read the same.
const ARITY: &str = "wrong number of arguments for '";

/// A malformed call: arity, integers, ranges, tokens, options.
pub fn bad_args(command: &str, error: &ArgError) -> String {
    match error {
        ArgError::Arity => arity(command.as_bytes()),
        other => format!("ERR {other}"),
    }
}

pub fn arity(command: &[u8]) -> String {
    format!("ERR {ARITY}{}' command", String::from_utf8_lossy(command).to_lowercase())
}

/// An error line as it leaves for a client of `command` (`lock.acquire`):
/// an `ERR` line names the command first (`ERR lock.acquire: ...`); Redis'
/// arity text names it already, and the other codes stand alone.
pub fn of_command(command: &str, line: String) -> String {
    match line.strip_prefix("ERR ") {
        Some(rest) if !rest.starts_with(ARITY) => format!("ERR {command}: {rest}"),
        _ => line,
    }
}

/// The key exists but holds something that is not a lock at all.
pub fn not_a_lock() -> String {
    format!("{WRONGTYPE} Operation against a key holding the wrong kind of value (not a lock)")
}

/// The key holds a lock of another kind (plain, reentrant, shared,
/// semaphore).
pub fn wrong_kind(found: &str, wanted: &str) -> String {
    format!(
        "{WRONGTYPE} Operation against a key holding the wrong kind of value (a {found} lock, this command needs a {wanted} lock)"
    )
}

/// LOCK.SEMAPHORE with a permit count other than the existing semaphore's.
pub fn limit_mismatch(limit: u32, asked: u32) -> String {
    format!("ERR this semaphore has {limit} permits, not {asked} (the count is fixed while it has holders)")
}

/// A token asked for one mode of a read-write lock while it holds the
/// other.
pub fn mode_mismatch(held: Mode) -> String {
    format!("ERR this token already holds the lock in {} mode; release it first", held.name())
}

/// LOCK.ENTER past the hold bound.
pub fn too_many_holds(max: u32) -> String {
    format!("ERR too many holds: a reentrant lock may be entered at most {max} times")
}

/// Redis refused a key write (should not happen on a writable master).
pub fn write_failed() -> String {
    "ERR the key could not be written".into()
}

/// A panic was caught at the command boundary.
pub fn internal() -> String {
    "ERR internal error of the lock module (see the server log)".into()
}

/// WAIT refused: the key already has `lock.max-waiters` waiters.
pub fn too_many_waiters(max: usize) -> String {
    format!("{MAXWAITERS} too many clients waiting for this lock (lock.max-waiters is {max})")
}

/// WAIT refused: the node-wide bound on waiters is reached.
pub fn too_many_waiters_node(max: usize) -> String {
    format!("{MAXWAITERS} too many clients waiting on this node (limit {max})")
}

/// A waiter whose key now belongs to another cluster node (its slot was
/// migrated while it waited): it must send the command again, and the
/// server's own MOVED / ASK redirect then takes it to the new owner.
pub fn slot_moved() -> String {
    format!("{TRYAGAIN} the lock's hash slot moved to another node while this client waited; send the command again")
}

/// Redis refused to block the client.
pub fn cannot_block() -> String {
    "ERR this client cannot be blocked".into()
}

/// A grant refused because the node is in quarantine. The milliseconds
/// come last (clients read them there).
pub fn quarantined(reason: Reason, left_ms: i64) -> String {
    match reason {
        Reason::Startup => format!(
            "{QUARANTINE} {} (locks it granted before may be lost: no appendfsync always; on a brand-new node \
             LOCK.UNQUARANTINE STARTUP ends it, on a restarted one that can grant a lock twice), \
             refusing new locks for {left_ms} ms",
            reason.describe()
        ),
        Reason::Promotion => format!("{QUARANTINE} {}, refusing new locks for {left_ms} ms", reason.describe()),
    }
}

/// LOCK.UNQUARANTINE with no start-up or promotion quarantine in force.
/// A client sent a command that only the module writes, into its own AOF
/// and replication stream (`LOCK.FORGOTTEN`).
pub fn replication_only() -> String {
    "ERR this command is written by the module into its AOF and replication stream only; \
     it is not for clients"
        .into()
}

pub fn no_quarantine() -> String {
    "ERR no start-up or promotion quarantine is in force on this node (INFO lock: lock_quarantine:0): nothing to end"
        .into()
}

/// LOCK.UNQUARANTINE naming another quarantine than the one in force.
pub fn other_quarantine(in_force: Reason, named: Reason, left_ms: i64) -> String {
    format!(
        "ERR the quarantine in force is {} ({}, {left_ms} ms left), not {}: nothing ended",
        in_force.name().to_ascii_uppercase(),
        in_force.describe(),
        named.name().to_ascii_uppercase()
    )
}

/// Why a new grant of a free key is refused now.
pub fn refused(refusal: &Refusal) -> String {
    match refusal {
        Refusal::Node(reason, left_ms) => quarantined(*reason, *left_ms),
        Refusal::Forgotten(q, left_ms) => {
            let scope = if q.key {
                "on this key"
            } else if q.db == ALL_DBS {
                "in every database"
            } else {
                "in this database"
            };
            format!("{QUARANTINE} {}, refusing new locks {scope} for {left_ms} ms", q.cause.describe(q.db))
        }
        Refusal::Evictable(policy) => evictable(policy),
        Refusal::Importing(wait, left_ms) => {
            let how_long = if *left_ms < 0 {
                "while the import runs, and lock.quarantine-ms after it ends".to_string()
            } else {
                format!("for {left_ms} ms")
            };
            format!(
                "{QUARANTINE} this key's slot {} was imported by this node: a lock of it released on its \
                 previous master may have had a token ahead of this node's clock, so new locks in the slot \
                 wait until lock.quarantine-ms has run since the import ended (a lock that moved with the slot \
                 is not held back), refusing new locks on this key {how_long}",
                wait.slot
            )
        }
    }
}

/// A grant refused because `maxmemory-policy` may evict lock keys.
pub fn evictable(policy: &str) -> String {
    format!(
        "{EVICTION} maxmemory-policy {policy} with maxmemory set can evict lock keys, so new locks are refused: \
         set maxmemory-policy noeviction (or maxmemory 0), or lock.eviction-mode quarantine on an instance shared \
         with a cache"
    )
}

/// A stored value that reads as a lock whose deadline lies further ahead
/// than any grant could have set: not written by this module.
pub fn deadline_too_far(ahead_ms: i64, max_ms: i64) -> String {
    format!(
        "{WRONGTYPE} Operation against a key holding the wrong kind of value (a lock value this module could not \
         have written: its deadline is {ahead_ms} ms ahead, more than lock.max-ttl-ms + \
         lock.clock-jump-tolerance-ms = {max_ms} ms; LOCK.REVOKE removes it)"
    )
}

/// Why a grant of `want` was refused, for the refusals that waiting cannot
/// cure (`Busy` and `Quarantined` are answered otherwise).
pub fn grant_refused(why: Grant, want: Want) -> String {
    match why {
        Grant::WrongKind { found } => wrong_kind(found.name(), want.kind.name()),
        Grant::LimitMismatch { limit } => limit_mismatch(limit, want.limit),
        Grant::ModeMismatch { held } => mode_mismatch(held),
        Grant::TooManyHolds => too_many_holds(HOLDS_MAX),
        Grant::Granted(_) | Grant::Renewed(_) | Grant::Busy | Grant::Quarantined => internal(),
    }
}

/// An error about one key of a multi-key call (LOCK.MACQUIRE,
/// LOCK.RENEW, LOCK.MRELEASE; `at` counts from 0): the line says which
/// key, by its position among the call's keys and its name (shown
/// bounded).
pub fn in_set(line: &str, at: usize, key: &[u8]) -> String {
    format!("{line} (key #{} of the set, {})", at.saturating_add(1), Shown::of(key))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn err_lines_name_their_command_once() {
        let named = |line: &str| of_command("lock.semaphore", line.to_string());
        assert_eq!(
            named(&limit_mismatch(2, 3)),
            "ERR lock.semaphore: this semaphore has 2 permits, not 3 (the count is fixed while it has holders)"
        );
        assert_eq!(
            named(&bad_args("lock.semaphore", &ArgError::EmptyToken { what: "token" })),
            "ERR lock.semaphore: token must not be empty"
        );
        let arity = bad_args("lock.semaphore", &ArgError::Arity);
        assert_eq!(
            named(&arity),
            "ERR wrong number of arguments for 'lock.semaphore' command",
            "Redis' own text"
        );
        assert_eq!(named(&not_a_lock()), not_a_lock(), "other codes stand alone");
        assert_eq!(named(&write_failed()), "ERR lock.semaphore: the key could not be written");
    }

    #[test]
    fn a_key_of_a_set_is_named_by_position_and_name() {
        assert_eq!(
            in_set(&not_a_lock(), 1, b"cfg:b"),
            "WRONGTYPE Operation against a key holding the wrong kind of value (not a lock) (key #2 of the set, 'cfg:b')"
        );
        let long = vec![b'k'; 200];
        assert!(in_set(&not_a_lock(), 0, &long).ends_with("...(cut, 200 bytes))"));
    }
}
