//! What one node answered: the reply as it came ([`Raw`]) and what it means
//! for the round it belongs to ([`Answer`]), read by the round's command
//! (a grant's fencing token, a 1/0 flag, a set's flags, a hold count).

/// What one node's reply looked like at the transport level.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Raw {
    Int(i64),
    Nil,
    /// An array (`LOCK.RENEW`, `LOCK.MRELEASE`), or the replies of a
    /// pipeline in order (the fencing round of a set): one entry per key.
    Array(Vec<Raw>),
    /// Any other well-formed reply (a string, ...).
    Other(String),
    /// An error reply: its code (`ERR`, `WRONGTYPE`, `QUARANTINE`, ...) and
    /// the rest of the line.
    ServerError {
        code: String,
        detail: String,
    },
    /// No reply within the per-node timeout (the command may have run).
    TimedOut,
    /// No connection, or the connection broke (the command may have run).
    Unreachable(String),
    /// A cluster member could not route the call (`CLUSTERDOWN`, no master
    /// for the slot, too many redirects, no seed answered): why, naming
    /// the member. The command did not run.
    ClusterUnavailable(String),
}

/// One node's answer to one quorum round, after interpretation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answer {
    /// Granted (with this fencing token), or 1 for FENCE/EXTEND/RELEASE.
    Yes(u64),
    /// Held by another token (ACQUIRE/ENTER), or "not the holder" (0 / nil).
    No,
    /// The node refuses grants for now; the milliseconds left when known.
    Quarantined(Option<u64>),
    TimedOut,
    Unreachable(String),
    /// A cluster member could not route the call: why, naming the member.
    ClusterUnavailable(String),
    /// An error reply that refuses the request itself (see
    /// [`refuses_request`]): the node would answer the same request the
    /// same way again, however long the caller waited.
    Refused(String),
    /// Any other error reply, or an unexpected reply.
    Failed(String),
}

/// Interprets a reply to `LOCK.ACQUIRE` or `LOCK.ENTER`.
pub fn classify_grant(raw: &Raw) -> Answer {
    match raw {
        Raw::Int(token) if *token > 0 => Answer::Yes(*token as u64),
        Raw::Nil => Answer::No,
        other => classify_failure(other),
    }
}

/// Interprets a 1/0 reply (`LOCK.FENCE`, `LOCK.EXTEND`, `LOCK.RELEASE`).
pub fn classify_flag(raw: &Raw) -> Answer {
    match raw {
        Raw::Int(1) => Answer::Yes(1),
        Raw::Int(0) => Answer::No,
        other => classify_failure(other),
    }
}

/// Interprets one node's per-key 1/0 replies for a set of keys
/// (`LOCK.RENEW`, `LOCK.MRELEASE`, or the pipelined `LOCK.FENCE`s of the
/// fencing round): yes only when every key answered 1, so that a node
/// counts towards a set's quorum only if it did the whole set. Any error
/// among them is the node's answer (the first one); else any 0 makes it a
/// no (that node no longer holds the whole set).
pub fn classify_every_flag(raw: &Raw) -> Answer {
    let Raw::Array(flags) = raw else { return classify_failure(raw) };
    if flags.is_empty() {
        return Answer::Failed("unexpected empty array".into());
    }
    let mut answer = Answer::Yes(1);
    for flag in flags {
        match classify_flag(flag) {
            Answer::Yes(_) => {}
            Answer::No => answer = Answer::No,
            failure => return failure,
        }
    }
    answer
}

/// Interprets a reply to `LOCK.EXIT`: holds left, or nil (not the holder).
pub fn classify_exit(raw: &Raw) -> Answer {
    match raw {
        Raw::Int(left) if *left >= 0 => Answer::Yes(*left as u64),
        Raw::Nil => Answer::No,
        other => classify_failure(other),
    }
}

fn classify_failure(raw: &Raw) -> Answer {
    match raw {
        Raw::ServerError { code, detail } if code == lock_protocol::code::QUARANTINE => {
            Answer::Quarantined(quarantine_left_ms(detail))
        }
        Raw::ServerError { code, detail } if refuses_request(code, detail) => {
            Answer::Refused(error_text(code, detail))
        }
        Raw::ServerError { code, detail } => Answer::Failed(error_text(code, detail)),
        Raw::TimedOut => Answer::TimedOut,
        Raw::Unreachable(why) => Answer::Unreachable(why.clone()),
        Raw::ClusterUnavailable(why) => Answer::ClusterUnavailable(why.clone()),
        Raw::Int(n) => Answer::Failed(format!("unexpected integer reply {n}")),
        Raw::Nil => Answer::Failed("unexpected nil reply".into()),
        Raw::Other(what) => Answer::Failed(format!("unexpected reply {what}")),
        Raw::Array(items) => Answer::Failed(format!("unexpected array of {} replies", items.len())),
    }
}

/// Error codes that refuse the request itself: the module's `ERR` (a bad
/// call: an argument out of range, such as a TTL above
/// `lock.max-ttl-ms`; a bad option; a semaphore's permit count other than
/// its holders'; a mode this token does not hold), Redis's own `ERR` for a
/// command it does not know (the module is not loaded), `WRONGTYPE` (the
/// key is not a lock, or a lock of another kind), `CROSSSLOT`, and the
/// refusals of the URL's credentials or of the user's rights (`NOAUTH`,
/// `WRONGPASS`, `NOPERM`).
const REQUEST_REFUSALS: [&str; 6] =
    [lock_protocol::code::ERR, lock_protocol::code::WRONGTYPE, "CROSSSLOT", "NOAUTH", "WRONGPASS", "NOPERM"];

/// `ERR` lines about the node's state, not the request: the node may
/// accept the same request later (Redis' limit on clients; the module's
/// caught panic and failed key write, in `src/errors.rs`).
const NODE_STATE_ERRORS: [&str; 3] =
    ["max number of clients reached", "internal error of the lock module", "the key could not be written"];

/// Whether an error reply refuses the request itself, so that the node
/// would answer it the same way whenever it is sent again: `ERR` (but
/// for the few lines about the node's state), `WRONGTYPE`, `CROSSSLOT`,
/// `NOAUTH`, `WRONGPASS`, `NOPERM`. Every other code is about the node
/// now and may pass: `QUARANTINE`, `EVICTION`, `MAXWAITERS`, `TRYAGAIN`,
/// `MOVED` / `ASK` (a cluster member follows them), `LOADING`, `BUSY`,
/// `READONLY`, `MASTERDOWN`, `OOM`, `MISCONF`, ...
pub fn refuses_request(code: &str, detail: &str) -> bool {
    REQUEST_REFUSALS.contains(&code)
        && !(code == lock_protocol::code::ERR && NODE_STATE_ERRORS.iter().any(|line| detail.contains(line)))
}

/// A node's error reply as a message: its code and text, and for a server
/// that does not know the lock commands, what to do about it.
pub fn error_text(code: &str, detail: &str) -> String {
    let text = format!("{code} {detail}").trim().to_string();
    let unknown = code == lock_protocol::code::ERR
        && detail.get(..22).is_some_and(|head| head.eq_ignore_ascii_case("unknown command 'lock."));
    if unknown {
        format!(
            "{text} (the lock module is not loaded on that node: add `loadmodule /path/to/libredis_lock.so` \
             to its redis.conf and restart it, or MODULE LOAD it)"
        )
    } else {
        text
    }
}

/// The milliseconds in `node restarted, refusing new locks for 41250 ms`.
pub fn quarantine_left_ms(detail: &str) -> Option<u64> {
    let before_unit = detail.trim_end().strip_suffix("ms")?.trim_end();
    let digits_at = before_unit.rfind(|c: char| !c.is_ascii_digit()).map_or(0, |i| i + 1);
    before_unit[digits_at..].parse().ok()
}
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grant_replies_are_classified() {
        assert_eq!(classify_grant(&Raw::Int(17)), Answer::Yes(17));
        assert_eq!(classify_grant(&Raw::Nil), Answer::No);
        assert_eq!(
            classify_grant(&Raw::ServerError {
                code: "QUARANTINE".into(),
                detail: "node restarted, refusing new locks for 41250 ms".into()
            }),
            Answer::Quarantined(Some(41_250))
        );
        assert_eq!(
            classify_grant(&Raw::ServerError { code: "WRONGTYPE".into(), detail: "Operation".into() }),
            Answer::Refused("WRONGTYPE Operation".into())
        );
        assert_eq!(classify_grant(&Raw::TimedOut), Answer::TimedOut);
        let down = "member 2 (redis+cluster://h:1): CLUSTERDOWN The cluster is down";
        assert_eq!(
            classify_grant(&Raw::ClusterUnavailable(down.into())),
            Answer::ClusterUnavailable(down.into())
        );
        assert_eq!(
            classify_grant(&Raw::Unreachable("refused".into())),
            Answer::Unreachable("refused".into())
        );
        assert!(matches!(classify_grant(&Raw::Int(0)), Answer::Failed(_)), "0 is not a fencing token");
        assert!(matches!(classify_grant(&Raw::Other("OK".into())), Answer::Failed(_)));
    }

    #[test]
    fn a_server_without_the_module_is_named_as_such() {
        let raw = Raw::ServerError {
            code: "ERR".into(),
            detail: "unknown command 'lock.acquire', with args beginning with: 'deploy' ".into(),
        };
        let Answer::Refused(text) = classify_grant(&raw) else { panic!("a refusal") };
        assert!(text.starts_with("ERR unknown command 'lock.acquire', with args"), "{text}");
        assert!(text.ends_with("the lock module is not loaded on that node: add `loadmodule /path/to/libredis_lock.so` to its redis.conf and restart it, or MODULE LOAD it)"), "{text}");
        assert_eq!(error_text("ERR", "unknown command 'get2'"), "ERR unknown command 'get2'");
        assert_eq!(error_text("WRONGTYPE", "Operation"), "WRONGTYPE Operation");
    }

    #[test]
    fn flag_and_exit_replies_are_classified() {
        assert_eq!(classify_flag(&Raw::Int(1)), Answer::Yes(1));
        assert_eq!(classify_flag(&Raw::Int(0)), Answer::No);
        assert!(matches!(classify_flag(&Raw::Int(2)), Answer::Failed(_)));
        assert!(matches!(classify_flag(&Raw::Nil), Answer::Failed(_)));
        assert_eq!(classify_exit(&Raw::Int(0)), Answer::Yes(0));
        assert_eq!(classify_exit(&Raw::Int(3)), Answer::Yes(3));
        assert_eq!(classify_exit(&Raw::Nil), Answer::No);
        assert!(matches!(classify_exit(&Raw::Int(-1)), Answer::Failed(_)), "no count wraps to 2^64 - 1");
    }

    #[test]
    fn a_node_counts_for_a_set_only_when_every_key_answered_1() {
        let flags = |ns: &[i64]| Raw::Array(ns.iter().map(|n| Raw::Int(*n)).collect());
        assert_eq!(classify_every_flag(&flags(&[1, 1, 1])), Answer::Yes(1));
        assert_eq!(classify_every_flag(&flags(&[1, 0, 1])), Answer::No, "one key not held: not the set");
        assert_eq!(classify_every_flag(&flags(&[0, 0])), Answer::No);
        // An error among the replies (a pipelined FENCE on a key of
        // another kind) is the node's answer, even after a 0.
        let mixed = Raw::Array(vec![
            Raw::Int(0),
            Raw::ServerError { code: "WRONGTYPE".into(), detail: "x".into() },
            Raw::ServerError { code: "ERR".into(), detail: "y".into() },
        ]);
        assert_eq!(classify_every_flag(&mixed), Answer::Refused("WRONGTYPE x".into()));
        assert!(matches!(classify_every_flag(&flags(&[1, 2])), Answer::Failed(_)), "2 is no flag");
        assert!(matches!(classify_every_flag(&Raw::Array(vec![])), Answer::Failed(_)));
        // The whole command failing (WRONGTYPE, QUARANTINE, a timeout).
        assert_eq!(classify_every_flag(&Raw::TimedOut), Answer::TimedOut);
        assert_eq!(
            classify_every_flag(&Raw::ServerError { code: "QUARANTINE".into(), detail: "for 5 ms".into() }),
            Answer::Quarantined(Some(5))
        );
        assert!(matches!(classify_every_flag(&Raw::Int(1)), Answer::Failed(_)), "not an array");
        assert!(matches!(classify_flag(&flags(&[1])), Answer::Failed(_)), "an array is no single flag");
    }

    #[test]
    fn refusals_of_the_request_are_told_from_the_nodes_state() {
        let error = |code: &str, detail: &str| Raw::ServerError { code: code.into(), detail: detail.into() };
        for (code, detail) in [
            ("ERR", "lock.acquire: ttl-ms 60000 is out of range, must be 1..30000 (lock.max-ttl-ms)"),
            ("ERR", "wrong number of arguments for 'lock.acquire' command"),
            ("ERR", "unknown command 'lock.acquire', with args beginning with: 'k' "),
            ("ERR", "lock.semaphore: this semaphore has 3 permits, not 2 (the count is fixed while it has holders)"),
            ("WRONGTYPE", "Operation against a key holding the wrong kind of value (not a lock)"),
            ("CROSSSLOT", "Keys in request don't hash to the same slot"),
            ("NOAUTH", "Authentication required."),
            ("NOPERM", "User u has no permissions to run the 'lock.acquire' command"),
        ] {
            assert!(refuses_request(code, detail), "{code} {detail}");
            assert!(matches!(classify_grant(&error(code, detail)), Answer::Refused(_)), "{code} {detail}");
            assert!(matches!(classify_flag(&error(code, detail)), Answer::Refused(_)), "{code} {detail}");
        }
        for (code, detail) in [
            ("ERR", "max number of clients reached"),
            ("ERR", "lock.acquire: internal error of the lock module (see the server log)"),
            ("ERR", "lock.acquire: the key could not be written"),
            ("EVICTION", "maxmemory-policy allkeys-lru can evict lock keys"),
            ("MAXWAITERS", "too many clients waiting for this lock"),
            ("TRYAGAIN", "the lock's hash slot moved"),
            ("MOVED", "3999 127.0.0.1:6381"),
            ("ASK", "3999 127.0.0.1:6381"),
            ("LOADING", "Redis is loading the dataset in memory"),
            ("READONLY", "You can't write against a read only replica."),
            ("OOM", "command not allowed when used memory > 'maxmemory'."),
            ("BUSY", "Redis is busy running a script."),
        ] {
            assert!(!refuses_request(code, detail), "{code} {detail}");
            assert!(matches!(classify_grant(&error(code, detail)), Answer::Failed(_)), "{code} {detail}");
        }
        let quarantine = error("QUARANTINE", "node restarted, refusing new locks for 5 ms");
        assert_eq!(classify_grant(&quarantine), Answer::Quarantined(Some(5)));
    }

    #[test]
    fn quarantine_milliseconds_are_parsed() {
        assert_eq!(quarantine_left_ms("node restarted, refusing new locks for 41250 ms"), Some(41_250));
        assert_eq!(quarantine_left_ms("replica promoted to master, refusing new locks for 7 ms"), Some(7));
        assert_eq!(quarantine_left_ms("for 12ms"), Some(12));
        assert_eq!(quarantine_left_ms("refusing new locks"), None);
        assert_eq!(quarantine_left_ms("ms"), None);
    }
}
