//! The command adapter: parse the arguments, read the key, run one pure
//! transition from `core::lock`, then store, replicate and reply. Each
//! handler is a few lines; the decisions are all in `core`.

use crate::clock;
use crate::config;
use crate::core::args::{self, ArgError};
use crate::core::codec::{self, Encoded};
use crate::core::fencing::Fencer;
use crate::core::lock::{self, Admission, Grant, Kind, Lock, Outcome, Step};
use crate::core::queue::Waiter;
use crate::errors;
use crate::ffi::{Call, Field, Freed, Key, KeyKind, Reply};
use crate::handoff;
use crate::node;
use crate::stats;

/// A FENCE floor may be at most this far ahead of this node's own clock.
/// The quorum client only raises a node to another node's token, and nodes'
/// clocks are assumed to agree far better than this; a floor beyond it is a
/// bug or an attack that would exhaust the token space.
pub const FENCE_AHEAD_MS_MAX: i64 = 3_600_000;

/// `LOCK.ACQUIRE key token ttl-ms [WAIT timeout-ms]`
pub fn acquire(call: &Call<'_>, argv: &[&[u8]]) -> Reply {
    grant(call, argv, Kind::Plain, "lock.acquire")
}

/// `LOCK.ENTER key owner ttl-ms [WAIT timeout-ms]`
pub fn enter(call: &Call<'_>, argv: &[&[u8]]) -> Reply {
    grant(call, argv, Kind::Reentrant, "lock.enter")
}

fn grant(call: &Call<'_>, argv: &[&[u8]], kind: Kind, name: &str) -> Reply {
    let request = match args::acquire(argv, config::limits()) {
        Ok(request) => request,
        Err(e) => return rejected(name, &e),
    };
    // Only pay for the key name when someone waits or may wait.
    let key_id = (handoff::any_waiters() || request.wait_ms.is_some()).then(|| call.key_id());
    let quarantine = node::quarantine();
    let admission = match (&quarantine, &key_id) {
        (Some(_), _) => Admission::Quarantined,
        (None, Some(k)) if handoff::queued(k) > 0 => Admission::Queued,
        _ => Admission::Open,
    };
    // WAIT blocks only where a client may block (not in MULTI or a script).
    let wait_ms = request.wait_ms.filter(|_| !call.cannot_block());
    let answer = with_lock(call, Some(kind), |current, now| {
        let out = node::with_fencer(|f| {
            lock::acquire(current, kind, request.owner, request.ttl_ms, now, admission, f)
        });
        let answer = match (out.reply, quarantine, wait_ms) {
            (Grant::Granted(fence), ..) => {
                stats::GRANTS.bump();
                Answer::Now(fence_reply(fence))
            }
            (Grant::Renewed(fence), ..) => {
                stats::RENEWALS.bump();
                Answer::Now(fence_reply(fence))
            }
            // In quarantine nothing new is granted, so waiting would only
            // block the caller for the whole period: refuse at once.
            (Grant::Quarantined, Some((reason, left_ms)), _)
            | (Grant::Busy, Some((reason, left_ms)), Some(_)) => {
                stats::QUARANTINED.bump();
                Answer::Now(Reply::Error(errors::quarantined(reason, left_ms)))
            }
            (Grant::Quarantined, None, _) => Answer::Now(Reply::Error(errors::internal())),
            (Grant::Busy, _, Some(timeout_ms)) => {
                stats::CONTENDED.bump();
                // The hand-off timer must fire at the holder's deadline.
                let deadline_ms = current.filter(|l| now < l.frees_at_ms()).map_or(now, |l| l.frees_at_ms());
                Answer::Wait { timeout_ms, deadline_ms }
            }
            (Grant::Busy, _, None) => {
                stats::CONTENDED.bump();
                Answer::Now(Reply::Nil)
            }
            (Grant::TooManyHolds, ..) => Answer::Now(Reply::Error(errors::too_many_holds(lock::HOLDS_MAX))),
        };
        (answer, Write::from_step(out.step), out.found_expired)
    });
    match (answer, key_id) {
        (Ok(Answer::Wait { timeout_ms, deadline_ms }), Some(key_id)) => {
            let owner = request.owner.to_vec();
            let waiter = Waiter { handle: (), kind, owner, ttl_ms: request.ttl_ms, timer: None };
            handoff::wait(call, key_id, waiter, timeout_ms, deadline_ms)
        }
        (Ok(Answer::Now(reply)), _) => reply,
        (Ok(Answer::Wait { .. }), None) => Reply::Nil,
        (Err(reply), _) => reply,
    }
}

/// A grant's answer: now, or after blocking in the key's queue.
enum Answer {
    Now(Reply),
    Wait { timeout_ms: i64, deadline_ms: i64 },
}

/// `LOCK.RELEASE key token`
pub fn release(call: &Call<'_>, argv: &[&[u8]]) -> Reply {
    let request = match args::owner(argv) {
        Ok(request) => request,
        Err(e) => return rejected("lock.release", &e),
    };
    with_lock_reply(call, None, |current, now| {
        let out = lock::release(current, request.owner, now);
        if out.reply {
            stats::RELEASES.bump();
        }
        bool_reply(out)
    })
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
    with_lock_reply(call, None, |current, now| {
        let out = lock::extend(current, owner, ttl_ms, now);
        if out.reply {
            stats::EXTENSIONS.bump();
        }
        bool_reply(out)
    })
}

/// `LOCK.EXIT key owner [ID request-id]`
pub fn exit(call: &Call<'_>, argv: &[&[u8]]) -> Reply {
    let request = match args::exit(argv) {
        Ok(request) => request,
        Err(e) => return rejected("lock.exit", &e),
    };
    with_lock_reply(call, Some(Kind::Reentrant), |current, now| {
        let out = lock::exit(current, request.owner, request.request_id, now);
        let reply = match out.reply {
            Some(0) => {
                stats::RELEASES.bump();
                Reply::Int(0)
            }
            Some(holds) => Reply::Int(i64::from(holds)),
            None => Reply::Nil,
        };
        (reply, Write::from_step(out.step), out.found_expired)
    })
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
    let reply = with_lock_reply(call, None, |current, now| {
        let out = node::with_fencer(|f| lock::fence(current, request.owner, request.floor, now, f));
        bool_reply(out)
    });
    if reply == Reply::Int(1) {
        // Replicas and the AOF keep the raise, so a promoted replica or a
        // restarted node never issues a token at or below the floor.
        call.replicate_verbatim();
    }
    reply
}

/// `LOCK.INFO key`
pub fn info(call: &Call<'_>, argv: &[&[u8]]) -> Reply {
    if let Err(e) = args::key_only(argv) {
        return rejected("lock.info", &e);
    }
    let Some(key) = call.open_key(false) else {
        return Reply::Nil;
    };
    let current = match read(&key, None) {
        Ok(current) => current,
        Err(reply) => return reply,
    };
    let now = clock::now_ms();
    match lock::inspect(current, now) {
        None => Reply::Nil,
        Some(held) => Reply::Fields(vec![
            ("kind", Field::Text(held.kind.name())),
            ("holder", Field::Bytes(held.owner.to_vec())),
            ("holds", Field::Int(i64::from(held.holds))),
            ("fence", Field::Int(clamp(held.fence))),
            ("ttl-ms", Field::Int(held.remaining_ms(now))),
            ("deadline-ms", Field::Int(held.deadline_ms)),
            ("waiters", Field::Int(waiters_on(call))),
        ]),
    }
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
        let key_call = call.for_arg(index);
        let wrong = key_call.open_key(false).and_then(|key| read(&key, None).err());
        if let Some(reply) = wrong {
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

/// `LOCK.CHECK key fencing-token`: 1 if that token is the key's current,
/// live grant, else 0 (a resource server's check before acting).
pub fn check(call: &Call<'_>, argv: &[&[u8]]) -> Reply {
    let fence = match args::check(argv) {
        Ok(fence) => fence,
        Err(e) => return rejected("lock.check", &e),
    };
    let Some(key) = call.open_key(false) else { return Reply::Int(0) };
    match read(&key, None) {
        Ok(current) => Reply::Int(i64::from(lock::is_current(current, fence, clock::now_ms()))),
        Err(reply) => reply,
    }
}

fn waiters_on(call: &Call<'_>) -> i64 {
    if !handoff::any_waiters() {
        return 0;
    }
    i64::try_from(handoff::queued(&call.key_id())).unwrap_or(i64::MAX)
}

fn rejected(command: &str, error: &ArgError) -> Reply {
    stats::REJECTED.bump();
    Reply::Error(errors::bad_args(command, error))
}

fn bool_reply(out: Outcome<'_, bool>) -> (Reply, Write, bool) {
    (Reply::Int(i64::from(out.reply)), Write::from_step(out.step), out.found_expired)
}

fn fence_reply(fence: u64) -> Reply {
    Reply::Int(clamp(fence))
}

/// Tokens stay far below i64::MAX until the year 2262 (see fencing.rs).
pub(crate) fn clamp(fence: u64) -> i64 {
    i64::try_from(fence).unwrap_or(i64::MAX)
}

/// Opens the key for writing, reads the lock (checking its kind), runs
/// `transition` on it with the module clock's "now", applies the write, and
/// hands a freed lock to the head waiter, all in this one command.
fn with_lock<T>(
    call: &Call<'_>,
    kind: Option<Kind>,
    transition: impl FnOnce(Option<Lock<'_>>, i64) -> (T, Write, bool),
) -> Result<T, Reply> {
    let Some(mut key) = call.open_key(true) else {
        return Err(Reply::Error(errors::write_failed()));
    };
    let now = clock::now_ms();
    let (answer, write, found_expired) = {
        let current = read(&key, kind)?;
        // The transition encodes its step before the key is touched: a new
        // value may borrow bytes of the old one.
        let (answer, write, found_expired) = transition(current, now);
        if found_expired {
            stats::EXPIRIES.bump();
        }
        (answer, write, found_expired)
    };
    let freed = matches!(write, Write::Delete);
    if !write.apply(call, &mut key, now) {
        return Err(Reply::Error(errors::write_failed()));
    }
    let handed_off = handoff::settle(call, &mut key);
    if freed && !handed_off {
        // For clients that wait in their own event loop (pub/sub).
        call.publish_freed(if found_expired { Freed::Expired } else { Freed::Released });
    }
    Ok(answer)
}

/// [`with_lock`] for transitions whose answer is the reply itself.
fn with_lock_reply(
    call: &Call<'_>,
    kind: Option<Kind>,
    transition: impl FnOnce(Option<Lock<'_>>, i64) -> (Reply, Write, bool),
) -> Reply {
    with_lock(call, kind, transition).unwrap_or_else(|reply| reply)
}

/// Reads the lock stored at the key. `Err` is the WRONGTYPE reply for a key
/// Reads the lock stored at the key. `Err` is the WRONGTYPE reply for a key
/// that holds anything else, or a lock of the wrong kind.
fn read<'k>(key: &'k Key<'_>, kind: Option<Kind>) -> Result<Option<Lock<'k>>, Reply> {
    let current = read_silently(key).map_err(|()| wrongtype(errors::not_a_lock()))?;
    match (current, kind) {
        (Some(held), Some(wanted)) if held.kind != wanted => {
            Err(wrongtype(errors::wrong_kind(held.kind, wanted)))
        }
        _ => Ok(current),
    }
}

/// [`read`] for callers that are not answering a command (hand-off):
/// `Err(())` if the key holds something that is not a lock.
pub(crate) fn read_silently<'k>(key: &'k Key<'_>) -> Result<Option<Lock<'k>>, ()> {
    let current = match key.kind() {
        KeyKind::Empty => None,
        KeyKind::Other => return Err(()),
        KeyKind::String => Some(key.value().and_then(decode).ok_or(())?),
    };
    if let Some(held) = current {
        // A token seen in stored state (loaded from disk, replicated from an
        // old master) must never be issued again by this node.
        node::with_fencer(|f| f.raise_to(held.fence));
    }
    Ok(current)
}

/// A stored lock, with the lock-delay in force.
fn decode(value: &[u8]) -> Option<Lock<'_>> {
    codec::decode(value).map(|held| Lock { cool_down_ms: config::EXPIRY_DELAY_MS.get(), ..held })
}

fn wrongtype(line: String) -> Reply {
    stats::REJECTED.bump();
    Reply::Error(line)
}

/// A step with the new value already encoded, so it owns its bytes. The
/// encoded value lives inline (a few hundred bytes moved, no allocation).
#[allow(clippy::large_enum_variant)]
pub(crate) enum Write {
    Keep,
    Store { value: Encoded, deadline_ms: i64 },
    Delete,
}

impl Write {
    pub(crate) fn from_step(step: Step<'_>) -> Write {
        match step {
            Step::Keep => Write::Keep,
            Step::Delete => Write::Delete,
            Step::Write(held) => Write::Store { value: Encoded::new(&held), deadline_ms: held.deadline_ms },
        }
    }

    /// Applies the write to the key and replicates it as a core command, so
    /// that replicas and the AOF reproduce it without the module.
    pub(crate) fn apply(self, call: &Call<'_>, key: &mut Key<'_>, now_ms: i64) -> bool {
        match self {
            Write::Keep => true,
            Write::Delete => {
                let deleted = key.delete();
                if deleted {
                    call.replicate_del();
                }
                deleted
            }
            Write::Store { value, deadline_ms } => {
                // The key must outlive the lock's deadline by the clock-jump
                // tolerance and any lock-delay after it.
                let tolerance =
                    config::CLOCK_JUMP_TOLERANCE_MS.get().saturating_add(config::EXPIRY_DELAY_MS.get());
                let expire_at = clock::backstop_ms(deadline_ms, now_ms, clock::wall_ms(), tolerance);
                match key.store_with(value.len(), expire_at, |out| value.write_to(out)) {
                    Some(stored) => {
                        call.replicate_set_pxat(stored, expire_at);
                        true
                    }
                    None => false,
                }
            }
        }
    }
}
