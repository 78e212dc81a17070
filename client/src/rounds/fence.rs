//! The fencing round of a lock granted earlier: `LOCK.FENCE key token T`
//! on the nodes that need it, run the first time a guard's fencing token is
//! asked for. (Reentrant `enter` fences at once, in `grant.rs`.)
//!
//! # The fencing round runs when the token is asked for
//!
//! A guard runs the fencing round the first time its
//! [`crate::Guard::fencing_token`] is asked for, not at acquire: a caller who needs
//! mutual exclusion only pays one round to acquire and one to release.
//! Fencing later is as safe as fencing at once. A FENCE answers 1 only on a
//! node that holds our lock at that moment, and the round counts only
//! within the validity; the next holder B (whose hold begins after ours
//! ends) is granted by a majority that meets our FENCE majority in a node
//! X. If B's grant on X came after our FENCE there, X's counter was at T
//! and B's token is above it. It cannot have come before: X held our lock
//! at our FENCE, so B's lock on X would have ended before our hold did,
//! before B's hold began, while B's validity assumes it lives on X until
//! B's deadline. A node whose own grant carried T counts as fenced without
//! a command: its counter reached T when it granted us, and the same
//! argument applies with the grant in place of the FENCE. Reentrant
//! [`crate::Redlock::enter`] runs the fencing round at once (it returns the token
//! as a value, with no guard to ask later).
//!
//! # Sets of resources
//!
//! [`crate::Redlock::try_acquire_many`] takes several resources with one token,
//! one TTL and one quorum token T (the commands are in `claim.rs`). On each
//! node `LOCK.MACQUIRE` grants every key of the set or none, and answers
//! one fencing token g for the whole grant, stored as the holder's token
//! of every key; like a single grant, g is above every token that node
//! granted earlier on any of those keys (and a later grant there, on any
//! of them, is above g). Across nodes the set is one lock to the majority
//! rule: a node counts as a grant only if it granted the whole set (it
//! cannot grant part of it), and every later round counts a node only if
//! it did the whole set: extend (`LOCK.RENEW`, every key 1), release
//! (`LOCK.MRELEASE`, every key 1) and fence (`LOCK.FENCE` on every key, in
//! one pipeline, every key 1).
//!
//! Why that is as safe as one resource, key by key. Take any key k of the
//! set. Mutual exclusion: our grant majority holds k for us, so it meets
//! the majority of any other holder of k (alone or in a set, at least a
//! majority too) in a node that would not grant k to both at once. The
//! quorum token: T is the highest g among the grants that decided the
//! round. Our FENCE majority is a majority on which `LOCK.FENCE k token T`
//! answered 1 (for every key, so in particular for k): each of its nodes
//! held k for us at that moment and raised its counter to T. The next
//! holder B of k, after our hold ends, is granted k by a majority that
//! meets our FENCE majority in a node X; the argument of the previous
//! section, read for k, puts B's grant of k on X after our FENCE there,
//! so its token is above T, and B's quorum token (the highest of its
//! grants) is above T too. A node whose MACQUIRE answered T itself counts
//! as fenced without a command: its counter reached T when it granted us
//! every key. So T is above the quorum token of every earlier fenced
//! holder of any key of the set, the same guarantee as for one resource,
//! and a resource server can check T per key (`LOCK.CHECK key T`).
//!
//! Counting a node only for the whole set (rather than a majority per
//! key, which would be safe too) keeps one tally, one error and one lease
//! per round. A node holds part of a set only after a hand-made per-key
//! release or a failover; there it counts as "not holding", as it should:
//! the guard promises every key.

use tokio::time::Instant;

use crate::claim::Claim;
use crate::error::{Phase, Result};
use crate::quorum::{self, Answer, Progress};
use crate::rounds::fanout::Members;

/// The fencing round of a lock (or set) granted earlier: `LOCK.FENCE
/// key token floor` (on each key of a set, one pipeline per node; a
/// node counts only if every key answered 1) on every node that needs
/// it (see [`Progress::fencing`]), returning at the first majority of
/// yes; each call is bounded by the time left until `deadline` too.
/// `Err(NoQuorum)` (phase `Fence`, after every answer) when no
/// majority answered yes. The caller checks that the round ended
/// within the validity.
pub(crate) async fn fence(
    members: &Members,
    claim: &Claim,
    token: &str,
    floor: u64,
    grants: &[Option<Answer>],
    deadline: Instant,
) -> Result<()> {
    let (round, targets) = Progress::fencing(grants, floor);
    let left = quorum::remaining(deadline, Instant::now());
    let timeout = members.config().command_timeout.min(left);
    let round = members.quorum_round(claim.fence(token, floor), round, targets, timeout).await;
    if round.decided() == Some(true) {
        return Ok(());
    }
    Err(members.shortfall(claim.label(), Phase::Fence, round.tally()))
}
