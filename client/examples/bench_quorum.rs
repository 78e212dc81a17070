//! Uncontended acquire + release cycles over the first N of the given
//! nodes, for the side-by-side benchmark against node-redlock and pottery
//! (`scripts/bench-client`; the peers' drivers are in
//! `scripts/bench-peers/`). Prints one JSON object, in the same shape as
//! the peers' drivers:
//!
//! ```sh
//! cargo run --release -p redlock-client --example bench_quorum -- \
//!     --ports 7000,7001,7002,7003,7004 --n 5 --iterations 3000 --warmup 300
//! ```
//!
//! One cycle is `try_acquire` (the LOCK.ACQUIRE round and the LOCK.FENCE
//! round, each on all N nodes in parallel, each returning at its majority)
//! and then `release` (LOCK.RELEASE on all N, returning at its majority). The acquire latency is `try_acquire` alone; ops/s counts
//! whole cycles over the wall time of the measured cycles. Resources are
//! `PREFIX:0` .. `PREFIX:15` in turn, so no cycle waits for another's
//! release. One task, tokio current-thread runtime (as node is one thread).

use std::time::{Duration, Instant};

use clap::Parser;
use redlock_client::{Config, Redlock};

#[derive(Parser, Debug)]
#[command(about = "Acquire+release cycles of the quorum client; prints JSON")]
struct Args {
    /// Comma-separated loopback ports of the masters.
    #[arg(long, value_delimiter = ',', required = true)]
    ports: Vec<u16>,
    /// Use the first N ports.
    #[arg(long)]
    n: usize,
    /// Measured cycles.
    #[arg(long, default_value_t = 2000)]
    iterations: usize,
    /// Cycles run first and not measured (connections, caches).
    #[arg(long, default_value_t = 200)]
    warmup: usize,
    /// Lock TTL in ms.
    #[arg(long, default_value_t = 10_000)]
    ttl_ms: u64,
    /// Resource name prefix (distinct per client).
    #[arg(long, default_value = "bench:ours")]
    prefix: String,
    /// Stop measuring after this many seconds (the JSON says how many
    /// cycles were done).
    #[arg(long, default_value_t = 60.0)]
    max_seconds: f64,
    /// Free-form label copied into the JSON.
    #[arg(long, default_value = "")]
    label: String,
    /// Per-command timeout in ms (the client's default is 250).
    #[arg(long, default_value_t = 250)]
    command_timeout_ms: u64,
}

fn percentile_ms(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index.min(sorted.len() - 1)].as_secs_f64() * 1000.0
}

fn json_num(x: f64) -> String {
    if x.is_finite() {
        format!("{x:.4}")
    } else {
        "null".into()
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    if args.n == 0 || args.n > args.ports.len() {
        return Err(format!("--n {} must be 1..={} (the ports given)", args.n, args.ports.len()).into());
    }
    let nodes: Vec<String> = args.ports[..args.n].iter().map(|p| format!("redis://127.0.0.1:{p}/")).collect();
    let config =
        Config { command_timeout: Duration::from_millis(args.command_timeout_ms), ..Config::default() };
    let redlock = Redlock::connect(&nodes, config).await?;
    let ttl = Duration::from_millis(args.ttl_ms);
    let resources: Vec<String> = (0..16).map(|i| format!("{}:{i}", args.prefix)).collect();

    for i in 0..args.warmup {
        let guard = redlock.try_acquire(&resources[i % resources.len()], ttl).await?;
        guard.release().await?;
    }

    let deadline = Duration::from_secs_f64(args.max_seconds);
    let mut acquire = Vec::with_capacity(args.iterations);
    let mut release = Vec::with_capacity(args.iterations);
    let mut failures = 0usize;
    let started = Instant::now();
    for i in 0..args.iterations {
        if started.elapsed() > deadline {
            break;
        }
        let resource = &resources[i % resources.len()];
        let t0 = Instant::now();
        let guard = match redlock.try_acquire(resource, ttl).await {
            Ok(guard) => guard,
            Err(e) => {
                failures += 1;
                eprintln!("bench_quorum: acquire {resource}: {e}");
                continue;
            }
        };
        let t1 = Instant::now();
        acquire.push(t1 - t0);
        if let Err(e) = guard.release().await {
            failures += 1;
            eprintln!("bench_quorum: release {resource}: {e}");
        }
        release.push(t1.elapsed());
    }
    let wall = started.elapsed().as_secs_f64();
    // Rounds return at their majority; let the slower nodes' calls (the
    // last releases) end before the process does (not measured).
    redlock.settle().await;
    acquire.sort();
    release.sort();
    let done = acquire.len();
    println!(
        "{{\"client\":\"redlock-client\",\"label\":{:?},\"n\":{},\"iterations\":{},\"completed\":{},\"failures\":{},\
         \"seconds\":{},\"ops_per_s\":{},\"acquire_p50_ms\":{},\"acquire_p99_ms\":{},\"release_p50_ms\":{}}}",
        args.label,
        args.n,
        args.iterations,
        done,
        failures,
        json_num(wall),
        json_num(done as f64 / wall),
        json_num(percentile_ms(&acquire, 0.5)),
        json_num(percentile_ms(&acquire, 0.99)),
        json_num(percentile_ms(&release, 0.5)),
    );
    Ok(())
}
