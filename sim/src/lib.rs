//! `lock-sim`: a deterministic simulation of the lock service. The real
//! quorum client (`redlock-client`, its rounds, guards, retries and RESP
//! reader) runs on a single-threaded Tokio runtime with paused time over
//! in-memory connections to simulated nodes that run the module's real
//! lock core (`lock-core`), under faults drawn from a seed; a checker
//! reads what happened. One seed replays one history exactly.
//!
//! - `cluster.rs`: a Redis Cluster as a quorum member: shard masters,
//!   slot map, redirects; `cluster_faults.rs`: its resharding, failovers
//!   and the check at the end;
//! - `verdict.rs`: the client's `status()` checked against the truth;
//! - `run.rs`: one history: the setup, the fault schedule, the clients;
//! - `net.rs`: the network: ordered connections and their faults;
//! - `node.rs`: a node: the core behind a thin command dispatcher;
//! - `bad_input.rs`: malformed calls, and the guard that turns a panic
//!   of the core into a violation;
//! - `command.rs`: a call's words read with the module's own parser;
//! - `history.rs`: the events, and the checker's properties;
//! - `link.rs`: a client's own connection to a node (`reentrant.rs`,
//!   `waiters.rs`);
//! - `reentrant.rs`: reentrant clients whose `EXIT ... ID` is sent again;
//! - `sets.rs`: sets of resources taken all or nothing, and their check;
//! - `waiters.rs`: clients that wait on a node (`WAIT`);
//! - `waits.rs`: server-side waits (`WAIT`) on a node, over the core's
//!   queues and hand-off;
//! - `forget.rs`: lock keys a node loses behind the module's back, and
//!   the module's forgetting rules that cover them;
//! - `stored.rs`: a lock key's value as the module stores it;
//! - `tokens.rs`: the checker's record of each node's tokens;
//! - `resp.rs`: the RESP the node reads and writes.

pub mod bad_input;
pub mod cluster;
pub mod cluster_faults;
pub mod command;
pub mod forget;
pub mod history;
pub mod link;
pub mod net;
pub mod node;
pub mod reentrant;
pub mod resp;
pub mod run;
pub mod sets;
pub mod stored;
pub mod tokens;
pub mod verdict;
pub mod waiters;
pub mod waits;
