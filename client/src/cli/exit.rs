//! The CLI's exit codes, one per cause, in one place (listed in the long
//! help of every command and in client/README.md), and the cause of an
//! error: what the user can do about it, read from its counts.

use redlock_client::{Blocker, Error, Phase, QuorumStatus, Readiness, Tally};

pub const OK: u8 = 0;
/// The CLI itself could not start (no async runtime).
pub const INTERNAL: u8 = 1;
/// A usage error that no retry fixes: a flag or argument (clap's own
/// errors exit 2 too), a node URL, a TTL below the drift allowance, or an
/// argument the nodes refuse.
pub const USAGE: u8 = 2;
/// release, extend, check: the token does not hold the lock on a majority.
pub const NOT_HELD: u8 = 3;
/// Too many nodes refuse the connection or do not answer (EX_NOHOST).
pub const UNREACHABLE: u8 = 68;
/// No quorum for other or mixed reasons, or too slow (EX_UNAVAILABLE).
pub const NO_QUORUM: u8 = 69;
/// Another owner holds the lock.
pub const HELD: u8 = 73;
/// Too many nodes refuse new grants for now: retry later.
pub const QUARANTINED: u8 = 74;
/// exec: the lock was lost while the command ran (EX_TEMPFAIL).
pub const LOST: u8 = 75;
/// status: a majority can grant, but settings differ between nodes or a
/// protection is off on some (EX_CONFIG).
pub const CONFIG: u8 = 78;
/// exec: the command exists but could not be started.
pub const CANNOT_RUN: u8 = 126;
/// exec: the command was not found.
pub const NOT_FOUND: u8 = 127;

/// Every code with the word the tests and the README use for it.
#[cfg(test)]
pub const ALL: [(u8, &str); 12] = [
    (OK, "done"),
    (INTERNAL, "internal"),
    (USAGE, "usage"),
    (NOT_HELD, "not held"),
    (UNREACHABLE, "unreachable"),
    (NO_QUORUM, "no quorum"),
    (HELD, "held by another owner"),
    (QUARANTINED, "quarantined"),
    (LOST, "lost"),
    (CONFIG, "settings"),
    (CANNOT_RUN, "could not be run"),
    (NOT_FOUND, "not found"),
];

/// What stood between a round and its quorum, as the user can act on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cause {
    /// The call itself is wrong: no retry fixes it.
    Usage,
    /// The token does not hold the lock (release, extend, check).
    NotHeld,
    /// Another owner holds the lock (acquire).
    Held,
    /// The nodes refuse new grants for now.
    Quarantined,
    /// The nodes cannot be reached, or do not answer in time.
    Unreachable,
    /// Anything else, or several of the above at once.
    NoQuorum,
    /// A held lock was lost.
    Lost,
}

impl Cause {
    pub fn code(self) -> u8 {
        match self {
            Cause::Usage => USAGE,
            Cause::NotHeld => NOT_HELD,
            Cause::Held => HELD,
            Cause::Quarantined => QUARANTINED,
            Cause::Unreachable => UNREACHABLE,
            Cause::NoQuorum => NO_QUORUM,
            Cause::Lost => LOST,
        }
    }
}

/// The cause of a round that fell short of its quorum, from its counts;
/// `no` is what a node's "no" means in that round.
///
/// A kind of answer is the cause when those answers alone put the quorum
/// out of reach (more of them than `nodes - need`: had every other node
/// said yes, the round would still fail). Failing that, the causes were
/// mixed: no quorum. Only with a semaphore's larger quorum can two kinds
/// both qualify; the first in this order wins: the call refused (the
/// nodes' refusals of the request: `ERR`, `WRONGTYPE`, the module not
/// loaded, the credentials; see `quorum::refuses_request`), "no",
/// quarantine, unreachable.
pub fn cause_of(tally: &Tally, no: Cause) -> Cause {
    let spare = tally.nodes.saturating_sub(tally.need());
    if tally.refused_outright() {
        Cause::Usage
    } else if tally.no > spare {
        no
    } else if tally.quarantined > spare {
        Cause::Quarantined
    } else if tally.unreachable + tally.timed_out + tally.cluster_unavailable > spare {
        Cause::Unreachable
    } else {
        Cause::NoQuorum
    }
}

/// The cause of a library error.
pub fn cause(error: &Error) -> Cause {
    match error {
        Error::Contended { .. } => Cause::Held,
        Error::NoQuorum { tally, phase, .. } => {
            let no = match phase {
                Phase::Acquire | Phase::Enter => Cause::Held,
                Phase::Release | Phase::Extend | Phase::Exit => Cause::NotHeld,
                // Our own grant gone between the grant and the fencing
                // round: the nodes, not the caller's token, are at issue.
                Phase::Fence => Cause::NoQuorum,
            };
            cause_of(tally, no)
        }
        Error::ExpiredBeforeUse { .. } => Cause::NoQuorum,
        Error::Lost { .. } => Cause::Lost,
        Error::InvalidArgument(_) | Error::Refused { .. } => Cause::Usage,
    }
}

pub fn code(error: &Error) -> u8 {
    cause(error).code()
}

/// What to tell the user about `error`: the library's message, with the
/// cause spelled out where the counts alone would mislead ("no quorum"
/// for a token that no longer holds the lock, or for an argument every
/// node refuses).
pub fn message(error: &Error) -> String {
    let Error::NoQuorum { resource, phase, tally } = error else { return error.to_string() };
    match cause(error) {
        Cause::Usage => refusal(tally),
        Cause::NotHeld => {
            let (yes, verb) = match phase {
                Phase::Extend => ("extended", "extend"),
                Phase::Exit => ("exited", "exit"),
                _ => ("released", "release"),
            };
            format!(
                "'{resource}' is not held with this token (already released, expired, or taken by \
                 another owner), nothing to {verb}: {}",
                tally.describe(yes, "not holding")
            )
        }
        Cause::Quarantined => match tally.quarantine_left_ms {
            Some(ms) => format!("{error}; retry in {ms} ms"),
            None => format!("{error}; retry later"),
        },
        Cause::Unreachable => format!(
            "too few nodes reachable for '{resource}': {}; are the nodes up, and is --nodes (or REDLOCK_NODES) right?",
            error.counts().unwrap_or_default()
        ),
        Cause::Held | Cause::NoQuorum | Cause::Lost => error.to_string(),
    }
}

/// The nodes refused the call (a usage error), in their words.
pub fn refusal(tally: &Tally) -> String {
    let why = tally.first_refusal.as_ref().map_or("an error", |(_, why)| why);
    format!("the nodes refuse the call ({} of {} nodes): {why}", tally.refused, tally.nodes)
}

/// `status`'s code: 0 when a majority can grant and the nodes agree, with
/// every protection on; else the cause.
pub fn status_code(status: &QuorumStatus) -> u8 {
    match &status.readiness {
        Readiness::Grants if status.differences.is_empty() && status.protections_off().is_empty() => OK,
        Readiness::Grants => CONFIG,
        Readiness::Blocked { cause: Some(Blocker::Unreachable(_)), .. } => UNREACHABLE,
        Readiness::Blocked { cause: Some(Blocker::Quarantined(_)), .. } => QUARANTINED,
        Readiness::Blocked { .. } => NO_QUORUM,
    }
}

/// `check`'s verdict on its counts: `OK` when a majority says the token is
/// the live grant, else the cause's code.
pub fn check_code(tally: &Tally) -> u8 {
    if tally.has_quorum() {
        OK
    } else {
        cause_of(tally, Cause::NotHeld).code()
    }
}

/// What `check` says when the token is not confirmed.
pub fn check_message(resource: &str, fencing_token: u64, tally: &Tally) -> String {
    let counts = tally.describe("say it is", "say it is not");
    match cause_of(tally, Cause::NotHeld) {
        Cause::Usage => refusal(tally),
        Cause::NotHeld => {
            format!(
                "fencing token {fencing_token} is not the live grant of '{resource}' on a majority: {counts}"
            )
        }
        _ => format!(
            "cannot tell whether fencing token {fencing_token} is the live grant of '{resource}': {counts}"
        ),
    }
}

#[cfg(test)]
mod tests {
    use redlock_client::quorum::Answer::{self, *};
    use redlock_client::Quorum;

    use super::*;

    /// The counts of a round that needs a majority.
    fn tally(answers: &[Answer]) -> Tally {
        Tally::of(answers).with_quorum(Quorum::Majority)
    }

    fn unreachable() -> Answer {
        Unreachable("down".into())
    }

    fn err(text: &str) -> Answer {
        Failed(text.into())
    }

    fn refused(text: &str) -> Answer {
        Refused(text.into())
    }

    #[test]
    fn a_kind_of_answer_is_the_cause_when_it_alone_rules_the_quorum_out() {
        let no = Cause::NotHeld;
        let range = "ERR lock.acquire: ttl-ms 99999999 is out of range";
        assert_eq!(cause_of(&tally(&[refused(range), refused(range), refused(range)]), no), Cause::Usage);
        assert_eq!(cause_of(&tally(&[Yes(1), refused(range), refused(range)]), no), Cause::Usage);
        assert_eq!(
            cause_of(&tally(&[Yes(1), refused("NOPERM x"), refused("WRONGTYPE y")]), no),
            Cause::Usage
        );
        assert_eq!(
            cause_of(&tally(&[Yes(1), refused("WRONGTYPE x"), err("LOADING y")]), no),
            Cause::NoQuorum
        );
        assert_eq!(cause_of(&tally(&[No, No, No]), no), Cause::NotHeld, "a double release");
        assert_eq!(cause_of(&tally(&[No, No, Yes(1), unreachable(), unreachable()]), no), Cause::NoQuorum);
        assert_eq!(cause_of(&tally(&[No, No, No, unreachable(), unreachable()]), Cause::Held), Cause::Held);
        assert_eq!(
            cause_of(&tally(&[Quarantined(Some(5)), Quarantined(None), Yes(1)]), no),
            Cause::Quarantined
        );
        assert_eq!(
            cause_of(&tally(&[Yes(1), Yes(2), unreachable(), TimedOut, unreachable()]), no),
            Cause::Unreachable
        );
        assert_eq!(
            cause_of(&tally(&[Yes(1), Quarantined(None), unreachable()]), no),
            Cause::NoQuorum,
            "mixed"
        );
        // Four nodes, three needed: two of a kind are enough to rule it out.
        assert_eq!(cause_of(&tally(&[Yes(1), Yes(2), No, No]), no), Cause::NotHeld);
        // A 2-permit semaphore on 5 nodes needs 4: two of a kind rule it out.
        let permits = |answers: &[Answer], l| Tally::of(answers).with_quorum(Quorum::Permits(l));
        let one_each = [Yes(1), Yes(2), Yes(3), No, Quarantined(None)];
        assert_eq!(cause_of(&permits(&one_each, 2), no), Cause::NoQuorum);
        assert_eq!(cause_of(&permits(&[Yes(1), Yes(2), No, No, Quarantined(None)], 2), no), Cause::NotHeld);
        // A 4-permit one needs all 5: one of a kind is enough, and "no"
        // comes before quarantine.
        assert_eq!(cause_of(&permits(&one_each, 4), no), Cause::NotHeld);
    }

    #[test]
    fn errors_map_to_their_codes() {
        let t = tally(&[No, No, No]);
        let release =
            Error::NoQuorum { resource: "r".into(), phase: Phase::Release, tally: t.clone().into() };
        assert_eq!(code(&release), NOT_HELD);
        assert!(message(&release).starts_with("'r' is not held with this token"), "{}", message(&release));
        let fence = Error::NoQuorum { resource: "r".into(), phase: Phase::Fence, tally: t.clone().into() };
        assert_eq!(code(&fence), NO_QUORUM);
        assert_eq!(code(&Error::Contended { resource: "r".into(), tally: t.into() }), HELD);
        assert_eq!(code(&Error::InvalidArgument("x".into())), USAGE);
        let quarantined = tally(&[Quarantined(Some(1_500)), Quarantined(Some(900)), Yes(1)]);
        let acquire =
            Error::NoQuorum { resource: "r".into(), phase: Phase::Acquire, tally: quarantined.into() };
        assert_eq!(code(&acquire), QUARANTINED);
        assert!(message(&acquire).ends_with("; retry in 1500 ms"), "{}", message(&acquire));
        let down = tally(&[unreachable(), unreachable(), unreachable()]);
        let acquire = Error::NoQuorum { resource: "r".into(), phase: Phase::Acquire, tally: down.into() };
        assert_eq!(
            (code(&acquire), message(&acquire)),
            (
                UNREACHABLE,
                "too few nodes reachable for 'r': 0 of 3 granted (need 2); 3 unreachable (first: down); are the nodes up, \
                 and is --nodes (or REDLOCK_NODES) right?"
                    .into()
            ),
            "exit 68 does not say 'no quorum', which is 69's"
        );
        let bad = tally(&[refused("ERR bad ttl"), refused("ERR bad ttl"), refused("ERR bad ttl")]);
        let acquire =
            Error::NoQuorum { resource: "r".into(), phase: Phase::Acquire, tally: bad.clone().into() };
        assert_eq!(
            (code(&acquire), message(&acquire)),
            (USAGE, "the nodes refuse the call (3 of 3 nodes): ERR bad ttl".into())
        );
        let node = "member 1 (redis://h:1)".to_string();
        let acquire = Error::Refused { resource: "r".into(), phase: Phase::Acquire, node, tally: bad.into() };
        assert_eq!((code(&acquire), message(&acquire)), (USAGE, acquire.to_string()));
    }

    #[test]
    fn check_confirms_on_a_majority_only() {
        assert_eq!(check_code(&tally(&[Yes(1), Yes(1), No])), OK);
        assert_eq!(check_code(&tally(&[Yes(1), No, No])), NOT_HELD);
        assert_eq!(check_code(&tally(&[Yes(1), No, unreachable()])), NO_QUORUM);
        assert_eq!(check_code(&tally(&[Yes(1), unreachable(), unreachable()])), UNREACHABLE);
        let stale = check_message("deploy", 42, &tally(&[Yes(1), No, No]));
        assert_eq!(stale, "fencing token 42 is not the live grant of 'deploy' on a majority: 1 of 3 say it is (need 2); 2 say it is not");
    }

    #[test]
    fn the_readme_lists_every_code() {
        let readme = include_str!("../../README.md");
        for (code, word) in ALL {
            let row = [format!("| {code} | "), format!("| {code}, "), format!(", {code} | ")];
            assert!(
                row.iter().any(|cell| readme.contains(cell.as_str())),
                "code {code} ({word}) is not in client/README.md"
            );
        }
    }

    #[test]
    fn the_help_lists_every_code() {
        for (code, word) in ALL {
            let line = format!("  {code:<4} ");
            let listed =
                crate::cli::args::EXIT_CODES.lines().any(|l| l.starts_with(&line) && l.contains(word))
                    || crate::cli::args::EXIT_CODES.contains(&format!("{code}: it was {word}"));
            assert!(listed, "code {code} ({word}) is not in the help's table");
        }
    }
}
