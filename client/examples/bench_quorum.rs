//! Acquire + release cycles of the quorum client over the first N of the
//! given nodes, for the side-by-side benchmark against node-redlock and
//! pottery (`scripts/bench-client`; the peers' drivers are in
//! `scripts/bench-peers/`). Prints one JSON object, in the same shape as
//! the peers' drivers:
//!
//! ```sh
//! cargo run --release -p redlock-client --example bench_quorum -- \
//!     --ports 7000,7001,7002,7003,7004 --n 5 --iterations 3000 --warmup 300 [--fenced] \
//!     [--tasks 64 [--shared 4]]
//! ```
//!
//! Without `--ports` it starts N masters itself, through the test kit
//! (`testkit/`: `LOCK_SERVER_BIN`, `LOCK_MODULE_SO` as for the tests).
//! `--members` names the quorum's members instead (masters or clusters,
//! `redis+cluster://host:port?addr=host:port`: `scripts/bench-cluster`).
//!
//! One cycle is an acquire (the grant round on all N nodes in parallel,
//! returning at its majority; with `--fenced` also the fencing round, as a
//! caller that reads the fencing token pays it) and then the guard's
//! release (LOCK.RELEASE on all N, returning at its majority). The acquire
//! latency is the acquire alone (with `--shared`: from the first attempt to
//! the grant, retries included); cycles/s counts whole cycles over the wall
//! time of the measured cycles.
//!
//! `--tasks T` runs T tasks at once on ONE `Redlock` (one connection per
//! node, shared), each doing `iterations / T` cycles. Without `--shared`
//! every task has its own 4 resources (never contended); with `--shared K`
//! task i uses resource `i % K`, so T/K tasks contend for each, retrying
//! after a random delay in `--retry-min-ms ..= --retry-max-ms` (the same
//! delays the node-redlock driver uses). tokio current-thread runtime (as
//! node is one thread).
//!
//! `--set K` takes K resources per cycle: as one set
//! (`try_acquire_many`: one LOCK.MACQUIRE round, one LOCK.MRELEASE round),
//! or with `--separate` as K acquires one after another (in name order,
//! as a caller without sets must, to avoid deadlock), each guard then
//! released (K rounds each way). Uncontended only.

use std::time::{Duration, Instant};

use clap::Parser;
use redlock_client::{Config, Mode, Redlock, RetryPolicy};

#[derive(Parser, Debug, Clone)]
#[command(about = "Acquire+release cycles of the quorum client; prints JSON")]
struct Args {
    /// Comma-separated loopback ports of the masters (none: N masters of
    /// its own, the tests' servers).
    #[arg(long, value_delimiter = ',')]
    ports: Vec<u16>,
    /// The members, as the client takes them (instead of --ports).
    #[arg(long, value_delimiter = ',')]
    members: Vec<String>,
    /// Use the first N ports (or members).
    #[arg(long)]
    n: usize,
    /// Measured cycles (over all tasks).
    #[arg(long, default_value_t = 2000)]
    iterations: usize,
    /// Cycles run first and not measured (connections, caches), over all tasks.
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
    /// Read the fencing token after each acquire (runs the fencing round).
    #[arg(long)]
    fenced: bool,
    /// Tasks running cycles at once on one client.
    #[arg(long, default_value_t = 1)]
    tasks: usize,
    /// Contended: the tasks share this many resources (0: each task has its own).
    #[arg(long, default_value_t = 0)]
    shared: usize,
    /// Retry delay bounds when contended, in ms.
    #[arg(long, default_value_t = 2)]
    retry_min_ms: u64,
    #[arg(long, default_value_t = 10)]
    retry_max_ms: u64,
    /// Resources per cycle, taken as one set (`try_acquire_many`).
    #[arg(long, default_value_t = 1)]
    set: usize,
    /// With --set: K separate acquires (and releases) instead of one set.
    #[arg(long)]
    separate: bool,
    /// The servers' process ids (Linux): their CPU time over the measured
    /// cycles is reported per cycle (`server_cpu_us_per_cycle`).
    #[arg(long, value_delimiter = ',')]
    server_pids: Vec<u32>,
}

/// This process's CPU time (user + system, every thread), in µs.
fn own_cpu_us() -> f64 {
    // SAFETY: getrusage writes into the zeroed struct it is given.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) } != 0 {
        return f64::NAN;
    }
    let us = |t: libc::timeval| t.tv_sec as f64 * 1e6 + t.tv_usec as f64;
    us(usage.ru_utime) + us(usage.ru_stime)
}

/// The CPU time (user + system) of the processes `pids`, in µs, from
/// /proc/PID/stat (clock ticks); NaN when one cannot be read.
fn processes_cpu_us(pids: &[u32]) -> f64 {
    // SAFETY: sysconf only reads a constant.
    let tick_us = 1e6 / unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    let ticks = |pid: &u32| -> Option<f64> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // The fields after the command name (in parentheses): utime and
        // stime are the 12th and 13th.
        let mut rest = stat.get(stat.rfind(')')? + 2..)?.split(' ').skip(11);
        Some(rest.next()?.parse::<f64>().ok()? + rest.next()?.parse::<f64>().ok()?)
    };
    pids.iter().map(ticks).sum::<Option<f64>>().map_or(f64::NAN, |t| t * tick_us)
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

#[derive(Default)]
struct Samples {
    acquire: Vec<Duration>,
    release: Vec<Duration>,
    failures: usize,
}

/// One task's cycles: `cycles` acquire + release on `resources` in turn,
/// stopping at `stop`. Not measured when `samples` is false.
async fn cycles(
    redlock: Redlock,
    args: Args,
    resources: Vec<String>,
    cycles: usize,
    stop: Instant,
) -> Samples {
    let ttl = Duration::from_millis(args.ttl_ms);
    let policy = if args.shared > 0 {
        RetryPolicy::within(Duration::from_secs(30))
            .with_delays(Duration::from_millis(args.retry_min_ms), Duration::from_millis(args.retry_max_ms))
    } else {
        RetryPolicy::attempts(1)
    };
    let mut out = Samples::default();
    if args.set > 1 {
        for _ in 0..cycles {
            if Instant::now() > stop {
                break;
            }
            set_cycle(&redlock, &args, &resources, ttl, &mut out).await;
        }
        return out;
    }
    for i in 0..cycles {
        if Instant::now() > stop {
            break;
        }
        let resource = &resources[i % resources.len()];
        let t0 = Instant::now();
        let guard = match redlock.acquire(resource, Mode::Plain, ttl, &policy).await {
            Ok(guard) => guard,
            Err(e) => {
                out.failures += 1;
                eprintln!("bench_quorum: acquire {resource}: {e}");
                continue;
            }
        };
        if args.fenced {
            if let Err(e) = guard.fencing_token().await {
                out.failures += 1;
                eprintln!("bench_quorum: fencing {resource}: {e}");
            }
        }
        let t1 = Instant::now();
        out.acquire.push(t1 - t0);
        if let Err(e) = guard.release().await {
            out.failures += 1;
            eprintln!("bench_quorum: release {resource}: {e}");
        }
        out.release.push(t1.elapsed());
    }
    out
}

/// One cycle over all of `resources`: one set, or one acquire each (in
/// order), then the release(s).
async fn set_cycle(redlock: &Redlock, args: &Args, resources: &[String], ttl: Duration, out: &mut Samples) {
    let t0 = Instant::now();
    let taken = if args.separate {
        let mut guards = Vec::with_capacity(resources.len());
        for resource in resources {
            match redlock.try_acquire(resource, Mode::Plain, ttl).await {
                Ok(guard) => guards.push(guard),
                Err(e) => {
                    out.failures += 1;
                    eprintln!("bench_quorum: acquire {resource}: {e}");
                    break;
                }
            }
        }
        guards
    } else {
        let set: Vec<(&str, Mode)> = resources.iter().map(|r| (r.as_str(), Mode::Plain)).collect();
        match redlock.try_acquire_many(&set, ttl).await {
            Ok(guard) => vec![guard],
            Err(e) => {
                out.failures += 1;
                eprintln!("bench_quorum: acquire the set: {e}");
                Vec::new()
            }
        }
    };
    let t1 = Instant::now();
    out.acquire.push(t1 - t0);
    for guard in taken {
        if let Err(e) = guard.release().await {
            out.failures += 1;
            eprintln!("bench_quorum: release: {e}");
        }
    }
    out.release.push(t1.elapsed());
}

/// Runs `total` cycles split over the tasks; returns the samples and the
/// wall time.
async fn run(redlock: &Redlock, args: &Args, total: usize, max: Duration) -> (Samples, f64) {
    let tasks = args.tasks.max(1);
    let started = Instant::now();
    let stop = started + max;
    let mut handles = Vec::with_capacity(tasks);
    for t in 0..tasks {
        let resources: Vec<String> = if args.shared > 0 {
            vec![format!("{}:shared:{}", args.prefix, t % args.shared)]
        } else if args.set > 1 {
            // One hash tag: the set's keys would share a Cluster slot.
            (0..args.set).map(|i| format!("{{{}:{t}}}:{i}", args.prefix)).collect()
        } else {
            (0..4).map(|i| format!("{}:{t}:{i}", args.prefix)).collect()
        };
        let n = total / tasks + usize::from(t < total % tasks);
        handles.push(tokio::spawn(cycles(redlock.clone(), args.clone(), resources, n, stop)));
    }
    let mut all = Samples::default();
    for handle in handles {
        let s = handle.await.expect("bench task");
        all.acquire.extend(s.acquire);
        all.release.extend(s.release);
        all.failures += s.failures;
    }
    (all, started.elapsed().as_secs_f64())
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = Args::parse();
    // Without --ports: N masters with the module, the tests' own (free
    // ports, own directories, killed by PID when the run ends).
    let own = if args.ports.is_empty() && args.members.is_empty() {
        lock_testkit_client::cluster(args.n)
    } else {
        Vec::new()
    };
    args.ports.extend(own.iter().map(|server| server.port));
    if args.set > 1 && (args.shared > 0 || args.fenced) {
        return Err("--set runs uncontended and unfenced cycles only".into());
    }
    let mut nodes: Vec<String> = args.ports.iter().map(|p| format!("redis://127.0.0.1:{p}/")).collect();
    if !args.members.is_empty() {
        nodes.clone_from(&args.members);
    }
    if args.n == 0 || args.n > nodes.len() {
        return Err(format!("--n {} must be 1..={} (the members given)", args.n, nodes.len()).into());
    }
    nodes.truncate(args.n);
    let config =
        Config { command_timeout: Duration::from_millis(args.command_timeout_ms), ..Config::default() };
    let redlock = Redlock::connect(&nodes, config).await?;

    let (warm, _) = run(&redlock, &args, args.warmup, Duration::from_secs(30)).await;
    if warm.failures > 0 {
        eprintln!("bench_quorum: {} failures in the warm-up", warm.failures);
    }
    let (cpu0, servers0) = (own_cpu_us(), processes_cpu_us(&args.server_pids));
    let (mut samples, wall) =
        run(&redlock, &args, args.iterations, Duration::from_secs_f64(args.max_seconds)).await;
    let (cpu, servers) = (own_cpu_us() - cpu0, processes_cpu_us(&args.server_pids) - servers0);
    // Rounds return at their majority; let the slower nodes' calls (the
    // last releases) end before the process does (not measured).
    redlock.settle().await;
    let mut cycle: Vec<Duration> =
        samples.acquire.iter().zip(&samples.release).map(|(a, r)| *a + *r).collect();
    cycle.sort();
    samples.acquire.sort();
    samples.release.sort();
    let done = samples.acquire.len();
    let per_cycle = |us: f64| if done == 0 { f64::NAN } else { us / done as f64 };
    println!(
        "{{\"client\":\"redlock-client\",\"label\":{:?},\"n\":{},\"tasks\":{},\"shared\":{},\"fenced\":{},\
         \"set\":{},\"separate\":{},\
         \"iterations\":{},\"completed\":{},\"failures\":{},\"seconds\":{},\"ops_per_s\":{},\
         \"acquire_p50_ms\":{},\"acquire_p99_ms\":{},\"release_p50_ms\":{},\
         \"cycle_p50_ms\":{},\"cycle_p99_ms\":{},\"cpu_us_per_cycle\":{},\"server_cpu_us_per_cycle\":{}}}",
        args.label,
        args.n,
        args.tasks,
        args.shared,
        args.fenced,
        args.set,
        args.separate,
        args.iterations,
        done,
        samples.failures,
        json_num(wall),
        json_num(done as f64 / wall),
        json_num(percentile_ms(&samples.acquire, 0.5)),
        json_num(percentile_ms(&samples.acquire, 0.99)),
        json_num(percentile_ms(&samples.release, 0.5)),
        json_num(percentile_ms(&cycle, 0.5)),
        json_num(percentile_ms(&cycle, 0.99)),
        json_num(per_cycle(cpu)),
        json_num(per_cycle(servers)),
    );
    Ok(())
}
