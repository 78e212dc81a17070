//! The validity a grant or extension round obtains, and the TTL checks
//! every such round makes before and after it runs.

use std::time::Duration;

use tokio::time::Instant;

use crate::claim::millis;
use crate::error::{Error, Result};
use crate::quorum;

/// The validity of one grant or extension, on tokio's clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lease {
    /// When the round that obtained it started (before any node saw it).
    pub start: Instant,
    pub ttl: Duration,
    /// `start + ttl - drift`: after this the lock may be someone else's.
    pub deadline: Instant,
}

impl Lease {
    pub(crate) fn new(start: Instant, ttl: Duration) -> Lease {
        Lease { start, ttl, deadline: quorum::deadline(start, ttl) }
    }
}

/// Whole milliseconds (the nodes' unit), and long enough to outlast the
/// drift allowance.
pub(crate) fn check_ttl(ttl: Duration) -> Result<Duration> {
    let whole = Duration::from_millis(millis(ttl));
    if quorum::validity(whole, Duration::ZERO).is_none() {
        return Err(Error::InvalidArgument(format!(
            "ttl {} ms is not above the clock-drift allowance ({} ms)",
            whole.as_millis(),
            quorum::drift(whole).as_millis()
        )));
    }
    Ok(whole)
}

/// The error of rounds that took so long that no validity was left.
pub(crate) fn expired(resource: &str, ttl: Duration, elapsed: Duration) -> Error {
    Error::ExpiredBeforeUse { resource: resource.to_string(), ttl, elapsed, drift: quorum::drift(ttl) }
}
