//! Shared locks and semaphores stored as a hash, one field per holder (see
//! the layout in `codec.rs`): the state machine's view of such a hash
//! ([`HashLock`], a [`Stored`]), and the field edits that store a
//! transaction's [`Changes`] ([`field_edits`]).
//!
//! Pure: the hash is reached through [`Fields`], which the adapter
//! implements over a Redis key and the tests over a map.

use std::cell::Cell;
use std::ops::Range;

use super::codec::{self, Field, Header};
use super::kind::{Hold, Mode, Shape};
use super::txn::{Changes, Stored};

/// Read access to a hash's fields.
pub trait Fields {
    fn get(&self, field: &[u8]) -> Option<Vec<u8>>;
    /// Number of fields.
    fn field_count(&self) -> usize;
    /// Every field and value (O(fields)).
    fn all(&self) -> Vec<(Vec<u8>, Vec<u8>)>;
}

/// A hash that holds a lock: its header read once, holders read on demand.
pub struct HashLock<F> {
    fields: F,
    header: Header,
    count: u32,
    /// No deadline this module writes lies beyond this instant (see
    /// [`HashLock::too_far`]).
    deadline_max_ms: i64,
    /// The first deadline read beyond `deadline_max_ms`.
    too_far: Cell<Option<i64>>,
}

/// The hash is not a lock this module wrote (no header, a header it cannot
/// read, or an impossible number of fields).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NotALock;

impl<F: Fields> HashLock<F> {
    /// Opens the hash as a lock, with no bound on its deadlines.
    pub fn open(fields: F) -> Result<HashLock<F>, NotALock> {
        HashLock::open_bounded(fields, i64::MAX)
    }

    /// Opens the hash as a lock whose deadlines this module could have
    /// written only up to `deadline_max_ms`. Holders are read on demand, so
    /// a deadline beyond it is found when its record is read: the caller
    /// asks [`HashLock::too_far`] after using the lock, and drops what it
    /// decided if so.
    pub fn open_bounded(fields: F, deadline_max_ms: i64) -> Result<HashLock<F>, NotALock> {
        let header =
            fields.get(codec::HEADER_FIELD).and_then(|v| codec::decode_header(&v)).ok_or(NotALock)?;
        // The header, then two fields per holder (its record and its token).
        let len = fields.field_count();
        if len < 3 || len.is_multiple_of(2) {
            return Err(NotALock);
        }
        let count = u32::try_from((len - 1) / 2).map_err(|_| NotALock)?;
        if count > super::kind::HOLDERS_MAX {
            return Err(NotALock);
        }
        let lock = HashLock { fields, header, count, deadline_max_ms, too_far: Cell::new(None) };
        lock.check(header.earliest_ms);
        Ok(lock)
    }

    pub fn header(&self) -> Header {
        self.header
    }

    /// A deadline read so far that lies beyond the bound: the hash was not
    /// written by this module (or by one whose clock ran far ahead).
    pub fn too_far(&self) -> Option<i64> {
        self.too_far.get()
    }

    fn check(&self, deadline_ms: i64) {
        if deadline_ms > self.deadline_max_ms && self.too_far.get().is_none() {
            self.too_far.set(Some(deadline_ms));
        }
    }

    fn record(&self, value: &[u8]) -> Option<Hold> {
        let hold = codec::decode_record(value)?;
        self.check(hold.deadline_ms);
        Some(hold)
    }
}

impl<F: Fields> Stored for HashLock<F> {
    fn shape(&self) -> Option<Shape> {
        Some(self.header.shape)
    }

    fn count(&self) -> u32 {
        self.count
    }

    fn mode(&self) -> Option<Mode> {
        Some(self.header.mode)
    }

    fn hold(&self, owner: &[u8]) -> Option<Hold> {
        let field = codec::holder_field(owner);
        self.fields.get(field.as_bytes()).and_then(|v| self.record(&v))
    }

    fn earliest_deadline_ms(&self) -> i64 {
        self.header.earliest_ms
    }

    fn top_fence(&self) -> u64 {
        self.header.top_fence
    }

    fn holders(&self) -> Vec<(Vec<u8>, Hold)> {
        self.fields
            .all()
            .into_iter()
            .filter_map(|(name, value)| match codec::parse_field(&name) {
                Some(Field::Holder(owner)) => self.record(&value).map(|hold| (owner.to_vec(), hold)),
                _ => None,
            })
            .collect()
    }

    fn owner_of(&self, fence: u64) -> Option<Vec<u8>> {
        let field = codec::fence_field(fence);
        self.fields.get(field.as_bytes())
    }
}

/// The field writes that store a transaction's changes in the hash: fields
/// to delete, then fields to set (the header first). Empty when the key is
/// to be deleted whole (`changes.delete`). All the bytes live in one buffer:
/// a hand-off to a thousand readers builds four thousand of them.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct FieldEdits {
    bytes: Vec<u8>,
    deletes: Vec<Range<usize>>,
    sets: Vec<(Range<usize>, Range<usize>)>,
}

impl FieldEdits {
    pub fn is_empty(&self) -> bool {
        self.deletes.is_empty() && self.sets.is_empty()
    }

    fn add(&mut self, bytes: &[u8]) -> Range<usize> {
        let start = self.bytes.len();
        self.bytes.extend_from_slice(bytes);
        start..self.bytes.len()
    }

    fn delete(&mut self, field: &[u8]) {
        let field = self.add(field);
        self.deletes.push(field);
    }

    fn set(&mut self, field: &[u8], value: &[u8]) {
        let (field, value) = (self.add(field), self.add(value));
        self.sets.push((field, value));
    }

    fn slice(&self, range: &Range<usize>) -> &[u8] {
        self.bytes.get(range.clone()).unwrap_or_default()
    }

    pub fn deletes(&self) -> impl ExactSizeIterator<Item = &[u8]> {
        self.deletes.iter().map(|r| self.slice(r))
    }

    pub fn sets(&self) -> impl ExactSizeIterator<Item = (&[u8], &[u8])> {
        self.sets.iter().map(|(f, v)| (self.slice(f), self.slice(v)))
    }
}

pub fn field_edits(changes: &Changes<'_>) -> FieldEdits {
    let mut edits = FieldEdits::default();
    if changes.delete {
        return edits;
    }
    let records = changes.puts.len() + changes.removes.len();
    edits.bytes.reserve(records * 96);
    edits.sets.reserve(2 * changes.puts.len() + 1);
    // The header first: when it is the padded one (see
    // `codec::LISTPACK_HOLDERS_MAX`), Redis turns the hash into a hash table
    // before the holders' fields go in, rather than inserting a long run of
    // them into a list first (O(n^2) for a hand-off to n readers).
    if let (true, Some(shape), Some(mode)) = (changes.header_changed, changes.shape, changes.mode) {
        let header = Header { shape, mode, earliest_ms: changes.earliest_ms, top_fence: changes.top_fence };
        edits.set(codec::HEADER_FIELD, codec::encode_header(&header, changes.count).as_bytes());
    }
    for remove in &changes.removes {
        // Re-granted in the same transaction: its record is overwritten
        // below; only the old token's index goes.
        if !changes.puts.iter().any(|p| p.owner == remove.owner) {
            edits.delete(codec::holder_field(&remove.owner).as_bytes());
        }
        edits.delete(codec::fence_field(remove.fence).as_bytes());
    }
    for put in &changes.puts {
        if let Some(old) = put.replaces_fence {
            edits.delete(codec::fence_field(old).as_bytes());
        }
        edits.set(codec::holder_field(&put.owner).as_bytes(), codec::encode_record(&put.hold).as_bytes());
        edits.set(codec::fence_field(put.hold.fence).as_bytes(), &put.owner);
    }
    edits
}

/// A hash in memory (tests, and the conversion of a lock stored in the
/// previous release's string form).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MapFields(pub std::collections::BTreeMap<Vec<u8>, Vec<u8>>);

impl MapFields {
    pub fn apply(&mut self, edits: &FieldEdits) {
        for field in edits.deletes() {
            self.0.remove(field);
        }
        for (field, value) in edits.sets() {
            self.0.insert(field.to_vec(), value.to_vec());
        }
    }
}

impl Fields for &MapFields {
    fn get(&self, field: &[u8]) -> Option<Vec<u8>> {
        self.0.get(field).cloned()
    }

    fn field_count(&self) -> usize {
        self.0.len()
    }

    fn all(&self) -> Vec<(Vec<u8>, Vec<u8>)> {
        self.0.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
    }
}

/// Every field of a lock held in memory, as the hash form stores it (used
/// to convert a lock from the previous string form).
pub fn all_fields<S: Stored + ?Sized>(lock: &S) -> Vec<(Vec<u8>, Vec<u8>)> {
    let (Some(shape), Some(mode)) = (lock.shape(), lock.mode()) else { return Vec::new() };
    let header =
        Header { shape, mode, earliest_ms: lock.earliest_deadline_ms(), top_fence: lock.top_fence() };
    let mut fields =
        vec![(codec::HEADER_FIELD.to_vec(), codec::encode_header(&header, lock.count()).as_bytes().to_vec())];
    for (owner, hold) in lock.holders() {
        fields.push((
            codec::holder_field(&owner).as_bytes().to_vec(),
            codec::encode_record(&hold).as_bytes().to_vec(),
        ));
        fields.push((codec::fence_field(hold.fence).as_bytes().to_vec(), owner));
    }
    fields
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fencing::Fencer;
    use crate::kind::{Kind, Want};
    use crate::lock::{self, Admission, Grant};
    use crate::memory::Holders;
    use crate::txn::Txn;

    fn grant(map: &mut MapFields, want: Want, owner: &[u8], now: i64, f: &mut Fencer) -> Grant {
        let changes;
        let g;
        {
            let view = if map.0.is_empty() { None } else { Some(HashLock::open(&*map).unwrap()) };
            let free = Holders::free();
            match &view {
                Some(v) => {
                    let mut txn = Txn::new(v, now, 0);
                    g = lock::acquire(&mut txn, want, owner, 1_000, Admission::Open, f);
                    changes = txn.finish().into_owned();
                }
                None => {
                    let mut txn = Txn::new(&free, now, 0);
                    g = lock::acquire(&mut txn, want, owner, 1_000, Admission::Open, f);
                    changes = txn.finish().into_owned();
                }
            }
        }
        if changes.delete {
            map.0.clear();
        } else {
            map.apply(&field_edits(&changes));
        }
        g
    }

    #[test]
    fn a_grant_writes_its_holders_fields_and_the_header_only() {
        let mut f = Fencer::new(0);
        let mut map = MapFields::default();
        let Grant::Granted(t1) = grant(&mut map, Want::read(), b"r1", 5, &mut f) else { panic!() };
        assert_eq!(map.0.len(), 3);
        let Grant::Granted(t2) = grant(&mut map, Want::read(), b"r2", 6, &mut f) else { panic!() };
        let fields: Vec<String> = map
            .0
            .iter()
            .map(|(k, v)| format!("{}={}", String::from_utf8_lossy(k), String::from_utf8_lossy(v)))
            .collect();
        assert_eq!(
            fields,
            vec![
                format!("f|{t1}=r1"),
                format!("f|{t2}=r2"),
                "h|r1=r|5000|1005".to_string(),
                "h|r2=r|6000|1006".to_string(),
                format!("lock=LK2|S|0|r|1005|{t2}|"),
            ]
        );
        let view = HashLock::open(&map).unwrap();
        assert_eq!(view.count(), 2);
        assert!(lock::is_current(&view, t1, 10));
        assert_eq!(view.hold(b"r2").map(|h| h.deadline_ms), Some(1006));
    }

    /// The field edits of a call on the hash lock `map` at `now` (`op`,
    /// which must succeed), and whether the key goes whole.
    fn edits_of<'m>(
        map: &'m MapFields,
        now: i64,
        op: impl for<'s> FnOnce(&mut Txn<'s, 'static, HashLock<&'m MapFields>>) -> bool,
    ) -> (FieldEdits, bool) {
        let view = HashLock::open(map).unwrap();
        let mut txn = Txn::new(&view, now, 0);
        assert!(op(&mut txn));
        let changes = txn.finish();
        (field_edits(&changes), changes.delete)
    }

    /// Readers r1 (granted at 5, deadline 1005) and r2 (at 6, deadline
    /// 1006), and their tokens.
    fn two_readers() -> (MapFields, [u64; 2]) {
        let mut f = Fencer::new(0);
        let mut map = MapFields::default();
        let Grant::Granted(t1) = grant(&mut map, Want::read(), b"r1", 5, &mut f) else { panic!() };
        let Grant::Granted(t2) = grant(&mut map, Want::read(), b"r2", 6, &mut f) else { panic!() };
        (map, [t1, t2])
    }

    #[test]
    fn an_extension_writes_the_holders_record_only() {
        // README, LOCK.EXTEND on a shared lock or semaphore: it replicates
        // that holder's fields (`HSET key h|<token> <record>`, and its
        // unchanged token index), not the header, when the lock-wide bounds
        // stay as they were: here by the holder of the top token, and to
        // exactly the earliest deadline.
        let (map, _) = two_readers();
        for (ttl, deadline) in [(2_000, 2_010), (995, 1_005)] {
            let (edits, _) = edits_of(&map, 10, |txn| lock::extend(txn, b"r2", ttl));
            let sets: Vec<(&[u8], &[u8])> = edits.sets().collect();
            let record = format!("r|6000|{deadline}");
            assert_eq!(sets, vec![(&b"h|r2"[..], record.as_bytes()), (b"f|6000", b"r2")], "ttl {ttl}");
            assert_eq!(edits.deletes().len(), 0);
        }
    }

    #[test]
    fn a_release_deletes_the_holders_fields_and_the_last_one_the_key() {
        // README, LOCK.RELEASE: for one holder of several `HDEL key
        // h|<token> f|<fence>`; the last holder's release is `DEL key`, with
        // no field edit.
        let (mut map, [t1, _]) = two_readers();
        let (edits, deleted) = edits_of(&map, 10, |txn| lock::release(txn, b"r1"));
        let deletes: Vec<&[u8]> = edits.deletes().collect();
        assert_eq!(deletes, vec![&b"h|r1"[..], format!("f|{t1}").as_bytes()]);
        assert_eq!((edits.sets().len(), deleted, edits.is_empty()), (0, false, false));
        map.apply(&edits);
        let (edits, deleted) = edits_of(&map, 10, |txn| lock::release(txn, b"r2"));
        assert!(deleted && edits.is_empty(), "{edits:?}");
    }

    #[test]
    fn hashes_this_module_did_not_write_are_not_locks() {
        let mut map = MapFields::default();
        map.0.insert(b"field".to_vec(), b"value".to_vec());
        assert!(HashLock::open(&map).is_err(), "no header");
        map.0.insert(b"lock".to_vec(), b"LK2|S|0|r|1|2|".to_vec());
        assert!(HashLock::open(&map).is_err(), "two fields: not header + pairs");
        map.0.insert(b"h|x".to_vec(), b"r|1|2".to_vec());
        assert!(HashLock::open(&map).is_ok());
        map.0.insert(b"lock".to_vec(), b"LK2|P|0|w|1|2|".to_vec());
        assert!(HashLock::open(&map).is_err(), "plain locks are strings");
        let header_only = MapFields([(b"lock".to_vec(), b"LK2|S|0|r|1|2|".to_vec())].into());
        assert!(HashLock::open(&header_only).is_err(), "a lock without holders is deleted, never stored");
    }

    #[test]
    fn a_hash_holds_at_most_holders_max_holders() {
        // README: up to 1000 readers (or permits) hold one lock; a hash with
        // more fields than that many holders have was not written here.
        let mut map = MapFields([(b"lock".to_vec(), b"LK2|S|0|r|1|2|".to_vec())].into());
        for n in 1..=crate::kind::HOLDERS_MAX {
            map.0
                .insert(codec::holder_field(n.to_string().as_bytes()).as_bytes().to_vec(), b"r|1|2".to_vec());
            map.0.insert(codec::fence_field(u64::from(n)).as_bytes().to_vec(), n.to_string().into_bytes());
        }
        assert_eq!(HashLock::open(&map).map(|h| h.count()), Ok(crate::kind::HOLDERS_MAX));
        map.0.insert(b"h|more".to_vec(), b"r|1|2".to_vec());
        map.0.insert(b"f|0".to_vec(), b"more".to_vec());
        assert!(HashLock::open(&map).is_err());
    }

    #[test]
    fn converting_the_previous_form_keeps_every_holder() {
        let old = crate::codec::decode_legacy_group(b"LK1|M|3|2|p|100|5000|2|w1|p|101|5001|3|a|b|").unwrap();
        let map = MapFields(all_fields(&old).into_iter().collect());
        let view = HashLock::open(&map).unwrap();
        assert_eq!(view.shape(), Some(Shape { kind: Kind::Semaphore, limit: 3 }));
        assert_eq!(view.hold(b"a|b"), old.hold(b"a|b"));
        assert_eq!(view.owner_of(100), Some(b"w1".to_vec()));
        assert_eq!((view.count(), view.top_fence(), view.earliest_deadline_ms()), (2, 101, 5000));
    }
}
