//! A lock key's value as the module stores it, which is what persistence
//! and a replica see (property 6): a plain or reentrant lock as one string
//! (`codec::encode_single`), a shared lock or semaphore as a hash written
//! field by field (`hashform::field_edits`), or, after an upgrade of the
//! module, a shared lock or semaphore still in the previous release's
//! string form, which the module reads (`codec::decode_string`) and
//! rewrites whole as a hash on its first write (`hashform::all_fields`),
//! as `src/keystate.rs` does. The simulated node keeps its locks as the
//! core's `Holders`, but a lock in the previous release's form is written
//! and read with these functions, and converted by its first write, the
//! node reading its holders back from the hash, so what a conversion loses
//! is lost to the node too; the checker compares the converted holders
//! with those the core's transaction meant to leave ("stored form").

use std::collections::{BTreeMap, BTreeSet};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use lock_core::codec::{self, StringLock, MAGIC};
use lock_core::hashform::{self, HashLock, MapFields};
use lock_core::kind::{Hold, Kind, Shape};
use lock_core::memory::Holders;
use lock_core::txn::{Changes, Stored};

/// A lock key's value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Value {
    /// A plain or reentrant lock, or a shared lock or semaphore in the
    /// previous release's string form.
    String(Vec<u8>),
    /// A shared lock or semaphore: the hash's fields.
    Hash(MapFields),
}

/// A lock as read from its value.
pub enum View<'v> {
    Free(Holders),
    /// A string value (one holder, or the previous release's form): read
    /// whole.
    String {
        holders: Holders,
        legacy: bool,
    },
    Hash(HashLock<&'v MapFields>),
}

impl<'v> View<'v> {
    /// Reads `value` as the module does; a value it cannot read is none.
    pub fn of(value: Option<&'v Value>) -> Option<View<'v>> {
        match value {
            None => Some(View::Free(Holders::free())),
            Some(Value::String(bytes)) => Some(match codec::decode_string(bytes)? {
                StringLock::Single(one) => {
                    View::String { holders: Holders::single(one.kind, one.owner, one.hold), legacy: false }
                }
                StringLock::Legacy(holders) => View::String { holders, legacy: true },
            }),
            Some(Value::Hash(fields)) => HashLock::open(fields).ok().map(View::Hash),
        }
    }

    pub fn lock(&self) -> &dyn Stored {
        match self {
            View::Free(holders) | View::String { holders, .. } => holders,
            View::Hash(lock) => lock,
        }
    }

    /// The holders, as a list.
    pub fn holders(&self) -> Holders {
        match self {
            View::Free(holders) | View::String { holders, .. } => holders.clone(),
            View::Hash(lock) => match lock.shape() {
                Some(shape) => Holders::from_records(shape, lock.holders()),
                None => Holders::free(),
            },
        }
    }
}

/// The value after a transaction's `changes` were stored over `view` (of
/// `value`); `None`: the key is deleted.
pub fn written(value: Option<&Value>, view: &View<'_>, changes: &Changes<'_>) -> Option<Value> {
    if changes.is_empty() {
        return value.cloned();
    }
    if changes.delete {
        return None;
    }
    // The previous release's string form, converted by its first write.
    if let View::String { holders, legacy: true } = view {
        let after = holders.apply(changes);
        return (!after.records().is_empty())
            .then(|| Value::Hash(MapFields(hashform::all_fields(&after).into_iter().collect())));
    }
    let shape = changes.shape?;
    if shape.kind.is_single() {
        return match changes.puts.last() {
            Some(put) => Some(Value::String(
                codec::encode_single(shape.kind, &put.owner, &put.hold).as_bytes().to_vec(),
            )),
            None => value.cloned(),
        };
    }
    let mut fields = match value {
        Some(Value::Hash(fields)) => fields.clone(),
        _ => MapFields::default(),
    };
    fields.apply(&hashform::field_edits(changes));
    Some(Value::Hash(fields))
}

/// Whether the stored `value` holds exactly the holders the transaction
/// meant to leave (`view`'s with `changes` applied): each holder with its
/// token, deadline and holds. What is wrong, if not.
pub fn differs(value: Option<&Value>, view: &View<'_>, changes: &Changes<'_>) -> Option<String> {
    let meant = view.holders().apply(changes);
    let Some(stored) = View::of(value).map(|v| v.holders()) else {
        return Some("the stored value is not a lock".into());
    };
    let show = |owner: &[u8], h: &Hold| {
        format!(
            "{} (token {}, deadline {}, holds {})",
            String::from_utf8_lossy(owner),
            h.fence,
            h.deadline_ms,
            h.holds
        )
    };
    let mut wrong = Vec::new();
    for (owner, hold) in meant.records() {
        match stored.hold(owner) {
            None => wrong.push(format!("{} is gone", show(owner, hold))),
            Some(kept) if kept != *hold => {
                wrong.push(format!("{} is stored as {}", show(owner, hold), show(owner, &kept)))
            }
            Some(_) => {}
        }
    }
    for (owner, hold) in stored.records() {
        if meant.hold(owner).is_none() {
            wrong.push(format!("{} is stored, not meant", show(owner, hold)));
        }
    }
    (!wrong.is_empty()).then(|| wrong.join("; "))
}

/// The previous release's string form of a shared lock or semaphore (what
/// the module wrote before the upgrade; this release only reads it):
/// `LK1|kind|limit|count|` then `mode|token|deadline|owner length|owner|`
/// per holder. `None` for the other kinds, which kept their form.
pub fn legacy_form(holders: &Holders) -> Option<Value> {
    let Shape { kind, limit } = holders.shape()?;
    if kind.is_single() || holders.records().is_empty() {
        return None;
    }
    let limit = if kind == Kind::Semaphore { limit } else { 0 };
    let mut out = MAGIC.to_vec();
    out.extend_from_slice(
        format!("{}|{limit}|{}|", kind.letter() as char, holders.records().len()).as_bytes(),
    );
    for (owner, hold) in holders.records() {
        let head =
            format!("{}|{}|{}|{}|", hold.mode.letter() as char, hold.fence, hold.deadline_ms, owner.len());
        out.extend_from_slice(head.as_bytes());
        out.extend_from_slice(owner);
        out.push(b'|');
    }
    Some(Value::String(out))
}

/// Every shared lock and semaphore of `keys` back in the previous release's
/// form (the node ran that release until now), read back by the module's
/// decoder; the keys now in that form. The other keys kept their form.
pub fn as_before_the_upgrade(keys: &mut BTreeMap<Vec<u8>, Holders>) -> BTreeSet<Vec<u8>> {
    let mut legacy = BTreeSet::new();
    for (key, holders) in keys.iter_mut() {
        let old = legacy_form(holders);
        if let Some(View::String { holders: read, legacy: true }) =
            old.as_ref().and_then(|v| View::of(Some(v)))
        {
            *holders = read;
            legacy.insert(key.clone());
        }
    }
    legacy
}

/// The first write of a lock in the previous release's form: the hash it
/// is converted to (`hashform::all_fields` of the holders `changes`
/// leave), read back as the node will read it, and what that lost or
/// changed of the holders meant, if anything.
pub fn converted(before: &Holders, changes: &Changes<'_>) -> (Holders, Option<String>) {
    let value = written(
        Some(&Value::String(Vec::new())),
        &View::String { holders: before.clone(), legacy: true },
        changes,
    );
    let view = View::String { holders: before.clone(), legacy: true };
    let wrong = differs(value.as_ref(), &view, changes);
    let read = View::of(value.as_ref()).map(|v| v.holders()).unwrap_or_else(Holders::free);
    (read, wrong)
}

/// A rolling upgrade of the module in `per_mille` of the histories, drawn
/// from its own generator (the other faults' draws stay as they were):
/// every node in turn, from one drawn first, restarts on the new release
/// (down for 1 to 100 ms; the next goes 0 to 150 ms after it is back).
/// Each as (when, node, how long down).
pub fn draw_upgrade(seed: u64, nodes: usize, per_mille: u32) -> Vec<(u64, usize, u64)> {
    let mut rng = StdRng::seed_from_u64(seed ^ 0x0009_9ade);
    if nodes == 0 || rng.gen_range(0..1000) >= per_mille {
        return Vec::new();
    }
    let (mut at, first) = (rng.gen_range(0..1200), rng.gen_range(0..nodes));
    let mut restarts = Vec::new();
    for i in 0..nodes {
        let down_ms = rng.gen_range(1..=100);
        restarts.push((at, (first + i) % nodes, down_ms));
        at += down_ms + rng.gen_range(0..=150);
    }
    restarts
}

#[cfg(test)]
mod tests {
    use super::*;
    use lock_core::fencing::Fencer;
    use lock_core::kind::Want;
    use lock_core::lock::{self, Admission};
    use lock_core::txn::Txn;

    /// Grants `owner` a permit of 2 on `value` at `now`: the new value.
    fn permit(value: Option<&Value>, owner: &[u8], now: i64, fencer: &mut Fencer) -> Option<Value> {
        let view = View::of(value).expect("a lock");
        let mut txn = Txn::new(view.lock(), now, 0);
        lock::acquire(&mut txn, Want::permit(2), owner, 1_000, Admission::Open, fencer);
        let changes = txn.finish();
        assert_eq!(differs(written(value, &view, &changes).as_ref(), &view, &changes), None);
        written(value, &view, &changes)
    }

    #[test]
    fn the_previous_form_reads_back_and_converts_to_a_hash_with_every_holder() {
        let mut fencer = Fencer::new(0);
        let one = permit(None, b"a", 5, &mut fencer);
        let two = permit(one.as_ref(), b"b", 9, &mut fencer);
        let Some(Value::Hash(_)) = &two else { panic!("{two:?}") };
        let holders = View::of(two.as_ref()).expect("a lock").holders();
        let Some(old) = legacy_form(&holders) else { panic!("a semaphore has a previous form") };
        let Value::String(bytes) = &old else { panic!("{old:?}") };
        assert!(bytes.starts_with(b"LK1|M|2|2|p|5000|1005|1|a|p|"), "{}", String::from_utf8_lossy(bytes));
        let view = View::of(Some(&old)).expect("the module reads it");
        assert!(matches!(view, View::String { legacy: true, .. }));
        assert_eq!(view.holders().records().len(), 2);
        for (owner, hold) in holders.records() {
            assert_eq!(view.holders().hold(owner), Some(*hold));
        }
        // Its first write (a holder leaves) converts it, keeping the other.
        let mut txn = Txn::new(view.lock(), 20, 0);
        assert!(lock::release(&mut txn, b"a"));
        let changes = txn.finish();
        let after = written(Some(&old), &view, &changes);
        assert!(matches!(after, Some(Value::Hash(_))), "{after:?}");
        assert_eq!(differs(after.as_ref(), &view, &changes), None);
        // A stored value that lost a holder, or changed one, is told.
        let Some(Value::Hash(mut fields)) = after.clone() else { panic!("{after:?}") };
        let holder = codec::holder_field(b"b");
        let record = fields.0.get(holder.as_bytes()).cloned().expect("b's record");
        let mut later = codec::decode_record(&record).expect("a record");
        later.deadline_ms += 1;
        fields.0.insert(holder.as_bytes().to_vec(), codec::encode_record(&later).as_bytes().to_vec());
        let changed = differs(Some(&Value::Hash(fields.clone())), &view, &changes).unwrap_or_default();
        assert!(changed.starts_with("b (token ") && changed.contains(" is stored as b ("), "{changed}");
        fields.0.retain(|field, _| field.as_slice() == codec::HEADER_FIELD);
        let gone = differs(Some(&Value::Hash(fields)), &view, &changes);
        assert_eq!(gone.as_deref(), Some("the stored value is not a lock"));
        assert!(differs(None, &view, &changes).is_some_and(|d| d.ends_with("is gone")));
        // A plain lock keeps its form.
        let plain = Holders::single(Kind::Plain, b"p", Hold::new(lock_core::kind::Mode::Write, 7, 50));
        assert_eq!(legacy_form(&plain), None);
    }
}
