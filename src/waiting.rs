//! Fair waiting (`WAIT timeout-ms`), the Redis side: blocking and
//! unblocking clients, opening keys, arming timers, and the events that may
//! free a lock. Every decision (who is admitted, which waiters a freed key
//! serves and in what order, when to look again) is the waiting policy's,
//! in `core::waiting`; the queues and the timers' bookkeeping live in the
//! node's state (`node::Node::with_waiting`).
//!
//! A lock is freed in four ways, and each leads to [`serve_key`]:
//! - by a command of this module (RELEASE, EXIT to 0, a write that finds it
//!   expired): the command serves the key right after its write;
//! - by reaching its deadline: a timer armed at the next instant a holder
//!   may leave, while the key has waiters (Redis' lazy expiry is not waited
//!   for);
//! - by DEL/UNLINK/overwrite/Redis expiry/eviction: a keyspace event asks
//!   for a look right after the command (a post-notification job on Redis
//!   7.2+, a 0 ms timer on 7.0, where writing inside a notification is
//!   unsafe);
//! - by FLUSHDB/FLUSHALL/SWAPDB: the server event does the same for every
//!   key with waiters in that database.
//!
//! When a head leaves a queue (served, timed out, gone), the next head of
//! each of its keys is looked at ([`wake`]).

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

use crate::clock;
use crate::core::forgetting::{Cause, Quarantined};
use crate::core::queue::{Full, KeyId, Waiter, TOTAL_MAX};
use crate::core::waiting::{self as policy, Arm, RunEnd, Served, SetDecision};
use crate::errors;
use crate::ffi::{self, Call, Reply, WaitResult, WaiterHandle};
use crate::grants::{self, Outcome};
use crate::keystate::{self, Failure};
use crate::node::{Node, NODE};

/// Waiters of `key` (0 when nobody waits anywhere: no lock taken).
pub fn queued(node: &Node, key: &KeyId) -> usize {
    if !node.any_waiters() {
        return 0;
    }
    node.with_waiting(|w| w.queues.len(key))
}

/// Up to `count` waiters of `key`, head first (copies: LOCK.WAITERS).
pub fn waiting_for(node: &Node, key: &KeyId, count: usize) -> Vec<Waiter<WaiterHandle>> {
    if !node.any_waiters() {
        return Vec::new();
    }
    node.with_waiting(|w| w.queues.waiters(key).take(count).cloned().collect())
}

/// Blocks the calling client at the tail of the queue of each of the
/// waiter's keys. `next_free_ms[i]` is when a holder of key `i` may next
/// leave (None when it has no holder): the hand-off timer fires then.
pub fn wait(
    call: &Call<'_>,
    node: &Node,
    now_ms: i64,
    waiter: Waiter<()>,
    timeout_ms: i64,
    next_free_ms: &[Option<i64>],
) -> Reply {
    let per_key_max = usize::try_from(node.settings.max_waiters.get()).unwrap_or(0);
    let (key_full, on_node) = node.with_waiting(|w| {
        (waiter.keys.iter().any(|(key, _)| w.queues.len(key) >= per_key_max), w.queues.total())
    });
    if key_full || on_node >= TOTAL_MAX {
        node.stats.rejected.bump();
        return Reply::Error(full(if key_full { Full::Key } else { Full::Node }, per_key_max));
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
    let timeout_at_ms = (timeout_ms > 0).then(|| now_ms.saturating_add(timeout_ms));
    let keys = waiter.keys;
    let arms: Vec<(KeyId, i64)> =
        keys.iter().zip(next_free_ms).map(|((key, _), free)| (key.clone(), free.unwrap_or(now_ms))).collect();
    let waiter =
        Waiter { handle, keys, owner: waiter.owner, ttl_ms: waiter.ttl_ms, timeout_at_ms, since_ms: now_ms };
    match node.with_waiting(|w| w.push(waiter, per_key_max)) {
        Ok(()) => {
            node.stats.waits_started.bump();
            if let Some(at) = timeout_at_ms {
                arm_timeouts(call, node, now_ms, at);
            }
            for (key, due) in &arms {
                arm(call, node, now_ms, key, *due);
            }
        }
        Err(reason) => {
            // Checked above; unreachable unless the bound changed under us.
            node.stats.waits_failed.bump();
            ffi::unblock(handle, WaitResult::Failed(full(reason, per_key_max)));
        }
    }
    Reply::Blocked
}

fn full(reason: Full, per_key_max: usize) -> String {
    match reason {
        Full::Key => errors::too_many_waiters(per_key_max),
        Full::Node => errors::too_many_waiters_node(TOTAL_MAX),
    }
}

/// Hands the call's key to its waiters, from the head of its queue, for as
/// long as the head can be served: a run of waiters for this key alone, or
/// a waiter for a set of keys, then the next head. Stops at a head that
/// cannot be served yet, with a timer armed for when it may be. A key
/// refused to newcomers (a quarantine, the eviction guard) answers its
/// waiters the reason at once, as a new WAIT would be, rather than leaving
/// them to time out without knowing why; a key that now holds something
/// that is not a lock answers `WRONGTYPE` first, as a new call would (and
/// as a set's waiter served from another of its keys is answered). Opens
/// the key itself: call it with the key closed. Returns true if a waiter
/// was handed the lock.
///
/// Each round serves at least one waiter or stops, so the loop is bounded
/// by the queue's length (`lock.max-waiters`).
pub fn serve_key(call: &Call<'_>, node: &Node, now_ms: i64) -> bool {
    if !node.any_waiters() {
        return false;
    }
    let key = call.key_id();
    if let Some(refusal) = node.refusal(key.0, &key.1, now_ms) {
        if queued(node, &key) > 0 {
            let line = match not_a_lock(call, node, now_ms) {
                Some(failure) => failure.line(),
                None => grants::counted_refusal(&node.stats, &refusal),
            };
            fail_all(call, node, now_ms, &key, &line);
        }
        return false;
    }
    let mut any_served = false;
    loop {
        let head = node.with_waiting(|w| w.queues.peek(&key).map(|w| (w.handle, w.is_set())));
        let round = match head {
            None => {
                disarm(call, node, &key);
                return any_served;
            }
            Some((_, false)) => serve_run(call, node, now_ms, &key),
            Some((handle, true)) => serve_set(call, node, now_ms, handle),
        };
        match round {
            Round::Served => any_served = true,
            Round::AtSetHead => {}
            Round::Stop => return any_served,
        }
    }
}

/// Why nobody can be granted the call's key whatever its quarantine: it
/// holds something that is not a lock (overwritten by `SET` or another
/// type), or a lock value the module could not have written. Which of a
/// set waiter's keys fires its timer first must not change its answer.
fn not_a_lock(call: &Call<'_>, node: &Node, now_ms: i64) -> Option<Failure> {
    let key = call.open_key(false)?;
    keystate::load(&key, &node.rules(now_ms)).err()
}

/// How a round of [`serve_key`] ended.
enum Round {
    /// Waiters were served (or refused): look at the new head.
    Served,
    /// A run for this key alone served nobody: the head waits for a set.
    AtSetHead,
    /// The head cannot be served yet (a timer is armed if it needs one), or
    /// the key can serve nobody.
    Stop,
}

/// A run of waiters for the key alone ([`policy::serve_run`]), decided on
/// one transaction over one read of the key and stored with one write.
fn serve_run(call: &Call<'_>, node: &Node, now_ms: i64, key: &KeyId) -> Round {
    let Some(mut open) = call.open_key(true) else { return Round::Stop };
    let mut decided = (Vec::new(), RunEnd::Empty);
    let result = keystate::run(&mut open, node, now_ms, |txn| {
        decided = node.with_fencer(|fencer| {
            node.with_waiting(|w| {
                let (served, end) = policy::serve_run(&mut w.queues, key, txn, fencer);
                for s in &served {
                    w.forget_timeout(&s.waiter);
                }
                (served, end)
            })
        });
    });
    drop(open);
    let (served, end) = decided;
    let stored = match result {
        Ok((_, written)) => {
            if written.found_expired {
                // Found expired by the deadline timer (the usual hand-off on
                // expiry).
                node.stats.expiries.bump();
            }
            true
        }
        Err(failure @ (Failure::NotALock | Failure::TooFar { .. })) => {
            // The key now holds something that is not a lock (overwritten by
            // SET or another type): nobody can be granted it.
            fail_all(call, node, now_ms, key, &failure.line());
            return Round::Stop;
        }
        Err(Failure::WriteFailed) => false,
    };
    let taken = !served.is_empty();
    let mut granted = false;
    for s in served {
        granted |= s.outcome.is_ok() && stored;
        if s.outcome.is_ok() && stored {
            node.keep_counter(call, &s.waiter.owner, now_ms);
        }
        answer(node, now_ms, s, stored, None);
    }
    if let RunEnd::RetryAt(at) = end {
        arm(call, node, now_ms, key, at);
        return Round::Stop;
    }
    match (granted, end, stored) {
        (true, ..) => Round::Served,
        (false, RunEnd::AtSet(_), true) => Round::AtSetHead,
        // Waiters were refused (answered with errors): look at the next.
        (false, _, true) if taken => Round::Served,
        _ => Round::Stop,
    }
}

/// A waiter for a set of keys at the head of the call's key
/// ([`policy::serve_set`]): when it heads the queue of every key of its set,
/// all keys in one transaction with one fencing token, or none. Otherwise
/// it keeps waiting, with a timer armed on each of its keys that is held.
fn serve_set(call: &Call<'_>, node: &Node, now_ms: i64, handle: WaiterHandle) -> Round {
    let Some(waiter) = node.with_waiting(|w| policy::ready_set(&w.queues, handle)) else {
        // Behind another waiter on one of its keys: that key's hand-off
        // comes back to it.
        return Round::Stop;
    };
    let names: Vec<&[u8]> = waiter.keys.iter().map(|((_, name), _)| name.as_slice()).collect();
    let result = call.for_keys(&names, |calls| {
        keystate::transact_all(calls, node, now_ms, |txns| {
            node.with_fencer(|fencer| policy::serve_set(&waiter, txns, fencer))
        })
    });
    let (outcome, refused_at) = match result {
        Ok((SetDecision::Granted(fence), written)) => {
            node.stats.expiries.add(written.iter().filter(|w| w.found_expired).count() as u64);
            node.keep_counter(call, &waiter.owner, now_ms);
            (Ok(fence), None)
        }
        Ok((SetDecision::Wait(next_free), _)) => {
            for ((key, _), free) in waiter.keys.iter().zip(&next_free) {
                if let Some(at) = free {
                    arm(call, node, now_ms, key, *at);
                }
            }
            return Round::Stop;
        }
        Ok((SetDecision::Refused { at, why }, _)) => (Err(why), Some(at)),
        Err((at, failure)) => {
            let line = errors::in_set(&failure.line(), at, names.get(at).copied().unwrap_or_default());
            let Some((waiter, _)) = node.with_waiting(|w| w.remove(handle)) else { return Round::Stop };
            node.stats.waits_failed.bump();
            ffi::unblock(waiter.handle, WaitResult::Failed(line));
            wake_others(call, node, now_ms, &waiter);
            return Round::Served;
        }
    };
    // Served or refused: it leaves every queue, and the next head of each
    // of its other keys is looked at.
    let Some((waiter, _)) = node.with_waiting(|w| w.remove(handle)) else { return Round::Stop };
    let others = waiter.clone();
    answer(node, now_ms, Served { waiter, outcome }, true, refused_at);
    wake_others(call, node, now_ms, &others);
    Round::Served
}

/// Answers a waiter taken from its queues: its fencing token if `stored`,
/// else an error (`in_set`: which key of its set refused it).
fn answer(node: &Node, now_ms: i64, served: Served<WaiterHandle>, stored: bool, in_set: Option<usize>) {
    let Served { waiter, outcome } = served;
    let (key, want) = match waiter.keys.get(in_set.unwrap_or(0)) {
        Some(((_, name), want)) => (name.as_slice(), Some(*want)),
        None => (&[][..], None),
    };
    let result = match outcome
        .map_err(|why| grants::outcome(why, want.unwrap_or_else(crate::core::kind::Want::plain)))
    {
        Ok(fence) if stored => {
            node.stats.waits_served.bump();
            node.stats.record_wait(now_ms.saturating_sub(waiter.since_ms));
            WaitResult::Granted(grants::counted_token(&node.stats, fence, false))
        }
        Ok(_) => {
            node.stats.waits_failed.bump();
            WaitResult::Failed(errors::write_failed())
        }
        Err(refused) => {
            node.stats.waits_failed.bump();
            let line = match refused {
                Outcome::Refused(line) => line,
                _ => errors::internal(),
            };
            WaitResult::Failed(match in_set {
                Some(at) => errors::in_set(&line, at, key),
                None => line,
            })
        }
    };
    ffi::unblock(waiter.handle, result);
}

/// The other keys of a waiter that left: their queues have a new head.
fn wake_others(call: &Call<'_>, node: &Node, now_ms: i64, waiter: &Waiter<WaiterHandle>) {
    let here = call.key_id();
    wake(call, node, now_ms, waiter.keys.iter().map(|(key, _)| key).filter(|key| **key != here));
}

/// The queues of `keys` have a new head (the old one left): look at them
/// right after this command or callback, each with its own hand-off.
fn wake<'k>(call: &Call<'_>, node: &Node, now_ms: i64, keys: impl Iterator<Item = &'k KeyId>) {
    for key in keys {
        if queued(node, key) > 0 {
            arm(call, node, now_ms, key, i64::MIN);
        }
    }
}

/// Makes sure a timer fires for `key` no later than `due_ms` (module clock).
fn arm(call: &Call<'_>, node: &Node, now_ms: i64, key: &KeyId, due_ms: i64) {
    let Arm::Start { stop } = node.with_waiting(|w| w.arm(key, due_ms)) else { return };
    if let Some(id) = stop {
        call.stop_timer(id);
    }
    // +1: the timer fires on the millisecond after the deadline, when the
    // lock reads as expired.
    let delay = due_ms.saturating_sub(now_ms).saturating_add(1).max(0);
    let id = call.start_timer(delay, key.clone());
    node.with_waiting(|w| w.timer_started(key.clone(), id, due_ms));
}

fn disarm(call: &Call<'_>, node: &Node, key: &KeyId) {
    if let Some(id) = node.with_waiting(|w| w.disarm(key)) {
        call.stop_timer(id);
    }
}

/// Makes sure the timeout timer fires no later than `at_ms`.
fn arm_timeouts(call: &Call<'_>, node: &Node, now_ms: i64, at_ms: i64) {
    let Arm::Start { stop } = node.with_waiting(|w| w.arm_timeouts(at_ms)) else { return };
    if let Some(id) = stop {
        call.stop_timeout_timer(id);
    }
    let id = call.start_timeout_timer(at_ms.saturating_sub(now_ms).saturating_add(1));
    node.with_waiting(|w| w.timeout_timer_started(id, at_ms));
}

/// Answers every waiter of a key with an error and forgets the key. A
/// waiter for a set leaves its other queues too; their next heads are
/// looked at.
fn fail_all(call: &Call<'_>, node: &Node, now_ms: i64, key: &KeyId, line: &str) {
    let waiters = node.with_waiting(|w| {
        let drained = w.queues.drain(key);
        for waiter in &drained {
            w.forget_timeout(waiter);
        }
        drained
    });
    for w in &waiters {
        node.stats.waits_failed.bump();
        // A waiter for a set learns which of its keys failed it.
        let line = match w.keys.iter().position(|(k, _)| k == key) {
            Some(at) if w.is_set() => errors::in_set(line, at, &key.1),
            _ => line.to_owned(),
        };
        ffi::unblock(w.handle, WaitResult::Failed(line));
    }
    disarm(call, node, key);
    wake(
        call,
        node,
        now_ms,
        waiters.iter().flat_map(|w| w.keys.iter().map(|(k, _)| k)).filter(|k| *k != key),
    );
}

/// Takes a waiter out of every queue it stands in (timeout, unblock,
/// disconnect). Where it was the head, the next waiter may be servable now
/// (a free key behind a waiter for a set, readers behind a writer), so that
/// key is looked at; a queue left empty has its timer stopped.
fn leave(call: &Call<'_>, node: &Node, now_ms: i64, handle: WaiterHandle) -> Option<Waiter<WaiterHandle>> {
    let (waiter, headed) = node.with_waiting(|w| w.remove(handle))?;
    for (key, _) in &waiter.keys {
        if queued(node, key) == 0 {
            disarm(call, node, key);
        }
    }
    wake(call, node, now_ms, headed.iter());
    Some(waiter)
}

// --- Redis' callbacks: each is an edge, so it reads the clock once ----------

/// A hand-off timer fired, or a post-notification job ran: serve the key.
///
/// Unlike a command, a timer or a job is not routed by the cluster: when the
/// key's slot was migrated away (MIGRATE deletes the key here and fires the
/// event that armed this; Valkey's atomic slot migration deletes it
/// silently), granting here would create a second lock on a node that no
/// longer owns the key, while the real one lives on the new owner. The
/// waiters are told to retry instead.
pub fn on_key_timer(call: &Call<'_>, key: &KeyId) {
    let (node, now_ms) = (&NODE, clock::now_ms());
    node.with_waiting(|w| w.timer_fired(key, now_ms));
    if !call.key_is_local() {
        fail_all(call, node, now_ms, key, &errors::slot_moved());
        return;
    }
    let _ = serve_key(call, node, now_ms);
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
    let (node, now_ms) = (&NODE, clock::now_ms());
    if call.is_replica_or_loading() {
        // A master's writes, or the AOF's: decided where they first ran.
    } else if call.is_replicated_or_loading() {
        // A master whose keys are written by a link that is not a client's:
        // Valkey's atomic slot import (its writes come flagged as
        // replicated), before the slot is handed over. The lock arriving,
        // not one removed here.
        note_arrived(call, node, now_ms);
    } else if event == b"restore" {
        // RESTORE creates a key that was not there (a REPLACE of one that
        // was fires its own `del` first): a lock arriving, never a removal.
        note_arrived(call, node, now_ms);
    } else if let Some(q) = node.key_changed(call.db(), call.key_name(), Cause::of_event(event), now_ms) {
        // The AOF and replicas hold the quarantine with the removal.
        call.replicate_forgotten(q.until_ms, event);
        removed(call, node, now_ms, &q);
    }
    if !node.any_waiters() {
        return;
    }
    let key = call.key_id();
    if queued(node, &key) == 0 {
        return;
    }
    if let Some(id) = call.after_notification(key.clone()) {
        // A 0 ms timer (Redis 7.0): it replaces any later one.
        if let Some(old) = node.with_waiting(|w| w.disarm(&key)) {
            call.stop_timer(old);
        }
        node.with_waiting(|w| w.timer_started(key, id, i64::MIN));
    }
}

/// A lock possibly in force was removed behind the module's back: counted
/// and logged (at most a line a second: an eviction storm must not flood
/// the log).
fn removed(call: &Call<'_>, node: &Node, now_ms: i64, q: &Quarantined) {
    node.stats.locks_removed.bump();
    if q.cause == Cause::Evicted {
        node.stats.locks_evicted.bump();
    }
    let scope = if q.key { "the key" } else { "its database" };
    log_limited(
        now_ms,
        format!(
            "lock: '{}' (db {}): {}; new locks refused on {scope} for {} ms",
            String::from_utf8_lossy(call.key_name()),
            call.db(),
            q.cause.describe(q.db),
            q.left_ms(now_ms)
        ),
    );
}

/// Logs `line` unless a line was logged less than a second ago; says how
/// many were held back when it logs again.
fn log_limited(now_ms: i64, line: String) {
    static LAST_MS: AtomicI64 = AtomicI64::new(i64::MIN);
    static HELD_BACK: AtomicU64 = AtomicU64::new(0);
    if now_ms.saturating_sub(LAST_MS.load(Ordering::Relaxed)) < 1_000 {
        HELD_BACK.fetch_add(1, Ordering::Relaxed);
        return;
    }
    LAST_MS.store(now_ms, Ordering::Relaxed);
    let held = HELD_BACK.swap(0, Ordering::Relaxed);
    let more = if held > 0 { format!(" ({held} more such lines held back)") } else { String::new() };
    redis_module::logging::log_warning(format!("{line}{more}"));
}

/// A key arrived by `RESTORE` (a migration's target): if it holds a lock,
/// its latest deadline is noted like one this node wrote.
fn note_arrived(call: &Call<'_>, node: &Node, now_ms: i64) {
    let Some(key) = call.open_key(false) else { return };
    let rules = node.rules(now_ms);
    if let Ok(lock) = keystate::load(&key, &rules) {
        let holders = crate::core::txn::Stored::holders(&lock);
        // Its tokens were issued by the exporting node's counter: the
        // importer's rises above them, in its AOF and replicas too.
        let newest = holders.iter().max_by_key(|(_, h)| h.fence);
        let top = crate::core::txn::Stored::top_fence(&lock).max(newest.map_or(0, |(_, h)| h.fence));
        if top > 0 && node.raise_to_arrived(top) {
            // A replayed or replicated LOCK.FENCE carries the raise alone.
            call.replicate_raise(newest.map_or(&b"imported"[..], |(owner, _)| owner), top);
        }
        if let Some(latest) = holders.iter().map(|(_, h)| h.deadline_ms).max() {
            node.note_lock(call.db(), call.key_name(), latest, now_ms, rules.cool_down_ms);
            if let Some(q) = node.lock_arrived(call.db(), call.key_name(), now_ms) {
                call.replicate_forgotten(q.until_ms, b"imported");
            }
        }
    }
}

/// FLUSHDB of `db`, or FLUSHALL (`db` -1), ended: the databases whose locks
/// may still be in force are quarantined, and every key with waiters there
/// is looked at (its waiters are told why).
pub fn on_db_flushed(call: &Call<'_>, db: i32) {
    let (node, now_ms) = (&NODE, clock::now_ms());
    if call.is_loading() {
        node.flushed_while_loading(db);
    } else if !call.is_replica() {
        db_quarantined(node, now_ms, &node.db_flushed(db, now_ms));
    }
    recheck(call, node, now_ms, db);
}

/// SWAPDB `a` `b`: both databases now hold each other's keys.
pub fn on_dbs_swapped(call: &Call<'_>, a: i32, b: i32) {
    let (node, now_ms) = (&NODE, clock::now_ms());
    if call.is_loading() {
        node.flushed_while_loading(a);
        node.flushed_while_loading(b);
    } else if !call.is_replica() {
        db_quarantined(node, now_ms, &node.dbs_swapped(a, b, now_ms));
    }
    recheck(call, node, now_ms, a);
    recheck(call, node, now_ms, b);
}

fn db_quarantined(node: &Node, now_ms: i64, found: &[Quarantined]) {
    if let Some(q) = found.first() {
        node.stats.db_quarantines.bump();
        let dbs: Vec<String> = found.iter().map(|q| q.db.to_string()).collect();
        redis_module::logging::log_warning(format!(
            "lock: {}; new locks refused in db {} for {} ms",
            q.cause.describe(q.db),
            dbs.join(", "),
            found.iter().map(|q| q.left_ms(now_ms)).max().unwrap_or(0)
        ));
    }
}

/// Keys of `db` (every database: -1) may have changed all at once (a
/// slot export, the eviction guard turned on): every key with waiters
/// there is looked at right after this callback.
pub fn recheck_waiters(call: &Call<'_>, db: i32) {
    recheck(call, &NODE, clock::now_ms(), db);
}

fn recheck(call: &Call<'_>, node: &Node, now_ms: i64, db: i32) {
    if !node.any_waiters() {
        return;
    }
    for key in node.with_waiting(|w| w.queues.keys_in(db)) {
        arm(call, node, now_ms, &key, i64::MIN);
    }
}

/// The timeout timer fired (it is gone now): every waiter whose timeout
/// passed gets nil and leaves its queue; the timer is armed for the next.
pub fn on_wait_timeout(call: &Call<'_>) {
    let (node, now_ms) = (&NODE, clock::now_ms());
    let (due, next) = node.with_waiting(|w| w.timed_out(now_ms));
    for handle in due {
        if let Some(waiter) = leave(call, node, now_ms, handle) {
            node.stats.waits_timed_out.bump();
            ffi::unblock(waiter.handle, WaitResult::TimedOut);
        }
    }
    if let Some(at) = next {
        arm_timeouts(call, node, now_ms, at);
    }
}

/// `CLIENT UNBLOCK` of a waiter (Redis answers it nil): it leaves its queues.
pub fn on_client_unblock(call: &Call<'_>, handle: WaiterHandle) {
    let (node, now_ms) = (&NODE, clock::now_ms());
    if leave(call, node, now_ms, handle).is_some() {
        node.stats.waits_timed_out.bump();
    }
}

/// Returns true if the waiter was still queued (the caller then unblocks it).
pub fn on_disconnect(call: &Call<'_>, handle: WaiterHandle) -> bool {
    let (node, now_ms) = (&NODE, clock::now_ms());
    let left = leave(call, node, now_ms, handle).is_some();
    if left {
        node.stats.waits_abandoned.bump();
    }
    left
}
