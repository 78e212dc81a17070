//! The pure side of the quorum protocol: no I/O and no clock reads.
//!
//! Every function that needs time takes the instants or durations it works
//! on, so the unit tests drive it with a fake clock (instants built by
//! adding durations to one base instant) instead of sleeping. The instants
//! are tokio's (`tokio::time::Instant`), the one clock of the whole client:
//! the guard, the watchdog and the retries read it too, so their tests run
//! on tokio's paused clock and assert exact schedules.
//!
//! By idea:
//! - `arithmetic`: majority, the semaphore quorum (and why it is the least
//!   that is safe), drift, validity and deadlines, the renewal schedule,
//!   the limits (nodes, set size, token length), lock tokens.
//! - `retry`: [`RetryPolicy`] and the delay between two attempts.
//! - `replies`: one node's reply ([`Raw`]) read as an [`Answer`].
//! - `tally`: a round's answers as they come in ([`Progress`], the fencing
//!   round's plan), their counts ([`Tally`]), the [`verdict`] on a failed
//!   grant round, the quorum's fencing token ([`fence_floor`]).
//!
//! Every item is used from here (`quorum::majority`, `quorum::Tally`, ...);
//! the files below are how it is written, not how it is named.

mod arithmetic;
mod replies;
mod retry;
mod tally;

pub use arithmetic::{
    deadline, drift, majority, next_renewal, remaining, renewal_allowed, semaphore_quorum, token_from_bits,
    validity, Mode, Quorum, DRIFT_FIXED, DRIFT_PERCENT, NODES_MAX, RENEWAL_DIVISOR, SET_KEYS_MAX,
    TOKEN_LEN_MAX,
};
pub use replies::{
    classify_every_flag, classify_exit, classify_flag, classify_grant, error_text, quarantine_left_ms,
    refuses_request, Answer, Raw,
};
pub use retry::{retry_delay, RetryPolicy};
pub use tally::{fence_floor, holds_left, verdict, Progress, Tally, Verdict};
