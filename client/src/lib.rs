//! A quorum (Redlock) client for the `lock` Redis module.
//!
//! It runs the Redlock majority protocol over N independent members that
//! load the module, each one master (`redis://host:port`) or one Redis /
//! Valkey Cluster (`redis+cluster://host:port?addr=host:port`, one vote
//! whatever its shards), each over TLS when written `rediss://` /
//! `rediss+cluster://` (settings: [`Tls`], in [`Config::tls`]), and adds what plain Redlock lacks: a fencing token that
//! strictly increases across holders without relying on clocks, release
//! that never leaves a lock behind, and a watchdog that says at once when a
//! lock is lost.
//!
//! ```no_run
//! # async fn demo() -> Result<(), redlock_client::Error> {
//! use std::time::Duration;
//! use redlock_client::{Config, Mode, Redlock, RetryPolicy, Watchdog};
//!
//! let nodes = ["redis://127.0.0.1:7000/", "redis://127.0.0.1:7001/", "redis://127.0.0.1:7002/"];
//! let redlock = Redlock::connect(nodes, Config::default()).await?;
//! let ttl = Duration::from_secs(10);
//! let mut guard = redlock.acquire("nightly-report", Mode::Plain, ttl, &RetryPolicy::default()).await?;
//! guard.start_watchdog(Watchdog::default());
//! let fence = guard.fencing_token().await?; // the fencing round runs here, only if asked for
//! tokio::select! {
//!     _ = do_the_work(fence) => {}
//!     lost = guard.lost() => eprintln!("lock lost: {lost}; stopping"),
//! }
//! guard.release().await?;
//! # Ok(()) }
//! # async fn do_the_work(_fence: u64) {}
//! ```
//!
//! The API, in the spirit of etcd's `Mutex`: [`Redlock::try_acquire`] (one
//! attempt) and [`Redlock::acquire`] (retried within a [`RetryPolicy`]),
//! both taking a [`Mode`] (plain, read, write, or one of a semaphore's
//! permits; `write` sends the module's `LOCK.EXCLUSIVE`) and returning a
//! [`Guard`]; [`Redlock::try_acquire_many`] and
//! [`Redlock::acquire_many`] for a set of resources taken all or nothing
//! (one `LOCK.MACQUIRE` per node, the same [`Guard`] for the whole set);
//! reentrant [`Redlock::enter`] and
//! [`Redlock::exit`]; [`Redlock::release`] and [`Redlock::extend`] by token
//! for tools; [`Redlock::check`] (is a fencing token the live grant on a
//! majority?) for resource servers; [`Redlock::info`]; [`Redlock::status`]
//! (can a majority grant right now, and if not why) for operators.
//!
//! The parts, and where they live, each importing only the ones listed
//! after it:
//! - [`bindings`]: what the Python and Node.js packages share (units,
//!   modes by name, claims, calls by token, a guard shared with a
//!   language's lock object), so that each is only its language's glue.
//! - [`Redlock`] (`redlock.rs`): the API: checks its arguments, runs the
//!   rounds, hands out guards; reentrant enter/exit, info, check.
//! - [`Guard`] (`guard.rs`): a held lock, its fencing token (the fencing
//!   round runs on the first call of [`Guard::fencing_token`]), extend,
//!   release (also on drop), the watchdog and [`Guard::lost`]. It holds the
//!   nodes it was granted on and runs its own rounds there; it does not
//!   know `Redlock`.
//! - `lifetime`: a held lock's lease and [`Status`], the [`Watchdog`]'s
//!   schedule and the loss reports, with no I/O, on tokio's clock (tested
//!   on tokio's paused clock).
//! - `info`: `LOCK.INFO` on every node, read into [`LockInfo`].
//! - `status`: `INFO lock` on every node, read into a [`QuorumStatus`]
//!   (pure parsing and verdict, unit-tested).
//! - `rounds`: the quorum rounds below both: the fan-out to all N members
//!   and why a round may return at its majority (`fanout`), the lease
//!   (`lease`), grant and undo (`grant`), the fencing round and why it is
//!   safe late and for sets (`fence`), `extend`, `release`.
//! - `claim`: what a guard holds (one resource, or a set) and the command
//!   each round sends for it: the single-key commands for one resource,
//!   `LOCK.MACQUIRE` / `RENEW` / `MRELEASE` and pipelined `LOCK.FENCE`s
//!   for a set; pure, unit-tested.
//! - `member`: one member of the quorum, a master or a cluster, behind one
//!   call per round: how it is written; for a cluster, the slot of a key,
//!   the slot map, the redirects, the topology fetch's throttle and the
//!   ordering gate (pure, unit- and property-tested: why a call never
//!   overtakes an earlier one of its slot, redirects included), and the
//!   routing over one node per master (`cluster.rs`).
//! - `node`: one node's address, its queue of calls (in the order they were
//!   made) and the one connection its writer task writes them on, with the
//!   connect and per-command timeouts; `resp`: the RESP2 reply reader.
//! - `tls`: the TLS settings ([`Tls`]), the rustls client they make, the
//!   handshake and each TLS failure in words.
//! - `sim`: where a connection and a random number come from (a TCP
//!   socket, `rand`), replaced on its thread by the deterministic
//!   simulator only with the cargo feature `sim`.
//! - [`Error`] (`error.rs`): named errors whose messages give the counts.
//! - [`quorum`]: the pure side, with no I/O and no clock reads, by idea:
//!   arithmetic (majority, the semaphore quorum, drift, validity, the
//!   renewal schedule), retry (the policy and its delays), replies (what
//!   a node's answer means), tally (counts, progress, verdicts, the
//!   fencing round's plan); unit-tested with a fake clock.
//!
//! The protocol (see client/README.md, and the top-level README's section
//! "The quorum client"):
//! 1. `LOCK.ACQUIRE key token ttl` on all N at once, each call with its own
//!    timeout; a majority (N/2+1) must grant. The round returns as soon as
//!    a majority granted; the other calls go on in the background.
//! 2. validity = ttl - elapsed - drift (ttl * 1% + 2 ms) must be positive.
//! 3. T = the largest fencing token among the grants received (a
//!    majority); when the caller asks for the fencing token (or at once, for
//!    reentrant `enter`), `LOCK.FENCE key token T` on all N; held with token
//!    T only if a majority answers 1 within the validity (returning at that
//!    majority). Any two majorities share a node, which will not grant the
//!    next holder a token at or below T.
//! 4. On any failure, `LOCK.RELEASE` on all N, after every acquire call has
//!    finished, on the same ordered connection: a release never overtakes an
//!    acquire still on its way. A failed round waits for every answer, for
//!    exact counts in its error.
//! 5. A guard's release goes to all N and returns at a majority; calls left
//!    in the background are bounded by their timeouts, and
//!    [`Redlock::settle`] waits for them (before a process exits).
//!
//! Why returning at the majority is safe is written down in
//! `rounds/fanout.rs`; why fencing late is safe, and why a set's quorum
//! token is as safe as one resource's, in `rounds/fence.rs`.
//!
//! Read-write locks and semaphores ([`Mode::Read`], [`Mode::Write`],
//! [`Mode::Permit`]) run the same rounds with
//! the module's `LOCK.SHARED`, `LOCK.EXCLUSIVE` and `LOCK.SEMAPHORE`, and
//! return the same [`Guard`]. Reads and writes need a majority; a
//! semaphore with L permits needs `floor(L * N / (L + 1)) + 1` grants (and
//! extensions), more than a majority from L = 2 on: see
//! [`quorum::semaphore_quorum`] for why and for the proof. The fencing
//! round stays a majority.

pub mod bindings;
mod claim;
mod error;
mod guard;
mod info;
mod lifetime;
mod member;
mod node;
pub mod quorum;
mod redlock;
mod resp;
mod rounds;
#[cfg(feature = "sim")]
#[doc(hidden)]
pub mod sim;
#[cfg(not(feature = "sim"))]
mod sim;
mod status;
mod tls;

pub use error::{Error, Lost, Phase, Result};
pub use guard::{Detached, Guard};
pub use info::{HolderInfo, LockInfo, NodeInfo, Refused};
pub use lifetime::{Renewal, Status, Watchdog};
/// The pub/sub channel on which a member's module announces a freed lock
/// (`released` / `expired`), for code that waits in its own event loop:
/// `freed::channel(0, key, in_cluster)` gives the name and whether to
/// `SUBSCRIBE` or, on a cluster member, `SSUBSCRIBE` at the key's shard.
pub use lock_protocol::freed;
pub use quorum::{Mode, Quorum, RetryPolicy, Tally};
pub use redlock::{Entered, Redlock};
pub use rounds::fanout::Config;
pub use rounds::lease::Lease;
pub use status::{
    Blocker, Difference, MemberStatus, NodeHealth, NodeQuarantine, NodeStatus, QuorumStatus, Readiness,
};
pub use tls::Tls;
