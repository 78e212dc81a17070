//! Locks with several holders at once: shared/exclusive (read-write) locks
//! and semaphores with expiring permits. Pure, like `lock.rs`: the adapter
//! reads the key, calls one transition, and applies the [`Change`].
//!
//! A group is a list of holders, each with its own mode, fencing token and
//! deadline, so a crashed reader or permit holder expires alone. The two
//! kinds differ only in which modes they admit and in the compatibility rule
//! ([`admits`]):
//! - shared (`S`): any number of `read` holders, or one `write` holder;
//! - semaphore (`M`): up to `limit` `permit` holders; the limit is fixed
//!   while the semaphore exists (a request with another limit is refused).
//!
//! A holder whose deadline passed is gone, except within the lock-delay
//! (`cool_down_ms`): then it still occupies its slot (a writer still keeps
//! readers out) but can no longer release, extend or fence. This is the
//! same rule as for single-holder locks (see `lock.rs`).

use super::fencing::Fencer;
use super::lock::Admission;

/// Most holders one group may have: the readers of a shared lock, and the
/// largest semaphore limit. Every write re-encodes the whole list, so the
/// bound keeps a grant's cost and the value's size (up to ~300 KB) in check.
pub const HOLDERS_MAX: u32 = 1000;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GroupKind {
    Shared,
    Semaphore,
}

impl GroupKind {
    pub fn letter(self) -> u8 {
        match self {
            GroupKind::Shared => b'S',
            GroupKind::Semaphore => b'M',
        }
    }

    pub fn from_letter(letter: u8) -> Option<GroupKind> {
        match letter {
            b'S' => Some(GroupKind::Shared),
            b'M' => Some(GroupKind::Semaphore),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            GroupKind::Shared => "shared",
            GroupKind::Semaphore => "semaphore",
        }
    }

    /// Whether a holder of this kind may have `mode`.
    pub fn allows(self, mode: Mode) -> bool {
        matches!(
            (self, mode),
            (GroupKind::Shared, Mode::Read | Mode::Write) | (GroupKind::Semaphore, Mode::Permit)
        )
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Read,
    Write,
    Permit,
}

impl Mode {
    pub fn letter(self) -> u8 {
        match self {
            Mode::Read => b'r',
            Mode::Write => b'w',
            Mode::Permit => b'p',
        }
    }

    pub fn from_letter(letter: u8) -> Option<Mode> {
        match letter {
            b'r' => Some(Mode::Read),
            b'w' => Some(Mode::Write),
            b'p' => Some(Mode::Permit),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Mode::Read => "read",
            Mode::Write => "write",
            Mode::Permit => "permit",
        }
    }
}

/// What a grant request asks for: the kind and mode, and for a semaphore its
/// limit (0 for shared locks).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Want {
    pub kind: GroupKind,
    pub mode: Mode,
    pub limit: u32,
}

impl Want {
    pub fn read() -> Want {
        Want { kind: GroupKind::Shared, mode: Mode::Read, limit: 0 }
    }

    pub fn write() -> Want {
        Want { kind: GroupKind::Shared, mode: Mode::Write, limit: 0 }
    }

    pub fn permit(limit: u32) -> Want {
        Want { kind: GroupKind::Semaphore, mode: Mode::Permit, limit }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Holder<'a> {
    pub mode: Mode,
    pub owner: &'a [u8],
    pub fence: u64,
    pub deadline_ms: i64,
}

impl Holder<'_> {
    pub fn is_live(&self, now_ms: i64) -> bool {
        now_ms < self.deadline_ms
    }

    pub fn remaining_ms(&self, now_ms: i64) -> i64 {
        self.deadline_ms.saturating_sub(now_ms).max(0)
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Group<'a> {
    pub kind: GroupKind,
    /// Semaphore: the number of permits. Shared locks: 0.
    pub limit: u32,
    /// In grant order. Never empty in a stored group (an empty one is
    /// deleted).
    pub holders: Vec<Holder<'a>>,
    /// Lock-delay; not stored, set by the adapter from configuration.
    pub cool_down_ms: i64,
}

impl<'a> Group<'a> {
    fn frees_at_ms(&self, holder: &Holder<'_>) -> i64 {
        holder.deadline_ms.saturating_add(self.cool_down_ms.max(0))
    }

    /// The next instant after `now_ms` at which a holder leaves by itself
    /// (expiry, or the end of its lock-delay): when a waiter may next be
    /// served.
    pub fn next_free_after(&self, now_ms: i64) -> Option<i64> {
        self.holders.iter().map(|h| self.frees_at_ms(h)).filter(|&at| at > now_ms).min()
    }

    /// The latest deadline: the key must outlive it (plus the backstop).
    pub fn last_deadline_ms(&self) -> i64 {
        self.holders.iter().map(|h| h.deadline_ms).max().unwrap_or(0)
    }

    /// The live holders (what LOCK.INFO shows).
    pub fn live(&self, now_ms: i64) -> impl Iterator<Item = &Holder<'a>> {
        self.holders.iter().filter(move |h| h.is_live(now_ms))
    }

    fn live_position(&self, owner: &[u8], now_ms: i64) -> Option<usize> {
        self.holders.iter().position(|h| h.owner == owner && h.is_live(now_ms))
    }

    /// Drops holders past their deadline and lock-delay; true if any was.
    fn drop_gone(&mut self, now_ms: i64) -> bool {
        let before = self.holders.len();
        let cool_down_ms = self.cool_down_ms;
        self.holders.retain(|h| now_ms < h.deadline_ms.saturating_add(cool_down_ms.max(0)));
        self.holders.len() != before
    }
}

/// What the adapter must do to the key after a transition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change<'a> {
    Keep,
    Write(Group<'a>),
    Delete,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome<'a, R> {
    pub reply: R,
    pub change: Change<'a>,
    /// The transition found (and removed) holders whose time had passed.
    pub found_expired: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GroupGrant {
    Granted(u64),
    /// The requester already held it in this mode: TTL reset, same token.
    Renewed(u64),
    /// Not grantable now (incompatible holders, no free permit, queued
    /// waiters ahead).
    Busy,
    Quarantined,
    /// A semaphore exists with another limit.
    LimitMismatch {
        limit: u32,
    },
    /// The requester holds the lock in another mode (a reader asking to
    /// write, or the reverse): a token holds one mode at a time.
    ModeMismatch {
        held: Mode,
    },
}

/// The stored group with expired holders removed; `found_expired` says
/// whether any were.
fn tidy<'a>(current: Option<Group<'a>>, now_ms: i64) -> (Option<Group<'a>>, bool) {
    match current {
        Some(mut group) => {
            let found_expired = group.drop_gone(now_ms);
            (Some(group), found_expired)
        }
        None => (None, false),
    }
}

/// The change that stores `group` as it now is: deleted when empty, written
/// when `changed`.
fn settle_change(group: Option<Group<'_>>, changed: bool) -> Change<'_> {
    match group {
        Some(g) if g.holders.is_empty() => Change::Delete,
        Some(g) if changed => Change::Write(g),
        _ => Change::Keep,
    }
}

/// Whether `mode` can join `group`'s current holders (live or cooling).
pub fn admits(group: Option<&Group<'_>>, mode: Mode, limit: u32) -> bool {
    let holders = group.map_or(&[][..], |g| &g.holders[..]);
    let count = u32::try_from(holders.len()).unwrap_or(u32::MAX);
    match mode {
        Mode::Write => holders.is_empty(),
        Mode::Read => count < HOLDERS_MAX && holders.iter().all(|h| h.mode == Mode::Read),
        Mode::Permit => count < limit.min(HOLDERS_MAX),
    }
}

/// LOCK.SHARED, LOCK.EXCLUSIVE, LOCK.SEMAPHORE. The caller has checked that
/// a stored group is of `want.kind`.
pub fn acquire<'a>(
    current: Option<Group<'a>>,
    want: Want,
    owner: &'a [u8],
    ttl_ms: i64,
    now_ms: i64,
    admission: Admission,
    fencer: &mut Fencer,
) -> Outcome<'a, GroupGrant> {
    let (mut group, found_expired) = tidy(current, now_ms);
    let deadline_ms = now_ms.saturating_add(ttl_ms);
    let refuse = |reply, group| Outcome { reply, change: settle_change(group, found_expired), found_expired };
    if let Some(g) = &group {
        if want.kind == GroupKind::Semaphore && g.limit != want.limit && !g.holders.is_empty() {
            return refuse(GroupGrant::LimitMismatch { limit: g.limit }, group);
        }
    }
    if let Some(g) = group.as_mut() {
        if let Some(at) = g.live_position(owner, now_ms) {
            let Some(held) = g.holders.get_mut(at) else { return refuse(GroupGrant::Busy, group) };
            if held.mode != want.mode {
                let held = held.mode;
                return refuse(GroupGrant::ModeMismatch { held }, group);
            }
            // Idempotent: a retry after a lost reply gets the same token.
            held.deadline_ms = deadline_ms;
            let fence = held.fence;
            return Outcome {
                reply: GroupGrant::Renewed(fence),
                change: settle_change(group, true),
                found_expired,
            };
        }
        if g.holders.iter().any(|h| h.owner == owner) {
            // Its own earlier grant is within the lock-delay: like every
            // other requester, it waits for the delay to pass.
            return refuse(GroupGrant::Busy, group);
        }
    }
    if !admits(group.as_ref(), want.mode, want.limit) {
        return refuse(GroupGrant::Busy, group);
    }
    match admission {
        Admission::Queued => return refuse(GroupGrant::Busy, group),
        Admission::Quarantined => return refuse(GroupGrant::Quarantined, group),
        Admission::Open => {}
    }
    let fence = fencer.next(now_ms);
    let holder = Holder { mode: want.mode, owner, fence, deadline_ms };
    let mut g =
        group.unwrap_or(Group { kind: want.kind, limit: want.limit, holders: Vec::new(), cool_down_ms: 0 });
    g.holders.push(holder);
    Outcome { reply: GroupGrant::Granted(fence), change: Change::Write(g), found_expired }
}

/// LOCK.RELEASE of one holder; the group is deleted with its last holder.
pub fn release<'a>(current: Option<Group<'a>>, owner: &[u8], now_ms: i64) -> Outcome<'a, bool> {
    let (mut group, found_expired) = tidy(current, now_ms);
    let at = group.as_ref().and_then(|g| g.live_position(owner, now_ms));
    if let (Some(g), Some(at)) = (group.as_mut(), at) {
        g.holders.remove(at);
    }
    Outcome {
        reply: at.is_some(),
        change: settle_change(group, found_expired || at.is_some()),
        found_expired,
    }
}

/// LOCK.EXTEND of one holder. Never re-creates a holder that is gone.
pub fn extend<'a>(current: Option<Group<'a>>, owner: &[u8], ttl_ms: i64, now_ms: i64) -> Outcome<'a, bool> {
    let (mut group, found_expired) = tidy(current, now_ms);
    let at = group.as_ref().and_then(|g| g.live_position(owner, now_ms));
    let held = at.and_then(|at| group.as_mut().and_then(|g| g.holders.get_mut(at)));
    let extended = match held {
        Some(holder) => {
            holder.deadline_ms = now_ms.saturating_add(ttl_ms);
            true
        }
        None => false,
    };
    Outcome { reply: extended, change: settle_change(group, found_expired || extended), found_expired }
}

/// LOCK.FENCE: if `owner` holds the group, raise the counter to `floor`,
/// and its own token to `floor` if lower (see `lock::fence`).
pub fn fence<'a>(
    current: Option<Group<'a>>,
    owner: &[u8],
    floor: u64,
    now_ms: i64,
    fencer: &mut Fencer,
) -> Outcome<'a, bool> {
    let (mut group, found_expired) = tidy(current, now_ms);
    let at = group.as_ref().and_then(|g| g.live_position(owner, now_ms));
    let held = at.and_then(|at| group.as_mut().and_then(|g| g.holders.get_mut(at)));
    let (holds, raised) = match held {
        Some(holder) => {
            fencer.raise_to(floor);
            let raised = floor > holder.fence;
            holder.fence = holder.fence.max(floor);
            (true, raised)
        }
        None => (false, false),
    };
    Outcome { reply: holds, change: settle_change(group, found_expired || raised), found_expired }
}

/// LOCK.CHECK: is `fence` a current, live grant of this group?
pub fn is_current(current: Option<&Group<'_>>, fence: u64, now_ms: i64) -> bool {
    current.is_some_and(|g| g.live(now_ms).any(|h| h.fence == fence))
}

#[cfg(test)]
mod tests {
    use super::*;

    const TTL: i64 = 1_000;

    fn leak(g: &Group<'_>) -> Group<'static> {
        Group {
            holders: g
                .holders
                .iter()
                .map(|h| Holder { owner: Box::leak(h.owner.to_vec().into_boxed_slice()), ..*h })
                .collect(),
            ..*g
        }
    }

    fn stored<R>(o: &Outcome<'_, R>) -> Option<Group<'static>> {
        match &o.change {
            Change::Write(g) => Some(leak(g)),
            _ => None,
        }
    }

    fn take(
        cur: Option<Group<'static>>,
        want: Want,
        owner: &'static [u8],
        now: i64,
        f: &mut Fencer,
    ) -> (GroupGrant, Option<Group<'static>>) {
        let out = acquire(cur.clone(), want, owner, TTL, now, Admission::Open, f);
        let next = match &out.change {
            Change::Write(g) => Some(leak(g)),
            Change::Delete => None,
            Change::Keep => cur,
        };
        (out.reply, next)
    }

    #[test]
    fn readers_share_writers_exclude() {
        let mut f = Fencer::new(0);
        let (r1, g) = take(None, Want::read(), b"r1", 0, &mut f);
        let (r2, g) = take(g, Want::read(), b"r2", 1, &mut f);
        let (GroupGrant::Granted(t1), GroupGrant::Granted(t2)) = (r1, r2) else { panic!("{r1:?} {r2:?}") };
        assert!(t2 > t1);
        let (w, g) = take(g, Want::write(), b"w", 2, &mut f);
        assert_eq!(w, GroupGrant::Busy);
        let g = stored(&release(g, b"r1", 3));
        let after = release(g.clone(), b"r2", 3);
        assert_eq!(after.change, Change::Delete, "the last holder deletes the key");
        let (w, g) = take(None, Want::write(), b"w", 4, &mut f);
        assert!(matches!(w, GroupGrant::Granted(t) if t > t2));
        assert_eq!(take(g.clone(), Want::read(), b"r3", 5, &mut f).0, GroupGrant::Busy);
        assert_eq!(take(g, Want::write(), b"w2", 5, &mut f).0, GroupGrant::Busy);
    }

    #[test]
    fn a_token_holds_one_mode_and_retries_are_idempotent() {
        let mut f = Fencer::new(0);
        let (GroupGrant::Granted(t), g) = take(None, Want::read(), b"a", 0, &mut f) else { panic!() };
        let (again, g2) = take(g.clone(), Want::read(), b"a", 10, &mut f);
        assert_eq!(again, GroupGrant::Renewed(t));
        assert_eq!(g2.map(|g| g.holders.len()), Some(1));
        assert_eq!(take(g, Want::write(), b"a", 10, &mut f).0, GroupGrant::ModeMismatch { held: Mode::Read });
    }

    #[test]
    fn semaphore_bounds_permits_and_fixes_its_limit() {
        let mut f = Fencer::new(0);
        let mut g = None;
        for (i, owner) in [&b"a"[..], b"b", b"c"].into_iter().enumerate() {
            let (r, next) = take(g, Want::permit(3), owner, i as i64, &mut f);
            assert!(matches!(r, GroupGrant::Granted(_)));
            g = next;
        }
        assert_eq!(take(g.clone(), Want::permit(3), b"d", 5, &mut f).0, GroupGrant::Busy);
        assert_eq!(
            take(g.clone(), Want::permit(4), b"d", 5, &mut f).0,
            GroupGrant::LimitMismatch { limit: 3 }
        );
        // A permit expires alone: at TTL + 1, `a` (granted at 0) is gone.
        let (r, g) = take(g, Want::permit(3), b"d", TTL, &mut f);
        assert!(matches!(r, GroupGrant::Granted(_)));
        let owners: Vec<&[u8]> = g.as_ref().map(|g| g.holders.iter().map(|h| h.owner).collect()).unwrap();
        assert_eq!(owners, vec![&b"b"[..], b"c", b"d"]);
    }

    #[test]
    fn only_a_live_holder_releases_extends_or_fences() {
        let mut f = Fencer::new(0);
        let (_, g) = take(None, Want::permit(2), b"a", 0, &mut f);
        assert!(!release(g.clone(), b"x", 1).reply);
        assert_eq!(release(g.clone(), b"x", 1).change, Change::Keep);
        assert!(!extend(g.clone(), b"a", TTL, TTL).reply, "expired");
        assert!(extend(g.clone(), b"a", 5_000, 1).reply);
        assert_eq!(stored(&extend(g.clone(), b"a", 5_000, 1)).map(|g| g.holders[0].deadline_ms), Some(5_001));
        assert!(!fence(g.clone(), b"x", 9, 1, &mut f).reply);
        let raised = fence(g, b"a", 5_000_000, 1, &mut f);
        assert!(raised.reply);
        assert_eq!(stored(&raised).map(|g| g.holders[0].fence), Some(5_000_000));
        assert!(f.next(1) > 5_000_000);
        assert!(!extend(None, b"a", 5, 1).reply, "never re-creates");
    }

    #[test]
    fn queued_waiters_and_quarantine_stop_new_grants_but_not_renewals() {
        let mut f = Fencer::new(0);
        let (_, g) = take(None, Want::read(), b"a", 0, &mut f);
        let queued = acquire(g.clone(), Want::read(), b"b", TTL, 1, Admission::Queued, &mut f);
        assert_eq!(queued.reply, GroupGrant::Busy, "no barging past a queued writer");
        let q = acquire(g.clone(), Want::read(), b"b", TTL, 1, Admission::Quarantined, &mut f);
        assert_eq!(q.reply, GroupGrant::Quarantined);
        let renew = acquire(g, Want::read(), b"a", TTL, 1, Admission::Quarantined, &mut f);
        assert!(matches!(renew.reply, GroupGrant::Renewed(_)));
    }

    #[test]
    fn lock_delay_keeps_an_expired_writers_slot() {
        let mut f = Fencer::new(0);
        let (_, g) = take(None, Want::write(), b"w", 0, &mut f);
        let g = g.map(|g| Group { cool_down_ms: 500, ..g });
        assert_eq!(take(g.clone(), Want::read(), b"r", TTL + 10, &mut f).0, GroupGrant::Busy);
        assert_eq!(
            take(g.clone(), Want::write(), b"w", TTL + 10, &mut f).0,
            GroupGrant::Busy,
            "not even its owner"
        );
        assert!(!release(g.clone(), b"w", TTL + 10).reply);
        assert_eq!(g.as_ref().and_then(|g| g.next_free_after(TTL + 10)), Some(TTL + 500));
        assert!(matches!(take(g, Want::read(), b"r", TTL + 500, &mut f).0, GroupGrant::Granted(_)));
    }

    #[test]
    fn sequencer_check_sees_every_live_holder() {
        let mut f = Fencer::new(0);
        let (GroupGrant::Granted(a), g) = take(None, Want::read(), b"a", 0, &mut f) else { panic!() };
        let (GroupGrant::Granted(b), g) = take(g, Want::read(), b"b", 1, &mut f) else { panic!() };
        assert!(is_current(g.as_ref(), a, 2) && is_current(g.as_ref(), b, 2));
        assert!(!is_current(g.as_ref(), a, TTL), "a expired at TTL");
        assert!(is_current(g.as_ref(), b, TTL));
        assert!(!is_current(g.as_ref(), b + 1, 2));
    }

    proptest::proptest! {
        /// Whatever the sequence of grants, releases, extensions and time
        /// passing: a writer is alone, a semaphore never has more live
        /// holders than permits, each owner appears once, and every new
        /// grant's token is above all earlier ones.
        #[test]
        fn invariants_hold_under_random_operations(
            semaphore: bool,
            cool_down_ms in 0i64..300,
            ops in proptest::collection::vec((0u8..4, 0usize..5, 0i64..700), 1..120),
        ) {
            const OWNERS: [&[u8]; 5] = [b"a", b"b", b"c", b"d", b"e"];
            let limit = 3;
            let mut f = Fencer::new(0);
            let mut g: Option<Group<'static>> = None;
            let (mut now, mut last_grant) = (0i64, 0u64);
            for (op, who, advance) in ops {
                now += advance;
                let owner = OWNERS[who];
                let current = g.clone().map(|g| Group { cool_down_ms, ..g });
                let change = match op {
                    0 | 1 => {
                        let want = match (semaphore, op) {
                            (true, _) => Want::permit(limit),
                            (false, 0) => Want::read(),
                            _ => Want::write(),
                        };
                        let out = acquire(current, want, owner, TTL, now, Admission::Open, &mut f);
                        if let GroupGrant::Granted(t) = out.reply {
                            proptest::prop_assert!(t > last_grant);
                            last_grant = t;
                        }
                        out.change
                    }
                    2 => {
                        let out = release(current, owner, now);
                        if let Change::Write(g) = &out.change {
                            proptest::prop_assert!(g.live(now).all(|h| h.owner != owner));
                        }
                        out.change
                    }
                    _ => extend(current, owner, TTL, now).change,
                };
                g = match change {
                    Change::Write(next) => Some(leak(&next)),
                    Change::Delete => None,
                    Change::Keep => g,
                };
                if let Some(g) = &g {
                    let held: Vec<&Holder<'_>> = g.holders.iter().collect();
                    let writers = held.iter().filter(|h| h.mode == Mode::Write).count();
                    proptest::prop_assert!(writers == 0 || held.len() == 1, "{held:?}");
                    if semaphore {
                        proptest::prop_assert!(held.len() <= limit as usize);
                    }
                    let mut owners: Vec<&[u8]> = held.iter().map(|h| h.owner).collect();
                    owners.sort();
                    owners.dedup();
                    proptest::prop_assert_eq!(owners.len(), held.len());
                    proptest::prop_assert!(!g.holders.is_empty(), "empty groups are deleted");
                }
            }
        }
    }

    #[test]
    fn reader_count_is_bounded() {
        let holders = (0..HOLDERS_MAX)
            .map(|i| Holder { mode: Mode::Read, owner: b"x", fence: u64::from(i), deadline_ms: TTL })
            .collect();
        let full = Group { kind: GroupKind::Shared, limit: 0, holders, cool_down_ms: 0 };
        assert!(!admits(Some(&full), Mode::Read, 0));
        assert!(!admits(None, Mode::Permit, 0));
        assert!(admits(None, Mode::Permit, 1));
    }
}
