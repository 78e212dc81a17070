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

use std::collections::{BTreeSet, HashMap};
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
/// Every waiter's timeout (module clock), earliest first, and the one timer
/// that fires at the earliest: serving a waiter only drops its entry here,
/// where a timer per waiter would cost a Redis timer created and stopped
/// (about 1,500 instructions each, measured) for every waiter.
static TIMEOUTS: Mutex<Timeouts> = Mutex::new(Timeouts { due: BTreeSet::new(), timer: None });

struct Timeouts {
    due: BTreeSet<(i64, WaiterHandle)>,
    /// The armed timer and the instant it fires for.
    timer: Option<(TimerId, i64)>,
}

fn with_timeouts<T>(f: impl FnOnce(&mut Timeouts) -> T) -> T {
    let mut guard = TIMEOUTS.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    f(&mut guard)
}
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
    let timeout_at_ms = (timeout_ms > 0).then(|| clock::now_ms().saturating_add(timeout_ms));
    let waiter =
        Waiter { handle, want: waiter.want, owner: waiter.owner, ttl_ms: waiter.ttl_ms, timeout_at_ms };
    match with_queues(|q| q.push(key.clone(), waiter, per_key_max)) {
        Ok(()) => {
            stats::WAITS_STARTED.bump();
            if let Some(at) = timeout_at_ms {
                add_timeout(call, at, handle);
            }
            arm(call, &key, next_free_ms);
        }
        Err(full) => {
            // Checked above; unreachable unless the bound changed under us.
            let line = match full {
                Full::Key => errors::too_many_waiters(per_key_max),
                Full::Node => errors::too_many_waiters_node(TOTAL_MAX),
            };
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
    // One outcome per waiter taken from the queue, in the same order:
    // granted (its fencing token) or refused (an error line).
    let mut outcomes: Vec<Result<u64, String>> = Vec::new();
    let mut retry_at: Option<i64> = None;
    // The run: waiters leave the head of the queue for as long as the head
    // can be granted (or must be refused), decided on one transaction. The
    // queue is bounded (lock.max-waiters), so the run is too.
    let mut taken = Vec::new();
    let result = keystate::run(key, |txn| {
        taken = with_queues(|q| {
            q.serve(&key_id, |head| {
                let owner = head.owner.clone();
                let grant = node::with_fencer(|f| {
                    lock::acquire(txn, head.want, owner, head.ttl_ms, Admission::Open, f)
                });
                let outcome = match grant {
                    Grant::Granted(fence) | Grant::Renewed(fence) => Ok(fence),
                    Grant::Busy | Grant::Quarantined => {
                        // Held: serve when a holder may leave (every holder
                        // has a deadline; without one, look again after the
                        // waiter's TTL rather than strand the queue).
                        let now = txn.now_ms();
                        retry_at = Some(txn.next_free_at_ms().unwrap_or(now.saturating_add(head.ttl_ms)));
                        return false;
                    }
                    // The key changed kind under the waiter, or the
                    // semaphore's size.
                    Grant::WrongKind { found } => {
                        Err(errors::wrong_kind(found.name(), head.want.kind.name()))
                    }
                    Grant::LimitMismatch { limit } => Err(errors::limit_mismatch(limit, head.want.limit)),
                    Grant::ModeMismatch { held } => Err(errors::mode_mismatch(held)),
                    Grant::TooManyHolds => Err(errors::too_many_holds(crate::core::kind::HOLDS_MAX)),
                };
                outcomes.push(outcome);
                true
            })
        });
    });
    // Their timeouts no longer apply.
    drop_timeouts(taken.iter().filter_map(|w| w.timeout_at_ms.map(|at| (at, w.handle))));
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
    let mut any_served = false;
    for (waiter, outcome) in taken.iter().zip(outcomes) {
        let result = match outcome {
            Ok(fence) if stored => {
                stats::GRANTS.bump();
                stats::WAITS_SERVED.bump();
                any_served = true;
                WaitResult::Granted(fencing::to_reply(fence))
            }
            Ok(_) => {
                stats::WAITS_FAILED.bump();
                WaitResult::Failed(errors::write_failed())
            }
            Err(line) => {
                stats::WAITS_FAILED.bump();
                WaitResult::Failed(line)
            }
        };
        ffi::unblock(waiter.handle, result);
    }
    match retry_at {
        Some(at) => arm(call, &key_id, at),
        None => disarm(call, &key_id),
    }
    any_served
}

/// Registers a waiter's timeout; the timeout timer fires no later than it.
fn add_timeout(call: &Call<'_>, at_ms: i64, handle: WaiterHandle) {
    let rearm = with_timeouts(|t| {
        t.due.insert((at_ms, handle));
        match t.timer {
            Some((_, due)) if due <= at_ms => None,
            other => Some(other.map(|(id, _)| id)),
        }
    });
    if let Some(old) = rearm {
        if let Some(id) = old {
            call.stop_timeout_timer(id);
        }
        let id = call.start_timeout_timer(at_ms.saturating_sub(clock::now_ms()).saturating_add(1));
        with_timeouts(|t| t.timer = Some((id, at_ms)));
    }
}

/// Forgets the timeouts of waiters that left their queue otherwise. The
/// timer stays armed: when it fires it finds nothing due and moves on to the
/// next timeout (cheaper than re-arming on every hand-off).
fn drop_timeouts(entries: impl Iterator<Item = (i64, WaiterHandle)>) {
    with_timeouts(|t| {
        for entry in entries {
            t.due.remove(&entry);
        }
    });
}

/// Answers every waiter of a key with an error and forgets the key.
fn fail_all(call: &Call<'_>, key_id: &KeyId, line: &str) {
    let waiters = with_queues(|q| q.drain(key_id));
    drop_timeouts(waiters.iter().filter_map(|w| w.timeout_at_ms.map(|at| (at, w.handle))));
    for w in waiters {
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
///
/// Unlike a command, a timer or a job is not routed by the cluster: when the
/// key's slot was migrated away (MIGRATE deletes the key here and fires the
/// event that armed this; Valkey's atomic slot migration deletes it
/// silently), granting here would create a second lock on a node that no
/// longer owns the key, while the real one lives on the new owner. The
/// waiters are told to retry instead.
pub fn on_key_timer(call: &Call<'_>, key: &KeyId) {
    // The timer that fired is gone; a job leaves the armed timer in place.
    with_timers(|t| {
        if t.get(key).is_some_and(|&(_, due)| due <= clock::now_ms()) {
            t.remove(key);
        }
    });
    if !call.key_is_local() {
        fail_all(call, key, &errors::slot_moved());
        return;
    }
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

/// The timeout timer fired (it is gone now): every waiter whose timeout
/// passed gets nil and leaves its queue; the timer is armed for the next.
pub fn on_wait_timeout(call: &Call<'_>) {
    let now = clock::now_ms();
    let (due, next) = with_timeouts(|t| {
        t.timer = None;
        let later = t.due.split_off(&(now.saturating_add(1), 0));
        let due = std::mem::replace(&mut t.due, later);
        (due, t.due.first().map(|&(at, _)| at))
    });
    for (_, handle) in due {
        if let Some((key, _)) = with_queues(|q| q.remove(handle)) {
            stats::WAITS_TIMED_OUT.bump();
            ffi::unblock(handle, WaitResult::TimedOut);
            forget_if_idle(call, &key);
        }
    }
    if let Some(at) = next {
        let id = call.start_timeout_timer(at.saturating_sub(now).saturating_add(1));
        with_timeouts(|t| t.timer = Some((id, at)));
    }
}

/// `CLIENT UNBLOCK` of a waiter (Redis answers it nil): it leaves its queue.
pub fn on_client_unblock(call: &Call<'_>, handle: WaiterHandle) {
    if let Some((key, waiter)) = with_queues(|q| q.remove(handle)) {
        drop_timeouts(waiter.timeout_at_ms.map(|at| (at, handle)).into_iter());
        stats::WAITS_TIMED_OUT.bump();
        forget_if_idle(call, &key);
    }
}

/// Returns true if the waiter was still queued (the caller then unblocks it).
pub fn on_disconnect(call: &Call<'_>, handle: WaiterHandle) -> bool {
    match with_queues(|q| q.remove(handle)) {
        Some((key, waiter)) => {
            drop_timeouts(waiter.timeout_at_ms.map(|at| (at, handle)).into_iter());
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
