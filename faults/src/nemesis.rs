//! The nemesis of one run: the faults it injects (seeded: the same seed
//! gives the same choices of fault, node, duration and gap) and the probes,
//! each a deterministic arrangement of a known failure, with extra clients
//! P1, P2 and P3 that are not part of the workload.
//!
//! A probe is built to show a bug as a violation in the history, not to
//! pass by luck of timing: where a fault makes a node forget or expire a
//! lock early, the second client keeps trying until the first holder's
//! validity ends (a quarantine too short by any amount, or a lease too long
//! by any amount, shows as an overlap). A probe whose arrangement did not
//! come about (a client not granted where it had to be) is repeated, and
//! reported as inconclusive after 3 tries, which fails the run.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::Rng;
use tokio::sync::oneshot;

use super::cluster::Cluster;
use super::conn::{command, Reply};
use super::history::{Found, Want};
use super::onenode::{OneNode, Role};
use super::proxy::Mode;
use super::scenario::{Fault, Probe, Scenario, Workload, VICTIM};
use super::worker::{Ctx, Holding, Impl, PauseRequest, Request, Worker};

/// How far the clock probe moves the victim's wall clock: far beyond the
/// TTL, well within the module's `lock.clock-jump-tolerance-ms` (60 s).
const CLOCK_PROBE_JUMP_MS: i64 = 10_000;
/// How far the restart probe steps the victim's wall clock forward just
/// before killing it (scenarios under the clock shim): the new process
/// anchors its module clock on the stepped wall clock, so a lock restored
/// from the AOF would come back this much early without the module's
/// restart grace. Within the scenarios' `lock.clock-jump-tolerance-ms`.
const RESTART_PROBE_STEP_MS: i64 = 500;

/// The first lease of a probe whose holder extends it (see
/// `Run::extends_first`), and of the readers that walk away in the
/// expired-readers probe: short, so that it has ended when the fault
/// strikes, and long enough for the acquire and fencing rounds on a loaded
/// machine.
const FIRST_LEASE_MS: u64 = 400;
/// How much longer an extended lease lasts than its first lease and the
/// restart grace: P2's time to show a node that kept the first deadline.
const EXTENDED_MARGIN_MS: u64 = 700;
/// Where an operator's MOVE puts a lock key (an empty database; SWAPDB
/// swaps only 0 and 1).
const STRAY_MOVE_DB: &str = "9";

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn accepted(yes: bool) -> &'static str {
    if yes {
        "accepted"
    } else {
        "rejected"
    }
}

/// Everything a fault or a probe needs.
pub struct Run<'a> {
    pub scenario: &'static Scenario,
    pub imp: Impl,
    pub cluster: &'a Cluster,
    pub ctx: &'a Arc<Ctx>,
    /// The probe clients (quorum workloads).
    pub probers: [&'a Worker; 3],
    /// Workers that take pause and crash requests.
    pub workers: Vec<usize>,
    /// TTL + quarantine + lock-delay + longest hold + slack.
    pub bound: Duration,
    pub probe_count: usize,
    pub probes: Vec<String>,
    pub inconclusive: Vec<String>,
    /// Ports of the processes already reported dead.
    pub dead_seen: BTreeSet<String>,
}

impl Run<'_> {
    pub fn now(&self) -> Duration {
        self.ctx.rec.now()
    }

    fn event(&self, name: &str, detail: String, start: Duration) {
        self.ctx.rec.event(name, detail, start, self.now());
    }

    fn ttl(&self) -> Duration {
        self.ctx.ttl
    }

    /// Records every node process that died by itself since the last look.
    pub async fn check_alive(&mut self) {
        for dead in self.cluster.dead().await {
            let port = dead.split(" died").next().unwrap_or_default().to_string();
            if self.dead_seen.insert(port) {
                self.ctx.rec.found(Found::NodeDied, dead);
            }
        }
    }

    /// Puts `nodes`' proxies in `mode` for `hold`, then heals them
    /// (`reset`: cutting the connections open now).
    async fn hold_mode(&self, nodes: &[usize], mode: Mode, hold: Duration, reset: bool) {
        self.cluster.set_mode(nodes, mode);
        tokio::time::sleep(hold).await;
        self.cluster.heal(nodes, reset);
    }

    /// Whether the nodes load the module (every implementation but the
    /// classic recipe's plain Redis).
    fn module(&self) -> bool {
        self.imp != Impl::Classic
    }

    /// An operator's command on node `i` (directly, not through the proxy).
    async fn operator(&self, i: usize, words: &[&str]) -> Result<redis::Value, String> {
        self.cluster.command(i, words.iter().map(|w| w.to_string()).collect()).await
    }

    /// An evicting `maxmemory-policy` and a `maxmemory` of 1 byte on node
    /// `i`: the next write evicts every key the policy may (P1's lock key
    /// among them), and is refused. Returns the keys evicted.
    async fn evict_all(&self, i: usize, policy: &str) -> i64 {
        let before = self.evicted_keys(i).await;
        let _ = self.operator(i, &["CONFIG", "SET", "maxmemory-policy", policy]).await;
        let _ = self.operator(i, &["CONFIG", "SET", "maxmemory", "1"]).await;
        let _ = self.operator(i, &["SET", "operator:trigger", "x"]).await;
        self.evicted_keys(i).await - before
    }

    /// Lifts node `i`'s memory limit and restores `noeviction`.
    async fn memory_back(&self, i: usize) {
        let _ = self.operator(i, &["CONFIG", "SET", "maxmemory", "0"]).await;
        let _ = self.operator(i, &["CONFIG", "SET", "maxmemory-policy", "noeviction"]).await;
    }

    async fn evicted_keys(&self, i: usize) -> i64 {
        self.info_number(i, "stats", "evicted_keys").await.unwrap_or(0) as i64
    }

    /// An integer field of node `i`'s `INFO section`, if the node answers.
    async fn info_number(&self, i: usize, section: &str, name: &str) -> Option<u64> {
        let text: String = redis::from_redis_value(&self.operator(i, &["INFO", section]).await.ok()?).ok()?;
        let prefix = format!("{name}:");
        text.lines().find_map(|l| l.strip_prefix(&prefix)).and_then(|n| n.trim().parse().ok())
    }

    /// With an evicting policy in force on node `i` (and room in memory), a
    /// new grant there must be refused with EVICTION (`lock.eviction-mode
    /// refuse`); anything else is a violation.
    async fn check_eviction_guard(&self, i: usize) {
        let _ = self.operator(i, &["CONFIG", "SET", "maxmemory", "1gb"]).await;
        let key = format!("operator:guard-{}", self.probe_count);
        let reply = self.operator(i, &["LOCK.ACQUIRE", &key, "guard", "1000"]).await;
        if !matches!(&reply, Err(e) if e.starts_with("EVICTION")) {
            self.ctx.rec.found(
                Found::Guard,
                format!(
                    "node {i}: LOCK.ACQUIRE under an evicting policy answered {reply:?}, must be EVICTION"
                ),
            );
            let _ = self.operator(i, &["LOCK.REVOKE", &key]).await;
        }
    }

    /// The workload's resource keys (quorum workloads).
    fn resource_keys(&self) -> Vec<&'static str> {
        match self.scenario.workload {
            Workload::Quorum(list) => list.iter().map(|(name, _)| *name).collect(),
            Workload::OneNode => Vec::new(),
        }
    }

    pub async fn inject(&mut self, fault: Fault, rng: &mut StdRng) {
        self.check_alive().await;
        let nodes = self.cluster.proxies.len();
        let node = rng.gen_range(0..nodes);
        let hold = ms(rng.gen_range(300..1_500));
        match fault {
            Fault::HolderPause => {
                let worker = self.workers[rng.gen_range(0..self.workers.len())];
                let past_validity = ms(rng.gen_range(100..800));
                let (done, mut finished) = oneshot::channel();
                self.ctx.request(worker, Request::Pause(PauseRequest { past_validity, done }));
                // The worker records the event itself, when it pauses.
                if tokio::time::timeout(3 * self.ttl() + self.bound, &mut finished).await.is_err()
                    && !self.ctx.withdraw(worker)
                {
                    // Taken meanwhile: the pause is under way. Wait for its
                    // end (bounded: the validity left plus the pause), so
                    // that its heal is in the history before the run's tail
                    // looks for the last heal.
                    let _ = tokio::time::timeout(self.bound + self.ttl() + past_validity, finished).await;
                }
            }
            Fault::ClientCrash => {
                let worker = self.workers[rng.gen_range(0..self.workers.len())];
                let (done, mut crashed) = oneshot::channel();
                self.ctx.request(worker, Request::Crash(done));
                let mut outcome = tokio::time::timeout(3 * self.ttl() + self.bound, &mut crashed).await;
                if outcome.is_err() && !self.ctx.withdraw(worker) {
                    // Taken meanwhile: the crash is a moment away.
                    outcome = tokio::time::timeout(self.bound, crashed).await;
                }
                if let Ok(Ok(at)) = outcome {
                    self.ctx.rec.event(
                        fault.name(),
                        format!("client {worker} crashed holding its lock (never released)"),
                        at,
                        at,
                    );
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
                self.hold_mode(&[node], Mode::DropReplies { permille: 500 }, hold, false).await;
                let lost = self.cluster.proxies[node].dropped() - before;
                self.event(
                    fault.name(),
                    format!("node {node}: half its replies lost for {} ms ({lost} lost)", hold.as_millis()),
                    start,
                );
            }
            Fault::Partition => {
                let other = (node + rng.gen_range(1..nodes.max(2))) % nodes;
                let pair = [node, other];
                let (mode, reset, how) = match rng.gen_range(0..3) {
                    0 => (Mode::Down, true, "refused"),
                    1 => (Mode::Partition, false, "held, delivered late"),
                    _ => (Mode::Partition, true, "held, then reset"),
                };
                let start = self.now();
                self.hold_mode(&pair, mode, hold, reset).await;
                self.event(
                    fault.name(),
                    format!("nodes {node}, {other} cut off for {} ms ({how})", hold.as_millis()),
                    start,
                );
            }
            Fault::SlowNode => {
                let delay = rng.gen_range(100..400);
                let start = self.now();
                self.hold_mode(&[node], Mode::DelayRequests { ms: delay }, hold, false).await;
                // Requests read during the fault are still on their way.
                tokio::time::sleep(ms(delay)).await;
                self.event(
                    fault.name(),
                    format!("node {node}: requests {delay} ms late for {} ms", hold.as_millis()),
                    start,
                );
            }
            Fault::ClockForward => {
                let jump = rng.gen_range(2_000..20_000);
                let base = self.cluster.base_offset(node);
                let start = self.now();
                self.cluster.set_clock(node, base + jump).await;
                tokio::time::sleep(hold).await;
                self.cluster.set_clock(node, base).await;
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
                let to = self.cluster.base_offset(node) + rng.gen_range(-200..=200);
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
            Fault::Evict => {
                const POLICIES: [&str; 4] = ["allkeys-lru", "volatile-lru", "allkeys-random", "volatile-ttl"];
                let policy = POLICIES[rng.gen_range(0..POLICIES.len())];
                let mode = if rng.gen_bool(0.5) { "refuse" } else { "quarantine" };
                let all = rng.gen_bool(0.5);
                let start = self.now();
                if self.module() {
                    let _ = self.operator(node, &["CONFIG", "SET", "lock.eviction-mode", mode]).await;
                }
                // Filler keys with a TTL (what volatile policies evict too),
                // then a limit below the node's use: some keys go, or all.
                let fill = "for i = 1, tonumber(ARGV[1]) do redis.call('set', 'operator:fill:' .. i, \
                            string.rep('x', 200), 'PX', 600000) end return 1";
                let _ = self.operator(node, &["EVAL", fill, "0", "300"]).await;
                let evicted = if all {
                    self.evict_all(node, policy).await
                } else {
                    let before = self.evicted_keys(node).await;
                    let used = self.used_memory(node).await;
                    let _ = self.operator(node, &["CONFIG", "SET", "maxmemory-policy", policy]).await;
                    let limit = used.saturating_sub(40_000).max(1).to_string();
                    let _ = self.operator(node, &["CONFIG", "SET", "maxmemory", &limit]).await;
                    let _ = self.operator(node, &["SET", "operator:trigger", "x"]).await;
                    self.evicted_keys(node).await - before
                };
                // The workers go on meanwhile (more writes, more evictions).
                tokio::time::sleep(hold).await;
                self.memory_back(node).await;
                let _ = self
                    .operator(
                        node,
                        &[
                            "EVAL",
                            "for i = 1, 300 do redis.call('del', 'operator:fill:' .. i) end return 1",
                            "0",
                        ],
                    )
                    .await;
                if self.module() {
                    let _ = self.operator(node, &["CONFIG", "SET", "lock.eviction-mode", "refuse"]).await;
                }
                let how = if self.module() { format!(", lock.eviction-mode {mode}") } else { String::new() };
                self.event(
                    fault.name(),
                    format!(
                        "node {node}: maxmemory-policy {policy}, {} for {} ms{how}: {evicted} keys evicted",
                        if all { "maxmemory 1 (every key)" } else { "maxmemory below use" },
                        hold.as_millis()
                    ),
                    start,
                );
            }
            Fault::Flush => {
                const FLUSHES: [&[&str]; 4] =
                    [&["FLUSHALL"], &["FLUSHALL", "ASYNC"], &["FLUSHDB"], &["FLUSHDB", "ASYNC"]];
                let words = FLUSHES[rng.gen_range(0..FLUSHES.len())];
                let start = self.now();
                let _ = self.operator(node, words).await;
                self.event(fault.name(), format!("node {node}: {}", words.join(" ")), start);
            }
            Fault::SwapDb => {
                let start = self.now();
                let _ = self.operator(node, &["SWAPDB", "0", "1"]).await;
                self.event(fault.name(), format!("node {node}: SWAPDB 0 1"), start);
            }
            Fault::StrayDelete => {
                let keys = self.resource_keys();
                if keys.is_empty() {
                    return;
                }
                let key = keys[rng.gen_range(0..keys.len())];
                let start = self.now();
                let deleted = self.operator(node, &["DEL", key]).await;
                self.event(fault.name(), format!("node {node}: DEL {key} ({deleted:?})"), start);
            }
            Fault::StrayRename | Fault::StrayMove => {
                let keys = self.resource_keys();
                if keys.is_empty() {
                    return;
                }
                let key = keys[rng.gen_range(0..keys.len())];
                let renamed = format!("{key}:renamed");
                let start = self.now();
                let words = match fault {
                    Fault::StrayRename => ["RENAME", key, &renamed],
                    _ => {
                        // Room for it there: an earlier move of the key.
                        let _ = self
                            .cluster
                            .command_in(node, STRAY_MOVE_DB, vec!["DEL".into(), key.into()])
                            .await;
                        ["MOVE", key, STRAY_MOVE_DB]
                    }
                };
                let reply = self.operator(node, &words).await;
                self.event(fault.name(), format!("node {node}: {} ({reply:?})", words.join(" ")), start);
            }
            // Faults inside cluster and Sentinel members: a sharded run
            // injects them (tests/jepsen.rs); these masters have neither.
            Fault::SlotMigration
            | Fault::ShardFailover
            | Fault::ShardPause
            | Fault::RedirectCut
            | Fault::SentinelFailover => {}
        }
    }

    async fn used_memory(&self, i: usize) -> u64 {
        self.info_number(i, "memory", "used_memory").await.unwrap_or(0)
    }

    /// Runs the probe until it is conclusive (at most 3 attempts).
    pub async fn probe(&mut self, probe: Probe, rng: &mut StdRng) {
        let mut why = String::new();
        for _ in 0..3 {
            self.probe_count += 1;
            let resource = format!("probe-{}", self.probe_count);
            let result = match probe {
                Probe::HolderPause => self.probe_holder_pause(&resource, rng).await,
                Probe::Restart
                | Probe::RestartShared
                | Probe::ClockForward
                | Probe::Promotion
                | Probe::Evict
                | Probe::Flush
                | Probe::SwapDb
                | Probe::RestartRead
                | Probe::RestartPermit
                | Probe::Rename
                | Probe::Move => self.probe_bare_majority(probe, &resource, rng).await,
                Probe::ExpiredReaders => self.probe_expired_readers(&resource, rng).await,
                Probe::Fencing => self.probe_fencing(&resource).await,
                Probe::Drift | Probe::SlowReply => self.probe_lease_end(probe, &resource, rng).await,
                Probe::Ordering => self.probe_ordering(&resource, rng).await,
                Probe::RetriedExit => self.probe_retried_exit(&resource).await,
                Probe::Abandon => self.probe_abandon(&resource).await,
                Probe::NodeRestart => self.probe_node_restart().await,
                Probe::Semaphore => self.probe_semaphore(&resource).await,
                Probe::ShardPromotion | Probe::SentinelPromotion => {
                    Err("the member promotion probes run with cluster or Sentinel members only".into())
                }
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
        let [p1, p2, _] = self.probers;
        let mut h1 =
            p1.acquire_within(resource, Want::Plain, self.bound, rng).await.ok_or("P1 was not granted")?;
        let base1 = p1.read(&mut h1);
        let start = self.now();
        h1.op.paused = true;
        let h2 = p2.acquire_within(resource, Want::Plain, self.ttl() + self.bound, rng).await;
        if h2.is_none() {
            // P1's lock must run out by itself while P1 is paused.
            self.ctx.rec.found(
                Found::Liveness,
                format!("holder-pause probe: '{resource}' not granted to P2 within TTL + the liveness bound while P1 was paused"),
            );
        }
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

    /// P2 tries (every 2-8 ms) from now until `until`, on the same
    /// resource; each attempt is recorded. Returns (attempts, granted, the
    /// first attempt's start).
    async fn keep_trying(
        &self,
        p2: &Worker,
        resource: &str,
        want: Want,
        until: Duration,
        rng: &mut StdRng,
    ) -> (usize, bool, Duration) {
        let first = self.now();
        let mut attempts = 0;
        let mut granted = false;
        while self.now() < until {
            attempts += 1;
            if let Ok(mut h2) = p2.try_acquire(resource, want).await {
                granted = true;
                if let Some(base) = p2.read(&mut h2) {
                    p2.careful_write(&mut h2, base);
                }
                p2.finish(h2).await;
            }
            tokio::time::sleep(ms(rng.gen_range(2..8))).await;
        }
        (attempts, granted, first)
    }

    /// P1 holds on nodes 0-2 only (3 and 4 refuse while it acquires; a TTL
    /// up to the quarantine); node 2 forgets (restart without data, clock
    /// jump, promotion of a replica that missed the grant, an operator's
    /// eviction, flush, swap, rename or move); P2 keeps trying until P1's
    /// validity ends. Where P1 [extends](Self::extends_first), its first
    /// lease is short and the fault comes after its deadline (or, for a
    /// restart, long before the extended one): a node that kept only the
    /// first deadline then lets P2 in.
    async fn probe_bare_majority(
        &self,
        probe: Probe,
        resource: &str,
        rng: &mut StdRng,
    ) -> Result<String, String> {
        let [p1, p2, _] = self.probers;
        let cluster = self.cluster;
        let want = match probe {
            Probe::RestartShared => Want::Write,
            Probe::RestartRead => Want::Read,
            Probe::RestartPermit => Want::Permit(1),
            _ => Want::Plain,
        };
        // What P2 asks for: what excludes P1.
        let rival = if want == Want::Read { Want::Write } else { want };
        let extends = Self::extends_first(probe) && p1.locker.renews();
        if probe == Probe::Promotion {
            if !cluster.has_replica(VICTIM) {
                cluster.add_replica(VICTIM).await;
            }
            cluster.isolate_replica(VICTIM).await;
        }
        // As long as the quarantine allows: the longer P1 holds, the longer
        // P2 tries.
        let mut ttl = match self.scenario.quarantine_ms {
            0 => self.ttl(),
            q => ms(q.saturating_sub(100)).max(self.ttl()),
        };
        let first = ms(FIRST_LEASE_MS);
        if extends {
            // A restored lock is taken over a restart grace after the
            // deadline it was restored with.
            ttl = ttl.max(first + self.scenario.restart_grace() + ms(EXTENDED_MARGIN_MS));
        }
        let start = self.now();
        cluster.set_mode(&[3, 4], Mode::Down);
        // Retried: an earlier fault may still keep one of nodes 0-2 from
        // granting (a quarantine after a restart).
        let until = Instant::now() + self.bound;
        let h1 = loop {
            match p1.try_acquire_ttl(resource, want, if extends { first } else { ttl }).await {
                Ok(h1) => break Ok(h1),
                Err(why) if Instant::now() >= until => break Err(why),
                Err(_) => tokio::time::sleep(ms(rng.gen_range(20..60))).await,
            }
        };
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
        // The first lease ends on every node by then: a node's deadline is
        // its own now at the grant, before P1 heard of it, plus the TTL.
        let first_end = h1.op.complete + first;
        if extends {
            let invoke = self.now();
            match p1.locker.extend(&mut h1.held, ttl).await {
                Ok((_, deadline)) => {
                    h1.op.renewed_invoke = invoke;
                    h1.op.lease(self.now(), self.ctx.rec.at(deadline));
                }
                Err(why) => {
                    p1.finish(h1).await;
                    return Err(format!("{probe:?} probe: P1 could not extend its first lease: {why}"));
                }
            }
        }
        // P1, a careful client, writes its increment at once, then holds
        // to the end of its validity.
        if let Some(base) = p1.read(&mut h1) {
            p1.careful_write(&mut h1, base);
        }
        let start = self.now();
        let struck = self.bare_majority_fault(probe, resource, &h1, first_end, rng).await;
        let what = match struck {
            Ok(what) => what,
            Err(why) => {
                p1.finish(h1).await;
                return Err(why);
            }
        };
        let validity_end = h1.op.validity_end.unwrap_or_default();
        // P2's connections are fresh (the fault broke some): its attempts
        // reach every node.
        if !p2.reconnect().await {
            self.ctx.rec.note(format!("{probe:?} probe: P2 could not reach every node"));
        }
        let (attempts, granted, first_try) = self.keep_trying(p2, resource, rival, validity_end, rng).await;
        let mut note = format!(
            "P2 tried {attempts} times from {} ms before the end of P1's validity: {}",
            validity_end.saturating_sub(first_try).as_millis(),
            if granted { "GRANTED while P1 held" } else { "refused" }
        );
        p1.finish(h1).await;
        let restart = matches!(
            probe,
            Probe::Restart | Probe::RestartShared | Probe::RestartRead | Probe::RestartPermit
        );
        if probe == Probe::ClockForward || (restart && self.scenario.clock) {
            cluster.set_clock(VICTIM, cluster.base_offset(VICTIM)).await;
        }
        self.event(&format!("{probe:?} (probe)"), what.clone(), start);
        if probe == Probe::Promotion {
            cluster.add_replica(VICTIM).await;
        }
        // Liveness: P2 gets it once P1's lock has run out (and the
        // quarantine ended).
        if let Some(mut h2) = p2.acquire_within(resource, rival, self.bound, rng).await {
            if let Some(base) = p2.read(&mut h2) {
                p2.careful_write(&mut h2, base);
            }
            p2.finish(h2).await;
        } else {
            let _ = write!(note, "; P2 not granted within {} ms after", self.bound.as_millis());
        }
        if validity_end.saturating_sub(first_try) < ms(100) {
            return Err(format!(
                "{probe:?} probe: P2 began trying less than 100 ms before P1's validity ended ({note})"
            ));
        }
        if extends && restart && validity_end < first_end + self.scenario.restart_grace() + ms(100) {
            return Err(format!(
                "{probe:?} probe: P1's extended validity ended less than 100 ms after its first lease and the \
                 restart grace, too soon to tell them apart ({note})"
            ));
        }
        Ok(format!("{what}: {note}"))
    }

    /// Whether P1 takes a short first lease and extends it before the
    /// fault: a node must then remember the extended deadline (in its
    /// removal quarantine, in its AOF).
    fn extends_first(probe: Probe) -> bool {
        matches!(probe, Probe::RestartRead | Probe::RestartPermit | Probe::Rename | Probe::Move)
    }

    /// Makes node 2 forget P1's lock, the way `probe` says. `Err` when the
    /// fault did not take effect (the probe is then repeated).
    async fn bare_majority_fault(
        &self,
        probe: Probe,
        resource: &str,
        h1: &Holding,
        first_end: Duration,
        rng: &mut StdRng,
    ) -> Result<String, String> {
        let cluster = self.cluster;
        Ok(match probe {
            Probe::Restart | Probe::RestartShared | Probe::RestartRead | Probe::RestartPermit => {
                let step = if self.scenario.clock {
                    let to = cluster.clock_offset(VICTIM) + RESTART_PROBE_STEP_MS;
                    cluster.set_clock(VICTIM, to).await;
                    format!("its wall clock stepped {RESTART_PROBE_STEP_MS} ms forward, then ")
                } else {
                    String::new()
                };
                cluster.kill_restart(VICTIM, Duration::ZERO).await;
                let how = if cluster.has_aof(VICTIM) {
                    "from its AOF (appendfsync always)"
                } else {
                    "without persistence"
                };
                let held = match probe {
                    Probe::RestartRead => " (P1 holds a read lock it extended)",
                    Probe::RestartPermit => " (P1 holds a permit it extended)",
                    _ => "",
                };
                format!("node {VICTIM}: {step}killed (-9) and restarted at once {how}{held}")
            }
            Probe::ClockForward => {
                let base = cluster.base_offset(VICTIM);
                cluster.set_clock(VICTIM, base + CLOCK_PROBE_JUMP_MS).await;
                format!("node {VICTIM}'s wall clock jumped {CLOCK_PROBE_JUMP_MS} ms forward")
            }
            Probe::Promotion => {
                cluster.fail_over(VICTIM).await;
                format!("node {VICTIM}'s master killed; its replica, cut off before P1's grant, promoted in its place")
            }
            Probe::Evict => {
                let evicted = self.evict_all(VICTIM, "allkeys-lru").await;
                if self.module() {
                    self.check_eviction_guard(VICTIM).await;
                }
                self.memory_back(VICTIM).await;
                format!(
                    "node {VICTIM}: maxmemory-policy allkeys-lru, maxmemory 1: {evicted} keys evicted (P1's too), \
                     then the limit lifted"
                )
            }
            Probe::Flush | Probe::SwapDb => {
                const FLUSHES: [&[&str]; 3] = [&["FLUSHALL"], &["FLUSHDB"], &["FLUSHDB", "ASYNC"]];
                let words = match probe {
                    Probe::SwapDb => &["SWAPDB", "0", "1"],
                    _ => FLUSHES[rng.gen_range(0..FLUSHES.len())],
                };
                let reply = self.operator(VICTIM, words).await;
                format!("node {VICTIM}: {} ({reply:?})", words.join(" "))
            }
            Probe::Rename | Probe::Move => {
                // Once P1's first lease has ended on node 2: only its
                // extension holds the key there now.
                tokio::time::sleep_until((self.ctx.rec.t0 + first_end + ms(50)).into()).await;
                if self.module()
                    && cluster.holder(VICTIM, resource).await.as_deref() != Some(h1.held.token.as_str())
                {
                    return Err(format!("{probe:?} probe: node {VICTIM} did not hold P1's extended lock"));
                }
                let renamed = format!("{resource}:renamed");
                let (words, done): (Vec<&str>, redis::Value) = match probe {
                    Probe::Rename => (vec!["RENAME", resource, &renamed], redis::Value::Okay),
                    _ => (vec!["MOVE", resource, STRAY_MOVE_DB], redis::Value::Int(1)),
                };
                let reply = self.operator(VICTIM, &words).await;
                if reply.as_ref() != Ok(&done) {
                    return Err(format!(
                        "{probe:?} probe: {} on node {VICTIM} answered {reply:?}",
                        words.join(" ")
                    ));
                }
                format!(
                    "node {VICTIM}: {} after P1's first lease ({} ms) ended and its extension held",
                    words.join(" "),
                    FIRST_LEASE_MS
                )
            }
            _ => unreachable!(),
        })
    }

    /// P1 and P3 each take a read lock with a short TTL and walk away
    /// (crashed clients: never released). Once both ran out, P2 takes the
    /// write lock, granted over the expired readers still stored (checked:
    /// the key is still there on a majority), and holds it to the end of
    /// its validity while P1 keeps trying to read: a node that wrote the
    /// writer into the readers' lock and kept its mode would let P1 in.
    async fn probe_expired_readers(&self, resource: &str, rng: &mut StdRng) -> Result<String, String> {
        let [p1, p2, p3] = self.probers;
        let start = self.now();
        let short = ms(FIRST_LEASE_MS);
        let mut ends = Duration::ZERO;
        for p in [p1, p3] {
            let until = Instant::now() + self.bound;
            let h = loop {
                match p.try_acquire_ttl(resource, Want::Read, short).await {
                    Ok(h) => break h,
                    Err(why) if Instant::now() >= until => {
                        return Err(format!("expired-readers probe: a reader was not granted: {why}"))
                    }
                    Err(_) => tokio::time::sleep(ms(rng.gen_range(20..60))).await,
                }
            };
            // Every node's deadline is before the reader heard of its grant
            // plus the TTL (and the lock-delay keeps its slot after it).
            ends = ends.max(h.op.complete + short);
            p.abandon(h);
        }
        let delay = self.scenario.lock_delay().unwrap_or_default();
        tokio::time::sleep_until((self.ctx.rec.t0 + ends + delay + ms(50)).into()).await;
        let mut stored = 0;
        for i in 0..self.cluster.proxies.len() {
            if self.operator(i, &["EXISTS", resource]).await == Ok(redis::Value::Int(1)) {
                stored += 1;
            }
        }
        let majority = self.cluster.proxies.len() / 2 + 1;
        if stored < majority {
            return Err(format!(
                "expired-readers probe: the expired readers' lock was stored on {stored} nodes only"
            ));
        }
        let h2 = p2.acquire_within(resource, Want::Write, self.bound, rng).await;
        let mut h2 = h2.ok_or("expired-readers probe: P2 was not granted the write lock")?;
        if let Some(base) = p2.read(&mut h2) {
            p2.careful_write(&mut h2, base);
        }
        let validity_end = h2.op.validity_end.unwrap_or_default();
        let (attempts, granted, first_try) =
            self.keep_trying(p1, resource, Want::Read, validity_end, rng).await;
        p2.finish(h2).await;
        let note = format!(
            "readers P1 and P3 walked away; P2 wrote over them on {stored} nodes still storing them; P1 tried to \
             read {attempts} times in the last {} ms of P2's validity: {}",
            validity_end.saturating_sub(first_try).as_millis(),
            if granted { "GRANTED beside the writer" } else { "refused" }
        );
        self.event("expired readers (probe)", note.clone(), start);
        if validity_end.saturating_sub(first_try) < ms(100) {
            return Err(format!("expired-readers probe: P1 began trying too late ({note})"));
        }
        Ok(note)
    }

    /// Tries `want` on `resource` with `down` refusing connections, until
    /// granted or `within` passed.
    async fn acquire_with_down(
        &self,
        p: &Worker,
        resource: &str,
        want: Want,
        ttl: Duration,
        down: &[usize],
        within: Duration,
    ) -> Result<Holding, String> {
        self.cluster.set_mode(down, Mode::Down);
        let until = Instant::now() + within;
        let result = loop {
            match p.try_acquire_ttl(resource, want, ttl).await {
                Ok(h) => break Ok(h),
                Err(why) if Instant::now() >= until => break Err(why),
                Err(_) => tokio::time::sleep(ms(30)).await,
            }
        };
        self.cluster.heal(down, true);
        result
    }

    /// Node clocks are seconds apart (node 4 fastest) and the workload is
    /// held off (so that nothing else raises the nodes' counters meanwhile).
    /// P1 takes the lock on nodes 2-4: its quorum token T comes from node
    /// 4's clock, and the fencing round raises nodes 2 and 3 to T. P1's lock
    /// runs out (the nodes' backstop expiry deletes the key, so nothing
    /// reads T back from it), and P2 takes the lock on nodes 0-2, whose
    /// clocks are behind T: only node 2's raised counter gives P2 a token
    /// above T. Then the same again, with node 2 restarted from its AOF
    /// before P2 asks: its counter must come back from the FENCE kept there.
    async fn probe_fencing(&self, resource: &str) -> Result<String, String> {
        let [p1, p2, _] = self.probers;
        let start = self.now();
        self.ctx.hold_off(self.bound).await;
        let mut notes = Vec::new();
        let mut result = Ok(());
        for restart in [false, true] {
            let resource = format!("{resource}{}", if restart { "-aof" } else { "" });
            match self.fencing_step(p1, p2, &resource, restart).await {
                Ok(note) => notes.push(note),
                Err(why) => {
                    result = Err(why);
                    break;
                }
            }
        }
        self.ctx.resume();
        self.event("fencing (probe)", notes.join("; "), start);
        result.map(|()| notes.join("; "))
    }

    async fn fencing_step(
        &self,
        p1: &Worker,
        p2: &Worker,
        resource: &str,
        restart: bool,
    ) -> Result<String, String> {
        let ttl = ms(400);
        let h1 = self.acquire_with_down(p1, resource, Want::Plain, ttl, &[0, 1], self.bound).await;
        let h1 = h1.map_err(|why| format!("fencing probe: P1 not granted on nodes 2-4: {why}"))?;
        let (p1_at, t1) = (h1.op.complete, h1.held.fence);
        // Ran out on every node, and the key is gone: a node's deadline is
        // at most the grant's completion + TTL, and a tolerance of 0 puts
        // the backstop expiry there.
        let gone = self.ctx.rec.t0 + p1_at + ttl + ms(150);
        p1.abandon(h1);
        tokio::time::sleep_until(gone.into()).await;
        if restart {
            self.cluster.kill_restart(VICTIM, Duration::ZERO).await;
        }
        let h2 = self.acquire_with_down(p2, resource, Want::Plain, self.ttl(), &[3, 4], self.bound).await;
        let h2 = h2.map_err(|why| format!("fencing probe: P2 not granted on nodes 0-2: {why}"))?;
        let (p2_at, t2) = (h2.op.complete, h2.held.fence);
        p2.finish(h2).await;
        // P2 must come before node 2's own clock reaches node 4's at P1's
        // grant: later, the clock alone would give a higher token.
        let gap =
            ms(u64::try_from(self.cluster.base_offset(4) - self.cluster.base_offset(VICTIM)).unwrap_or(0));
        if p2_at.saturating_sub(p1_at) + ms(300) > gap {
            return Err(format!(
                "fencing probe: P2 granted {} ms after P1, too late to tell (node clocks {} ms apart)",
                p2_at.saturating_sub(p1_at).as_millis(),
                gap.as_millis()
            ));
        }
        let how = if restart { format!(", node {VICTIM} restarted from its AOF") } else { String::new() };
        Ok(format!("P1 on nodes 2-4: {t1:?}, ran out{how}; P2 on nodes 0-2: {t2:?}"))
    }

    /// P1 holds to the very end of its validity; P2 tries through its last
    /// 150 ms. Drift: the nodes' clocks run fast, so their locks expire a
    /// little early (within the drift budget). SlowReply: three nodes'
    /// replies come 150 ms late, so P1's round is long (the lease counts
    /// from its start).
    async fn probe_lease_end(
        &self,
        probe: Probe,
        resource: &str,
        rng: &mut StdRng,
    ) -> Result<String, String> {
        let [p1, p2, _] = self.probers;
        let slow = [0, 1, 2];
        let start = self.now();
        if probe == Probe::SlowReply {
            self.cluster.set_mode(&slow, Mode::DelayReplies { ms: 150 });
        }
        let h1 = p1.acquire_within(resource, Want::Plain, self.bound, rng).await;
        if probe == Probe::SlowReply {
            self.cluster.heal(&slow, false);
        }
        let mut h1 = h1.ok_or_else(|| format!("{probe:?} probe: P1 not granted"))?;
        let round = h1.op.complete.saturating_sub(h1.op.invoke);
        if let Some(base) = p1.read(&mut h1) {
            p1.careful_write(&mut h1, base);
        }
        let validity_end = h1.op.validity_end.unwrap_or_default();
        tokio::time::sleep(validity_end.saturating_sub(self.now()).saturating_sub(ms(150))).await;
        let (attempts, granted, first) = self.keep_trying(p2, resource, Want::Plain, validity_end, rng).await;
        p1.finish(h1).await;
        let what = match probe {
            Probe::Drift => format!("nodes' clocks {} ppm fast", self.scenario.rate_ppm),
            _ => format!("nodes 0-2 replied 150 ms late; P1's round took {} ms", round.as_millis()),
        };
        self.event(&format!("{probe:?} (probe)"), what.clone(), start);
        if probe == Probe::SlowReply && round < ms(140) {
            return Err(format!("slow-reply probe: P1's round took only {} ms", round.as_millis()));
        }
        if validity_end.saturating_sub(first) < ms(40) {
            return Err(format!(
                "{probe:?} probe: P2 began trying only {} ms before P1's validity ended",
                validity_end.saturating_sub(first).as_millis()
            ));
        }
        Ok(format!(
            "{what}; P2 tried {attempts} times in the last {} ms of P1's validity: {}",
            validity_end.saturating_sub(first).as_millis(),
            if granted { "GRANTED while P1 held" } else { "refused" }
        ))
    }

    /// Node 4's acquires are held 400 ms in its proxy. P1 acquires (the
    /// round returns with nodes 0-3; the ACQUIRE to node 4 is still in the
    /// proxy), the delay is lifted, P1 releases at once and waits for its
    /// background calls: the RELEASE to node 4 must land after the ACQUIRE
    /// (one ordered connection per node), so node 4 ends free.
    async fn probe_ordering(&self, resource: &str, rng: &mut StdRng) -> Result<String, String> {
        let [p1, _, _] = self.probers;
        let delay = 400;
        let start = self.now();
        let delayed_before = self.cluster.proxies[4].delayed();
        self.cluster.set_mode(&[4], Mode::DelayAcquires { ms: delay });
        let sent = Instant::now();
        let h1 = p1.acquire_within(resource, Want::Plain, self.bound, rng).await;
        self.cluster.heal(&[4], false);
        // The probe proves nothing unless node 4's ACQUIRE was held back
        // (the proxy once matched the command's letter case only).
        let held_back = self.cluster.proxies[4].delayed() > delayed_before;
        let h1 = h1.ok_or("ordering probe: P1 not granted")?;
        if !held_back {
            p1.finish(h1).await;
            return Err("ordering probe: node 4's ACQUIRE was not held back by its proxy".into());
        }
        if h1.op.complete.saturating_sub(h1.op.invoke) > ms(delay / 2) {
            p1.finish(h1).await;
            return Err("ordering probe: P1's round waited for node 4".into());
        }
        let token = h1.held.token.clone();
        p1.finish(h1).await;
        p1.locker.settle().await;
        tokio::time::sleep_until((sent + ms(delay + 300)).into()).await;
        let holder = self.cluster.holder(4, resource).await;
        let left = holder.as_deref() == Some(token.as_str());
        if left {
            self.ctx.rec.found(
                Found::LeftBehind,
                format!("node 4 still holds '{resource}' for P1 after its release settled (the release overtook the acquire)"),
            );
        }
        self.event(
            "ordering (probe)",
            format!("node 4's requests {delay} ms late while P1 acquired and released"),
            start,
        );
        Ok(format!("node 4 after P1's release: {}", if left { "STILL LOCKED by P1" } else { "free" }))
    }

    fn one_node(&self, id: usize) -> OneNode {
        OneNode::new(id, Role::Reentrant, &self.cluster.urls()[0], self.ctx.clone())
    }

    /// One node: P enters twice; the reply to its first `EXIT ... ID` is
    /// lost, so P sends it again with the same id; P then holds one entry
    /// for another 300 ms while Q tries to enter every 10 ms.
    async fn probe_retried_exit(&self, resource: &str) -> Result<String, String> {
        let (mut p, mut q) = (self.one_node(900), self.one_node(901));
        let ttl = (self.ttl().as_millis() as u64).to_string();
        let start = self.now();
        let mut s = p
            .grant(resource, Want::Reentrant, false)
            .await
            .map_err(|()| "retried-exit probe: P not granted".to_string())?;
        let invoke = self.now();
        let again = p.conn.call(&command(&["LOCK.ENTER", resource, &s.owner, &ttl]), ms(300)).await;
        if again != Reply::Int(s.op.fence.unwrap_or_default() as i64) {
            p.release(s).await;
            return Err(format!("retried-exit probe: P's second entry answered {again:?}"));
        }
        s.op.renewed_invoke = invoke;
        s.op.lease(self.now(), invoke + self.ttl());
        let exit = command(&["LOCK.EXIT", resource, &s.owner, "ID", "probe-exit-1"]);
        self.cluster.set_mode(&[0], Mode::DropReplies { permille: 1000 });
        let first = p.conn.call(&exit, ms(300)).await;
        self.cluster.heal(&[0], false);
        let retry = p.conn.call_until_answered(&exit, ms(300), 20).await;
        // P counts its own holds: one left. Q tries meanwhile.
        let until = self.now() + ms(300);
        let mut q_granted = 0;
        while self.now() < until {
            if let Ok(qs) = q.grant(resource, Want::Reentrant, false).await {
                q_granted += 1;
                let owner = qs.owner.clone();
                let _ = q.conn.call(&command(&["LOCK.EXIT", resource, &owner]), ms(300)).await;
                let mut qs = qs;
                qs.op.release = Some(self.now());
                self.ctx.rec.op(qs.op);
            }
            tokio::time::sleep(ms(10)).await;
        }
        s.op.release = Some(self.now());
        let last = command(&["LOCK.EXIT", resource, &s.owner, "ID", "probe-exit-2"]);
        let _ = p.conn.call_until_answered(&last, ms(300), 20).await;
        self.ctx.rec.op(s.op);
        self.event("retried exit (probe)", format!("P's first EXIT reply lost ({first:?}), sent again: {retry:?}; Q granted {q_granted} times while P held"), start);
        if first != Reply::Lost {
            return Err(format!("retried-exit probe: the first EXIT's reply was not lost ({first:?})"));
        }
        Ok(format!("retried EXIT answered {retry:?}; Q granted {q_granted} times while P held one entry"))
    }

    /// One node: P takes a plain lock and crashes; Q waits for it (`WAIT`).
    /// Q must be granted, but not before P's deadline plus the lock-delay.
    async fn probe_abandon(&self, resource: &str) -> Result<String, String> {
        let (mut p, mut q) = (self.one_node(902), self.one_node(903));
        let start = self.now();
        let s = p
            .grant(resource, Want::Plain, false)
            .await
            .map_err(|()| "abandon probe: P not granted".to_string())?;
        let mut abandoned = s.op;
        abandoned.abandoned = true;
        let free_at = abandoned.renewed_invoke + self.ttl() + self.scenario.lock_delay().unwrap_or_default();
        self.ctx.rec.op(abandoned);
        let wait = self.ttl() + self.scenario.lock_delay().unwrap_or_default() + ms(1_500);
        let owner = format!("q-{resource}");
        let ttl = (self.ttl().as_millis() as u64).to_string();
        let wait_ms = (wait.as_millis() as u64).to_string();
        let invoke = self.now();
        let reply = q
            .conn
            .call(&command(&["LOCK.ACQUIRE", resource, &owner, &ttl, "WAIT", &wait_ms]), wait + ms(300))
            .await;
        let at = self.now();
        let note = match reply {
            Reply::Int(fence) if fence > 0 => {
                let mut op = super::history::Op::new(903, resource, Want::Plain, invoke);
                op.complete = at;
                op.token = Some(owner.clone());
                op.fence = Some(fence as u64);
                op.lease(at, invoke + self.ttl());
                op.release = Some(self.now());
                let _ = q.conn.call(&command(&["LOCK.RELEASE", resource, &owner]), ms(300)).await;
                self.ctx.rec.op(op);
                format!(
                    "Q granted {} ms after P's lock could free",
                    at.as_millis() as i64 - free_at.as_millis() as i64
                )
            }
            other => {
                self.ctx.rec.found(
                    Found::Liveness,
                    format!("abandon probe: '{resource}' not granted to a waiter within {} ms of P's crash: {other:?}", wait.as_millis()),
                );
                format!("Q NOT granted: {other:?}")
            }
        };
        self.event("abandon (probe)", format!("P crashed holding '{resource}'; {note}"), start);
        Ok(note)
    }

    /// One node, restarted without persistence under the workload: it
    /// forgets every lock and its counter, refuses grants for the
    /// quarantine, then grants again with tokens above all before.
    async fn probe_node_restart(&self) -> Result<String, String> {
        tokio::time::sleep(ms(200)).await;
        let start = self.now();
        self.cluster.kill_restart(0, Duration::ZERO).await;
        self.event("restart (probe)", "node 0 killed (-9) and restarted without persistence".into(), start);
        tokio::time::sleep(ms(self.scenario.quarantine_ms) + ms(300)).await;
        Ok("node 0 restarted without persistence under the workload".into())
    }

    /// A semaphore of 2 permits; P1 asks with nodes 3, 4 down, P2 with 0, 1
    /// down, P3 with 2, 4 down: each node then has at most 2 holders, so a
    /// client that counts a plain majority holds with all three at once.
    /// Taken at floor(L*N/(L+1))+1 = 4 nodes, none is granted.
    async fn probe_semaphore(&self, resource: &str) -> Result<String, String> {
        let want = Want::Permit(2);
        let ttl = self.ttl();
        let start = self.now();
        let mut held = Vec::new();
        let mut results = Vec::new();
        for (p, down) in self.probers.iter().zip([[3, 4], [0, 1], [2, 4]]) {
            match self.acquire_with_down(p, resource, want, ttl, &down, ms(300)).await {
                Ok(h) => {
                    results.push(format!("without {down:?}: granted"));
                    held.push((p, h));
                }
                Err(_) => results.push(format!("without {down:?}: refused")),
            }
        }
        // The holders keep their permits to the end of their validity.
        let end = held.iter().map(|(_, h)| h.held.deadline).max();
        if let Some(end) = end {
            tokio::time::sleep_until(end.into()).await;
        }
        let granted = held.len();
        for (p, h) in held {
            p.finish(h).await;
        }
        self.event(
            "semaphore (probe)",
            format!("three clients on three different node triples: {}", results.join(", ")),
            start,
        );
        if self.imp == Impl::MajoritySemaphore && granted < 3 {
            return Err(format!("semaphore probe: only {granted} of 3 granted at a majority"));
        }
        Ok(format!("{granted} of 3 clients granted a permit of 2 ({})", results.join(", ")))
    }
}
