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
//! A waiter for a set of keys (LOCK.MACQUIRE ... WAIT) stands in the queue
//! of every key of the set and holds nothing while it waits. It is served
//! when it is at the head of all those queues and every key is grantable,
//! all keys at once in one transaction; until then the keys where it is
//! the head stay as they are (free ones too: nobody overtakes it there).
//! Queues list waiters in arrival order (`core/queue.rs`), so the oldest
//! waiter heads all its queues and waits only for holders, which all have
//! deadlines: no deadlock, and no waiter is overtaken by a later one on any
//! key it waits for. When a head leaves a queue (served, timed out, gone),
//! the next head of each of its keys is looked at ([`wake`]).
//!
//! Everything here runs on Redis' main thread; the mutexes only make the
//! statics safe and are never held across a call into Redis that could call
//! back into this module.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

use crate::clock;
use crate::config;
use crate::core::fencing;
use crate::core::forgetting::{Cause, Quarantined};
use crate::core::kind::Want;
use crate::core::lock::{self, Admission, AllGrant, Grant};
use crate::core::queue::{Full, KeyId, Queues, Waiter, TOTAL_MAX};
use crate::errors;
use crate::ffi::{self, Call, Reply, TimerId, WaitResult, WaiterHandle};
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

/// Up to `count` waiters of `key`, head first (copies: LOCK.WAITERS).
pub fn waiting_for(key: &KeyId, count: usize) -> Vec<Waiter<WaiterHandle>> {
    if !any_waiters() {
        return Vec::new();
    }
    with_queues(|q| q.waiters(key).take(count).cloned().collect())
}

/// Blocks the calling client at the tail of the queue of each of the
/// waiter's keys. `next_free_ms[i]` is when a holder of key `i` may next
/// leave (None when it has no holder): the hand-off timer fires then.
pub fn wait(call: &Call<'_>, waiter: Waiter<()>, timeout_ms: i64, next_free_ms: &[Option<i64>]) -> Reply {
    let per_key_max = usize::try_from(config::MAX_WAITERS.get()).unwrap_or(0);
    let (key_full, on_node) =
        with_queues(|q| (waiter.keys.iter().any(|(key, _)| q.len(key) >= per_key_max), q.total()));
    if key_full {
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
    let now = clock::now_ms();
    // WAIT 0 waits without bound.
    let timeout_at_ms = (timeout_ms > 0).then(|| now.saturating_add(timeout_ms));
    let keys = waiter.keys;
    let arms: Vec<(KeyId, i64)> =
        keys.iter().zip(next_free_ms).map(|((key, _), free)| (key.clone(), free.unwrap_or(now))).collect();
    let waiter =
        Waiter { handle, keys, owner: waiter.owner, ttl_ms: waiter.ttl_ms, timeout_at_ms, since_ms: now };
    match with_queues(|q| q.push(waiter, per_key_max)) {
        Ok(()) => {
            stats::WAITS_STARTED.bump();
            if let Some(at) = timeout_at_ms {
                add_timeout(call, at, handle);
            }
            for (key, due) in &arms {
                arm(call, key, *due);
            }
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

/// Hands the call's key to its waiters, from the head of its queue, for as
/// long as the head can be served: a run of waiters for this key alone
/// ([`serve_run`]), or a waiter for a set of keys ([`serve_set`]), then
/// the next head. Stops at a head that cannot be served yet, with a timer
/// armed for when it may be. Opens the key itself: call it with the key
/// closed. Returns true if a waiter was handed the lock.
///
/// Each round serves at least one waiter or stops, so the loop is bounded
/// by the queue's length (`lock.max-waiters`).
pub fn settle(call: &Call<'_>) -> bool {
    if !any_waiters() {
        return false;
    }
    let key_id = call.key_id();
    // No grant while the key is refused to anyone new (a quarantine of the
    // node, the database or the key, or the eviction guard): its waiters
    // are answered the reason at once, as a new WAIT would be, rather than
    // left to time out without knowing why.
    if let Some(refusal) = node::refusal(key_id.0, &key_id.1, clock::now_ms()) {
        if queued(&key_id) > 0 {
            stats::QUARANTINED.bump();
            fail_all(call, &key_id, &errors::refused(&refusal));
        }
        return false;
    }
    let mut any_served = false;
    loop {
        let head = with_queues(|q| q.peek(&key_id).map(|w| (w.handle, w.is_set())));
        let next = match head {
            None => {
                disarm(call, &key_id);
                return any_served;
            }
            Some((_, false)) => serve_run(call, &key_id),
            Some((handle, true)) => serve_set(call, handle),
        };
        match next {
            Round::Served => any_served = true,
            Round::AtSetHead => {}
            Round::Stop => return any_served,
        }
    }
}

/// How a round of [`settle`] ended.
enum Round {
    /// Waiters were served; look at the new head.
    Served,
    /// A run for this key alone served nobody: the head waits for a set.
    AtSetHead,
    /// The head cannot be served yet (a timer is armed if it needs one), or
    /// the key can serve nobody.
    Stop,
}

/// Serves waiters for the call's key alone from the head of its queue, for
/// as long as the head can be granted: one waiter for an exclusive lock, a
/// run of readers for a shared lock, as many as there are free permits for
/// a semaphore. A head that cannot be granted yet stops the run (FIFO
/// across modes: a queued writer is not overtaken by readers behind it),
/// and so does a head that waits for a set of keys.
///
/// The whole run is decided in one transaction over one read of the key and
/// stored with one write (one replicated `HSET` for a run of readers): O(k)
/// for k waiters served, whatever the number of holders or waiters.
fn serve_run(call: &Call<'_>, key_id: &KeyId) -> Round {
    let Some(mut key) = call.open_key(true) else { return Round::Stop };
    // One outcome per waiter taken from the queue, in the same order:
    // granted (its fencing token) or refused (an error line).
    let mut outcomes: Vec<Result<u64, String>> = Vec::new();
    let mut retry_at: Option<i64> = None;
    let mut at_set = false;
    // The run: waiters leave the head of the queue for as long as the head
    // can be granted (or must be refused), decided on one transaction. The
    // queue is bounded (lock.max-waiters), so the run is too.
    let mut taken = Vec::new();
    let result = keystate::run(&mut key, |txn| {
        taken = with_queues(|q| {
            q.serve(key_id, |head| {
                let Some(want) = head.want_on(key_id).filter(|_| !head.is_set()) else {
                    at_set = true;
                    return false;
                };
                let owner = head.owner.clone();
                let grant =
                    node::with_fencer(|f| lock::acquire(txn, want, owner, head.ttl_ms, Admission::Open, f));
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
                    refused => Err(errors::grant_refused(refused, want)),
                };
                outcomes.push(outcome);
                true
            })
        });
    });
    drop(key);
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
        Err(failure @ (Failure::NotALock | Failure::TooFar { .. })) => {
            // The key now holds something that is not a lock (overwritten by
            // SET or another type): nobody can be granted it.
            fail_all(call, key_id, &failure.line());
            return Round::Stop;
        }
        Err(Failure::WriteFailed) => false,
    };
    let mut served = false;
    for (waiter, outcome) in taken.iter().zip(outcomes) {
        served |= outcome.is_ok() && stored;
        answer(waiter, outcome, stored);
    }
    if let Some(at) = retry_at {
        arm(call, key_id, at);
        return Round::Stop;
    }
    match (served, at_set, stored) {
        (true, ..) => Round::Served,
        (false, true, true) => Round::AtSetHead,
        // Waiters were refused (answered with errors): look at the next.
        (false, false, true) if !taken.is_empty() => Round::Served,
        _ => Round::Stop,
    }
}

/// Serves `handle`, a waiter for a set of keys at the head of the call's
/// key, if it heads the queue of every key of its set and every key is
/// grantable now: all keys in one transaction, with one fencing token, or
/// none. Otherwise it keeps waiting, with a timer armed on each of its keys
/// that is held.
fn serve_set(call: &Call<'_>, handle: WaiterHandle) -> Round {
    let Some(waiter) = with_queues(|q| q.at_every_head(handle).then(|| q.get(handle).cloned()).flatten())
    else {
        // Behind another waiter on one of its keys: that key's hand-off
        // comes back to it.
        return Round::Stop;
    };
    let names: Vec<&[u8]> = waiter.keys.iter().map(|((_, name), _)| name.as_slice()).collect();
    let wants: Vec<_> = waiter.keys.iter().map(|&(_, want)| want).collect();
    let admissions = vec![Admission::Open; wants.len()];
    let (result, next_free) = call.for_keys(&names, |calls| {
        let mut next_free = Vec::new();
        let result = keystate::transact_all(calls, |txns| {
            let grant = node::with_fencer(|f| {
                lock::acquire_all(txns, &wants, &waiter.owner, waiter.ttl_ms, &admissions, f)
            });
            next_free = txns.iter().map(|t| t.next_free_at_ms()).collect();
            grant
        });
        (result, next_free)
    });
    let outcome = match result {
        Ok((AllGrant::Granted(fence) | AllGrant::Renewed(fence), written)) => {
            stats::EXPIRIES.add(written.iter().filter(|w| w.found_expired).count() as u64);
            Ok(fence)
        }
        Ok((AllGrant::Refused { why: Grant::Busy | Grant::Quarantined, .. }, _)) => {
            for ((key, _), free) in waiter.keys.iter().zip(&next_free) {
                if let Some(at) = free {
                    arm(call, key, *at);
                }
            }
            return Round::Stop;
        }
        Ok((AllGrant::Refused { at, why }, _)) => {
            let want = wants.get(at).copied().unwrap_or(Want::plain());
            Err(errors::in_set(&errors::grant_refused(why, want), at))
        }
        Err((_, Failure::WriteFailed)) => Err(errors::write_failed()),
        Err((at, failure)) => Err(errors::in_set(&failure.line(), at)),
    };
    // Served or refused: it leaves every queue, and the next head of each
    // of its other keys is looked at.
    let Some(waiter) = with_queues(|q| q.remove(handle)) else { return Round::Stop };
    drop_timeouts(waiter.timeout_at_ms.map(|at| (at, handle)).into_iter());
    answer(&waiter, outcome, true);
    let here = call.key_id();
    wake(call, waiter.keys.iter().map(|(key, _)| key).filter(|key| **key != here));
    Round::Served
}

/// Answers a waiter taken from its queues: its fencing token if `stored`,
/// else an error.
fn answer(waiter: &Waiter<WaiterHandle>, outcome: Result<u64, String>, stored: bool) {
    let result = match outcome {
        Ok(fence) if stored => {
            stats::GRANTS.bump();
            stats::WAITS_SERVED.bump();
            stats::record_wait(clock::now_ms().saturating_sub(waiter.since_ms));
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

/// The queues of `keys` have a new head (the old one left): look at them
/// right after this command or callback, each with its own hand-off.
fn wake<'k>(call: &Call<'_>, keys: impl Iterator<Item = &'k KeyId>) {
    for key in keys {
        if queued(key) > 0 {
            arm(call, key, i64::MIN);
        }
    }
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

/// Answers every waiter of a key with an error and forgets the key. A
/// waiter for a set leaves its other queues too; their next heads are
/// looked at.
fn fail_all(call: &Call<'_>, key_id: &KeyId, line: &str) {
    let waiters = with_queues(|q| q.drain(key_id));
    drop_timeouts(waiters.iter().filter_map(|w| w.timeout_at_ms.map(|at| (at, w.handle))));
    for w in &waiters {
        stats::WAITS_FAILED.bump();
        ffi::unblock(w.handle, WaitResult::Failed(line.to_owned()));
    }
    disarm(call, key_id);
    wake(call, waiters.iter().flat_map(|w| w.keys.iter().map(|(key, _)| key)).filter(|key| *key != key_id));
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
    let _ = settle(call);
}

/// A keyspace event on a key (inside the notification: no writes here).
/// The module's own writes fire none, so every event is another command
/// removing or changing the key, an eviction, or Redis' own expiry: if a
/// lock there may still be in force, the key is quarantined until it is
/// not. Redis expires a lock key by itself only at its backstop, after the
/// lock's deadline, its lock-delay and the clock-jump tolerance, when no
/// lock there is in force any more; an expiry while one may be is a
/// forgetting too (an EXPIRE that shortened it, or a forward wall-clock jump
/// beyond the tolerance). A key restored by `RESTORE` (the target of a
/// `MIGRATE`) may be a lock arriving: its deadline is noted.
pub fn on_key_changed(call: &Call<'_>, event: &[u8]) {
    if !call.is_replica_or_loading() {
        let cause = match event {
            b"evicted" => Cause::Evicted,
            b"expired" => Cause::Expired,
            other => Cause::Changed(String::from_utf8_lossy(other).into()),
        };
        if let Some(q) = node::key_changed(call.db(), call.key_name(), cause, clock::now_ms()) {
            removed(call, &q);
        }
        if event == b"restore" {
            note_arrived(call);
        }
    }
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

/// A lock possibly in force was removed behind the module's back: counted
/// and logged (at most a line a second: an eviction storm must not flood
/// the log).
fn removed(call: &Call<'_>, q: &Quarantined) {
    stats::LOCKS_REMOVED.bump();
    if q.cause == Cause::Evicted {
        stats::LOCKS_EVICTED.bump();
    }
    let scope = if q.key { "the key" } else { "its database" };
    log_limited(format!(
        "lock: '{}' (db {}): {}; new locks refused on {scope} for {} ms",
        String::from_utf8_lossy(call.key_name()),
        call.db(),
        q.cause.describe(q.db),
        q.left_ms(clock::now_ms())
    ));
}

/// Logs `line` unless a line was logged less than a second ago; says how
/// many were held back when it logs again.
fn log_limited(line: String) {
    static LAST_MS: AtomicI64 = AtomicI64::new(i64::MIN);
    static HELD_BACK: AtomicU64 = AtomicU64::new(0);
    let now = clock::now_ms();
    if now.saturating_sub(LAST_MS.load(Ordering::Relaxed)) < 1_000 {
        HELD_BACK.fetch_add(1, Ordering::Relaxed);
        return;
    }
    LAST_MS.store(now, Ordering::Relaxed);
    let held = HELD_BACK.swap(0, Ordering::Relaxed);
    let more = if held > 0 { format!(" ({held} more such lines held back)") } else { String::new() };
    redis_module::logging::log_warning(format!("{line}{more}"));
}

/// A key arrived by `RESTORE` (a migration's target): if it holds a lock,
/// its latest deadline is noted like one this node wrote.
fn note_arrived(call: &Call<'_>) {
    let Some(key) = call.open_key(false) else { return };
    let now = clock::now_ms();
    if let Ok(lock) = keystate::load(&key, now) {
        if let Some(latest) =
            crate::core::txn::Stored::holders(&lock).iter().map(|(_, h)| h.deadline_ms).max()
        {
            node::note_lock(call.db(), call.key_name(), latest, now);
        }
    }
}

/// FLUSHDB of `db`, or FLUSHALL (`db` -1), ended: the databases whose locks
/// may still be in force are quarantined, and every key with waiters there
/// is looked at (its waiters are told why).
pub fn on_db_flushed(call: &Call<'_>, db: i32) {
    if !call.is_replica_or_loading() {
        let found = node::db_flushed(db, clock::now_ms());
        db_quarantined(&found);
    }
    recheck_waiters(call, db);
}

/// SWAPDB `a` `b`: both databases now hold each other's keys.
pub fn on_dbs_swapped(call: &Call<'_>, a: i32, b: i32) {
    if !call.is_replica_or_loading() {
        let found = node::dbs_swapped(a, b, clock::now_ms());
        db_quarantined(&found);
    }
    recheck_waiters(call, a);
    recheck_waiters(call, b);
}

fn db_quarantined(found: &[Quarantined]) {
    if let Some(q) = found.first() {
        stats::DB_QUARANTINES.bump();
        let now = clock::now_ms();
        let dbs: Vec<String> = found.iter().map(|q| q.db.to_string()).collect();
        redis_module::logging::log_warning(format!(
            "lock: {}; new locks refused in db {} for {} ms",
            q.cause.describe(q.db),
            dbs.join(", "),
            found.iter().map(|q| q.left_ms(now)).max().unwrap_or(0)
        ));
    }
}

/// Keys of `db` (every database: -1) may have changed all at once (a
/// flush, a swap, a slot export, the eviction guard turned on): every key
/// with waiters there is looked at right after this callback.
pub fn recheck_waiters(call: &Call<'_>, db: i32) {
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
        if let Some(waiter) = leave(call, handle) {
            stats::WAITS_TIMED_OUT.bump();
            ffi::unblock(waiter.handle, WaitResult::TimedOut);
        }
    }
    if let Some(at) = next {
        let id = call.start_timeout_timer(at.saturating_sub(now).saturating_add(1));
        with_timeouts(|t| t.timer = Some((id, at)));
    }
}

/// `CLIENT UNBLOCK` of a waiter (Redis answers it nil): it leaves its queues.
pub fn on_client_unblock(call: &Call<'_>, handle: WaiterHandle) {
    if let Some(waiter) = leave(call, handle) {
        drop_timeouts(waiter.timeout_at_ms.map(|at| (at, handle)).into_iter());
        stats::WAITS_TIMED_OUT.bump();
    }
}

/// Returns true if the waiter was still queued (the caller then unblocks it).
pub fn on_disconnect(call: &Call<'_>, handle: WaiterHandle) -> bool {
    match leave(call, handle) {
        Some(waiter) => {
            drop_timeouts(waiter.timeout_at_ms.map(|at| (at, handle)).into_iter());
            stats::WAITS_ABANDONED.bump();
            true
        }
        None => false,
    }
}

/// Takes a waiter out of every queue it stands in (timeout, unblock,
/// disconnect). Where it was the head, the next waiter may be servable now
/// (a free key behind a waiter for a set, readers behind a writer), so that
/// key is looked at; a queue left empty has its timer stopped.
fn leave(call: &Call<'_>, handle: WaiterHandle) -> Option<Waiter<WaiterHandle>> {
    let (waiter, headed) = with_queues(|q| {
        let headed = q.heads_of(handle);
        q.remove(handle).map(|w| (w, headed))
    })?;
    for (key, _) in &waiter.keys {
        if queued(key) == 0 {
            disarm(call, key);
        }
    }
    wake(call, headed.iter());
    Some(waiter)
}
