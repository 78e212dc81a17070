//! A Jepsen-style safety suite for the quorum client over five masters with
//! the module, with the classic Redlock (SET NX PX + Lua compare-and-delete
//! over plain Redis) under the same faults as the contrast.
//!
//! Each run: 5 masters, each behind a TCP proxy; K workers (6) contend for
//! R resources (2) with `try_acquire` and random back-off; under the lock a
//! worker reads the resource's register, works 1-8 ms and writes value + 1,
//! both with its fencing token (the register is fenced: it refuses a token
//! below the highest it has seen on a read or a write; the classic recipe
//! has no token, so its register accepts everything). Everything goes into
//! one history on one monotonic clock. A nemesis injects the scenario's
//! faults (seeded: the same seed gives the same choices of fault, node,
//! duration and gap; the interleaving with the clients still depends on
//! timing) and, for the contrast, a probe: a deterministic arrangement of
//! the known Redlock failure for that fault, with two extra clients P1 and
//! P2. The checker (`support/jepsen/checker.rs`) then counts violations:
//! overlapping validity windows, fencing tokens out of order, stale tokens
//! accepted, lost updates, a wrong final count, no grant after a fault
//! healed.
//!
//! - `jepsen_short` (CI, about 30 s of test time on 2 cores): every
//!   scenario for both implementations, 5 s of faults each after the probe;
//!   asserts 0 violations for this project everywhere and at least 1 for
//!   the classic recipe where the probe arranges one; prints a markdown
//!   table (see it with `-- --nocapture`, or in
//!   `target/jepsen/summary-short.md`).
//! - `jepsen_long` (ignored; `scripts/jepsen`): the same, for longer,
//!   configured by environment variables (see `Settings::from_env`).

#[path = "../../tests/common/mod.rs"]
mod common;
#[path = "support/jepsen/mod.rs"]
mod suite;
mod support;

use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use suite::checker::{check, Violations};
use suite::cluster::{Cluster, Spec};
use suite::history::{Access, Outcome};
use suite::proxy::Mode;
use suite::worker::{Ctx, Locker, PauseRequest, Worker};
use support::test_config;
use tokio::sync::{oneshot, Semaphore};

const NODES: usize = 5;
const TTL: Duration = Duration::from_millis(1_000);
/// `lock.quarantine-ms` where nodes restart or are promoted: above the TTL.
const QUARANTINE_MS: u64 = 1_500;
/// Added to TTL + quarantine for the liveness bound: a loaded 2-core CI
/// machine, reconnects, retry delays.
const SLACK: Duration = Duration::from_millis(2_000);
/// The node the probes fault, and the one with a replica.
const VICTIM: usize = 2;
/// How far the clock probe moves the victim's wall clock: far beyond the
/// TTL, well within the module's `lock.clock-jump-tolerance-ms` (60 s).
const CLOCK_PROBE_JUMP_MS: i64 = 10_000;

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

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fault {
    /// A worker pauses (GC) inside its critical section 100-800 ms past its
    /// validity, then writes without checking.
    HolderPause,
    /// kill -9 a node, restart it at once (0-200 ms down) on the same data
    /// directory: empty without persistence, intact with AOF always.
    KillRestart,
    /// SIGSTOP a node for 0.2-1.5 s, then SIGCONT.
    NodePause,
    /// Half the replies of one node are lost (connection cut after the node
    /// acted), for 0.3-1.5 s.
    LostReplies,
    /// Two nodes unreachable for 0.3-1.5 s: refused, or held and delivered
    /// late, or held and reset.
    Partition,
    /// A node's wall clock jumps 2-20 s forward, back 0.3-1.5 s later.
    ClockForward,
    /// A node's wall clock jumps 2-10 s backward (and stays).
    ClockBackward,
    /// A node's wall clock is set to -700..+700 ms (within the module's
    /// documented assumption for restarts: clocks agree within the
    /// quarantine).
    ClockSmall,
    /// The master with a replica: the replica is cut off, the master grants
    /// for 0.1-0.6 s, dies, the replica is promoted and takes its place.
    Promotion,
}

impl Fault {
    fn name(self) -> &'static str {
        match self {
            Fault::HolderPause => "holder pause",
            Fault::KillRestart => "kill -9 + restart",
            Fault::NodePause => "node pause",
            Fault::LostReplies => "lost replies",
            Fault::Partition => "partition",
            Fault::ClockForward => "clock forward",
            Fault::ClockBackward => "clock backward",
            Fault::ClockSmall => "clock step",
            Fault::Promotion => "promotion",
        }
    }
}

/// The deterministic contrast arrangements.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Probe {
    /// P1 holds, reads, pauses past its validity; P2 acquires, increments;
    /// P1 writes its stale increment.
    HolderPause,
    /// P1 holds on nodes 0-2 only (3 and 4 down while it acquires); then
    /// node 2 is faulted; P2 tries at once, while P1's lease is valid.
    Restart,
    ClockForward,
    Promotion,
}

#[derive(Debug)]
struct Scenario {
    name: &'static str,
    faults: &'static [Fault],
    probe: Option<Probe>,
    quarantine: bool,
    aof: bool,
    clock: bool,
    replica: bool,
    /// The classic recipe must show at least one violation (the probe
    /// arranges it deterministically).
    classic_must_fail: bool,
}

const SCENARIOS: &[Scenario] = &[
    Scenario {
        name: "holder-pause",
        faults: &[Fault::HolderPause],
        probe: Some(Probe::HolderPause),
        quarantine: false,
        aof: false,
        clock: false,
        replica: false,
        classic_must_fail: true,
    },
    Scenario {
        name: "restart",
        faults: &[Fault::KillRestart],
        probe: Some(Probe::Restart),
        quarantine: true,
        aof: false,
        clock: false,
        replica: false,
        classic_must_fail: true,
    },
    Scenario {
        name: "restart-aof",
        faults: &[Fault::KillRestart],
        probe: Some(Probe::Restart),
        quarantine: true,
        aof: true,
        clock: false,
        replica: false,
        classic_must_fail: false,
    },
    Scenario {
        name: "node-pause",
        faults: &[Fault::NodePause],
        probe: None,
        quarantine: false,
        aof: false,
        clock: false,
        replica: false,
        classic_must_fail: false,
    },
    Scenario {
        name: "lost-replies",
        faults: &[Fault::LostReplies],
        probe: None,
        quarantine: false,
        aof: false,
        clock: false,
        replica: false,
        classic_must_fail: false,
    },
    Scenario {
        name: "partition",
        faults: &[Fault::Partition],
        probe: None,
        quarantine: false,
        aof: false,
        clock: false,
        replica: false,
        classic_must_fail: false,
    },
    Scenario {
        name: "clock-forward",
        faults: &[Fault::ClockForward],
        probe: Some(Probe::ClockForward),
        quarantine: false,
        aof: false,
        clock: true,
        replica: false,
        classic_must_fail: true,
    },
    Scenario {
        name: "clock-backward",
        faults: &[Fault::ClockBackward],
        probe: None,
        quarantine: false,
        aof: false,
        clock: true,
        replica: false,
        classic_must_fail: false,
    },
    Scenario {
        name: "promotion",
        faults: &[Fault::Promotion],
        probe: Some(Probe::Promotion),
        quarantine: true,
        aof: false,
        clock: false,
        replica: true,
        classic_must_fail: true,
    },
    Scenario {
        name: "mixed",
        faults: &[
            Fault::HolderPause,
            Fault::KillRestart,
            Fault::NodePause,
            Fault::LostReplies,
            Fault::Partition,
            Fault::ClockSmall,
            Fault::Promotion,
        ],
        probe: None,
        quarantine: true,
        aof: false,
        clock: true,
        replica: true,
        classic_must_fail: false,
    },
];

#[derive(Clone, Debug)]
struct Settings {
    seed: u64,
    /// Seconds of random faults per run, after the first probe.
    run_seconds: f64,
    clients: usize,
    resources: usize,
    /// Runs at once (a run is one scenario for one implementation).
    parallel: usize,
    /// Gap between faults, ms (random in this range).
    gap_ms: (u64, u64),
    /// Repeat the probe this often (long runs).
    probe_every: Option<Duration>,
    scenarios: Vec<&'static Scenario>,
    /// false = classic recipe, true = this project.
    impls: Vec<bool>,
    history_dir: Option<PathBuf>,
    label: String,
}

fn env<T: std::str::FromStr>(name: &str) -> Option<T> {
    let text = std::env::var(name).ok()?;
    Some(text.trim().parse().unwrap_or_else(|_| panic!("{name}={text:?} is not valid")))
}

fn seed_from_env() -> u64 {
    env("JEPSEN_SEED").or_else(|| env("REDLOCK_TEST_SEED")).unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64
    })
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

impl Settings {
    /// The CI run: every scenario (or `JEPSEN_SCENARIOS`), both
    /// implementations, 5 s of faults each after the probe, four runs at a
    /// time; the seed from `JEPSEN_SEED` (or the clock).
    fn short() -> Settings {
        Settings {
            seed: seed_from_env(),
            run_seconds: 5.0,
            clients: 6,
            resources: 2,
            parallel: 4,
            gap_ms: (200, 1_000),
            probe_every: None,
            scenarios: scenarios_from_env(),
            impls: vec![false, true],
            history_dir: std::env::var_os("JEPSEN_HISTORY_DIR").map(PathBuf::from),
            label: "short".into(),
        }
    }

    /// The long run, from the environment:
    /// - `JEPSEN_SECONDS` (600): the whole run's wall-clock budget; each run
    ///   (scenario x implementation) gets `SECONDS * PARALLEL / runs`;
    /// - `JEPSEN_SEED` (time): the seed;
    /// - `JEPSEN_SCENARIOS` (all): comma-separated scenario names;
    /// - `JEPSEN_IMPLS` (`classic,module`): which implementations;
    /// - `JEPSEN_CLIENTS` (6), `JEPSEN_RESOURCES` (2), `JEPSEN_PARALLEL` (4);
    /// - `JEPSEN_GAP_MS` (`300-6000`): gap between faults;
    /// - `JEPSEN_PROBE_EVERY` (30): seconds between probes (0: once);
    /// - `JEPSEN_HISTORY_DIR`: write every run's history there (TSV).
    fn from_env() -> Settings {
        let scenarios = scenarios_from_env();
        let impls: Vec<bool> = std::env::var("JEPSEN_IMPLS")
            .unwrap_or_else(|_| "classic,module".into())
            .split(',')
            .map(|name| match name.trim() {
                "classic" => false,
                "module" => true,
                other => panic!("JEPSEN_IMPLS: unknown {other:?} (classic, module)"),
            })
            .collect();
        let parallel: usize = env("JEPSEN_PARALLEL").unwrap_or(4).max(1);
        let seconds: f64 = env("JEPSEN_SECONDS").unwrap_or(600.0);
        let runs = (scenarios.len() * impls.len()).max(1);
        let waves = runs.div_ceil(parallel);
        // About 4 s per run go to start-up, the first probe and the tail.
        let run_seconds = (seconds / waves as f64 - 4.0).max(3.0);
        let gap_ms = match std::env::var("JEPSEN_GAP_MS") {
            Ok(text) => {
                let (a, b) = text.split_once('-').expect("JEPSEN_GAP_MS=min-max");
                (a.trim().parse().expect("gap min"), b.trim().parse().expect("gap max"))
            }
            Err(_) => (300, 6_000),
        };
        let probe_every: u64 = env("JEPSEN_PROBE_EVERY").unwrap_or(30);
        Settings {
            seed: seed_from_env(),
            run_seconds,
            clients: env("JEPSEN_CLIENTS").unwrap_or(6).max(1),
            resources: env("JEPSEN_RESOURCES").unwrap_or(2).max(1),
            parallel,
            gap_ms,
            probe_every: (probe_every > 0).then(|| Duration::from_secs(probe_every)),
            scenarios,
            impls,
            history_dir: std::env::var_os("JEPSEN_HISTORY_DIR").map(PathBuf::from),
            label: format!("long, JEPSEN_SECONDS={seconds}"),
        }
    }
}

/// What one run (one scenario, one implementation) found.
struct Report {
    scenario: &'static Scenario,
    module: bool,
    attempts: usize,
    granted: usize,
    unknown: usize,
    writes_accepted: usize,
    writes_rejected: usize,
    stale_rejected: usize,
    faults: usize,
    violations: Violations,
    probes: Vec<String>,
    inconclusive: Vec<String>,
    elapsed: Duration,
    phases: String,
}

impl Report {
    fn implementation(&self) -> &'static str {
        if self.module {
            "this project"
        } else {
            "classic Redlock"
        }
    }
}

/// Everything a fault or a probe needs.
struct Run<'a> {
    scenario: &'static Scenario,
    settings: &'a Settings,
    cluster: &'a Cluster,
    ctx: &'a Arc<Ctx>,
    p1: &'a Worker,
    p2: &'a Worker,
    bound: Duration,
    probe_count: usize,
    probes: Vec<String>,
    inconclusive: Vec<String>,
}

impl Run<'_> {
    fn now(&self) -> Duration {
        self.ctx.rec.now()
    }

    fn event(&self, name: &str, detail: String, start: Duration) {
        self.ctx.rec.event(name, detail, start, self.now());
    }

    async fn inject(&mut self, fault: Fault, rng: &mut StdRng) {
        let nodes = self.cluster.proxies.len();
        let node = rng.gen_range(0..nodes);
        let hold = ms(rng.gen_range(300..1_500));
        match fault {
            Fault::HolderPause => {
                let worker = rng.gen_range(0..self.settings.clients);
                let past_validity = ms(rng.gen_range(100..800));
                let (done, finished) = oneshot::channel();
                self.ctx.request_pause(worker, PauseRequest { past_validity, done });
                // The worker records the event itself, when it pauses.
                if tokio::time::timeout(3 * TTL + SLACK, finished).await.is_err() {
                    self.ctx.withdraw_pause(worker);
                }
            }
            Fault::KillRestart => {
                let down = ms(rng.gen_range(0..200));
                let start = self.now();
                self.cluster.kill_restart(node, down).await;
                let how = if self.scenario.aof { "AOF always" } else { "no persistence" };
                self.event(fault.name(), format!("node {node}, down {} ms, {how}", down.as_millis()), start);
            }
            Fault::NodePause => {
                let pause = ms(rng.gen_range(200..1_500));
                let start = self.now();
                self.cluster.signal(node, "STOP").await;
                tokio::time::sleep(pause).await;
                self.cluster.signal(node, "CONT").await;
                self.event(fault.name(), format!("node {node} SIGSTOP for {} ms", pause.as_millis()), start);
            }
            Fault::LostReplies => {
                let start = self.now();
                let before = self.cluster.proxies[node].dropped();
                self.cluster.set_mode(&[node], Mode::DropReplies { permille: 500 });
                tokio::time::sleep(hold).await;
                self.cluster.heal(&[node], false);
                let lost = self.cluster.proxies[node].dropped() - before;
                self.event(
                    fault.name(),
                    format!("node {node}: half its replies lost for {} ms ({lost} lost)", hold.as_millis()),
                    start,
                );
            }
            Fault::Partition => {
                let other = (node + rng.gen_range(1..nodes)) % nodes;
                let pair = [node, other];
                let (mode, reset, how) = match rng.gen_range(0..3) {
                    0 => (Mode::Down, true, "refused"),
                    1 => (Mode::Partition, false, "held, delivered late"),
                    _ => (Mode::Partition, true, "held, then reset"),
                };
                let start = self.now();
                self.cluster.set_mode(&pair, mode);
                tokio::time::sleep(hold).await;
                self.cluster.heal(&pair, reset);
                self.event(
                    fault.name(),
                    format!("nodes {node}, {other} cut off for {} ms ({how})", hold.as_millis()),
                    start,
                );
            }
            Fault::ClockForward => {
                let jump = rng.gen_range(2_000..20_000);
                let start = self.now();
                self.cluster.set_clock(node, jump).await;
                tokio::time::sleep(hold).await;
                self.cluster.set_clock(node, 0).await;
                self.event(
                    fault.name(),
                    format!("node {node} wall clock +{jump} ms for {} ms, then back", hold.as_millis()),
                    start,
                );
            }
            Fault::ClockBackward => {
                let jump = rng.gen_range(2_000..10_000);
                let to = self.cluster.clock_offset(node) - jump;
                let start = self.now();
                self.cluster.set_clock(node, to).await;
                self.event(fault.name(), format!("node {node} wall clock -{jump} ms (now {to} ms)"), start);
            }
            Fault::ClockSmall => {
                let to = rng.gen_range(-700..=700);
                let start = self.now();
                self.cluster.set_clock(node, to).await;
                self.event(fault.name(), format!("node {node} wall clock set to {to:+} ms"), start);
            }
            Fault::Promotion => {
                if !self.cluster.has_replica(VICTIM) {
                    self.cluster.add_replica(VICTIM).await;
                }
                let window = ms(rng.gen_range(100..600));
                let start = self.now();
                self.cluster.isolate_replica(VICTIM).await;
                tokio::time::sleep(window).await;
                self.cluster.fail_over(VICTIM).await;
                self.event(
                    fault.name(),
                    format!(
                        "node {VICTIM}: replica cut off, master granted {} ms more, died; replica promoted",
                        window.as_millis()
                    ),
                    start,
                );
                self.cluster.add_replica(VICTIM).await;
            }
        }
    }

    /// Runs the probe until it is conclusive (at most 3 attempts).
    async fn probe(&mut self, probe: Probe, rng: &mut StdRng) {
        let mut why = String::new();
        for _ in 0..3 {
            self.probe_count += 1;
            let resource = format!("probe-{}", self.probe_count);
            let result = match probe {
                Probe::HolderPause => self.probe_holder_pause(&resource, rng).await,
                _ => self.probe_bare_majority(probe, &resource, rng).await,
            };
            match result {
                Ok(note) => {
                    self.probes.push(note);
                    return;
                }
                Err(reason) => {
                    why = reason;
                    tokio::time::sleep(ms(200)).await;
                }
            }
        }
        self.inconclusive.push(why);
    }

    /// Read, pause past the validity (P2 takes the lock and increments
    /// meanwhile), then write the stale increment without checking.
    async fn probe_holder_pause(&self, resource: &str, rng: &mut StdRng) -> Result<String, String> {
        let (p1, p2) = (self.p1, self.p2);
        let mut h1 = p1.acquire_within(resource, self.bound, rng).await.ok_or("P1 was not granted")?;
        let base1 = p1.read(&mut h1);
        let start = self.now();
        h1.op.paused = true;
        let h2 = p2.acquire_within(resource, TTL + self.bound, rng).await;
        let p2_wrote = match h2 {
            Some(mut h2) => {
                let wrote = match p2.read(&mut h2) {
                    Some(base) => p2.careful_write(&mut h2, base),
                    None => false,
                };
                p2.finish(h2).await;
                wrote
            }
            None => false,
        };
        tokio::time::sleep_until((h1.held.deadline + ms(100)).into()).await;
        let stale = match base1 {
            Some(base) => p1.write(&mut h1, base),
            None => false,
        };
        p1.finish(h1).await;
        self.event(
            "holder pause (probe)",
            format!(
                "P1 paused on '{resource}' past its validity; P2 incremented; P1's stale write {}",
                accepted(stale)
            ),
            start,
        );
        if !p2_wrote {
            return Err("holder-pause probe: P2 did not increment while P1 was paused".into());
        }
        Ok(format!("P2 incremented during P1's pause; P1's stale write was {}", accepted(stale)))
    }

    /// P1 holds on nodes 0-2 only; node 2 forgets (restart without data,
    /// clock jump, promotion of a replica that missed the grant); P2 tries
    /// at once, while P1's lease is still valid by P1's clock.
    async fn probe_bare_majority(
        &self,
        probe: Probe,
        resource: &str,
        rng: &mut StdRng,
    ) -> Result<String, String> {
        let (p1, p2, cluster) = (self.p1, self.p2, self.cluster);
        if probe == Probe::Promotion {
            if !cluster.has_replica(VICTIM) {
                cluster.add_replica(VICTIM).await;
            }
            cluster.isolate_replica(VICTIM).await;
        }
        let start = self.now();
        cluster.set_mode(&[3, 4], Mode::Down);
        // Retried: an earlier fault may still keep one of nodes 0-2 from
        // granting (a quarantine after a restart).
        let h1 = p1.acquire_within(resource, self.bound, rng).await.ok_or("not granted");
        cluster.heal(&[3, 4], true);
        self.event(
            "nodes down (probe)",
            format!("nodes 3, 4 refused connections while P1 acquired '{resource}'"),
            start,
        );
        let mut h1 = match h1 {
            Ok(h1) => h1,
            Err(why) => {
                if probe == Probe::Promotion {
                    // The replica is cut off: promote it anyway (a fault
                    // like any other), and give it a new replica.
                    let start = self.now();
                    cluster.fail_over(VICTIM).await;
                    self.event(
                        "promotion (probe aborted)",
                        format!("node {VICTIM}'s replica promoted"),
                        start,
                    );
                    cluster.add_replica(VICTIM).await;
                }
                return Err(format!("{probe:?} probe: P1 was not granted: {why}"));
            }
        };
        let base1 = p1.read(&mut h1);
        let start = self.now();
        let what = match probe {
            Probe::Restart => {
                cluster.kill_restart(VICTIM, Duration::ZERO).await;
                if self.scenario.aof {
                    format!(
                        "node {VICTIM} killed (-9) and restarted at once from its AOF (appendfsync always)"
                    )
                } else {
                    format!("node {VICTIM} killed (-9) and restarted at once, without persistence")
                }
            }
            Probe::ClockForward => {
                cluster.set_clock(VICTIM, CLOCK_PROBE_JUMP_MS).await;
                format!("node {VICTIM}'s wall clock jumped {CLOCK_PROBE_JUMP_MS} ms forward")
            }
            Probe::Promotion => {
                cluster.fail_over(VICTIM).await;
                format!("node {VICTIM}'s master killed; its replica, cut off before P1's grant, promoted in its place")
            }
            Probe::HolderPause => unreachable!(),
        };
        let validity_end = h1.op.validity_end.unwrap_or_default();
        // P2's connections are fresh (the fault broke some): its attempt
        // reaches every node.
        if !p2.reconnect().await {
            self.ctx.rec.note(format!("{probe:?} probe: P2 could not reach every node"));
        }
        let first = p2.try_acquire(resource).await;
        let conclusive = self.now() + ms(20) < validity_end;
        let p2_granted_at_once = first.is_ok();
        let mut note = match &first {
            Ok(_) => "P2 was granted while P1's lease was valid".to_string(),
            Err(why) => format!("P2 was refused ({why})"),
        };
        if let Ok(mut h2) = first {
            if let Some(base) = p2.read(&mut h2) {
                p2.careful_write(&mut h2, base);
            }
            p2.finish(h2).await;
        }
        // P1, a careful client that still has validity, writes its increment.
        if let Some(base) = base1 {
            let wrote = p1.careful_write(&mut h1, base);
            let _ = write!(
                note,
                "; P1's write {}",
                if h1.op.aborted { "skipped".into() } else { accepted(wrote) }
            );
        }
        p1.finish(h1).await;
        if probe == Probe::ClockForward {
            cluster.set_clock(VICTIM, 0).await;
        }
        self.event(&format!("{probe:?} (probe)"), what.clone(), start);
        if probe == Probe::Promotion {
            cluster.add_replica(VICTIM).await;
        }
        if !p2_granted_at_once {
            if let Some(mut h2) = p2.acquire_within(resource, self.bound, rng).await {
                if let Some(base) = p2.read(&mut h2) {
                    p2.careful_write(&mut h2, base);
                }
                p2.finish(h2).await;
            }
        }
        if !conclusive {
            return Err(format!("{probe:?} probe: P2's first attempt ended after P1's validity ({note})"));
        }
        Ok(format!("{what}: {note}"))
    }
}

fn accepted(yes: bool) -> String {
    if yes { "accepted" } else { "rejected" }.to_string()
}

async fn run_one(scenario: &'static Scenario, module: bool, settings: &Settings, index: u64) -> Report {
    let started = Instant::now();
    let seed = mix(settings.seed, index);
    let spec = Spec {
        classic: !module,
        nodes: NODES,
        quarantine_ms: if scenario.quarantine { QUARANTINE_MS } else { 0 },
        aof: scenario.aof,
        clock: scenario.clock,
        replica_of: scenario.replica.then_some(VICTIM),
    };
    let cluster = Cluster::start(spec, seed).await;
    let setup = started.elapsed();
    let urls = cluster.urls();
    let clients = settings.clients;
    let ctx = Arc::new(Ctx::new(module, TTL, clients));
    let mut workers = Vec::new();
    for id in 0..clients + 2 {
        workers.push(Worker {
            id,
            locker: Locker::connect(!module, &urls, test_config()).await,
            ctx: ctx.clone(),
        });
    }
    let p2 = workers.pop().expect("P2");
    let p1 = workers.pop().expect("P1");
    let resources: Vec<String> = (0..settings.resources).map(|i| format!("r{i}")).collect();
    let handles: Vec<_> = workers
        .into_iter()
        .map(|w| {
            let seed = mix(seed, 100 + w.id as u64);
            tokio::spawn(w.run(resources.clone(), seed))
        })
        .collect();

    let quarantine = if scenario.quarantine && module { ms(QUARANTINE_MS) } else { Duration::ZERO };
    let bound = TTL + quarantine + SLACK;
    let mut run = Run {
        scenario,
        settings,
        cluster: &cluster,
        ctx: &ctx,
        p1: &p1,
        p2: &p2,
        bound,
        probe_count: 0,
        probes: Vec::new(),
        inconclusive: Vec::new(),
    };
    let mut rng = StdRng::seed_from_u64(seed);
    tokio::time::sleep(ms(300)).await;
    let mut next_probe = None;
    if let Some(probe) = scenario.probe {
        run.probe(probe, &mut rng).await;
        next_probe = settings.probe_every.map(|every| run.now() + every);
    }
    let until = run.now() + Duration::from_secs_f64(settings.run_seconds);
    loop {
        let gap = ms(rng.gen_range(settings.gap_ms.0..=settings.gap_ms.1));
        if run.now() + gap >= until {
            break;
        }
        tokio::time::sleep(gap).await;
        if let (Some(probe), Some(at)) = (scenario.probe, next_probe) {
            if run.now() >= at {
                run.probe(probe, &mut rng).await;
                next_probe = settings.probe_every.map(|every| run.now() + every);
                continue;
            }
        }
        let fault = scenario.faults[rng.gen_range(0..scenario.faults.len())];
        run.inject(fault, &mut rng).await;
    }
    let (probes, inconclusive) = (std::mem::take(&mut run.probes), std::mem::take(&mut run.inconclusive));
    drop(run);

    // The tail: every fault has healed; wait until every resource has been
    // granted again (or the liveness bound has passed).
    let last_heal = ctx.rec.last_heal();
    while !ctx.rec.all_granted_after(&resources, last_heal) && ctx.rec.now() < last_heal + bound + ms(200) {
        tokio::time::sleep(ms(20)).await;
    }
    ctx.stop.store(true, Ordering::SeqCst);
    for handle in handles {
        if tokio::time::timeout(Duration::from_secs(15), handle).await.is_err() {
            panic!(
                "{} ({}): a worker did not stop",
                scenario.name,
                if module { "module" } else { "classic" }
            );
        }
    }
    let run_end = ctx.rec.now();
    drop((p1, p2));
    let stopping = Instant::now();
    cluster.shut_down().await;
    let phases = format!(
        "start {:.1} s, run {:.1} s (last heal {:.1} s), shut down {:.1} s",
        setup.as_secs_f64(),
        run_end.as_secs_f64(),
        last_heal.as_secs_f64(),
        stopping.elapsed().as_secs_f64()
    );

    let ops = ctx.rec.ops();
    let events = ctx.rec.events();
    let registers = ctx.regs.snapshot();
    let violations = check(&ops, &events, &registers, &resources, run_end, bound);
    let implementation = if module { "module" } else { "classic" };
    if let Some(dir) = &settings.history_dir {
        let _ = std::fs::create_dir_all(dir);
        let path = dir.join(format!("{}-{implementation}.tsv", scenario.name));
        let _ = std::fs::write(path, ctx.rec.dump());
    } else if module && violations.total() > 0 {
        let dir = target_dir().join("jepsen");
        let _ = std::fs::create_dir_all(&dir);
        let path = dir.join(format!("{}-{implementation}-violation.tsv", scenario.name));
        let _ = std::fs::write(&path, ctx.rec.dump());
        eprintln!("history with violations written to {}", path.display());
    }
    for note in ctx.rec.notes() {
        eprintln!("{}: {note}", scenario.name);
    }
    let count = |f: &dyn Fn(&suite::history::Op) -> bool| ops.iter().filter(|op| f(op)).count();
    Report {
        scenario,
        module,
        attempts: ops.len(),
        granted: count(&|op| op.outcome == Outcome::Ok),
        unknown: count(&|op| op.outcome == Outcome::Unknown),
        writes_accepted: count(&|op| op.write == Some(Access::Accepted)),
        writes_rejected: count(&|op| {
            op.write == Some(Access::Rejected) || op.read.is_some_and(|(a, _)| a == Access::Rejected)
        }),
        stale_rejected: count(&|op| op.paused && op.write == Some(Access::Rejected)),
        faults: events.len(),
        violations,
        probes,
        inconclusive,
        elapsed: started.elapsed(),
        phases,
    }
}

fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target"))
}

fn run_all(settings: &Settings) -> Vec<Report> {
    let runtime =
        tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    runtime.block_on(async {
        let limit = Arc::new(Semaphore::new(settings.parallel));
        let settings = Arc::new(settings.clone());
        let mut jobs = Vec::new();
        for (i, scenario) in settings.scenarios.iter().enumerate() {
            let index = SCENARIOS.iter().position(|s| s.name == scenario.name).unwrap_or(i) as u64;
            for &module in &settings.impls {
                let (limit, settings, scenario) = (limit.clone(), settings.clone(), *scenario);
                jobs.push(tokio::spawn(async move {
                    let _permit = limit.acquire_owned().await.expect("semaphore");
                    let report = run_one(scenario, module, &settings, index).await;
                    eprintln!(
                        "jepsen: {} / {}: {} attempts, {} granted, {} faults, violations {} ({:.1} s: {})",
                        report.scenario.name,
                        report.implementation(),
                        report.attempts,
                        report.granted,
                        report.faults,
                        report.violations.summary(),
                        report.elapsed.as_secs_f64(),
                        report.phases
                    );
                    report
                }));
            }
        }
        let mut reports = Vec::new();
        for job in jobs {
            reports.push(job.await.expect("a run panicked"));
        }
        reports
    })
}

fn table(settings: &Settings, reports: &[Report], took: Duration) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Jepsen-style runs ({}; seed {}; {} masters, {} clients, {} resources, TTL {} ms, quarantine {} ms \
         where nodes restart or are promoted; {:.0} s of faults per run after the probe; {:.0} s in all):\n",
        settings.label,
        settings.seed,
        NODES,
        settings.clients,
        settings.resources,
        TTL.as_millis(),
        QUARANTINE_MS,
        settings.run_seconds,
        took.as_secs_f64()
    );
    let _ = writeln!(
        out,
        "| scenario | nemesis | classic Redlock: ops (granted) | faults | violations | this project: ops (granted) | faults | violations |"
    );
    let _ = writeln!(out, "|---|---|---|---|---|---|---|---|");
    for scenario in &settings.scenarios {
        let faults: Vec<&str> = scenario.faults.iter().map(|f| f.name()).collect();
        let mut row = format!("| {} | {}", scenario.name, faults.join(", "));
        if scenario.probe.is_some() {
            row.push_str(" + probe");
        }
        row.push_str(" |");
        for module in [false, true] {
            match reports.iter().find(|r| r.scenario.name == scenario.name && r.module == module) {
                Some(r) => {
                    let _ = write!(
                        row,
                        " {} ({}) | {} | {} |",
                        r.attempts,
                        r.granted,
                        r.faults,
                        r.violations.summary()
                    );
                }
                None => row.push_str(" - | - | - |"),
            }
        }
        let _ = writeln!(out, "{row}");
    }
    let _ = writeln!(
        out,
        "\nops: acquisition attempts (granted); faults: faults injected (probe steps included); violations: \
         overlapping validity windows, fencing tokens out of grant order, stale token accepted by the fenced \
         register, lost update (a write over an increment it had not read), final value != accepted increments, \
         no grant within TTL + quarantine + {} ms after a fault healed. The classic recipe has no fencing token: \
         its register cannot refuse a stale write.",
        SLACK.as_millis()
    );
    out
}

fn details(reports: &[Report]) -> String {
    let mut out = String::new();
    for r in reports {
        let _ = writeln!(
            out,
            "{} / {}: {} attempts, {} granted, {} unknown; {} increments accepted, {} refused by the register \
             ({} stale writes after a pause); liveness checked after {} heals, slowest recovery {} ms; {:.1} s",
            r.scenario.name,
            r.implementation(),
            r.attempts,
            r.granted,
            r.unknown,
            r.writes_accepted,
            r.writes_rejected,
            r.stale_rejected,
            r.violations.liveness_checked,
            r.violations.recovery_max.as_millis(),
            r.elapsed.as_secs_f64()
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

    let mut failures = Vec::new();
    for r in &reports {
        let name = format!("{} / {}", r.scenario.name, r.implementation());
        if r.granted == 0 {
            failures.push(format!("{name}: nothing was granted"));
        }
        if r.faults > 0 && r.violations.liveness_checked == 0 {
            failures.push(format!("{name}: liveness was never checked"));
        }
        if !r.inconclusive.is_empty() {
            failures.push(format!("{name}: probe inconclusive: {:?}", r.inconclusive));
        }
        if r.module && r.violations.total() > 0 {
            failures.push(format!("{name}: {} violations: {:?}", r.violations.total(), r.violations.details));
        }
        if !r.module && r.scenario.classic_must_fail && r.violations.total() == 0 {
            failures
                .push(format!("{name}: the classic recipe showed no violation where the probe arranges one"));
        }
    }
    assert!(failures.is_empty(), "seed {}:\n{}\n\n{summary}\n{more}", settings.seed, failures.join("\n"));
}

/// The CI run: every scenario for both implementations, a few seconds each.
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
