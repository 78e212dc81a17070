//! A transaction over one stored lock: the state machine (`lock.rs`) reads
//! the stored holders through [`Stored`] and records what it changes here;
//! the adapter then writes the [`Changes`] once.
//!
//! Why a transaction rather than "decode, change, encode": a lock with a
//! thousand readers must not be decoded and rewritten whole for each call.
//! [`Stored`] answers the few questions a decision needs in O(1) (how many
//! holders, of which mode, the record of one owner, a lower bound of the
//! earliest deadline); the transaction overlays its own edits, so a hand-off
//! can grant a run of k waiters against one read of the key and store them
//! with one write: O(k), whatever the number of holders.
//!
//! Expired holders are found by a sweep over every stored holder, which only
//! runs when the earliest deadline may have passed ([`Txn::sweep_if_due`]).
//! Each sweep removes at least one holder unless the stored lower bound was
//! stale (a holder extended or released since); it then stores the exact
//! bound, so the next sweep waits for a real deadline.

use std::borrow::Cow;
use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};

use smallvec::SmallVec;

use super::kind::{Hold, Kind, Mode, Shape, HOLDERS_MAX};

/// A stored lock as the state machine sees it. Implemented by the adapter
/// over the Redis key (a string for one holder, a hash for many) and by the
/// in-memory forms in `memory.rs`.
pub trait Stored {
    /// The stored lock's kind and limit; `None` when the key holds no lock.
    fn shape(&self) -> Option<Shape>;
    /// Holders stored, including expired ones not yet removed.
    fn count(&self) -> u32;
    /// The mode the holders share: `Read` or `Write` for a shared lock,
    /// `Write` for plain and reentrant locks, `Permit` for semaphores.
    fn mode(&self) -> Option<Mode>;
    /// The stored record of `owner`.
    fn hold(&self, owner: &[u8]) -> Option<Hold>;
    /// No stored holder has a deadline before this instant (a lower bound;
    /// `i64::MAX` when there are no holders).
    fn earliest_deadline_ms(&self) -> i64;
    /// At least the highest fencing token of any stored holder.
    fn top_fence(&self) -> u64;
    /// Every stored holder: O(holders), for sweeps and LOCK.INFO.
    fn holders(&self) -> Vec<(Vec<u8>, Hold)>;
    /// The owner whose stored record carries `fence`.
    fn owner_of(&self, fence: u64) -> Option<Vec<u8>>;
}

/// A holder record to store: new, renewed, extended or re-fenced.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Put<'o> {
    pub owner: Cow<'o, [u8]>,
    pub hold: Hold,
    /// The fencing token of the stored record this one replaces, when it
    /// differs (a store that indexes records by token must drop the old
    /// entry).
    pub replaces_fence: Option<u64>,
}

/// A stored holder record to delete: its owner and its stored token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Remove<'o> {
    pub owner: Cow<'o, [u8]>,
    pub fence: u64,
}

/// Past this many edits, owners are looked up through a map rather than by
/// scanning the edit lists (a hand-off of a long run of readers).
const SCAN_MAX: usize = 16;

/// Where an owner's edit is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Slot {
    Put(usize),
    Removed(usize),
}

/// Finds edits by owner without copying owners: a keyed hash of the owner
/// leads to the slots with that hash, which are then compared byte for
/// byte. One hash per lookup, no allocation per edit.
struct Index {
    keys: RandomState,
    slots: HashMap<u64, SmallVec<[Slot; 1]>>,
}

impl Index {
    fn hash(&self, owner: &[u8]) -> u64 {
        self.keys.hash_one(owner)
    }

    fn add(&mut self, owner: &[u8], slot: Slot) {
        let hash = self.hash(owner);
        self.slots.entry(hash).or_default().push(slot);
    }
}

/// The edits of one transaction, in order: at most one put per owner.
#[derive(Default)]
struct Edits<'o> {
    puts: SmallVec<[Put<'o>; 1]>,
    removes: SmallVec<[Remove<'o>; 1]>,
    /// Built once the lists pass [`SCAN_MAX`].
    index: Option<Index>,
}

impl<'o> Edits<'o> {
    fn owner_at(&self, slot: Slot) -> Option<&[u8]> {
        match slot {
            Slot::Put(at) => self.puts.get(at).map(|p| p.owner.as_ref()),
            Slot::Removed(at) => self.removes.get(at).map(|r| r.owner.as_ref()),
        }
    }

    /// Where this transaction edited `owner`: its put (`Slot::Put`), its
    /// removal, or nothing (`None`: ask the stored lock). A put wins over a
    /// removal of the same owner (removed, then granted again).
    fn find(&self, owner: &[u8]) -> Option<Slot> {
        let mut found = None;
        match &self.index {
            Some(index) => {
                for &slot in index.slots.get(&index.hash(owner)).into_iter().flatten() {
                    if self.owner_at(slot) == Some(owner) {
                        found = match (found, slot) {
                            (Some(Slot::Put(at)), _) | (_, Slot::Put(at)) => Some(Slot::Put(at)),
                            _ => Some(slot),
                        };
                    }
                }
            }
            None => {
                if let Some(at) = self.puts.iter().position(|p| p.owner.as_ref() == owner) {
                    return Some(Slot::Put(at));
                }
                found = self.removes.iter().position(|r| r.owner.as_ref() == owner).map(Slot::Removed);
            }
        }
        found
    }

    /// Whether this transaction already removed `owner`'s stored record.
    fn find_removed(&self, owner: &[u8]) -> bool {
        self.removes.iter().any(|r| r.owner.as_ref() == owner)
    }

    fn get(&self, slot: Slot) -> Option<&Put<'o>> {
        match slot {
            Slot::Put(at) => self.puts.get(at),
            Slot::Removed(_) => None,
        }
    }

    /// Stores `put`, over the put at `existing` if there is one.
    fn put(&mut self, existing: Option<Slot>, put: Put<'o>) {
        match existing.and_then(|slot| match slot {
            Slot::Put(at) => self.puts.get_mut(at),
            Slot::Removed(_) => None,
        }) {
            // A second edit of the same record in this transaction keeps
            // what the first one replaced.
            Some(slot) => {
                let replaces_fence = slot.replaces_fence;
                *slot = Put { replaces_fence, ..put };
            }
            None => {
                let at = self.puts.len();
                if let Some(index) = &mut self.index {
                    index.add(&put.owner, Slot::Put(at));
                }
                self.puts.push(put);
                self.index_if_large();
            }
        }
    }

    /// Drops `owner`: its put, if this transaction made one, and its stored
    /// record, if it still has one (`stored_fence`).
    fn remove(&mut self, owner: Cow<'o, [u8]>, existing: Option<Slot>, stored_fence: Option<u64>) {
        if let Some(Slot::Put(at)) = existing {
            self.puts.remove(at);
            // Positions after `at` moved: the map is rebuilt below.
            self.index = None;
        }
        if let Some(fence) = stored_fence {
            let at = self.removes.len();
            if let Some(index) = &mut self.index {
                index.add(&owner, Slot::Removed(at));
            }
            self.removes.push(Remove { owner, fence });
        }
        self.index_if_large();
    }

    fn index_if_large(&mut self) {
        if self.index.is_some() || self.puts.len() + self.removes.len() <= SCAN_MAX {
            return;
        }
        let mut index = Index { keys: RandomState::new(), slots: HashMap::new() };
        for (at, r) in self.removes.iter().enumerate() {
            index.add(&r.owner, Slot::Removed(at));
        }
        for (at, p) in self.puts.iter().enumerate() {
            index.add(&p.owner, Slot::Put(at));
        }
        self.index = Some(index);
    }
}

/// One transaction over a stored lock, at one instant.
pub struct Txn<'s, 'o, S: Stored + ?Sized> {
    stored: &'s S,
    now_ms: i64,
    /// Lock-delay: an expired holder keeps its slot this long (not stored;
    /// from `lock.expiry-delay-ms`).
    cool_down_ms: i64,
    shape: Option<Shape>,
    count: u32,
    mode: Option<Mode>,
    earliest_ms: i64,
    top_fence: u64,
    edits: Edits<'o>,
    header_changed: bool,
    found_expired: bool,
}

impl<'s, 'o, S: Stored + ?Sized> Txn<'s, 'o, S> {
    #[inline]
    pub fn new(stored: &'s S, now_ms: i64, cool_down_ms: i64) -> Self {
        Txn {
            stored,
            now_ms,
            cool_down_ms: cool_down_ms.max(0),
            shape: stored.shape(),
            count: stored.count(),
            mode: stored.mode(),
            earliest_ms: stored.earliest_deadline_ms(),
            top_fence: stored.top_fence(),
            edits: Edits::default(),
            header_changed: false,
            found_expired: false,
        }
    }

    pub fn now_ms(&self) -> i64 {
        self.now_ms
    }

    pub fn shape(&self) -> Option<Shape> {
        self.shape
    }

    pub fn count(&self) -> u32 {
        self.count
    }

    pub fn mode(&self) -> Option<Mode> {
        if self.count == 0 {
            None
        } else {
            self.mode
        }
    }

    pub fn top_fence(&self) -> u64 {
        self.top_fence
    }

    /// The record of `owner` as this transaction leaves it.
    pub fn hold(&self, owner: &[u8]) -> Option<Hold> {
        match self.edits.find(owner) {
            Some(slot) => self.edits.get(slot).map(|p| p.hold),
            None => self.stored.hold(owner),
        }
    }

    /// The owner whose record carries `fence`, as this transaction leaves
    /// it.
    pub fn owner_of(&self, fence: u64) -> Option<Cow<'_, [u8]>> {
        if let Some(put) = self.edits.puts.iter().find(|p| p.hold.fence == fence) {
            return Some(Cow::Borrowed(put.owner.as_ref()));
        }
        let owner = self.stored.owner_of(fence)?;
        match self.edits.find(&owner) {
            // Edited here: its record (if any) carries another token now.
            Some(_) => None,
            None => Some(Cow::Owned(owner)),
        }
    }

    /// When a holder that does not renew leaves: its deadline plus the
    /// lock-delay.
    pub fn frees_at_ms(&self, hold: &Hold) -> i64 {
        hold.deadline_ms.saturating_add(self.cool_down_ms)
    }

    /// The first instant at which a holder may leave by itself (and a
    /// waiter may be served): exact right after a sweep, earlier otherwise.
    pub fn next_free_at_ms(&self) -> Option<i64> {
        (self.count > 0).then(|| self.earliest_ms.saturating_add(self.cool_down_ms))
    }

    /// Removes every holder whose deadline and lock-delay have passed, if
    /// one may have (the stored lower bound says when).
    pub fn sweep_if_due(&mut self) {
        if self.count == 0 || self.now_ms < self.earliest_ms.saturating_add(self.cool_down_ms) {
            return;
        }
        let mut earliest = i64::MAX;
        for (owner, hold) in self.stored.holders() {
            if self.edits.find(&owner).is_some() {
                continue;
            }
            if self.now_ms >= self.frees_at_ms(&hold) {
                self.found_expired = true;
                let fence = hold.fence;
                self.edits.remove(Cow::Owned(owner), None, Some(fence));
                self.count = self.count.saturating_sub(1);
            } else {
                earliest = earliest.min(hold.deadline_ms);
            }
        }
        for put in &self.edits.puts {
            earliest = earliest.min(put.hold.deadline_ms);
        }
        if earliest != self.earliest_ms {
            self.earliest_ms = earliest;
            self.header_changed = true;
        }
    }

    /// Stores `hold` for `owner`: a new holder (shaped as `shape` if the
    /// lock is new) or a change of its record.
    pub fn put(&mut self, owner: Cow<'o, [u8]>, hold: Hold, shape: Shape) {
        let existing = self.edits.find(&owner);
        // What it replaces: this transaction's own edit, or the stored record.
        let (present, stored_fence) = match existing {
            Some(slot) => (self.edits.get(slot).is_some(), None),
            None => match self.stored.hold(&owner) {
                Some(stored) => (true, Some(stored.fence)),
                None => (false, None),
            },
        };
        if !present {
            if self.count == 0 && (self.shape != Some(shape) || self.mode != Some(hold.mode)) {
                self.shape = Some(shape);
                self.mode = Some(hold.mode);
                self.header_changed = true;
            }
            self.count = self.count.saturating_add(1);
        }
        if hold.deadline_ms < self.earliest_ms {
            self.earliest_ms = hold.deadline_ms;
            self.header_changed = true;
        }
        if hold.fence > self.top_fence {
            self.top_fence = hold.fence;
            self.header_changed = true;
        }
        let replaces_fence = stored_fence.filter(|&f| f != hold.fence);
        self.edits.put(existing, Put { owner, hold, replaces_fence });
    }

    /// Deletes `owner`'s record.
    pub fn remove(&mut self, owner: Cow<'o, [u8]>) {
        let existing = self.edits.find(&owner);
        let stored_fence = match existing {
            // Granted in this transaction over a stored record it replaced.
            Some(Slot::Put(_)) if self.edits.find_removed(&owner) => None,
            Some(Slot::Put(_)) => self.stored.hold(&owner).map(|h| h.fence),
            Some(Slot::Removed(_)) => return,
            None => match self.stored.hold(&owner) {
                Some(stored) => Some(stored.fence),
                None => return,
            },
        };
        self.edits.remove(owner, existing, stored_fence);
        self.count = self.count.saturating_sub(1);
    }

    /// Deletes `owner`'s record, `held` being what [`Txn::hold`] just
    /// answered for it: when this transaction has not edited `owner`, that
    /// is the stored record, whose token the removal needs, and it is not
    /// read again (on a hash lock each read is a field lookup).
    pub fn remove_held(&mut self, owner: Cow<'o, [u8]>, held: &Hold) {
        if self.edits.find(&owner).is_some() {
            return self.remove(owner);
        }
        self.edits.remove(owner, None, Some(held.fence));
        self.count = self.count.saturating_sub(1);
    }

    /// Ends the transaction: what to write, checked against the invariants
    /// the property tests check. Inlined: the changes are large (inline
    /// edits), and a call from the module's crate would copy them out
    /// (about 150 instructions a command, seen by the cost gate when the
    /// core became a crate of its own).
    #[inline]
    pub fn finish(self) -> Changes<'o> {
        let empty = self.count == 0;
        let changes = Changes {
            shape: if empty { None } else { self.shape },
            mode: if empty { None } else { self.mode },
            count: self.count,
            earliest_ms: self.earliest_ms,
            top_fence: self.top_fence,
            header_changed: self.header_changed && !empty,
            delete: empty && self.stored.shape().is_some(),
            puts: self.edits.puts,
            removes: self.edits.removes,
            found_expired: self.found_expired,
        };
        changes.debug_check();
        changes
    }
}

/// What a transaction changed, for the adapter to write (and replicate).
#[derive(Debug)]
pub struct Changes<'o> {
    /// The lock afterwards; `None` when it has no holder left.
    pub shape: Option<Shape>,
    pub mode: Option<Mode>,
    /// Holders afterwards, including expired ones not yet removed.
    pub count: u32,
    /// Lower bound of the holders' deadlines.
    pub earliest_ms: i64,
    pub top_fence: u64,
    /// The lock-wide fields (shape, mode, bounds) changed.
    pub header_changed: bool,
    /// The key must be deleted: it held a lock and has no holder left.
    pub delete: bool,
    pub puts: SmallVec<[Put<'o>; 1]>,
    pub removes: SmallVec<[Remove<'o>; 1]>,
    /// Holders whose time had passed were removed.
    pub found_expired: bool,
}

impl Changes<'_> {
    /// The same changes, owning their owners (tests keep them past the
    /// transaction's borrows).
    pub fn into_owned(self) -> Changes<'static> {
        Changes {
            puts: self
                .puts
                .into_iter()
                .map(|p| Put { owner: Cow::Owned(p.owner.into_owned()), ..p })
                .collect(),
            removes: self
                .removes
                .into_iter()
                .map(|r| Remove { owner: Cow::Owned(r.owner.into_owned()), ..r })
                .collect(),
            shape: self.shape,
            mode: self.mode,
            count: self.count,
            earliest_ms: self.earliest_ms,
            top_fence: self.top_fence,
            header_changed: self.header_changed,
            delete: self.delete,
            found_expired: self.found_expired,
        }
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        !self.delete && !self.header_changed && self.puts.is_empty() && self.removes.is_empty()
    }

    /// The latest deadline among the records written (the key's backstop
    /// expiry must outlive it).
    #[inline]
    pub fn last_put_deadline_ms(&self) -> Option<i64> {
        self.puts.iter().map(|p| p.hold.deadline_ms).max()
    }

    /// The invariants of every kind, asserted where the state is built
    /// (TigerStyle), not only in the property tests.
    #[inline]
    fn debug_check(&self) {
        invariant!(self.count <= HOLDERS_MAX, "{} holders", self.count);
        for put in &self.puts {
            invariant!(put.hold.holds >= 1, "a record has at least one hold");
            invariant!(!put.owner.is_empty(), "owners are never empty");
            invariant!(put.hold.fence <= self.top_fence, "the top token covers every holder");
            invariant!(
                self.shape.is_none_or(|s| s.kind.allows(put.hold.mode)),
                "a {:?} holder in {:?}",
                put.hold.mode,
                self.shape
            );
        }
        match (self.shape, self.mode) {
            (Some(s), _) if s.kind.is_single() => invariant!(self.count <= 1, "one holder"),
            (Some(s), _) if s.kind == Kind::Semaphore => {
                invariant!(self.count <= s.limit, "{} holders of {} permits", self.count, s.limit)
            }
            (_, Some(Mode::Write)) => invariant!(self.count <= 1, "a writer is alone"),
            _ => {}
        }
    }
}
