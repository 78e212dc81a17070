//! Stored locks held in memory: the one-holder form read straight out of a
//! string value ([`Single`], no allocation), and a list of holders
//! ([`Holders`]) for locks stored in the previous release's string form and
//! for the tests, which use it as the reference store.

use super::kind::{Hold, Kind, Mode, Shape};
use super::txn::{Changes, Stored};

/// A plain or reentrant lock read from its string value; the owner borrows
/// the value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Single<'a> {
    pub kind: Kind,
    pub owner: &'a [u8],
    pub hold: Hold,
}

impl Stored for Single<'_> {
    fn shape(&self) -> Option<Shape> {
        Some(Shape { kind: self.kind, limit: 0 })
    }

    fn count(&self) -> u32 {
        1
    }

    fn mode(&self) -> Option<Mode> {
        Some(self.hold.mode)
    }

    fn hold(&self, owner: &[u8]) -> Option<Hold> {
        (owner == self.owner).then_some(self.hold)
    }

    fn earliest_deadline_ms(&self) -> i64 {
        self.hold.deadline_ms
    }

    fn top_fence(&self) -> u64 {
        self.hold.fence
    }

    fn holders(&self) -> Vec<(Vec<u8>, Hold)> {
        vec![(self.owner.to_vec(), self.hold)]
    }

    fn owner_of(&self, fence: u64) -> Option<Vec<u8>> {
        (fence == self.hold.fence).then(|| self.owner.to_vec())
    }
}

/// A key with no lock.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Free;

impl Stored for Free {
    fn shape(&self) -> Option<Shape> {
        None
    }
    fn count(&self) -> u32 {
        0
    }
    fn mode(&self) -> Option<Mode> {
        None
    }
    fn hold(&self, _owner: &[u8]) -> Option<Hold> {
        None
    }
    fn earliest_deadline_ms(&self) -> i64 {
        i64::MAX
    }
    fn top_fence(&self) -> u64 {
        0
    }
    fn holders(&self) -> Vec<(Vec<u8>, Hold)> {
        Vec::new()
    }
    fn owner_of(&self, _fence: u64) -> Option<Vec<u8>> {
        None
    }
}

/// Any lock as a list of holders, with the lock-wide fields a stored lock
/// keeps. Lookups scan the list: for locks read from the previous release's
/// string form (converted on their first write) and for tests.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Holders {
    shape: Option<Shape>,
    mode: Option<Mode>,
    earliest_ms: i64,
    top_fence: u64,
    records: Vec<(Vec<u8>, Hold)>,
}

impl Holders {
    pub fn free() -> Holders {
        Holders { shape: None, mode: None, earliest_ms: i64::MAX, top_fence: 0, records: Vec::new() }
    }

    pub fn single(kind: Kind, owner: &[u8], hold: Hold) -> Holders {
        Holders::from_records(Shape { kind, limit: 0 }, vec![(owner.to_vec(), hold)])
    }

    /// A lock with these holders; the mode and bounds follow from them.
    pub fn from_records(shape: Shape, records: Vec<(Vec<u8>, Hold)>) -> Holders {
        if records.is_empty() {
            return Holders::free();
        }
        let mode = records.first().map(|(_, h)| h.mode);
        let earliest_ms = records.iter().map(|(_, h)| h.deadline_ms).min().unwrap_or(i64::MAX);
        let top_fence = records.iter().map(|(_, h)| h.fence).max().unwrap_or(0);
        Holders { shape: Some(shape), mode, earliest_ms, top_fence, records }
    }

    /// The lock after a transaction's changes were stored.
    pub fn apply(&self, changes: &Changes<'_>) -> Holders {
        if changes.delete || changes.shape.is_none() && !changes.is_empty() {
            return Holders::free();
        }
        if changes.is_empty() {
            return self.clone();
        }
        let mut records = self.records.clone();
        records.retain(|(owner, _)| !changes.removes.iter().any(|r| r.owner.as_ref() == owner.as_slice()));
        for put in &changes.puts {
            match records.iter_mut().find(|(owner, _)| owner.as_slice() == put.owner.as_ref()) {
                Some(slot) => slot.1 = put.hold,
                None => records.push((put.owner.to_vec(), put.hold)),
            }
        }
        Holders {
            shape: changes.shape,
            mode: changes.mode,
            earliest_ms: changes.earliest_ms,
            top_fence: changes.top_fence,
            records,
        }
    }

    pub fn records(&self) -> &[(Vec<u8>, Hold)] {
        &self.records
    }
}

impl Stored for Holders {
    fn shape(&self) -> Option<Shape> {
        self.shape
    }

    fn count(&self) -> u32 {
        u32::try_from(self.records.len()).unwrap_or(u32::MAX)
    }

    fn mode(&self) -> Option<Mode> {
        self.mode
    }

    fn hold(&self, owner: &[u8]) -> Option<Hold> {
        self.records.iter().find(|(o, _)| o.as_slice() == owner).map(|(_, h)| *h)
    }

    fn earliest_deadline_ms(&self) -> i64 {
        self.earliest_ms
    }

    fn top_fence(&self) -> u64 {
        self.top_fence
    }

    fn holders(&self) -> Vec<(Vec<u8>, Hold)> {
        self.records.clone()
    }

    fn owner_of(&self, fence: u64) -> Option<Vec<u8>> {
        self.records.iter().find(|(_, h)| h.fence == fence).map(|(o, _)| o.clone())
    }
}
