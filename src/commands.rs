//! The command adapter: parse the arguments, read the key, run one pure
//! transition from `core::lock`, then store, replicate and reply. Each
//! handler is a few lines; the decisions are all in `core`.

use crate::clock;
use crate::config;
use crate::core::args::{self, ArgError};
use crate::core::codec::{self, Encoded, Stored};
use crate::core::fencing::Fencer;
use crate::core::group::{self, Change, Group, GroupGrant, GroupKind, Want};
use crate::core::lock::{self, Admission, Grant, Kind, Lock, Outcome, Step};
use crate::core::queue::{Request, Waiter};
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
    grant_parsed(call, args::acquire(argv, config::limits()), Request::Single(Kind::Plain), "lock.acquire")
}

/// `LOCK.ENTER key owner ttl-ms [WAIT timeout-ms]`
pub fn enter(call: &Call<'_>, argv: &[&[u8]]) -> Reply {
    grant_parsed(call, args::acquire(argv, config::limits()), Request::Single(Kind::Reentrant), "lock.enter")
}

/// `LOCK.SHARED key token ttl-ms [WAIT timeout-ms]`: a read hold.
pub fn shared(call: &Call<'_>, argv: &[&[u8]]) -> Reply {
    grant_parsed(call, args::acquire(argv, config::limits()), Request::Group(Want::read()), "lock.shared")
}

/// `LOCK.EXCLUSIVE key token ttl-ms [WAIT timeout-ms]`: a write hold.
pub fn exclusive(call: &Call<'_>, argv: &[&[u8]]) -> Reply {
    grant_parsed(call, args::acquire(argv, config::limits()), Request::Group(Want::write()), "lock.exclusive")
}

/// `LOCK.SEMAPHORE key token permits ttl-ms [WAIT timeout-ms]`
pub fn semaphore(call: &Call<'_>, argv: &[&[u8]]) -> Reply {
    match args::semaphore(argv, config::limits()) {
        Ok((permits, request)) => grant(call, request, Request::Group(Want::permit(permits))),
        Err(e) => rejected("lock.semaphore", &e),
    }
}

fn grant_parsed(
    call: &Call<'_>,
    parsed: Result<args::Acquire<'_>, ArgError>,
    want: Request,
    name: &str,
) -> Reply {
    match parsed {
        Ok(request) => grant(call, request, want),
        Err(e) => rejected(name, &e),
    }
}

fn grant(call: &Call<'_>, request: args::Acquire<'_>, want: Request) -> Reply {
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
    let answer = with_lock(call, Shape::of(want), |current, now| {
        let decision = decide(current, want, request.owner, request.ttl_ms, now, admission);
        let answer = match (decision.verdict, quarantine, wait_ms) {
            (Verdict::Granted(fence), ..) => {
                stats::GRANTS.bump();
                Answer::Now(fence_reply(fence))
            }
            (Verdict::Renewed(fence), ..) => {
                stats::RENEWALS.bump();
                Answer::Now(fence_reply(fence))
            }
            // In quarantine nothing new is granted, so waiting would only
            // block the caller for the whole period: refuse at once.
            (Verdict::Quarantined, Some((reason, left_ms)), _)
            | (Verdict::Busy, Some((reason, left_ms)), Some(_)) => {
                stats::QUARANTINED.bump();
                Answer::Now(Reply::Error(errors::quarantined(reason, left_ms)))
            }
            (Verdict::Quarantined, None, _) => Answer::Now(Reply::Error(errors::internal())),
            (Verdict::Busy, _, Some(timeout_ms)) => {
                stats::CONTENDED.bump();
                // The hand-off timer must fire when a holder leaves.
                Answer::Wait { timeout_ms, deadline_ms: decision.retry_at_ms.unwrap_or(now) }
            }
            (Verdict::Busy, _, None) => {
                stats::CONTENDED.bump();
                Answer::Now(Reply::Nil)
            }
            (Verdict::Refused(line), ..) => {
                stats::REJECTED.bump();
                Answer::Now(Reply::Error(line))
            }
        };
        (answer, decision.write, decision.found_expired)
    });
    match (answer, key_id) {
        (Ok(Answer::Wait { timeout_ms, deadline_ms }), Some(key_id)) => {
            let owner = request.owner.to_vec();
            let waiter = Waiter { handle: (), request: want, owner, ttl_ms: request.ttl_ms, timer: None };
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

/// The result of one grant attempt, for a command or for a waiter's turn.
pub(crate) struct Decision {
    pub verdict: Verdict,
    pub write: Write,
    pub found_expired: bool,
    /// When `Busy`: the next instant a holder leaves by itself.
    pub retry_at_ms: Option<i64>,
}

pub(crate) enum Verdict {
    Granted(u64),
    Renewed(u64),
    Busy,
    Quarantined,
    /// An error line (wrong kind, semaphore size, mode, hold bound).
    Refused(String),
}

/// Runs the grant transition for `want` on the stored lock. Shared by the
/// grant commands and the hand-off to waiters, so both apply the same rules.
pub(crate) fn decide<'a>(
    current: Current<'a>,
    want: Request,
    owner: &'a [u8],
    ttl_ms: i64,
    now: i64,
    admission: Admission,
) -> Decision {
    if let Some(line) = Shape::of(want).mismatch(&current) {
        return Decision {
            verdict: Verdict::Refused(line),
            write: Write::Keep,
            found_expired: false,
            retry_at_ms: None,
        };
    }
    match (want, current) {
        (Request::Group(want), current) => {
            let current = current.into_group();
            let retry_at_ms = current.as_ref().and_then(|g| g.next_free_after(now));
            let out = node::with_fencer(|f| group::acquire(current, want, owner, ttl_ms, now, admission, f));
            let verdict = match out.reply {
                GroupGrant::Granted(fence) => Verdict::Granted(fence),
                GroupGrant::Renewed(fence) => Verdict::Renewed(fence),
                GroupGrant::Busy => Verdict::Busy,
                GroupGrant::Quarantined => Verdict::Quarantined,
                GroupGrant::LimitMismatch { limit } => {
                    Verdict::Refused(errors::limit_mismatch(limit, want.limit))
                }
                GroupGrant::ModeMismatch { held } => Verdict::Refused(errors::mode_mismatch(held)),
            };
            Decision {
                verdict,
                write: Write::from_change(out.change),
                found_expired: out.found_expired,
                retry_at_ms,
            }
        }
        (Request::Single(kind), current) => {
            let current = current.into_single();
            let retry_at_ms = current.map(|l| l.frees_at_ms()).filter(|&at| at > now);
            let out = node::with_fencer(|f| lock::acquire(current, kind, owner, ttl_ms, now, admission, f));
            let verdict = match out.reply {
                Grant::Granted(fence) => Verdict::Granted(fence),
                Grant::Renewed(fence) => Verdict::Renewed(fence),
                Grant::Busy => Verdict::Busy,
                Grant::Quarantined => Verdict::Quarantined,
                Grant::TooManyHolds => Verdict::Refused(errors::too_many_holds(lock::HOLDS_MAX)),
            };
            Decision {
                verdict,
                write: Write::from_step(out.step),
                found_expired: out.found_expired,
                retry_at_ms,
            }
        }
    }
}

/// `LOCK.RELEASE key token`: frees the lock, or the token's own hold of a
/// shared lock or semaphore.
pub fn release(call: &Call<'_>, argv: &[&[u8]]) -> Reply {
    let request = match args::owner(argv) {
        Ok(request) => request,
        Err(e) => return rejected("lock.release", &e),
    };
    with_lock_reply(call, Shape::Any, |current, now| {
        let reply = match current {
            Current::Group(g) => group_bool(group::release(Some(g), request.owner, now)),
            single => bool_reply(lock::release(single.into_single(), request.owner, now)),
        };
        if reply.0 == Reply::Int(1) {
            stats::RELEASES.bump();
        }
        reply
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
    with_lock_reply(call, Shape::Any, |current, now| {
        let reply = match current {
            Current::Group(g) => group_bool(group::extend(Some(g), owner, ttl_ms, now)),
            single => bool_reply(lock::extend(single.into_single(), owner, ttl_ms, now)),
        };
        if reply.0 == Reply::Int(1) {
            stats::EXTENSIONS.bump();
        }
        reply
    })
}

/// `LOCK.EXIT key owner [ID request-id]`
pub fn exit(call: &Call<'_>, argv: &[&[u8]]) -> Reply {
    let request = match args::exit(argv) {
        Ok(request) => request,
        Err(e) => return rejected("lock.exit", &e),
    };
    with_lock_reply(call, Shape::Single(Kind::Reentrant), |current, now| {
        let out = lock::exit(current.into_single(), request.owner, request.request_id, now);
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
    let reply = with_lock_reply(call, Shape::Any, |current, now| {
        node::with_fencer(|f| match current {
            Current::Group(g) => group_bool(group::fence(Some(g), request.owner, request.floor, now, f)),
            single => bool_reply(lock::fence(single.into_single(), request.owner, request.floor, now, f)),
        })
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
    let current = match read(&key, Shape::Any) {
        Ok(current) => current,
        Err(reply) => return reply,
    };
    let now = clock::now_ms();
    match current {
        Current::Group(g) => group_info(call, &g, now),
        single => match lock::inspect(single.into_single(), now) {
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
        },
    }
}

/// LOCK.INFO of a shared lock or semaphore: the kind, the permit count
/// (semaphores), the live holders with their own mode, token and TTL.
fn group_info(call: &Call<'_>, g: &Group<'_>, now: i64) -> Reply {
    let holders: Vec<Vec<(&'static str, Field)>> = g
        .live(now)
        .map(|h| {
            vec![
                ("holder", Field::Bytes(h.owner.to_vec())),
                ("mode", Field::Text(h.mode.name())),
                ("fence", Field::Int(clamp(h.fence))),
                ("ttl-ms", Field::Int(h.remaining_ms(now))),
                ("deadline-ms", Field::Int(h.deadline_ms)),
            ]
        })
        .collect();
    if holders.is_empty() {
        return Reply::Nil;
    }
    let mut fields = vec![("kind", Field::Text(g.kind.name()))];
    if g.kind == GroupKind::Semaphore {
        fields.push(("permits", Field::Int(i64::from(g.limit))));
    }
    fields.push(("holds", Field::Int(i64::try_from(holders.len()).unwrap_or(i64::MAX))));
    fields.push(("waiters", Field::Int(waiters_on(call))));
    fields.push(("holders", Field::List(holders)));
    Reply::Fields(fields)
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
        let wrong = key_call.open_key(false).and_then(|key| read(&key, Shape::Any).err());
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

/// `LOCK.CHECK key fencing-token`: 1 if that token is a current, live grant
/// of the key, else 0 (a resource server's check before acting).
pub fn check(call: &Call<'_>, argv: &[&[u8]]) -> Reply {
    let fence = match args::check(argv) {
        Ok(fence) => fence,
        Err(e) => return rejected("lock.check", &e),
    };
    let Some(key) = call.open_key(false) else { return Reply::Int(0) };
    let now = clock::now_ms();
    match read(&key, Shape::Any) {
        Ok(Current::Group(g)) => Reply::Int(i64::from(group::is_current(Some(&g), fence, now))),
        Ok(single) => Reply::Int(i64::from(lock::is_current(single.into_single(), fence, now))),
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

fn group_bool(out: group::Outcome<'_, bool>) -> (Reply, Write, bool) {
    (Reply::Int(i64::from(out.reply)), Write::from_change(out.change), out.found_expired)
}

fn fence_reply(fence: u64) -> Reply {
    Reply::Int(clamp(fence))
}

/// Tokens stay far below i64::MAX until the year 2262 (see fencing.rs).
pub(crate) fn clamp(fence: u64) -> i64 {
    i64::try_from(fence).unwrap_or(i64::MAX)
}

/// What a key holds, as the commands see it.
pub(crate) enum Current<'k> {
    Free,
    Single(Lock<'k>),
    Group(Group<'k>),
}

impl<'k> Current<'k> {
    fn into_single(self) -> Option<Lock<'k>> {
        match self {
            Current::Single(held) => Some(held),
            _ => None,
        }
    }

    fn into_group(self) -> Option<Group<'k>> {
        match self {
            Current::Group(g) => Some(g),
            _ => None,
        }
    }

    fn kind_name(&self) -> Option<&'static str> {
        match self {
            Current::Free => None,
            Current::Single(held) => Some(held.kind.name()),
            Current::Group(g) => Some(g.kind.name()),
        }
    }
}

/// The kind of lock a command works on (`Any` for the commands that work on
/// every kind: RELEASE, EXTEND, FENCE, INFO, CHECK, RENEW).
#[derive(Clone, Copy)]
enum Shape {
    Any,
    Single(Kind),
    Group(GroupKind),
}

impl Shape {
    fn of(request: Request) -> Shape {
        match request {
            Request::Single(kind) => Shape::Single(kind),
            Request::Group(want) => Shape::Group(want.kind),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Shape::Any => "any",
            Shape::Single(kind) => kind.name(),
            Shape::Group(kind) => kind.name(),
        }
    }

    /// The WRONGTYPE line if `current` is a lock of another kind.
    fn mismatch(self, current: &Current<'_>) -> Option<String> {
        let fits = match (self, current) {
            (Shape::Any, _) | (_, Current::Free) => true,
            (Shape::Single(kind), Current::Single(held)) => held.kind == kind,
            (Shape::Group(kind), Current::Group(g)) => g.kind == kind,
            _ => false,
        };
        match (fits, current.kind_name()) {
            (false, Some(found)) => Some(errors::wrong_kind(found, self.name())),
            _ => None,
        }
    }
}

/// Opens the key for writing, reads the lock (checking its kind), runs
/// `transition` on it with the module clock's "now", applies the write, and
/// hands a freed lock to the head waiter, all in this one command.
fn with_lock<T>(
    call: &Call<'_>,
    shape: Shape,
    transition: impl FnOnce(Current<'_>, i64) -> (T, Write, bool),
) -> Result<T, Reply> {
    let Some(mut key) = call.open_key(true) else {
        return Err(Reply::Error(errors::write_failed()));
    };
    let now = clock::now_ms();
    let (answer, write, found_expired) = {
        let current = read(&key, shape)?;
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
    shape: Shape,
    transition: impl FnOnce(Current<'_>, i64) -> (Reply, Write, bool),
) -> Reply {
    with_lock(call, shape, transition).unwrap_or_else(|reply| reply)
}

/// Reads the lock stored at the key. `Err` is the WRONGTYPE reply for a key
/// that holds anything else, or a lock of the wrong kind.
fn read<'k>(key: &'k Key<'_>, shape: Shape) -> Result<Current<'k>, Reply> {
    let current = read_silently(key).map_err(|()| wrongtype(errors::not_a_lock()))?;
    match shape.mismatch(&current) {
        Some(line) => Err(wrongtype(line)),
        None => Ok(current),
    }
}

/// [`read`] for callers that are not answering a command (hand-off):
/// `Err(())` if the key holds something that is not a lock.
pub(crate) fn read_silently<'k>(key: &'k Key<'_>) -> Result<Current<'k>, ()> {
    let current = match key.kind() {
        KeyKind::Empty => Current::Free,
        KeyKind::Other => return Err(()),
        KeyKind::String => decode(key.value().ok_or(())?).ok_or(())?,
    };
    // A token seen in stored state (loaded from disk, replicated from an old
    // master) must never be issued again by this node.
    let highest = match &current {
        Current::Free => None,
        Current::Single(held) => Some(held.fence),
        Current::Group(g) => g.holders.iter().map(|h| h.fence).max(),
    };
    if let Some(fence) = highest {
        node::with_fencer(|f| f.raise_to(fence));
    }
    Ok(current)
}

/// A stored lock, with the lock-delay in force.
pub(crate) fn decode(value: &[u8]) -> Option<Current<'_>> {
    let cool_down_ms = config::EXPIRY_DELAY_MS.get();
    Some(match codec::decode_any(value)? {
        Stored::Single(held) => Current::Single(Lock { cool_down_ms, ..held }),
        Stored::Group(g) => Current::Group(Group { cool_down_ms, ..g }),
    })
}

fn wrongtype(line: String) -> Reply {
    stats::REJECTED.bump();
    Reply::Error(line)
}

/// A step with the new value already encoded, so it owns its bytes. A
/// single-holder lock is encoded inline (a few hundred bytes moved, no
/// allocation); a group, whose size varies, in a vector.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Write {
    Keep,
    Store { value: Encoded, deadline_ms: i64 },
    StoreGroup { value: Vec<u8>, deadline_ms: i64 },
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

    pub(crate) fn from_change(change: Change<'_>) -> Write {
        match change {
            Change::Keep => Write::Keep,
            Change::Delete => Write::Delete,
            Change::Write(g) => {
                Write::StoreGroup { value: codec::encode_group(&g), deadline_ms: g.last_deadline_ms() }
            }
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
                store(call, key, value.len(), deadline_ms, now_ms, |out| value.write_to(out))
            }
            Write::StoreGroup { value, deadline_ms } => {
                store(call, key, value.len(), deadline_ms, now_ms, |out| {
                    if let Some(dst) = out.get_mut(..value.len()) {
                        dst.copy_from_slice(&value);
                    }
                })
            }
        }
    }
}

/// Stores a value of `len` bytes written by `fill`, with the native expiry
/// as a backstop after `deadline_ms`, and replicates it.
fn store(
    call: &Call<'_>,
    key: &mut Key<'_>,
    len: usize,
    deadline_ms: i64,
    now_ms: i64,
    fill: impl FnOnce(&mut [u8]),
) -> bool {
    // The key must outlive the lock's deadline by the clock-jump tolerance
    // and any lock-delay after it.
    let tolerance = config::CLOCK_JUMP_TOLERANCE_MS.get().saturating_add(config::EXPIRY_DELAY_MS.get());
    let expire_at = clock::backstop_ms(deadline_ms, now_ms, clock::wall_ms(), tolerance);
    match key.store_with(len, expire_at, fill) {
        Some(stored) => {
            call.replicate_set_pxat(stored, expire_at);
            true
        }
        None => false,
    }
}
