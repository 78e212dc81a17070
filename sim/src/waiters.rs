//! Clients that wait on the node: `LOCK.ACQUIRE key token ttl-ms WAIT
//! timeout-ms`, three clients on one node, each cycle waiting for the lock
//! (answered at once, by the node's hand-off when the holder leaves, or
//! nil when the wait times out), holding it within its TTL, and releasing
//! it. The quorum client never waits on a node (it takes no `WAIT`), so
//! these clients speak the commands themselves (`link.rs`). Their holds go
//! to the history, whose checker sees two that overlap: a hand-off while
//! the lock is held (mutual exclusion).

use std::time::Duration;

use rand::rngs::StdRng;
use rand::Rng;

use crate::link::{self, Cycle, Link};
use crate::net::{self, Shared};
use crate::resp::Reply;
use crate::waits::ANSWER_DELAY_MS_MAX;

/// The key the waiting clients take (no other client takes it).
pub const KEY: &str = "queued";
/// Waiting clients per history that has them.
pub const CLIENTS: usize = 3;
/// Lock cycles per client.
const CYCLES: usize = 3;

/// Client `c` (an index of its own) on node `node`: [`CYCLES`] cycles of
/// wait, hold, release, with TTLs up to `ttl_max_ms` and waits up to twice
/// that.
pub async fn client(world: Shared, c: usize, node: usize, ttl_max_ms: u64, mut rng: StdRng) {
    let mut link = Link::new(&world, c, node);
    for cycle in 0..CYCLES {
        let owner = format!("waiter-c{c}-{cycle}");
        let Cycle { ttl_ms, work_ms, think_ms } = link::draw_cycle(&mut rng, ttl_max_ms);
        let wait_ms = rng.gen_range(1..=2 * ttl_max_ms);
        let (ttl, wait) = (ttl_ms.to_string(), wait_ms.to_string());
        let take = ["LOCK.ACQUIRE", KEY, &owner, &ttl, "WAIT", &wait].map(String::from);
        let began_ms = net::lock(&world).now_ms();
        // The call waits up to its timeout, and a little more for the
        // network.
        if let Some(Reply::Int(token)) = link.call_within(&take, wait_ms + 200).await {
            let now = net::lock(&world).now_ms();
            // Granted at most one hand-off look before its answer came.
            let valid_until_ms =
                link::valid_until_ms((now - ANSWER_DELAY_MS_MAX as i64).max(began_ms), ttl_ms);
            let hold = link::record_hold(&world, c, KEY, token, began_ms, valid_until_ms);
            tokio::time::sleep(Duration::from_millis(work_ms)).await;
            release(&world, &mut link, &owner, hold).await;
        }
        tokio::time::sleep(Duration::from_millis(think_ms)).await;
    }
}

/// Releases `owner`'s hold (index `hold`): it holds no more from the
/// first try.
async fn release(world: &Shared, link: &mut Link, owner: &str, hold: usize) {
    let released_ms = net::lock(world).now_ms();
    if let Some(h) = net::lock(world).history.holds.get_mut(hold) {
        h.released_ms = Some(released_ms);
    }
    let release = ["LOCK.RELEASE", KEY, owner].map(String::from);
    let _ = link.call_until_answered(&release).await;
}
