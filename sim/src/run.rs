//! One simulated history from one seed: N nodes running the lock core,
//! clients running the real quorum client over the simulated network, a
//! schedule of faults drawn from the seed, then the checker.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use redlock_client::{Config, Mode, Redlock, RetryPolicy};
use tokio::time::Instant;

use crate::bad_input;
use crate::forget::{self, Loss};
use crate::history::{History, Hold};
use crate::link;
use crate::net::{self, MessageFaults, Shared, World};
use crate::node::{Follower, Node, Persistence, Rules};
use crate::reentrant;
use crate::resp::Reply;
use crate::sets;
use crate::stored;
use crate::waiters;
use crate::{cluster, cluster_faults, verdict};
use redlock_client::Watchdog;

/// The resource every client contends for.
const RESOURCE: &str = "res";
/// The longest TTL a client asks for (the nodes' quarantine covers it).
const TTL_MAX_MS: u64 = 600;
/// A crash before this (ms) is early: the clients spread their cycles to
/// take the lock again after its quarantine.
const EARLY_CRASH_MS: u64 = 300;

/// What a run simulates: the lock service and the faults it may see.
#[derive(Clone, Copy, Debug)]
pub struct Setup {
    pub rules: Rules,
    pub nodes: usize,
    pub clients: usize,
    /// Lock cycles per client.
    pub cycles: usize,
    /// Crashes and restarts, with what persistence (drawn per node).
    pub crashes: usize,
    pub persistence: Option<Persistence>,
    /// Partitions of one client from one node.
    pub partitions: usize,
    /// Wall-clock steps of one node, each up to `step_max_ms` either way.
    pub clock_steps: usize,
    pub step_max_ms: i64,
    pub messages: MessageFaults,
    /// Each node's clocks run up to this many thousandths fast or slow
    /// (the client budgets 1%).
    pub drift_per_mille: i64,
    /// Each node's clocks start up to this far off true time, either way
    /// (the nodes' clocks disagree by up to twice this).
    pub clock_offset_max_ms: i64,
    /// Per mille of histories whose clock step comes to the node that
    /// crashes, just before its crash, with an `always` AOF: a restart that
    /// keeps its locks and takes in the step.
    pub step_before_crash_per_mille: u32,
    /// Per mille of histories whose `always` AOFs are rewritten during each
    /// process's life: the restart replays no `LOCK.FENCE` raise from
    /// before the rewrite, only the node's ledger (the kept counter, the
    /// removal quarantines and a quarantine in force); the previous
    /// release's AOF (an upgrade) has neither. Their clocks are as far
    /// apart as any history's (`clock_offset_max_ms` either way): one node
    /// ahead, the others, the restarting one among them, behind.
    pub aof_rewrite_per_mille: u32,
    /// Per mille of holds that pause (a GC pause) between their check and
    /// their write, for up to twice the TTL.
    pub pause_per_mille: u32,
    /// Per mille of holds that work up to three TTLs, kept alive by
    /// extensions by hand or by the watchdog (half each).
    pub keep_alive_per_mille: u32,
    /// The nodes' lock-delay (`lock.expiry-delay-ms`), drawn per history:
    /// up to this in a quarter of them, none in the others (a lock-delay
    /// is a margin that hides a lease too long).
    pub lock_delay_max_ms: i64,
    /// Per mille of histories whose resource is a read-write lock (each
    /// hold a reader or the writer), and as many whose resource is a
    /// semaphore of 2 permits with a third client; the others take plain
    /// locks.
    pub family_per_mille: u32,
    /// Per mille of histories with a misusing client: at times of its
    /// own, it calls `LOCK.EXTEND` on the contended lock with a token that
    /// holds nothing, and `LOCK.EXIT` on a reentrant lock it entered under
    /// another owner id, directly on a node. A node that answers that it
    /// extended or exited is a violation ("misuse accepted"); then
    /// malformed calls (`bad_input.rs`), each of which must get an error
    /// and change nothing ("bad input accepted").
    pub misuse_per_mille: u32,
    /// Per mille of histories in which nodes lose the lock key behind the
    /// module's back (an eviction, a `DEL`, `FLUSHDB`, `FLUSHALL`), and
    /// how many times (each of one node or of a majority at once).
    pub loss_per_mille: u32,
    pub losses: usize,
    /// Per mille of histories with a rolling upgrade of the module: each
    /// node restarts in turn on the new release over what the previous one
    /// stored (shared locks and semaphores in its string form), with the
    /// persistence it crashes with, or an `always` AOF.
    pub upgrade_per_mille: u32,
    /// Per mille of the lock cycles of a plain lock's history that take a
    /// set (`sets.rs`: two or three resources, the contended one among
    /// them or not, all or nothing, with `Redlock::acquire_many`).
    pub set_per_mille: u32,
    /// Per mille of histories with two reentrant clients on one node
    /// (`reentrant.rs`: `LOCK.ENTER` twice, `LOCK.EXIT ... ID` sent again
    /// until answered).
    pub reentrant_per_mille: u32,
    /// Per mille of histories with three clients that wait on one node
    /// (`waiters.rs`: `LOCK.ACQUIRE ... WAIT`, served by the node's
    /// hand-off).
    pub wait_per_mille: u32,
    /// Per mille of histories in which one or two quorum members are
    /// Redis Clusters (`cluster.rs`), with their resharding, failovers and
    /// stale maps; each client then takes the lock once more at the end,
    /// as it is, and every member must answer.
    pub cluster_per_mille: u32,
    /// Per mille of histories in which a plain member's master dies and
    /// Sentinel promotes its replica, some writes behind, in its place
    /// (the member's address reaches the promoted replica, which
    /// quarantines).
    pub sentinel_per_mille: u32,
}

/// The kind of lock a history's clients take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Family {
    Plain,
    ReadWrite,
    Semaphore,
}

/// Until when an operator checks the client's `status()` (every fault is
/// over by then, or nearly).
const STATUS_UNTIL_MS: u64 = 3000;

/// The semaphore's permits.
const PERMITS: u32 = 2;

impl Family {
    /// The mode of one hold (a read-write lock's drawn by `write`).
    fn mode(self, write: bool) -> Mode {
        match self {
            Family::Plain => Mode::Plain,
            Family::ReadWrite if write => Mode::Write,
            Family::ReadWrite => Mode::Read,
            Family::Semaphore => Mode::Permit { permits: PERMITS },
        }
    }
}

impl Setup {
    /// The module under every fault the simulator has.
    pub fn module() -> Setup {
        Setup {
            rules: Rules::Module,
            nodes: 3,
            clients: 2,
            cycles: 4,
            crashes: 1,
            persistence: None,
            partitions: 1,
            clock_steps: 1,
            step_max_ms: crate::node::CLOCK_TOLERANCE_MS,
            messages: MessageFaults {
                delay_per_mille: 100,
                delay_max_ms: 80,
                request_lost_per_mille: 10,
                reply_lost_per_mille: 10,
            },
            pause_per_mille: 150,
            drift_per_mille: 8,
            keep_alive_per_mille: 300,
            lock_delay_max_ms: 300,
            clock_offset_max_ms: 250,
            step_before_crash_per_mille: 250,
            aof_rewrite_per_mille: 500,
            family_per_mille: 400,
            misuse_per_mille: 250,
            loss_per_mille: 500,
            losses: 2,
            upgrade_per_mille: 250,
            set_per_mille: 250,
            reentrant_per_mille: 100,
            wait_per_mille: 100,
            cluster_per_mille: 200,
            sentinel_per_mille: 100,
        }
    }

    /// The classic recipe (SET NX PX, no quarantine, no fencing) under the
    /// same faults.
    pub fn classic() -> Setup {
        Setup {
            rules: Rules::Classic,
            lock_delay_max_ms: 0,
            family_per_mille: 0,
            misuse_per_mille: 0,
            set_per_mille: 0,
            reentrant_per_mille: 0,
            wait_per_mille: 0,
            cluster_per_mille: 0,
            ..Setup::module()
        }
    }

    /// Kleppmann's scenarios, one fault each, for `rules`: a holder paused
    /// past its TTL (a GC pause), ...
    pub fn gc_pause(rules: Rules) -> Setup {
        Setup { rules, crashes: 0, partitions: 0, clock_steps: 0, pause_per_mille: 500, ..quiet() }
    }

    /// ... a node's wall clock jumping forward (by up to twice the TTL),
    /// ...
    pub fn clock_jump(rules: Rules) -> Setup {
        Setup {
            rules,
            crashes: 0,
            partitions: 0,
            clock_steps: 2,
            step_max_ms: 2 * TTL_MAX_MS as i64,
            ..quiet()
        }
    }

    /// The module under every fault at once, with a rolling upgrade in
    /// every history (key losses and AOF rewrites among them, as in
    /// [`Setup::module`]'s quarter of histories with one).
    pub fn upgrade() -> Setup {
        Setup { upgrade_per_mille: 1000, ..Setup::module() }
    }

    /// ... a node restarting without fsync.
    pub fn restart(rules: Rules) -> Setup {
        Setup {
            rules,
            crashes: 2,
            persistence: Some(Persistence::None),
            partitions: 0,
            clock_steps: 0,
            ..quiet()
        }
    }
}

/// No fault at all (the scenarios add theirs).
fn quiet() -> Setup {
    Setup {
        crashes: 0,
        partitions: 0,
        clock_steps: 0,
        pause_per_mille: 0,
        drift_per_mille: 0,
        keep_alive_per_mille: 0,
        lock_delay_max_ms: 0,
        clock_offset_max_ms: 0,
        step_before_crash_per_mille: 0,
        aof_rewrite_per_mille: 0,
        family_per_mille: 0,
        misuse_per_mille: 0,
        loss_per_mille: 0,
        upgrade_per_mille: 0,
        set_per_mille: 0,
        reentrant_per_mille: 0,
        wait_per_mille: 0,
        cluster_per_mille: 0,
        sentinel_per_mille: 0,
        messages: MessageFaults {
            delay_per_mille: 0,
            delay_max_ms: 1,
            request_lost_per_mille: 0,
            reply_lost_per_mille: 0,
        },
        ..Setup::module()
    }
}

/// A fault at a time of the schedule (`Failover`: the node's master dies;
/// `detect_ms` later Sentinel promotes its replica, `lag_ms` of writes
/// behind, at its address).
#[derive(Clone, Debug)]
pub enum Fault {
    Crash { node: usize, down_ms: u64, persistence: Persistence },
    Partition { client: usize, node: usize, for_ms: u64 },
    ClockStep { node: usize, step_ms: i64 },
    Lose { node: usize, loss: Loss },
    Upgrade { node: usize, down_ms: u64, persistence: Persistence },
    Failover { node: usize, detect_ms: u64, lag_ms: i64 },
}

/// Faults at their times (ms from the start), in order.
pub type Schedule = Vec<(u64, Fault)>;

/// The schedule drawn from a seed (shrinking removes entries).
pub fn schedule(seed: u64, setup: &Setup) -> Schedule {
    let mut rng = StdRng::seed_from_u64(seed ^ 0x5eed_fa17);
    let mut faults = Vec::new();
    let mut crashes = Vec::new();
    for _ in 0..setup.crashes {
        let persistence = setup.persistence.unwrap_or(match rng.gen_range(0..3) {
            0 => Persistence::None,
            1 => Persistence::EverySec,
            _ => Persistence::Always,
        });
        // A quarter of the crashes come early, so that the clients still
        // take the lock once the restart's quarantine is over.
        let latest = if rng.gen_range(0..4) == 0 { EARLY_CRASH_MS } else { 1500 };
        let (at, node): (u64, usize) = (rng.gen_range(0..latest), rng.gen_range(0..setup.nodes));
        crashes.push((at, node));
        faults.push((at, Fault::Crash { node, down_ms: rng.gen_range(1..400), persistence }));
    }
    for _ in 0..setup.partitions {
        let fault = Fault::Partition {
            client: rng.gen_range(0..setup.clients),
            node: rng.gen_range(0..setup.nodes),
            for_ms: rng.gen_range(1..500),
        };
        faults.push((rng.gen_range(0..1500), fault));
    }
    for _ in 0..setup.clock_steps {
        let step_ms = rng.gen_range(-setup.step_max_ms..=setup.step_max_ms);
        let tied = rng.gen_range(0..1000) < setup.step_before_crash_per_mille;
        let (at, node) = match crashes.first() {
            // The crashing node's clock steps, then it crashes and restarts
            // from an `always` AOF: its locks come back with the step taken
            // in (the restart grace's case), its counter with only the clock
            // floor (the fencing counter's case).
            Some(&(crash_at, node)) if tied => {
                if let (None, Some((_, Fault::Crash { persistence, .. }))) = (
                    setup.persistence,
                    faults.iter_mut().find(|(at, f)| *at == crash_at && matches!(f, Fault::Crash { .. })),
                ) {
                    *persistence = Persistence::Always;
                }
                (crash_at.saturating_sub(rng.gen_range(0..100)), node)
            }
            _ => (rng.gen_range(0..1500), rng.gen_range(0..setup.nodes)),
        };
        // A node that restarts from an `always` AOF has no quarantine: its
        // clock must not step back across the restart (assumption 1), so
        // its steps go forward.
        let always = |f: &Fault| matches!(f, Fault::Crash { node: n, persistence: Persistence::Always, .. } if *n == node);
        let step_ms = if faults.iter().any(|(_, f)| always(f)) { step_ms.abs() } else { step_ms };
        faults.push((at, Fault::ClockStep { node, step_ms }));
    }
    let losses = forget::draw(seed, setup.nodes, setup.losses, setup.loss_per_mille);
    for (at, node, down_ms) in stored::draw_upgrade(seed, setup.nodes, setup.upgrade_per_mille) {
        // The persistence the node crashes with, if it does; else an
        // `always` AOF, whose restart keeps the locks (its clock steps
        // forward only: it has no quarantine, assumption 1).
        let crash = faults.iter().find_map(|(_, f)| match f {
            Fault::Crash { node: n, persistence, .. } if *n == node => Some(*persistence),
            _ => None,
        });
        let persistence = crash.unwrap_or(Persistence::Always);
        if persistence == Persistence::Always {
            for (_, f) in faults.iter_mut() {
                if let Fault::ClockStep { node: n, step_ms } = f {
                    if *n == node {
                        *step_ms = step_ms.abs();
                    }
                }
            }
        }
        faults.push((at, Fault::Upgrade { node, down_ms, persistence }));
    }
    faults.extend(losses.into_iter().map(|(at, node, loss)| (at, Fault::Lose { node, loss })));
    // A plain member's failover, from a generator of its own (the other
    // draws stay as they were).
    let mut sentinel = StdRng::seed_from_u64(seed ^ 0x5e47_1e15);
    if setup.nodes > 0 && sentinel.gen_range(0..1000) < setup.sentinel_per_mille {
        let failover = Fault::Failover {
            node: sentinel.gen_range(0..setup.nodes),
            detect_ms: sentinel.gen_range(20..200),
            lag_ms: sentinel.gen_range(0..300),
        };
        faults.push((sentinel.gen_range(0..1500), failover));
    }
    faults.sort_by_key(|(at, _)| *at);
    faults
}

/// What one run found.
pub struct Outcome {
    pub history: String,
    pub violations: Vec<String>,
}

/// Runs the history of `seed` under `faults`.
pub fn run(seed: u64, setup: &Setup, faults: &[(u64, Fault)]) -> Outcome {
    run_recorded(seed, setup, faults, true)
}

/// Whether the history of `seed` fails, without keeping its lines (the
/// same history as [`run`]'s, a third cheaper: a bulk run prints only its
/// failing seeds, run again).
pub fn fails(seed: u64, setup: &Setup) -> bool {
    !run_recorded(seed, setup, &schedule(seed, setup), false).violations.is_empty()
}

fn run_recorded(seed: u64, setup: &Setup, faults: &[(u64, Fault)], recorded: bool) -> Outcome {
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build()
    {
        Ok(runtime) => runtime,
        Err(e) => return Outcome { history: String::new(), violations: vec![format!("no runtime: {e}")] },
    };
    redlock_client::sim::seed(Some(seed));
    let outcome = runtime.block_on(simulate(seed, *setup, faults.to_vec(), recorded));
    redlock_client::sim::set_connector(None);
    redlock_client::sim::seed(None);
    outcome
}

async fn simulate(seed: u64, setup: Setup, faults: Vec<(u64, Fault)>, recorded: bool) -> Outcome {
    let plans = cluster::draw(seed, setup.cluster_per_mille, setup.nodes, setup.clients);
    let mut rng = StdRng::seed_from_u64(seed);
    let lock_delay_ms = match setup.rules {
        Rules::Module if setup.lock_delay_max_ms > 0 && rng.gen_range(0..4) == 0 => {
            rng.gen_range(1..=setup.lock_delay_max_ms)
        }
        _ => 0,
    };
    let mut nodes = (0..setup.nodes)
        .map(|_| {
            let mut node = Node::new(setup.rules, Persistence::None, TTL_MAX_MS as i64, lock_delay_ms);
            node.rate_per_mille = rng.gen_range(-setup.drift_per_mille..=setup.drift_per_mille);
            node.set_clock_offset(rng.gen_range(-setup.clock_offset_max_ms..=setup.clock_offset_max_ms));
            node
        })
        .collect::<Vec<Node>>();
    // A node runs with the persistence it will crash with from the start
    // (an `everysec` AOF has its last fsynced second when it crashes).
    for (_, fault) in faults.iter().rev() {
        if let Fault::Crash { node, persistence, .. } | Fault::Upgrade { node, persistence, .. } = fault {
            if let Some(n) = nodes.get_mut(*node) {
                n.persistence = *persistence;
            }
        }
    }
    for (_, fault) in &faults {
        if let (Fault::Failover { node, lag_ms, .. }, Rules::Module) = (fault, setup.rules) {
            if let Some(n) = nodes.get_mut(*node) {
                n.replica = Some(Follower { lag_ms: *lag_ms, ..Follower::default() });
            }
        }
    }
    let may_lose_keys = faults.iter().any(|(_, f)| matches!(f, Fault::Lose { .. }));
    for n in &mut nodes {
        n.may_lose_keys = may_lose_keys;
    }
    let family = match rng.gen_range(0..2000) {
        draw if draw < setup.family_per_mille => Family::ReadWrite,
        draw if draw < 2 * setup.family_per_mille => Family::Semaphore,
        _ => Family::Plain,
    };
    // A semaphore of 2 permits needs a third client to be full.
    let client_count = setup.clients + usize::from(family == Family::Semaphore);
    let always = nodes.iter().any(|n| n.persistence == Persistence::Always);
    let upgraded = faults.iter().any(|(_, f)| matches!(f, Fault::Upgrade { .. }));
    // A history with an upgrade draws its rewrite from a generator of its
    // own (it had none while the rewrite of the previous release's AOF was
    // an open gap): the other draws of its seed stay as they were.
    let rewritten = always
        && if upgraded {
            StdRng::seed_from_u64(seed ^ 0x0a0f_2e71).gen_range(0..1000) < setup.aof_rewrite_per_mille
        } else {
            rng.gen_range(0..1000) < setup.aof_rewrite_per_mille
        };
    if rewritten {
        // The clocks as far apart as any history's: one node ahead, the
        // others (the one that restarts from its rewritten AOF among them)
        // behind. A quorum token from the node ahead is then above the
        // clocks of a majority that meets its own only at the restarted
        // node: the counter kept in its ledger must lift it above it.
        let apart_ms = setup.clock_offset_max_ms;
        let ahead = nodes.iter().position(|n| n.persistence != Persistence::Always);
        for (i, n) in nodes.iter_mut().enumerate() {
            n.aof_rewritten = true;
            n.set_clock_offset(if Some(i) == ahead { apart_ms } else { -apart_ms });
        }
    }
    let clusters = cluster::build(&plans, &mut nodes, setup.rules, TTL_MAX_MS as i64, lock_delay_ms);
    let world: Shared = Arc::new(Mutex::new(World {
        nodes,
        clusters,
        members: setup.nodes,
        partitioned: vec![vec![false; setup.nodes]; setup.clients],
        rng,
        faults: setup.messages,
        history: History {
            lock_delay_ms,
            fenced: setup.rules == Rules::Module,
            unrecorded: !recorded,
            ..History::default()
        },
        started: Instant::now(),
    }));
    redlock_client::sim::set_connector(Some(net::connector(world.clone())));
    // After an early crash, the clients spread their cycles (now and then
    // a long think) so as to take the lock again once the restart's
    // quarantine is over; otherwise they keep contending.
    let spread = faults.iter().any(|(at, f)| matches!(f, Fault::Crash { .. }) && *at < EARLY_CRASH_MS);
    let injector = tokio::spawn(inject(world.clone(), faults));
    // With a cluster member, an operator checks the client's status().
    let watcher = (!plans.is_empty())
        .then(|| tokio::spawn(verdict::watch(world.clone(), setup.nodes, STATUS_UNTIL_MS)));
    let cluster_faults: Vec<_> = (plans.into_iter().enumerate())
        .map(|(k, plan)| tokio::spawn(cluster_faults::inject(world.clone(), k, plan, RESOURCE)))
        .collect();
    // The misuser draws from its own generator: the other histories' draws
    // stay as they were.
    let mut misuse_rng = StdRng::seed_from_u64(seed ^ 0x0bad_70c3);
    let misuser = (misuse_rng.gen_range(0..1000) < setup.misuse_per_mille).then(|| {
        tokio::spawn(misuse(world.clone(), setup, misuse_rng, StdRng::seed_from_u64(seed ^ 0x0bad_1e9a)))
    });
    // The reentrant clients (after the probe's index), from their own
    // generator too.
    let mut reentrant_rng = StdRng::seed_from_u64(seed ^ 0x4ee7_e4e7);
    let reentrant_clients: Vec<_> =
        link::one_node(&mut reentrant_rng, setup.reentrant_per_mille, setup.nodes)
            .map(|node| {
                (1..=2)
                    .map(|i| {
                        let rng = StdRng::seed_from_u64(reentrant_rng.gen());
                        tokio::spawn(reentrant::client(
                            world.clone(),
                            client_count + i,
                            node,
                            TTL_MAX_MS,
                            rng,
                        ))
                    })
                    .collect()
            })
            .unwrap_or_default();
    // The waiting clients (after the reentrant ones), from their own too.
    let mut waiters_rng = StdRng::seed_from_u64(seed ^ 0x0a17_0a17);
    let waiting_clients: Vec<_> = link::one_node(&mut waiters_rng, setup.wait_per_mille, setup.nodes)
        .map(|node| {
            (1..=waiters::CLIENTS)
                .map(|i| {
                    let rng = StdRng::seed_from_u64(waiters_rng.gen());
                    tokio::spawn(waiters::client(world.clone(), client_count + 2 + i, node, TTL_MAX_MS, rng))
                })
                .collect()
        })
        .unwrap_or_default();
    let clients: Vec<_> = (0..client_count)
        .map(|c| tokio::spawn(client(world.clone(), c, setup, spread, family, seed)))
        .collect();
    // With a cluster member, each client is kept as it is for the end.
    let with_clusters = !cluster_faults.is_empty();
    let mut kept = Vec::new();
    for (c, handle) in clients.into_iter().enumerate() {
        if let (Ok(Some(redlock)), true) = (handle.await, with_clusters) {
            kept.push((c, redlock));
        }
    }
    for handle in reentrant_clients.into_iter().chain(waiting_clients) {
        let _ = handle.await;
    }
    // Every fault has ended (the schedule is bounded); then, once every
    // TTL and quarantine has run out, the lock must be free: nothing was
    // left behind (a probe client takes it).
    let _ = injector.await;
    for handle in cluster_faults {
        let _ = handle.await;
    }
    let over_counts = match watcher {
        Some(watcher) => watcher.await.unwrap_or_default(),
        None => Vec::new(),
    };
    if let Some(misuser) = misuser {
        let _ = misuser.await;
    }
    net::lock(&world).faults = quiet().messages;
    let quarantine_ms = lock_core::quarantine::length_ms(-1, TTL_MAX_MS as i64, lock_delay_ms);
    // A key lost after a start from disk is quarantined as long as a start
    // (the floor), and its restart grace on top.
    let grace_ms = crate::node::CLOCK_TOLERANCE_MS.unsigned_abs();
    tokio::time::sleep(Duration::from_millis(TTL_MAX_MS + quarantine_ms.unsigned_abs() + grace_ms)).await;
    let left_behind = probe(&world, setup, client_count, family).await;
    let stuck = cluster_faults::recovered(&world, kept, RESOURCE, family.mode(true)).await;
    let w = net::lock(&world);
    let mut violations = w.history.violations();
    for (i, n) in w.nodes.iter().enumerate() {
        violations.extend(n.ledger.violations.iter().map(|v| format!("node token order: n{i} {v}")));
        violations.extend(n.misstored.iter().map(|v| format!("stored form: n{i} {v}")));
    }
    if let Some(why) = left_behind {
        violations.push(format!("left behind: the lock is not free once every TTL ran out: {why}"));
    }
    violations.extend(stuck);
    violations.extend(over_counts);
    Outcome { history: w.history.render(&violations), violations }
}

/// A failing seed's shortest history found: the schedule's faults removed
/// one at a time, then the message faults, pauses and long holds, then
/// lock cycles,
/// each kept out while the run still fails.
pub fn shrink(seed: u64, setup: &Setup) -> Option<(Setup, Schedule, Outcome)> {
    let mut faults = schedule(seed, setup);
    let mut setup = *setup;
    let mut best = run(seed, &setup, &faults);
    if best.violations.is_empty() {
        return None;
    }
    let mut i = 0;
    while i < faults.len() {
        let mut fewer = faults.clone();
        fewer.remove(i);
        let outcome = run(seed, &setup, &fewer);
        if outcome.violations.is_empty() {
            i += 1;
        } else {
            (faults, best) = (fewer, outcome);
        }
    }
    let quieter: [fn(Setup) -> Setup; 3] = [
        |s| Setup { messages: quiet().messages, ..s },
        |s| Setup { pause_per_mille: 0, ..s },
        |s| Setup { keep_alive_per_mille: 0, ..s },
    ];
    for quieten in quieter {
        let candidate = quieten(setup);
        let outcome = run(seed, &candidate, &faults);
        if !outcome.violations.is_empty() {
            (setup, best) = (candidate, outcome);
        }
    }
    while setup.cycles > 1 {
        let candidate = Setup { cycles: setup.cycles - 1, ..setup };
        let outcome = run(seed, &candidate, &faults);
        if outcome.violations.is_empty() {
            break;
        }
        (setup, best) = (candidate, outcome);
    }
    Some((setup, faults, best))
}

/// A client of its own (the next index) takes and releases the lock once;
/// why not, if it cannot.
async fn probe(world: &Shared, setup: Setup, c: usize, family: Family) -> Option<String> {
    let urls = cluster_faults::urls(world, c, setup.nodes);
    let redlock = match Redlock::connect(urls, Config::default()).await {
        Ok(redlock) => redlock,
        Err(e) => return Some(format!("connect: {e}")),
    };
    let mode = family.mode(true);
    let outcome = match redlock.try_acquire(RESOURCE, mode, Duration::from_millis(TTL_MAX_MS)).await {
        Ok(guard) => {
            let _ = guard.release().await;
            None
        }
        Err(e) => Some(e.to_string()),
    };
    redlock.settle().await;
    note(world, format!("probe: {}", outcome.as_deref().unwrap_or("took and released the lock")));
    outcome
}

/// The misusing client: at a few times of its own, on a node drawn each
/// time, `LOCK.EXTEND` of the contended lock with a token that holds
/// nothing, and `LOCK.ENTER` of a reentrant lock of its own then
/// `LOCK.EXIT` of it under another owner id. Each call goes straight to
/// the node (no client API sends another's token); a node that is down
/// is skipped. The node must answer 0 to the extension and nil to the
/// exit; anything else is a misuse accepted. Then, on the same node, a
/// few malformed calls drawn from `bad` (`bad_input.rs`): each must get an
/// error and change nothing, or the bad input was accepted.
async fn misuse(world: Shared, setup: Setup, mut rng: StdRng, mut bad: StdRng) {
    const REENTRANT: &str = "misuse-reentrant";
    let words = |parts: &[&str]| parts.iter().map(|p| p.as_bytes().to_vec()).collect::<Vec<_>>();
    let started = net::lock(&world).started;
    let mut times: Vec<u64> = (0..3).map(|_| rng.gen_range(0..1500)).collect();
    times.sort_unstable();
    for (i, at) in times.into_iter().enumerate() {
        tokio::time::sleep_until(started + Duration::from_millis(at)).await;
        let node = rng.gen_range(0..setup.nodes);
        let ttl = rng.gen_range(100..=TTL_MAX_MS).to_string();
        let (nobody, holder) = (format!("misuser-nobody-{i}"), format!("misuser-holder-{i}"));
        let calls = [
            (words(&["LOCK.EXTEND", RESOURCE, &nobody, &ttl]), Some(Reply::Int(0))),
            (words(&["LOCK.ENTER", REENTRANT, &holder, &ttl]), None),
            (words(&["LOCK.EXIT", REENTRANT, &nobody]), Some(Reply::Nil)),
        ];
        let mut w = net::lock(&world);
        let now = w.now_ms();
        let malformed = bad_input::calls(&mut bad, RESOURCE, &nobody, TTL_MAX_MS);
        let calls = calls
            .into_iter()
            .map(|(call, expected)| (call, Some(expected)))
            .chain(malformed.into_iter().map(|call| (call, None)));
        for (call, expected) in calls {
            let Some(n) = w.nodes.get_mut(node).filter(|n| n.up) else { break };
            let before = n.replica_copy();
            let text = bad_input::text(&call);
            let reply = match bad_input::guarded(|| n.call(&call, now)) {
                Ok(reply) => reply,
                Err(why) => {
                    n.crash();
                    w.history.seen.push(bad_input::panicked(node, now, &text, &why));
                    break;
                }
            };
            let changed = before != n.replica_copy();
            w.history.note(now, format!("misuser -> n{node} {text}: {reply:?}"));
            match expected {
                Some(Some(e)) if e != reply => w.history.seen.push(format!(
                    "misuse accepted: n{node} answered {reply:?} at {now} ms to {text}, whose owner holds nothing"
                )),
                None if !matches!(reply, Reply::Error(..)) || changed => w.history.seen.push(format!(
                    "bad input accepted: n{node} answered {reply:?} at {now} ms to {text}{}",
                    if changed { ", and its locks or fencing counter changed" } else { "" }
                )),
                _ => {}
            }
        }
    }
}

/// Applies the schedule's faults at their times.
async fn inject(world: Shared, faults: Vec<(u64, Fault)>) {
    let started = net::lock(&world).started;
    for (at, fault) in faults {
        tokio::time::sleep_until(started + Duration::from_millis(at)).await;
        match fault {
            Fault::Crash { node, down_ms, persistence } => {
                stop_and_restart(&world, node, down_ms, persistence, false).await
            }
            Fault::ClockStep { node, step_ms } => {
                let mut w = net::lock(&world);
                let now = w.now_ms();
                w.history.note(now, format!("n{node}'s wall clock steps {step_ms:+} ms"));
                if let Some(n) = w.nodes.get_mut(node) {
                    n.step_clock(step_ms);
                }
            }
            Fault::Upgrade { node, down_ms, persistence } => {
                stop_and_restart(&world, node, down_ms, persistence, true).await
            }
            Fault::Lose { node, loss } => {
                let mut w = net::lock(&world);
                let now = w.now_ms();
                let what = match w.nodes.get_mut(node).filter(|n| n.up) {
                    Some(n) => n.lose(loss, RESOURCE.as_bytes(), now),
                    None => "down: nothing happens".into(),
                };
                w.history.note(now, format!("n{node} loses {RESOURCE} ({loss:?}): {what}"));
            }
            Fault::Failover { node, detect_ms, .. } => {
                {
                    let mut w = net::lock(&world);
                    let now = w.now_ms();
                    w.history.note(now, format!("n{node}'s master dies (Sentinel promotes its replica)"));
                    if let Some(n) = w.nodes.get_mut(node) {
                        n.crash();
                    }
                }
                tokio::time::sleep(Duration::from_millis(detect_ms)).await;
                let mut w = net::lock(&world);
                let now = w.now_ms();
                let Some(n) = w.nodes.get(node) else { continue };
                let Some(copy) = n.replica.as_ref().map(|r| r.copy.clone()) else { continue };
                let mut promoted = n.promoted(copy, now);
                promoted.epoch = n.epoch + 1;
                if let Some(slot) = w.nodes.get_mut(node) {
                    *slot = promoted;
                }
                w.history.note(
                    now,
                    format!("n{node}'s address reaches its promoted replica (and it quarantines)"),
                );
            }
            Fault::Partition { client, node, for_ms } => {
                set_partition(&world, client, node, true);
                tokio::time::sleep(Duration::from_millis(for_ms)).await;
                set_partition(&world, client, node, false);
            }
        }
    }
}

/// The node stops (a crash, or a stop for an upgrade), then restarts
/// `down_ms` later with `persistence`; on the new release if `upgrade`.
async fn stop_and_restart(
    world: &Shared,
    node: usize,
    down_ms: u64,
    persistence: Persistence,
    upgrade: bool,
) {
    {
        let mut w = net::lock(world);
        let now = w.now_ms();
        let how = if upgrade { "stops for an upgrade" } else { "crashes" };
        w.history.note(now, format!("n{node} {how} ({persistence:?}), down {down_ms} ms"));
        if let Some(n) = w.nodes.get_mut(node) {
            n.persistence = persistence;
            n.crash();
        }
    }
    tokio::time::sleep(Duration::from_millis(down_ms)).await;
    let mut w = net::lock(world);
    let now = w.now_ms();
    w.history.note(now, format!("n{node} restarts{}", if upgrade { " on the new release" } else { "" }));
    if let Some(n) = w.nodes.get_mut(node) {
        n.upgrade = upgrade;
        n.restart(now);
    }
}

/// Client `client` is cut off from node `node` (a plain node, or a
/// cluster's), or no longer.
pub(crate) fn set_partition(world: &Shared, client: usize, node: usize, cut: bool) {
    let mut w = net::lock(world);
    let now = w.now_ms();
    w.history.note(now, format!("c{client} x n{node} {}", if cut { "partitioned" } else { "healed" }));
    if let Some(row) = w.partitioned.get_mut(client) {
        if row.len() <= node {
            row.resize(node + 1, false);
        }
        if let Some(slot) = row.get_mut(node) {
            *slot = cut;
        }
    }
}

fn ms(world: &Shared, at: Instant) -> i64 {
    let started = net::lock(world).started;
    i64::try_from(at.saturating_duration_since(started).as_millis()).unwrap_or(i64::MAX)
}

fn note(world: &Shared, what: String) {
    let mut w = net::lock(world);
    let now = w.now_ms();
    w.history.note(now, what);
}

/// How a hold keeps its lock while it works.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum KeepAlive {
    /// It works within its first lease.
    None,
    /// It extends by hand (`Guard::extend`) before each step of its work.
    Extend,
    /// Its watchdog renews every ttl/3, up to this many times.
    Watchdog(u32),
}

/// What one lock cycle of a client does, drawn from the world's generator.
struct Cycle {
    ttl_ms: u64,
    /// The work between writes: one step within the first lease, or up to
    /// three TTLs in steps of up to half a TTL when kept alive.
    steps_ms: Vec<u64>,
    /// A pause before the last write (0: none).
    pause_ms: u64,
    think_ms: u64,
    keep: KeepAlive,
}

fn draw_cycle(world: &Shared, setup: &Setup, spread: bool) -> Cycle {
    let mut w = net::lock(world);
    let ttl_ms = w.rng.gen_range(100..=TTL_MAX_MS);
    let pause_ms =
        if w.rng.gen_range(0..1000) < setup.pause_per_mille { w.rng.gen_range(1..2 * ttl_ms) } else { 0 };
    let keep = if w.rng.gen_range(0..1000) < setup.keep_alive_per_mille {
        if w.rng.gen_bool(0.5) {
            KeepAlive::Extend
        } else {
            KeepAlive::Watchdog(w.rng.gen_range(1..=8))
        }
    } else {
        KeepAlive::None
    };
    let steps_ms = match keep {
        KeepAlive::None => vec![w.rng.gen_range(0..ttl_ms / 2)],
        KeepAlive::Extend | KeepAlive::Watchdog(_) => {
            let mut steps = Vec::new();
            let mut total = w.rng.gen_range(ttl_ms / 2..3 * ttl_ms);
            while total > 0 {
                let step = w.rng.gen_range(1..=ttl_ms / 2).min(total);
                steps.push(step);
                total -= step;
            }
            steps
        }
    };
    // Mostly a short think; when spread, now and then a long one, which
    // takes the cycles past a restart's quarantine (simulated time costs
    // nothing).
    let think_max_ms = if spread && w.rng.gen_range(0..3) == 0 { 1000 } else { 100 };
    Cycle { ttl_ms, steps_ms, pause_ms, think_ms: w.rng.gen_range(0..think_max_ms), keep }
}

/// One client: lock cycles on the resource with the real client (grant,
/// fencing round, writes to the resource between steps of work kept alive
/// by extensions or the watchdog, maybe a pause, release).
async fn client(
    world: Shared,
    c: usize,
    setup: Setup,
    spread: bool,
    family: Family,
    seed: u64,
) -> Option<Redlock> {
    let config = Config {
        connect_timeout: Duration::from_millis(100),
        command_timeout: Duration::from_millis(60),
        reconnect_backoff: Duration::from_millis(50),
        ..Config::default()
    };
    let urls = cluster_faults::urls(&world, c, setup.nodes);
    let redlock = match Redlock::connect(urls, config).await {
        Ok(redlock) => redlock,
        Err(e) => {
            note(&world, format!("c{c} connect failed: {e}"));
            return None;
        }
    };
    let retry = RetryPolicy {
        attempts_max: 3,
        delay_min: Duration::from_millis(10),
        delay_max: Duration::from_millis(60),
        total_max: None,
    };
    let fencing = setup.rules == crate::node::Rules::Module;
    let in_one_slot = !net::lock(&world).clusters.is_empty();
    let mut set_rng = StdRng::seed_from_u64(seed ^ 0x5e75 ^ (c as u64) << 32);
    for _ in 0..setup.cycles {
        let cycle = draw_cycle(&world, &setup, spread);
        let mode = family.mode(net::lock(&world).rng.gen_bool(0.5));
        // A set (plain locks only), drawn from the client's own generator:
        // the other draws stay as they were.
        let set = match family {
            Family::Plain => sets::draw(&mut set_rng, setup.set_per_mille),
            _ => None,
        };
        // With a cluster member, in one hash slot (`TRYAGAIN` while it
        // migrates).
        let set = set.map(|set| if in_one_slot { sets::in_one_slot(set) } else { set });
        let keys: Vec<String> =
            set.clone().unwrap_or_else(|| vec![RESOURCE]).iter().map(|k| k.to_string()).collect();
        let ttl = Duration::from_millis(cycle.ttl_ms);
        note(&world, format!("c{c} acquires {mode:?} {keys:?}, ttl {} ms, {:?}", cycle.ttl_ms, cycle.keep));
        let acquired = match &set {
            Some(set) => {
                let resources: Vec<(&str, Mode)> = set.iter().map(|k| (*k, mode)).collect();
                redlock.acquire_many(&resources, ttl, &retry).await
            }
            None => redlock.acquire(RESOURCE, mode, ttl, &retry).await,
        };
        match acquired {
            Err(e) => note(&world, format!("c{c} acquire failed: {e}")),
            Ok(mut guard) => {
                // Its grant round's start: the nodes may grant a reader or a
                // permit from there, beside the holders of the time.
                let began_ms = ms(&world, guard.lease().start);
                let token = match guard.fencing_token().await {
                    Ok(token) => token,
                    Err(e) => {
                        note(&world, format!("c{c} fencing failed: {e}"));
                        let _ = guard.release().await;
                        continue;
                    }
                };
                let valid_until_ms = ms(&world, guard.lease().deadline);
                let hold = {
                    let mut w = net::lock(&world);
                    let now = w.now_ms();
                    w.history
                        .note(now, format!("c{c} holds, token {token}, valid until {valid_until_ms} ms"));
                    w.history.holds.push(Hold {
                        client: c,
                        mode,
                        token,
                        began_ms,
                        granted_ms: now,
                        valid_until_ms,
                        released_ms: None,
                        keys: keys.clone(),
                    });
                    w.history.holds.len() - 1
                };
                if let KeepAlive::Watchdog(renewals_max) = cycle.keep {
                    guard.start_watchdog(Watchdog { renewals_max, duration_max: Duration::from_secs(60) });
                }
                // The careful holder checks that it still holds the lock
                // before each write; a pause may come between the check and
                // the last write (Kleppmann's GC pause).
                let last = cycle.steps_ms.len();
                let steps = std::iter::once(0).chain(cycle.steps_ms.iter().copied()).enumerate();
                for (i, work) in steps {
                    tokio::time::sleep(Duration::from_millis(work)).await;
                    if cycle.keep == KeepAlive::Extend && i > 0 {
                        match guard.extend(ttl).await {
                            Ok(_) => learn_lease(&world, hold, &guard, format!("c{c} extended")),
                            Err(e) => note(&world, format!("c{c} extend failed: {e}")),
                        }
                    }
                    if !guard.is_held() {
                        break;
                    }
                    if i == last && cycle.pause_ms > 0 {
                        note(&world, format!("c{c} pauses {} ms", cycle.pause_ms));
                        tokio::time::sleep(Duration::from_millis(cycle.pause_ms)).await;
                    }
                    let mut w = net::lock(&world);
                    let now = w.now_ms();
                    let accepted = w.history.write(hold, now, fencing);
                    w.history.note(
                        now,
                        format!(
                            "c{c} writes with token {token}: {}",
                            if accepted { "accepted" } else { "refused" }
                        ),
                    );
                }
                // The latest lease the watchdog got before the release.
                learn_lease(&world, hold, &guard, format!("c{c} releases"));
                {
                    let mut w = net::lock(&world);
                    let now = w.now_ms();
                    if let Some(h) = w.history.holds.get_mut(hold) {
                        h.released_ms = Some(now);
                    }
                }
                if let Err(e) = guard.release().await {
                    note(&world, format!("c{c} release failed: {e}"));
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(cycle.think_ms)).await;
    }
    redlock.settle().await;
    Some(redlock)
}

/// The hold's validity as the guard now knows it: the latest lease an
/// extension or the watchdog got (never earlier than one before: the
/// earlier lease's promise still stands).
fn learn_lease(world: &Shared, hold: usize, guard: &redlock_client::Guard, what: String) {
    let deadline_ms = ms(world, guard.lease().deadline);
    let mut w = net::lock(world);
    let now = w.now_ms();
    if let Some(h) = w.history.holds.get_mut(hold) {
        h.valid_until_ms = h.valid_until_ms.max(deadline_ms);
        let until = h.valid_until_ms;
        w.history.note(now, format!("{what}, valid until {until} ms"));
    }
}
