//! Argument parsing for every LOCK.* command: typed, bounded, strict.
//!
//! Wire formats (argv[0] is the command name, argv[1] the key):
//! ```text
//! LOCK.ACQUIRE key token ttl-ms [WAIT timeout-ms]
//! LOCK.ENTER   key owner ttl-ms [WAIT timeout-ms]
//! LOCK.RELEASE key token
//! LOCK.EXIT    key owner [ID request-id]
//! LOCK.EXTEND  key token ttl-ms
//! LOCK.FENCE   key token floor
//! LOCK.INFO    key
//! LOCK.CHECK   key fencing-token
//! LOCK.RENEW   token ttl-ms key [key ...]
//! LOCK.SHARED    key token ttl-ms [WAIT timeout-ms]
//! LOCK.EXCLUSIVE key token ttl-ms [WAIT timeout-ms]
//! LOCK.SEMAPHORE key token permits ttl-ms [WAIT timeout-ms]
//! LOCK.MACQUIRE  token ttl-ms numkeys key [key ...] [WAIT timeout-ms] [MODES mode [mode ...]]
//! LOCK.MRELEASE  token key [key ...]
//! LOCK.WAITERS   key [COUNT count]
//! LOCK.CONTENDED [COUNT count]
//! LOCK.UNQUARANTINE <STARTUP | PROMOTION>
//! ```
//! Integers follow Redis' own rules (`string2ll`): optional `-`, no `+`, no
//! leading zeros, no spaces, no fraction, within i64. Option names are
//! case-insensitive; an option given twice, an unknown option, or anything
//! after the last option is an error. A parse error changes nothing.

use std::fmt::{self, Write as _};

pub use super::kind::REQUEST_ID_LEN_MAX;
use super::kind::{Want, HOLDERS_MAX};
use super::quarantine::Reason;

/// Tokens and owners: non-empty, at most this many bytes (agreed with the
/// clients in `lock_protocol`).
pub use lock_protocol::TOKEN_LEN_MAX;

pub fn is_request_id(id: &[u8]) -> bool {
    (1..=REQUEST_ID_LEN_MAX).contains(&id.len())
        && id.iter().all(|&b| (0x21..=0x7e).contains(&b) && b != b'|')
}

/// Longest WAIT timeout, in ms (one day). `WAIT 0` means no bound.
pub const WAIT_MS_MAX: i64 = 86_400_000;

/// The most keys `lock.max-renew-keys` may allow one LOCK.RENEW to extend
/// (and `lock.max-multi-keys` one LOCK.MACQUIRE to take). Each key costs a
/// few microseconds (a lookup, a rewrite, a replicated `SET`), so the
/// default is far lower (see `config.rs`).
pub const RENEW_KEYS_MAX: usize = lock_protocol::MULTI_KEYS_MAX;

/// Bounds that come from configuration rather than constants.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    pub ttl_ms_max: i64,
    /// Keys per LOCK.RENEW (`lock.max-renew-keys`).
    pub renew_keys_max: usize,
    /// Keys per LOCK.MACQUIRE and LOCK.MRELEASE (`lock.max-multi-keys`).
    pub multi_keys_max: usize,
}

/// How much of an offending argument an error line shows.
pub const SHOWN_MAX: usize = 64;

/// An argument as an error line shows it: quoted, its first [`SHOWN_MAX`]
/// bytes with every byte outside printable ASCII (and `'`, `\`) escaped
/// as `\xNN`, and when it is longer, marked as cut with its length:
/// `'NXNX...'...(cut, 10485760 bytes)`. So a line never echoes a huge or
/// binary argument, and always says what was given.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Shown(String);

impl Shown {
    pub fn of(bytes: &[u8]) -> Shown {
        let head = bytes.get(..SHOWN_MAX).unwrap_or(bytes);
        let mut text = String::with_capacity(head.len() + 2);
        text.push('\'');
        for &b in head {
            match b {
                b'\'' | b'\\' | 0..=0x1f | 0x7f..=0xff => {
                    let _ = write!(text, "\\x{b:02x}");
                }
                printable => text.push(char::from(printable)),
            }
        }
        text.push('\'');
        if bytes.len() > head.len() {
            let _ = write!(text, "...(cut, {} bytes)", bytes.len());
        }
        Shown(text)
    }
}

impl From<&str> for Shown {
    fn from(text: &str) -> Shown {
        Shown::of(text.as_bytes())
    }
}

impl fmt::Display for Shown {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// What is wrong with a call. Each names the argument and shows the value
/// given ([`Shown`], bounded), except where the name is the value (an
/// option given twice or without its value).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ArgError {
    Arity,
    NotInteger {
        what: &'static str,
        value: Shown,
    },
    OutOfRange {
        what: &'static str,
        value: i64,
        min: i64,
        max: i64,
        config: Option<&'static str>,
    },
    EmptyToken {
        what: &'static str,
    },
    TokenTooLong {
        what: &'static str,
        value: Shown,
    },
    UnknownOption(Shown),
    DuplicateOption(&'static str),
    MissingValue(&'static str),
    TooManyKeys {
        count: usize,
        max: usize,
        config: &'static str,
    },
    BadRequestId(Shown),
    /// The key at this position (1-based) of a set appears earlier too.
    DuplicateKey {
        at: usize,
        key: Shown,
    },
    UnknownMode(Shown),
    /// MODES names neither one mode for every key nor one per key.
    ModeCount {
        given: usize,
        keys: usize,
    },
    /// LOCK.UNQUARANTINE names no quarantine this module knows.
    UnknownReason(Shown),
}

impl fmt::Display for ArgError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ArgError::Arity => write!(f, "wrong number of arguments"),
            ArgError::NotInteger { what, value } => {
                write!(f, "{what} {value} is not an integer or out of range")
            }
            ArgError::OutOfRange { what, value, min, max, config } => {
                write!(f, "{what} {value} is out of range, must be {min}..{max}")?;
                match config {
                    Some(name) => write!(f, " ({name})"),
                    None => Ok(()),
                }
            }
            ArgError::EmptyToken { what } => write!(f, "{what} must not be empty"),
            ArgError::TokenTooLong { what, value } => {
                write!(f, "{what} {value} is longer than the limit of {TOKEN_LEN_MAX} bytes")
            }
            ArgError::UnknownOption(name) => write!(f, "unknown option {name}"),
            ArgError::DuplicateOption(name) => write!(f, "option {name} given twice"),
            ArgError::MissingValue(name) => write!(f, "option {name} needs a value"),
            ArgError::TooManyKeys { count, max, config } => {
                write!(f, "{count} keys, more than the limit of {max} ({config})")
            }
            ArgError::BadRequestId(id) => write!(
                f,
                "request id {id} must be 1 to {REQUEST_ID_LEN_MAX} printable ASCII characters without '|'"
            ),
            ArgError::DuplicateKey { at, key } => write!(f, "key #{at} {key} appears twice in the set"),
            ArgError::UnknownMode(name) => {
                write!(f, "unknown mode {name} (PLAIN, SHARED or EXCLUSIVE)")
            }
            ArgError::ModeCount { given, keys } => {
                write!(f, "MODES takes one mode for every key or one per key: {given} modes for {keys} keys")
            }
            ArgError::UnknownReason(name) => {
                write!(f, "unknown quarantine {name} (STARTUP or PROMOTION: the one in force, as INFO lock's lock_quarantine_reason names it)")
            }
        }
    }
}

/// ACQUIRE and ENTER.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Acquire<'a> {
    pub owner: &'a [u8],
    pub ttl_ms: i64,
    /// `Some(0)` waits without bound.
    pub wait_ms: Option<i64>,
}

/// RELEASE (and EXIT without an id).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Owner<'a> {
    pub owner: &'a [u8],
}

/// EXIT: the owner and an optional request id (`ID request-id`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Exit<'a> {
    pub owner: &'a [u8],
    pub request_id: Option<&'a [u8]>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Extend<'a> {
    pub owner: &'a [u8],
    pub ttl_ms: i64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fence<'a> {
    pub owner: &'a [u8],
    pub floor: u64,
}

/// `argv` is the whole command line including the name and key. Also
/// LOCK.SHARED and LOCK.EXCLUSIVE, which take the same arguments.
#[inline]
pub fn acquire<'a>(argv: &[&'a [u8]], limits: Limits) -> Result<Acquire<'a>, ArgError> {
    let [_, _, owner, ttl, options @ ..] = argv else {
        return Err(ArgError::Arity);
    };
    grant(owner, ttl, options, limits)
}

/// LOCK.SEMAPHORE: the number of permits, then what ACQUIRE takes.
pub fn semaphore<'a>(argv: &[&'a [u8]], limits: Limits) -> Result<(u32, Acquire<'a>), ArgError> {
    let [_, _, owner, permits, ttl, options @ ..] = argv else {
        return Err(ArgError::Arity);
    };
    // The token first, so that errors come in argument order.
    token(owner, "token")?;
    let max = i64::from(HOLDERS_MAX);
    let permits = u32::try_from(bounded(permits, "permits", 1, max, None)?).unwrap_or(0);
    Ok((permits, grant(owner, ttl, options, limits)?))
}

fn grant<'a>(
    owner: &'a [u8],
    ttl: &[u8],
    options: &[&[u8]],
    limits: Limits,
) -> Result<Acquire<'a>, ArgError> {
    let owner = token(owner, "token")?;
    let ttl_ms = ttl_ms(ttl, limits)?;
    let mut wait_ms = None;
    let mut rest = options;
    while let [name, tail @ ..] = rest {
        if name.eq_ignore_ascii_case(b"WAIT") {
            if wait_ms.is_some() {
                return Err(ArgError::DuplicateOption("WAIT"));
            }
            let [value, tail @ ..] = tail else {
                return Err(ArgError::MissingValue("WAIT"));
            };
            wait_ms = Some(bounded(value, "timeout-ms", 0, WAIT_MS_MAX, None)?);
            rest = tail;
        } else {
            return Err(ArgError::UnknownOption(Shown::of(name)));
        }
    }
    Ok(Acquire { owner, ttl_ms, wait_ms })
}

pub fn owner<'a>(argv: &[&'a [u8]]) -> Result<Owner<'a>, ArgError> {
    let [_, _, owner] = argv else {
        return Err(ArgError::Arity);
    };
    Ok(Owner { owner: token(owner, "token")? })
}

pub fn extend<'a>(argv: &[&'a [u8]], limits: Limits) -> Result<Extend<'a>, ArgError> {
    let [_, _, owner, ttl] = argv else {
        return Err(ArgError::Arity);
    };
    Ok(Extend { owner: token(owner, "token")?, ttl_ms: ttl_ms(ttl, limits)? })
}

pub fn exit<'a>(argv: &[&'a [u8]]) -> Result<Exit<'a>, ArgError> {
    let [_, _, owner, options @ ..] = argv else { return Err(ArgError::Arity) };
    let owner = token(owner, "token")?;
    let mut request_id = None;
    let mut rest = options;
    while let [name, tail @ ..] = rest {
        if !name.eq_ignore_ascii_case(b"ID") {
            return Err(ArgError::UnknownOption(Shown::of(name)));
        }
        if request_id.is_some() {
            return Err(ArgError::DuplicateOption("ID"));
        }
        let [id, tail @ ..] = tail else { return Err(ArgError::MissingValue("ID")) };
        if !is_request_id(id) {
            return Err(ArgError::BadRequestId(Shown::of(id)));
        }
        request_id = Some(*id);
        rest = tail;
    }
    Ok(Exit { owner, request_id })
}

/// `floor_max` is the largest floor this node accepts now (see
/// `Fencer::clock_floor` and the FENCE bound in the adapter).
pub fn fence<'a>(argv: &[&'a [u8]], floor_max: u64) -> Result<Fence<'a>, ArgError> {
    let [_, _, owner, floor] = argv else {
        return Err(ArgError::Arity);
    };
    let owner = token(owner, "token")?;
    let max = i64::try_from(floor_max).unwrap_or(i64::MAX);
    let floor = bounded(floor, "floor", 0, max, None)?;
    Ok(Fence { owner, floor: u64::try_from(floor).unwrap_or(0) })
}

/// LOCK.RENEW: one owner, one TTL, then the keys (argv[3..]).
pub fn renew<'a>(argv: &[&'a [u8]], limits: Limits) -> Result<Extend<'a>, ArgError> {
    let [_, owner, ttl, keys @ ..] = argv else { return Err(ArgError::Arity) };
    if keys.is_empty() {
        return Err(ArgError::Arity);
    }
    let max = limits.renew_keys_max.min(RENEW_KEYS_MAX);
    if keys.len() > max {
        return Err(ArgError::TooManyKeys { count: keys.len(), max, config: "lock.max-renew-keys" });
    }
    Ok(Extend { owner: token(owner, "token")?, ttl_ms: ttl_ms(ttl, limits)? })
}

/// Where LOCK.MACQUIRE's keys start in argv (after the name, token, ttl-ms
/// and numkeys).
pub const MULTI_FIRST_KEY: usize = 4;

/// LOCK.MACQUIRE: one owner and TTL for a set of keys, each with its mode.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AcquireAll<'a> {
    pub owner: &'a [u8],
    pub ttl_ms: i64,
    /// `Some(0)` waits without bound.
    pub wait_ms: Option<i64>,
    /// The mode asked on each key, in argument order (keys are
    /// `argv[MULTI_FIRST_KEY..MULTI_FIRST_KEY + wants.len()]`).
    pub wants: Vec<Want>,
}

/// `LOCK.MACQUIRE token ttl-ms numkeys key [key ...] [WAIT timeout-ms]
/// [MODES mode [mode ...]]`. A mode is PLAIN (a plain lock, as
/// LOCK.ACQUIRE), SHARED or EXCLUSIVE (the read or write side of a shared
/// lock, as LOCK.SHARED / LOCK.EXCLUSIVE); one mode applies to every key,
/// or one per key. A key named twice is an error.
pub fn acquire_all<'a>(argv: &[&'a [u8]], limits: Limits) -> Result<AcquireAll<'a>, ArgError> {
    let [_, owner, ttl, numkeys, rest @ ..] = argv else { return Err(ArgError::Arity) };
    let owner = token(owner, "token")?;
    let ttl_ms = ttl_ms(ttl, limits)?;
    let max = limits.multi_keys_max.clamp(1, RENEW_KEYS_MAX);
    let max_i64 = i64::try_from(max).unwrap_or(i64::MAX);
    let count = bounded(numkeys, "numkeys", 1, max_i64, Some("lock.max-multi-keys"))?;
    let count = usize::try_from(count).unwrap_or(0);
    let (Some(keys), Some(mut options)) = (rest.get(..count), rest.get(count..)) else {
        return Err(ArgError::Arity);
    };
    if let Some(at) = first_duplicate(keys) {
        let key = Shown::of(keys.get(at).copied().unwrap_or_default());
        return Err(ArgError::DuplicateKey { at: at + 1, key });
    }
    let mut wait_ms = None;
    let mut wants: Option<Vec<Want>> = None;
    while let [name, tail @ ..] = options {
        if name.eq_ignore_ascii_case(b"WAIT") {
            if wait_ms.is_some() {
                return Err(ArgError::DuplicateOption("WAIT"));
            }
            let [value, tail @ ..] = tail else { return Err(ArgError::MissingValue("WAIT")) };
            wait_ms = Some(bounded(value, "timeout-ms", 0, WAIT_MS_MAX, None)?);
            options = tail;
        } else if name.eq_ignore_ascii_case(b"MODES") {
            if wants.is_some() {
                return Err(ArgError::DuplicateOption("MODES"));
            }
            // The modes run up to the next option name (or the end).
            let given = tail
                .iter()
                .position(|w| w.eq_ignore_ascii_case(b"WAIT") || w.eq_ignore_ascii_case(b"MODES"))
                .unwrap_or(tail.len());
            let (words, tail) = tail.split_at(given);
            let modes = words.iter().map(|w| set_mode(w)).collect::<Result<Vec<Want>, ArgError>>()?;
            wants = Some(match modes.as_slice() {
                [] => return Err(ArgError::MissingValue("MODES")),
                [one] => vec![*one; count],
                many if many.len() == count => modes,
                many => return Err(ArgError::ModeCount { given: many.len(), keys: count }),
            });
            options = tail;
        } else {
            return Err(ArgError::UnknownOption(Shown::of(name)));
        }
    }
    Ok(AcquireAll { owner, ttl_ms, wait_ms, wants: wants.unwrap_or_else(|| vec![Want::plain(); count]) })
}

fn set_mode(word: &[u8]) -> Result<Want, ArgError> {
    if word.eq_ignore_ascii_case(b"PLAIN") {
        Ok(Want::plain())
    } else if word.eq_ignore_ascii_case(b"SHARED") {
        Ok(Want::read())
    } else if word.eq_ignore_ascii_case(b"EXCLUSIVE") {
        Ok(Want::write())
    } else {
        Err(ArgError::UnknownMode(Shown::of(word)))
    }
}

/// The position of the first key that an earlier one equals: O(k log k).
fn first_duplicate(keys: &[&[u8]]) -> Option<usize> {
    let mut order: Vec<usize> = (0..keys.len()).collect();
    order.sort_by(|&a, &b| keys.get(a).cmp(&keys.get(b)).then(a.cmp(&b)));
    order
        .windows(2)
        .filter_map(|pair| match pair {
            [a, b] if keys.get(*a) == keys.get(*b) => Some(*b),
            _ => None,
        })
        .min()
}

/// `LOCK.MRELEASE token key [key ...]`: the owner (keys are argv[2..]).
pub fn release_all<'a>(argv: &[&'a [u8]], limits: Limits) -> Result<Owner<'a>, ArgError> {
    let [_, owner, keys @ ..] = argv else { return Err(ArgError::Arity) };
    if keys.is_empty() {
        return Err(ArgError::Arity);
    }
    let max = limits.multi_keys_max.clamp(1, RENEW_KEYS_MAX);
    if keys.len() > max {
        return Err(ArgError::TooManyKeys { count: keys.len(), max, config: "lock.max-multi-keys" });
    }
    Ok(Owner { owner: token(owner, "token")? })
}

/// Most entries LOCK.WAITERS and LOCK.CONTENDED list by default.
pub const LIST_DEFAULT: usize = 100;

/// `[COUNT count]` after `fixed` arguments: how many entries to list, at
/// most `max`.
pub fn list_count(argv: &[&[u8]], fixed: usize, max: usize) -> Result<usize, ArgError> {
    let Some(mut rest) = argv.get(fixed..) else { return Err(ArgError::Arity) };
    let mut count = None;
    while let [name, tail @ ..] = rest {
        if !name.eq_ignore_ascii_case(b"COUNT") {
            return Err(ArgError::UnknownOption(Shown::of(name)));
        }
        if count.is_some() {
            return Err(ArgError::DuplicateOption("COUNT"));
        }
        let [value, tail @ ..] = tail else { return Err(ArgError::MissingValue("COUNT")) };
        let max_i64 = i64::try_from(max).unwrap_or(i64::MAX);
        count = Some(usize::try_from(bounded(value, "count", 1, max_i64, None)?).unwrap_or(max));
        rest = tail;
    }
    Ok(count.unwrap_or(LIST_DEFAULT.min(max)))
}

/// LOCK.CHECK: the fencing token to compare with the current grant.
pub fn check(argv: &[&[u8]]) -> Result<u64, ArgError> {
    let [_, _, fence] = argv else { return Err(ArgError::Arity) };
    let fence = bounded(fence, "fencing-token", 0, i64::MAX, None)?;
    Ok(u64::try_from(fence).unwrap_or(0))
}

/// LOCK.UNQUARANTINE: the quarantine the operator means to end.
pub fn quarantine_reason(argv: &[&[u8]]) -> Result<Reason, ArgError> {
    let [_, reason] = argv else { return Err(ArgError::Arity) };
    if reason.eq_ignore_ascii_case(b"STARTUP") {
        Ok(Reason::Startup)
    } else if reason.eq_ignore_ascii_case(b"PROMOTION") {
        Ok(Reason::Promotion)
    } else {
        Err(ArgError::UnknownReason(Shown::of(reason)))
    }
}

/// LOCK.QUARANTINED: a quarantine as the node started it (its AOF and
/// replication stream's record).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Quarantined {
    /// `NODE until-ms`: the start-up or promotion quarantine.
    Node { until_ms: i64 },
    /// `SLOT until-ms slot`: a slot's wait after an import
    /// (`imports::OPEN` while it runs; 0: the import did not start).
    Slot { until_ms: i64, slot: u16 },
}

pub fn quarantined(argv: &[&[u8]]) -> Result<Quarantined, ArgError> {
    let (scope, until, slot) = match argv {
        [_, scope, until] => (scope, until, None),
        [_, scope, until, slot] => (scope, until, Some(slot)),
        _ => return Err(ArgError::Arity),
    };
    let until_ms = bounded(until, "until-ms", 0, i64::MAX, None)?;
    match slot {
        None if scope.eq_ignore_ascii_case(b"NODE") => Ok(Quarantined::Node { until_ms }),
        Some(slot) if scope.eq_ignore_ascii_case(b"SLOT") => {
            let max = i64::from(lock_protocol::slot::SLOTS) - 1;
            let slot = u16::try_from(bounded(slot, "slot", 0, max, None)?).unwrap_or(0);
            Ok(Quarantined::Slot { until_ms, slot })
        }
        _ if scope.eq_ignore_ascii_case(b"NODE") || scope.eq_ignore_ascii_case(b"SLOT") => {
            Err(ArgError::Arity)
        }
        _ => Err(ArgError::UnknownOption(Shown::of(scope))),
    }
}

/// LOCK.FORGOTTEN: a removal quarantine of the key as the node started it.
pub struct Forgotten<'a> {
    pub until_ms: i64,
    /// What removed the lock: the keyspace event (`del`, `evicted`, ...).
    pub event: &'a [u8],
}

pub fn forgotten<'a>(argv: &[&'a [u8]]) -> Result<Forgotten<'a>, ArgError> {
    let [_, _, until, event] = argv else { return Err(ArgError::Arity) };
    let until_ms = bounded(until, "until-ms", 0, i64::MAX, None)?;
    let event = token(event, "event")?;
    Ok(Forgotten { until_ms, event })
}

pub fn key_only(argv: &[&[u8]]) -> Result<(), ArgError> {
    match argv {
        [_, _] => Ok(()),
        _ => Err(ArgError::Arity),
    }
}

fn token<'a>(bytes: &'a [u8], what: &'static str) -> Result<&'a [u8], ArgError> {
    match bytes.len() {
        0 => Err(ArgError::EmptyToken { what }),
        len if len > TOKEN_LEN_MAX => Err(ArgError::TokenTooLong { what, value: Shown::of(bytes) }),
        _ => Ok(bytes),
    }
}

fn ttl_ms(bytes: &[u8], limits: Limits) -> Result<i64, ArgError> {
    bounded(bytes, "ttl-ms", 1, limits.ttl_ms_max, Some("lock.max-ttl-ms"))
}

fn bounded(
    bytes: &[u8],
    what: &'static str,
    min: i64,
    max: i64,
    config: Option<&'static str>,
) -> Result<i64, ArgError> {
    let value = parse_i64(bytes).ok_or_else(|| ArgError::NotInteger { what, value: Shown::of(bytes) })?;
    if value < min || value > max {
        return Err(ArgError::OutOfRange { what, value, min, max, config });
    }
    Ok(value)
}

/// Redis' `string2ll`: `-?[1-9][0-9]*|0`, at most 20 bytes, no overflow.
pub fn parse_i64(bytes: &[u8]) -> Option<i64> {
    let (negative, digits) = match bytes {
        [b'-', rest @ ..] => (true, rest),
        _ => (false, bytes),
    };
    match digits {
        [] => return None,
        [b'0'] if !negative => return Some(0),
        [b'0', ..] => return None,
        _ => {}
    }
    if bytes.len() > 20 {
        return None;
    }
    // Accumulate negatively so that i64::MIN parses.
    digits.iter().try_fold(0i64, |acc, &b| {
        if !b.is_ascii_digit() {
            return None;
        }
        let digit = i64::from(b - b'0');
        let acc = acc.checked_mul(10)?;
        if negative {
            acc.checked_sub(digit)
        } else {
            acc.checked_add(digit)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const LIMITS: Limits = Limits { ttl_ms_max: 30_000, renew_keys_max: RENEW_KEYS_MAX, multi_keys_max: 100 };

    fn argv(line: &str) -> Vec<&[u8]> {
        line.split(' ').map(str::as_bytes).collect()
    }

    const MULTI: &str = "lock.max-multi-keys";

    fn not_integer(what: &'static str, value: &str) -> ArgError {
        ArgError::NotInteger { what, value: value.into() }
    }

    /// A ttl-ms outside 1..LIMITS.ttl_ms_max.
    fn ttl_out_of_range(value: i64) -> ArgError {
        ArgError::OutOfRange { what: "ttl-ms", value, min: 1, max: 30_000, config: Some("lock.max-ttl-ms") }
    }

    /// A WAIT timeout outside 0..WAIT_MS_MAX.
    fn wait_out_of_range(value: i64) -> ArgError {
        ArgError::OutOfRange { what: "timeout-ms", value, min: 0, max: WAIT_MS_MAX, config: None }
    }

    #[test]
    fn integers_parse_like_redis() {
        for (text, want) in [
            ("0", Some(0)),
            ("5", Some(5)),
            ("-5", Some(-5)),
            ("9223372036854775807", Some(i64::MAX)),
            ("-9223372036854775808", Some(i64::MIN)),
            ("9223372036854775808", None),
            ("+5", None),
            ("07", None),
            ("-0", None),
            (" 5", None),
            ("5 ", None),
            ("1.5", None),
            ("", None),
            ("-", None),
            ("1e3", None),
        ] {
            assert_eq!(parse_i64(text.as_bytes()), want, "{text:?}");
        }
    }

    proptest! {
        #[test]
        fn parse_agrees_with_display(n: i64) {
            prop_assert_eq!(parse_i64(n.to_string().as_bytes()), Some(n));
        }

        #[test]
        fn parse_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..30)) {
            let _ = parse_i64(&bytes);
        }
    }

    #[test]
    fn acquire_accepts_wait_in_any_case() {
        let a = acquire(&argv("LOCK.ACQUIRE k t 100 wait 0"), LIMITS);
        assert_eq!(a, Ok(Acquire { owner: b"t", ttl_ms: 100, wait_ms: Some(0) }));
        let a = acquire(&argv("LOCK.ACQUIRE k t 30000"), LIMITS);
        assert_eq!(a, Ok(Acquire { owner: b"t", ttl_ms: 30_000, wait_ms: None }));
    }

    #[test]
    fn acquire_misuse() {
        let long = "x".repeat(TOKEN_LEN_MAX + 1);
        let cases: Vec<(String, ArgError)> = vec![
            ("LOCK.ACQUIRE k t".into(), ArgError::Arity),
            ("LOCK.ACQUIRE k t 0".into(), ttl_out_of_range(0)),
            ("LOCK.ACQUIRE k t 30001".into(), ttl_out_of_range(30_001)),
            ("LOCK.ACQUIRE k t -1".into(), ttl_out_of_range(-1)),
            ("LOCK.ACQUIRE k t +5".into(), not_integer("ttl-ms", "+5")),
            ("LOCK.ACQUIRE k t 1.5".into(), not_integer("ttl-ms", "1.5")),
            ("LOCK.ACQUIRE k  5".into(), ArgError::EmptyToken { what: "token" }),
            (
                format!("LOCK.ACQUIRE k {long} 5"),
                ArgError::TokenTooLong { what: "token", value: Shown::of(long.as_bytes()) },
            ),
            ("LOCK.ACQUIRE k t 5 WAIT".into(), ArgError::MissingValue("WAIT")),
            ("LOCK.ACQUIRE k t 5 WAIT 1 WAIT 2".into(), ArgError::DuplicateOption("WAIT")),
            ("LOCK.ACQUIRE k t 5 WAIT -1".into(), wait_out_of_range(-1)),
            ("LOCK.ACQUIRE k t 5 NX".into(), ArgError::UnknownOption("NX".into())),
            ("LOCK.ACQUIRE k t 5 WAIT 1 extra".into(), ArgError::UnknownOption("extra".into())),
        ];
        for (line, want) in cases {
            assert_eq!(acquire(&argv(&line), LIMITS), Err(want), "{line}");
        }
    }

    #[test]
    fn semaphore_takes_a_bounded_permit_count() {
        let ok = semaphore(&argv("LOCK.SEMAPHORE k t 3 100 WAIT 5"), LIMITS);
        assert_eq!(ok, Ok((3, Acquire { owner: b"t", ttl_ms: 100, wait_ms: Some(5) })));
        let max = i64::from(crate::kind::HOLDERS_MAX);
        for (line, want) in [
            ("LOCK.SEMAPHORE k t 3", ArgError::Arity),
            (
                "LOCK.SEMAPHORE k t 0 100",
                ArgError::OutOfRange { what: "permits", value: 0, min: 1, max, config: None },
            ),
            (
                "LOCK.SEMAPHORE k t 1001 100",
                ArgError::OutOfRange { what: "permits", value: 1001, min: 1, max, config: None },
            ),
            ("LOCK.SEMAPHORE k t +3 100", not_integer("permits", "+3")),
            ("LOCK.SEMAPHORE k  3 100", ArgError::EmptyToken { what: "token" }),
            ("LOCK.SEMAPHORE k t 3 100 WAIT", ArgError::MissingValue("WAIT")),
            ("LOCK.SEMAPHORE k t 3 100 NX", ArgError::UnknownOption("NX".into())),
        ] {
            assert_eq!(semaphore(&argv(line), LIMITS), Err(want), "{line}");
        }
    }

    #[test]
    fn other_commands_check_arity_and_values() {
        assert_eq!(owner(&argv("LOCK.RELEASE k")), Err(ArgError::Arity));
        assert_eq!(owner(&argv("LOCK.RELEASE k t x")), Err(ArgError::Arity));
        assert_eq!(owner(&argv("LOCK.RELEASE k t")), Ok(Owner { owner: b"t" }));
        assert_eq!(extend(&argv("LOCK.EXTEND k t 5 6"), LIMITS), Err(ArgError::Arity),);
        assert_eq!(extend(&argv("LOCK.EXTEND k t 07"), LIMITS), Err(not_integer("ttl-ms", "07")));
        assert_eq!(
            fence(&argv("LOCK.FENCE k t 100"), 99).map(|f| f.floor),
            Err(ArgError::OutOfRange { what: "floor", value: 100, min: 0, max: 99, config: None })
        );
        assert_eq!(fence(&argv("LOCK.FENCE k t 99"), 99).map(|f| f.floor), Ok(99));
        assert_eq!(key_only(&argv("LOCK.INFO k")), Ok(()));
        assert_eq!(check(&argv("LOCK.CHECK k 17")), Ok(17));
        assert_eq!(
            check(&argv("LOCK.CHECK k -1")).map_err(|e| matches!(e, ArgError::OutOfRange { .. })),
            Err(true)
        );
        assert_eq!(check(&argv("LOCK.CHECK k")), Err(ArgError::Arity));
        assert_eq!(exit(&argv("LOCK.EXIT k o")), Ok(Exit { owner: b"o", request_id: None }));
        assert_eq!(exit(&argv("LOCK.EXIT k o id r-1")), Ok(Exit { owner: b"o", request_id: Some(b"r-1") }));
        assert_eq!(exit(&argv("LOCK.EXIT k o ID")), Err(ArgError::MissingValue("ID")));
        assert_eq!(exit(&argv("LOCK.EXIT k o ID a|b")), Err(ArgError::BadRequestId("a|b".into())));
        assert_eq!(exit(&argv("LOCK.EXIT k o ID r ID s")), Err(ArgError::DuplicateOption("ID")));
        assert_eq!(exit(&argv("LOCK.EXIT k o ID r x")), Err(ArgError::UnknownOption("x".into())));
        assert_eq!(exit(&argv("LOCK.EXIT k o NX")), Err(ArgError::UnknownOption("NX".into())));
        assert_eq!(exit(&argv("LOCK.EXIT k")), Err(ArgError::Arity));
        assert_eq!(renew(&argv("LOCK.RENEW t 100 a b"), LIMITS), Ok(Extend { owner: b"t", ttl_ms: 100 }));
        assert_eq!(renew(&argv("LOCK.RENEW t 100"), LIMITS), Err(ArgError::Arity));
        let many = format!("LOCK.RENEW t 100{}", " k".repeat(RENEW_KEYS_MAX + 1));
        assert_eq!(
            renew(&argv(&many), LIMITS),
            Err(ArgError::TooManyKeys {
                count: RENEW_KEYS_MAX + 1,
                max: RENEW_KEYS_MAX,
                config: "lock.max-renew-keys"
            })
        );
        assert_eq!(key_only(&argv("LOCK.INFO k x")), Err(ArgError::Arity));
    }

    #[test]
    fn exit_options_are_named_exactly() {
        // Two words that are not `ID x` are an unknown option, named.
        assert_eq!(exit(&argv("LOCK.EXIT k o XX r")), Err(ArgError::UnknownOption("XX".into())));
        assert_eq!(exit(&argv("LOCK.EXIT k o XX r extra")), Err(ArgError::UnknownOption("XX".into())));
        // After a valid id, the extra word is the unknown one; an over-long
        // id is refused as such, shown cut.
        let long = "r".repeat(REQUEST_ID_LEN_MAX + 1);
        assert_eq!(
            exit(&argv(&format!("LOCK.EXIT k o ID {long} extra"))),
            Err(ArgError::BadRequestId(Shown::of(long.as_bytes())))
        );
        let longest = "r".repeat(REQUEST_ID_LEN_MAX);
        assert_eq!(
            exit(&argv(&format!("LOCK.EXIT k o ID {longest} extra"))),
            Err(ArgError::UnknownOption("extra".into()))
        );
    }

    #[test]
    fn limits_are_inclusive() {
        let longest = "t".repeat(TOKEN_LEN_MAX);
        assert_eq!(
            owner(&argv(&format!("LOCK.RELEASE k {longest}"))).map(|o| o.owner.len()),
            Ok(TOKEN_LEN_MAX)
        );
        let most = format!("LOCK.RENEW t 100{}", " k".repeat(RENEW_KEYS_MAX));
        assert_eq!(renew(&argv(&most), LIMITS), Ok(Extend { owner: b"t", ttl_ms: 100 }));
    }

    fn set_of(line: &str) -> Result<AcquireAll<'_>, ArgError> {
        acquire_all(&argv(line), LIMITS)
    }

    #[test]
    fn a_set_takes_one_mode_for_every_key_or_one_per_key() {
        let (r, w) = (Want::read(), Want::write());
        let all = |wants: Vec<Want>, wait_ms| Ok(AcquireAll { owner: b"t", ttl_ms: 100, wait_ms, wants });
        assert_eq!(set_of("LOCK.MACQUIRE t 100 2 a b"), all(vec![Want::plain(); 2], None));
        assert_eq!(set_of("LOCK.MACQUIRE t 100 2 a b modes shared"), all(vec![r, r], None));
        assert_eq!(
            set_of("LOCK.MACQUIRE t 100 2 a b MODES Shared EXCLUSIVE WAIT 5"),
            all(vec![r, w], Some(5))
        );
        assert_eq!(
            set_of("LOCK.MACQUIRE t 100 2 a b wait 0 MODES plain exclusive"),
            all(vec![Want::plain(), w], Some(0))
        );
        // A key may be named like an option: numkeys says where keys end.
        assert_eq!(set_of("LOCK.MACQUIRE t 100 1 WAIT WAIT 1"), all(vec![Want::plain()], Some(1)));
    }

    #[test]
    fn a_set_misuse() {
        let numkeys = |value, max| ArgError::OutOfRange {
            what: "numkeys",
            value,
            min: 1,
            max,
            config: Some("lock.max-multi-keys"),
        };
        for (line, want) in [
            ("LOCK.MACQUIRE t 100", ArgError::Arity),
            ("LOCK.MACQUIRE t 100 3 a b", ArgError::Arity),
            ("LOCK.MACQUIRE t 100 0", numkeys(0, 100)),
            ("LOCK.MACQUIRE t 100 101 a", numkeys(101, 100)),
            ("LOCK.MACQUIRE t 100 x a", not_integer("numkeys", "x")),
            ("LOCK.MACQUIRE  100 1 a", ArgError::EmptyToken { what: "token" }),
            ("LOCK.MACQUIRE t 0 1 a", ttl_out_of_range(0)),
            ("LOCK.MACQUIRE t 100 2 a a", ArgError::DuplicateKey { at: 2, key: "a".into() }),
            ("LOCK.MACQUIRE t 100 2 a b WAIT", ArgError::MissingValue("WAIT")),
            ("LOCK.MACQUIRE t 100 2 a b WAIT 1 WAIT 2", ArgError::DuplicateOption("WAIT")),
            ("LOCK.MACQUIRE t 100 2 a b WAIT -1", wait_out_of_range(-1)),
            ("LOCK.MACQUIRE t 100 2 a b MODES", ArgError::MissingValue("MODES")),
            ("LOCK.MACQUIRE t 100 2 a b MODES WAIT 1", ArgError::MissingValue("MODES")),
            ("LOCK.MACQUIRE t 100 2 a b MODES SHARED MODES SHARED", ArgError::DuplicateOption("MODES")),
            ("LOCK.MACQUIRE t 100 3 a b c MODES SHARED SHARED", ArgError::ModeCount { given: 2, keys: 3 }),
            ("LOCK.MACQUIRE t 100 2 a b MODES READ", ArgError::UnknownMode("READ".into())),
            ("LOCK.MACQUIRE t 100 2 a b NX", ArgError::UnknownOption("NX".into())),
        ] {
            assert_eq!(set_of(line), Err(want), "{line}");
        }
    }

    #[test]
    fn a_key_named_twice_is_reported_at_its_first_repeat() {
        // In argument order (1-based), not in the order keys sort in.
        assert_eq!(
            set_of("LOCK.MACQUIRE t 100 4 z z a a"),
            Err(ArgError::DuplicateKey { at: 2, key: "z".into() })
        );
        assert_eq!(
            set_of("LOCK.MACQUIRE t 100 4 b a c a"),
            Err(ArgError::DuplicateKey { at: 4, key: "a".into() })
        );
        assert_eq!(set_of("LOCK.MACQUIRE t 100 3 a b c").map(|s| s.wants.len()), Ok(3));
    }

    #[test]
    fn the_set_size_limit_is_the_setting_within_1_to_1000() {
        let keys = |n: usize| " k".repeat(n);
        let with = |max| Limits { multi_keys_max: max, ..LIMITS };
        // The setting, inclusive; 0 counts as 1, above 1000 as 1000.
        let distinct = |n: usize| {
            let names: String = (0..n).map(|i| format!(" k{i}")).collect();
            format!("LOCK.MACQUIRE t 100 {n}{names}")
        };
        assert_eq!(acquire_all(&argv(&distinct(3)), with(3)).map(|s| s.wants.len()), Ok(3));
        assert!(matches!(
            acquire_all(&argv(&distinct(4)), with(3)),
            Err(ArgError::OutOfRange { max: 3, .. })
        ));
        assert!(matches!(
            acquire_all(&argv(&distinct(2)), with(0)),
            Err(ArgError::OutOfRange { max: 1, .. })
        ));
        assert_eq!(acquire_all(&argv(&distinct(1)), with(0)).map(|s| s.wants.len()), Ok(1));
        assert!(matches!(
            acquire_all(&argv(&distinct(1001)), with(5000)),
            Err(ArgError::OutOfRange { max: 1000, .. })
        ));
        assert_eq!(acquire_all(&argv(&distinct(1000)), with(5000)).map(|s| s.wants.len()), Ok(1000));
        // LOCK.MRELEASE: the same bound, keys counted.
        let release = |n: usize| format!("LOCK.MRELEASE t{}", keys(n));
        assert_eq!(release_all(&argv(&release(3)), with(3)), Ok(Owner { owner: b"t" }));
        assert_eq!(
            release_all(&argv(&release(4)), with(3)),
            Err(ArgError::TooManyKeys { count: 4, max: 3, config: MULTI })
        );
        assert_eq!(
            release_all(&argv(&release(2)), with(0)),
            Err(ArgError::TooManyKeys { count: 2, max: 1, config: MULTI })
        );
        assert_eq!(release_all(&argv(&release(1000)), with(5000)), Ok(Owner { owner: b"t" }));
        assert_eq!(
            release_all(&argv(&release(1001)), with(5000)),
            Err(ArgError::TooManyKeys { count: 1001, max: 1000, config: MULTI })
        );
        assert_eq!(release_all(&argv("LOCK.MRELEASE t"), LIMITS), Err(ArgError::Arity));
        assert_eq!(
            release_all(&argv("LOCK.MRELEASE  k"), LIMITS),
            Err(ArgError::EmptyToken { what: "token" })
        );
    }

    #[test]
    fn a_quarantine_is_named_by_its_reason_in_any_case() {
        assert_eq!(quarantine_reason(&argv("LOCK.UNQUARANTINE STARTUP")), Ok(Reason::Startup));
        assert_eq!(quarantine_reason(&argv("LOCK.UNQUARANTINE promotion")), Ok(Reason::Promotion));
        assert_eq!(quarantine_reason(&argv("LOCK.UNQUARANTINE")), Err(ArgError::Arity));
        assert_eq!(quarantine_reason(&argv("LOCK.UNQUARANTINE startup now")), Err(ArgError::Arity));
        let unknown = quarantine_reason(&argv("LOCK.UNQUARANTINE all")).unwrap_err();
        assert_eq!(unknown, ArgError::UnknownReason(Shown::of(b"all")));
        assert!(
            unknown.to_string().starts_with("unknown quarantine 'all' (STARTUP or PROMOTION"),
            "{unknown}"
        );
    }

    #[test]
    fn list_count_defaults_to_100_within_its_maximum() {
        assert_eq!(list_count(&argv("LOCK.WAITERS k"), 2, 1000), Ok(LIST_DEFAULT));
        assert_eq!(
            list_count(&argv("LOCK.CONTENDED"), 1, 16),
            Ok(16),
            "the default never passes the maximum"
        );
        assert_eq!(list_count(&argv("LOCK.WAITERS k count 1000"), 2, 1000), Ok(1000));
        assert_eq!(list_count(&argv("LOCK.WAITERS k COUNT 1"), 2, 1000), Ok(1));
        assert_eq!(
            list_count(&argv("LOCK.WAITERS k COUNT 1001"), 2, 1000),
            Err(ArgError::OutOfRange { what: "count", value: 1001, min: 1, max: 1000, config: None })
        );
        assert_eq!(
            list_count(&argv("LOCK.CONTENDED COUNT 0"), 1, 16),
            Err(ArgError::OutOfRange { what: "count", value: 0, min: 1, max: 16, config: None })
        );
        assert_eq!(list_count(&argv("LOCK.WAITERS k COUNT"), 2, 1000), Err(ArgError::MissingValue("COUNT")));
        assert_eq!(
            list_count(&argv("LOCK.WAITERS k LIMIT 5"), 2, 1000),
            Err(ArgError::UnknownOption("LIMIT".into()))
        );
        assert_eq!(
            list_count(&argv("LOCK.WAITERS k LIMIT"), 2, 1000),
            Err(ArgError::UnknownOption("LIMIT".into()))
        );
        assert_eq!(
            list_count(&argv("LOCK.WAITERS k COUNT 5 x"), 2, 1000),
            Err(ArgError::UnknownOption("x".into()))
        );
        assert_eq!(
            list_count(&argv("LOCK.WAITERS k COUNT 1 COUNT 2"), 2, 1000),
            Err(ArgError::DuplicateOption("COUNT")),
            "named as ACQUIRE names a second WAIT"
        );
        assert_eq!(list_count(&argv("LOCK.WAITERS"), 2, 1000), Err(ArgError::Arity));
    }

    #[test]
    fn errors_read_as_documented() {
        let cases: Vec<(ArgError, &str)> = vec![
            (ArgError::Arity, "wrong number of arguments"),
            (not_integer("ttl-ms", "1e3"), "ttl-ms '1e3' is not an integer or out of range"),
            (
                ArgError::OutOfRange {
                    what: "ttl-ms",
                    value: 0,
                    min: 1,
                    max: 5,
                    config: Some("lock.max-ttl-ms"),
                },
                "ttl-ms 0 is out of range, must be 1..5 (lock.max-ttl-ms)",
            ),
            (
                ArgError::OutOfRange { what: "permits", value: 0, min: 1, max: 5, config: None },
                "permits 0 is out of range, must be 1..5",
            ),
            (ArgError::EmptyToken { what: "token" }, "token must not be empty"),
            (
                ArgError::TokenTooLong { what: "token", value: Shown::of(&[b'x'; 300]) },
                "token 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx'...(cut, 300 bytes) is \
                 longer than the limit of 256 bytes",
            ),
            (ArgError::UnknownOption("NX".into()), "unknown option 'NX'"),
            (ArgError::DuplicateOption("WAIT"), "option WAIT given twice"),
            (ArgError::MissingValue("WAIT"), "option WAIT needs a value"),
            (
                ArgError::TooManyKeys { count: 1001, max: 1000, config: "lock.max-renew-keys" },
                "1001 keys, more than the limit of 1000 (lock.max-renew-keys)",
            ),
            (
                ArgError::BadRequestId("a|b".into()),
                "request id 'a|b' must be 1 to 64 printable ASCII characters without '|'",
            ),
            (ArgError::DuplicateKey { at: 3, key: "a".into() }, "key #3 'a' appears twice in the set"),
            (ArgError::UnknownMode("READ".into()), "unknown mode 'READ' (PLAIN, SHARED or EXCLUSIVE)"),
            (
                ArgError::ModeCount { given: 2, keys: 3 },
                "MODES takes one mode for every key or one per key: 2 modes for 3 keys",
            ),
        ];
        for (error, text) in cases {
            assert_eq!(error.to_string(), text);
        }
    }

    #[test]
    fn values_are_shown_bounded_and_escaped() {
        assert_eq!(Shown::of(b"NX").to_string(), "'NX'");
        assert_eq!(Shown::of(b"").to_string(), "''");
        assert_eq!(Shown::of(b"a'b\\c\r\n\x00\xff").to_string(), "'a\\x27b\\x5cc\\x0d\\x0a\\x00\\xff'");
        let huge = vec![b'N'; 10 * 1024 * 1024];
        let shown = Shown::of(&huge).to_string();
        assert_eq!(shown, format!("'{}'...(cut, 10485760 bytes)", "N".repeat(SHOWN_MAX)));
        let exactly = vec![b'N'; SHOWN_MAX];
        assert!(!Shown::of(&exactly).to_string().contains("cut"), "64 bytes are shown whole");
    }

    proptest! {
        #[test]
        fn a_shown_value_is_bounded_printable_ascii(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            let shown = Shown::of(&bytes).to_string();
            prop_assert!(shown.len() <= 2 + 4 * SHOWN_MAX + 40);
            prop_assert!(shown.bytes().all(|b| (0x20..0x7f).contains(&b)));
        }
    }
}
