//! Acquire and release latency over the given nodes.
//!
//! ```sh
//! cargo run --release -p redlock-client --example latency -- 2000 redis://127.0.0.1:7000 redis://127.0.0.1:7001 ...
//! ```
//!
//! Prints the median and 99th percentile of `try_acquire` (the grant
//! round), of the first `fencing_token` (the fencing round) and of
//! `release`, over the given number of cycles.

use std::time::{Duration, Instant};

use redlock_client::{Config, Mode, Redlock};

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index.min(sorted.len() - 1)]
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let cycles: usize = args.next().ok_or("usage: latency CYCLES NODE...")?.parse()?;
    let nodes: Vec<String> = args.collect();
    let redlock = Redlock::connect(&nodes, Config::default()).await?;
    let (mut acquire, mut fence, mut release) =
        (Vec::with_capacity(cycles), Vec::with_capacity(cycles), Vec::with_capacity(cycles));
    for i in 0..cycles {
        let resource = format!("latency-{}", i % 16);
        let started = Instant::now();
        let guard = redlock.try_acquire(&resource, Mode::Plain, Duration::from_secs(10)).await?;
        acquire.push(started.elapsed());
        let started = Instant::now();
        guard.fencing_token().await?;
        fence.push(started.elapsed());
        let started = Instant::now();
        guard.release().await?;
        release.push(started.elapsed());
    }
    // Let the calls left in the background by the last rounds end.
    redlock.settle().await;
    acquire.sort();
    fence.sort();
    release.sort();
    println!(
        "N={} cycles={cycles}: try_acquire p50 {:?} p99 {:?}; fencing_token p50 {:?} p99 {:?}; \
         release p50 {:?} p99 {:?}",
        nodes.len(),
        percentile(&acquire, 0.5),
        percentile(&acquire, 0.99),
        percentile(&fence, 0.5),
        percentile(&fence, 0.99),
        percentile(&release, 0.5),
        percentile(&release, 0.99)
    );
    Ok(())
}
