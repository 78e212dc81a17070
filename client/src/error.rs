//! The errors the client returns. Each one says what happened on how many
//! nodes, so "no quorum" is never a mystery: the counts of nodes that
//! granted, were held by another owner, were quarantined, unreachable, timed
//! out or answered with another error are part of the message.

use std::fmt;
use std::time::Duration;

use crate::quorum::Tally;

/// Which quorum round an error comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// `LOCK.ACQUIRE` on all nodes.
    Acquire,
    /// `LOCK.FENCE` on all nodes: the fencing round, run when the fencing
    /// token is asked for (at once for a reentrant enter).
    Fence,
    /// `LOCK.EXTEND` on all nodes (by hand or by the watchdog).
    Extend,
    /// `LOCK.RELEASE` on all nodes.
    Release,
    /// `LOCK.ENTER` on all nodes (reentrant).
    Enter,
    /// `LOCK.EXIT` on all nodes (reentrant).
    Exit,
}

impl Phase {
    /// The round's name, as the bindings spell it: "acquire", "fence",
    /// "extend", "release", "enter", "exit".
    pub fn name(self) -> &'static str {
        match self {
            Phase::Acquire => "acquire",
            Phase::Fence => "fence",
            Phase::Extend => "extend",
            Phase::Release => "release",
            Phase::Enter => "enter",
            Phase::Exit => "exit",
        }
    }

    /// What a "yes" and a "no" are called in this round's counts.
    pub(crate) fn words(self) -> (&'static str, &'static str) {
        match self {
            Phase::Acquire | Phase::Enter => ("granted", "held by another owner"),
            Phase::Fence => ("fenced", "not holding"),
            Phase::Extend => ("extended", "not holding (expired or taken)"),
            Phase::Release => ("released", "not holding (expired or taken)"),
            Phase::Exit => ("exited", "not holding"),
        }
    }

    fn what(self) -> &'static str {
        match self {
            Phase::Acquire => "",
            Phase::Fence => " in the fencing round",
            Phase::Extend => " to extend",
            Phase::Release => " to release",
            Phase::Enter => " to enter",
            Phase::Exit => " to exit",
        }
    }
}

/// Why a held lock is no longer held (see `Guard::lost`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Lost {
    /// The validity ran out without a renewal (no watchdog, or the process
    /// was paused past the deadline).
    Expired,
    /// The watchdog reached its bound (renewals or total duration) and the
    /// validity then ran out.
    WatchdogLimit { renewals: u32 },
    /// A renewal could not be confirmed by a majority.
    RenewalFailed(Box<Error>),
}

impl Lost {
    /// Why, as the bindings spell it: "expired", "watchdog_limit",
    /// "renewal_failed".
    pub fn name(&self) -> &'static str {
        match self {
            Lost::Expired => "expired",
            Lost::WatchdogLimit { .. } => "watchdog_limit",
            Lost::RenewalFailed(_) => "renewal_failed",
        }
    }
}

impl fmt::Display for Lost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Lost::Expired => write!(f, "its validity ran out without a renewal"),
            Lost::WatchdogLimit { renewals } => {
                write!(f, "the watchdog stopped renewing after {renewals} renewals (its bound) and the validity ran out")
            }
            Lost::RenewalFailed(error) => write!(f, "a renewal failed: {error}"),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Error {
    /// Another owner holds the lock (on a majority, or on every node that
    /// did not grant). Retrying later may succeed.
    /// (The counts are boxed, here and below, to keep every `Result` of
    /// the client small.)
    Contended { resource: String, tally: Box<Tally> },
    /// No majority, for reasons other than (only) another holder: nodes
    /// unreachable, quarantined, timing out, or answering errors.
    NoQuorum { resource: String, phase: Phase, tally: Box<Tally> },
    /// A majority granted, but the rounds took so long that no validity was
    /// left (`ttl - elapsed - drift <= 0`). The grants were released.
    ExpiredBeforeUse { resource: String, ttl: Duration, elapsed: Duration, drift: Duration },
    /// The guard's lock is already lost; it cannot be extended.
    Lost { resource: String, reason: Lost },
    /// A caller mistake: empty resource, bad TTL, no nodes, bad URL, ...
    InvalidArgument(String),
    /// The nodes refused the request itself, so many of them that the
    /// quorum is out of reach ([`Tally::refused_outright`]): a TTL above
    /// their `lock.max-ttl-ms`, a key that is not a lock or a lock of
    /// another kind (`WRONGTYPE`), the module not loaded, any other `ERR`
    /// about the call. The same request would be refused again, so it is
    /// not retried; what the round granted was released. `node` names the
    /// first node that refused (`member 2 (redis://...)`); its reply is
    /// the tally's `first_refusal`. A caller mistake, as
    /// [`Error::InvalidArgument`], found by the nodes.
    Refused { resource: String, phase: Phase, node: String, tally: Box<Tally> },
}

impl Error {
    /// True for errors that a later attempt may not repeat (another holder,
    /// nodes down or quarantined, a slow round). Not for a caller mistake,
    /// found by the client ([`Error::InvalidArgument`]) or by the nodes
    /// ([`Error::Refused`]), nor for a lost lock.
    pub fn is_retryable(&self) -> bool {
        matches!(self, Error::Contended { .. } | Error::NoQuorum { .. } | Error::ExpiredBeforeUse { .. })
    }

    /// The failed round's counts in words (`2 of 5 granted (need 3); 3
    /// unreachable`), when there was one.
    pub fn counts(&self) -> Option<String> {
        match self {
            Error::Contended { tally, .. } => {
                let (yes, no) = Phase::Acquire.words();
                Some(tally.describe(yes, no))
            }
            Error::NoQuorum { tally, phase, .. } | Error::Refused { tally, phase, .. } => {
                let (yes, no) = phase.words();
                Some(tally.describe(yes, no))
            }
            _ => None,
        }
    }

    /// A caller mistake: the client's own check ([`Error::InvalidArgument`])
    /// or the nodes' refusal of the request ([`Error::Refused`]).
    pub fn is_invalid_argument(&self) -> bool {
        matches!(self, Error::InvalidArgument(_) | Error::Refused { .. })
    }

    /// The counts of the failed round, when there was one.
    pub fn tally(&self) -> Option<&Tally> {
        match self {
            Error::Contended { tally, .. } | Error::NoQuorum { tally, .. } | Error::Refused { tally, .. } => {
                Some(tally)
            }
            _ => None,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Contended { resource, .. } => {
                write!(f, "'{resource}' is held by another owner: {}", self.counts().unwrap_or_default())
            }
            Error::NoQuorum { resource, phase, .. } => {
                write!(f, "no quorum for '{resource}'{}: {}", phase.what(), self.counts().unwrap_or_default())
            }
            Error::ExpiredBeforeUse { resource, ttl, elapsed, drift } => write!(
                f,
                "'{resource}' expired before it could be used: the rounds took {} ms of a {} ms ttl \
                 (clock-drift allowance {} ms)",
                elapsed.as_millis(),
                ttl.as_millis(),
                drift.as_millis()
            ),
            Error::Lost { resource, reason } => write!(f, "the lock on '{resource}' is lost: {reason}"),
            Error::InvalidArgument(what) => write!(f, "invalid argument: {what}"),
            Error::Refused { resource, phase, node, tally } => {
                let reply = tally.first_refusal.as_ref().map_or("an error", |(_, reply)| reply);
                write!(
                    f,
                    "the nodes refuse the request for '{resource}'{} ({} of {} nodes; a retry would be refused \
                     again): {node}: {reply}",
                    phase.what(),
                    tally.refused,
                    tally.nodes
                )
            }
        }
    }
}

impl std::error::Error for Error {}

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quorum::{Answer, Tally};

    #[test]
    fn messages_carry_the_counts() {
        let tally = Tally::of(&[
            Answer::Yes(1),
            Answer::Yes(2),
            Answer::Quarantined(Some(1800)),
            Answer::Quarantined(Some(1700)),
            Answer::Quarantined(Some(1900)),
        ]);
        let e = Error::NoQuorum { resource: "res".into(), phase: Phase::Acquire, tally: tally.into() };
        assert_eq!(
            e.to_string(),
            "no quorum for 'res': 2 of 5 granted (need 3); 3 quarantined (up to 1900 ms left)"
        );
        assert!(e.is_retryable());

        let tally = Tally::of(&[Answer::Yes(1), Answer::No, Answer::No]);
        let e = Error::Contended { resource: "job".into(), tally: tally.into() };
        assert_eq!(
            e.to_string(),
            "'job' is held by another owner: 1 of 3 granted (need 2); 2 held by another owner"
        );

        let tally =
            Tally::of(&[Answer::Yes(1), Answer::Unreachable("x".into()), Answer::Unreachable("y".into())]);
        let e = Error::NoQuorum { resource: "r".into(), phase: Phase::Extend, tally: tally.into() };
        assert_eq!(
            e.to_string(),
            "no quorum for 'r' to extend: 1 of 3 extended (need 2); 2 unreachable (first: x)"
        );

        let e = Error::ExpiredBeforeUse {
            resource: "r".into(),
            ttl: Duration::from_millis(100),
            elapsed: Duration::from_millis(120),
            drift: Duration::from_millis(3),
        };
        assert!(e.to_string().contains("took 120 ms of a 100 ms ttl"), "{e}");
        assert!(!Error::InvalidArgument("x".into()).is_retryable());

        let range = "ERR lock.acquire: ttl-ms 60000 is out of range, must be 1..30000 (lock.max-ttl-ms)";
        let tally =
            Tally::of(&[Answer::Yes(1), Answer::Refused(range.into()), Answer::Refused(range.into())]);
        let e = Error::Refused {
            resource: "k".into(),
            phase: Phase::Acquire,
            node: "member 2 (redis://h:2)".into(),
            tally: tally.into(),
        };
        assert_eq!(
            e.to_string(),
            format!(
                "the nodes refuse the request for 'k' (2 of 3 nodes; a retry would be refused again): \
                 member 2 (redis://h:2): {range}"
            )
        );
        assert!(!e.is_retryable() && e.is_invalid_argument());
        assert_eq!(e.counts().unwrap(), format!("1 of 3 granted (need 2); 2 other errors (first: {range})"));
    }
}
