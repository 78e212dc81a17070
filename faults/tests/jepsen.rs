//! A Jepsen-style safety suite for the lock module and its quorum client,
//! with contrasts that must fail: the classic Redlock (SET NX PX + Lua
//! compare-and-delete over plain Redis) under the same faults, and a
//! semaphore taken at a plain majority.
//!
//! A run is one scenario for one implementation: N masters (5, or 1 for the
//! one-node scenario), each behind a TCP proxy; workers contend for the
//! scenario's resources (plain locks, read-write locks, semaphores, sets of
//! 2-3 plain locks taken all or nothing, through the quorum client; or, on
//! one node, WAIT hand-off, reentrant enter/exit with request ids, permits
//! and read-write locks spoken directly); under a lock that excludes others
//! a worker reads the resource's register (each key's, for a set), works
//! (1-8 ms, or 0.2-2.5 TTLs kept alive by the watchdog or by extending) and
//! writes value + 1, both with its fencing token (the register is fenced:
//! it refuses a token below the highest it has seen on a read or a write;
//! the classic recipe has no token, so its register accepts everything).
//! Everything goes into one history on one monotonic clock. A nemesis runs
//! the scenario's probes (deterministic arrangements of a known failure,
//! see `src/nemesis.rs`), then injects the scenario's faults
//! (seeded: the same seed gives the same choices of fault, node, duration
//! and gap; the interleaving with the clients still depends on timing). A
//! misuse client may run alongside. The checker
//! (`src/checker.rs`) then counts violations.
//!
//! - `jepsen_short` (CI, about 2 minutes on 2 cores): every scenario, a few
//!   seconds of faults each after its probes; asserts 0 violations for this
//!   project everywhere and at least 1 for a contrast where its probe
//!   arranges one; prints a markdown table (see it with `-- --nocapture`,
//!   or in `target/jepsen/summary-short.md`). Its seed is fixed
//!   (`CI_SEED`), `JEPSEN_SEED` replaces it.
//! - `jepsen_long` (ignored; `scripts/jepsen`): the same, for longer,
//!   configured by environment variables (see `Settings::from_env`).
//!
//! For mutation testing (`scripts/mutants`): `JEPSEN_FAIL_FAST=1` stops
//! starting runs and injecting faults once a run failed, and
//! `JEPSEN_VERDICT_FILE` gets one line per finished run.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use lock_faults::checker::{check, Rules, Violations};
use lock_faults::cluster::{Cluster, Spec};
use lock_faults::conn::Conn;
use lock_faults::history::{Access, Outcome, Want};
use lock_faults::misuse::Misuse;
use lock_faults::nemesis::Run;
use lock_faults::onenode::{OneNode, Role};
use lock_faults::scenario::{Fault, Probe, Scenario, Workload, VICTIM};
use lock_faults::sharded::{self, Sharded};
use lock_faults::worker::{Ctx, Impl, Kind, Locker, Resource, Work, Worker};
use lock_testkit_client::test_config;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::sync::Semaphore;

/// The CI run's seed: the same fault schedule on every CI run (a failure
/// replays with the same seed; other seeds: `JEPSEN_SEED`).
const CI_SEED: u64 = 42;
/// `lock.quarantine-ms` where nodes restart or are promoted: above the TTL
/// (and the lock-delay).
const QUARANTINE_MS: u64 = 1_500;
/// Added to the liveness bound: a loaded 2-core CI machine, reconnects,
/// retry delays.
const SLACK: Duration = Duration::from_millis(2_000);
const CLIENTS: usize = 6;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// splitmix64: derives independent seeds from the run seed.
fn mix(seed: u64, salt: u64) -> u64 {
    let mut z = seed ^ salt.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

const TWO_LOCKS: &[(&str, Kind)] = &[("r0", Kind::Plain), ("r1", Kind::Plain)];
/// The set workload's pool: each attempt takes 2 or 3 of these four keys as
/// one set, so that sets overlap often.
const SET_POOL: &[(&str, Kind)] =
    &[("s0", Kind::Set), ("s1", Kind::Set), ("s2", Kind::Set), ("s3", Kind::Set)];
const BOTH_IMPLS: &[Impl] = &[Impl::Classic, Impl::Module];
const MODULE: &[Impl] = &[Impl::Module];

/// A scenario with nothing in it; each entry of `SCENARIOS` says what
/// differs.
const BASE: Scenario = Scenario {
    name: "",
    faults: &[],
    probes: &[],
    impls: MODULE,
    contrast_must_fail: false,
    nodes: 5,
    workload: Workload::Quorum(TWO_LOCKS),
    work: Work::Short,
    ttl_ms: 1_000,
    quarantine_ms: 0,
    aof: false,
    clock: false,
    clock_step_ms: 0,
    rate_ppm: 0,
    lock_delay_ms: 0,
    tolerance_ms: None,
    replica: false,
    misuse: false,
    clusters: 0,
    sentinels: 0,
};

/// `lock.clock-jump-tolerance-ms` where nodes restart from an AOF: the
/// restart grace (a lock restored from disk is taken over this long after
/// its deadline) covers the restart probe's 500 ms step, plus the +-200 ms
/// steps in `mixed`, and keeps the liveness bound short.
const RESTART_TOLERANCE_MS: u64 = 1_500;

const SCENARIOS: &[Scenario] = &[
    Scenario {
        name: "holder-pause",
        faults: &[Fault::HolderPause],
        probes: &[Probe::HolderPause],
        impls: BOTH_IMPLS,
        contrast_must_fail: true,
        ..BASE
    },
    Scenario {
        name: "restart",
        faults: &[Fault::KillRestart, Fault::ClientCrash],
        probes: &[Probe::Restart],
        impls: BOTH_IMPLS,
        contrast_must_fail: true,
        work: Work::Long,
        quarantine_ms: QUARANTINE_MS,
        ..BASE
    },
    Scenario {
        name: "restart-aof",
        faults: &[Fault::KillRestart],
        // Shared locks and semaphores too, extended before the restart: a
        // holder's later deadline must be in the AOF.
        probes: &[Probe::Restart, Probe::RestartShared, Probe::RestartRead, Probe::RestartPermit],
        work: Work::Long,
        quarantine_ms: QUARANTINE_MS,
        aof: true,
        // The probes step the victim's wall clock before the restart: a
        // restored lock must last to its real deadline (restart grace).
        clock: true,
        tolerance_ms: Some(RESTART_TOLERANCE_MS),
        ..BASE
    },
    Scenario {
        name: "node-pause",
        faults: &[Fault::NodePause, Fault::HolderPause],
        work: Work::Long,
        ..BASE
    },
    Scenario { name: "lost-replies", faults: &[Fault::LostReplies], ..BASE },
    Scenario {
        name: "partition",
        faults: &[Fault::Partition, Fault::SlowNode],
        probes: &[Probe::Ordering],
        work: Work::Long,
        ..BASE
    },
    Scenario {
        name: "clock-forward",
        faults: &[Fault::ClockForward],
        probes: &[Probe::ClockForward],
        impls: BOTH_IMPLS,
        contrast_must_fail: true,
        clock: true,
        ..BASE
    },
    Scenario { name: "clock-backward", faults: &[Fault::ClockBackward], clock: true, ..BASE },
    Scenario {
        name: "promotion",
        faults: &[Fault::Promotion],
        probes: &[Probe::Promotion],
        impls: BOTH_IMPLS,
        contrast_must_fail: true,
        work: Work::Long,
        quarantine_ms: QUARANTINE_MS,
        replica: true,
        ..BASE
    },
    Scenario {
        name: "mixed",
        faults: &[
            Fault::HolderPause,
            Fault::ClientCrash,
            Fault::KillRestart,
            Fault::NodePause,
            Fault::LostReplies,
            Fault::Partition,
            Fault::SlowNode,
            Fault::ClockSmall,
            Fault::Promotion,
        ],
        probes: &[Probe::Restart, Probe::Promotion],
        work: Work::Long,
        quarantine_ms: QUARANTINE_MS,
        clock: true,
        // 0-1 s apart (+-200 ms steps on top): within the quarantine.
        clock_step_ms: 250,
        // Steps and the restart probe's step (promoted node 2 restarts from
        // its AOF) within it.
        tolerance_ms: Some(RESTART_TOLERANCE_MS),
        replica: true,
        misuse: true,
        ..BASE
    },
    Scenario {
        name: "fencing",
        faults: &[Fault::KillRestart, Fault::Partition, Fault::LostReplies, Fault::NodePause],
        probes: &[Probe::Fencing],
        // 0-4.8 s apart, so that a token follows LOCK.FENCE, not the
        // clocks; the quarantine is set above the spread (the documented
        // assumption), although nodes with AOF always never start one.
        quarantine_ms: 6_000,
        aof: true,
        clock: true,
        clock_step_ms: 1_200,
        tolerance_ms: Some(0),
        ..BASE
    },
    Scenario {
        name: "timing",
        faults: &[Fault::LostReplies, Fault::Partition, Fault::NodePause],
        probes: &[Probe::Drift, Probe::SlowReply],
        ttl_ms: 3_000,
        clock: true,
        // 0.8% fast: within the client's drift budget (1% + 2 ms).
        rate_ppm: 8_000,
        ..BASE
    },
    Scenario {
        name: "one-node",
        faults: &[Fault::KillRestart, Fault::LostReplies, Fault::NodePause, Fault::ClientCrash],
        probes: &[Probe::RetriedExit, Probe::Abandon, Probe::NodeRestart],
        nodes: 1,
        workload: Workload::OneNode,
        quarantine_ms: QUARANTINE_MS,
        lock_delay_ms: 300,
        misuse: true,
        ..BASE
    },
    Scenario {
        name: "rw-semaphore",
        faults: &[
            Fault::KillRestart,
            Fault::Partition,
            Fault::LostReplies,
            Fault::NodePause,
            Fault::ClientCrash,
        ],
        // Writers after readers that walked away (expired, still stored).
        probes: &[Probe::ExpiredReaders],
        workload: Workload::Quorum(&[("rw0", Kind::ReadWrite), ("sem0", Kind::Semaphore(2))]),
        work: Work::Long,
        quarantine_ms: QUARANTINE_MS,
        misuse: true,
        ..BASE
    },
    Scenario {
        name: "semaphore",
        faults: &[Fault::Partition],
        probes: &[Probe::Semaphore],
        impls: &[Impl::MajoritySemaphore, Impl::Module],
        contrast_must_fail: true,
        workload: Workload::Quorum(&[("sem0", Kind::Semaphore(2))]),
        ..BASE
    },
    Scenario {
        name: "operator",
        // What an operator can do to a node: an evicting memory limit, a
        // flush, a swap of databases, a DEL, RENAME or MOVE of a lock key, a
        // paused server; while long holders extend or their watchdog renews.
        faults: &[
            Fault::Evict,
            Fault::Flush,
            Fault::SwapDb,
            Fault::StrayDelete,
            Fault::StrayRename,
            Fault::StrayMove,
            Fault::NodePause,
        ],
        // Rename and Move strike after P1 extended.
        probes: &[Probe::Evict, Probe::Flush, Probe::SwapDb, Probe::Rename, Probe::Move],
        impls: BOTH_IMPLS,
        contrast_must_fail: true,
        work: Work::Long,
        misuse: true,
        ..BASE
    },
    Scenario {
        name: "sets",
        faults: &[
            Fault::KillRestart,
            Fault::LostReplies,
            Fault::Partition,
            Fault::SlowNode,
            Fault::HolderPause,
            Fault::ClientCrash,
        ],
        // A node restarted without persistence under the set workload at
        // every seed (the probe's own lock is a single key).
        probes: &[Probe::Restart],
        workload: Workload::Quorum(SET_POOL),
        quarantine_ms: QUARANTINE_MS,
        ..BASE
    },
    Scenario {
        name: "clusters",
        // Inside two cluster members (3 shards, a master and a replica
        // each) beside one master: slots migrated under load, shard masters
        // killed and replaced (the old one back as a replica), paused,
        // connections cut during a migration. The classic recipe through
        // the redis crate's cluster client runs the probe only: a shard's
        // replica that missed its grant, promoted, lets P2 in.
        faults: &[Fault::SlotMigration, Fault::ShardFailover, Fault::ShardPause, Fault::RedirectCut],
        probes: &[Probe::ShardPromotion],
        impls: BOTH_IMPLS,
        contrast_must_fail: true,
        nodes: 1,
        clusters: 2,
        work: Work::Long,
        quarantine_ms: QUARANTINE_MS,
        aof: true,
        tolerance_ms: Some(RESTART_TOLERANCE_MS),
        ..BASE
    },
    Scenario {
        name: "sentinels",
        // Three members, each a master and its replica under one set of
        // three Sentinels: a member's master killed (-9), its replica
        // promoted by the Sentinels once they find it down, the old master
        // restarted (they turn it into a replica). The classic recipe over
        // the same topology without the module (a Sentinel-aware client)
        // runs the probe only: member 0's replica that missed P1's grant,
        // promoted, lets P2 in.
        faults: &[Fault::SentinelFailover],
        probes: &[Probe::SentinelPromotion],
        impls: BOTH_IMPLS,
        contrast_must_fail: true,
        nodes: 0,
        sentinels: 3,
        work: Work::Long,
        quarantine_ms: SENTINEL_QUARANTINE_MS,
        aof: true,
        tolerance_ms: Some(RESTART_TOLERANCE_MS),
        ..BASE
    },
];

/// `cluster-node-timeout` of the cluster members: a shard's master fails
/// over in seconds; a shard pause stays below it.
const CLUSTER_NODE_TIMEOUT_MS: u64 = 2_000;
/// The Sentinels' `down-after-milliseconds` in the Sentinel members.
const SENTINEL_DOWN_AFTER_MS: u64 = 500;
/// `lock.quarantine-ms` of the Sentinel members: the SentinelPromotion
/// probe's P1 holds for 100 ms less, and that must outlast the Sentinels'
/// failover (1.3-1.9 s measured, longer on a loaded machine) with time
/// left for P2 to try at the promoted replica.
const SENTINEL_QUARANTINE_MS: u64 = 3_500;

/// The one-node workers: three plain (WAIT and not), two reentrant, three
/// permit holders, three read-write.
const ONE_NODE_ROLES: &[Role] = &[
    Role::Plain,
    Role::Plain,
    Role::Plain,
    Role::Reentrant,
    Role::Reentrant,
    Role::Permit,
    Role::Permit,
    Role::Permit,
    Role::ReadWrite,
    Role::ReadWrite,
    Role::ReadWrite,
];

/// Set when a run failed and `JEPSEN_FAIL_FAST` is on: no new runs, no more
/// faults in the runs under way.
static ABORT: AtomicBool = AtomicBool::new(false);

#[derive(Clone, Debug)]
struct Settings {
    seed: u64,
    /// Seconds of random faults per run, after the probes.
    run_seconds: f64,
    /// Runs at once.
    parallel: usize,
    /// Gap between faults, ms (random in this range).
    gap_ms: (u64, u64),
    /// Repeat the probes this often (long runs).
    probe_every: Option<Duration>,
    /// (scenario, implementation) runs.
    runs: Vec<(&'static Scenario, Impl)>,
    history_dir: Option<PathBuf>,
    label: String,
    fail_fast: bool,
    verdict_file: Option<PathBuf>,
}

fn env<T: std::str::FromStr>(name: &str) -> Option<T> {
    let text = std::env::var(name).ok()?;
    Some(text.trim().parse().unwrap_or_else(|_| panic!("{name}={text:?} is not valid")))
}

fn scenarios_from_env() -> Vec<&'static Scenario> {
    match std::env::var("JEPSEN_SCENARIOS") {
        Ok(list) if !list.trim().is_empty() && list.trim() != "all" => list
            .split(',')
            .map(|name| {
                let name = name.trim();
                SCENARIOS.iter().find(|s| s.name == name).unwrap_or_else(|| {
                    let known: Vec<&str> = SCENARIOS.iter().map(|s| s.name).collect();
                    panic!("unknown scenario {name:?}; known: {known:?}")
                })
            })
            .collect(),
        _ => SCENARIOS.iter().collect(),
    }
}

/// The runs: every chosen scenario with its implementations, filtered by
/// `JEPSEN_IMPLS` (`module`, `contrast`; `classic` adds the classic recipe
/// to every five-node plain-lock scenario).
fn runs_from_env(default: &str) -> Vec<(&'static Scenario, Impl)> {
    let wanted: BTreeSet<String> = std::env::var("JEPSEN_IMPLS")
        .unwrap_or_else(|_| default.into())
        .split(',')
        .map(|name| match name.trim() {
            name @ ("module" | "contrast" | "classic") => name.to_string(),
            other => panic!("JEPSEN_IMPLS: unknown {other:?} (module, contrast, classic)"),
        })
        .collect();
    let mut runs = Vec::new();
    for scenario in scenarios_from_env() {
        let mut impls: Vec<Impl> = Vec::new();
        for &imp in scenario.impls {
            let keep = match imp {
                Impl::Module => wanted.contains("module"),
                _ => wanted.contains("contrast") || (imp == Impl::Classic && wanted.contains("classic")),
            };
            if keep {
                impls.push(imp);
            }
        }
        let plain = matches!(scenario.workload, Workload::Quorum(TWO_LOCKS));
        if wanted.contains("classic") && plain && !impls.contains(&Impl::Classic) {
            impls.insert(0, Impl::Classic);
        }
        runs.extend(impls.into_iter().map(|imp| (scenario, imp)));
    }
    runs
}

impl Settings {
    /// The CI run: every scenario (or `JEPSEN_SCENARIOS`) with its CI
    /// implementations, 4 s of faults each after the probes, four runs at
    /// a time; the seed `CI_SEED` (or `JEPSEN_SEED`).
    fn short() -> Settings {
        Settings {
            seed: env("JEPSEN_SEED").unwrap_or(CI_SEED),
            run_seconds: 4.0,
            parallel: 4,
            gap_ms: (200, 1_000),
            probe_every: None,
            runs: runs_from_env("contrast,module"),
            history_dir: std::env::var_os("JEPSEN_HISTORY_DIR").map(PathBuf::from),
            label: "short".into(),
            fail_fast: env::<u8>("JEPSEN_FAIL_FAST").unwrap_or(0) == 1,
            verdict_file: std::env::var_os("JEPSEN_VERDICT_FILE").map(PathBuf::from),
        }
    }

    /// The long run, from the environment:
    /// - `JEPSEN_SECONDS` (600): the whole run's wall-clock budget; each run
    ///   (scenario x implementation) gets `SECONDS * PARALLEL / runs`;
    /// - `JEPSEN_SEED` (time): the seed;
    /// - `JEPSEN_SCENARIOS` (all): comma-separated scenario names;
    /// - `JEPSEN_IMPLS` (`contrast,module`): which implementations (`classic`
    ///   adds the classic recipe to every five-node plain-lock scenario);
    /// - `JEPSEN_PARALLEL` (4);
    /// - `JEPSEN_GAP_MS` (`300-6000`): gap between faults;
    /// - `JEPSEN_PROBE_EVERY` (30): seconds between probes (0: once);
    /// - `JEPSEN_HISTORY_DIR`: write every run's history there (TSV).
    fn from_env() -> Settings {
        let runs = runs_from_env("contrast,module");
        let parallel: usize = env("JEPSEN_PARALLEL").unwrap_or(4).max(1);
        let seconds: f64 = env("JEPSEN_SECONDS").unwrap_or(600.0);
        let waves = runs.len().max(1).div_ceil(parallel);
        // About 6 s per run go to start-up, the probes and the tail.
        let run_seconds = (seconds / waves as f64 - 6.0).max(3.0);
        let gap_ms = match std::env::var("JEPSEN_GAP_MS") {
            Ok(text) => {
                let (a, b) = text.split_once('-').expect("JEPSEN_GAP_MS=min-max");
                (a.trim().parse().expect("gap min"), b.trim().parse().expect("gap max"))
            }
            Err(_) => (300, 6_000),
        };
        let probe_every: u64 = env("JEPSEN_PROBE_EVERY").unwrap_or(30);
        let seed = env("JEPSEN_SEED").unwrap_or_else(|| {
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64
        });
        Settings {
            seed,
            run_seconds,
            parallel,
            gap_ms,
            probe_every: (probe_every > 0).then(|| Duration::from_secs(probe_every)),
            runs,
            history_dir: std::env::var_os("JEPSEN_HISTORY_DIR").map(PathBuf::from),
            label: format!("long, JEPSEN_SECONDS={seconds}"),
            fail_fast: env::<u8>("JEPSEN_FAIL_FAST").unwrap_or(0) == 1,
            verdict_file: std::env::var_os("JEPSEN_VERDICT_FILE").map(PathBuf::from),
        }
    }
}

/// What one run (one scenario, one implementation) found.
struct Report {
    scenario: &'static Scenario,
    imp: Impl,
    attempts: usize,
    granted: usize,
    unknown: usize,
    writes_accepted: usize,
    writes_rejected: usize,
    stale_rejected: usize,
    lost_reported: usize,
    faults: usize,
    violations: Violations,
    probes: Vec<String>,
    inconclusive: Vec<String>,
    elapsed: Duration,
    phases: String,
    skipped: bool,
}

impl Report {
    /// The counts of a run's operations; no fault, violation or probe yet
    /// (the runner fills those in).
    fn counted(scenario: &'static Scenario, imp: Impl, ops: &[lock_faults::history::Op]) -> Report {
        let count = |f: &dyn Fn(&lock_faults::history::Op) -> bool| ops.iter().filter(|op| f(op)).count();
        Report {
            scenario,
            imp,
            attempts: ops.len(),
            granted: count(&|op| op.outcome == Outcome::Ok),
            unknown: count(&|op| op.outcome == Outcome::Unknown),
            writes_accepted: count(&|op| op.write == Some(Access::Accepted)),
            writes_rejected: count(&|op| {
                op.write == Some(Access::Rejected) || op.read.is_some_and(|(a, _)| a == Access::Rejected)
            }),
            stale_rejected: count(&|op| op.paused && op.write == Some(Access::Rejected)),
            lost_reported: count(&|op| op.lost.is_some()),
            faults: 0,
            violations: Violations::default(),
            probes: Vec::new(),
            inconclusive: Vec::new(),
            elapsed: Duration::ZERO,
            phases: String::new(),
            skipped: false,
        }
    }

    fn name(&self) -> String {
        format!("{} / {}", self.scenario.name, self.imp.label())
    }

    /// Why this run fails the suite (empty: it passes).
    fn failures(&self) -> Vec<String> {
        let mut out = Vec::new();
        if self.skipped {
            return out;
        }
        if self.granted == 0 {
            out.push("nothing was granted".to_string());
        }
        if self.faults > 0 && self.violations.liveness_checked == 0 {
            out.push("liveness was never checked".to_string());
        }
        if !self.inconclusive.is_empty() {
            out.push(format!("probe inconclusive: {:?}", self.inconclusive));
        }
        if self.imp == Impl::Module && self.violations.total() > 0 {
            out.push(format!("{} violations: {:?}", self.violations.total(), self.violations.details));
        }
        if self.imp != Impl::Module && self.scenario.contrast_must_fail && self.violations.total() == 0 {
            out.push("the contrast showed no violation where its probe arranges one".to_string());
        }
        out
    }
}

fn spec(scenario: &Scenario, imp: Impl) -> Spec {
    let module = imp != Impl::Classic;
    let mut module_args = Vec::new();
    if scenario.lock_delay_ms > 0 {
        module_args.push(("expiry-delay-ms", scenario.lock_delay_ms.to_string()));
    }
    if let Some(tolerance) = scenario.tolerance_ms {
        module_args.push(("clock-jump-tolerance-ms", tolerance.to_string()));
    }
    Spec {
        classic: !module,
        nodes: scenario.nodes,
        quarantine_ms: if module { scenario.quarantine_ms } else { 0 },
        aof: scenario.aof,
        clock: scenario.clock || scenario.rate_ppm > 0,
        clock_offsets: (0..scenario.nodes as i64).map(|i| i * scenario.clock_step_ms).collect(),
        rate_ppm: scenario.rate_ppm,
        module_args,
        replica_of: scenario.replica.then_some(VICTIM),
    }
}

/// `count` probe clients (workers 1000 and up), each with its own client.
async fn probers(imp: Impl, urls: &[String], ctx: &Arc<Ctx>, count: usize) -> Vec<Worker> {
    let mut probers = Vec::new();
    for id in 0..count {
        let locker = Locker::connect(imp, urls, test_config()).await;
        probers.push(Worker { id: 1000 + id, locker, ctx: ctx.clone() });
    }
    probers
}

async fn run_one(scenario: &'static Scenario, imp: Impl, settings: &Settings, index: u64) -> Report {
    if scenario.clusters > 0 || scenario.sentinels > 0 {
        return run_sharded(scenario, imp, settings, index).await;
    }
    let started = Instant::now();
    let seed = mix(settings.seed, index);
    let module = imp == Impl::Module;
    let cluster = Cluster::start(spec(scenario, imp), seed).await;
    let setup = started.elapsed();
    let urls = cluster.urls();
    let ttl = scenario.ttl();
    let one_node = matches!(scenario.workload, Workload::OneNode);
    let workers_count = if one_node { ONE_NODE_ROLES.len() } else { CLIENTS };
    let ctx = Arc::new(Ctx::new(module, ttl, workers_count));
    let work = if module { scenario.work } else { Work::Short };

    // The probe clients (also for one node: probes there use their own).
    let probers = probers(imp, &urls, &ctx, 3).await;
    let mut handles = Vec::new();
    let resources: Vec<String> = match scenario.workload {
        Workload::Quorum(list) => {
            let resources: Vec<Resource> =
                list.iter().map(|&(name, kind)| Resource { name: name.to_string(), kind }).collect();
            for id in 0..CLIENTS {
                let worker =
                    Worker { id, locker: Locker::connect(imp, &urls, test_config()).await, ctx: ctx.clone() };
                let seed = mix(seed, 100 + id as u64);
                handles.push(tokio::spawn(worker.run(resources.clone(), work, seed)));
            }
            list.iter().map(|(name, _)| name.to_string()).collect()
        }
        Workload::OneNode => {
            for (id, &role) in ONE_NODE_ROLES.iter().enumerate() {
                let worker = OneNode::new(id, role, &urls[0], ctx.clone());
                handles.push(tokio::spawn(worker.run(mix(seed, 100 + id as u64))));
            }
            let mut names: Vec<String> = ONE_NODE_ROLES.iter().map(|r| r.resource().to_string()).collect();
            names.dedup();
            names
        }
    };
    if scenario.misuse && module {
        let misuse = Misuse {
            conns: urls.iter().map(|u| Conn::new(u)).collect(),
            ctx: ctx.clone(),
            resources: resources.clone(),
            answered: 0,
        };
        handles.push(tokio::spawn(misuse.run(mix(seed, 99))));
    }

    let (quarantine, grace) = if module {
        (ms(scenario.quarantine_ms), scenario.restart_grace())
    } else {
        (Duration::ZERO, Duration::ZERO)
    };
    let bound =
        ttl + quarantine + grace + scenario.lock_delay().unwrap_or_default() + scenario.hold_max() + SLACK;
    let mut run = Run {
        scenario,
        imp,
        cluster: &cluster,
        ctx: &ctx,
        probers: [&probers[0], &probers[1], &probers[2]],
        workers: (0..workers_count).collect(),
        bound,
        probe_count: 0,
        probes: Vec::new(),
        inconclusive: Vec::new(),
        dead_seen: BTreeSet::new(),
    };
    let mut rng = StdRng::seed_from_u64(seed);
    tokio::time::sleep(ms(300)).await;
    for &probe in scenario.probes {
        if !ABORT.load(Ordering::SeqCst) {
            run.probe(probe, &mut rng).await;
        }
    }
    let mut next_probe = settings.probe_every.map(|every| run.now() + every);
    let mut probe_turn = 0;
    let until = run.now() + Duration::from_secs_f64(settings.run_seconds);
    while !ABORT.load(Ordering::SeqCst) {
        let gap = ms(rng.gen_range(settings.gap_ms.0..=settings.gap_ms.1));
        if run.now() + gap >= until {
            break;
        }
        tokio::time::sleep(gap).await;
        if let (Some(at), false) = (next_probe, scenario.probes.is_empty()) {
            if run.now() >= at {
                let probe = scenario.probes[probe_turn % scenario.probes.len()];
                probe_turn += 1;
                run.probe(probe, &mut rng).await;
                next_probe = settings.probe_every.map(|every| run.now() + every);
                continue;
            }
        }
        let fault = scenario.faults[rng.gen_range(0..scenario.faults.len())];
        run.inject(fault, &mut rng).await;
    }

    // The tail: every fault has healed; wait until every resource has been
    // granted again (or the liveness bound has passed).
    let last_heal = ctx.rec.last_heal();
    while !ctx.rec.all_granted_after(&resources, last_heal) && ctx.rec.now() < last_heal + bound + ms(200) {
        tokio::time::sleep(ms(20)).await;
    }
    run.check_alive().await;
    let (probes, inconclusive) = (std::mem::take(&mut run.probes), std::mem::take(&mut run.inconclusive));
    drop(run);
    ctx.stop.store(true, Ordering::SeqCst);
    for handle in handles {
        // A long critical section, a WAIT, a settle: all bounded.
        if tokio::time::timeout(bound + Duration::from_secs(10), handle).await.is_err() {
            panic!("{} ({}): a worker did not stop", scenario.name, imp.name());
        }
    }
    let run_end = ctx.rec.now();
    drop(probers);
    let stopping = Instant::now();
    cluster.shut_down().await;
    let phases = phases(setup, run_end, last_heal, stopping.elapsed());

    let ops = ctx.rec.ops();
    let events = ctx.rec.events();
    let registers = ctx.regs.snapshot();
    let rules = Rules { workload: &resources, run_end, bound, ttl, lock_delay: scenario.lock_delay() };
    let violations = check(&ops, &events, &registers, &ctx.rec.found_all(), &rules);
    if let Some(dir) = &settings.history_dir {
        let _ = std::fs::create_dir_all(dir);
        let path = dir.join(format!("{}-{}.tsv", scenario.name, imp.name()));
        let _ = std::fs::write(path, ctx.rec.dump());
    } else if violations.total() > 0 {
        let dir = target_dir().join("jepsen");
        let _ = std::fs::create_dir_all(&dir);
        let path = dir.join(format!("{}-{}-violation.tsv", scenario.name, imp.name()));
        let _ = std::fs::write(&path, ctx.rec.dump());
        if module {
            eprintln!("history with violations written to {}", path.display());
        }
    }
    for note in ctx.rec.notes() {
        eprintln!("{}: {note}", scenario.name);
    }
    Report {
        faults: events.len(),
        violations,
        probes,
        inconclusive,
        elapsed: started.elapsed(),
        phases,
        ..Report::counted(scenario, imp, &ops)
    }
}

/// A run whose quorum has cluster or Sentinel members (`sharded.rs`): the
/// workers go through the quorum client over the members; after the
/// member promotion probe, the nemesis injects the faults inside the
/// members (the ordering across redirects is the client's own, tested
/// deterministically in its crate).
async fn run_sharded(scenario: &'static Scenario, imp: Impl, settings: &Settings, index: u64) -> Report {
    let started = Instant::now();
    let seed = mix(settings.seed, index);
    let module = imp == Impl::Module;
    let spec = sharded::Spec {
        clusters: scenario.clusters,
        // Three: a failover needs a majority of the masters to vote.
        shards: 3,
        sentinels: scenario.sentinels,
        masters: scenario.nodes,
        quarantine_ms: scenario.quarantine_ms,
        node_timeout_ms: CLUSTER_NODE_TIMEOUT_MS,
        down_after_ms: SENTINEL_DOWN_AFTER_MS,
        module,
    };
    let members = Sharded::start(spec).await;
    let setup = started.elapsed();
    let urls = members.urls();
    let ttl = scenario.ttl();
    let ctx = Arc::new(Ctx::new(module, ttl, CLIENTS));
    let work = if module { scenario.work } else { Work::Short };
    let probers = probers(imp, &urls, &ctx, 2).await;
    let Workload::Quorum(list) = scenario.workload else { panic!("{}: a quorum workload", scenario.name) };
    let resources: Vec<Resource> =
        list.iter().map(|&(name, kind)| Resource { name: name.to_string(), kind }).collect();
    let mut handles = Vec::new();
    for id in 0..CLIENTS {
        let worker =
            Worker { id, locker: Locker::connect(imp, &urls, test_config()).await, ctx: ctx.clone() };
        handles.push(tokio::spawn(worker.run(resources.clone(), work, mix(seed, 100 + id as u64))));
    }
    let names: Vec<String> = list.iter().map(|(name, _)| name.to_string()).collect();
    // A failover takes the node timeout and an election on top of the
    // quarantine; the fault's event ends when the cluster agrees again.
    let bound = ttl + ms(scenario.quarantine_ms) + scenario.restart_grace() + scenario.hold_max() + SLACK;

    let mut rng = StdRng::seed_from_u64(seed);
    tokio::time::sleep(ms(300)).await;
    let (mut probes, mut inconclusive) = (Vec::new(), Vec::new());
    for &probe in scenario.probes {
        let mut why = String::new();
        // Retried (an earlier failure may still keep a member from granting).
        for _ in 0..3 {
            match probe_member_promotion(probe, &members, &ctx, &probers, scenario, module, bound, &mut rng)
                .await
            {
                Ok(note) => {
                    probes.push(format!("{probe:?}: {note}"));
                    why.clear();
                    break;
                }
                Err(reason) => why = reason,
            }
            // A failed attempt may have promoted a replica: its shard is
            // quarantined (this project) until the quarantine ends.
            tokio::time::sleep(ms(scenario.quarantine_ms + 300)).await;
        }
        if !why.is_empty() {
            inconclusive.push(why);
        }
    }
    // The contrast runs its probe only: its violation is arranged there,
    // and its run stays short.
    let run_seconds = if module { settings.run_seconds } else { 0.0 };
    let until = ctx.rec.now() + Duration::from_secs_f64(run_seconds);
    let mut dead_seen = BTreeSet::new();
    while !ABORT.load(Ordering::SeqCst) {
        let gap = ms(rng.gen_range(settings.gap_ms.0..=settings.gap_ms.1));
        if ctx.rec.now() + gap >= until {
            break;
        }
        tokio::time::sleep(gap).await;
        let fault = scenario.faults[rng.gen_range(0..scenario.faults.len())];
        let member = match fault {
            Fault::SentinelFailover => scenario.clusters + rng.gen_range(0..scenario.sentinels),
            _ => rng.gen_range(0..scenario.clusters),
        };
        let key = names[rng.gen_range(0..names.len())].clone();
        let start = ctx.rec.now();
        let detail = match fault {
            Fault::SlotMigration => {
                let pause = ms(rng.gen_range(20..200));
                members.migrate(member, key, pause, rng.gen_bool(0.5)).await
            }
            Fault::ShardFailover => members.fail_over(member, key).await,
            Fault::ShardPause => members.pause(member, key, ms(rng.gen_range(200..1_000))).await,
            Fault::RedirectCut => members.cut_redirects(member, key, ms(rng.gen_range(50..300))).await,
            Fault::SentinelFailover => members.sentinel_failover(member).await,
            other => panic!("{}: {} is not a cluster or Sentinel fault", scenario.name, other.name()),
        };
        ctx.rec.event(fault.name(), format!("member {member}: {detail}"), start, ctx.rec.now());
        for dead in members.dead().await {
            if dead_seen.insert(dead.clone()) {
                ctx.rec.found(lock_faults::history::Found::NodeDied, dead);
            }
        }
    }

    let last_heal = ctx.rec.last_heal();
    while !ctx.rec.all_granted_after(&names, last_heal) && ctx.rec.now() < last_heal + bound + ms(200) {
        tokio::time::sleep(ms(20)).await;
    }
    ctx.stop.store(true, Ordering::SeqCst);
    for handle in handles {
        if tokio::time::timeout(bound + Duration::from_secs(10), handle).await.is_err() {
            panic!("{} ({}): a worker did not stop", scenario.name, imp.name());
        }
    }
    for prober in &probers {
        prober.locker.settle().await;
    }
    drop(probers);
    let run_end = ctx.rec.now();
    let stopping = Instant::now();
    members.shut_down().await;
    let phases = phases(setup, run_end, last_heal, stopping.elapsed());
    let ops = ctx.rec.ops();
    let events = ctx.rec.events();
    let registers = ctx.regs.snapshot();
    let rules = Rules { workload: &names, run_end, bound, ttl, lock_delay: None };
    let violations = check(&ops, &events, &registers, &ctx.rec.found_all(), &rules);
    if violations.total() > 0 || settings.history_dir.is_some() {
        let dir = settings.history_dir.clone().unwrap_or_else(|| target_dir().join("jepsen"));
        let _ = std::fs::create_dir_all(&dir);
        let path = dir.join(format!("{}-{}.tsv", scenario.name, imp.name()));
        let _ = std::fs::write(&path, ctx.rec.dump());
        if violations.total() > 0 {
            eprintln!("history with violations written to {}", path.display());
        }
    }
    Report {
        faults: events.len(),
        violations,
        probes,
        inconclusive,
        elapsed: started.elapsed(),
        phases,
        ..Report::counted(scenario, imp, &ops)
    }
}

/// [`Probe::ShardPromotion`]: P1 holds `probe:promotion` on member 0 (a
/// cluster) and member 2 (a master) only, member 1 (a cluster) refusing
/// because a rival holds the key there; the replica of member 0's shard
/// for the key was cut off first, so it misses P1's grant; the rival lets
/// go, the shard's master is killed and its replica promoted at once; P2
/// keeps trying until P1's validity ends. The classic recipe: the promoted
/// replica and member 1 grant P2 while P1 holds (an overlap the checker
/// reports). This project: the promoted replica is quarantined for longer
/// than P1's TTL, so P2 gets one vote of three.
/// [`Probe::SentinelPromotion`]: the same through three Sentinel members;
/// member 0's replica is promoted by the Sentinels once they find its
/// master down (which P1's TTL outlasts).
#[allow(clippy::too_many_arguments)]
async fn probe_member_promotion(
    probe: Probe,
    members: &Sharded,
    ctx: &Ctx,
    probers: &[Worker],
    scenario: &Scenario,
    module: bool,
    bound: Duration,
    rng: &mut StdRng,
) -> Result<String, String> {
    const KEY: &str = "probe:promotion";
    const RIVAL: &str = "probe-rival";
    let [p1, p2] = probers else { panic!("two probe clients") };
    // As long as the quarantine allows: the longer P1 holds, the longer P2
    // tries. The classic recipe has no quarantine: P1 holds for 3 s, and
    // P2 must try for 1 s at least (a cluster client that met the dead
    // master reads the slots afresh first; CI once saw the classic P2
    // refused throughout a short window).
    // A Sentinel failover takes the Sentinels' detection and election on
    // top: 1.5 s more for the classic P1.
    let (ttl, least_try) = if module {
        (ms(scenario.quarantine_ms.saturating_sub(100)).max(scenario.ttl()), ms(100))
    } else if probe == Probe::SentinelPromotion {
        (ms(4_500), ms(1_000))
    } else {
        (ms(3_000), ms(1_000))
    };
    let start = ctx.rec.now();
    let ttl_ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX);
    if !members.block(1, KEY.into(), RIVAL, ttl_ms + 10_000).await {
        return Err(format!("{probe:?} probe: the rival could not hold the key on member 1"));
    }
    let (master, replica) = match members.cut_replica(0, KEY.into()).await {
        Ok(ports) => ports,
        Err(why) => {
            members.unblock(1, KEY.into(), RIVAL).await;
            return Err(format!("{probe:?} probe: {why}"));
        }
    };
    let h1 = p1.try_acquire_ttl(KEY, Want::Plain, ttl).await;
    members.unblock(1, KEY.into(), RIVAL).await;
    let mut h1 = match h1 {
        Ok(h1) => h1,
        Err(why) => {
            // Nothing to promote over: the replica catches up again.
            members.resume_replica(0, replica).await;
            return Err(format!("{probe:?} probe: P1 not granted: {why}"));
        }
    };
    let killed = Instant::now();
    if let Err(why) = members.take_over(0, KEY.into(), master, replica).await {
        p1.finish(h1).await;
        members.rejoin(0, master).await;
        return Err(format!("{probe:?} probe: P1 granted, no promotion: {why}"));
    }
    let took = killed.elapsed();
    if let Some(base) = p1.read(&mut h1) {
        p1.careful_write(&mut h1, base);
    }
    let validity_end = h1.op.validity_end.unwrap_or_default();
    let (first_try, mut attempts, mut granted) = (ctx.rec.now(), 0, false);
    while ctx.rec.now() < validity_end {
        attempts += 1;
        if let Ok(mut h2) = p2.try_acquire(KEY, Want::Plain).await {
            granted = true;
            if let Some(base) = p2.read(&mut h2) {
                p2.careful_write(&mut h2, base);
            }
            p2.finish(h2).await;
        }
        tokio::time::sleep(ms(rng.gen_range(2..8))).await;
    }
    p1.finish(h1).await;
    let promoted = match probe {
        Probe::SentinelPromotion => format!("by the Sentinels {} ms after the kill", took.as_millis()),
        _ => "at once".to_string(),
    };
    let what = format!(
        "member 0's master {master} of '{KEY}' killed after granting P1 (its replica {replica} cut off), \
         the replica promoted {promoted}"
    );
    ctx.rec.event(&format!("{probe:?} (probe)"), what.clone(), start, ctx.rec.now());
    members.rejoin(0, master).await;
    let mut note = format!(
        "{what}; P2 tried {attempts} times from {} ms before the end of P1's validity: {}",
        validity_end.saturating_sub(first_try).as_millis(),
        if granted { "GRANTED while P1 held" } else { "refused" }
    );
    // Liveness: P2 gets it once P1's lock has run out (and the quarantine
    // ended).
    match p2.acquire_within(KEY, Want::Plain, bound, rng).await {
        Some(h2) => p2.finish(h2).await,
        None => {
            let _ = write!(note, "; P2 not granted within {} ms after", bound.as_millis());
        }
    }
    if validity_end.saturating_sub(first_try) < least_try {
        return Err(format!(
            "{probe:?} probe: P2 began trying less than {} ms before P1's validity ended ({note})",
            least_try.as_millis()
        ));
    }
    Ok(note)
}

fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| lock_testkit::repo_dir().join("target"))
}

/// How long a run's phases took, for its report line.
fn phases(setup: Duration, run_end: Duration, last_heal: Duration, shut_down: Duration) -> String {
    format!(
        "start {:.1} s, run {:.1} s (last heal {:.1} s), shut down {:.1} s",
        setup.as_secs_f64(),
        run_end.as_secs_f64(),
        last_heal.as_secs_f64(),
        shut_down.as_secs_f64()
    )
}

fn skipped(scenario: &'static Scenario, imp: Impl) -> Report {
    Report { phases: "skipped (fail-fast)".into(), skipped: true, ..Report::counted(scenario, imp, &[]) }
}

/// One verdict line per finished run, for `scripts/mutants`:
/// `run <seconds since start> <scenario> <implementation> <violations> <failures or ->`.
fn verdict(settings: &Settings, started: Instant, r: &Report) {
    let Some(path) = &settings.verdict_file else { return };
    let failures = r.failures();
    let why = if failures.is_empty() {
        "-".to_string()
    } else if r.imp == Impl::Module && r.violations.total() > 0 {
        r.violations.kinds()
    } else {
        failures.join("; ").replace(['\t', '\n'], " ")
    };
    let line = format!(
        "run\t{:.1}\t{}\t{}\t{}\t{why}\n",
        started.elapsed().as_secs_f64(),
        r.scenario.name,
        r.imp.name(),
        if r.violations.total() == 0 { "0".to_string() } else { r.violations.kinds() }
    );
    if let Ok(mut file) = std::fs::OpenOptions::new().create(true).append(true).open(path) {
        let _ = file.write_all(line.as_bytes());
    }
}

fn run_all(settings: &Settings) -> Vec<Report> {
    let runtime =
        tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    let started = Instant::now();
    runtime.block_on(async {
        let limit = Arc::new(Semaphore::new(settings.parallel));
        let settings = Arc::new(settings.clone());
        let mut jobs = Vec::new();
        for &(scenario, imp) in &settings.runs {
            let index = SCENARIOS.iter().position(|s| s.name == scenario.name).unwrap_or(0) as u64;
            let (limit, settings) = (limit.clone(), settings.clone());
            jobs.push(tokio::spawn(async move {
                let _permit = limit.acquire_owned().await.expect("semaphore");
                if ABORT.load(Ordering::SeqCst) {
                    return skipped(scenario, imp);
                }
                let report = run_one(scenario, imp, &settings, index).await;
                eprintln!(
                    "jepsen: {}: {} attempts, {} granted, {} faults, violations {} ({:.1} s: {})",
                    report.name(),
                    report.attempts,
                    report.granted,
                    report.faults,
                    report.violations.summary(),
                    report.elapsed.as_secs_f64(),
                    report.phases
                );
                verdict(&settings, started, &report);
                if settings.fail_fast && !report.failures().is_empty() {
                    ABORT.store(true, Ordering::SeqCst);
                }
                report
            }));
        }
        let mut reports = Vec::new();
        let mut panics = Vec::new();
        for (job, (scenario, imp)) in jobs.into_iter().zip(settings.runs.iter()) {
            match job.await {
                Ok(report) => reports.push(report),
                Err(e) => {
                    // A harness action failed (a node that crashed cannot
                    // be reached, ...): the run fails, with a verdict line.
                    let why = match e.try_into_panic() {
                        Ok(payload) => payload
                            .downcast_ref::<String>()
                            .cloned()
                            .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
                            .unwrap_or_default(),
                        Err(e) => e.to_string(),
                    };
                    let line = if why.contains("REDIS BUG REPORT") {
                        "node died (redis-server aborted, bug report in its log; the run panicked)"
                            .to_string()
                    } else {
                        format!("run panicked: {}", why.chars().take(160).collect::<String>())
                    };
                    if let Some(path) = &settings.verdict_file {
                        let text = format!(
                            "run\t{:.1}\t{}\t{}\t-\t{}\n",
                            started.elapsed().as_secs_f64(),
                            scenario.name,
                            imp.name(),
                            line.replace(['\t', '\n'], " ")
                        );
                        if let Ok(mut file) = std::fs::OpenOptions::new().create(true).append(true).open(path)
                        {
                            let _ = file.write_all(text.as_bytes());
                        }
                    }
                    panics.push(format!("{} / {}: {why}", scenario.name, imp.label()));
                }
            }
        }
        assert!(panics.is_empty(), "runs panicked:\n{}", panics.join("\n"));
        reports
    })
}

fn table(settings: &Settings, reports: &[Report], took: Duration) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Jepsen-style runs ({}; seed {}; {:.0} s of faults per run after its probes; {:.0} s in all):\n",
        settings.label,
        settings.seed,
        settings.run_seconds,
        took.as_secs_f64()
    );
    let _ = writeln!(
        out,
        "| scenario | nemesis | contrast: ops (granted) | faults | violations | this project: ops (granted) | faults | violations |"
    );
    let _ = writeln!(out, "|---|---|---|---|---|---|---|---|");
    let mut seen = BTreeSet::new();
    for &(scenario, _) in &settings.runs {
        if !seen.insert(scenario.name) {
            continue;
        }
        let faults: Vec<&str> = scenario.faults.iter().map(|f| f.name()).collect();
        let mut row = format!("| {} | {}", scenario.name, faults.join(", "));
        if !scenario.probes.is_empty() {
            let probes: Vec<String> = scenario.probes.iter().map(|p| format!("{p:?}")).collect();
            let _ = write!(row, " + probes: {}", probes.join(", "));
        }
        row.push_str(" |");
        for module in [false, true] {
            match reports
                .iter()
                .find(|r| r.scenario.name == scenario.name && (r.imp == Impl::Module) == module)
            {
                Some(r) if !r.skipped => {
                    let who = if module { String::new() } else { format!("{}: ", r.imp.label()) };
                    let _ = write!(
                        row,
                        " {who}{} ({}) | {} | {} |",
                        r.attempts,
                        r.granted,
                        r.faults,
                        r.violations.summary()
                    );
                }
                _ => row.push_str(" - | - | - |"),
            }
        }
        let _ = writeln!(out, "{row}");
    }
    let _ = writeln!(
        out,
        "\nops: acquisition attempts (granted); faults: faults injected (probe steps included); violations: \
         overlapping windows of holders that exclude each other, more than L holders of an L-permit \
         semaphore, fencing tokens out of grant or real-time order, stale token accepted by the fenced \
         register, lost update, final value != accepted increments, a write outside the writer's known \
         validity, a grant within the lock-delay, no grant within the liveness bound after a fault healed, \
         a misuse call not refused, a node process that died, a lock left behind. The classic recipe has no \
         fencing token: its register cannot refuse a stale write."
    );
    out
}

fn details(reports: &[Report]) -> String {
    let mut out = String::new();
    for r in reports.iter().filter(|r| !r.skipped) {
        let _ = writeln!(
            out,
            "{}: {} attempts, {} granted, {} unknown; {} increments accepted, {} refused by the register \
             ({} stale writes after a pause); {} losses reported by the guard; liveness checked after {} \
             heals, slowest recovery {} ms; {:.1} s ({})",
            r.name(),
            r.attempts,
            r.granted,
            r.unknown,
            r.writes_accepted,
            r.writes_rejected,
            r.stale_rejected,
            r.lost_reported,
            r.violations.liveness_checked,
            r.violations.recovery_max.as_millis(),
            r.elapsed.as_secs_f64(),
            r.phases
        );
        for probe in &r.probes {
            let _ = writeln!(out, "  probe: {probe}");
        }
        for why in &r.inconclusive {
            let _ = writeln!(out, "  INCONCLUSIVE probe: {why}");
        }
        for detail in &r.violations.details {
            let _ = writeln!(out, "  violation: {detail}");
        }
    }
    out
}

fn run_and_assert(settings: Settings) {
    let started = Instant::now();
    eprintln!(
        "jepsen: seed {} (replay: JEPSEN_SEED={} scripts/jepsen, or JEPSEN_SEED={} cargo test --release -p \
         redlock-client --test jepsen)",
        settings.seed, settings.seed, settings.seed
    );
    let reports = run_all(&settings);
    let took = started.elapsed();
    let summary = table(&settings, &reports, took);
    let more = details(&reports);
    println!("{summary}\n{more}");
    let dir = target_dir().join("jepsen");
    if std::fs::create_dir_all(&dir).is_ok() {
        let _ = std::fs::write(
            dir.join(format!("summary-{}.md", settings.label.split(',').next().unwrap_or("run"))),
            format!("{summary}\n{more}"),
        );
    }
    let failures: Vec<String> = reports
        .iter()
        .flat_map(|r| r.failures().into_iter().map(move |f| format!("{}: {f}", r.name())))
        .collect();
    assert!(failures.is_empty(), "seed {}:\n{}\n\n{summary}\n{more}", settings.seed, failures.join("\n"));
}

/// The CI run: every scenario with its implementations, a few seconds each.
#[test]
fn jepsen_short() {
    run_and_assert(Settings::short());
}

/// The long run (`scripts/jepsen`), configured by environment variables.
#[test]
#[ignore]
fn jepsen_long() {
    run_and_assert(Settings::from_env());
}
