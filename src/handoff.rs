//! Fair waiting (`WAIT timeout-ms`): a FIFO queue of blocked clients per lock
//! key, and the hand-off of a freed lock to the head waiter in the same step.
//!
//! A lock is freed in four ways, and each leads to [`settle`]:
//! - by a command of this module (RELEASE, EXIT to 0, a write that finds it
//!   expired): `commands::with_lock` calls `settle` right after its write;
//! - by reaching its deadline: a timer armed at the holder's deadline while
//!   the key has waiters (Redis' lazy expiry is not waited for);
//! - by DEL/UNLINK/overwrite/Redis expiry/eviction: a keyspace event arms a
//!   0 ms timer (writing inside a notification is unsafe on Redis 7.0);
//! - by FLUSHDB/FLUSHALL: the flush event does the same for every key with
//!   waiters in that database.
//!
//! Everything here runs on Redis' main thread; the mutexes only make the
//! statics safe and are never held across a call into Redis that could call
//! back into this module.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

use crate::clock;
use crate::commands::{self, Verdict, Write};
use crate::config;
use crate::core::lock::Admission;
use crate::core::queue::{Full, KeyId, Queues, Waiter};
use crate::errors;
use crate::ffi::{self, Call, Key, Reply, TimerId, WaitResult, WaiterHandle};
use crate::node;
use crate::stats;

static QUEUES: Mutex<Option<Queues<WaiterHandle>>> = Mutex::new(None);
/// One timer per key with waiters: (timer id, due instant on the module clock).
static TIMERS: Mutex<Option<HashMap<KeyId, (TimerId, i64)>>> = Mutex::new(None);
/// Waiters on the node; read without locking on every keyspace event.
static WAITING: AtomicUsize = AtomicUsize::new(0);

fn queues() -> MutexGuard<'static, Option<Queues<WaiterHandle>>> {
    QUEUES.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn with_queues<T>(f: impl FnOnce(&mut Queues<WaiterHandle>) -> T) -> T {
    let mut guard = queues();
    let q = guard.get_or_insert_with(Queues::default);
    let out = f(q);
    WAITING.store(q.total(), Ordering::Relaxed);
    out
}

fn with_timers<T>(f: impl FnOnce(&mut HashMap<KeyId, (TimerId, i64)>) -> T) -> T {
    let mut guard = TIMERS.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    f(guard.get_or_insert_with(HashMap::new))
}

/// True if any client waits on any key (the cheap check for hot paths).
pub fn any_waiters() -> bool {
    WAITING.load(Ordering::Relaxed) > 0
}

pub fn waiting_now() -> usize {
    WAITING.load(Ordering::Relaxed)
}

pub fn queued(key: &KeyId) -> usize {
    if !any_waiters() {
        return 0;
    }
    with_queues(|q| q.len(key))
}

/// Blocks the calling client at the tail of the key's queue. `deadline_ms`
/// is the current holder's deadline, when the hand-off timer must fire.
pub fn wait(call: &Call<'_>, key: KeyId, waiter: Waiter<()>, timeout_ms: i64, deadline_ms: i64) -> Reply {
    let per_key_max = usize::try_from(config::MAX_WAITERS.get()).unwrap_or(0);
    let len = with_queues(|q| (q.len(&key), q.total()));
    if len.0 >= per_key_max {
        stats::REJECTED.bump();
        return Reply::Error(errors::too_many_waiters(per_key_max));
    }
    if len.1 >= crate::core::queue::TOTAL_MAX {
        stats::REJECTED.bump();
        return Reply::Error(errors::too_many_waiters_node(crate::core::queue::TOTAL_MAX));
    }
    let Some(handle) = call.block() else {
        return Reply::Error(errors::cannot_block());
    };
    // WAIT 0 waits without bound.
    let timer = (timeout_ms > 0).then(|| call.start_waiter_timer(timeout_ms, handle));
    let waiter =
        Waiter { handle, request: waiter.request, owner: waiter.owner, ttl_ms: waiter.ttl_ms, timer };
    match with_queues(|q| q.push(key.clone(), waiter, per_key_max)) {
        Ok(()) => {
            stats::WAITS_STARTED.bump();
            arm(call, &key, deadline_ms);
        }
        Err(full) => {
            // Checked above; unreachable unless the bound changed under us.
            let line = match full {
                Full::Key => errors::too_many_waiters(per_key_max),
                Full::Node => errors::too_many_waiters_node(crate::core::queue::TOTAL_MAX),
            };
            if let Some(id) = timer {
                call.stop_waiter_timer(id);
            }
            stats::WAITS_FAILED.bump();
            ffi::unblock(handle, WaitResult::Failed(line));
        }
    }
    Reply::Blocked
}

/// Serves waiters from the head of the key's queue for as long as the head
/// can be granted: one waiter for an exclusive lock, a run of readers for a
/// shared lock, as many as there are free permits for a semaphore. A head
/// that cannot be granted yet stops the run (FIFO across modes: a queued
/// writer is not overtaken by readers behind it). Called with the key open
/// for writing, after any write of this module to it, and by timers.
/// Returns true if a waiter was handed the lock.
pub fn settle(call: &Call<'_>, key: &mut Key<'_>) -> bool {
    if !any_waiters() {
        return false;
    }
    let key_id = call.key_id();
    let now = clock::now_ms();
    let mut run = Run { pending: None, granted: Vec::new(), served: false };
    // Every round but the last takes the head waiter out of the queue, so
    // the loop ends within the queue's length (bounded by lock.max-waiters).
    loop {
        let head = with_queues(|q| q.peek(&key_id).map(|w| (w.request, w.owner.clone(), w.ttl_ms)));
        let Some((request, owner, ttl_ms)) = head else {
            disarm(call, &key_id);
            break;
        };
        // No grant in quarantine (waiters cannot normally exist then: WAIT is
        // refused in quarantine, and replicas have none); try again after it.
        if let Some((_, left_ms)) = node::quarantine() {
            arm(call, &key_id, now.saturating_add(left_ms));
            break;
        }
        // The state to decide on: the grants of this run not yet stored, or
        // the key.
        let decision = match &run.pending {
            Some(Write::StoreGroup { value, .. }) => match commands::decode(value) {
                Some(current) => commands::decide(current, request, &owner, ttl_ms, now, Admission::Open),
                None => break,
            },
            _ => match commands::read_silently(key) {
                Ok(current) => commands::decide(current, request, &owner, ttl_ms, now, Admission::Open),
                Err(()) => {
                    // The key now holds something that is not a lock
                    // (overwritten by SET or another type): nobody can be
                    // granted it.
                    fail_all(call, &key_id, &errors::not_a_lock());
                    break;
                }
            },
        };
        if decision.found_expired {
            // Found expired by the deadline timer (the usual hand-off on
            // expiry).
            stats::EXPIRIES.bump();
        }
        match decision.verdict {
            Verdict::Granted(fence) | Verdict::Renewed(fence) => {
                let Some(head) = with_queues(|q| q.pop(&key_id)) else { break };
                if let Some(id) = head.timer {
                    call.stop_waiter_timer(id);
                }
                run.granted.push((head.handle, fence));
                let group = matches!(decision.write, Write::StoreGroup { .. });
                run.pending = Some(decision.write);
                if !group {
                    // A single-holder lock: nobody else can follow.
                    run.store(call, key, now);
                }
            }
            // The key changed kind under the waiter, or the semaphore's size.
            Verdict::Refused(line) => {
                if let Some(head) = with_queues(|q| q.pop(&key_id)) {
                    if let Some(id) = head.timer {
                        call.stop_waiter_timer(id);
                    }
                    stats::WAITS_FAILED.bump();
                    ffi::unblock(head.handle, WaitResult::Failed(line));
                }
            }
            Verdict::Busy | Verdict::Quarantined => {
                // Held: serve when a holder leaves. (Expired holders found on
                // the way are removed by the decision's write.)
                if !matches!(decision.write, Write::Keep) {
                    run.pending = Some(decision.write);
                }
                match decision.retry_at_ms {
                    Some(at) => arm(call, &key_id, at),
                    // Held by nobody who leaves by itself (cannot happen:
                    // every holder has a deadline); look again soon rather
                    // than strand the queue.
                    None => arm(call, &key_id, now.saturating_add(ttl_ms)),
                }
                break;
            }
        }
    }
    run.store(call, key, now);
    run.served
}

/// The grants of one [`settle`] not yet stored. A run of readers or permits
/// is stored (and replicated) once, with all its holders: writing the value
/// once per waiter would cost O(n²) bytes here and in the replication
/// stream for n queued readers.
struct Run {
    pending: Option<Write>,
    granted: Vec<(WaiterHandle, u64)>,
    served: bool,
}

impl Run {
    /// Stores the pending value, then answers the waiters granted by it.
    fn store(&mut self, call: &Call<'_>, key: &mut Key<'_>, now: i64) {
        let stored = self.pending.take().is_none_or(|write| write.apply(call, key, now));
        for (handle, fence) in self.granted.drain(..) {
            let result = if stored {
                stats::GRANTS.bump();
                stats::WAITS_SERVED.bump();
                self.served = true;
                WaitResult::Granted(commands::clamp(fence))
            } else {
                stats::WAITS_FAILED.bump();
                WaitResult::Failed(errors::write_failed())
            };
            ffi::unblock(handle, result);
        }
    }
}

/// Answers every waiter of a key with an error and forgets the key.
fn fail_all(call: &Call<'_>, key_id: &KeyId, line: &str) {
    for w in with_queues(|q| q.drain(key_id)) {
        if let Some(id) = w.timer {
            call.stop_waiter_timer(id);
        }
        stats::WAITS_FAILED.bump();
        ffi::unblock(w.handle, WaitResult::Failed(line.to_owned()));
    }
    disarm(call, key_id);
}

/// Makes sure a timer fires for `key` no later than `due_ms` (module clock).
fn arm(call: &Call<'_>, key: &KeyId, due_ms: i64) {
    let existing = with_timers(|t| t.get(key).copied());
    if let Some((id, due)) = existing {
        if due <= due_ms {
            return;
        }
        call.stop_timer(id);
    }
    // +1: the timer fires on the millisecond after the deadline, when the
    // lock reads as expired.
    let delay = due_ms.saturating_sub(clock::now_ms()).saturating_add(1).max(0);
    let id = call.start_timer(delay, key.clone());
    with_timers(|t| t.insert(key.clone(), (id, due_ms)));
}

fn disarm(call: &Call<'_>, key: &KeyId) {
    if let Some((id, _)) = with_timers(|t| t.remove(key)) {
        call.stop_timer(id);
    }
}

/// A hand-off timer fired (it is gone now): settle the key.
///
/// Unlike a command, a timer is not routed by the cluster: when the key's
/// slot was migrated away (MIGRATE deletes the key here and fires the event
/// that armed this timer; Valkey's atomic slot migration deletes it
/// silently), granting here would create a second lock on a node that no
/// longer owns the key, while the real one lives on the new owner. The
/// waiters are told to retry instead.
pub fn on_timer(call: &Call<'_>, key: &KeyId) {
    with_timers(|t| t.remove(key));
    if !call.key_is_local() {
        fail_all(call, key, &errors::slot_moved());
        return;
    }
    if let Some(mut open) = call.open_key(true) {
        let _ = settle(call, &mut open);
    }
}

/// A key with waiters was deleted, overwritten, expired or evicted.
pub fn on_key_changed(call: &Call<'_>, key: KeyId) {
    if queued(&key) > 0 {
        arm(call, &key, i64::MIN);
    }
}

/// FLUSHDB (`db`) or FLUSHALL (`db` = -1) ended, or `db` was swapped with
/// another: every key with waiters there may have changed.
pub fn on_flush(call: &Call<'_>, db: i32) {
    for key in with_queues(|q| q.keys_in(db)) {
        arm(call, &key, i64::MIN);
    }
}

/// A waiter's timeout timer fired (it is gone now): answer nil.
pub fn on_wait_timeout(call: &Call<'_>, handle: WaiterHandle) {
    if let Some((key, _)) = with_queues(|q| q.remove(handle)) {
        stats::WAITS_TIMED_OUT.bump();
        ffi::unblock(handle, WaitResult::TimedOut);
        forget_if_idle(call, &key);
    }
}

/// `CLIENT UNBLOCK` of a waiter (Redis answers it nil): it leaves its queue.
pub fn on_client_unblock(call: &Call<'_>, handle: WaiterHandle) {
    if let Some((key, waiter)) = with_queues(|q| q.remove(handle)) {
        if let Some(id) = waiter.timer {
            call.stop_waiter_timer(id);
        }
        stats::WAITS_TIMED_OUT.bump();
        forget_if_idle(call, &key);
    }
}

/// Returns true if the waiter was still queued (the caller then unblocks it).
pub fn on_disconnect(call: &Call<'_>, handle: WaiterHandle) -> bool {
    match with_queues(|q| q.remove(handle)) {
        Some((key, waiter)) => {
            if let Some(id) = waiter.timer {
                call.stop_waiter_timer(id);
            }
            stats::WAITS_ABANDONED.bump();
            forget_if_idle(call, &key);
            true
        }
        None => false,
    }
}

fn forget_if_idle(call: &Call<'_>, key: &KeyId) {
    if with_queues(|q| q.len(key)) == 0 {
        disarm(call, key);
    }
}
