//! The command adapter: parse the arguments, run one transition of the
//! state machine (`core::lock`) through the key-state layer, answer. Each
//! handler is a few lines; the decisions are all in `core`.

use crate::clock;
use crate::config;
use crate::core::args::{self, ArgError};
use crate::core::fencing::{self, Fencer};
use crate::core::kind::{Kind, Want};
use crate::core::lock::{self, Admission, AllGrant, Exit, Grant};
use crate::core::quarantine::Refusal;
use crate::core::queue::Waiter;
use crate::core::txn::{Stored, Txn};
use crate::errors;
use crate::ffi::{self, Call, Field, Freed, Reply};
use crate::handoff;
use crate::keystate::{self, Failure, Loaded, Written};
use crate::node;
use crate::stats;

/// A FENCE floor may be at most this far ahead of this node's own clock.
/// The quorum client only raises a node to another node's token, and nodes'
/// clocks are assumed to agree far better than this; a floor beyond it is a
/// bug or an attack that would exhaust the token space.
pub const FENCE_AHEAD_MS_MAX: i64 = 3_600_000;

/// `LOCK.ACQUIRE key token ttl-ms [WAIT timeout-ms]`
pub fn acquire(call: &Call<'_>, argv: &[&[u8]]) -> Reply {
    grant_parsed(call, args::acquire(argv, config::limits()), Want::plain(), "lock.acquire")
}

/// `LOCK.ENTER key owner ttl-ms [WAIT timeout-ms]`
pub fn enter(call: &Call<'_>, argv: &[&[u8]]) -> Reply {
    grant_parsed(call, args::acquire(argv, config::limits()), Want::reentrant(), "lock.enter")
}

/// `LOCK.SHARED key token ttl-ms [WAIT timeout-ms]`: a read hold.
pub fn shared(call: &Call<'_>, argv: &[&[u8]]) -> Reply {
    grant_parsed(call, args::acquire(argv, config::limits()), Want::read(), "lock.shared")
}

/// `LOCK.EXCLUSIVE key token ttl-ms [WAIT timeout-ms]`: a write hold.
pub fn exclusive(call: &Call<'_>, argv: &[&[u8]]) -> Reply {
    grant_parsed(call, args::acquire(argv, config::limits()), Want::write(), "lock.exclusive")
}

/// `LOCK.SEMAPHORE key token permits ttl-ms [WAIT timeout-ms]`
pub fn semaphore(call: &Call<'_>, argv: &[&[u8]]) -> Reply {
    match args::semaphore(argv, config::limits()) {
        Ok((permits, request)) => grant(call, request, Want::permit(permits)),
        Err(e) => rejected("lock.semaphore", &e),
    }
}

fn grant_parsed(
    call: &Call<'_>,
    parsed: Result<args::Acquire<'_>, ArgError>,
    want: Want,
    name: &str,
) -> Reply {
    match parsed {
        Ok(request) => grant(call, request, want),
        Err(e) => rejected(name, &e),
    }
}

/// Why a newcomer may not be granted the call's key now, though it is
/// free: a quarantine (of the node, the database or the key) or the
/// eviction guard.
fn refusal(call: &Call<'_>) -> Option<Refusal> {
    node::refusal(call.db(), call.key_name(), clock::now_ms())
}

/// Whether a newcomer may be granted the call's key now.
fn admission(call: &Call<'_>, refused: bool) -> Admission {
    if refused {
        return Admission::Quarantined;
    }
    // Only pay for the key name when someone waits or may wait.
    if handoff::any_waiters() && handoff::queued(&call.key_id()) > 0 {
        Admission::Queued
    } else {
        Admission::Open
    }
}

fn grant(call: &Call<'_>, request: args::Acquire<'_>, want: Want) -> Reply {
    // WAIT blocks only where a client may block (not in MULTI or a script).
    let wait_ms = request.wait_ms.filter(|_| !call.cannot_block());
    // Asked once the key is open: opening it may have expired it (Redis'
    // lazy expiry), which may have quarantined it.
    let mut refusal = None;
    let result = keystate::transact(call, |txn| {
        refusal = self::refusal(call);
        let admission = admission(call, refusal.is_some());
        let grant =
            node::with_fencer(|f| lock::acquire(txn, want, request.owner, request.ttl_ms, admission, f));
        (grant, txn.next_free_at_ms())
    });
    let ((grant, next_free_ms), written, key) = match result {
        Ok(done) => done,
        Err(failure) => return failed(failure),
    };
    drop(key);
    after_write(call, written);
    match (grant, refusal, wait_ms) {
        (Grant::Granted(fence), ..) => {
            watch_for_removal(call);
            counted_token(&stats::GRANTS, fence)
        }
        (Grant::Renewed(fence), ..) => counted_token(&stats::RENEWALS, fence),
        // While new grants are refused, waiting would only block the caller
        // for the whole period: refuse at once.
        (Grant::Quarantined, Some(refusal), _) | (Grant::Busy, Some(refusal), Some(_)) => {
            refused_now(&refusal)
        }
        (Grant::Quarantined, None, _) => Reply::Error(errors::internal()),
        (Grant::Busy, None, Some(timeout_ms)) => {
            contended(call);
            let keys = std::iter::once((call.key_id(), want)).collect();
            // The hand-off timer must fire when a holder may leave.
            handoff::wait(call, new_waiter(keys, request.owner, request.ttl_ms), timeout_ms, &[next_free_ms])
        }
        (Grant::Busy, _, None) => {
            contended(call);
            Reply::Nil
        }
        (why, ..) => refused(errors::grant_refused(why, want)),
    }
}

/// A grant refused while the key is not grantable to anyone new (a
/// quarantine, the eviction guard): counted, and answered with the reason.
fn refused_now(refusal: &Refusal) -> Reply {
    match refusal {
        Refusal::Evictable(_) => stats::REFUSED_EVICTABLE.bump(),
        Refusal::Node(..) | Refusal::Forgotten(..) => stats::QUARANTINED.bump(),
    }
    Reply::Error(errors::refused(refusal))
}

/// From a node's first grant on, every change to a key by another command
/// must be seen (a lock removed behind the module's back quarantines its
/// key): keyspace events are subscribed to then, so that a node that never
/// holds a lock pays nothing for them.
pub fn watch_for_removal(call: &Call<'_>) {
    // Off (`lock.removal-quarantine no`): nothing to watch for (waiters
    // subscribe on their own), so a benchmark's baseline commands on the same
    // server pay no keyspace callback.
    if !config::REMOVAL_QUARANTINE.load(std::sync::atomic::Ordering::Relaxed) {
        return;
    }
    if let Err(e) = ffi::watch_keys(call) {
        redis_module::logging::log_warning(format!("lock: {e}"));
    }
}

/// A fencing token as the reply, counted as a grant or a renewal.
fn counted_token(counter: &stats::Counter, fence: u64) -> Reply {
    counter.bump();
    Reply::Int(fencing::to_reply(fence))
}

/// What a client about to wait asked for (the hand-off fills in the rest).
fn new_waiter(keys: crate::core::queue::WaitSet, owner: &[u8], ttl_ms: i64) -> Waiter<()> {
    Waiter { handle: (), keys, owner: owner.to_vec(), ttl_ms, timeout_at_ms: None, since_ms: 0 }
}

/// A grant refused because the key is held (or queued for): counted, and
/// the key noted among the most contended.
fn contended(call: &Call<'_>) {
    stats::CONTENDED.bump();
    stats::record_contended(call.db(), call.key_name(), clock::now_ms());
}

/// `LOCK.MACQUIRE token ttl-ms numkeys key [key ...] [WAIT timeout-ms]
/// [MODES mode [mode ...]]`: every key granted to `token` with one fencing
/// token, or none (see `lock::acquire_all`).
pub fn acquire_all(call: &Call<'_>, argv: &[&[u8]]) -> Reply {
    let request = match args::acquire_all(argv, config::limits()) {
        Ok(request) => request,
        Err(e) => return rejected("lock.macquire", &e),
    };
    let calls: Vec<Call<'_>> =
        (0..request.wants.len()).map(|at| call.for_arg(args::MULTI_FIRST_KEY + at)).collect();
    let wait_ms = request.wait_ms.filter(|_| !call.cannot_block());
    let mut next_free = Vec::new();
    // Asked once the keys are open (see `grant`).
    let mut refusals: Vec<Option<Refusal>> = Vec::new();
    let result = keystate::transact_all(&calls, |txns| {
        refusals = calls.iter().map(refusal).collect();
        let admissions: Vec<Admission> =
            calls.iter().zip(&refusals).map(|(c, r)| admission(c, r.is_some())).collect();
        let grant = node::with_fencer(|f| {
            lock::acquire_all(txns, &request.wants, request.owner, request.ttl_ms, &admissions, f)
        });
        next_free = txns.iter().map(|t| t.next_free_at_ms()).collect::<Vec<_>>();
        grant
    });
    let (grant, written) = match result {
        Ok(done) => done,
        Err((at, failure)) => {
            return match failed(failure) {
                Reply::Error(line) => Reply::Error(errors::in_set(&line, at)),
                other => other,
            }
        }
    };
    // A refused set may still have removed expired holders.
    for (key_call, written) in calls.iter().zip(written) {
        after_write(key_call, written);
    }
    // The refusal the reply names: the set's first, when a key is refused.
    let quarantine = refusals.iter().flatten().next().cloned();
    match (grant, quarantine, wait_ms) {
        (AllGrant::Granted(fence), ..) => {
            watch_for_removal(call);
            counted_token(&stats::GRANTS, fence)
        }
        (AllGrant::Renewed(fence), ..) => counted_token(&stats::RENEWALS, fence),
        (AllGrant::Refused { why: Grant::Quarantined, at }, _, _) => {
            match refusals.get(at).cloned().flatten() {
                Some(refusal) => refused_in_set(&refusal, at),
                None => Reply::Error(errors::internal()),
            }
        }
        (AllGrant::Refused { why: Grant::Busy, .. }, Some(refusal), Some(_)) => refused_now(&refusal),
        (AllGrant::Refused { why: Grant::Busy, at }, None, wait) => {
            if let Some(busy) = calls.get(at) {
                contended(busy);
            }
            let Some(timeout_ms) = wait else { return Reply::Nil };
            let keys = calls.iter().map(Call::key_id).zip(request.wants.iter().copied()).collect();
            handoff::wait(call, new_waiter(keys, request.owner, request.ttl_ms), timeout_ms, &next_free)
        }
        (AllGrant::Refused { why: Grant::Busy, .. }, Some(_), None) => Reply::Nil,
        (AllGrant::Refused { at, why }, ..) => {
            let want = request.wants.get(at).copied().unwrap_or_else(Want::plain);
            refused(errors::in_set(&errors::grant_refused(why, want), at))
        }
    }
}

/// A set refused because its key #`at` is refused to newcomers.
fn refused_in_set(refusal: &Refusal, at: usize) -> Reply {
    match refused_now(refusal) {
        Reply::Error(line) => Reply::Error(errors::in_set(&line, at)),
        other => other,
    }
}

/// `LOCK.RELEASE key token`: frees the lock, or the token's own hold of a
/// shared lock or semaphore.
pub fn release(call: &Call<'_>, argv: &[&[u8]]) -> Reply {
    let request = match args::owner(argv) {
        Ok(request) => request,
        Err(e) => return rejected("lock.release", &e),
    };
    match write(call, |txn| release_one(txn, request.owner)) {
        Ok(released) => Reply::Int(i64::from(released)),
        Err(reply) => reply,
    }
}

/// RELEASE of one key, counted, with the hold's duration recorded.
fn release_one<'o, S: Stored + ?Sized>(txn: &mut Txn<'_, 'o, S>, owner: &'o [u8]) -> bool {
    let fence = txn.hold(owner).map(|h| h.fence);
    let released = lock::release(txn, owner);
    if let (true, Some(fence)) = (released, fence) {
        stats::RELEASES.bump();
        stats::record_hold(txn.now_ms().saturating_sub(fencing::granted_at_ms(fence)));
    }
    released
}

/// `LOCK.MRELEASE token key [key ...]`: LOCK.RELEASE on every key for one
/// token (a set taken with LOCK.MACQUIRE). Reply: 1 or 0 per key. A key
/// that is not a lock fails the whole call before anything is released;
/// waiters are served once every key is released (a waiter for the same
/// set is then served at once, not after a look at a half-released set).
pub fn release_all(call: &Call<'_>, argv: &[&[u8]]) -> Reply {
    let request = match args::release_all(argv, config::limits()) {
        Ok(request) => request,
        Err(e) => return rejected("lock.mrelease", &e),
    };
    const FIRST_KEY: usize = 2;
    let calls: Vec<Call<'_>> = (FIRST_KEY..argv.len()).map(|index| call.for_arg(index)).collect();
    for key_call in &calls {
        if let Err(reply) = read(key_call, |_| Reply::Nil) {
            return reply;
        }
    }
    let mut released = Vec::with_capacity(calls.len());
    let mut writes = Vec::with_capacity(calls.len());
    for key_call in &calls {
        match keystate::transact(key_call, |txn| release_one(txn, request.owner)) {
            Ok((done, written, key)) => {
                drop(key);
                released.push(i64::from(done));
                writes.push(written);
            }
            Err(failure) => {
                released.push(0);
                writes.push(Default::default());
                redis_module::logging::log_warning(format!("lock: LOCK.MRELEASE: {}", failure.line()));
            }
        }
    }
    for (key_call, written) in calls.iter().zip(writes) {
        after_write(key_call, written);
    }
    Reply::Ints(released)
}

/// `LOCK.EXTEND key token ttl-ms`
pub fn extend(call: &Call<'_>, argv: &[&[u8]]) -> Reply {
    let request = match args::extend(argv, config::limits()) {
        Ok(request) => request,
        Err(e) => return rejected("lock.extend", &e),
    };
    extend_one(call, request.owner, request.ttl_ms)
}

/// EXTEND of the call's key; shared by LOCK.EXTEND and LOCK.RENEW.
fn extend_one(call: &Call<'_>, owner: &[u8], ttl_ms: i64) -> Reply {
    match write(call, |txn| lock::extend(txn, owner, ttl_ms)) {
        Ok(extended) => {
            if extended {
                stats::EXTENSIONS.bump();
            }
            Reply::Int(i64::from(extended))
        }
        Err(reply) => reply,
    }
}

/// `LOCK.EXIT key owner [ID request-id]`
pub fn exit(call: &Call<'_>, argv: &[&[u8]]) -> Reply {
    let request = match args::exit(argv) {
        Ok(request) => request,
        Err(e) => return rejected("lock.exit", &e),
    };
    match write(call, |txn| exit_one(txn, request.owner, request.request_id)) {
        Ok(Exit::Left(0)) => Reply::Int(0),
        Ok(Exit::Left(holds)) => Reply::Int(i64::from(holds)),
        Ok(Exit::NotHeld) => Reply::Nil,
        Ok(Exit::WrongKind { found }) => wrongtype(errors::wrong_kind(found.name(), Kind::Reentrant.name())),
        Err(reply) => reply,
    }
}

/// EXIT of one hold; the last one counts as a release, with the hold's
/// duration recorded.
fn exit_one<'o, S: Stored + ?Sized>(
    txn: &mut Txn<'_, 'o, S>,
    owner: &'o [u8],
    request_id: Option<&[u8]>,
) -> Exit {
    let fence = txn.hold(owner).map(|h| h.fence);
    let exit = lock::exit(txn, owner, request_id);
    if let (Exit::Left(0), Some(fence)) = (exit, fence) {
        stats::RELEASES.bump();
        stats::record_hold(txn.now_ms().saturating_sub(fencing::granted_at_ms(fence)));
    }
    exit
}

/// `LOCK.FENCE key token floor`
pub fn fence(call: &Call<'_>, argv: &[&[u8]]) -> Reply {
    let floor_max = Fencer::clock_floor(clock::now_ms().saturating_add(FENCE_AHEAD_MS_MAX));
    let request = match args::fence(argv, floor_max) {
        Ok(request) => request,
        Err(e) => return rejected("lock.fence", &e),
    };
    if call.is_replicated_or_loading() {
        // The master checked the holder when it ran this FENCE; its copy in
        // the replication stream or the AOF only carries the raise.
        node::with_fencer(|f| f.raise_to(request.floor));
        // Passed on to this node's own AOF and sub-replicas (ignored while
        // loading).
        call.replicate_verbatim();
        return Reply::Int(1);
    }
    let fenced =
        match write(call, |txn| node::with_fencer(|f| lock::fence(txn, request.owner, request.floor, f))) {
            Ok(fenced) => fenced,
            Err(reply) => return reply,
        };
    if fenced {
        // Replicas and the AOF keep the raise, so a promoted replica or a
        // restarted node never issues a token at or below the floor.
        call.replicate_verbatim();
    }
    Reply::Int(i64::from(fenced))
}

/// `LOCK.INFO key`
pub fn info(call: &Call<'_>, argv: &[&[u8]]) -> Reply {
    if let Err(e) = args::key_only(argv) {
        return rejected("lock.info", &e);
    }
    read(call, |lock| {
        let now = clock::now_ms();
        let live = lock::live_holders(lock, now);
        let Some(shape) = lock.shape().filter(|_| !live.is_empty()) else { return not_held(call, lock, now) };
        let waiters = Field::Int(waiters_on(call));
        if let (true, Some((owner, hold))) = (shape.kind.is_single(), live.first()) {
            return Reply::Fields(vec![
                ("kind", Field::Text(shape.kind.name())),
                ("holder", Field::Bytes(owner.clone())),
                ("holds", Field::Int(i64::from(hold.holds))),
                ("fence", Field::Int(fencing::to_reply(hold.fence))),
                ("ttl-ms", Field::Int(hold.remaining_ms(now))),
                ("deadline-ms", Field::Int(hold.deadline_ms)),
                ("waiters", waiters),
            ]);
        }
        let count = Field::Int(i64::try_from(live.len()).unwrap_or(i64::MAX));
        let holders = live
            .into_iter()
            .map(|(owner, hold)| {
                vec![
                    ("holder", Field::Bytes(owner)),
                    ("mode", Field::Text(hold.mode.name())),
                    ("fence", Field::Int(fencing::to_reply(hold.fence))),
                    ("ttl-ms", Field::Int(hold.remaining_ms(now))),
                    ("deadline-ms", Field::Int(hold.deadline_ms)),
                ]
            })
            .collect();
        let mut fields = vec![("kind", Field::Text(shape.kind.name()))];
        if shape.kind == Kind::Semaphore {
            fields.push(("permits", Field::Int(i64::from(shape.limit))));
        }
        fields.extend([("holds", count), ("waiters", waiters), ("holders", Field::List(holders))]);
        Reply::Fields(fields)
    })
    .unwrap_or_else(|reply| reply)
}

/// LOCK.INFO of a key with no live holder: nil when a new grant would be
/// made now; else why not and for how long (`refused-ms` -1: until a
/// setting changes or the queue moves): a quarantine, the eviction guard,
/// an expired holder kept through its lock-delay or the restart grace, or
/// clients queued for the key.
fn not_held(call: &Call<'_>, lock: &Loaded<'_, '_>, now: i64) -> Reply {
    let waiters = waiters_on(call);
    let (code, left_ms, reason) = if let Some(refusal) = refusal(call) {
        let left_ms = match &refusal {
            Refusal::Node(_, left) | Refusal::Forgotten(_, left) => *left,
            Refusal::Evictable(_) => -1,
        };
        (refusal_code(&refusal), left_ms, errors::refused(&refusal))
    } else if let Some(until) = lock::kept_until(lock, now, node::expiry_delay_ms(now)) {
        match lock::kept_until(lock, now, config::EXPIRY_DELAY_MS.get()) {
            Some(delay_until) => (
                "lock-delay",
                delay_until.saturating_sub(now),
                "the lock expired without a release; lock.expiry-delay-ms keeps newcomers out until it ends"
                    .into(),
            ),
            None => (
                "restart-grace",
                until.saturating_sub(now),
                "the lock was restored from disk at a restart and expired by itself: it is taken over \
                 lock.clock-jump-tolerance-ms after its deadline for a while (the restart grace)"
                    .into(),
            ),
        }
    } else if waiters > 0 {
        (
            "queued",
            -1,
            "clients wait for this key: it goes to the head of the queue, not to a newcomer".into(),
        )
    } else {
        return Reply::Nil;
    };
    Reply::Fields(vec![
        ("kind", Field::Text(lock.shape().map_or("none", |shape| shape.kind.name()))),
        ("holds", Field::Int(0)),
        ("waiters", Field::Int(waiters)),
        ("refused", Field::Text(code)),
        ("refused-ms", Field::Int(left_ms)),
        ("reason", Field::Bytes(reason.into_bytes())),
    ])
}

/// The code LOCK.INFO gives a refusal.
fn refusal_code(refusal: &Refusal) -> &'static str {
    match refusal {
        Refusal::Node(reason, _) => reason.name(),
        Refusal::Forgotten(q, _) => q.cause.code(),
        Refusal::Evictable(_) => "evictable",
    }
}

/// `LOCK.REVOKE key`: an operator frees a lock without its token (a holder
/// that died with a long TTL, a stuck semaphore, a value that is not one
/// this module wrote). Every holder's grant ends at once, the key is
/// deleted (replicated as `DEL`), waiters are served, and any quarantine of
/// the key ends: the operator declares its locks gone. Counted, and logged
/// with the holders and the time each had left. The fencing counter is
/// untouched: the next grant's token is above the revoked ones, so a
/// resource that checks tokens refuses a revoked holder that goes on.
/// Reply: 1 if the key held a lock (of any kind, or a lock value this
/// module did not write) and it is gone, 0 if it held none. Use it
/// instead of `DEL`, which the module treats as a lock forgotten (the key is
/// quarantined until the lock's deadline).
pub fn revoke(call: &Call<'_>, argv: &[&[u8]]) -> Reply {
    if let Err(e) = args::key_only(argv) {
        return rejected("lock.revoke", &e);
    }
    let Some(mut key) = call.open_key(true) else { return Reply::Error(errors::write_failed()) };
    let now = clock::now_ms();
    let (holders, what) = match keystate::load(&key, now) {
        Ok(Loaded::Free(_)) => (Vec::new(), String::new()),
        Ok(lock) => {
            let holders = Stored::holders(&lock);
            let what = holders
                .iter()
                .map(|(owner, h)| {
                    format!(
                        "{} (token {}, {} ms left)",
                        String::from_utf8_lossy(owner),
                        h.fence,
                        h.deadline_ms.saturating_sub(now).max(0)
                    )
                })
                .collect::<Vec<_>>()
                .join(", ");
            (holders, what)
        }
        Err(Failure::TooFar { ahead_ms, .. }) => {
            (Vec::new(), format!("a lock value this module did not write (deadline {ahead_ms} ms ahead)"))
        }
        Err(failure) => return failed(failure),
    };
    let removed = !what.is_empty() || !holders.is_empty();
    if removed && !key.delete() {
        return Reply::Error(errors::write_failed());
    }
    drop(key);
    let ended = node::end_key_quarantine(call.db(), call.key_name());
    if removed || ended {
        if removed {
            stats::REVOKED.bump();
        }
        redis_module::logging::log_notice(format!(
            "lock: LOCK.REVOKE of '{}' (db {}): {}{}",
            String::from_utf8_lossy(call.key_name()),
            call.db(),
            if removed { format!("removed {what}") } else { "no lock held".into() },
            if ended { "; its quarantine ended" } else { "" }
        ));
    }
    if removed {
        after_write(call, Written { freed: true, found_expired: false });
    } else if ended {
        let _ = handoff::settle(call);
    }
    Reply::Int(i64::from(removed))
}

/// `LOCK.RENEW token ttl-ms key [key ...]`: LOCK.EXTEND on every key for
/// one owner (a watchdog holding many locks renews them in one call). Reply:
/// 1 or 0 per key. A key that is not a lock fails the whole call before
/// anything is extended.
pub fn renew(call: &Call<'_>, argv: &[&[u8]]) -> Reply {
    let request = match args::renew(argv, config::limits()) {
        Ok(request) => request,
        Err(e) => return rejected("lock.renew", &e),
    };
    const FIRST_KEY: usize = 3;
    let keys = FIRST_KEY..argv.len();
    for index in keys.clone() {
        if let Err(reply) = read(&call.for_arg(index), |_| Reply::Nil) {
            return reply;
        }
    }
    let extended = keys
        .map(|index| match extend_one(&call.for_arg(index), request.owner, request.ttl_ms) {
            Reply::Int(n) => n,
            _ => 0,
        })
        .collect();
    Reply::Ints(extended)
}

/// Most waiters one LOCK.WAITERS call lists (`LOCK.INFO` counts them all).
pub const WAITERS_LIST_MAX: usize = 1000;

/// `LOCK.WAITERS key [COUNT count]`: the clients waiting for the key, head
/// first: position, token, mode, how long each has waited, its timeout
/// left (-1: none), the TTL it asked for, and how many keys it waits for
/// (more than 1: a LOCK.MACQUIRE set). An empty array when nobody waits.
pub fn waiters(call: &Call<'_>, argv: &[&[u8]]) -> Reply {
    let count = match args::list_count(argv, 2, WAITERS_LIST_MAX) {
        Ok(count) => count,
        Err(e) => return rejected("lock.waiters", &e),
    };
    if let Err(reply) = read(call, |_| Reply::Nil) {
        return reply;
    }
    let key = call.key_id();
    let now = clock::now_ms();
    let listed = handoff::waiting_for(&key, count);
    let rows = listed
        .into_iter()
        .enumerate()
        .map(|(at, w)| {
            let want = w.want_on(&key).unwrap_or_else(Want::plain);
            vec![
                ("position", Field::Int(i64::try_from(at).unwrap_or(i64::MAX).saturating_add(1))),
                ("token", Field::Bytes(w.owner)),
                ("kind", Field::Text(want.kind.name())),
                ("mode", Field::Text(want.mode.name())),
                ("waited-ms", Field::Int(now.saturating_sub(w.since_ms).max(0))),
                ("timeout-ms", Field::Int(w.timeout_at_ms.map_or(-1, |at| at.saturating_sub(now).max(0)))),
                ("ttl-ms", Field::Int(w.ttl_ms)),
                ("keys", Field::Int(i64::try_from(w.keys.len()).unwrap_or(i64::MAX))),
            ]
        })
        .collect();
    Reply::List(rows)
}

/// `LOCK.CONTENDED [COUNT count]`: this node's most contended keys lately
/// (grants refused or queued because the key was held or had waiters),
/// the most contended first. Counts halve every minute; `error` bounds how
/// much a count may overstate (see `core/hotkeys.rs`).
pub fn contended_keys(_call: &Call<'_>, argv: &[&[u8]]) -> Reply {
    let count = match args::list_count(argv, 1, crate::core::hotkeys::SLOTS) {
        Ok(count) => count,
        Err(e) => return rejected("lock.contended", &e),
    };
    let rows = stats::most_contended(count, clock::now_ms())
        .into_iter()
        .map(|hot| {
            vec![
                ("db", Field::Int(i64::from(hot.db))),
                ("key", Field::Bytes(hot.key)),
                ("truncated", Field::Int(i64::from(hot.truncated))),
                ("count", Field::Int(i64::try_from(hot.count).unwrap_or(i64::MAX))),
                ("error", Field::Int(i64::try_from(hot.error).unwrap_or(i64::MAX))),
            ]
        })
        .collect();
    Reply::List(rows)
}

/// `LOCK.CHECK key fencing-token`: 1 if that token is a current, live grant
/// of the key, else 0 (a resource server's check before acting).
pub fn check(call: &Call<'_>, argv: &[&[u8]]) -> Reply {
    let fence = match args::check(argv) {
        Ok(fence) => fence,
        Err(e) => return rejected("lock.check", &e),
    };
    read(call, |lock| Reply::Int(i64::from(lock::is_current(lock, fence, clock::now_ms()))))
        .unwrap_or_else(|reply| reply)
}

/// Runs a writing transition on the call's key; then hands a freed lock to
/// its waiters. `Err` is the error reply (not a lock, write refused).
fn write<'c, 'o, T>(
    call: &'c Call<'c>,
    transition: impl for<'s, 'k> FnOnce(&mut Txn<'s, 'o, Loaded<'k, 'c>>) -> T,
) -> Result<T, Reply> {
    let (answer, written, key) = keystate::transact(call, transition).map_err(failed)?;
    drop(key);
    after_write(call, written);
    Ok(answer)
}

/// Reads the lock at the call's key without writing; `Err` is the
/// WRONGTYPE reply when it is not a lock.
fn read(call: &Call<'_>, f: impl FnOnce(&Loaded<'_, '_>) -> Reply) -> Result<Reply, Reply> {
    let Some(key) = call.open_key(false) else { return Ok(f(&Loaded::Free(Default::default()))) };
    let now = clock::now_ms();
    let lock = keystate::load(&key, now).map_err(failed)?;
    let reply = f(&lock);
    match lock.too_far(now) {
        Some(failure) => Err(failed(failure)),
        None => Ok(reply),
    }
}

/// After a write (the key closed again): count expiries found, serve the
/// key's waiters, and tell pub/sub subscribers when a lock was freed and
/// nobody took it.
fn after_write(call: &Call<'_>, written: Written) {
    if written.found_expired {
        stats::EXPIRIES.bump();
    }
    let handed_off = handoff::settle(call);
    if written.freed && !handed_off && config::PUBLISH_FREED.load(std::sync::atomic::Ordering::Relaxed) {
        call.publish_freed(if written.found_expired { Freed::Expired } else { Freed::Released });
    }
}

fn waiters_on(call: &Call<'_>) -> i64 {
    if !handoff::any_waiters() {
        return 0;
    }
    i64::try_from(handoff::queued(&call.key_id())).unwrap_or(i64::MAX)
}

fn failed(failure: Failure) -> Reply {
    match failure {
        Failure::WriteFailed => Reply::Error(failure.line()),
        wrong => wrongtype(wrong.line()),
    }
}

fn rejected(command: &str, error: &ArgError) -> Reply {
    refused(errors::bad_args(command, error))
}

fn refused(line: String) -> Reply {
    stats::REJECTED.bump();
    Reply::Error(line)
}

fn wrongtype(line: String) -> Reply {
    refused(line)
}
