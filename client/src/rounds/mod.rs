//! The quorum rounds, below both `Redlock` and `Guard`: each sends one
//! command to all N nodes at once and counts the answers against a quorum.
//!
//! - `fanout`: the nodes of one client ([`fanout::Members`]: their
//!   connections, timeouts and background work), one call per node, the
//!   answers recorded as they come; why a round may return at its majority.
//! - `flight`: a round's calls in flight, with one inbox and one timer for
//!   all of them, and their answers as they come.
//! - `lease`: the validity a round obtains, the TTL checks.
//! - `grant`: the grant round (with the fencing round at once, for
//!   reentrant holds) and the undo of a failed one.
//! - `fence`: the fencing round a guard runs when its token is asked for;
//!   why fencing later is safe, and why a set's quorum token is as safe as
//!   one resource's.
//! - `extend`, `release`: the rounds a held lock ends with, or lives on by.
//!
//! `Redlock` runs them for its callers and hands out guards; a `Guard`
//! holds the [`fanout::Members`] it was granted on and runs its own fencing,
//! extend and release rounds there, so it needs nothing of `Redlock`.
//! Nothing here imports either of them.

pub(crate) mod extend;
pub(crate) mod fanout;
pub(crate) mod fence;
pub(crate) mod flight;
pub(crate) mod grant;
pub(crate) mod lease;
pub(crate) mod release;
