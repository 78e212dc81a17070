//! The grant round (`LOCK.ACQUIRE` and its kinds, `LOCK.MACQUIRE` for a
//! set, `LOCK.ENTER` for a reentrant hold) on all N nodes, with the
//! fencing round right after it when the token is needed at once, and the
//! undo of a round that failed.
//!
//! No deadlock, also for sets: the client never waits while holding. A
//! node grants a whole set at once or refuses it at once (the client does
//! not use `WAIT`), and a failed round releases whatever it got with
//! MRELEASE on all N (also the nodes that did not answer, queued behind the
//! grant), so two clients naming overlapping sets in opposite orders retry
//! instead of each holding half.

use lock_protocol::command as names;
use std::time::Duration;

use tokio::time::Instant;

use crate::claim::{command, millis, Claim, Classify};
use crate::error::{Error, Phase, Result};
use crate::node::Request;
use crate::quorum::{self, Answer, Progress, Quorum, Verdict};
use crate::rounds::fanout::{drive, Members};
use crate::rounds::lease::{expired, Lease};
use crate::rounds::release::release_all;

/// What a grant round takes.
#[derive(Clone, Copy)]
pub(crate) enum Kind<'a> {
    /// A token-held grant: one resource (plain, read, write or permit) or
    /// a set. Undone, extended and released by token on every node.
    Lock(&'a Claim),
    /// `LOCK.ENTER` of this resource by owner; undone with `LOCK.EXIT`.
    Reentrant(&'a str),
}

impl Kind<'_> {
    fn quorum(self) -> Quorum {
        match self {
            Kind::Lock(claim) => claim.quorum(),
            Kind::Reentrant(_) => Quorum::Majority,
        }
    }

    /// What errors call it.
    fn label(self) -> String {
        match self {
            Kind::Lock(claim) => claim.label().to_string(),
            Kind::Reentrant(resource) => resource.to_string(),
        }
    }

    fn grant(self, token: &str, ttl: Duration) -> Request {
        match self {
            Kind::Lock(claim) => claim.grant(token, ttl),
            Kind::Reentrant(resource) => {
                Request::one(command(names::text(names::ENTER), resource, token, &[millis(ttl)]), resource)
            }
        }
    }

    fn fence(self, token: &str, floor: u64) -> (Request, Classify) {
        match self {
            Kind::Lock(claim) => claim.fence(token, floor),
            Kind::Reentrant(resource) => {
                let fence = command(names::text(names::FENCE), resource, token, &[floor]);
                (Request::one(fence, resource), quorum::classify_flag)
            }
        }
    }
}

/// A grant round that succeeded: the quorum token T (fenced already when
/// the fencing round ran with it), the lease, and the grant round's
/// answers as they stood when it was decided (for a later fencing round).
pub(crate) struct Granted {
    pub floor: u64,
    pub lease: Lease,
    pub grants: Vec<Option<Answer>>,
}

/// Which round a reply belongs to, in [`grant`].
const GRANT: usize = 0;
const FENCE: usize = 1;

/// The grant round, and with `fence` the fencing round right after it
/// (reentrant `enter`); undoes partial grants on failure.
///
/// The grant round needs the kind's quorum (a majority, or a
/// semaphore's larger one); the fencing round a majority, whatever the
/// kind: every later grant quorum is at least a majority, so it meets
/// our FENCE majority in a node that will not grant a token at or
/// below T.
///
/// Each round returns as soon as its quorum said yes (see `fanout.rs` for
/// why that is safe); the grant round's late calls keep running (while the
/// fencing round runs, in the same set of calls in flight), and go on in
/// the background after a success. On a failure every call of both rounds
/// is waited for (bounded by the per-node timeouts) before the undo: exact
/// counts, the grants known node by node, and the undo queued after every
/// grant call ended.
pub(crate) async fn grant(
    members: &Members,
    kind: Kind<'_>,
    token: &str,
    ttl: Duration,
    fence: bool,
) -> Result<Granted> {
    let phase = match kind {
        Kind::Lock(_) => Phase::Acquire,
        Kind::Reentrant(_) => Phase::Enter,
    };
    let start = Instant::now();
    let timeout = members.config().command_timeout;
    let request = kind.grant(token, ttl);
    let mut flight = members.flight();
    members.send(
        &mut flight,
        GRANT,
        (&request, quorum::classify_grant),
        timeout.min(ttl),
        members.every_node(),
    );
    let mut rounds = [Progress::with_quorum(members.len(), kind.quorum()), Progress::new(members.len())];
    drive(&mut flight, &mut rounds, |r| r[GRANT].decided().is_some()).await;

    // T: the highest token of the grants received so far (a quorum).
    let floor = match (rounds[GRANT].decided(), rounds[GRANT].fence_floor()) {
        (Some(true), Some(floor)) => floor,
        _ => {
            drive(&mut flight, &mut rounds, |_| false).await;
            let tally = rounds[GRANT].tally();
            let resource = kind.label();
            // Refusals of the request itself that alone rule the quorum
            // out come first: another holder or a node down would not
            // matter, the request would be refused again.
            let error = match quorum::verdict(&tally) {
                Verdict::Contended if !tally.refused_outright() => {
                    Error::Contended { resource, tally: tally.into() }
                }
                // A quorum cannot have no highest token; if it ever did,
                // it fails like any other round short of a majority.
                _ => members.shortfall(&resource, phase, tally),
            };
            undo(members, kind, token, rounds[GRANT].answers()).await;
            return Err(error);
        }
    };
    let Some(left) = quorum::validity(ttl, start.elapsed()) else {
        let error = expired(&kind.label(), ttl, start.elapsed());
        drive(&mut flight, &mut rounds, |_| false).await;
        undo(members, kind, token, rounds[GRANT].answers()).await;
        return Err(error);
    };
    if fence {
        // In the same set of calls as the grant round's late ones: a
        // failure below waits for them too, before the undo.
        let (fencing, targets) = Progress::fencing(rounds[GRANT].answers(), floor);
        rounds[FENCE] = fencing;
        let (request, classify) = kind.fence(token, floor);
        members.send(&mut flight, FENCE, (&request, classify), timeout.min(left), targets);
        drive(&mut flight, &mut rounds, |r| r[FENCE].decided().is_some()).await;
        let fenced = rounds[FENCE].decided() == Some(true);
        let elapsed = start.elapsed();
        if !fenced || quorum::validity(ttl, elapsed).is_none() {
            drive(&mut flight, &mut rounds, |_| false).await;
            let error = if fenced {
                expired(&kind.label(), ttl, elapsed)
            } else {
                members.shortfall(&kind.label(), Phase::Fence, rounds[FENCE].tally())
            };
            undo(members, kind, token, rounds[GRANT].answers()).await;
            return Err(error);
        }
    }
    members.detach(flight);
    let [grants, _] = rounds;
    Ok(Granted { floor, lease: Lease::new(start, ttl), grants: grants.into_answers() })
}

/// Takes back a failed grant round (`answers`: the grant round's, all
/// in).
async fn undo(members: &Members, kind: Kind<'_>, token: &str, answers: &[Option<Answer>]) {
    match kind {
        // Release on all N, also where the grant's outcome is unknown: a
        // release by a token that does not hold the lock changes nothing
        // (for a set: MRELEASE, which frees whatever of the set the
        // token holds there).
        Kind::Lock(claim) => {
            release_all(members, claim, token).await;
        }
        Kind::Reentrant(resource) => {
            let request = Request::one(command(names::text(names::EXIT), resource, token, &[]), resource);
            let timeout = members.config().command_timeout;
            let granted =
                answers.iter().enumerate().filter(|(_, answer)| matches!(answer, Some(Answer::Yes(_))));
            members.round_on(&request, timeout, quorum::classify_exit, granted.map(|(node, _)| node)).await;
        }
    }
}
