//! The CLI's exit codes, in one place (listed in `redlock --help`).

use redlock_client::{Error, Phase};

pub const OK: u8 = 0;
/// A caller mistake (bad node URL, TTL below the drift allowance, ...).
pub const INVALID: u8 = 1;
/// A usage error (as clap's own: flags that do not go together).
pub const USAGE: u8 = 2;
/// Not enough nodes answered yes for reasons other than another holder
/// (EX_UNAVAILABLE).
pub const NO_QUORUM: u8 = 69;
/// Another owner holds the lock; or the token does not hold it any more.
pub const HELD: u8 = 73;
/// exec: the lock was lost while the command ran (EX_TEMPFAIL).
pub const LOST: u8 = 75;
/// exec: the command exists but could not be started.
pub const CANNOT_RUN: u8 = 126;
/// exec: the command was not found.
pub const NOT_FOUND: u8 = 127;

pub fn code(error: &Error) -> u8 {
    match error {
        Error::Contended { .. } => HELD,
        // For release and extend, "no" means the token does not hold the
        // lock there: a majority of those is "not held", not "unavailable".
        Error::NoQuorum { phase: Phase::Release | Phase::Extend, tally, .. } if tally.no >= tally.need() => {
            HELD
        }
        Error::NoQuorum { .. } | Error::ExpiredBeforeUse { .. } => NO_QUORUM,
        Error::Lost { .. } => LOST,
        Error::InvalidArgument(_) => INVALID,
    }
}
