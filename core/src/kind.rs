//! The words of the lock state machine: which kind of lock a key holds,
//! which mode a holder has, what a grant asks for, and one holder's record.
//!
//! Every kind is the same machine over a set of holders (see `lock.rs`):
//! - plain (`LOCK.ACQUIRE`): one holder, mode write;
//! - reentrant (`LOCK.ENTER`): one holder, mode write, with a hold count;
//! - shared (`LOCK.SHARED` / `LOCK.EXCLUSIVE`): readers together, or one
//!   writer alone;
//! - semaphore (`LOCK.SEMAPHORE`): up to `limit` permit holders.

/// Hold counts above this are refused: a client that enters a lock a billion
/// times has a bug, and the count must fit the stored form.
pub const HOLDS_MAX: u32 = 1_000_000;

/// Most holders one lock may have: the readers of a shared lock, and the
/// largest semaphore limit. It bounds a key's size and the longest sweep of
/// expired holders (see `txn.rs`).
pub const HOLDERS_MAX: u32 = 1000;

/// Longest EXIT request id. Ids are printable ASCII without `|` (they are
/// stored inside the lock value); a UUID fits.
pub const REQUEST_ID_LEN_MAX: usize = 64;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    Plain,
    Reentrant,
    Shared,
    Semaphore,
}

impl Kind {
    pub fn letter(self) -> u8 {
        match self {
            Kind::Plain => b'P',
            Kind::Reentrant => b'R',
            Kind::Shared => b'S',
            Kind::Semaphore => b'M',
        }
    }

    pub fn from_letter(letter: u8) -> Option<Kind> {
        match letter {
            b'P' => Some(Kind::Plain),
            b'R' => Some(Kind::Reentrant),
            b'S' => Some(Kind::Shared),
            b'M' => Some(Kind::Semaphore),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Kind::Plain => "plain",
            Kind::Reentrant => "reentrant",
            Kind::Shared => "shared",
            Kind::Semaphore => "semaphore",
        }
    }

    /// Plain and reentrant locks have one holder and are stored inline in
    /// a string; shared locks and semaphores keep one record per holder.
    pub fn is_single(self) -> bool {
        matches!(self, Kind::Plain | Kind::Reentrant)
    }

    /// Whether a holder of this kind may have `mode`.
    pub fn allows(self, mode: Mode) -> bool {
        matches!(
            (self, mode),
            (Kind::Plain | Kind::Reentrant, Mode::Write)
                | (Kind::Shared, Mode::Read | Mode::Write)
                | (Kind::Semaphore, Mode::Permit)
        )
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mode {
    Read,
    /// Alone: the holder of a plain or reentrant lock, or the writer of a
    /// shared lock.
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

/// What a grant asks for: the kind and mode, and for a semaphore its limit
/// (0 for every other kind).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Want {
    pub kind: Kind,
    pub mode: Mode,
    pub limit: u32,
}

impl Want {
    pub fn plain() -> Want {
        Want { kind: Kind::Plain, mode: Mode::Write, limit: 0 }
    }

    pub fn reentrant() -> Want {
        Want { kind: Kind::Reentrant, mode: Mode::Write, limit: 0 }
    }

    pub fn read() -> Want {
        Want { kind: Kind::Shared, mode: Mode::Read, limit: 0 }
    }

    pub fn write() -> Want {
        Want { kind: Kind::Shared, mode: Mode::Write, limit: 0 }
    }

    pub fn permit(limit: u32) -> Want {
        Want { kind: Kind::Semaphore, mode: Mode::Permit, limit }
    }

    pub fn shape(self) -> Shape {
        Shape { kind: self.kind, limit: self.limit }
    }
}

/// What a stored lock is: its kind, and for a semaphore its limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    pub kind: Kind,
    pub limit: u32,
}

/// The request id of the last `LOCK.EXIT ... ID` applied to a reentrant
/// lock, kept inline (at most 64 bytes) so that a holder's record never
/// allocates.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct ExitId {
    len: u8,
    bytes: [u8; REQUEST_ID_LEN_MAX],
}

impl ExitId {
    pub const NONE: ExitId = ExitId { len: 0, bytes: [0; REQUEST_ID_LEN_MAX] };

    /// `None` if `id` is longer than [`REQUEST_ID_LEN_MAX`] (the parser and
    /// the decoder never let one through).
    pub fn new(id: &[u8]) -> Option<ExitId> {
        let mut out = ExitId::NONE;
        out.bytes.get_mut(..id.len())?.copy_from_slice(id);
        out.len = u8::try_from(id.len()).ok()?;
        Some(out)
    }

    pub fn as_bytes(&self) -> &[u8] {
        self.bytes.get(..usize::from(self.len)).unwrap_or_default()
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl std::fmt::Debug for ExitId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", String::from_utf8_lossy(self.as_bytes()))
    }
}

/// One holder's record (its owner is the key it is stored under).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hold {
    pub mode: Mode,
    /// The fencing token issued with this grant (or raised by LOCK.FENCE).
    pub fence: u64,
    /// Module-clock instant at which the hold ends by itself.
    pub deadline_ms: i64,
    /// Reentrant hold count; 1 for every other kind.
    pub holds: u32,
    /// Reentrant only: the last EXIT request id applied.
    pub exit_id: ExitId,
}

impl Hold {
    pub fn new(mode: Mode, fence: u64, deadline_ms: i64) -> Hold {
        Hold { mode, fence, deadline_ms, holds: 1, exit_id: ExitId::NONE }
    }

    pub fn is_live(&self, now_ms: i64) -> bool {
        now_ms < self.deadline_ms
    }

    pub fn remaining_ms(&self, now_ms: i64) -> i64 {
        self.deadline_ms.saturating_sub(now_ms).max(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn letters_round_trip() {
        for kind in [Kind::Plain, Kind::Reentrant, Kind::Shared, Kind::Semaphore] {
            assert_eq!(Kind::from_letter(kind.letter()), Some(kind));
        }
        for mode in [Mode::Read, Mode::Write, Mode::Permit] {
            assert_eq!(Mode::from_letter(mode.letter()), Some(mode));
        }
        assert_eq!(Kind::from_letter(b'x'), None);
        assert_eq!(Mode::from_letter(b'P'), None);
    }

    #[test]
    fn kinds_admit_their_modes_only() {
        assert!(Kind::Plain.allows(Mode::Write) && !Kind::Plain.allows(Mode::Read));
        assert!(Kind::Shared.allows(Mode::Read) && Kind::Shared.allows(Mode::Write));
        assert!(!Kind::Shared.allows(Mode::Permit) && Kind::Semaphore.allows(Mode::Permit));
        assert!(!Kind::Semaphore.allows(Mode::Write));
    }

    #[test]
    fn names_are_the_words_lock_info_documents() {
        // README, LOCK.INFO: `kind` and each holder's `mode`.
        let kinds = [Kind::Plain, Kind::Reentrant, Kind::Shared, Kind::Semaphore].map(Kind::name);
        assert_eq!(kinds, ["plain", "reentrant", "shared", "semaphore"]);
        let modes = [Mode::Read, Mode::Write, Mode::Permit].map(Mode::name);
        assert_eq!(modes, ["read", "write", "permit"]);
    }

    #[test]
    fn remaining_time_counts_down_to_zero_never_below() {
        // LOCK.INFO's `ttl-ms`: what is left of the hold, 0 once it is over.
        let hold = Hold::new(Mode::Write, 7, 1_500);
        assert_eq!(hold.remaining_ms(1_000), 500);
        assert_eq!(hold.remaining_ms(1_499), 1);
        assert_eq!(hold.remaining_ms(1_500), 0);
        assert_eq!(hold.remaining_ms(9_000), 0);
        assert!(hold.is_live(1_499) && !hold.is_live(1_500), "live exactly while time remains");
    }

    #[test]
    fn exit_ids_are_bounded() {
        let id = ExitId::new(b"req-17").unwrap();
        assert_eq!(id.as_bytes(), b"req-17");
        assert!(ExitId::new(&[b'x'; REQUEST_ID_LEN_MAX]).is_some());
        assert!(ExitId::new(&[b'x'; REQUEST_ID_LEN_MAX + 1]).is_none());
        assert!(ExitId::NONE.is_empty());
    }
}
