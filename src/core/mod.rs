//! Pure lock logic: no Redis import, no clock, no globals. Everything here is
//! unit- and property-tested without a server.

pub mod args;
pub mod codec;
pub mod fencing;
pub mod group;
pub mod lock;
pub mod quarantine;
pub mod queue;

#[cfg(test)]
mod model_tests;
