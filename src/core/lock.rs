//! The lock state machine: pure functions from (current lock, request, now)
//! to (reply, what to store). No Redis, no clock, no globals: the adapter
//! reads the key, calls one of these, and applies the [`Step`].
//!
//! Time is the module clock in milliseconds (see `clock.rs`): a lock is live
//! while `now_ms < deadline_ms`. A lock whose deadline has passed is free,
//! whether or not Redis has deleted its key yet.

use super::fencing::Fencer;

/// Plain locks are taken with ACQUIRE; reentrant ones with ENTER. A key holds
/// one kind, and commands of the other kind answer WRONGTYPE.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Plain,
    Reentrant,
}

impl Kind {
    pub fn letter(self) -> u8 {
        match self {
            Kind::Plain => b'P',
            Kind::Reentrant => b'R',
        }
    }

    pub fn from_letter(letter: u8) -> Option<Kind> {
        match letter {
            b'P' => Some(Kind::Plain),
            b'R' => Some(Kind::Reentrant),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Kind::Plain => "plain",
            Kind::Reentrant => "reentrant",
        }
    }
}

/// One held lock. `owner` borrows either the stored value or the request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lock<'a> {
    pub kind: Kind,
    pub owner: &'a [u8],
    /// The fencing token issued with this grant.
    pub fence: u64,
    /// Module-clock instant at which the lock frees itself.
    pub deadline_ms: i64,
    /// Reentrant hold count; always 1 for plain locks.
    pub holds: u32,
    /// Reentrant only: the request id of the last EXIT applied (empty if
    /// none), so that a retried EXIT with the same id is not applied twice.
    pub exit_id: &'a [u8],
    /// Lock-delay: after the deadline passes without a release, nobody may
    /// take the lock for this long (its holder probably died or paused, and
    /// a resource that cannot check fencing tokens needs the pause). Not
    /// stored: the adapter sets it from `lock.expiry-delay-ms` on read.
    pub cool_down_ms: i64,
}

impl Lock<'_> {
    pub fn is_live(&self, now_ms: i64) -> bool {
        now_ms < self.deadline_ms
    }

    /// When a new grant becomes possible if the holder does not release.
    pub fn frees_at_ms(&self) -> i64 {
        self.deadline_ms.saturating_add(self.cool_down_ms.max(0))
    }

    /// Expired, but still within its lock-delay.
    pub fn is_cooling(&self, now_ms: i64) -> bool {
        !self.is_live(now_ms) && now_ms < self.frees_at_ms()
    }

    pub fn remaining_ms(&self, now_ms: i64) -> i64 {
        self.deadline_ms.saturating_sub(now_ms).max(0)
    }
}

/// Hold counts above this are refused: a client that enters a lock a billion
/// times has a bug, and the count must fit the stored form.
pub const HOLDS_MAX: u32 = 1_000_000;

/// What the adapter must do to the key after a transition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step<'a> {
    /// Nothing changes.
    Keep,
    /// Store this lock (and replicate it).
    Write(Lock<'a>),
    /// Delete the key (and replicate the deletion).
    Delete,
}

/// A transition's result: the reply, the store step, and whether the
/// transition found an expired lock (for the expiry counter).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Outcome<'a, R> {
    pub reply: R,
    pub step: Step<'a>,
    pub found_expired: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Grant {
    /// A new grant with a new fencing token.
    Granted(u64),
    /// The requester already held it: TTL reset, same fencing token.
    Renewed(u64),
    /// Another owner holds it.
    Busy,
    /// Reentrant only: the hold count would pass [`HOLDS_MAX`].
    TooManyHolds,
    /// Free, but the node is in quarantine.
    Quarantined,
}

/// Splits the stored lock into live or expired, so every transition treats an
/// expired lock exactly like a missing one. A lock within its lock-delay is
/// held by nobody but is not expired yet either: it is neither returned nor
/// reaped (see [`cooling`]).
fn live<'a>(current: Option<Lock<'a>>, now_ms: i64) -> (Option<Lock<'a>>, bool) {
    match current {
        Some(lock) if lock.is_live(now_ms) => (Some(lock), false),
        Some(lock) if lock.is_cooling(now_ms) => (None, false),
        Some(_) => (None, true),
        None => (None, false),
    }
}

/// True if the stored lock is within its lock-delay (no grant yet).
fn cooling(current: Option<Lock<'_>>, now_ms: i64) -> bool {
    current.is_some_and(|lock| lock.is_cooling(now_ms))
}

/// The step for a transition that leaves the lock as it found it: an expired
/// lock found on the way is deleted so that it stops using memory.
fn keep_or_reap<'a>(found_expired: bool) -> Step<'a> {
    if found_expired {
        Step::Delete
    } else {
        Step::Keep
    }
}

/// Whether a free lock may be granted to the requester.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admission {
    Open,
    /// Clients are queued for this key: a free lock belongs to the head of
    /// the queue, not to this newcomer (no barging).
    Queued,
    /// The node is in quarantine: no new grants (renewals still work).
    Quarantined,
}

/// LOCK.ACQUIRE (plain) and LOCK.ENTER (reentrant). The caller has checked
/// that a stored lock is of `kind`.
pub fn acquire<'a>(
    current: Option<Lock<'a>>,
    kind: Kind,
    owner: &'a [u8],
    ttl_ms: i64,
    now_ms: i64,
    admission: Admission,
    fencer: &mut Fencer,
) -> Outcome<'a, Grant> {
    let (held, found_expired) = live(current, now_ms);
    let deadline_ms = now_ms.saturating_add(ttl_ms);
    let (reply, step) = match held {
        None if cooling(current, now_ms) => (Grant::Busy, Step::Keep),
        None if admission == Admission::Queued => (Grant::Busy, keep_or_reap(found_expired)),
        None if admission == Admission::Quarantined => (Grant::Quarantined, keep_or_reap(found_expired)),
        None => {
            let fence = fencer.next(now_ms);
            let lock = Lock { kind, owner, fence, deadline_ms, holds: 1, exit_id: b"", cool_down_ms: 0 };
            (Grant::Granted(fence), Step::Write(lock))
        }
        Some(lock) if lock.owner != owner => (Grant::Busy, Step::Keep),
        Some(lock) => match kind {
            // Idempotent: a retry after a lost reply gets the same token.
            Kind::Plain => (Grant::Renewed(lock.fence), Step::Write(Lock { deadline_ms, ..lock })),
            Kind::Reentrant if lock.holds >= HOLDS_MAX => (Grant::TooManyHolds, Step::Keep),
            Kind::Reentrant => {
                let holds = lock.holds + 1;
                (Grant::Renewed(lock.fence), Step::Write(Lock { deadline_ms, holds, ..lock }))
            }
        },
    };
    Outcome { reply, step, found_expired }
}

/// LOCK.RELEASE: frees the lock (all holds) if `owner` holds it.
pub fn release<'a>(current: Option<Lock<'a>>, owner: &[u8], now_ms: i64) -> Outcome<'a, bool> {
    let (held, found_expired) = live(current, now_ms);
    match held {
        Some(lock) if lock.owner == owner => Outcome { reply: true, step: Step::Delete, found_expired },
        _ => Outcome { reply: false, step: keep_or_reap(found_expired), found_expired },
    }
}

/// LOCK.EXTEND: the TTL becomes `ttl_ms` from now if `owner` holds the lock.
/// Never re-creates a lock that is gone.
pub fn extend<'a>(current: Option<Lock<'a>>, owner: &[u8], ttl_ms: i64, now_ms: i64) -> Outcome<'a, bool> {
    let (held, found_expired) = live(current, now_ms);
    match held {
        Some(lock) if lock.owner == owner => {
            let deadline_ms = now_ms.saturating_add(ttl_ms);
            Outcome { reply: true, step: Step::Write(Lock { deadline_ms, ..lock }), found_expired }
        }
        _ => Outcome { reply: false, step: keep_or_reap(found_expired), found_expired },
    }
}

/// LOCK.EXIT: drops one hold; `Some(remaining)` (0 = freed) or `None` when
/// `owner` does not hold it. With a `request_id`, a retry of an EXIT that
/// was already applied (its reply was lost) changes nothing and answers the
/// same count again.
pub fn exit<'a>(
    current: Option<Lock<'a>>,
    owner: &[u8],
    request_id: Option<&'a [u8]>,
    now_ms: i64,
) -> Outcome<'a, Option<u32>> {
    let (held, found_expired) = live(current, now_ms);
    match held {
        Some(lock) if lock.owner == owner && request_id.is_some_and(|id| id == lock.exit_id) => {
            Outcome { reply: Some(lock.holds), step: Step::Keep, found_expired }
        }
        Some(lock) if lock.owner == owner => {
            let holds = lock.holds.saturating_sub(1);
            let exit_id = request_id.unwrap_or(b"");
            let step = if holds == 0 { Step::Delete } else { Step::Write(Lock { holds, exit_id, ..lock }) };
            Outcome { reply: Some(holds), step, found_expired }
        }
        _ => Outcome { reply: None, step: keep_or_reap(found_expired), found_expired },
    }
}

/// LOCK.FENCE: if `owner` holds the lock, raise the node's counter to at
/// least `floor`, and the holder's own fencing token to `floor` if it is
/// lower. The quorum client sends the quorum's token T as the floor; after
/// it, this node answers T to the holder's retry and to LOCK.CHECK, like
/// every other node of the quorum.
pub fn fence<'a>(
    current: Option<Lock<'a>>,
    owner: &[u8],
    floor: u64,
    now_ms: i64,
    fencer: &mut Fencer,
) -> Outcome<'a, bool> {
    let (held, found_expired) = live(current, now_ms);
    match held {
        Some(lock) if lock.owner == owner => {
            fencer.raise_to(floor);
            let step = if floor > lock.fence {
                Step::Write(Lock { fence: floor, ..lock })
            } else {
                keep_or_reap(found_expired)
            };
            Outcome { reply: true, step, found_expired }
        }
        _ => Outcome { reply: false, step: keep_or_reap(found_expired), found_expired },
    }
}

/// LOCK.INFO: the live lock, if any. Read-only: an expired lock is reported
/// as absent and left for a write or Redis' expiry to remove.
pub fn inspect(current: Option<Lock<'_>>, now_ms: i64) -> Option<Lock<'_>> {
    current.filter(|lock| lock.is_live(now_ms))
}

/// LOCK.CHECK (Chubby's CheckSequencer): is `fence` the current, live grant
/// of this lock? A resource server asks this before acting for a client.
pub fn is_current(current: Option<Lock<'_>>, fence: u64, now_ms: i64) -> bool {
    inspect(current, now_ms).is_some_and(|lock| lock.fence == fence)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TTL: i64 = 1_000;

    fn grant<'a>(cur: Option<Lock<'a>>, owner: &'a [u8], now: i64, f: &mut Fencer) -> Outcome<'a, Grant> {
        acquire(cur, Kind::Plain, owner, TTL, now, Admission::Open, f)
    }

    fn stored(o: &Outcome<'_, impl Copy>) -> Option<Lock<'static>> {
        match o.step {
            Step::Write(l) => Some(Lock {
                owner: Box::leak(l.owner.to_vec().into_boxed_slice()),
                exit_id: Box::leak(l.exit_id.to_vec().into_boxed_slice()),
                ..l
            }),
            _ => None,
        }
    }

    #[test]
    fn grant_then_busy_then_idempotent_retry() {
        let mut f = Fencer::new(0);
        let a = grant(None, b"a", 10, &mut f);
        let Grant::Granted(t) = a.reply else { panic!("{a:?}") };
        let lock = stored(&a);
        assert_eq!(grant(lock, b"b", 20, &mut f).reply, Grant::Busy);
        let again = grant(lock, b"a", 30, &mut f);
        assert_eq!(again.reply, Grant::Renewed(t));
        assert_eq!(stored(&again).map(|l| l.deadline_ms), Some(30 + TTL));
    }

    #[test]
    fn expired_lock_is_free_and_reported() {
        let mut f = Fencer::new(0);
        let a = grant(None, b"a", 0, &mut f);
        let lock = stored(&a);
        let b = grant(lock, b"b", TTL, &mut f);
        assert!(matches!(b.reply, Grant::Granted(_)));
        assert!(b.found_expired);
        assert!(!release(lock, b"a", TTL).reply);
        assert_eq!(release(lock, b"a", TTL).step, Step::Delete, "expired lock is reaped");
        assert!(!extend(lock, b"a", TTL, TTL).reply);
        assert_eq!(inspect(lock, TTL), None);
        assert_eq!(inspect(lock, TTL - 1), lock);
    }

    #[test]
    fn only_the_holder_releases_or_extends() {
        let mut f = Fencer::new(0);
        let lock = stored(&grant(None, b"a", 0, &mut f));
        assert_eq!(release(lock, b"b", 1), Outcome { reply: false, step: Step::Keep, found_expired: false });
        assert_eq!(extend(lock, b"b", 5, 1).step, Step::Keep);
        assert_eq!(release(lock, b"a", 1).step, Step::Delete);
        assert_eq!(extend(None, b"a", 5, 1).step, Step::Keep, "never re-creates");
    }

    #[test]
    fn reentrant_counts_holds_and_keeps_its_token() {
        let mut f = Fencer::new(0);
        let e1 = acquire(None, Kind::Reentrant, b"o", TTL, 0, Admission::Open, &mut f);
        let Grant::Granted(t) = e1.reply else { panic!() };
        let e2 = acquire(stored(&e1), Kind::Reentrant, b"o", TTL, 5, Admission::Open, &mut f);
        assert_eq!(e2.reply, Grant::Renewed(t));
        assert_eq!(stored(&e2).map(|l| (l.holds, l.deadline_ms)), Some((2, 5 + TTL)));
        let x1 = exit(stored(&e2), b"o", None, 6);
        assert_eq!(x1.reply, Some(1));
        assert_eq!(exit(stored(&x1), b"p", None, 6).reply, None);
        let x2 = exit(stored(&x1), b"o", None, 7);
        assert_eq!((x2.reply, x2.step), (Some(0), Step::Delete));
    }

    #[test]
    fn no_barging_past_queued_waiters() {
        let mut f = Fencer::new(0);
        assert_eq!(acquire(None, Kind::Plain, b"new", TTL, 0, Admission::Queued, &mut f).reply, Grant::Busy);
        let held = stored(&grant(None, b"a", 0, &mut f));
        let again = acquire(held, Kind::Plain, b"a", TTL, 1, Admission::Queued, &mut f);
        assert!(matches!(again.reply, Grant::Renewed(_)), "the holder itself still renews");
    }

    #[test]
    fn exit_with_a_request_id_is_applied_once() {
        let mut f = Fencer::new(0);
        let mut lock = stored(&acquire(None, Kind::Reentrant, b"o", TTL, 0, Admission::Open, &mut f));
        for _ in 0..2 {
            lock = stored(&acquire(lock, Kind::Reentrant, b"o", TTL, 1, Admission::Open, &mut f));
        }
        let first = exit(lock, b"o", Some(b"r1"), 2);
        assert_eq!(first.reply, Some(2));
        let after = stored(&first);
        let retry = exit(after, b"o", Some(b"r1"), 3);
        assert_eq!((retry.reply, retry.step), (Some(2), Step::Keep), "the retry is not applied again");
        let next = exit(after, b"o", Some(b"r2"), 3);
        assert_eq!(next.reply, Some(1), "a new request id is applied");
        assert_eq!(exit(after, b"x", Some(b"r1"), 3).reply, None, "only the owner's own id counts");
    }

    #[test]
    fn hold_count_is_bounded() {
        let mut f = Fencer::new(0);
        let full = Lock {
            kind: Kind::Reentrant,
            owner: b"o",
            fence: 1,
            deadline_ms: 100,
            holds: HOLDS_MAX,
            exit_id: b"",
            cool_down_ms: 0,
        };
        assert_eq!(
            acquire(Some(full), Kind::Reentrant, b"o", TTL, 0, Admission::Open, &mut f).reply,
            Grant::TooManyHolds
        );
    }

    #[test]
    fn lock_delay_after_expiry_but_not_after_release() {
        let mut f = Fencer::new(0);
        let delayed = |l: Option<Lock<'static>>| l.map(|l| Lock { cool_down_ms: 500, ..l });
        let lock = delayed(stored(&grant(None, b"a", 0, &mut f)));
        // Expired at TTL, but nobody may take it until TTL + 500.
        let early = grant(lock, b"b", TTL + 10, &mut f);
        assert_eq!((early.reply, early.step, early.found_expired), (Grant::Busy, Step::Keep, false));
        assert!(!release(lock, b"a", TTL + 10).reply, "the old holder no longer holds it");
        assert_eq!(release(lock, b"a", TTL + 10).step, Step::Keep, "not reaped while cooling");
        assert_eq!(inspect(lock, TTL + 10), None);
        let late = grant(lock, b"b", TTL + 500, &mut f);
        assert!(matches!(late.reply, Grant::Granted(_)) && late.found_expired);
        // A release frees at once, whatever the delay.
        let held = delayed(stored(&grant(None, b"a", 0, &mut f)));
        assert_eq!(release(held, b"a", 1).step, Step::Delete);
    }

    #[test]
    fn sequencer_check_matches_only_the_live_grant() {
        let mut f = Fencer::new(0);
        let out = grant(None, b"a", 0, &mut f);
        let Grant::Granted(t) = out.reply else { panic!() };
        let lock = stored(&out);
        assert!(is_current(lock, t, 1));
        assert!(!is_current(lock, t - 1, 1), "an older grant");
        assert!(!is_current(lock, t, TTL), "expired");
        assert!(!is_current(None, t, 1));
    }

    #[test]
    fn fence_raises_only_for_the_holder() {
        let mut f = Fencer::new(0);
        let lock = stored(&grant(None, b"a", 0, &mut f));
        assert!(!fence(lock, b"b", 5_000_000, 1, &mut f).reply);
        assert!(f.next(1) < 5_000_000);
        let raised = fence(lock, b"a", 5_000_000, 1, &mut f);
        assert!(raised.reply);
        assert_eq!(stored(&raised).map(|l| l.fence), Some(5_000_000), "the holder's token follows");
        assert!(f.next(1) > 5_000_000);
        let lower = fence(stored(&raised), b"a", 7, 1, &mut f);
        assert_eq!((lower.reply, lower.step), (true, Step::Keep), "a lower floor changes nothing");
    }
}
