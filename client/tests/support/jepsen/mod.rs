//! The Jepsen-style safety suite's parts (used by `tests/jepsen.rs`):
//! a TCP proxy for network faults, the classic Redlock for the contrast,
//! the nodes and their faults, the clients, the history and its checker.
#![allow(dead_code)]

pub mod checker;
pub mod classic;
pub mod cluster;
pub mod history;
pub mod proxy;
pub mod worker;
