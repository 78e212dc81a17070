//! The extend round: `LOCK.EXTEND` (for a set, `LOCK.RENEW` over it) on
//! all N nodes, by hand, by token, or by a guard's watchdog.

use std::time::Duration;

use tokio::time::Instant;

use crate::claim::Claim;
use crate::error::{Phase, Result};
use crate::quorum;
use crate::rounds::fanout::Members;
use crate::rounds::lease::{expired, Lease};

/// Held again for `ttl` from the start of the round when the claim's
/// quorum answered 1 within the new validity (a semaphore permit extended
/// on fewer nodes than its grant needed no longer bounds the number of
/// holders). Returns at that quorum (the other nodes' calls go on in the
/// background, queued before any later command to them); a failure waits
/// for every answer.
pub(crate) async fn extend(members: &Members, claim: &Claim, token: &str, ttl: Duration) -> Result<Lease> {
    let start = Instant::now();
    let timeout = members.config().command_timeout.min(ttl);
    let round = members.every_node_round(claim.extend(token, ttl), claim.quorum(), timeout).await;
    if round.decided() != Some(true) {
        return Err(members.shortfall(claim.label(), Phase::Extend, round.tally()));
    }
    let elapsed = start.elapsed();
    if quorum::validity(ttl, elapsed).is_none() {
        return Err(expired(claim.label(), ttl, elapsed));
    }
    Ok(Lease::new(start, ttl))
}
