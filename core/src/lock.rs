//! The lock state machine, one for every kind: pure functions from (the
//! stored lock, a request, now) to (a reply, the edits to store). No Redis,
//! no clock, no globals: the adapter opens the key, runs one of these on a
//! [`Txn`], and writes the [`Changes`](super::txn::Changes).
//!
//! Every kind is a set of holders, each with a mode, a fencing token and a
//! deadline on the module clock; a holder is live while `now < deadline`.
//! The kinds differ only in which holders may be together ([`admits`]):
//! plain and reentrant locks and the writer of a shared lock are alone;
//! readers share; a semaphore has at most `limit` permit holders.
//!
//! A holder whose deadline passed is gone, except within the lock-delay
//! (`lock.expiry-delay-ms`): it then still occupies its slot (keeps others
//! out) but can no longer release, extend or fence.

use std::borrow::Cow;

use super::fencing::Fencer;
use super::kind::{ExitId, Hold, Kind, Mode, Want, HOLDERS_MAX, HOLDS_MAX};
use super::txn::{Stored, Txn};

/// Whether a free lock may be granted to a newcomer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admission {
    Open,
    /// Clients are queued for this key: a free lock belongs to the head of
    /// the queue, not to this newcomer (no barging).
    Queued,
    /// The node is in quarantine: no new grants (renewals still work).
    Quarantined,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Grant {
    /// A new grant with a new fencing token.
    Granted(u64),
    /// The requester already held it: TTL reset, same fencing token (a
    /// reentrant lock counts one more hold).
    Renewed(u64),
    /// Not grantable now: held by others, no free permit, or waiters ahead.
    Busy,
    /// Grantable, but the node is in quarantine.
    Quarantined,
    /// The key holds a lock of another kind.
    WrongKind { found: Kind },
    /// A semaphore exists with another number of permits.
    LimitMismatch { limit: u32 },
    /// The requester holds the lock in another mode (a reader asking to
    /// write, or the reverse): a token holds one mode at a time.
    ModeMismatch { held: Mode },
    /// Reentrant only: the hold count would pass [`HOLDS_MAX`].
    TooManyHolds,
}

/// Whether a new holder with `want`'s mode fits beside the current ones
/// (live or within their lock-delay).
pub fn admits<S: Stored + ?Sized>(txn: &Txn<'_, '_, S>, want: Want) -> bool {
    let count = txn.count();
    match want.mode {
        Mode::Write => count == 0,
        Mode::Read => count < HOLDERS_MAX && txn.mode() != Some(Mode::Write),
        Mode::Permit => count < want.limit.min(HOLDERS_MAX),
    }
}

/// What a grant of one key to one owner would do, decided on the stored lock
/// (after removing holders whose time passed); nothing of the grant itself
/// is recorded yet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Plan {
    /// The owner holds it, live, in the asked mode: a renewal of this hold.
    Renew(Hold),
    /// A new holder fits.
    New,
    /// Not grantable: the reason (never `Granted` or `Renewed`).
    Refuse(Grant),
}

fn plan<S: Stored + ?Sized>(
    txn: &mut Txn<'_, '_, S>,
    want: Want,
    owner: &[u8],
    admission: Admission,
) -> Plan {
    if let Some(shape) = txn.shape() {
        if shape.kind != want.kind {
            return Plan::Refuse(Grant::WrongKind { found: shape.kind });
        }
    }
    txn.sweep_if_due();
    let now = txn.now_ms();
    if let Some(shape) = txn.shape() {
        if want.kind == Kind::Semaphore && txn.count() > 0 && shape.limit != want.limit {
            return Plan::Refuse(Grant::LimitMismatch { limit: shape.limit });
        }
    }
    match txn.hold(owner) {
        Some(held) if held.is_live(now) => {
            if held.mode != want.mode {
                return Plan::Refuse(Grant::ModeMismatch { held: held.mode });
            }
            if want.kind == Kind::Reentrant && held.holds >= HOLDS_MAX {
                return Plan::Refuse(Grant::TooManyHolds);
            }
            return Plan::Renew(held);
        }
        // Its own earlier grant, expired but within the lock-delay: like
        // every other requester, it waits for the delay to pass.
        Some(_) => return Plan::Refuse(Grant::Busy),
        None => {}
    }
    if !admits(txn, want) {
        return Plan::Refuse(Grant::Busy);
    }
    match admission {
        Admission::Queued => Plan::Refuse(Grant::Busy),
        Admission::Quarantined => Plan::Refuse(Grant::Quarantined),
        Admission::Open => Plan::New,
    }
}

/// Renews `held`: a new deadline, one more hold of a reentrant lock, the
/// same fencing token (a retry after a lost reply gets the same answer).
fn renew<'o, S: Stored + ?Sized>(
    txn: &mut Txn<'_, 'o, S>,
    want: Want,
    owner: Cow<'o, [u8]>,
    ttl_ms: i64,
    held: Hold,
) {
    let holds = if want.kind == Kind::Reentrant { held.holds.saturating_add(1) } else { held.holds };
    let deadline_ms = txn.now_ms().saturating_add(ttl_ms);
    txn.put(owner, Hold { deadline_ms, holds, ..held }, want.shape());
}

/// Records a new hold with token `fence` (replacing any hold `owner` had).
fn put_new<'o, S: Stored + ?Sized>(
    txn: &mut Txn<'_, 'o, S>,
    want: Want,
    owner: Cow<'o, [u8]>,
    ttl_ms: i64,
    fence: u64,
) {
    let now = txn.now_ms();
    let deadline_ms = now.saturating_add(ttl_ms);
    invariant!(fence > txn.top_fence(), "a new token is above the stored ones");
    invariant!(deadline_ms > now, "a grant ends after it starts");
    txn.put(owner, Hold::new(want.mode, fence, deadline_ms), want.shape());
}

/// A new token: above every token this node issued or saw, and above
/// `stored_top`, the highest token stored in the keys it is for (a replica
/// promoted, a restart from the AOF, a FENCE from the quorum: a token read
/// back from a key is never issued again).
fn issue(fencer: &mut Fencer, stored_top: u64, now_ms: i64) -> u64 {
    fencer.raise_to(stored_top);
    let fence = fencer.next(now_ms);
    invariant!(fence > stored_top, "tokens strictly rise: {fence} after {stored_top}");
    fence
}

/// LOCK.ACQUIRE, LOCK.ENTER, LOCK.SHARED, LOCK.EXCLUSIVE, LOCK.SEMAPHORE.
/// `owner` is borrowed from the command's arguments, or owned (a waiter's,
/// taken out of its queue by the hand-off).
pub fn acquire<'o, S: Stored + ?Sized>(
    txn: &mut Txn<'_, 'o, S>,
    want: Want,
    owner: impl Into<Cow<'o, [u8]>>,
    ttl_ms: i64,
    admission: Admission,
    fencer: &mut Fencer,
) -> Grant {
    let owner: Cow<'o, [u8]> = owner.into();
    match plan(txn, want, &owner, admission) {
        Plan::Refuse(why) => why,
        Plan::Renew(held) => {
            renew(txn, want, owner, ttl_ms, held);
            Grant::Renewed(held.fence)
        }
        Plan::New => {
            let fence = issue(fencer, txn.top_fence(), txn.now_ms());
            put_new(txn, want, owner, ttl_ms, fence);
            Grant::Granted(fence)
        }
    }
}

/// What LOCK.MACQUIRE did with a set of keys.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AllGrant {
    /// Every key granted, all with this one new fencing token.
    Granted(u64),
    /// The owner already held every key, in the asked modes, with this one
    /// token: every deadline reset, the same token.
    Renewed(u64),
    /// Nothing granted: the first key (index in the set) that refused, and
    /// why. An error (wrong kind, mode) wins over `Busy`, `Busy` over
    /// `Quarantined`, so that the reply names a reason waiting cannot cure
    /// before one it can.
    Refused { at: usize, why: Grant },
}

/// LOCK.MACQUIRE: grants every key of a set to `owner`, or none.
///
/// `txns` are transactions over the set's keys (one each, in the set's
/// order), `wants` and `admissions` the mode and admission of each. One
/// fencing token covers the whole set: it is new, above every token issued
/// by this node and every token stored in any of the keys, so it is above
/// every earlier grant of each key (per-key monotonicity is what a resource
/// checks), and a client passes one number to every resource it writes. A
/// set the owner already holds whole with one token is renewed with that
/// token (a retry after a lost reply); a set it holds in part, or with
/// different tokens, is granted anew: its held keys move to the new token,
/// so that the set never mixes tokens.
pub fn acquire_all<'o, S: Stored + ?Sized>(
    txns: &mut [Txn<'_, 'o, S>],
    wants: &[Want],
    owner: &'o [u8],
    ttl_ms: i64,
    admissions: &[Admission],
    fencer: &mut Fencer,
) -> AllGrant {
    let mut plans: Vec<Plan> = Vec::with_capacity(txns.len());
    for ((txn, &want), &admission) in txns.iter_mut().zip(wants).zip(admissions) {
        plans.push(plan(txn, want, owner, admission));
    }
    let rank = |why: &Grant| match why {
        Grant::Quarantined => 0,
        Grant::Busy => 1,
        _ => 2,
    };
    let refused = plans
        .iter()
        .enumerate()
        .filter_map(|(at, p)| match p {
            Plan::Refuse(why) => Some((at, *why)),
            _ => None,
        })
        .max_by_key(|(at, why)| (rank(why), std::cmp::Reverse(*at)));
    if let Some((at, why)) = refused {
        return AllGrant::Refused { at, why };
    }
    let held_fences: Vec<u64> = plans
        .iter()
        .filter_map(|p| match p {
            Plan::Renew(held) => Some(held.fence),
            _ => None,
        })
        .collect();
    let whole = held_fences.len() == plans.len();
    if let (true, Some(&fence)) = (whole, held_fences.first()) {
        if held_fences.iter().all(|&f| f == fence) {
            for ((txn, &want), plan) in txns.iter_mut().zip(wants).zip(&plans) {
                if let Plan::Renew(held) = *plan {
                    renew(txn, want, Cow::Borrowed(owner), ttl_ms, held);
                }
            }
            return AllGrant::Renewed(fence);
        }
    }
    let now = txns.first().map_or(0, |t| t.now_ms());
    let stored_top = txns.iter().map(|t| t.top_fence()).max().unwrap_or(0);
    let fence = issue(fencer, stored_top, now);
    for (txn, &want) in txns.iter_mut().zip(wants) {
        put_new(txn, want, Cow::Borrowed(owner), ttl_ms, fence);
    }
    AllGrant::Granted(fence)
}

/// LOCK.RELEASE: frees `owner`'s hold (all holds of a reentrant lock).
pub fn release<'o, S: Stored + ?Sized>(txn: &mut Txn<'_, 'o, S>, owner: &'o [u8]) -> bool {
    release_hold(txn, owner).is_some()
}

/// [`release`], answering the hold it freed (its token and deadline, for
/// the caller's counters: one read of the record).
pub fn release_hold<'o, S: Stored + ?Sized>(txn: &mut Txn<'_, 'o, S>, owner: &'o [u8]) -> Option<Hold> {
    txn.sweep_if_due();
    let held = txn.hold(owner).filter(|h| h.is_live(txn.now_ms()))?;
    txn.remove_held(Cow::Borrowed(owner), &held);
    Some(held)
}

/// LOCK.EXTEND: `owner`'s hold now ends `ttl_ms` from now (it may
/// shorten). Never re-creates a hold that is gone.
pub fn extend<'o, S: Stored + ?Sized>(txn: &mut Txn<'_, 'o, S>, owner: &'o [u8], ttl_ms: i64) -> bool {
    txn.sweep_if_due();
    let now = txn.now_ms();
    match (txn.hold(owner), txn.shape()) {
        (Some(held), Some(shape)) if held.is_live(now) => {
            let deadline_ms = now.saturating_add(ttl_ms);
            txn.put(Cow::Borrowed(owner), Hold { deadline_ms, ..held }, shape);
            true
        }
        _ => false,
    }
}

/// What LOCK.EXIT found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exit {
    /// Holds left; 0: the lock is free.
    Left(u32),
    /// `owner` does not hold it.
    NotHeld,
    /// The key holds a lock of another kind.
    WrongKind { found: Kind },
}

/// LOCK.EXIT: drops one hold of a reentrant lock. With a `request_id`, a
/// retry of an EXIT that was already applied (its reply was lost) changes
/// nothing and answers the same count again.
pub fn exit<'o, S: Stored + ?Sized>(
    txn: &mut Txn<'_, 'o, S>,
    owner: &'o [u8],
    request_id: Option<&[u8]>,
) -> Exit {
    if let Some(shape) = txn.shape() {
        if shape.kind != Kind::Reentrant {
            return Exit::WrongKind { found: shape.kind };
        }
    }
    txn.sweep_if_due();
    let held = match (txn.hold(owner), txn.shape()) {
        (Some(held), Some(shape)) if held.is_live(txn.now_ms()) => (held, shape),
        _ => return Exit::NotHeld,
    };
    let (held, shape) = held;
    if request_id.is_some_and(|id| id == held.exit_id.as_bytes()) {
        return Exit::Left(held.holds);
    }
    let holds = held.holds.saturating_sub(1);
    if holds == 0 {
        txn.remove(Cow::Borrowed(owner));
    } else {
        let exit_id = request_id.and_then(ExitId::new).unwrap_or(ExitId::NONE);
        txn.put(Cow::Borrowed(owner), Hold { holds, exit_id, ..held }, shape);
    }
    Exit::Left(holds)
}

/// LOCK.FENCE: if `owner` holds the lock, raise the node's counter to at
/// least `floor`, and record `floor` as the holder's fencing token
/// wherever its own differs, lower or higher. The quorum client sends the
/// quorum's token T as the floor; after it, this node answers T to the
/// holder's retry and to `LOCK.CHECK key T`, like every other node of the
/// quorum, also a late node whose own grant carried a token above T.
///
/// Why recording a lower token keeps fencing (each holder's quorum token
/// above every earlier fenced holder's):
/// - The node's counter is never lowered (`Fencer::raise_to` keeps the
///   maximum), so its next grant, of this key or any other, is still above
///   every token it issued, the holder's own replaced one included.
/// - T is above the quorum token of every earlier fenced holder of the key
///   (the quorum argument: that holder's FENCE majority meets our grant
///   majority in a node whose counter was at its token before it granted
///   us; see the client's `rounds/fence.rs`). Clients present quorum
///   tokens, so a resource that keeps the highest token it has seen still
///   refuses every earlier holder.
/// - The token this node had given the holder (above T) was never a quorum
///   token: the round's T is the highest of the grants that decided it, so
///   a grant above T came after it was decided and was never handed to
///   anyone as the lock's token. Forgetting it loses nothing a client
///   presents; a restarted node still starts above it (its clock floor, or
///   the FENCE raises kept in the AOF, as for every token it issued).
///
/// A caller that fences its own hold with some other floor only changes
/// the token it is checked by (`LOCK.CHECK`); the counter, and so every
/// later grant, is unaffected.
///
/// Tokens stay unique among a lock's holders on one node: when another
/// holder already carries `floor` (two nodes issued the same number and the
/// quorum client raised two readers or permit holders to it), this one
/// keeps its own token. LOCK.CHECK of `floor` still answers 1 while either
/// holds it by that token.
pub fn fence<'o, S: Stored + ?Sized>(
    txn: &mut Txn<'_, 'o, S>,
    owner: &'o [u8],
    floor: u64,
    fencer: &mut Fencer,
) -> bool {
    txn.sweep_if_due();
    match (txn.hold(owner), txn.shape()) {
        (Some(held), Some(shape)) if held.is_live(txn.now_ms()) => {
            fencer.raise_to(floor);
            let taken = txn.owner_of(floor).is_some_and(|other| other.as_ref() != owner);
            if floor != held.fence && !taken {
                txn.put(Cow::Borrowed(owner), Hold { fence: floor, ..held }, shape);
            }
            true
        }
        _ => false,
    }
}

/// The live holders, in no particular order (what LOCK.INFO shows). Read
/// only: expired holders are left for a write or Redis' expiry to remove.
pub fn live_holders<S: Stored + ?Sized>(stored: &S, now_ms: i64) -> Vec<(Vec<u8>, Hold)> {
    let mut live: Vec<(Vec<u8>, Hold)> =
        stored.holders().into_iter().filter(|(_, h)| h.is_live(now_ms)).collect();
    // Grant order: tokens rise with every grant on this node.
    live.sort_by_key(|(_, h)| h.fence);
    live
}

/// When the last expired holder that still keeps newcomers out (within its
/// lock-delay: `deadline <= now < deadline + cool_down`) stops doing so,
/// if any does: what LOCK.INFO reports for a lock with no live holder that
/// a new grant would still be refused. `None` when a holder is live (the
/// lock is held) or none keeps its slot.
pub fn kept_until<S: Stored + ?Sized>(stored: &S, now_ms: i64, cool_down_ms: i64) -> Option<i64> {
    let holders = stored.holders();
    if holders.iter().any(|(_, h)| h.is_live(now_ms)) {
        return None;
    }
    holders
        .iter()
        .map(|(_, h)| h.deadline_ms.saturating_add(cool_down_ms.max(0)))
        .filter(|&until| until > now_ms)
        .max()
}

/// LOCK.CHECK (Chubby's CheckSequencer): is `fence` a current, live grant of
/// this lock? A resource server asks this before acting for a client.
pub fn is_current<S: Stored + ?Sized>(stored: &S, fence: u64, now_ms: i64) -> bool {
    stored
        .owner_of(fence)
        .and_then(|owner| stored.hold(&owner))
        .is_some_and(|h| h.fence == fence && h.is_live(now_ms))
}

#[cfg(test)]
mod kept_tests {
    use super::*;
    use crate::kind::{Hold, Kind, Mode};
    use crate::memory::Single;

    #[test]
    fn an_expired_lock_keeps_its_slot_through_the_cool_down_only() {
        let single = Single { kind: Kind::Plain, owner: b"a", hold: Hold::new(Mode::Write, 7, 1_000) };
        assert_eq!(kept_until(&single, 999, 500), None, "live: held, not kept");
        assert_eq!(kept_until(&single, 1_000, 500), Some(1_500));
        assert_eq!(kept_until(&single, 1_499, 500), Some(1_500));
        assert_eq!(kept_until(&single, 1_500, 500), None, "over");
        assert_eq!(kept_until(&single, 1_000, 0), None, "no lock-delay");
        assert_eq!(kept_until(&crate::memory::Free, 0, 500), None);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kind::{Hold, Kind, Mode};
    use crate::memory::{Holders, Single};
    use crate::txn::Changes;

    const TTL: i64 = 1_000;

    /// Runs `f` on a transaction over `lock` and returns its result and the
    /// lock afterwards.
    fn run<T>(
        lock: &Holders,
        now: i64,
        cool_down: i64,
        f: impl for<'t> FnOnce(&mut Txn<'_, 't, Holders>) -> T,
    ) -> (T, Holders, Changes<'static>) {
        let mut txn = Txn::new(lock, now, cool_down);
        let out = f(&mut txn);
        let changes = txn.finish();
        let after = lock.apply(&changes);
        (out, after, changes.into_owned())
    }

    fn grant(lock: &Holders, want: Want, owner: &'static [u8], now: i64, f: &mut Fencer) -> (Grant, Holders) {
        let (g, after, _) = run(lock, now, 0, |t| acquire(t, want, owner, TTL, Admission::Open, f));
        (g, after)
    }

    #[test]
    fn grant_then_busy_then_idempotent_retry() {
        let mut f = Fencer::new(0);
        let (a, lock) = grant(&Holders::free(), Want::plain(), b"a", 10, &mut f);
        let Grant::Granted(t) = a else { panic!("{a:?}") };
        assert_eq!(grant(&lock, Want::plain(), b"b", 20, &mut f).0, Grant::Busy);
        let (again, lock) = grant(&lock, Want::plain(), b"a", 30, &mut f);
        assert_eq!(again, Grant::Renewed(t));
        assert_eq!(lock.hold(b"a").map(|h| h.deadline_ms), Some(30 + TTL));
    }

    #[test]
    fn expired_lock_is_free_and_reaped() {
        let mut f = Fencer::new(0);
        let (_, lock) = grant(&Holders::free(), Want::plain(), b"a", 0, &mut f);
        let (b, _, changes) =
            run(&lock, TTL, 0, |t| acquire(t, Want::plain(), &b"b"[..], TTL, Admission::Open, &mut f));
        assert!(matches!(b, Grant::Granted(_)));
        assert!(changes.found_expired);
        let (released, after, changes) = run(&lock, TTL, 0, |t| release(t, b"a"));
        assert!(!released);
        assert!(changes.delete && after.shape().is_none(), "the expired lock is deleted");
        assert!(!run(&lock, TTL, 0, |t| extend(t, b"a", TTL)).0);
        assert!(live_holders(&lock, TTL).is_empty());
        assert_eq!(live_holders(&lock, TTL - 1).len(), 1);
    }

    #[test]
    fn only_the_holder_releases_or_extends() {
        let mut f = Fencer::new(0);
        let (_, lock) = grant(&Holders::free(), Want::plain(), b"a", 0, &mut f);
        let (released, _, changes) = run(&lock, 1, 0, |t| release(t, b"b"));
        assert!(!released && changes.is_empty());
        assert!(run(&lock, 1, 0, |t| extend(t, b"b", 5)).2.is_empty());
        assert!(run(&lock, 1, 0, |t| release(t, b"a")).2.delete);
        let (extended, _, changes) = run(&Holders::free(), 1, 0, |t| extend(t, b"a", 5));
        assert!(!extended && changes.is_empty(), "never re-creates");
    }

    #[test]
    fn reentrant_counts_holds_and_keeps_its_token() {
        let mut f = Fencer::new(0);
        let (Grant::Granted(t), lock) = grant(&Holders::free(), Want::reentrant(), b"o", 0, &mut f) else {
            panic!()
        };
        let (again, lock) = grant(&lock, Want::reentrant(), b"o", 5, &mut f);
        assert_eq!(again, Grant::Renewed(t));
        assert_eq!(lock.hold(b"o").map(|h| (h.holds, h.deadline_ms)), Some((2, 5 + TTL)));
        let (x1, lock, _) = run(&lock, 6, 0, |txn| exit(txn, b"o", None));
        assert_eq!(x1, Exit::Left(1));
        assert_eq!(run(&lock, 6, 0, |txn| exit(txn, b"p", None)).0, Exit::NotHeld);
        let (x2, _, changes) = run(&lock, 7, 0, |txn| exit(txn, b"o", None));
        assert_eq!(x2, Exit::Left(0));
        assert!(changes.delete);
    }

    #[test]
    fn kinds_do_not_mix() {
        let mut f = Fencer::new(0);
        let (_, plain) = grant(&Holders::free(), Want::plain(), b"o", 0, &mut f);
        assert_eq!(
            grant(&plain, Want::reentrant(), b"o", 1, &mut f).0,
            Grant::WrongKind { found: Kind::Plain }
        );
        assert_eq!(grant(&plain, Want::read(), b"x", 1, &mut f).0, Grant::WrongKind { found: Kind::Plain });
        assert_eq!(run(&plain, 1, 0, |t| exit(t, b"o", None)).0, Exit::WrongKind { found: Kind::Plain });
        // Even expired: the key still holds a plain lock until it is removed.
        assert_eq!(
            grant(&plain, Want::permit(2), b"x", 5 * TTL, &mut f).0,
            Grant::WrongKind { found: Kind::Plain }
        );
    }

    #[test]
    fn no_barging_past_queued_waiters() {
        let mut f = Fencer::new(0);
        let free = Holders::free();
        let queued =
            run(&free, 0, 0, |t| acquire(t, Want::plain(), &b"new"[..], TTL, Admission::Queued, &mut f)).0;
        assert_eq!(queued, Grant::Busy);
        let (_, held) = grant(&free, Want::plain(), b"a", 0, &mut f);
        let again =
            run(&held, 1, 0, |t| acquire(t, Want::plain(), &b"a"[..], TTL, Admission::Queued, &mut f)).0;
        assert!(matches!(again, Grant::Renewed(_)), "the holder itself still renews");
        let q =
            run(&free, 1, 0, |t| acquire(t, Want::plain(), &b"x"[..], TTL, Admission::Quarantined, &mut f)).0;
        assert_eq!(q, Grant::Quarantined);
    }

    #[test]
    fn exit_with_a_request_id_is_applied_once() {
        let mut f = Fencer::new(0);
        let mut lock = Holders::free();
        for now in 0..3 {
            lock = grant(&lock, Want::reentrant(), b"o", now, &mut f).1;
        }
        let (first, after, _) = run(&lock, 3, 0, |t| exit(t, b"o", Some(b"r1")));
        assert_eq!(first, Exit::Left(2));
        let (retry, _, changes) = run(&after, 4, 0, |t| exit(t, b"o", Some(b"r1")));
        assert_eq!(retry, Exit::Left(2), "the retry is not applied again");
        assert!(changes.is_empty());
        assert_eq!(run(&after, 4, 0, |t| exit(t, b"o", Some(b"r2"))).0, Exit::Left(1), "a new id applies");
        assert_eq!(run(&after, 4, 0, |t| exit(t, b"x", Some(b"r1"))).0, Exit::NotHeld);
    }

    #[test]
    fn hold_count_is_bounded() {
        let full = Holders::single(
            Kind::Reentrant,
            b"o",
            Hold { holds: HOLDS_MAX, ..Hold::new(Mode::Write, 1, 100) },
        );
        let mut f = Fencer::new(0);
        assert_eq!(grant(&full, Want::reentrant(), b"o", 0, &mut f).0, Grant::TooManyHolds);
    }

    #[test]
    fn lock_delay_after_expiry_but_not_after_release() {
        let mut f = Fencer::new(0);
        let (_, lock) = grant(&Holders::free(), Want::plain(), b"a", 0, &mut f);
        let cool = 500;
        // Expired at TTL, but nobody may take it until TTL + 500.
        let (early, _, changes) = run(&lock, TTL + 10, cool, |t| {
            acquire(t, Want::plain(), &b"b"[..], TTL, Admission::Open, &mut f)
        });
        assert_eq!(early, Grant::Busy);
        assert!(changes.is_empty() && !changes.found_expired, "not reaped while cooling");
        let (released, _, changes) = run(&lock, TTL + 10, cool, |t| release(t, b"a"));
        assert!(!released && changes.is_empty(), "the old holder no longer holds it");
        let (late, _, changes) = run(&lock, TTL + cool, cool, |t| {
            acquire(t, Want::plain(), &b"b"[..], TTL, Admission::Open, &mut f)
        });
        assert!(matches!(late, Grant::Granted(_)) && changes.found_expired);
        // A release frees at once, whatever the delay.
        assert!(run(&lock, 1, cool, |t| release(t, b"a")).2.delete);
    }

    #[test]
    fn sequencer_check_matches_only_a_live_grant() {
        let mut f = Fencer::new(0);
        let (Grant::Granted(t), lock) = grant(&Holders::free(), Want::plain(), b"a", 0, &mut f) else {
            panic!()
        };
        assert!(is_current(&lock, t, 1));
        assert!(!is_current(&lock, t - 1, 1), "an older grant");
        assert!(!is_current(&lock, t, TTL), "expired");
        assert!(!is_current(&Holders::free(), t, 1));
    }

    #[test]
    fn fence_raises_only_for_the_holder() {
        let mut f = Fencer::new(0);
        let (_, lock) = grant(&Holders::free(), Want::plain(), b"a", 0, &mut f);
        assert!(!run(&lock, 1, 0, |t| fence(t, b"b", 5_000_000, &mut f)).0);
        assert!(f.next(1) < 5_000_000);
        let (raised, lock2, changes) = run(&lock, 1, 0, |t| fence(t, b"a", 5_000_000, &mut f));
        assert!(raised);
        assert_eq!(lock2.hold(b"a").map(|h| h.fence), Some(5_000_000), "the holder's token follows");
        assert_eq!(changes.puts.first().and_then(|p| p.replaces_fence), lock.hold(b"a").map(|h| h.fence));
        assert!(f.next(1) > 5_000_000);
    }

    #[test]
    fn fence_records_a_lower_quorum_token_and_keeps_the_counter() {
        // A late node: its own grant carried 9000000, the quorum's token is
        // 5000000. After the FENCE the holder is checked by 5000000 there
        // too; the counter stays above 9000000.
        let mut f = Fencer::new(8_999_999);
        let (Grant::Granted(own), lock) = grant(&Holders::free(), Want::plain(), b"a", 0, &mut f) else {
            panic!()
        };
        assert_eq!(own, 9_000_000);
        let (fenced, lowered, changes) = run(&lock, 1, 0, |t| fence(t, b"a", 5_000_000, &mut f));
        assert!(fenced);
        assert_eq!(lowered.hold(b"a").map(|h| h.fence), Some(5_000_000));
        assert_eq!(
            changes.puts.first().and_then(|p| p.replaces_fence),
            Some(own),
            "the old token is replaced"
        );
        assert!(is_current(&lowered, 5_000_000, 1) && !is_current(&lowered, own, 1));
        assert_eq!(f.last(), own, "the counter is never lowered");
        let (Grant::Granted(next), _) = grant(&Holders::free(), Want::plain(), b"b", 1, &mut f) else {
            panic!()
        };
        assert!(next > own, "the next grant is above every token issued: {next}");
        // A retry of the grant answers the recorded token.
        let (retry, _) = grant(&lowered, Want::plain(), b"a", 1, &mut f);
        assert_eq!(retry, Grant::Renewed(5_000_000));
    }

    #[test]
    fn a_grant_rises_above_the_stored_tokens() {
        // A key restored with a token far above this node's counter (a
        // replica promoted, an AOF replayed): the next grant is above it.
        let stored = Holders::single(Kind::Plain, b"old", Hold::new(Mode::Write, 9_000_000, 10));
        let mut f = Fencer::new(0);
        let (g, _) = grant(&stored, Want::plain(), b"new", 20, &mut f);
        assert!(matches!(g, Grant::Granted(t) if t > 9_000_000), "{g:?}");
    }

    #[test]
    fn readers_share_writers_exclude() {
        let mut f = Fencer::new(0);
        let (r1, g) = grant(&Holders::free(), Want::read(), b"r1", 0, &mut f);
        let (r2, g) = grant(&g, Want::read(), b"r2", 1, &mut f);
        let (Grant::Granted(t1), Grant::Granted(t2)) = (r1, r2) else { panic!("{r1:?} {r2:?}") };
        assert!(t2 > t1);
        assert_eq!(grant(&g, Want::write(), b"w", 2, &mut f).0, Grant::Busy);
        let (_, g, _) = run(&g, 3, 0, |t| release(t, b"r1"));
        let (_, _, changes) = run(&g, 3, 0, |t| release(t, b"r2"));
        assert!(changes.delete, "the last holder deletes the key");
        let (w, g) = grant(&Holders::free(), Want::write(), b"w", 4, &mut f);
        assert!(matches!(w, Grant::Granted(t) if t > t2));
        assert_eq!(grant(&g, Want::read(), b"r3", 5, &mut f).0, Grant::Busy);
        assert_eq!(grant(&g, Want::write(), b"w2", 5, &mut f).0, Grant::Busy);
    }

    #[test]
    fn a_token_holds_one_mode_and_retries_are_idempotent() {
        let mut f = Fencer::new(0);
        let (Grant::Granted(t), g) = grant(&Holders::free(), Want::read(), b"a", 0, &mut f) else { panic!() };
        let (again, g2) = grant(&g, Want::read(), b"a", 10, &mut f);
        assert_eq!(again, Grant::Renewed(t));
        assert_eq!(g2.count(), 1);
        assert_eq!(grant(&g, Want::write(), b"a", 10, &mut f).0, Grant::ModeMismatch { held: Mode::Read });
    }

    #[test]
    fn semaphore_bounds_permits_and_fixes_its_limit() {
        let mut f = Fencer::new(0);
        let mut g = Holders::free();
        for (i, owner) in [&b"a"[..], b"b", b"c"].into_iter().enumerate() {
            let (r, next) = grant(&g, Want::permit(3), owner, i as i64, &mut f);
            assert!(matches!(r, Grant::Granted(_)));
            g = next;
        }
        assert_eq!(grant(&g, Want::permit(3), b"d", 5, &mut f).0, Grant::Busy);
        assert_eq!(grant(&g, Want::permit(4), b"d", 5, &mut f).0, Grant::LimitMismatch { limit: 3 });
        // A permit expires alone: at TTL, `a` (granted at 0) is gone.
        let (r, g) = grant(&g, Want::permit(3), b"d", TTL, &mut f);
        assert!(matches!(r, Grant::Granted(_)));
        let mut owners: Vec<Vec<u8>> = g.holders().into_iter().map(|(o, _)| o).collect();
        owners.sort();
        assert_eq!(owners, vec![b"b".to_vec(), b"c".to_vec(), b"d".to_vec()]);
        // Once empty, a semaphore may come back with another size.
        let empty = Holders::free();
        assert!(matches!(grant(&empty, Want::permit(5), b"e", 0, &mut f).0, Grant::Granted(_)));
    }

    #[test]
    fn only_a_live_holder_releases_extends_or_fences_its_own_hold() {
        let mut f = Fencer::new(0);
        let (_, g) = grant(&Holders::free(), Want::permit(2), b"a", 0, &mut f);
        assert!(!run(&g, 1, 0, |t| release(t, b"x")).0);
        assert!(!run(&g, TTL, 0, |t| extend(t, b"a", TTL)).0, "expired");
        let (extended, after, _) = run(&g, 1, 0, |t| extend(t, b"a", 5_000));
        assert!(extended);
        assert_eq!(after.hold(b"a").map(|h| h.deadline_ms), Some(5_001));
        assert!(!run(&g, 1, 0, |t| fence(t, b"x", 9, &mut f)).0);
        let (raised, after, _) = run(&g, 1, 0, |t| fence(t, b"a", 5_000_000, &mut f));
        assert!(raised);
        assert_eq!(after.hold(b"a").map(|h| h.fence), Some(5_000_000));
        assert!(f.next(1) > 5_000_000);
    }

    #[test]
    fn lock_delay_keeps_an_expired_writers_slot() {
        let mut f = Fencer::new(0);
        let (_, g) = grant(&Holders::free(), Want::write(), b"w", 0, &mut f);
        let cool = 500;
        let busy = |g: &Holders, want, owner: &'static [u8], f: &mut Fencer| {
            run(g, TTL + 10, cool, |t| acquire(t, want, owner, TTL, Admission::Open, f)).0
        };
        assert_eq!(busy(&g, Want::read(), b"r", &mut f), Grant::Busy);
        assert_eq!(busy(&g, Want::write(), b"w", &mut f), Grant::Busy, "not even its owner");
        assert!(!run(&g, TTL + 10, cool, |t| release(t, b"w")).0);
        let txn = Txn::new(&g, TTL + 10, cool);
        assert_eq!(txn.next_free_at_ms(), Some(TTL + cool));
        let late =
            run(&g, TTL + cool, cool, |t| acquire(t, Want::read(), &b"r"[..], TTL, Admission::Open, &mut f));
        assert!(matches!(late.0, Grant::Granted(_)));
    }

    #[test]
    fn sequencer_check_sees_every_live_holder() {
        let mut f = Fencer::new(0);
        let (Grant::Granted(a), g) = grant(&Holders::free(), Want::read(), b"a", 0, &mut f) else { panic!() };
        let (Grant::Granted(b), g) = grant(&g, Want::read(), b"b", 1, &mut f) else { panic!() };
        assert!(is_current(&g, a, 2) && is_current(&g, b, 2));
        assert!(!is_current(&g, a, TTL), "a expired at TTL");
        assert!(is_current(&g, b, TTL));
        assert!(!is_current(&g, b + 1, 2));
    }

    #[test]
    fn tokens_stay_unique_among_a_locks_holders() {
        let mut f = Fencer::new(0);
        let (_, g) = grant(&Holders::free(), Want::read(), b"a", 0, &mut f);
        let (Grant::Granted(b), g) = grant(&g, Want::read(), b"b", 1, &mut f) else { panic!() };
        let (raised, g, _) = run(&g, 2, 0, |t| fence(t, b"a", 9_000_000, &mut f));
        assert!(raised);
        let (raised, g, changes) = run(&g, 2, 0, |t| fence(t, b"b", 9_000_000, &mut f));
        assert!(raised, "b holds: the counter is raised");
        assert!(changes.is_empty(), "b keeps its own token, a already carries 9000000");
        assert_eq!(g.hold(b"b").map(|h| h.fence), Some(b));
        assert!(is_current(&g, 9_000_000, 3) && is_current(&g, b, 3));
        assert!(f.next(3) > 9_000_000);
    }

    #[test]
    fn reader_count_is_bounded() {
        let mut f = Fencer::new(0);
        let mut g = Holders::free();
        let owners: Vec<Vec<u8>> = (0..HOLDERS_MAX).map(|i| format!("r{i}").into_bytes()).collect();
        for owner in &owners {
            let owner: &'static [u8] = Box::leak(owner.clone().into_boxed_slice());
            let (r, next) = grant(&g, Want::read(), owner, 0, &mut f);
            assert!(matches!(r, Grant::Granted(_)));
            g = next;
        }
        assert_eq!(grant(&g, Want::read(), b"one-more", 0, &mut f).0, Grant::Busy);
    }

    #[test]
    fn a_stale_lower_bound_costs_one_sweep_then_is_exact() {
        // Two readers; the earlier one extends, so the stored bound (its old
        // deadline) is stale. The sweep at that instant removes nothing and
        // stores the exact bound.
        let mut f = Fencer::new(0);
        let (_, g) = grant(&Holders::free(), Want::read(), b"a", 0, &mut f);
        let (_, g) = grant(&g, Want::read(), b"b", 100, &mut f);
        let (_, g, _) = run(&g, 500, 0, |t| extend(t, b"a", TTL));
        assert_eq!(g.earliest_deadline_ms(), TTL, "still the old, lower bound");
        let (_, g2, changes) =
            run(&g, TTL, 0, |t| acquire(t, Want::read(), &b"c"[..], TTL, Admission::Open, &mut f));
        assert!(!changes.found_expired);
        assert_eq!(g2.earliest_deadline_ms(), 100 + TTL, "b's deadline, now exact");
        assert_eq!(g2.count(), 3);
    }

    #[test]
    fn an_expired_semaphore_comes_back_with_another_size() {
        // Every permit ran out but the key is still stored: the sweep
        // empties it, so the new size counts (no LimitMismatch).
        let mut f = Fencer::new(0);
        let (_, g) = grant(&Holders::free(), Want::permit(3), b"a", 0, &mut f);
        assert_eq!(grant(&g, Want::permit(2), b"b", 1, &mut f).0, Grant::LimitMismatch { limit: 3 });
        let (r, after) = grant(&g, Want::permit(2), b"b", TTL, &mut f);
        assert!(matches!(r, Grant::Granted(_)), "{r:?}");
        assert_eq!(after.shape().map(|s| s.limit), Some(2));
    }

    #[test]
    fn fencing_at_the_holders_own_token_writes_nothing() {
        let mut f = Fencer::new(0);
        let (Grant::Granted(t), lock) = grant(&Holders::free(), Want::plain(), b"a", 0, &mut f) else {
            panic!()
        };
        let (fenced, _, changes) = run(&lock, 1, 0, |txn| fence(txn, b"a", t, &mut f));
        assert!(fenced);
        assert!(changes.is_empty(), "{changes:?}");
    }

    /// Runs LOCK.MACQUIRE's `acquire_all` over `locks` (one key each, in
    /// order) at `now`: the reply, each lock afterwards, each key's changes.
    fn grant_set(
        locks: &[Holders],
        wants: &[Want],
        owner: &'static [u8],
        now: i64,
        admissions: &[Admission],
        f: &mut Fencer,
    ) -> (AllGrant, Vec<Holders>, Vec<Changes<'static>>) {
        let mut txns: Vec<Txn<'_, 'static, Holders>> = locks.iter().map(|l| Txn::new(l, now, 0)).collect();
        let out = acquire_all(&mut txns, wants, owner, TTL, admissions, f);
        let changes: Vec<Changes<'static>> = txns.into_iter().map(|t| t.finish().into_owned()).collect();
        let after = locks.iter().zip(&changes).map(|(l, c)| l.apply(c)).collect();
        (out, after, changes)
    }

    #[test]
    fn a_set_is_granted_whole_with_one_token_above_every_stored_one() {
        // The middle key comes back from a replica with a token far above
        // this node's counter, expired: the set's one token rises above it.
        let stored = Holders::single(Kind::Plain, b"old", Hold::new(Mode::Write, 9_000_000, 10));
        let locks = [Holders::free(), stored, Holders::free()];
        let wants = [Want::plain(), Want::plain(), Want::read()];
        let mut f = Fencer::new(0);
        let (g, after, _) = grant_set(&locks, &wants, b"o", 20, &[Admission::Open; 3], &mut f);
        let AllGrant::Granted(t) = g else { panic!("{g:?}") };
        assert!(t > 9_000_000, "{t}");
        for lock in &after {
            assert_eq!(lock.hold(b"o").map(|h| (h.fence, h.deadline_ms)), Some((t, 20 + TTL)));
        }
        assert_eq!(after[2].hold(b"o").map(|h| h.mode), Some(Mode::Read));
        assert!(f.next(20) > t, "the node's counter is past the set's token");
    }

    #[test]
    fn a_refused_set_writes_nothing_and_names_the_reason_waiting_cannot_cure() {
        let mut f = Fencer::new(0);
        let (_, held) = grant(&Holders::free(), Want::plain(), b"other", 0, &mut f);
        let free = Holders::free();
        let open = [Admission::Open; 3];
        // Busy at 1, another kind at 2: the error wins, whatever its place.
        let (g, _, changes) = grant_set(
            &[free.clone(), held.clone(), held.clone()],
            &[Want::plain(), Want::plain(), Want::read()],
            b"o",
            1,
            &open,
            &mut f,
        );
        assert_eq!(g, AllGrant::Refused { at: 2, why: Grant::WrongKind { found: Kind::Plain } });
        assert!(changes.iter().all(Changes::is_empty), "all or nothing: {changes:?}");
        // Quarantined at 0, busy at 1 and 2: busy, at its first key.
        let admissions = [Admission::Quarantined, Admission::Open, Admission::Open];
        let (g, _, changes) = grant_set(
            &[free.clone(), held.clone(), held.clone()],
            &[Want::plain(); 3],
            b"o",
            1,
            &admissions,
            &mut f,
        );
        assert_eq!(g, AllGrant::Refused { at: 1, why: Grant::Busy });
        assert!(changes.iter().all(Changes::is_empty));
        // Only quarantined: that is the reason.
        let (g, _, _) = grant_set(
            &[free.clone(), free.clone()],
            &[Want::plain(); 2],
            b"o",
            1,
            &[Admission::Open, Admission::Quarantined],
            &mut f,
        );
        assert_eq!(g, AllGrant::Refused { at: 1, why: Grant::Quarantined });
    }

    #[test]
    fn a_set_held_whole_with_one_token_is_renewed_with_it() {
        let mut f = Fencer::new(0);
        let free = [Holders::free(), Holders::free()];
        let wants = [Want::plain(), Want::write()];
        let (AllGrant::Granted(t), held, _) =
            grant_set(&free, &wants, b"o", 0, &[Admission::Open; 2], &mut f)
        else {
            panic!()
        };
        // A retry after a lost reply: the same token, every deadline reset
        // (even with waiters queued: the holder itself renews).
        let (g, after, _) = grant_set(&held, &wants, b"o", 100, &[Admission::Queued; 2], &mut f);
        assert_eq!(g, AllGrant::Renewed(t));
        for lock in &after {
            assert_eq!(lock.hold(b"o").map(|h| (h.fence, h.deadline_ms)), Some((t, 100 + TTL)));
        }
    }

    #[test]
    fn a_set_held_in_part_or_under_two_tokens_is_granted_anew_under_one() {
        let mut f = Fencer::new(0);
        let (Grant::Granted(_), a) = grant(&Holders::free(), Want::plain(), b"o", 0, &mut f) else {
            panic!()
        };
        let (Grant::Granted(tb), b) = grant(&Holders::free(), Want::plain(), b"o", 1, &mut f) else {
            panic!()
        };
        let open = [Admission::Open; 2];
        // Held in part: the held key moves to the new token.
        let (g, after, _) =
            grant_set(&[a.clone(), Holders::free()], &[Want::plain(); 2], b"o", 2, &open, &mut f);
        let AllGrant::Granted(t) = g else { panic!("{g:?}") };
        assert!(t > tb);
        assert!(after.iter().all(|l| l.hold(b"o").map(|h| h.fence) == Some(t)));
        // Held whole but under two tokens: one new token for both.
        let (g, after, _) = grant_set(&[a, b], &[Want::plain(); 2], b"o", 3, &open, &mut f);
        let AllGrant::Granted(t2) = g else { panic!("{g:?}") };
        assert!(t2 > t);
        assert!(after.iter().all(|l| l.hold(b"o").map(|h| (h.fence, h.deadline_ms)) == Some((t2, 3 + TTL))));
    }

    /// A plain lock as a replica or an AOF replay hands it over: a token far
    /// above this node's own counter (2036), held until 1000.
    fn stored() -> Single<'static> {
        Single {
            kind: Kind::Plain,
            owner: b"old",
            hold: Hold::new(Mode::Write, 2_100_000_000_000_001, 1_000),
        }
    }

    #[test]
    fn lock_check_knows_a_one_holder_locks_token() {
        // LOCK.CHECK key fence: 1 while that token holds the lock, else 0.
        let s = stored();
        assert!(is_current(&s, 2_100_000_000_000_001, 999));
        assert!(!is_current(&s, 2_100_000_000_000_002, 999), "another token");
        assert!(!is_current(&s, 2_100_000_000_000_001, 1_000), "expired");
    }

    #[test]
    fn a_grant_over_a_stored_lock_rises_above_its_token() {
        // Safety property 4: a token read back from stored state is never
        // issued again, whatever this node's counter says.
        let s = stored();
        let mut fencer = Fencer::new(0);
        let mut txn = Txn::new(&s, 2_000, 0);
        let grant = acquire(&mut txn, Want::plain(), &b"new"[..], 1_000, Admission::Open, &mut fencer);
        assert_eq!(grant, Grant::Granted(2_100_000_000_000_002));
    }
}
