//! Server-side waits (`WAIT timeout-ms`) on a simulated node: the core's
//! FIFO queues (`lock_core::queue`) and hand-off (`lock_core::waiting`:
//! the same `admission` and `serve_run` the module's `src/waiting.rs`
//! calls), with what the module's glue does around them restated: a
//! blocked call is answered when the hand-off serves it, when its timeout
//! passes (nil), or with the quarantine's error. The node hands a key off
//! after every call on it while it has waiters, and when its timer is due
//! (the instant a holder may leave, as the core's `RunEnd::RetryAt` says);
//! a blocked connection is woken when its answer is in, and looks at that
//! timer when it is due.
//! Single keys only: a set with `WAIT` is refused by the simulated node.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;

use lock_core::fencing::Fencer;
use lock_core::kind::Want;
use lock_core::memory::Holders;
use lock_core::queue::{KeyId, Queues, Waiter};
use lock_core::txn::Txn;
use lock_core::waiting;
use lock_protocol::code::ERR;

use crate::resp::Reply;

/// How long after its grant a waiter may get its answer, at most.
pub const ANSWER_DELAY_MS_MAX: u64 = 5;
/// `lock.max-waiters`' default: waiters per key.
const PER_KEY_MAX: usize = 1000;

/// A node's waiters: the core's queues, and the answers of the waiters
/// served whose connection has not read them yet.
#[derive(Default)]
pub struct Waits {
    queues: Queues<u64>,
    next_handle: u64,
    answered: BTreeMap<u64, Reply>,
    /// When each key's head, held up, is looked at again (the module's
    /// hand-off timer, on the node's clock).
    due_ms: BTreeMap<Vec<u8>, i64>,
    /// What wakes each blocked connection when its answer is in.
    wakers: BTreeMap<u64, Arc<Notify>>,
}

/// What a blocked connection learns when it looks.
pub enum Look {
    /// Its answer (`None`: the node went down, the connection is dead).
    Answered(Option<Reply>),
    /// Not yet: wait for this to be notified, or this many ms at most
    /// (its timeout, or its key's hand-off timer).
    Until(Arc<Notify>, u64),
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
            Ok(()) => {
                self.wakers.insert(handle, Arc::default());
                Reply::Blocked(handle)
            }
            Err(full) => Reply::Error(ERR, format!("too many waiters: {full:?}")),
        }
    }

    /// Whether `key`'s hand-off timer is due at `now_ms` (or was never
    /// armed).
    pub fn is_due(&self, key: &[u8], now_ms: i64) -> bool {
        self.due_ms.get(key).is_none_or(|&at| now_ms >= at)
    }

    /// The key waiter `handle` waits for, while it waits.
    pub fn key_of(&self, handle: u64) -> Option<Vec<u8>> {
        self.queues.get(handle).and_then(|w| w.keys.first()).map(|((_, key), _)| key.clone())
    }

    /// The hand-off on `key`'s transaction: the run of head waiters the core
    /// serves, each answered its token or the reason it is refused.
    pub fn serve(&mut self, key: &[u8], txn: &mut Txn<'_, '_, Holders>, fencer: &mut Fencer) {
        let (served, end) = waiting::serve_run(&mut self.queues, &key_id(key), txn, fencer);
        match end {
            waiting::RunEnd::RetryAt(at_ms) => self.due_ms.insert(key.to_vec(), at_ms),
            _ => self.due_ms.remove(key),
        };
        for s in served {
            let reply = match s.outcome {
                Ok(fence) => Reply::Int(fence as i64),
                Err(why) => Reply::Error(ERR, format!("{why:?}")),
            };
            self.answered(s.waiter.handle, reply);
        }
    }

    /// Every waiter of `key` answered `reply` (the key is refused to
    /// newcomers: a quarantine).
    pub fn fail_all(&mut self, key: &[u8], reply: &Reply) {
        for waiter in self.queues.drain(&key_id(key)) {
            self.answered(waiter.handle, reply.clone());
        }
    }

    fn answered(&mut self, handle: u64, reply: Reply) {
        self.answered.insert(handle, reply);
        if let Some(waker) = self.wakers.get(&handle) {
            waker.notify_one();
        }
    }

    /// Wakes every blocked connection (the node crashed: they find it
    /// down).
    pub fn wake_all(&self) {
        for waker in self.wakers.values() {
            waker.notify_one();
        }
    }

    /// Waiter `handle`'s answer at `now_ms`: served, timed out (nil), or
    /// not yet (until when at most).
    pub fn answer(&mut self, handle: u64, now_ms: i64) -> Look {
        let timeout_at_ms = self.queues.get(handle).map(|w| w.timeout_at_ms);
        let reply = match (self.answered.remove(&handle), timeout_at_ms) {
            (Some(reply), _) => Some(reply),
            (None, Some(Some(at))) if now_ms >= at => {
                self.queues.remove(handle);
                Some(Reply::Nil)
            }
            // Gone without an answer (cannot happen: a crash resets the
            // node's waits and kills the connection first).
            (None, None) => Some(Reply::Error(ERR, "the wait was lost".into())),
            (None, Some(timeout_at_ms)) => {
                let key = self.key_of(handle).unwrap_or_default();
                let due_ms = self.due_ms.get(&key).copied();
                let next_ms = timeout_at_ms.into_iter().chain(due_ms).min().unwrap_or(now_ms + 1000);
                let waker = self.wakers.get(&handle).cloned().unwrap_or_default();
                return Look::Until(waker, u64::try_from(next_ms - now_ms).unwrap_or(0).max(1));
            }
        };
        self.wakers.remove(&handle);
        Look::Answered(reply)
    }
}

/// A newcomer's admission to a free key (no barging past waiters).
pub fn admission(refused: bool, queued: usize) -> lock_core::lock::Admission {
    waiting::admission(refused, queued)
}

/// The blocked connection's side: `look` at the node until it answers,
/// waking when notified or when the node's timer or the wait's timeout is
/// due, for at most [`LOOKS_MAX`] looks.
pub async fn blocked(mut look: impl FnMut() -> Look) -> Option<Reply> {
    for _ in 0..LOOKS_MAX {
        match look() {
            Look::Answered(answer) => return answer,
            Look::Until(waker, ms) => {
                tokio::select! {
                    _ = waker.notified() => {}
                    _ = tokio::time::sleep(Duration::from_millis(ms)) => {}
                }
            }
        }
    }
    None
}

/// The most looks a blocked connection takes (a node's clock running a
/// little slow may wake it early a few times).
const LOOKS_MAX: u64 = 10_000;
