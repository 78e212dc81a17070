//! `lock-model`: a model check of the quorum lock protocol. The protocol
//! (`protocol.rs`: the grant round, the fence round, the lease check, the
//! release; nodes with their fencing counter and the value of it their AOF
//! keeps, quarantine, module clock and restart grace) is a small state
//! machine, and the checker (`check.rs`) visits every state it can reach
//! under faults (one of each class of states that differ only in the
//! numbering of interchangeable nodes and clients), breadth-first, checking
//! the safety properties in each. The plain Redlock recipe is the same
//! machine with `SET NX PX` nodes and no token; the checker finds its
//! counterexamples, and those of bugs planted in the module's protocol.
//! docs/safety.md says what the model covers and what it leaves to the
//! simulator (`sim/`) and the real-server suites.
//!
//! - `check.rs`: the breadth-first search and its counterexamples;
//! - `protocol.rs`: the model: state, actions, properties;
//! - `scenarios.rs`: the runs the tests and the `lock-model` binary make.

pub mod check;
pub mod protocol;
pub mod scenarios;
