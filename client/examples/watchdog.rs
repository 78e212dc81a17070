//! client/README.md's library quick start: a lock renewed by the watchdog
//! while the work runs, the work stopped if the lock is lost. Nodes from
//! `REDLOCK_NODES` (scripts/run writes them to run/env).
//!
//! ```sh
//! . run/env && cargo run --release -p redlock-client --example watchdog
//! ```

use std::process::ExitCode;
use std::time::Duration;

use redlock_client::{Config, Error, Mode, Redlock, RetryPolicy, Watchdog};

/// The work the lock protects; it hands the fencing token to the resource.
async fn work(fence: u64) {
    tokio::time::sleep(Duration::from_millis(200)).await;
    println!("report written with fencing token {fence}");
}

async fn run(nodes: &str) -> Result<(), Error> {
    let redlock = Redlock::connect(nodes.split(','), Config::default()).await?; // unreachable nodes are tried again later
    let policy = RetryPolicy::within(Duration::from_secs(30));
    let mut guard = redlock.acquire("report", Mode::Plain, Duration::from_secs(10), &policy).await?;
    guard.start_watchdog(Watchdog::default()); // renews every ttl/3, bounded
    let fence = guard.fencing_token().await?; // the fencing round, only when asked for
    tokio::select! {
        _ = work(fence) => {}
        lost = guard.lost() => eprintln!("lock lost: {lost}"), // fires at once, never silently
    }
    guard.release().await?; // Drop also releases (in the background)
    redlock.settle().await; // before the process exits
    Ok(())
}

#[tokio::main]
async fn main() -> ExitCode {
    let nodes = std::env::var("REDLOCK_NODES").unwrap_or_default(); // redis://host:port,...
    match run(&nodes).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("watchdog: {e}"); // a sentence with the nodes' counts
            ExitCode::FAILURE
        }
    }
}
