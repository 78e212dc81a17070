//! The stored forms of a lock. All text, so that `GET` / `HGETALL` on any
//! node (or a replica without the module) shows who holds a lock, its
//! fencing token and its absolute deadline. Integers are plain decimal with
//! no sign or leading zeros; anything else is not a lock (the command
//! answers WRONGTYPE rather than guessing).
//!
//! **Plain and reentrant locks: one string** (one holder, so a grant writes
//! one small value, like `SET NX PX`):
//!
//! ```text
//! LK1|<kind>|<fence>|<deadline-ms>|<holds>[;<exit-id>]|<owner>
//! LK1|P|1795312345678001|1795312347678|1|worker-7f3a
//! ```
//! The owner comes last and runs to the end of the value, so it may hold
//! any bytes (including `|`) without escaping.
//!
//! **Shared locks and semaphores: one hash**, with a field per holder, so
//! that a grant, release or renewal writes (and replicates) that holder's
//! fields only, whatever the number of holders:
//!
//! ```text
//! lock        LK2|<S|M>|<limit>|<mode>|<earliest-deadline-ms>|<top-fence>
//! h|<owner>   <mode>|<fence>|<deadline-ms>
//! f|<fence>   <owner>
//! ```
//! `f|` indexes holders by token (LOCK.CHECK). `earliest-deadline-ms` is a
//! lower bound of the holders' deadlines (when the next sweep of expired
//! holders is due) and `top-fence` at least the highest token stored.
//!
//! **The previous release's form of shared locks and semaphores** (one
//! string listing every holder) is still read, and converted to the hash on
//! its first write:
//!
//! ```text
//! LK1|<S|M>|<limit>|<count>|{<mode>|<fence>|<deadline-ms>|<owner-len>|<owner>|}
//! ```

use super::args::{is_request_id, TOKEN_LEN_MAX};
use super::kind::REQUEST_ID_LEN_MAX;
use super::kind::{ExitId, Hold, Kind, Mode, Shape, HOLDERS_MAX};
use super::memory::{Holders, Single};

/// Every string lock value starts with this; a string that does not is not
/// a lock.
pub const MAGIC: &[u8] = b"LK1|";

/// The header field of a hash lock, and its value's prefix.
pub const HEADER_FIELD: &[u8] = b"lock";
pub const HEADER_MAGIC: &[u8] = b"LK2|";

/// Field-name prefixes of a hash lock's per-holder fields.
pub const HOLDER_PREFIX: &[u8] = b"h|";
pub const FENCE_PREFIX: &[u8] = b"f|";

/// Longest encoded header of a string lock: magic, kind, 20-digit fence,
/// 20-digit deadline, 10-digit holds, an exit request id with its `;`, and
/// the separators.
pub const HEADER_LEN_MAX: usize = MAGIC.len() + 2 + 21 + 21 + 11 + 1 + REQUEST_ID_LEN_MAX;

/// Longest value of a one-holder lock.
pub const SINGLE_LEN_MAX: usize = HEADER_LEN_MAX + TOKEN_LEN_MAX;

/// A small text buffer on the stack: encoded values never allocate.
pub struct Text<const N: usize> {
    bytes: [u8; N],
    len: usize,
}

impl<const N: usize> Text<N> {
    fn new() -> Self {
        Text { bytes: [0; N], len: 0 }
    }

    /// Appends as much of `part` as fits (the bounds above make it all fit).
    fn push(&mut self, part: &[u8]) -> &mut Self {
        let room = self.bytes.get_mut(self.len..).unwrap_or_default();
        let n = part.len().min(room.len());
        if let (Some(dst), Some(src)) = (room.get_mut(..n), part.get(..n)) {
            dst.copy_from_slice(src);
        }
        self.len += n;
        self
    }

    fn number(&mut self, n: u64) -> &mut Self {
        let mut buffer = itoa::Buffer::new();
        self.push(buffer.format(n).as_bytes())
    }

    pub fn as_bytes(&self) -> &[u8] {
        self.bytes.get(..self.len).unwrap_or_default()
    }
}

/// Deadlines before 1970 cannot come from the module clock; clamp rather
/// than write a sign the decoder would reject.
fn unsigned(ms: i64) -> u64 {
    u64::try_from(ms).unwrap_or(0)
}

/// The string value of a plain or reentrant lock.
pub fn encode_single(kind: Kind, owner: &[u8], hold: &Hold) -> Text<SINGLE_LEN_MAX> {
    let mut out = Text::new();
    out.push(MAGIC).push(&[kind.letter(), b'|']).number(hold.fence).push(b"|");
    out.number(unsigned(hold.deadline_ms)).push(b"|").number(u64::from(hold.holds));
    if !hold.exit_id.is_empty() {
        out.push(b";").push(hold.exit_id.as_bytes());
    }
    out.push(b"|").push(owner);
    out
}

/// Reads a plain or reentrant lock's string value.
pub fn decode_single(value: &[u8]) -> Option<Single<'_>> {
    let rest = value.strip_prefix(MAGIC)?;
    let (kind, rest) = split_field(rest)?;
    let kind = match kind {
        [letter] => Kind::from_letter(*letter).filter(|k| k.is_single())?,
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
            (holds.get(..at)?, ExitId::new(id)?)
        }
        None => (holds, ExitId::NONE),
    };
    let hold = Hold {
        mode: Mode::Write,
        fence: parse_decimal(fence)?,
        deadline_ms: i64::try_from(parse_decimal(deadline)?).ok()?,
        holds: u32::try_from(parse_decimal(holds)?).ok()?,
        exit_id,
    };
    if owner.is_empty() || owner.len() > TOKEN_LEN_MAX || hold.holds == 0 {
        return None;
    }
    Some(Single { kind, owner, hold })
}

/// A lock stored as a string: one holder, or the previous release's form
/// of a shared lock or semaphore.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StringLock<'a> {
    Single(Single<'a>),
    Legacy(Holders),
}

/// Reads a string value of either form; `None` when it is not a lock.
#[inline]
pub fn decode_string(value: &[u8]) -> Option<StringLock<'_>> {
    match value.get(MAGIC.len()).copied().and_then(Kind::from_letter) {
        Some(kind) if !kind.is_single() => decode_legacy_group(value).map(StringLock::Legacy),
        _ => decode_single(value).map(StringLock::Single),
    }
}

/// Reads the previous release's string form of a shared lock or semaphore;
/// `None` unless every field is in the form it wrote and the holders fit
/// the kind's rules.
pub fn decode_legacy_group(value: &[u8]) -> Option<Holders> {
    let (kind, limit, rest) = group_kind_and_limit(value.strip_prefix(MAGIC)?)?;
    let (count, mut rest) = split_field(rest)?;
    let count = u32::try_from(parse_decimal(count)?).ok()?;
    if !limit_fits(kind, limit)
        || !(1..=HOLDERS_MAX).contains(&count)
        || (kind == Kind::Semaphore && count > limit)
    {
        return None;
    }
    let mut records: Vec<(Vec<u8>, Hold)> = Vec::with_capacity(usize::try_from(count).ok()?);
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
        let deadline_ms = i64::try_from(parse_decimal(deadline)?).ok()?;
        if records.iter().any(|(o, _)| o.as_slice() == owner) {
            return None;
        }
        records.push((owner.to_vec(), Hold::new(mode, parse_decimal(fence)?, deadline_ms)));
    }
    let writers = records.iter().filter(|(_, h)| h.mode == Mode::Write).count();
    if !rest.is_empty() || (writers > 0 && records.len() > 1) {
        return None;
    }
    unique_tokens(&mut records);
    Some(Holders::from_records(Shape { kind, limit }, records))
}

/// The previous release's LOCK.FENCE could raise two holders of one lock to
/// the same token; this release keeps tokens unique among a lock's holders
/// (its stored form indexes holders by token). A later holder whose token
/// repeats an earlier one's takes the nearest free token below it, as if
/// that FENCE had not raised it (LOCK.CHECK of the repeated token still
/// answers 1 through the holder that keeps it).
fn unique_tokens(records: &mut [(Vec<u8>, Hold)]) {
    for at in 1..records.len() {
        let repeats = |fence: u64, records: &[(Vec<u8>, Hold)]| {
            records.iter().enumerate().any(|(i, (_, h))| i != at && h.fence == fence)
        };
        let Some(mut fence) = records.get(at).map(|(_, h)| h.fence) else { continue };
        if !records.get(..at).is_some_and(|earlier| earlier.iter().any(|(_, h)| h.fence == fence)) {
            continue;
        }
        while fence > 0 && repeats(fence, records) {
            fence -= 1;
        }
        if let Some((_, hold)) = records.get_mut(at) {
            hold.fence = fence;
        }
    }
}

/// The `<S|M>|<limit>|` that starts both group forms, and what follows.
fn group_kind_and_limit(rest: &[u8]) -> Option<(Kind, u32, &[u8])> {
    let (kind, rest) = split_field(rest)?;
    let kind = match kind {
        [letter] => Kind::from_letter(*letter).filter(|k| !k.is_single())?,
        _ => return None,
    };
    let (limit, rest) = split_field(rest)?;
    Some((kind, u32::try_from(parse_decimal(limit)?).ok()?, rest))
}

/// A shared lock has no limit; a semaphore has 1..=HOLDERS_MAX permits.
fn limit_fits(kind: Kind, limit: u32) -> bool {
    match kind {
        Kind::Semaphore => (1..=HOLDERS_MAX).contains(&limit),
        _ => limit == 0,
    }
}

/// The lock-wide fields of a hash lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    pub shape: Shape,
    pub mode: Mode,
    /// Lower bound of the holders' deadlines.
    pub earliest_ms: i64,
    /// At least the highest fencing token stored.
    pub top_fence: u64,
}

/// A lock with more holders than this pads its header with dots to
/// [`HASH_HEADER_LEN`] bytes, longer than Redis' default
/// `hash-max-listpack-value` (64): Redis then stores the hash as a hash
/// table, where a field costs O(1) to read or write. Below it, the hash
/// stays a listpack (one compact list, about half the memory per holder),
/// whose every field access scans the list: measured (callgrind), a call
/// cost about 25% more with 11 holders than in a hash table and 4x more
/// with 100, and Redis keeps up to `hash-max-listpack-entries` (512)
/// fields that way. A few holders (the common case of one or two readers)
/// stay compact.
pub const LISTPACK_HOLDERS_MAX: u32 = 4;

pub const HASH_HEADER_LEN: usize = 80;

pub const HASH_HEADER_LEN_MAX: usize = HEADER_MAGIC.len() + 2 + 11 + 2 + 21 + 21 + HASH_HEADER_LEN;

/// The header of a hash lock with `holders` holders.
pub fn encode_header(header: &Header, holders: u32) -> Text<HASH_HEADER_LEN_MAX> {
    let mut out = Text::new();
    out.push(HEADER_MAGIC).push(&[header.shape.kind.letter(), b'|']).number(u64::from(header.shape.limit));
    out.push(&[b'|', header.mode.letter(), b'|']).number(unsigned(header.earliest_ms)).push(b"|");
    out.number(header.top_fence).push(b"|");
    while holders > LISTPACK_HOLDERS_MAX && out.len < HASH_HEADER_LEN {
        out.push(b".");
    }
    out
}

pub fn decode_header(value: &[u8]) -> Option<Header> {
    let (kind, limit, rest) = group_kind_and_limit(value.strip_prefix(HEADER_MAGIC)?)?;
    let (mode, rest) = split_field(rest)?;
    let mode = match mode {
        [letter] => Mode::from_letter(*letter).filter(|m| kind.allows(*m))?,
        _ => return None,
    };
    let (earliest, rest) = split_field(rest)?;
    let (top, padding) = split_field(rest)?;
    if !limit_fits(kind, limit) || !padding.iter().all(|&b| b == b'.') {
        return None;
    }
    Some(Header {
        shape: Shape { kind, limit },
        mode,
        earliest_ms: i64::try_from(parse_decimal(earliest)?).ok()?,
        top_fence: parse_decimal(top)?,
    })
}

pub const RECORD_LEN_MAX: usize = 2 + 21 + 21;

/// One holder's field value in a hash lock.
pub fn encode_record(hold: &Hold) -> Text<RECORD_LEN_MAX> {
    let mut out = Text::new();
    out.push(&[hold.mode.letter(), b'|']).number(hold.fence).push(b"|").number(unsigned(hold.deadline_ms));
    out
}

pub fn decode_record(value: &[u8]) -> Option<Hold> {
    let (mode, rest) = split_field(value)?;
    let mode = match mode {
        [letter] => Mode::from_letter(*letter)?,
        _ => return None,
    };
    let (fence, deadline) = split_field(rest)?;
    Some(Hold::new(mode, parse_decimal(fence)?, i64::try_from(parse_decimal(deadline)?).ok()?))
}

pub const HOLDER_FIELD_LEN_MAX: usize = HOLDER_PREFIX.len() + TOKEN_LEN_MAX;
pub const FENCE_FIELD_LEN_MAX: usize = FENCE_PREFIX.len() + 20;

pub fn holder_field(owner: &[u8]) -> Text<HOLDER_FIELD_LEN_MAX> {
    let mut out = Text::new();
    out.push(HOLDER_PREFIX).push(owner);
    out
}

pub fn fence_field(fence: u64) -> Text<FENCE_FIELD_LEN_MAX> {
    let mut out = Text::new();
    out.push(FENCE_PREFIX).number(fence);
    out
}

/// What a hash field of a lock is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Field<'a> {
    Header,
    Holder(&'a [u8]),
    Fence(u64),
}

pub fn parse_field(name: &[u8]) -> Option<Field<'_>> {
    if name == HEADER_FIELD {
        return Some(Field::Header);
    }
    if let Some(owner) = name.strip_prefix(HOLDER_PREFIX) {
        return (!owner.is_empty() && owner.len() <= TOKEN_LEN_MAX).then_some(Field::Holder(owner));
    }
    name.strip_prefix(FENCE_PREFIX).and_then(parse_decimal).map(Field::Fence)
}

fn split_field(bytes: &[u8]) -> Option<(&[u8], &[u8])> {
    let at = bytes.iter().position(|&b| b == b'|')?;
    Some((bytes.get(..at)?, bytes.get(at + 1..)?))
}

/// Unsigned decimal without sign, spaces or leading zeros (the form the
/// encoders write); `None` on anything else or on overflow. On the hot path
/// (three numbers per lock read, 13-16 digits each): eight digits at a
/// time ([`eight_digits`]), about a third of the instructions of a loop
/// over the digits. Up to 19 digits cannot overflow a u64, so only the
/// 20-digit case pays for checked arithmetic.
fn parse_decimal(bytes: &[u8]) -> Option<u64> {
    const NO_OVERFLOW_DIGITS: usize = 19;
    match bytes {
        [] => return None,
        [b'0'] => return Some(0),
        [b'0', ..] => return None,
        _ => {}
    }
    if bytes.len() > NO_OVERFLOW_DIGITS {
        let digit = |b: u8| b.is_ascii_digit().then(|| u64::from(b - b'0'));
        return bytes.iter().try_fold(0u64, |acc, &b| acc.checked_mul(10)?.checked_add(digit(b)?));
    }
    let mut value = 0u64;
    let mut rest = bytes;
    while let Some((chunk, tail)) = rest.split_first_chunk::<8>() {
        value = value * 100_000_000 + eight_digits(u64::from_le_bytes(*chunk))?;
        rest = tail;
    }
    for &b in rest {
        let digit = b.wrapping_sub(b'0');
        if digit > 9 {
            return None;
        }
        value = value * 10 + u64::from(digit);
    }
    Some(value)
}

/// The value of eight ASCII digits read as a little-endian u64 (the first
/// digit in the lowest byte); `None` unless every byte is `0`-`9`. Each
/// byte of a digit is 0x30-0x39: its high nibble is 3, and adding 6 keeps
/// it 3 (0x3a-0x3f would carry into 4). Then pairs, quads and the eight
/// digits are combined with one multiply each.
fn eight_digits(chunk: u64) -> Option<u64> {
    const HIGH: u64 = 0xf0f0_f0f0_f0f0_f0f0;
    const THREES: u64 = 0x3030_3030_3030_3030;
    if chunk & HIGH != THREES || chunk.wrapping_add(0x0606_0606_0606_0606) & HIGH != THREES {
        return None;
    }
    let digits = chunk - THREES;
    // Each 16-bit lane: 10 * its first digit + its second (no lane
    // overflows into the next: at most 99, 9,999, 99,999,999).
    let pairs = (digits.wrapping_mul(1 + (10 << 8)) >> 8) & 0x00ff_00ff_00ff_00ff;
    // Each 32-bit lane: 100 * its first pair + its second.
    let quads = (pairs.wrapping_mul(1 + (100 << 16)) >> 16) & 0x0000_ffff_0000_ffff;
    Some(quads.wrapping_mul(1 + (10_000 << 32)) >> 32)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::txn::Stored;
    use proptest::prelude::*;

    fn hold() -> Hold {
        Hold::new(Mode::Write, 1795312345678001, 1795312347678)
    }

    fn encode(kind: Kind, owner: &[u8], hold: &Hold) -> Vec<u8> {
        encode_single(kind, owner, hold).as_bytes().to_vec()
    }

    #[test]
    fn encodes_readable_text() {
        assert_eq!(
            encode(Kind::Plain, b"worker-7", &hold()),
            b"LK1|P|1795312345678001|1795312347678|1|worker-7"
        );
    }

    #[test]
    fn the_longest_single_value_is_stored_whole() {
        // Every field at its largest: a 20-digit token, the last
        // representable deadline, a 10-digit hold count, a 64-byte exit id
        // and a 256-byte owner. Encoding must not cut any of it off.
        let h = Hold {
            mode: Mode::Write,
            fence: u64::MAX,
            deadline_ms: i64::MAX,
            holds: u32::MAX,
            exit_id: ExitId::new(&[b'x'; REQUEST_ID_LEN_MAX]).unwrap(),
        };
        let owner = [b'o'; TOKEN_LEN_MAX];
        let bytes = encode(Kind::Reentrant, &owner, &h);
        assert_eq!(bytes.len(), 4 + 2 + 21 + 20 + 11 + 1 + REQUEST_ID_LEN_MAX + TOKEN_LEN_MAX);
        assert_eq!(decode_single(&bytes), Some(Single { kind: Kind::Reentrant, owner: &owner, hold: h }));
    }

    #[test]
    fn owner_may_contain_separators_and_binary() {
        let owner = b"a|b\x00\xff|";
        let bytes = encode(Kind::Plain, owner, &hold());
        assert_eq!(decode_single(&bytes), Some(Single { kind: Kind::Plain, owner, hold: hold() }));
    }

    #[test]
    fn owners_longer_than_the_token_limit_are_not_locks() {
        let mut value = b"LK1|P|1|2|1|".to_vec();
        value.extend(std::iter::repeat_n(b'x', TOKEN_LEN_MAX + 1));
        assert_eq!(decode_single(&value), None);
    }

    #[test]
    fn reentrant_locks_carry_the_last_exit_id() {
        let h = Hold { holds: 2, exit_id: ExitId::new(b"r-1").unwrap(), ..hold() };
        let bytes = encode(Kind::Reentrant, b"o", &h);
        assert_eq!(bytes, b"LK1|R|1795312345678001|1795312347678|2;r-1|o".to_vec());
        assert_eq!(decode_single(&bytes), Some(Single { kind: Kind::Reentrant, owner: b"o", hold: h }));
        assert_eq!(decode_single(b"LK1|P|1|2|1;r-1|o"), None, "plain locks have no exit id");
        assert_eq!(decode_single(b"LK1|R|1|2|1;|o"), None);
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
            b"LK1|S|1|2|1|o",
            b"LK1|P|18446744073709551616|2|1|o",
            b"LK1|P|99999999999999999999|2|1|o",
            b"LK1|P|1a|2|1|o",
        ] {
            assert_eq!(decode_single(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn the_previous_group_form_is_still_read() {
        let bytes = b"LK1|M|3|2|p|100|5000|2|w1|p|101|5001|3|a|b|";
        let Some(StringLock::Legacy(g)) = decode_string(bytes) else { panic!() };
        assert_eq!(g.shape(), Some(Shape { kind: Kind::Semaphore, limit: 3 }));
        assert_eq!(g.hold(b"a|b"), Some(Hold::new(Mode::Permit, 101, 5001)));
        assert_eq!((g.count(), g.earliest_deadline_ms(), g.top_fence()), (2, 5000, 101));
        let Some(StringLock::Legacy(s)) = decode_string(b"LK1|S|0|2|r|1|2|2|r1|r|3|4|2|r2|") else {
            panic!()
        };
        assert_eq!((s.mode(), s.count()), (Some(Mode::Read), 2));
        assert!(matches!(decode_string(b"LK1|P|1|2|1|o"), Some(StringLock::Single(_))));
    }

    #[test]
    fn repeated_tokens_in_the_previous_form_are_made_unique() {
        let Some(StringLock::Legacy(g)) = decode_string(b"LK1|S|0|3|r|9|5|1|a|r|9|5|1|b|r|8|5|1|c|") else {
            panic!()
        };
        let tokens: Vec<u64> =
            ["a", "b", "c"].iter().filter_map(|o| g.hold(o.as_bytes())).map(|h| h.fence).collect();
        assert_eq!(tokens, vec![9, 7, 8], "b repeated a's token: it takes the nearest free one below");
    }

    #[test]
    fn previous_group_values_at_their_limits_are_read() {
        // What the previous release could store must still be a lock after
        // the upgrade: a full semaphore, a shared lock held by its writer
        // alone, an owner of the longest token.
        let full = decode_legacy_group(b"LK1|M|2|2|p|1|5|1|a|p|2|5|1|b|").map(|g| g.count());
        assert_eq!(full, Some(2), "as many holders as permits");
        let writer = decode_legacy_group(b"LK1|S|0|1|w|1|5|1|a|").map(|g| (g.mode(), g.count()));
        assert_eq!(writer, Some((Some(Mode::Write), 1)), "a writer alone");
        let owner = vec![b'o'; TOKEN_LEN_MAX];
        let value = |owner: &[u8]| {
            let mut v = format!("LK1|S|0|1|r|1|5|{}|", owner.len()).into_bytes();
            v.extend_from_slice(owner);
            v.push(b'|');
            v
        };
        let longest = decode_legacy_group(&value(&owner)).and_then(|g| g.hold(&owner));
        assert_eq!(longest, Some(Hold::new(Mode::Read, 1, 5)));
        assert_eq!(decode_legacy_group(&value(&[b'o'; TOKEN_LEN_MAX + 1])), None, "longer than any token");
    }

    #[test]
    fn making_tokens_unique_never_raises_one() {
        // No free token below a repeated one: it stops at 0 (a value the
        // previous release never wrote, as its tokens follow the clock)
        // rather than wrap around to the largest token.
        let Some(StringLock::Legacy(g)) = decode_string(b"LK1|S|0|3|r|0|5|1|a|r|1|5|1|b|r|1|5|1|c|") else {
            panic!()
        };
        for (owner, stored) in [("a", 0), ("b", 1), ("c", 1)] {
            let fence = g.hold(owner.as_bytes()).map(|h| h.fence);
            assert!(fence.is_some_and(|f| f <= stored), "{owner}: {fence:?} above {stored}");
        }
        assert_eq!(g.top_fence(), 1);
    }

    #[test]
    fn previous_group_values_that_break_their_kinds_rules_are_not_locks() {
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
            b"LK1|S|0|2|r|1|2|1|o|r|3|4|1|o|", // one owner twice
        ] {
            assert_eq!(decode_legacy_group(bad), None, "{:?}", String::from_utf8_lossy(bad));
            assert_eq!(decode_string(bad), None);
        }
    }

    #[test]
    fn hash_fields_are_readable_and_round_trip() {
        let header = Header {
            shape: Shape { kind: Kind::Semaphore, limit: 3 },
            mode: Mode::Permit,
            earliest_ms: 1795312347678,
            top_fence: 1795312345678002,
        };
        let bytes = encode_header(&header, 1);
        assert_eq!(bytes.as_bytes(), b"LK2|M|3|p|1795312347678|1795312345678002|");
        assert_eq!(decode_header(bytes.as_bytes()), Some(header));
        assert_eq!(
            encode_header(&header, LISTPACK_HOLDERS_MAX).as_bytes(),
            bytes.as_bytes(),
            "compact up to 4"
        );
        let padded = encode_header(&header, LISTPACK_HOLDERS_MAX + 1);
        let text = String::from_utf8(padded.as_bytes().to_vec()).unwrap();
        assert_eq!(text.trim_end_matches('.'), "LK2|M|3|p|1795312347678|1795312345678002|");
        assert_eq!(text.len(), HASH_HEADER_LEN, "longer than hash-max-listpack-value");
        assert_eq!(decode_header(padded.as_bytes()), Some(header));
        let h = Hold::new(Mode::Read, 7, 9);
        assert_eq!(encode_record(&h).as_bytes(), b"r|7|9");
        assert_eq!(decode_record(b"r|7|9"), Some(h));
        assert_eq!(holder_field(b"a|b").as_bytes(), b"h|a|b");
        assert_eq!(fence_field(42).as_bytes(), b"f|42");
        assert_eq!(parse_field(b"h|a|b"), Some(Field::Holder(b"a|b")));
        assert_eq!(parse_field(b"f|42"), Some(Field::Fence(42)));
        assert_eq!(parse_field(b"lock"), Some(Field::Header));
        for bad in [&b"h|"[..], b"f|", b"f|042", b"x", b"lock2"] {
            assert_eq!(parse_field(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn hash_headers_that_break_their_kinds_rules_are_not_locks() {
        for bad in [
            &b"LK2|S|0|p|1|2"[..], // shared locks have readers or a writer
            b"LK2|M|3|r|1|2",      // semaphores have permits
            b"LK2|P|0|w|1|2",      // plain locks are strings
            b"LK2|M|0|p|1|2",      // a semaphore has permits
            b"LK2|S|1|r|1|2",      // a shared lock has no limit
            b"LK2|S|0|r|1",
            b"LK2|S|0|r|1|2",   // no padding field
            b"LK2|S|0|r|1|2|3", // padding is dots
            b"LK1|S|0|r|1|2|",
        ] {
            assert_eq!(decode_header(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
    }

    proptest! {
        #[test]
        fn singles_round_trip(reentrant: bool, fence: u64, deadline in 0i64..=i64::MAX, holds in 1u32.., owner in proptest::collection::vec(any::<u8>(), 1..=TOKEN_LEN_MAX)) {
            let kind = if reentrant { Kind::Reentrant } else { Kind::Plain };
            let exit_id = if reentrant && fence % 2 == 0 { ExitId::new(b"req-17").unwrap() } else { ExitId::NONE };
            let h = Hold { mode: Mode::Write, fence, deadline_ms: deadline, holds, exit_id };
            let bytes = encode(kind, &owner, &h);
            prop_assert_eq!(decode_single(&bytes), Some(Single { kind, owner: &owner, hold: h }));
        }

        #[test]
        fn hash_fields_round_trip(semaphore: bool, limit in 1u32..=HOLDERS_MAX, earliest in 0i64..=i64::MAX, top: u64, fence: u64, deadline in 0i64..=i64::MAX) {
            let (shape, mode) = if semaphore { (Shape { kind: Kind::Semaphore, limit }, Mode::Permit) } else { (Shape { kind: Kind::Shared, limit: 0 }, Mode::Read) };
            let header = Header { shape, mode, earliest_ms: earliest, top_fence: top };
            prop_assert_eq!(decode_header(encode_header(&header, limit).as_bytes()), Some(header));
            let h = Hold::new(mode, fence, deadline);
            prop_assert_eq!(decode_record(encode_record(&h).as_bytes()), Some(h));
            let field = fence_field(fence);
            prop_assert_eq!(parse_field(field.as_bytes()), Some(Field::Fence(fence)));
        }

        #[test]
        fn decimals_round_trip(n: u64) {
            prop_assert_eq!(parse_decimal(n.to_string().as_bytes()), Some(n));
        }

        // Any bytes, mostly digits with a stray byte among them (bytes on
        // both sides of '0'-'9' included): the eight-at-a-time reader
        // agrees with a plain one.
        #[test]
        fn decimals_parse_as_plainly(bytes in proptest::collection::vec(prop_oneof![8 => b'0'..=b'9', 1 => Just(b'/'), 1 => Just(b':'), 1 => any::<u8>()], 0..24)) {
            let plain = std::str::from_utf8(&bytes)
                .ok()
                .filter(|t| t.bytes().all(|b| b.is_ascii_digit()) && (*t == "0" || !t.starts_with('0')))
                .and_then(|t| t.parse::<u64>().ok());
            prop_assert_eq!(parse_decimal(&bytes), plain);
        }

        #[test]
        fn decoding_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..120)) {
            for prefix in [&b"LK1|S|0|1|"[..], b"LK1|M|3|2|", b"LK1|", b"LK1|P|", b"LK2|S|0|r|", b""] {
                let mut v = prefix.to_vec();
                v.extend_from_slice(&bytes);
                let _ = decode_string(&v);
                let _ = decode_header(&v);
                let _ = decode_record(&v);
                let _ = parse_field(&v);
            }
        }
    }
}
