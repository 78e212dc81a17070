//! The stored form of a lock: one Redis string per lock key.
//!
//! ```text
//! LK1|<kind>|<fence>|<deadline-ms>|<holds>[;<exit-id>]|<owner>
//! LK1|P|1795312345678001|1795312347678|1|worker-7f3a
//! ```
//!
//! Text, so that `GET key` on any node (or a replica without the module)
//! shows who holds the lock, its fencing token and its absolute deadline.
//! The owner token comes last and runs to the end of the value, so it may hold
//! any bytes (including `|`) without escaping. Integers are plain decimal with
//! no sign or leading zeros; anything else is not a lock (the command answers
//! WRONGTYPE rather than guessing).
//!
//! Locks with several holders (shared/exclusive locks, semaphores; see
//! `group.rs`) list their holders after a header with the kind, the
//! semaphore limit (0 for shared locks) and the count. Each owner is
//! length-prefixed, so it may hold any bytes here too:
//!
//! ```text
//! LK1|<S|M>|<limit>|<count>|{<mode>|<fence>|<deadline-ms>|<owner-len>|<owner>|}
//! LK1|M|3|2|p|1795312345678001|1795312347678|2|w1|p|1795312345678002|1795312347690|2|w2|
//! ```

use super::args::{is_request_id, REQUEST_ID_LEN_MAX, TOKEN_LEN_MAX};
use super::group::{Group, GroupKind, Holder, Mode, HOLDERS_MAX};
use super::lock::{Kind, Lock};

/// Every lock value starts with this; a string that does not is not a lock.
pub const MAGIC: &[u8] = b"LK1|";

/// Longest encoded header: magic, kind, 20-digit fence, 20-digit deadline,
/// 10-digit holds, an exit request id with its `;`, and five separators.
pub const HEADER_LEN_MAX: usize = MAGIC.len() + 2 + 21 + 21 + 11 + 1 + REQUEST_ID_LEN_MAX;

/// A lock ready to be stored: header formatted and owner copied, so it no
/// longer borrows anything (a renewal's owner points into the very value
/// that the write replaces). Lives on the stack: no allocation per write.
pub struct Encoded {
    header: [u8; HEADER_LEN_MAX],
    header_len: usize,
    owner: [u8; TOKEN_LEN_MAX],
    owner_len: usize,
}

impl Encoded {
    pub fn new(lock: &Lock<'_>) -> Encoded {
        let mut e =
            Encoded { header: [0; HEADER_LEN_MAX], header_len: 0, owner: [0; TOKEN_LEN_MAX], owner_len: 0 };
        let mut fence = itoa::Buffer::new();
        let mut deadline = itoa::Buffer::new();
        let mut holds = itoa::Buffer::new();
        // Deadlines before 1970 cannot come from the module clock; clamp
        // rather than write a sign the decoder would reject.
        let exit_sep: &[u8] = if lock.exit_id.is_empty() { b"" } else { b";" };
        let parts: [&[u8]; 11] = [
            MAGIC,
            &[lock.kind.letter(), b'|'],
            fence.format(lock.fence).as_bytes(),
            b"|",
            deadline.format(u64::try_from(lock.deadline_ms).unwrap_or(0)).as_bytes(),
            b"|",
            holds.format(lock.holds).as_bytes(),
            exit_sep,
            lock.exit_id,
            b"|",
            b"",
        ];
        for part in parts {
            let rest = e.header.get_mut(e.header_len..).unwrap_or_default();
            e.header_len += copy_into(rest, part);
        }
        // Owners are bounded by the parser and the decoder; a longer one is
        // cut rather than overflow (it cannot occur).
        e.owner_len = copy_into(&mut e.owner, lock.owner);
        e
    }

    /// The stored value's length in bytes.
    pub fn len(&self) -> usize {
        self.header_len + self.owner_len
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Writes the value into `out`, which must be [`Encoded::len`] long.
    pub fn write_to(&self, out: &mut [u8]) {
        let (head, tail) = out.split_at_mut(self.header_len.min(out.len()));
        copy_into(head, self.header.get(..self.header_len).unwrap_or_default());
        copy_into(tail, self.owner.get(..self.owner_len).unwrap_or_default());
    }

    pub fn to_vec(&self) -> Vec<u8> {
        let mut out = vec![0; self.len()];
        self.write_to(&mut out);
        out
    }
}

/// Copies as much of `src` as fits; returns the count copied.
fn copy_into(dst: &mut [u8], src: &[u8]) -> usize {
    let n = src.len().min(dst.len());
    if let (Some(d), Some(s)) = (dst.get_mut(..n), src.get(..n)) {
        d.copy_from_slice(s);
    }
    n
}

pub fn encode(lock: &Lock<'_>) -> Vec<u8> {
    Encoded::new(lock).to_vec()
}

/// Reads a stored value; `None` when the bytes are not a lock this version
/// wrote.
pub fn decode(value: &[u8]) -> Option<Lock<'_>> {
    let rest = value.strip_prefix(MAGIC)?;
    let (kind, rest) = split_field(rest)?;
    let kind = match kind {
        [letter] => Kind::from_letter(*letter)?,
        _ => return None,
    };
    let (fence, rest) = split_field(rest)?;
    let (deadline, rest) = split_field(rest)?;
    let (holds, owner) = split_field(rest)?;
    // `holds` may carry the last EXIT's request id: `2;req-17`.
    let (holds, exit_id) = match holds.iter().position(|&b| b == b';') {
        Some(at) => {
            let id = holds.get(at + 1..)?;
            if kind != Kind::Reentrant || !is_request_id(id) {
                return None;
            }
            (holds.get(..at)?, id)
        }
        None => (holds, &b""[..]),
    };
    let lock = Lock {
        kind,
        owner,
        fence: parse_decimal(fence)?,
        deadline_ms: i64::try_from(parse_decimal(deadline)?).ok()?,
        holds: u32::try_from(parse_decimal(holds)?).ok()?,
        exit_id,
        cool_down_ms: 0,
    };
    if owner.is_empty() || owner.len() > TOKEN_LEN_MAX || lock.holds == 0 {
        return None;
    }
    Some(lock)
}

/// A decoded lock value of either shape.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Stored<'a> {
    Single(Lock<'a>),
    Group(Group<'a>),
}

/// Reads a stored value of any kind; `None` when it is not a lock.
pub fn decode_any(value: &[u8]) -> Option<Stored<'_>> {
    match value.get(MAGIC.len()).copied().and_then(GroupKind::from_letter) {
        Some(_) => decode_group(value).map(Stored::Group),
        None => decode(value).map(Stored::Single),
    }
}

pub fn encode_group(group: &Group<'_>) -> Vec<u8> {
    let mut out = Vec::with_capacity(16 + group.holders.iter().map(|h| 48 + h.owner.len()).sum::<usize>());
    let mut number = itoa::Buffer::new();
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&[group.kind.letter(), b'|']);
    out.extend_from_slice(number.format(group.limit).as_bytes());
    out.push(b'|');
    out.extend_from_slice(number.format(group.holders.len()).as_bytes());
    out.push(b'|');
    for holder in &group.holders {
        out.extend_from_slice(&[holder.mode.letter(), b'|']);
        out.extend_from_slice(number.format(holder.fence).as_bytes());
        out.push(b'|');
        out.extend_from_slice(number.format(u64::try_from(holder.deadline_ms).unwrap_or(0)).as_bytes());
        out.push(b'|');
        out.extend_from_slice(number.format(holder.owner.len()).as_bytes());
        out.push(b'|');
        out.extend_from_slice(holder.owner);
        out.push(b'|');
    }
    out
}

/// Reads a stored group; `None` unless every field is in the form
/// [`encode_group`] writes and the holders fit the kind's rules.
pub fn decode_group(value: &[u8]) -> Option<Group<'_>> {
    let rest = value.strip_prefix(MAGIC)?;
    let (kind, rest) = split_field(rest)?;
    let kind = match kind {
        [letter] => GroupKind::from_letter(*letter)?,
        _ => return None,
    };
    let (limit, rest) = split_field(rest)?;
    let limit = u32::try_from(parse_decimal(limit)?).ok()?;
    let (count, mut rest) = split_field(rest)?;
    let count = u32::try_from(parse_decimal(count)?).ok()?;
    let limit_ok = match kind {
        GroupKind::Shared => limit == 0,
        GroupKind::Semaphore => (1..=HOLDERS_MAX).contains(&limit) && count <= limit,
    };
    if !limit_ok || !(1..=HOLDERS_MAX).contains(&count) {
        return None;
    }
    let mut holders = Vec::with_capacity(usize::try_from(count).ok()?);
    for _ in 0..count {
        let (mode, tail) = split_field(rest)?;
        let mode = match mode {
            [letter] => Mode::from_letter(*letter)?,
            _ => return None,
        };
        let (fence, tail) = split_field(tail)?;
        let (deadline, tail) = split_field(tail)?;
        let (len, tail) = split_field(tail)?;
        let len = usize::try_from(parse_decimal(len)?).ok()?;
        if !kind.allows(mode) || len == 0 || len > TOKEN_LEN_MAX {
            return None;
        }
        let owner = tail.get(..len)?;
        rest = tail.get(len..)?.strip_prefix(b"|")?;
        let fence = parse_decimal(fence)?;
        let deadline_ms = i64::try_from(parse_decimal(deadline)?).ok()?;
        holders.push(Holder { mode, owner, fence, deadline_ms });
    }
    let writers = holders.iter().filter(|h| h.mode == Mode::Write).count();
    if !rest.is_empty() || (writers > 0 && holders.len() > 1) {
        return None;
    }
    Some(Group { kind, limit, holders, cool_down_ms: 0 })
}

fn split_field(bytes: &[u8]) -> Option<(&[u8], &[u8])> {
    let at = bytes.iter().position(|&b| b == b'|')?;
    Some((bytes.get(..at)?, bytes.get(at + 1..)?))
}

/// Unsigned decimal without sign, spaces or leading zeros (the form
/// `push_decimal` writes); `None` on anything else or on overflow.
fn parse_decimal(bytes: &[u8]) -> Option<u64> {
    match bytes {
        [] => None,
        [b'0'] => Some(0),
        [b'0', ..] => None,
        _ => bytes.iter().try_fold(0u64, |acc, &b| {
            if !b.is_ascii_digit() {
                return None;
            }
            acc.checked_mul(10)?.checked_add(u64::from(b - b'0'))
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sample(owner: &[u8]) -> Lock<'_> {
        Lock {
            kind: Kind::Plain,
            owner,
            fence: 1795312345678001,
            deadline_ms: 1795312347678,
            holds: 1,
            exit_id: b"",
            cool_down_ms: 0,
        }
    }

    #[test]
    fn encodes_readable_text() {
        assert_eq!(encode(&sample(b"worker-7")), b"LK1|P|1795312345678001|1795312347678|1|worker-7".to_vec());
    }

    #[test]
    fn owner_may_contain_separators_and_binary() {
        let owner = b"a|b\x00\xff|";
        let bytes = encode(&sample(owner));
        assert_eq!(decode(&bytes), Some(sample(owner)));
    }

    #[test]
    fn owners_longer_than_the_token_limit_are_not_locks() {
        let mut value = b"LK1|P|1|2|1|".to_vec();
        value.extend(std::iter::repeat_n(b'x', TOKEN_LEN_MAX + 1));
        assert_eq!(decode(&value), None);
    }

    #[test]
    fn reentrant_locks_carry_the_last_exit_id() {
        let lock = Lock { kind: Kind::Reentrant, exit_id: b"r-1", holds: 2, ..sample(b"o") };
        let bytes = encode(&lock);
        assert_eq!(bytes, b"LK1|R|1795312345678001|1795312347678|2;r-1|o".to_vec());
        assert_eq!(decode(&bytes), Some(lock));
        assert_eq!(decode(b"LK1|P|1|2|1;r-1|o"), None, "plain locks have no exit id");
        assert_eq!(decode(b"LK1|R|1|2|1;|o"), None);
    }

    #[test]
    fn rejects_what_it_did_not_write() {
        for bad in [
            &b""[..],
            b"hello",
            b"LK1|",
            b"LK1|X|1|2|1|o",
            b"LK1|P|01|2|1|o",
            b"LK1|P|+1|2|1|o",
            b"LK1|P|1|2|0|o",
            b"LK1|P|1|2|1|",
            b"LK1|P|1|2|4294967296|o",
            b"LK1|P|99999999999999999999|2|1|o",
            b"LK1|P|1|9223372036854775808|1|o",
            b"LK1|P|1| 2|1|o",
            b"LK1|PP|1|2|1|o",
        ] {
            assert_eq!(decode(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
    }

    fn group(kind: GroupKind, limit: u32, holders: &[(Mode, &'static [u8])]) -> Group<'static> {
        let holders = holders
            .iter()
            .enumerate()
            .map(|(i, &(mode, owner))| Holder {
                mode,
                owner,
                fence: 100 + i as u64,
                deadline_ms: 5_000 + i as i64,
            })
            .collect();
        Group { kind, limit, holders, cool_down_ms: 0 }
    }

    #[test]
    fn groups_encode_readable_text_and_round_trip() {
        let g = group(GroupKind::Semaphore, 3, &[(Mode::Permit, b"w1"), (Mode::Permit, b"a|b")]);
        let bytes = encode_group(&g);
        assert_eq!(bytes, b"LK1|M|3|2|p|100|5000|2|w1|p|101|5001|3|a|b|".to_vec());
        assert_eq!(decode_group(&bytes), Some(g.clone()));
        assert_eq!(decode_any(&bytes), Some(Stored::Group(g)));
        let s = group(GroupKind::Shared, 0, &[(Mode::Read, b"r1"), (Mode::Read, b"r2")]);
        assert_eq!(decode_group(&encode_group(&s)), Some(s));
        assert_eq!(decode_any(b"LK1|P|1|2|1|o").map(|s| matches!(s, Stored::Single(_))), Some(true));
    }

    #[test]
    fn groups_that_break_their_kinds_rules_are_not_locks() {
        for bad in [
            &b"LK1|S|1|1|r|1|2|1|o|"[..],      // shared locks have no limit
            b"LK1|M|0|1|p|1|2|1|o|",           // a semaphore needs one
            b"LK1|M|1|2|p|1|2|1|o|p|1|2|1|q|", // more holders than permits
            b"LK1|M|2|1|r|1|2|1|o|",           // readers belong to shared locks
            b"LK1|S|0|2|w|1|2|1|o|r|1|2|1|q|", // a writer is alone
            b"LK1|S|0|0|",                     // empty groups are deleted
            b"LK1|S|0|1|r|1|2|2|o|",           // owner shorter than its length
            b"LK1|S|0|1|r|1|2|1|o|x",          // trailing bytes
            b"LK1|S|0|1|r|1|2|0||",            // empty owner
            b"LK1|S|0|2|r|1|2|1|o|",           // fewer records than the count
            b"LK1|M|1001|1|p|1|2|1|o|",        // limit above the bound
        ] {
            assert_eq!(decode_group(bad), None, "{:?}", String::from_utf8_lossy(bad));
            assert_eq!(decode_any(bad), None);
        }
    }

    proptest! {
        #[test]
        fn groups_round_trip(semaphore: bool, owners in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 1..40), 1..20), fence: u64, deadline in 0i64..=i64::MAX) {
            let (kind, mode, limit) = if semaphore { (GroupKind::Semaphore, Mode::Permit, 20) } else { (GroupKind::Shared, Mode::Read, 0) };
            let holders = owners.iter().map(|o| Holder { mode, owner: o, fence, deadline_ms: deadline }).collect();
            let g = Group { kind, limit, holders, cool_down_ms: 0 };
            let bytes = encode_group(&g);
            prop_assert_eq!(decode_group(&bytes), Some(g));
        }

        #[test]
        fn group_decoding_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..120)) {
            for prefix in [&b"LK1|S|0|1|"[..], b"LK1|M|3|2|", b"LK1|"] {
                let mut v = prefix.to_vec();
                v.extend_from_slice(&bytes);
                let _ = decode_any(&v);
            }
        }

        #[test]
        fn round_trips(reentrant: bool, fence: u64, deadline in 0i64..=i64::MAX, holds in 1u32.., owner in proptest::collection::vec(any::<u8>(), 1..64)) {
            let kind = if reentrant { Kind::Reentrant } else { Kind::Plain };
            let exit_id: &[u8] = if reentrant && fence % 2 == 0 { b"req-17" } else { b"" };
            let lock = Lock { kind, owner: &owner, fence, deadline_ms: deadline, holds, exit_id, cool_down_ms: 0 };
            let bytes = encode(&lock);
            prop_assert_eq!(decode(&bytes), Some(lock));
        }

        #[test]
        fn never_panics_on_garbage(bytes in proptest::collection::vec(any::<u8>(), 0..80)) {
            let _ = decode(&bytes);
            let mut prefixed = MAGIC.to_vec();
            prefixed.extend_from_slice(&bytes);
            let _ = decode(&prefixed);
        }
    }
}
