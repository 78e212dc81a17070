//! Fair waiting (`WAIT timeout-ms`): a FIFO queue of blocked clients per lock
//! key, and the hand-off of a freed lock to the head waiters in the same
//! step.
//!
//! A lock is freed in four ways, and each leads to [`settle`]:
//! - by a command of this module (RELEASE, EXIT to 0, a write that finds it
//!   expired): the command calls `settle` right after its write;
//! - by reaching its deadline: a timer armed at the next instant a holder
//!   may leave, while the key has waiters (Redis' lazy expiry is not waited
//!   for);
//! - by DEL/UNLINK/overwrite/Redis expiry/eviction: a keyspace event asks
//!   for a settle right after the command (a post-notification job on Redis
//!   7.2+, a 0 ms timer on 7.0, where writing inside a notification is
//!   unsafe);
//! - by FLUSHDB/FLUSHALL/SWAPDB: the server event does the same for every
//!   key with waiters in that database.
//!
//! Everything here runs on Redis' main thread; the mutexes only make the
//! statics safe and are never held across a call into Redis that could call
//! back into this module.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

use crate::clock;
use crate::config;
use crate::core::fencing;
use crate::core::lock::{self, Admission, Grant};
use crate::core::queue::{Full, KeyId, Queues, Waiter, TOTAL_MAX};
use crate::errors;
use crate::ffi::{self, Call, Key, Reply, TimerId, WaitResult, WaiterHandle};
use crate::keystate::{self, Failure};
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

/// Blocks the calling client at the tail of the key's queue. `next_free_ms`
/// is when a holder may next leave: the hand-off timer fires then.
pub fn wait(call: &Call<'_>, key: KeyId, waiter: Waiter<()>, timeout_ms: i64, next_free_ms: i64) -> Reply {
    let per_key_max = usize::try_from(config::MAX_WAITERS.get()).unwrap_or(0);
    let (on_key, on_node) = with_queues(|q| (q.len(&key), q.total()));
    if on_key >= per_key_max {
        stats::REJECTED.bump();
        return Reply::Error(errors::too_many_waiters(per_key_max));
    }
    if on_node >= TOTAL_MAX {
        stats::REJECTED.bump();
        return Reply::Error(errors::too_many_waiters_node(TOTAL_MAX));
    }
    // Deletions and overwrites of the key must now be seen.
    if let Err(e) = ffi::watch_keys(call) {
        redis_module::logging::log_warning(format!("lock: {e}"));
        return Reply::Error(errors::cannot_block());
    }
    let Some(handle) = call.block() else {
        return Reply::Error(errors::cannot_block());
    };
    // WAIT 0 waits without bound.
    let timer = (timeout_ms > 0).then(|| call.start_waiter_timer(timeout_ms, handle));
    let waiter = Waiter { handle, want: waiter.want, owner: waiter.owner, ttl_ms: waiter.ttl_ms, timer };
    match with_queues(|q| q.push(key.clone(), waiter, per_key_max)) {
        Ok(()) => {
            stats::WAITS_STARTED.bump();
            arm(call, &key, next_free_ms);
        }
        Err(full) => {
            // Checked above; unreachable unless the bound changed under us.
            let line = match full {
                Full::Key => errors::too_many_waiters(per_key_max),
                Full::Node => errors::too_many_waiters_node(TOTAL_MAX),
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
/// writer is not overtaken by readers behind it).
///
/// The whole run is decided in one transaction over one read of the key and
/// stored with one write (one replicated `HSET` for a run of readers): O(k)
/// for k waiters served, whatever the number of holders or waiters.
/// Called with the key open for writing, after any write of this module to
/// it, and by timers. Returns true if a waiter was handed the lock.
pub fn settle(call: &Call<'_>, key: &mut Key<'_>) -> bool {
    if !any_waiters() {
        return false;
    }
    let key_id = call.key_id();
    if queued(&key_id) == 0 {
        disarm(call, &key_id);
        return false;
    }
    // No grant in quarantine (waiters cannot normally exist then: WAIT is
    // refused in quarantine, and replicas have none); try again after it.
    if let Some((_, left_ms)) = node::quarantine() {
        arm(call, &key_id, clock::now_ms().saturating_add(left_ms));
        return false;
    }
    let mut served: Vec<(WaiterHandle, u64)> = Vec::new();
    let mut refused: Vec<(WaiterHandle, String)> = Vec::new();
    let mut retry_at: Option<i64> = None;
    // Every round but the last takes the head waiter out of the queue, so
    // the loop ends within the queue's length (bounded by lock.max-waiters).
    let result = keystate::run(key, |txn| loop {
        let head = with_queues(|q| q.peek(&key_id).map(|w| (w.want, w.ttl_ms, w.owner.clone())));
        let Some((want, ttl_ms, owner)) = head else { break };
        let grant = node::with_fencer(|f| lock::acquire(txn, want, owner, ttl_ms, Admission::Open, f));
        let line = match grant {
            Grant::Granted(fence) | Grant::Renewed(fence) => {
                if let Some(head) = take_head(call, &key_id) {
                    served.push((head, fence));
                }
                continue;
            }
            Grant::Busy | Grant::Quarantined => {
                // Held: serve when a holder may leave (every holder has a
                // deadline; without one, look again after the waiter's TTL
                // rather than strand the queue).
                let now = txn.now_ms();
                retry_at = Some(txn.next_free_at_ms().unwrap_or(now.saturating_add(ttl_ms)));
                break;
            }
            // The key changed kind under the waiter, or the semaphore's size.
            Grant::WrongKind { found } => errors::wrong_kind(found.name(), want.kind.name()),
            Grant::LimitMismatch { limit } => errors::limit_mismatch(limit, want.limit),
            Grant::ModeMismatch { held } => errors::mode_mismatch(held),
            Grant::TooManyHolds => errors::too_many_holds(crate::core::kind::HOLDS_MAX),
        };
        if let Some(head) = take_head(call, &key_id) {
            refused.push((head, line));
        }
    });
    let stored = match result {
        Ok((_, written)) => {
            if written.found_expired {
                // Found expired by the deadline timer (the usual hand-off on
                // expiry).
                stats::EXPIRIES.bump();
            }
            true
        }
        Err(Failure::NotALock) => {
            // The key now holds something that is not a lock (overwritten by
            // SET or another type): nobody can be granted it.
            fail_all(call, &key_id, &errors::not_a_lock());
            return false;
        }
        Err(Failure::WriteFailed) => false,
    };
    let any_served = stored && !served.is_empty();
    for (handle, fence) in served {
        let result = if stored {
            stats::GRANTS.bump();
            stats::WAITS_SERVED.bump();
            WaitResult::Granted(fencing::to_reply(fence))
        } else {
            stats::WAITS_FAILED.bump();
            WaitResult::Failed(errors::write_failed())
        };
        ffi::unblock(handle, result);
    }
    for (handle, line) in refused {
        stats::WAITS_FAILED.bump();
        ffi::unblock(handle, WaitResult::Failed(line));
    }
    match retry_at {
        Some(at) => arm(call, &key_id, at),
        None => disarm(call, &key_id),
    }
    any_served
}

/// Takes the head waiter out of its queue and stops its timeout timer.
fn take_head(call: &Call<'_>, key: &KeyId) -> Option<WaiterHandle> {
    let head = with_queues(|q| q.pop(key))?;
    if let Some(id) = head.timer {
        call.stop_waiter_timer(id);
    }
    Some(head.handle)
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

/// A hand-off timer fired, or a post-notification job ran: settle the key.
pub fn on_key_timer(call: &Call<'_>, key: &KeyId) {
    // The timer that fired is gone; a job leaves the armed timer in place.
    with_timers(|t| {
        if t.get(key).is_some_and(|&(_, due)| due <= clock::now_ms()) {
            t.remove(key);
        }
    });
    if let Some(mut open) = call.open_key(true) {
        let _ = settle(call, &mut open);
    }
}

/// A keyspace event on a key (inside the notification: no writes here).
pub fn on_key_changed(call: &Call<'_>) {
    if !any_waiters() {
        return;
    }
    let key = call.key_id();
    if queued(&key) == 0 {
        return;
    }
    if let Some(id) = call.after_notification(key.clone()) {
        // A 0 ms timer (Redis 7.0): it replaces any later one.
        let old = with_timers(|t| t.insert(key, (id, i64::MIN)));
        if let Some((old_id, _)) = old {
            call.stop_timer(old_id);
        }
    }
}

/// FLUSHDB (`db`) or FLUSHALL (`db` = -1) ended, or `db` was swapped with
/// another: every key with waiters there may have changed.
pub fn on_db_changed(call: &Call<'_>, db: i32) {
    if !any_waiters() {
        return;
    }
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
