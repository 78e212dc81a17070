//! The waiting policy (`WAIT timeout-ms`), decided in one place: who may
//! take a free key, which waiters a key serves when it frees and in what
//! order, and when to look at a key again. Pure: the adapter
//! (`src/waiting.rs`) opens the keys, blocks and unblocks the clients and
//! arms the timers these decisions ask for.
//!
//! The rules:
//! - **No barging.** A newcomer may take a key only while nobody waits for
//!   it ([`admission`]): a free key belongs to the head of its queue.
//! - **FIFO per key, across modes.** A key serves its queue from the head:
//!   a run of waiters for this key alone, for as long as the head can be
//!   granted (one holder alone, a run of readers, as many permits as are
//!   free), and stops at the first head that cannot be granted yet, so that
//!   nobody behind it is served first ([`serve_run`]).
//! - **Sets all or nothing, without deadlock.** A waiter for a set of keys
//!   (LOCK.MACQUIRE) stands in the queue of each key and holds nothing while
//!   it waits. It is served only when it heads every one of its queues and
//!   every key can be granted, all keys at once with one token
//!   ([`serve_set`]); until then the keys where it is the head stay as they
//!   are (free ones too). Queues grow only at the tail, so the oldest waiter
//!   heads all its queues and waits only for holders, which all have
//!   deadlines: no deadlock, and nobody overtakes it on any of its keys.
//! - **When to look again.** A head that cannot be granted yet is looked at
//!   again when a holder of its key may leave: the earliest deadline plus
//!   its lock-delay ([`Txn::next_free_at_ms`]), or, if the key reports none,
//!   after the head's own TTL rather than never.
//!
//! [`Waiting`] is the node's waiting state (the queues, a timer per key with
//! waiters, every waiter's timeout): its bookkeeping is here, the timers
//! themselves (Redis timers) in the adapter.

use std::collections::{BTreeSet, HashMap};
use std::hash::Hash;

use super::fencing::Fencer;
use super::lock::{self, Admission, AllGrant, Grant};
use super::queue::{Full, KeyId, Queues, Waiter};
use super::txn::{Stored, Txn};

/// Whether a newcomer may be granted a free key now: not while the key is
/// refused to anyone new (a quarantine, the eviction guard: `refused`), and
/// not while anyone waits for it (`queued`: no barging).
pub fn admission(refused: bool, queued: usize) -> Admission {
    if refused {
        Admission::Quarantined
    } else if queued > 0 {
        Admission::Queued
    } else {
        Admission::Open
    }
}

/// A waiter taken from the queues: granted (its fencing token), or refused
/// for a reason waiting cannot cure (the key now holds another kind of
/// lock, another permit count, ...).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Served<H> {
    pub waiter: Waiter<H>,
    pub outcome: Result<u64, Grant>,
}

/// Why a run of [`serve_run`] stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunEnd<H> {
    /// Nobody waits for the key any more.
    Empty,
    /// The head waits for a set of keys: [`serve_set`] decides for it.
    AtSet(H),
    /// The head cannot be granted yet: look at the key again at this
    /// instant.
    RetryAt(i64),
}

/// Serves the queue of `key` from its head, on one transaction over the
/// key: head waiters for this key alone are granted for as long as the head
/// can be (each with its own token, or its own renewal if it already
/// holds), or taken out refused when waiting cannot cure why. Stops at a
/// head that cannot be granted yet, at a head waiting for a set, or at the
/// end of the queue. O(k) for k waiters served, whatever the number of
/// holders or waiters. The served leave every queue they stood in.
pub fn serve_run<H: Copy + Eq + Hash, S: Stored + ?Sized>(
    queues: &mut Queues<H>,
    key: &KeyId,
    txn: &mut Txn<'_, '_, S>,
    fencer: &mut Fencer,
) -> (Vec<Served<H>>, RunEnd<H>) {
    let mut outcomes = Vec::new();
    let mut end = RunEnd::Empty;
    let taken = queues.serve(key, |head| {
        let Some(want) = head.want_on(key).filter(|_| !head.is_set()) else {
            end = RunEnd::AtSet(head.handle);
            return false;
        };
        match lock::acquire(txn, want, head.owner.clone(), head.ttl_ms, Admission::Open, fencer) {
            Grant::Granted(fence) | Grant::Renewed(fence) => outcomes.push(Ok(fence)),
            Grant::Busy | Grant::Quarantined => {
                end = RunEnd::RetryAt(retry_at(txn, head.ttl_ms));
                return false;
            }
            refused => outcomes.push(Err(refused)),
        }
        true
    });
    invariant!(taken.len() == outcomes.len(), "one outcome per waiter taken");
    let served =
        taken.into_iter().zip(outcomes).map(|(waiter, outcome)| Served { waiter, outcome }).collect();
    (served, end)
}

/// When a head that cannot be granted yet is looked at again: when a holder
/// of the key may leave; without one, after the head's TTL rather than
/// stranding the queue.
pub fn retry_at<S: Stored + ?Sized>(txn: &Txn<'_, '_, S>, ttl_ms: i64) -> i64 {
    txn.next_free_at_ms().unwrap_or_else(|| txn.now_ms().saturating_add(ttl_ms))
}

/// The set waiter `handle`, if it may be served now: it heads the queue of
/// every key of its set (a copy; it stays queued until [`serve_set`]
/// decides).
pub fn ready_set<H: Copy + Eq + Hash>(queues: &Queues<H>, handle: H) -> Option<Waiter<H>> {
    queues.at_every_head(handle).then(|| queues.get(handle).cloned()).flatten()
}

/// What [`serve_set`] decided for a waiter for a set of keys.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SetDecision {
    /// Every key granted, with this one token (or renewed, if it held
    /// them all): the waiter leaves its queues, served.
    Granted(u64),
    /// Not every key can be granted yet: it keeps waiting, and each key
    /// that is held is looked at again when its holder may leave.
    Wait(Vec<Option<i64>>),
    /// Refused for a reason waiting cannot cure, on key `at` of the set:
    /// the waiter leaves its queues, answered that reason.
    Refused { at: usize, why: Grant },
}

/// Decides for a waiter for a set that heads all its queues ([`ready_set`]),
/// on one transaction per key of its set (in the set's order): all or
/// nothing, one token for the whole set.
pub fn serve_set<'o, H, S: Stored + ?Sized>(
    waiter: &'o Waiter<H>,
    txns: &mut [Txn<'_, 'o, S>],
    fencer: &mut Fencer,
) -> SetDecision {
    let wants: Vec<_> = waiter.keys.iter().map(|&(_, want)| want).collect();
    let admissions = vec![Admission::Open; wants.len()];
    match lock::acquire_all(txns, &wants, &waiter.owner, waiter.ttl_ms, &admissions, fencer) {
        AllGrant::Granted(fence) | AllGrant::Renewed(fence) => SetDecision::Granted(fence),
        AllGrant::Refused { why: Grant::Busy | Grant::Quarantined, .. } => {
            SetDecision::Wait(txns.iter().map(Txn::next_free_at_ms).collect())
        }
        AllGrant::Refused { at, why } => SetDecision::Refused { at, why },
    }
}

/// What the adapter does about a key's timer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arm<T> {
    /// A timer already fires early enough.
    Keep,
    /// Start a timer for the instant asked (after stopping this one).
    Start { stop: Option<T> },
}

/// The node's waiting state: the queues, one timer per key with waiters
/// (its id and the instant it fires for), and every waiter's timeout, with
/// the one timer that fires at the earliest (a timer per waiter would cost a
/// Redis timer created and stopped for every waiter served).
#[derive(Debug)]
pub struct Waiting<H, T> {
    pub queues: Queues<H>,
    timers: HashMap<KeyId, (T, i64)>,
    timeouts: BTreeSet<(i64, H)>,
    timeout_timer: Option<(T, i64)>,
}

impl<H: Copy + Eq + Hash + Ord, T: Copy> Default for Waiting<H, T> {
    fn default() -> Self {
        Waiting {
            queues: Queues::default(),
            timers: HashMap::new(),
            timeouts: BTreeSet::new(),
            timeout_timer: None,
        }
    }
}

impl<H: Copy + Eq + Hash + Ord, T: Copy> Waiting<H, T> {
    /// Queues a waiter, refused when a key of it or the node is full.
    pub fn push(&mut self, waiter: Waiter<H>, per_key_max: usize) -> Result<(), Full> {
        let timeout = waiter.timeout_at_ms.map(|at| (at, waiter.handle));
        self.queues.push(waiter, per_key_max)?;
        if let Some(entry) = timeout {
            self.timeouts.insert(entry);
        }
        Ok(())
    }

    /// A waiter leaves (served, refused, timed out, gone): out of every
    /// queue, its timeout forgotten. The keys whose queue it headed, whose
    /// next head may be servable now.
    pub fn remove(&mut self, handle: H) -> Option<(Waiter<H>, Vec<KeyId>)> {
        let headed = self.queues.heads_of(handle);
        let waiter = self.queues.remove(handle)?;
        self.forget_timeout(&waiter);
        Some((waiter, headed))
    }

    /// Forgets the timeout of a waiter that left its queues otherwise. Its
    /// timer stays armed: when it fires it finds nothing due and moves on
    /// (cheaper than re-arming on every hand-off).
    pub fn forget_timeout(&mut self, waiter: &Waiter<H>) {
        if let Some(at) = waiter.timeout_at_ms {
            self.timeouts.remove(&(at, waiter.handle));
        }
    }

    /// Whether the timeout timer must be (re)started to fire no later than
    /// `at_ms`.
    pub fn arm_timeouts(&self, at_ms: i64) -> Arm<T> {
        match self.timeout_timer {
            Some((_, due)) if due <= at_ms => Arm::Keep,
            other => Arm::Start { stop: other.map(|(id, _)| id) },
        }
    }

    pub fn timeout_timer_started(&mut self, id: T, at_ms: i64) {
        self.timeout_timer = Some((id, at_ms));
    }

    /// The timeout timer fired at `now_ms` (it is gone): the waiters whose
    /// timeout passed, and when the timer must fire next, if it must.
    pub fn timed_out(&mut self, now_ms: i64) -> (Vec<H>, Option<i64>) {
        self.timeout_timer = None;
        let mut due = Vec::new();
        while let Some(&(at, handle)) = self.timeouts.first() {
            if at > now_ms {
                break;
            }
            self.timeouts.pop_first();
            due.push(handle);
        }
        (due, self.timeouts.first().map(|&(at, _)| at))
    }

    /// Whether `key`'s timer must be (re)started to fire no later than
    /// `due_ms`.
    pub fn arm(&self, key: &KeyId, due_ms: i64) -> Arm<T> {
        match self.timers.get(key) {
            Some(&(_, due)) if due <= due_ms => Arm::Keep,
            other => Arm::Start { stop: other.map(|&(id, _)| id) },
        }
    }

    pub fn timer_started(&mut self, key: KeyId, id: T, due_ms: i64) {
        self.timers.insert(key, (id, due_ms));
    }

    /// `key` needs no timer any more: the one to stop.
    pub fn disarm(&mut self, key: &KeyId) -> Option<T> {
        self.timers.remove(key).map(|(id, _)| id)
    }

    /// `key`'s timer fired at `now_ms` (a job, run right after a
    /// notification, leaves a later timer in place).
    pub fn timer_fired(&mut self, key: &KeyId, now_ms: i64) {
        if self.timers.get(key).is_some_and(|&(_, due)| due <= now_ms) {
            self.timers.remove(key);
        }
    }
}

#[cfg(test)]
mod tests;
