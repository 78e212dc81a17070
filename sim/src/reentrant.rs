//! Reentrant locks with `LOCK.EXIT key owner ID request-id`: two clients
//! of their own on one node, each entering the lock twice, then leaving
//! it one hold at a time, each `EXIT` with an id of its own and sent again
//! with the same id when its reply does not come (the connection reset,
//! or no answer within the call's timeout): the id makes the node count
//! it once. The quorum client's `Redlock::exit` sends no id (it never
//! sends a call twice), so these clients speak the commands themselves,
//! over the simulated network and its faults (a delayed call on a
//! connection given up reaches the node after its resend: a duplicate).
//!
//! What they check: a node never answers an `EXIT` with fewer holds than
//! the holder believes it has left ("hold count"); and their holds go to
//! the history, whose checker sees two that overlap (mutual exclusion).

use std::time::Duration;

use rand::rngs::StdRng;

use crate::link::{self, Cycle, Link};
use crate::net::{self, Shared};
use crate::resp::Reply;

/// The key the reentrant clients take (no other client takes it).
pub const KEY: &str = "reentrant";
/// Lock cycles per client.
const CYCLES: usize = 3;

/// Client `c` (an index of its own) on node `node`: [`CYCLES`] cycles of
/// enter, enter, exit, work, exit, with TTLs up to `ttl_max_ms`.
pub async fn client(world: Shared, c: usize, node: usize, ttl_max_ms: u64, mut rng: StdRng) {
    let mut link = Link::new(&world, c, node);
    for cycle in 0..CYCLES {
        let owner = format!("reentrant-c{c}-{cycle}");
        let Cycle { ttl_ms, work_ms, think_ms } = link::draw_cycle(&mut rng, ttl_max_ms);
        hold_once(&world, &mut link, c, &owner, ttl_ms, work_ms).await;
        tokio::time::sleep(Duration::from_millis(think_ms)).await;
    }
}

/// One cycle. An `ENTER` whose reply does not come leaves an unknown
/// count: the cycle ends there (its holds run out with their TTL).
async fn hold_once(world: &Shared, link: &mut Link, c: usize, owner: &str, ttl_ms: u64, work_ms: u64) {
    let words = |parts: &[&str]| parts.iter().map(|p| p.to_string()).collect::<Vec<_>>();
    let ttl = ttl_ms.to_string();
    let enter = words(&["LOCK.ENTER", KEY, owner, &ttl]);
    let began_ms = net::lock(world).now_ms();
    let Some(Reply::Int(token)) = link.call(&enter).await else { return };
    // Valid from the call's start (the grant came after it).
    let hold = link::record_hold(world, c, KEY, token, began_ms, link::valid_until_ms(began_ms, ttl_ms));
    let mut believed = 1;
    let again_ms = net::lock(world).now_ms();
    if let Some(Reply::Int(_)) = link.call(&enter).await {
        believed = 2;
        if let Some(h) = net::lock(world).history.holds.get_mut(hold) {
            h.valid_until_ms = link::valid_until_ms(again_ms, ttl_ms);
        }
    }
    for exit in 0..believed {
        if exit > 0 {
            tokio::time::sleep(Duration::from_millis(work_ms)).await;
        }
        let id = format!("{owner}-exit-{exit}");
        let sent_ms = net::lock(world).now_ms();
        let reply = link.call_until_answered(&words(&["LOCK.EXIT", KEY, owner, "ID", &id])).await;
        let mut w = net::lock(world);
        let now = w.now_ms();
        let left = believed - exit - 1;
        match reply {
            Some(Reply::Int(holds)) if holds < left => {
                w.history.seen.push(format!(
                    "hold count: the node answered {holds} holds left at {now} ms to {owner}'s EXIT ID {id}, which believes it has {left} left"
                ));
            }
            Some(Reply::Int(_)) if left > 0 => continue,
            _ => {}
        }
        // Left, or unknown (no answer, nil): it holds no more, from the
        // last exit's first try (the node may free it there) or now.
        if let Some(h) = w.history.holds.get_mut(hold) {
            h.released_ms = Some(if left == 0 { sent_ms } else { now });
        }
        return;
    }
}
