//! The README's quick start: a fenced lock on a majority of the nodes in
//! `REDLOCK_NODES` (scripts/run writes them to run/env).
//!
//! ```sh
//! . run/env && cargo run --release -p redlock-client --example quickstart
//! ```

use std::process::ExitCode;
use std::time::Duration;

use redlock_client::{Config, Mode, Redlock, RetryPolicy};

#[tokio::main]
async fn main() -> ExitCode {
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // The client's errors are sentences with the nodes' counts.
            eprintln!("quickstart: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run() -> Result<(), Box<dyn std::error::Error>> {
    // redis://host:port,... of the lock nodes.
    let nodes = std::env::var("REDLOCK_NODES")
        .map_err(|_| "REDLOCK_NODES is not set: `. run/env` after scripts/run sets it")?;
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
