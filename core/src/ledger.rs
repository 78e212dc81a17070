//! The node's ledger: what a node keeps outside its lock keys and must not
//! lose across a restart, an AOF rewrite or a replica's full sync: its
//! fencing counter and its removal quarantines in force. The module saves
//! it with every RDB, and so in every rewritten AOF's RDB preamble and every
//! full sync, and reads it back before the keys (docs/design.md, "Where the
//! node's state lives"). This file is its byte form, with no Redis in it.
//!
//! The form: a version byte, the counter's kept value and its last token
//! (two u64), the end of the start-up or failover quarantine in force (i64,
//! 0 for none), then the key quarantines
//! and the database quarantines, each a count (u32) and entries, and (from
//! version 2) the slot waits after imports (`imports.rs`): a count (u32)
//! and, each, a slot (u16) and its end (i64). Integers
//! are little-endian; a key is a length (u32) and its bytes; a cause is a
//! tag byte and, for `Changed` its event (a length and bytes), for
//! `Swapped` the other database (i32). Times are module-clock instants (wall
//! ms), as every deadline the module writes.

use crate::forgetting::{Cause, Entry};

/// The form's version: a ledger of another version is refused, never
/// guessed at. Version 1 (the first release with a ledger) is read too: it
/// has no slot waits.
pub const VERSION: u8 = 2;
const VERSION_WITHOUT_SLOT_WAITS: u8 = 1;

/// A ledger no real node writes is refused past this many entries (a key
/// quarantine per key beyond `KEY_QUARANTINES_MAX` turns into its
/// database's).
const ENTRIES_MAX: u32 = 1_000_000;

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Ledger {
    /// The fencing counter's kept value ([`crate::fencing::Fencer::kept`]):
    /// at or above every token issued until the next kept raise. A start
    /// from the node's own `always` AOF starts its counter here.
    pub kept: u64,
    /// The last token issued or raise taken ([`crate::fencing::Fencer::last`]):
    /// a start that may have lost writes (it waits out its quarantine), a
    /// full sync and a reload start from here, on the clock rather than up
    /// to a second ahead of it.
    pub issued: u64,
    /// When the node's start-up or failover quarantine in force ends
    /// (module clock), 0 if none is: a start from an `always` AOF written
    /// during a quarantine goes on with it, since the writes that
    /// quarantine covers are not in that AOF either.
    pub quarantine_until_ms: i64,
    /// The removal quarantines in force (of keys and of databases).
    pub quarantines: Vec<Entry>,
    /// The slots waiting after an import: (slot, end), the end
    /// `imports::OPEN` for an import still running.
    pub slot_waits: Vec<(u16, i64)>,
}

const TAG_EVICTED: u8 = 1;
const TAG_EXPIRED: u8 = 2;
const TAG_CHANGED: u8 = 3;
const TAG_FLUSHED: u8 = 4;
const TAG_SWAPPED: u8 = 5;
const TAG_TOO_MANY_KEYS: u8 = 6;
const TAG_IMPORTED: u8 = 7;

impl Ledger {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = vec![VERSION];
        out.extend_from_slice(&self.kept.to_le_bytes());
        out.extend_from_slice(&self.issued.to_le_bytes());
        out.extend_from_slice(&self.quarantine_until_ms.to_le_bytes());
        let (keys, dbs): (Vec<&Entry>, Vec<&Entry>) = self.quarantines.iter().partition(|e| e.key.is_some());
        for part in [keys, dbs] {
            put_u32(&mut out, u32::try_from(part.len()).unwrap_or(u32::MAX));
            for entry in part {
                out.extend_from_slice(&entry.db.to_le_bytes());
                if let Some(key) = &entry.key {
                    put_bytes(&mut out, key);
                }
                out.extend_from_slice(&entry.until_ms.to_le_bytes());
                put_cause(&mut out, &entry.cause);
            }
        }
        put_u32(&mut out, u32::try_from(self.slot_waits.len()).unwrap_or(u32::MAX));
        for (slot, until_ms) in &self.slot_waits {
            out.extend_from_slice(&slot.to_le_bytes());
            out.extend_from_slice(&until_ms.to_le_bytes());
        }
        out
    }

    pub fn decode(bytes: &[u8]) -> Result<Ledger, String> {
        let mut r = Reader { bytes, at: 0 };
        let version = r.u8()?;
        if version != VERSION && version != VERSION_WITHOUT_SLOT_WAITS {
            return Err(format!("a lock ledger of version {version}; this module reads version {VERSION}"));
        }
        let kept = u64::from_le_bytes(r.array()?);
        let issued = u64::from_le_bytes(r.array()?);
        let quarantine_until_ms = i64::from_le_bytes(r.array()?);
        let mut quarantines = Vec::new();
        for keyed in [true, false] {
            let count = r.u32()?;
            if count > ENTRIES_MAX {
                return Err(format!("a lock ledger with {count} entries"));
            }
            for _ in 0..count {
                let db = i32::from_le_bytes(r.array()?);
                let key = if keyed { Some(r.bytes()?.to_vec()) } else { None };
                let until_ms = i64::from_le_bytes(r.array()?);
                let cause = r.cause()?;
                quarantines.push(Entry { db, key, until_ms, cause });
            }
        }
        let mut slot_waits = Vec::new();
        if version != VERSION_WITHOUT_SLOT_WAITS {
            let count = r.u32()?;
            if count > u32::from(lock_protocol::slot::SLOTS) {
                return Err(format!("a lock ledger with {count} slot waits"));
            }
            for _ in 0..count {
                slot_waits.push((u16::from_le_bytes(r.array()?), i64::from_le_bytes(r.array()?)));
            }
        }
        if r.at != bytes.len() {
            return Err(format!("{} bytes after the lock ledger", bytes.len() - r.at));
        }
        Ok(Ledger { kept, issued, quarantine_until_ms, quarantines, slot_waits })
    }
}

fn put_u32(out: &mut Vec<u8>, n: u32) {
    out.extend_from_slice(&n.to_le_bytes());
}

fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    put_u32(out, u32::try_from(bytes.len()).unwrap_or(u32::MAX));
    out.extend_from_slice(bytes);
}

fn put_cause(out: &mut Vec<u8>, cause: &Cause) {
    match cause {
        Cause::Evicted => out.push(TAG_EVICTED),
        Cause::Expired => out.push(TAG_EXPIRED),
        Cause::Changed(event) => {
            out.push(TAG_CHANGED);
            put_bytes(out, event.as_bytes());
        }
        Cause::Flushed => out.push(TAG_FLUSHED),
        Cause::Swapped(other) => {
            out.push(TAG_SWAPPED);
            out.extend_from_slice(&other.to_le_bytes());
        }
        Cause::TooManyKeys => out.push(TAG_TOO_MANY_KEYS),
        Cause::Imported => out.push(TAG_IMPORTED),
    }
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        let end = self.at.checked_add(n).filter(|&end| end <= self.bytes.len());
        let Some(end) = end else { return Err("a lock ledger cut short".into()) };
        let out = self.bytes.get(self.at..end).ok_or("a lock ledger cut short")?;
        self.at = end;
        Ok(out)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], String> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }

    fn u8(&mut self) -> Result<u8, String> {
        Ok(u8::from_le_bytes(self.array()?))
    }

    fn u32(&mut self) -> Result<u32, String> {
        Ok(u32::from_le_bytes(self.array()?))
    }

    fn bytes(&mut self) -> Result<&'a [u8], String> {
        let len = usize::try_from(self.u32()?).map_err(|_| "a lock ledger entry too long".to_string())?;
        self.take(len)
    }

    fn cause(&mut self) -> Result<Cause, String> {
        Ok(match self.u8()? {
            TAG_EVICTED => Cause::Evicted,
            TAG_EXPIRED => Cause::Expired,
            TAG_CHANGED => Cause::Changed(String::from_utf8_lossy(self.bytes()?).into()),
            TAG_FLUSHED => Cause::Flushed,
            TAG_SWAPPED => Cause::Swapped(i32::from_le_bytes(self.array()?)),
            TAG_TOO_MANY_KEYS => Cause::TooManyKeys,
            TAG_IMPORTED => Cause::Imported,
            tag => return Err(format!("a lock ledger with an unknown cause {tag}")),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn cause() -> impl Strategy<Value = Cause> {
        prop_oneof![
            Just(Cause::Evicted),
            Just(Cause::Expired),
            "[a-z_]{0,12}".prop_map(|e| Cause::Changed(e.into())),
            Just(Cause::Flushed),
            any::<i32>().prop_map(Cause::Swapped),
            Just(Cause::TooManyKeys),
            Just(Cause::Imported),
        ]
    }

    fn entry() -> impl Strategy<Value = Entry> {
        (
            any::<i32>(),
            proptest::option::of(proptest::collection::vec(any::<u8>(), 0..20)),
            any::<i64>(),
            cause(),
        )
            .prop_map(|(db, key, until_ms, cause)| Entry { db, key, until_ms, cause })
    }

    proptest! {
        #[test]
        fn a_ledger_reads_back_as_written(kept in any::<u64>(), issued in any::<u64>(), quarantine_until_ms in any::<i64>(), quarantines in proptest::collection::vec(entry(), 0..20), slot_waits in proptest::collection::vec((any::<u16>(), any::<i64>()), 0..8)) {
            let ledger = Ledger { kept, issued, quarantine_until_ms, quarantines, slot_waits: slot_waits.clone() };
            let back = Ledger::decode(&ledger.encode()).unwrap();
            // Keys first, then databases, each in their order.
            let (mut keys, dbs): (Vec<Entry>, Vec<Entry>) = ledger.quarantines.into_iter().partition(|e| e.key.is_some());
            keys.extend(dbs);
            prop_assert_eq!(back, Ledger { kept, issued, quarantine_until_ms, quarantines: keys, slot_waits });
        }

        #[test]
        fn any_bytes_are_read_or_refused_without_a_panic(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = Ledger::decode(&bytes);
        }
    }

    #[test]
    fn a_cut_or_padded_or_other_version_ledger_is_refused() {
        let ledger = Ledger {
            kept: 7,
            issued: 6,
            quarantine_until_ms: 5,
            quarantines: vec![Entry { db: 0, key: Some(b"k".to_vec()), until_ms: 9, cause: Cause::Evicted }],
            slot_waits: vec![(12, 40)],
        };
        let bytes = ledger.encode();
        for cut in 0..bytes.len() {
            assert!(Ledger::decode(&bytes[..cut]).is_err(), "cut at {cut}");
        }
        let mut padded = bytes.clone();
        padded.push(0);
        assert!(Ledger::decode(&padded).is_err());
        let mut other = bytes;
        other[0] = VERSION + 1;
        assert!(Ledger::decode(&other).unwrap_err().contains("version"));
    }

    /// The first release's ledgers (version 1: no slot waits) are read.
    #[test]
    fn a_version_1_ledger_reads_with_no_slot_waits() {
        let ledger =
            Ledger { kept: 7, issued: 6, quarantine_until_ms: 5, quarantines: vec![], slot_waits: vec![] };
        let mut bytes = ledger.encode();
        bytes.truncate(bytes.len() - 4);
        bytes[0] = VERSION_WITHOUT_SLOT_WAITS;
        assert_eq!(Ledger::decode(&bytes).unwrap(), ledger);
        bytes.extend_from_slice(&0u32.to_le_bytes());
        assert!(Ledger::decode(&bytes).is_err(), "a version 1 ledger has nothing after its quarantines");
    }
}
