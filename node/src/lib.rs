//! The Node.js bindings of the quorum client (napi-rs), loaded by the
//! package's `index.js` as `redlock_client.node`.
//!
//! Every decision (majority, validity, the fencing round, the semaphore
//! quorum, ordered release, the watchdog and its loss report) stays in the
//! `redlock_client` crate. This layer only converts: JavaScript arguments
//! into the crate's types (modes, milliseconds, retry policies), its
//! results into JavaScript values, and its futures into Promises, run on
//! a current-thread Tokio runtime that the JavaScript thread drives from
//! its event loop (`jsloop.rs`; elsewhere than on Linux, one on a thread of
//! its own, `runtime.rs`) and settled through one queue per JavaScript
//! thread (`settle.rs`).
//!
//! - `client.rs`: [`client::Client`], a `Redlock`, and [`client::connect`];
//! - `held.rs`: [`held::Held`], a `Guard`, and its loss report;
//! - `call.rs`: a call's Promise, and where its future runs;
//! - `jsloop.rs`: the JavaScript thread's runtime, driven by libuv;
//! - `runtime.rs`: the runtime thread, where the JavaScript thread cannot
//!   drive one;
//! - `settle.rs`: the Promises of the calls, settled on the JavaScript
//!   thread in batches;
//! - `convert.rs`: modes, durations, tallies, lock reports, and errors,
//!   which come back as a [`convert::Failure`] for `errors.js` to turn into
//!   its error classes.
//!
//! A Promise, once started, runs to its end on the runtime: a release is
//! never cut in half, and a lock whose JavaScript object is garbage
//! collected is released in the background.

// The client's `Error` (128 bytes) is passed through as it is, in its own
// `Result`s, as the client crate itself does.
#![allow(clippy::result_large_err)]

// Public so that what only napi-rs's registration uses (`connect`) counts
// as used in every build.
pub mod call;
pub mod client;
pub mod convert;
pub mod held;
pub mod jsloop;
pub mod runtime;
pub mod settle;

/// The workspace's version (Cargo.toml), as the package's `version`
/// export; scripts/release stamps the same into the packed package.json.
#[napi_derive::napi]
pub fn version() -> String {
    env!("CARGO_PKG_VERSION").to_string()
}
