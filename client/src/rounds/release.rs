//! The release round: `LOCK.RELEASE` (for a set, `LOCK.MRELEASE`) on all
//! N nodes, also those that did not grant: a release by a token that does
//! not hold the lock changes nothing, and one queued behind a grant whose
//! reply was late takes that grant back.

use crate::claim::Claim;
use crate::error::{Phase, Result};
use crate::quorum::Tally;
use crate::rounds::fanout::Members;

/// A guard's release: returns once the claim's quorum released; the nodes
/// that have not answered yet get theirs in the background (counted as
/// `pending`). A failure waits for every answer.
pub(crate) async fn release_quorum(members: &Members, claim: &Claim, token: &str) -> Result<Tally> {
    let request = claim.release(token);
    let round = members.every_node_round(request, claim.quorum(), members.config().command_timeout).await;
    released(members, claim.label(), round.tally())
}

/// A release by token (for tools): waits for every answer (or its
/// timeout), for exact counts; `Ok` when the claim's quorum released.
pub(crate) async fn release_by_token(members: &Members, claim: &Claim, token: &str) -> Result<Tally> {
    let tally = release_all(members, claim, token).await.with_quorum(claim.quorum());
    released(members, claim.label(), tally)
}

/// The release round on every node, waiting for every answer (also the
/// undo of a failed grant round).
pub(crate) async fn release_all(members: &Members, claim: &Claim, token: &str) -> Tally {
    let (request, classify) = claim.release(token);
    let answers = members.round(&request, members.config().command_timeout, classify).await;
    Tally::of(&answers)
}

fn released(members: &Members, resource: &str, tally: Tally) -> Result<Tally> {
    if tally.has_quorum() {
        Ok(tally)
    } else {
        Err(members.shortfall(resource, Phase::Release, tally))
    }
}
