//! The README's quick start: a fenced lock on a majority of the nodes in
//! `REDLOCK_NODES` (scripts/run writes them to run/env).
//!
//! ```sh
//! . run/env && cargo run --release -p redlock-client --example quickstart
//! ```

use std::time::Duration;

use redlock_client::{Config, Mode, Redlock, RetryPolicy};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // redis://host:port,... of the lock nodes.
    let nodes = std::env::var("REDLOCK_NODES")?;
    let redlock = Redlock::connect(nodes.split(','), Config::default()).await?;
    let policy = RetryPolicy::within(Duration::from_secs(5));
    let ttl = Duration::from_secs(10);
    let guard = redlock.acquire("orders:42", Mode::Plain, ttl, &policy).await?;
    // The fencing round: one token for the whole quorum, higher than any
    // earlier holder's. Pass it to whatever the lock protects.
    let fence = guard.fencing_token().await?;
    println!("holding orders:42 on a majority, fencing token {fence}");
    guard.release().await?;
    redlock.settle().await; // the releases still on their way
    Ok(())
}
