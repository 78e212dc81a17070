//! Server-side waits (`WAIT timeout-ms`) on a simulated node: the core's
//! FIFO queues (`lock_core::queue`) and hand-off (`lock_core::waiting`:
//! the same `admission` and `serve_run` the module's `src/waiting.rs`
//! calls), with what the module's glue does around them restated: a
//! blocked call is answered when the hand-off serves it, when its timeout
//! passes (nil), or with the quarantine's error. The module's hand-off
//! timer (at the instant a holder may leave) is modelled by the blocked
//! connection looking at its key every [`POLL_MS`]: the core then hands
//! the key off, or finds it still held and changes nothing.
//! Single keys only: a set with `WAIT` is refused by the simulated node.

use std::collections::BTreeMap;
use std::time::Duration;

use lock_core::fencing::Fencer;
use lock_core::kind::Want;
use lock_core::memory::Holders;
use lock_core::queue::{KeyId, Queues, Waiter};
use lock_core::txn::Txn;
use lock_core::waiting;
use lock_protocol::code::ERR;

use crate::resp::Reply;

/// How often a blocked connection looks at its key (the hand-off timer).
pub const POLL_MS: u64 = 5;
/// `lock.max-waiters`' default: waiters per key.
const PER_KEY_MAX: usize = 1000;

/// A node's waiters: the core's queues, and the answers of the waiters
/// served whose connection has not read them yet.
#[derive(Default)]
pub struct Waits {
    queues: Queues<u64>,
    next_handle: u64,
    answered: BTreeMap<u64, Reply>,
}

/// The simulated node's only database.
fn key_id(key: &[u8]) -> KeyId {
    (0, key.to_vec())
}

impl Waits {
    /// How many wait for `key` (a newcomer may not barge past them).
    pub fn queued(&self, key: &[u8]) -> usize {
        self.queues.len(&key_id(key))
    }

    /// Queues a waiter for `key` at the node's clock `now_ms`: its handle
    /// (the call blocks), or the error when the queue is full.
    pub fn push(
        &mut self,
        key: &[u8],
        want: Want,
        owner: &[u8],
        ttl_ms: i64,
        wait_ms: i64,
        now_ms: i64,
    ) -> Reply {
        self.next_handle += 1;
        let handle = self.next_handle;
        let waiter = Waiter {
            handle,
            keys: std::iter::once((key_id(key), want)).collect(),
            owner: owner.to_vec(),
            ttl_ms,
            // WAIT 0 waits without bound.
            timeout_at_ms: (wait_ms > 0).then(|| now_ms.saturating_add(wait_ms)),
            since_ms: now_ms,
        };
        match self.queues.push(waiter, PER_KEY_MAX) {
            Ok(()) => Reply::Blocked(handle),
            Err(full) => Reply::Error(ERR, format!("too many waiters: {full:?}")),
        }
    }

    /// The key waiter `handle` waits for, while it waits.
    pub fn key_of(&self, handle: u64) -> Option<Vec<u8>> {
        self.queues.get(handle).and_then(|w| w.keys.first()).map(|((_, key), _)| key.clone())
    }

    /// The hand-off on `key`'s transaction: the run of head waiters the core
    /// serves, each answered its token or the reason it is refused.
    pub fn serve(&mut self, key: &[u8], txn: &mut Txn<'_, '_, Holders>, fencer: &mut Fencer) {
        let (served, _) = waiting::serve_run(&mut self.queues, &key_id(key), txn, fencer);
        for s in served {
            let reply = match s.outcome {
                Ok(fence) => Reply::Int(fence as i64),
                Err(why) => Reply::Error(ERR, format!("{why:?}")),
            };
            self.answered.insert(s.waiter.handle, reply);
        }
    }

    /// Every waiter of `key` answered `reply` (the key is refused to
    /// newcomers: a quarantine).
    pub fn fail_all(&mut self, key: &[u8], reply: &Reply) {
        for waiter in self.queues.drain(&key_id(key)) {
            self.answered.insert(waiter.handle, reply.clone());
        }
    }

    /// Waiter `handle`'s answer at `now_ms`, if it has one: served, timed
    /// out (nil), or gone (a crash emptied the queues: the connection is
    /// dead anyway).
    pub fn answer(&mut self, handle: u64, now_ms: i64) -> Option<Reply> {
        if let Some(reply) = self.answered.remove(&handle) {
            return Some(reply);
        }
        let timeout_at_ms = self.queues.get(handle).map(|w| w.timeout_at_ms)?;
        if timeout_at_ms.is_some_and(|at| now_ms >= at) {
            self.queues.remove(handle);
            return Some(Reply::Nil);
        }
        None
    }
}

/// A newcomer's admission to a free key (no barging past waiters).
pub fn admission(refused: bool, queued: usize) -> lock_core::lock::Admission {
    waiting::admission(refused, queued)
}

/// The blocked connection's side: `poll` (the node's answer, `Some(None)`
/// when the node went down) every [`POLL_MS`] until there is one, for at
/// most [`POLLS_MAX`] looks (`WAIT 0` waits without bound on the node).
pub async fn blocked(mut poll: impl FnMut() -> Option<Option<Reply>>) -> Option<Reply> {
    for _ in 0..POLLS_MAX {
        if let Some(answer) = poll() {
            return answer;
        }
        tokio::time::sleep(Duration::from_millis(POLL_MS)).await;
    }
    None
}

/// The most looks a blocked connection takes (a minute of simulated time).
const POLLS_MAX: u64 = 60_000 / POLL_MS;
