//! Benchmark: the module's native lock commands against the classic client-side
//! recipe (`SET key token NX PX ttl` + Lua compare-and-delete / compare-and-
//! pexpire via EVALSHA), side by side on one running redis-server.
//!
//! Normally started by `scripts/bench`, which builds the module, starts a
//! private server with it loaded and passes `--port`. By hand:
//!
//! ```text
//! cargo run --release --example bench -- --port 6390 [--runs 5] [--threads 4]
//!     [--depth 64] [--ops 256000] [--ops-single 32000] [--host 127.0.0.1]
//! ```
//!
//! Every phase uses fixed op counts and distinct keys (so every timed call is a
//! real grant / release / extension; the replies are checked), `CONFIG
//! RESETSTAT` before the timed part and `INFO commandstats` after it. Each
//! variant runs pipelined (`--depth` ops per batch) and unpipelined (one
//! request per round trip) on `--threads` connections, each with its own key
//! range; the figures printed are medians over `--runs` runs.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::process::ExitCode;
use std::sync::Barrier;
use std::time::{Duration, Instant};

use redis::{Cmd, Connection, ConnectionLike, Value};

const TTL_MS: &str = "30000";
const TOKEN: &str = "tok";
/// The classic Lua compare-and-delete (release).
const DEL_SCRIPT: &str =
    r#"if redis.call("get",KEYS[1]) == ARGV[1] then return redis.call("del",KEYS[1]) else return 0 end"#;
/// The classic Lua compare-and-pexpire (extend).
const PEXPIRE_SCRIPT: &str = r#"if redis.call("get",KEYS[1]) == ARGV[1] then return redis.call("pexpire",KEYS[1],ARGV[2]) else return 0 end"#;
/// Untimed setup (holding locks before a release/extend phase) batch size.
const SETUP_BATCH: usize = 512;
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
const IO_TIMEOUT: Duration = Duration::from_secs(20);
/// Bound on waiting for a node that refuses grants right after start.
const QUARANTINE_WAIT: Duration = Duration::from_secs(90);

type Res<T> = Result<T, String>;

const USAGE: &str = "usage: bench --port P [--host 127.0.0.1] [--runs 5 (<= 50)] \
[--threads 4 (<= 64)] [--depth 64 (2..=10000)] [--ops 256000 (pipelined ops per phase, <= 1e7)] \
[--ops-single 32000 (unpipelined ops per phase, <= 1e6)]";

// ---------------------------------------------------------------- options

struct Opts {
    host: String,
    port: u16,
    runs: usize,
    threads: usize,
    depth: usize,
    /// Ops per pipelined phase, all threads together.
    ops: usize,
    /// Ops per unpipelined phase, all threads together.
    ops_single: usize,
}

impl Opts {
    fn parse() -> Res<Opts> {
        let mut o = Opts {
            host: "127.0.0.1".into(),
            port: 0,
            runs: 5,
            threads: 4,
            depth: 64,
            ops: 256_000,
            ops_single: 32_000,
        };
        let mut args = std::env::args().skip(1);
        while let Some(flag) = args.next() {
            if flag == "-h" || flag == "--help" {
                return Err(USAGE.into());
            }
            let value = args.next().ok_or_else(|| format!("{flag} needs a value\n{USAGE}"))?;
            let num = || -> Res<usize> {
                match value.parse::<usize>() {
                    Ok(n) if n > 0 => Ok(n),
                    _ => Err(format!("{flag}: expected a positive integer, got {value:?}")),
                }
            };
            match flag.as_str() {
                "--host" => o.host = value.clone(),
                "--port" => o.port = u16::try_from(num()?).map_err(|_| format!("--port {value}"))?,
                "--runs" => o.runs = num()?,
                "--threads" => o.threads = num()?,
                "--depth" => o.depth = num()?,
                "--ops" => o.ops = num()?,
                "--ops-single" => o.ops_single = num()?,
                _ => return Err(format!("unknown option {flag}\n{USAGE}")),
            }
        }
        if o.port == 0 {
            return Err("--port is required (scripts/bench passes it)".into());
        }
        if o.runs > 50
            || o.threads > 64
            || !(2..=10_000).contains(&o.depth)
            || o.ops > 10_000_000
            || o.ops_single > 1_000_000
        {
            return Err(format!("an option is out of range\n{USAGE}"));
        }
        Ok(o)
    }

    /// Ops each thread runs in a phase of `depth` (rounded to whole batches).
    fn ops_per_thread(&self, depth: usize) -> usize {
        let total = if depth == 1 { self.ops_single } else { self.ops };
        let per = total.div_ceil(self.threads);
        per.div_ceil(depth) * depth
    }
}

// ---------------------------------------------------------------- variants

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
enum Phase {
    Acquire,
    Release,
    Extend,
    /// Acquire then release of the same key.
    Cycle,
}

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
enum Side {
    /// The module's LOCK.* commands.
    Ours,
    /// SET NX PX + Lua via EVALSHA.
    Baseline,
}

const PHASES: [Phase; 4] = [Phase::Acquire, Phase::Release, Phase::Extend, Phase::Cycle];

struct Shas {
    del: String,
    pexpire: String,
}

impl Phase {
    fn name(self) -> &'static str {
        match self {
            Phase::Acquire => "acquire",
            Phase::Release => "release",
            Phase::Extend => "extend",
            Phase::Cycle => "acquire+release",
        }
    }

    /// Target for the pipelined comparison (ours vs baseline, >1 = better).
    fn target(self) -> Option<f64> {
        match self {
            Phase::Acquire => Some(0.9),
            Phase::Release | Phase::Extend => Some(1.5),
            Phase::Cycle => None,
        }
    }

    /// Whether the keys must already hold a lock before the timed part.
    fn needs_held_lock(self) -> bool {
        matches!(self, Phase::Release | Phase::Extend)
    }

    /// What the timed part runs per op, as shown in the table.
    fn label(self, side: Side) -> &'static str {
        match (self, side) {
            (Phase::Acquire, Side::Ours) => "LOCK.ACQUIRE",
            (Phase::Acquire, Side::Baseline) => "SET NX PX",
            (Phase::Release, Side::Ours) => "LOCK.RELEASE",
            (Phase::Release, Side::Baseline) => "EVALSHA get+del",
            (Phase::Extend, Side::Ours) => "LOCK.EXTEND",
            (Phase::Extend, Side::Baseline) => "EVALSHA get+pexpire",
            (Phase::Cycle, Side::Ours) => "LOCK.ACQUIRE + LOCK.RELEASE",
            (Phase::Cycle, Side::Baseline) => "SET NX PX + EVALSHA get+del",
        }
    }

    /// `INFO commandstats` entries (cmdstat_<name>) that the timed part calls,
    /// each once per op.
    fn measured(self, side: Side) -> &'static [&'static str] {
        match (self, side) {
            (Phase::Acquire, Side::Ours) => &["lock.acquire"],
            (Phase::Acquire, Side::Baseline) => &["set"],
            (Phase::Release, Side::Ours) => &["lock.release"],
            (Phase::Extend, Side::Ours) => &["lock.extend"],
            (Phase::Release | Phase::Extend, Side::Baseline) => &["evalsha"],
            (Phase::Cycle, Side::Ours) => &["lock.acquire", "lock.release"],
            (Phase::Cycle, Side::Baseline) => &["set", "evalsha"],
        }
    }

    /// The commands of one timed op on `key`.
    fn timed_cmds(self, side: Side, key: &str, shas: &Shas) -> Vec<Cmd> {
        match self {
            Phase::Acquire => vec![acquire_cmd(side, key)],
            Phase::Release => vec![release_cmd(side, key, shas)],
            Phase::Extend => vec![extend_cmd(side, key, shas)],
            Phase::Cycle => vec![acquire_cmd(side, key), release_cmd(side, key, shas)],
        }
    }
}

fn acquire_cmd(side: Side, key: &str) -> Cmd {
    let mut c = Cmd::new();
    match side {
        Side::Ours => c.arg("LOCK.ACQUIRE").arg(key).arg(TOKEN).arg(TTL_MS),
        Side::Baseline => c.arg("SET").arg(key).arg(TOKEN).arg("NX").arg("PX").arg(TTL_MS),
    };
    c
}

fn release_cmd(side: Side, key: &str, shas: &Shas) -> Cmd {
    let mut c = Cmd::new();
    match side {
        Side::Ours => c.arg("LOCK.RELEASE").arg(key).arg(TOKEN),
        Side::Baseline => c.arg("EVALSHA").arg(&shas.del).arg(1).arg(key).arg(TOKEN),
    };
    c
}

fn extend_cmd(side: Side, key: &str, shas: &Shas) -> Cmd {
    let mut c = Cmd::new();
    match side {
        Side::Ours => c.arg("LOCK.EXTEND").arg(key).arg(TOKEN).arg(TTL_MS),
        Side::Baseline => c.arg("EVALSHA").arg(&shas.pexpire).arg(1).arg(key).arg(TOKEN).arg(TTL_MS),
    };
    c
}

/// A timed call did what it was for: a grant (fencing token or OK), a release
/// or an extension (1). Nil, 0 and errors are failures.
fn is_success(reply: &Value) -> bool {
    matches!(reply, Value::Okay) || matches!(reply, Value::Int(n) if *n >= 1)
}

// ---------------------------------------------------------------- one phase

/// Commands packed into one request (one round trip).
struct Batch {
    bytes: Vec<u8>,
    commands: usize,
}

/// Packs ops into batches of `depth` ops; with depth 1 every command is its
/// own request (so a cycle is two round trips).
fn pack(ops: Vec<Vec<Cmd>>, depth: usize) -> Vec<Batch> {
    let mut batches = Vec::new();
    if depth == 1 {
        for cmd in ops.into_iter().flatten() {
            batches.push(Batch { bytes: cmd.get_packed_command(), commands: 1 });
        }
        return batches;
    }
    for chunk in ops.chunks(depth) {
        let mut p = redis::pipe();
        let mut commands = 0;
        for cmd in chunk.iter().flatten() {
            p.add_command(cmd.clone());
            commands += 1;
        }
        batches.push(Batch { bytes: p.get_packed_pipeline(), commands });
    }
    batches
}

/// Sends one batch; returns how many replies were successes.
fn send(con: &mut Connection, batch: &Batch) -> Res<usize> {
    let replies = if batch.commands == 1 {
        vec![con.req_packed_command(&batch.bytes).map_err(|e| e.to_string())?]
    } else {
        con.req_packed_commands(&batch.bytes, 0, batch.commands).map_err(|e| e.to_string())?
    };
    Ok(replies.iter().filter(|r| is_success(r)).count())
}

struct ThreadResult {
    start: Instant,
    end: Instant,
    latencies_ns: Vec<u64>,
    successes: usize,
}

#[derive(Clone, Copy, Debug)]
struct Sample {
    ops_per_sec: f64,
    p50_us: f64,
    p99_us: f64,
    usec_per_op: f64,
}

fn key(thread: usize, i: usize) -> String {
    format!("bench:{thread}:{i}")
}

/// Setup (untimed) + timed part of one client thread. Always reaches both
/// barriers, so that one failing thread cannot hang the others.
fn client_thread(
    con: &mut Connection,
    setup: Vec<Batch>,
    timed: Vec<Batch>,
    ready: &Barrier,
    go: &Barrier,
) -> Res<ThreadResult> {
    let mut setup_result = Ok(());
    for batch in &setup {
        match send(con, batch) {
            Ok(n) if n == batch.commands => {}
            Ok(n) => {
                setup_result = Err(format!("setup: {n} of {} locks granted", batch.commands));
                break;
            }
            Err(e) => {
                setup_result = Err(format!("setup: {e}"));
                break;
            }
        }
    }
    ready.wait(); // main thread runs CONFIG RESETSTAT now
    go.wait();
    setup_result?;
    let mut latencies_ns = Vec::with_capacity(timed.len());
    let mut successes = 0;
    let start = Instant::now();
    for batch in &timed {
        let t = Instant::now();
        successes += send(con, batch)?;
        latencies_ns.push(t.elapsed().as_nanos() as u64);
    }
    let end = Instant::now();
    Ok(ThreadResult { start, end, latencies_ns, successes })
}

/// Runs one variant once: fresh keyspace, optional held locks, timed ops.
fn run_phase(
    ctl: &mut Connection,
    conns: &mut [Connection],
    shas: &Shas,
    opts: &Opts,
    phase: Phase,
    side: Side,
    depth: usize,
) -> Res<Sample> {
    redis::cmd("FLUSHALL").arg("SYNC").query::<()>(ctl).map_err(|e| format!("FLUSHALL: {e}"))?;
    let per_thread = opts.ops_per_thread(depth);
    let threads = conns.len();
    let ready = Barrier::new(threads + 1);
    let go = Barrier::new(threads + 1);

    let results: Vec<Res<ThreadResult>> = std::thread::scope(|s| {
        let handles: Vec<_> = conns
            .iter_mut()
            .enumerate()
            .map(|(t, con)| {
                let (ready, go) = (&ready, &go);
                // Packing happens here, before the clock starts.
                let keys: Vec<String> = (0..per_thread).map(|i| key(t, i)).collect();
                let setup = if phase.needs_held_lock() {
                    pack(keys.iter().map(|k| vec![acquire_cmd(side, k)]).collect(), SETUP_BATCH)
                } else {
                    Vec::new()
                };
                let timed = pack(keys.iter().map(|k| phase.timed_cmds(side, k, shas)).collect(), depth);
                s.spawn(move || client_thread(con, setup, timed, ready, go))
            })
            .collect();
        ready.wait();
        let reset = redis::cmd("CONFIG").arg("RESETSTAT").query::<()>(ctl);
        go.wait();
        let mut out: Vec<Res<ThreadResult>> = handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err("client thread panicked".into())))
            .collect();
        if let Err(e) = reset {
            out.push(Err(format!("CONFIG RESETSTAT: {e}")));
        }
        out
    });
    let results: Vec<ThreadResult> = results.into_iter().collect::<Res<_>>()?;

    let ops = per_thread * threads;
    let commands_per_op = phase.measured(side).len();
    let successes: usize = results.iter().map(|r| r.successes).sum();
    if successes != ops * commands_per_op {
        return Err(format!(
            "{} {:?} depth {depth}: only {successes} of {} calls succeeded",
            phase.name(),
            side,
            ops * commands_per_op
        ));
    }
    let start = results.iter().map(|r| r.start).min().ok_or("no threads")?;
    let end = results.iter().map(|r| r.end).max().ok_or("no threads")?;
    let mut lat: Vec<u64> = results.into_iter().flat_map(|r| r.latencies_ns).collect();
    lat.sort_unstable();

    let stats = command_stats(ctl)?;
    let mut usec = 0.0;
    for name in phase.measured(side) {
        let (calls, u) =
            stats.get(*name).copied().ok_or_else(|| format!("INFO commandstats has no cmdstat_{name}"))?;
        if calls != ops as u64 {
            return Err(format!("cmdstat_{name}: {calls} calls, expected {ops}"));
        }
        usec += u;
    }
    Ok(Sample {
        ops_per_sec: ops as f64 / (end - start).as_secs_f64(),
        p50_us: percentile(&lat, 50.0) / 1000.0,
        p99_us: percentile(&lat, 99.0) / 1000.0,
        usec_per_op: usec / ops as f64,
    })
}

/// `INFO commandstats` as name -> (calls, total usec).
fn command_stats(ctl: &mut Connection) -> Res<HashMap<String, (u64, f64)>> {
    let text: String =
        redis::cmd("INFO").arg("commandstats").query(ctl).map_err(|e| format!("INFO commandstats: {e}"))?;
    let mut out = HashMap::new();
    for line in text.lines() {
        let Some((name, fields)) = line.trim().strip_prefix("cmdstat_").and_then(|l| l.split_once(':'))
        else {
            continue;
        };
        let field = |f: &str| {
            fields.split(',').find_map(|kv| kv.strip_prefix(f)?.strip_prefix('=')?.parse::<f64>().ok())
        };
        if let (Some(calls), Some(usec)) = (field("calls"), field("usec")) {
            out.insert(name.to_string(), (calls as u64, usec));
        }
    }
    Ok(out)
}

/// Nearest-rank percentile of sorted samples.
fn percentile(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1] as f64
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    match n {
        0 => f64::NAN,
        _ if n % 2 == 1 => v[n / 2],
        _ => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

// ---------------------------------------------------------------- server

fn connect(opts: &Opts) -> Res<Connection> {
    let url = format!("redis://{}:{}/", opts.host, opts.port);
    let client = redis::Client::open(url.as_str()).map_err(|e| e.to_string())?;
    let con =
        client.get_connection_with_timeout(CONNECT_TIMEOUT).map_err(|e| format!("connect to {url}: {e}"))?;
    con.set_read_timeout(Some(IO_TIMEOUT)).map_err(|e| e.to_string())?;
    con.set_write_timeout(Some(IO_TIMEOUT)).map_err(|e| e.to_string())?;
    Ok(con)
}

fn info_field(ctl: &mut Connection, section: &str, field: &str) -> Res<String> {
    let text: String = redis::cmd("INFO").arg(section).query(ctl).map_err(|e| e.to_string())?;
    text.lines()
        .find_map(|l| l.trim().strip_prefix(field)?.strip_prefix(':').map(str::to_string))
        .ok_or_else(|| format!("INFO {section} has no {field}"))
}

/// The module's version from MODULE LIST, if it says.
fn module_version(ctl: &mut Connection) -> Res<String> {
    let list: Vec<HashMap<String, Value>> =
        redis::cmd("MODULE").arg("LIST").query(ctl).map_err(|e| format!("MODULE LIST: {e}"))?;
    let lock = list
        .iter()
        .find(|m| matches!(m.get("name"), Some(Value::BulkString(n)) if n == b"lock"))
        .ok_or("the lock module is not loaded on this server")?;
    Ok(match lock.get("ver") {
        Some(Value::Int(v)) => v.to_string(),
        _ => "?".into(),
    })
}

/// A node may refuse grants for a while after start (restart quarantine):
/// turn that off if the config exists, else wait for it, bounded.
fn wait_until_granting(ctl: &mut Connection) -> Res<()> {
    // Only on this private server; an unknown config (older module) is fine.
    let off = query::<()>(ctl, redis::cmd("CONFIG").arg("SET").arg("lock.quarantine-ms").arg(0));
    if off.is_ok() {
        eprintln!("bench: lock.quarantine-ms set to 0 on the benchmark server");
    }
    let deadline = Instant::now() + QUARANTINE_WAIT;
    let mut said = false;
    loop {
        let r: redis::RedisResult<Value> = acquire_cmd(Side::Ours, "bench:probe").query(ctl);
        match r {
            Ok(v) if is_success(&v) => break,
            Err(e) if e.code() == Some("QUARANTINE") && Instant::now() < deadline => {
                if !said {
                    eprintln!("bench: node in quarantine ({e}); waiting");
                    said = true;
                }
                std::thread::sleep(Duration::from_millis(500));
            }
            other => return Err(format!("probe LOCK.ACQUIRE failed: {other:?}")),
        }
    }
    redis::cmd("DEL").arg("bench:probe").query::<()>(ctl).map_err(|e| e.to_string())
}

/// Runs one command on the control connection.
fn query<T: redis::FromRedisValue>(ctl: &mut Connection, cmd: &Cmd) -> Res<T> {
    cmd.query(ctl).map_err(|e| e.to_string())
}

/// MEMORY USAGE of one held lock with a 36-byte UUID-like token, taken with
/// LOCK.ACQUIRE and with SET NX PX (keys of equal length).
fn memory_usage(ctl: &mut Connection) -> Res<String> {
    let token = "3f2b8c1e-9d4a-4e7b-a6c5-0b1d2e3f4a5b";
    let (ours, base) = ("lock:mem:ours", "lock:mem:base");
    query::<()>(ctl, redis::cmd("FLUSHALL").arg("SYNC"))?;
    let granted: Value = query(ctl, redis::cmd("LOCK.ACQUIRE").arg(ours).arg(token).arg(TTL_MS))?;
    let set: Value = query(ctl, redis::cmd("SET").arg(base).arg(token).arg("NX").arg("PX").arg(TTL_MS))?;
    if !is_success(&granted) || !is_success(&set) {
        return Err(format!("memory probe not granted: {granted:?} / {set:?}"));
    }
    let mut rows = String::new();
    let mut usage = [0i64; 2];
    for (slot, (what, k)) in usage
        .iter_mut()
        .zip([("`LOCK.ACQUIRE k <token> 30000`", ours), ("`SET k <token> NX PX 30000`", base)])
    {
        *slot = query(ctl, redis::cmd("MEMORY").arg("USAGE").arg(k).arg("SAMPLES").arg(0))?;
        let len: i64 = query(ctl, redis::cmd("STRLEN").arg(k))?;
        let enc: String = query(ctl, redis::cmd("OBJECT").arg("ENCODING").arg(k))?;
        let _ = writeln!(rows, "| {what} | {} | {len} | {enc} |", *slot);
    }
    query::<()>(ctl, redis::cmd("FLUSHALL").arg("SYNC"))?;
    let [m_ours, m_base] = usage;
    Ok(format!(
        "| one held lock ({}-byte key, {}-byte token) | MEMORY USAGE bytes | value bytes | encoding |\n\
         |---|---:|---:|---|\n{rows}\n\
         A held lock costs {} bytes more than SET NX PX ({:.2}x).\n",
        ours.len(),
        token.len(),
        m_ours - m_base,
        m_ours as f64 / m_base as f64
    ))
}

// ---------------------------------------------------------------- report

type Variant = (Phase, Side, usize);

fn fmt_ops(v: f64) -> String {
    if v >= 10_000.0 {
        format!("{:.0}k", v / 1000.0)
    } else {
        format!("{v:.0}")
    }
}

fn spread(samples: &[Sample], f: fn(&Sample) -> f64) -> (f64, f64, f64) {
    let v: Vec<f64> = samples.iter().map(f).collect();
    let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    (median(v), lo, hi)
}

fn report(opts: &Opts, depths: &[usize], results: &HashMap<Variant, Vec<Sample>>) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "| op | depth | commands | ops/s (median, min-max) | p50 us | p99 us | server us/op (median, min-max) |"
    );
    let _ = writeln!(s, "|---|---:|---|---:|---:|---:|---:|");
    for &phase in &PHASES {
        for &depth in depths {
            for side in [Side::Ours, Side::Baseline] {
                let v = &results[&(phase, side, depth)];
                let (ops, ops_lo, ops_hi) = spread(v, |x| x.ops_per_sec);
                let (us, us_lo, us_hi) = spread(v, |x| x.usec_per_op);
                let _ = writeln!(
                    s,
                    "| {} | {} | {} | {} ({}-{}) | {:.0} | {:.0} | {:.2} ({:.2}-{:.2}) |",
                    phase.name(),
                    depth,
                    phase.label(side),
                    fmt_ops(ops),
                    fmt_ops(ops_lo),
                    fmt_ops(ops_hi),
                    median(v.iter().map(|x| x.p50_us).collect()),
                    median(v.iter().map(|x| x.p99_us).collect()),
                    us,
                    us_lo,
                    us_hi
                );
            }
        }
    }
    let _ = writeln!(
        s,
        "\nLatency: depth 1 = per request (a cycle is 2 requests); depth {} = per pipeline batch of {} ops \
         ({} commands for a cycle). Server us/op = INFO commandstats usec / ops \
         (for a cycle: both commands together).\n",
        opts.depth,
        opts.depth,
        2 * opts.depth
    );

    let _ = writeln!(
        s,
        "| op | depth | ours vs baseline | ops/s ours/base | server cost base/ours | target (pipelined) |"
    );
    let _ = writeln!(s, "|---|---:|---|---:|---:|---|");
    for &phase in &PHASES {
        for &depth in depths {
            let med =
                |side, f: fn(&Sample) -> f64| median(results[&(phase, side, depth)].iter().map(f).collect());
            let ops_ratio = med(Side::Ours, |x| x.ops_per_sec) / med(Side::Baseline, |x| x.ops_per_sec);
            let cost_ratio = med(Side::Baseline, |x| x.usec_per_op) / med(Side::Ours, |x| x.usec_per_op);
            let verdict = match phase.target() {
                Some(t) if depth > 1 => {
                    let word = match (cost_ratio >= t, ops_ratio >= t) {
                        (true, true) => "met",
                        (true, false) => "met on server cost, not on ops/s",
                        (false, true) => "met on ops/s, NOT on server cost",
                        (false, false) => "NOT met",
                    };
                    format!(">= {t}x: {word}")
                }
                _ => "-".into(),
            };
            let _ = writeln!(
                s,
                "| {} | {} | {} vs {} | {:.2}x | {:.2}x | {} |",
                phase.name(),
                depth,
                phase.label(Side::Ours),
                phase.label(Side::Baseline),
                ops_ratio,
                cost_ratio,
                verdict
            );
        }
    }
    let _ = writeln!(s, "\nRatios > 1 mean the module is better.");
    s
}

// ---------------------------------------------------------------- main

fn run() -> Res<()> {
    let opts = Opts::parse()?;
    let mut ctl = connect(&opts)?;
    let version = info_field(&mut ctl, "server", "redis_version")?;
    let module_ver = module_version(&mut ctl)?;
    wait_until_granting(&mut ctl)?;
    let load = |ctl: &mut Connection, script: &str| -> Res<String> {
        redis::cmd("SCRIPT").arg("LOAD").arg(script).query(ctl).map_err(|e| format!("SCRIPT LOAD: {e}"))
    };
    let shas = Shas { del: load(&mut ctl, DEL_SCRIPT)?, pexpire: load(&mut ctl, PEXPIRE_SCRIPT)? };
    let mut conns = (0..opts.threads).map(|_| connect(&opts)).collect::<Res<Vec<_>>>()?;

    let depths = [opts.depth, 1];
    let mut results: HashMap<Variant, Vec<Sample>> = HashMap::new();
    let started = Instant::now();
    for run in 0..opts.runs {
        // Alternate which side goes first, so drift within a run evens out.
        let sides = if run % 2 == 0 { [Side::Ours, Side::Baseline] } else { [Side::Baseline, Side::Ours] };
        for &phase in &PHASES {
            for &depth in &depths {
                for side in sides {
                    let sample = run_phase(&mut ctl, &mut conns, &shas, &opts, phase, side, depth)?;
                    eprintln!(
                        "run {}/{} {:<15} depth {:<3} {:<28} {:>6} ops/s  {:>5.2} us/op",
                        run + 1,
                        opts.runs,
                        phase.name(),
                        depth,
                        phase.label(side),
                        fmt_ops(sample.ops_per_sec),
                        sample.usec_per_op
                    );
                    results.entry((phase, side, depth)).or_default().push(sample);
                }
            }
        }
    }
    let elapsed = started.elapsed();
    let memory = memory_usage(&mut ctl)?;

    let cmdline =
        std::env::var("BENCH_CMDLINE").unwrap_or_else(|_| std::env::args().collect::<Vec<_>>().join(" "));
    println!("## Benchmark: native LOCK.* vs SET NX PX + Lua (EVALSHA)\n");
    println!("- command: `{cmdline}`");
    println!(
        "- redis-server {version} (module lock ver {module_ver}), one server, {} client connections \
         (own key ranges), {} CPUs on this machine",
        opts.threads,
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    println!(
        "- {} runs, medians shown; per phase {} ops pipelined (depth {}), {} ops unpipelined; \
         distinct keys, every call checked to succeed; {:.0} s of runs\n",
        opts.runs,
        opts.ops_per_thread(opts.depth) * opts.threads,
        opts.depth,
        opts.ops_per_thread(1) * opts.threads,
        elapsed.as_secs_f64()
    );
    print!("{}", report(&opts, &depths, &results));
    println!("\n### Memory\n\n{memory}");
    Ok(())
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bench: {e}");
            ExitCode::FAILURE
        }
    }
}
