//! `lock-core`: the lock module's pure logic, a crate of its own so that
//! code outside a server (a simulator, a model check) can link it:
//! the module's crate carries the Redis allocator and cannot. No Redis
//! import, no clock, no globals. Everything here is unit- and
//! property-tested without a server; the module re-exports it as
//! `redis_lock::core`.
//!
//! - `kind.rs`: the vocabulary (kinds, modes, a holder's record);
//! - `lock.rs`: the one state machine, for every kind;
//! - `txn.rs`: a transaction over a stored lock ([`txn::Stored`]), whose
//!   edits the adapter writes once;
//! - `memory.rs`: stored locks held in memory; `codec.rs`: stored forms;
//! - `fencing.rs`, `quarantine.rs`, `queue.rs`, `args.rs`: the fencing
//!   counter, the quarantine arithmetic, waiter queues, argument parsing;
//! - `syntax.rs`: each command's arguments as data (COMMAND DOCS, usage);
//! - `forgetting.rs`: what a node may have forgotten; `ledger.rs`: the
//!   byte form of what a node keeps outside its lock keys; `waiting.rs`: the
//!   waiting policy; `hashform.rs`, `histogram.rs`, `hotkeys.rs`.

#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::panic,
        clippy::indexing_slicing,
        clippy::todo,
        clippy::unimplemented
    )
)]

/// An invariant of the state machine: a `debug_assert!` that also holds in
/// this crate's own unit and property tests when they are built in release
/// mode (as CI builds them), so every random operation sequence checks it,
/// while the module Redis loads pays nothing for it.
macro_rules! invariant {
    ($($arg:tt)*) => {
        if cfg!(any(test, debug_assertions)) {
            assert!($($arg)*);
        }
    };
}

pub mod args;
pub mod codec;
pub mod fencing;
pub mod forgetting;
pub mod hashform;
pub mod histogram;
pub mod hotkeys;
pub mod imports;
pub mod kind;
pub mod ledger;
pub mod lock;
pub mod memory;
pub mod quarantine;
pub mod queue;
pub mod syntax;
pub mod txn;
pub mod waiting;

#[cfg(test)]
mod model_tests;
