//! The command adapter: parse the arguments, run one transition of the
//! state machine (`core::lock`) through the key-state layer, answer. Each
//! handler is a few lines; the decisions are all in `core`.

use crate::clock;
use crate::config;
use crate::core::args::{self, ArgError};
use crate::core::fencing::{self, Fencer};
use crate::core::kind::{Kind, Want};
use crate::core::lock::{self, Admission, Exit, Grant};
use crate::core::queue::Waiter;
use crate::core::txn::{Stored, Txn};
use crate::errors;
use crate::ffi::{Call, Field, Freed, Key, Reply};
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

fn grant(call: &Call<'_>, request: args::Acquire<'_>, want: Want) -> Reply {
    let quarantine = node::quarantine();
    // Only pay for the key name when someone waits or may wait.
    let queued = (handoff::any_waiters() && handoff::queued(&call.key_id()) > 0) as usize;
    let admission = match (&quarantine, queued) {
        (Some(_), _) => Admission::Quarantined,
        (None, 0) => Admission::Open,
        _ => Admission::Queued,
    };
    // WAIT blocks only where a client may block (not in MULTI or a script).
    let wait_ms = request.wait_ms.filter(|_| !call.cannot_block());
    let result = keystate::transact(call, |txn| {
        let grant =
            node::with_fencer(|f| lock::acquire(txn, want, request.owner, request.ttl_ms, admission, f));
        (grant, txn.next_free_at_ms())
    });
    let ((grant, next_free_ms), written, mut key) = match result {
        Ok(done) => done,
        Err(failure) => return failed(failure),
    };
    after_write(call, &mut key, written);
    drop(key);
    match (grant, quarantine, wait_ms) {
        (Grant::Granted(fence), ..) => {
            stats::GRANTS.bump();
            Reply::Int(fencing::to_reply(fence))
        }
        (Grant::Renewed(fence), ..) => {
            stats::RENEWALS.bump();
            Reply::Int(fencing::to_reply(fence))
        }
        // In quarantine nothing new is granted, so waiting would only block
        // the caller for the whole period: refuse at once.
        (Grant::Quarantined, Some((reason, left_ms)), _)
        | (Grant::Busy, Some((reason, left_ms)), Some(_)) => {
            stats::QUARANTINED.bump();
            Reply::Error(errors::quarantined(reason, left_ms))
        }
        (Grant::Quarantined, None, _) => Reply::Error(errors::internal()),
        (Grant::Busy, None, Some(timeout_ms)) => {
            stats::CONTENDED.bump();
            let waiter = Waiter {
                handle: (),
                want,
                owner: request.owner.to_vec(),
                ttl_ms: request.ttl_ms,
                timeout_at_ms: None,
            };
            // The hand-off timer must fire when a holder may leave.
            let now = clock::now_ms();
            handoff::wait(call, call.key_id(), waiter, timeout_ms, next_free_ms.unwrap_or(now))
        }
        (Grant::Busy, _, None) => {
            stats::CONTENDED.bump();
            Reply::Nil
        }
        (Grant::WrongKind { found }, ..) => wrongtype(errors::wrong_kind(found.name(), want.kind.name())),
        (Grant::LimitMismatch { limit }, ..) => refused(errors::limit_mismatch(limit, want.limit)),
        (Grant::ModeMismatch { held }, ..) => refused(errors::mode_mismatch(held)),
        (Grant::TooManyHolds, ..) => refused(errors::too_many_holds(crate::core::kind::HOLDS_MAX)),
    }
}

/// `LOCK.RELEASE key token`: frees the lock, or the token's own hold of a
/// shared lock or semaphore.
pub fn release(call: &Call<'_>, argv: &[&[u8]]) -> Reply {
    let request = match args::owner(argv) {
        Ok(request) => request,
        Err(e) => return rejected("lock.release", &e),
    };
    let released = match write(call, |txn| lock::release(txn, request.owner)) {
        Ok(released) => released,
        Err(reply) => return reply,
    };
    if released {
        stats::RELEASES.bump();
    }
    Reply::Int(i64::from(released))
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
    match write(call, |txn| lock::exit(txn, request.owner, request.request_id)) {
        Ok(Exit::Left(0)) => {
            stats::RELEASES.bump();
            Reply::Int(0)
        }
        Ok(Exit::Left(holds)) => Reply::Int(i64::from(holds)),
        Ok(Exit::NotHeld) => Reply::Nil,
        Ok(Exit::WrongKind { found }) => wrongtype(errors::wrong_kind(found.name(), Kind::Reentrant.name())),
        Err(reply) => reply,
    }
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
        let (Some(shape), live) = (lock.shape(), lock::live_holders(lock, now)) else { return Reply::Nil };
        if live.is_empty() {
            return Reply::Nil;
        }
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
    let (answer, written, mut key) = keystate::transact(call, transition).map_err(failed)?;
    after_write(call, &mut key, written);
    Ok(answer)
}

/// Reads the lock at the call's key without writing; `Err` is the
/// WRONGTYPE reply when it is not a lock.
fn read(call: &Call<'_>, f: impl FnOnce(&Loaded<'_, '_>) -> Reply) -> Result<Reply, Reply> {
    let Some(key) = call.open_key(false) else { return Ok(f(&Loaded::Free(Default::default()))) };
    match keystate::load(&key) {
        Ok(lock) => Ok(f(&lock)),
        Err(_) => Err(wrongtype(errors::not_a_lock())),
    }
}

/// After a write: count expiries found, serve the key's waiters, and tell
/// pub/sub subscribers when a lock was freed and nobody took it.
fn after_write(call: &Call<'_>, key: &mut Key<'_>, written: Written) {
    if written.found_expired {
        stats::EXPIRIES.bump();
    }
    let handed_off = handoff::settle(call, key);
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
        Failure::NotALock => wrongtype(errors::not_a_lock()),
        Failure::WriteFailed => Reply::Error(errors::write_failed()),
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
