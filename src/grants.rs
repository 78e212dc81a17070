//! What a grant's outcome is answered with, and which counter counts it: in
//! one place for the commands (`commands/`) and for the hand-off to waiters
//! (`waiting.rs`).

use crate::core::kind::Want;
use crate::core::lock::Grant;
use crate::core::quarantine::Refusal;
use crate::errors;
use crate::stats::Stats;

/// A grant, as the caller is answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// A fencing token: a new grant, or the holder's renewal.
    Token { fence: u64, renewed: bool },
    /// Not now: held by others, no free permit, or waiters ahead
    /// (`refused` false); or free but refused to newcomers (`refused`: a
    /// quarantine, the eviction guard; the caller knows which). Waiting may
    /// cure it.
    NotNow { refused: bool },
    /// Refused for a reason waiting cannot cure: the error line.
    Refused(String),
}

/// The outcome of a grant of `want`.
pub fn outcome(grant: Grant, want: Want) -> Outcome {
    match grant {
        Grant::Granted(fence) => Outcome::Token { fence, renewed: false },
        Grant::Renewed(fence) => Outcome::Token { fence, renewed: true },
        Grant::Busy => Outcome::NotNow { refused: false },
        Grant::Quarantined => Outcome::NotNow { refused: true },
        refused => Outcome::Refused(errors::grant_refused(refused, want)),
    }
}

/// Counts a token given (a grant or a renewal) and returns it as a reply
/// integer.
pub fn counted_token(stats: &Stats, fence: u64, renewed: bool) -> i64 {
    if renewed {
        stats.renewals.bump();
    } else {
        stats.grants.bump();
    }
    crate::core::fencing::to_reply(fence)
}

/// Counts a grant refused because the key is refused to anyone new (a
/// quarantine, the eviction guard) and returns the error line.
pub fn counted_refusal(stats: &Stats, refusal: &Refusal) -> String {
    match refusal {
        Refusal::Evictable(_) => stats.refused_evictable.bump(),
        Refusal::Node(..) | Refusal::Forgotten(..) | Refusal::Importing(..) => stats.quarantined.bump(),
    }
    errors::refused(refusal)
}
