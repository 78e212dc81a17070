//! The quorum client through cluster members: real Redis / Valkey
//! Clusters (the test kit's [`RedisCluster`]), with the module on every
//! node. Routing over every shard, MOVED after a resharding, ASK during a
//! migration, Valkey's atomic slot migration, failovers, CLUSTERDOWN, sets
//! and slots, and quorums that mix masters and clusters.
//!
//! Tests that only take locks share one cluster (and one set of masters);
//! a test that moves slots or kills nodes starts its own.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use lock_testkit_client::*;
use redlock_client::{Blocker, Config, Error, Mode, Readiness, Redlock, RetryPolicy};

mod common;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

const TTL: Duration = Duration::from_secs(10);

/// One cluster of three shards (a master and a replica each) shared by the
/// tests that disturb nothing while they run at once. Held by those tests
/// only: the last one to finish stops it (by PID, in its drop). A static
/// would never be dropped, and its servers would outlive the test binary.
fn shared() -> Arc<RedisCluster> {
    static CLUSTER: Mutex<Weak<RedisCluster>> = Mutex::new(Weak::new());
    let mut slot = CLUSTER.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some(cluster) = slot.upgrade() {
        return cluster;
    }
    let cluster = Arc::new(RedisCluster::start(ClusterSpec::new(3, 1)));
    *slot = Arc::downgrade(&cluster);
    cluster
}

/// Timeouts for a cluster member: [`test_config`]'s, with room for a
/// redirect or two.
fn config() -> Config {
    Config { command_timeout: ms(500), ..test_config() }
}

async fn client(members: &[String]) -> Redlock {
    Redlock::connect(members, config()).await.expect("connect")
}

/// `LOCK.INFO key`'s holder on one node.
fn holder_on(node: &Server, key: &str) -> Option<String> {
    holder(node, key)
}

/// A field of `LOCK.INFO key` on a node that imports the key's slot (the
/// command preceded by `ASKING`); None when no lock is held there.
fn importing_field(node: &Server, key: &str, field: &str) -> Option<Value> {
    let mut c = node.conn();
    let (_, info): ((), Value) =
        redis::pipe().cmd("ASKING").cmd("LOCK.INFO").arg(key).query(&mut c).expect("ASKING + LOCK.INFO");
    let Value::Array(items) = info else { return None };
    items.chunks(2).find_map(|pair| match &pair[0] {
        Value::BulkString(name) if name == field.as_bytes() => Some(pair[1].clone()),
        _ => None,
    })
}

fn importing_holder(node: &Server, key: &str) -> Option<String> {
    importing_field(node, key, "holder").map(|v| redis::from_redis_value(&v).unwrap())
}

/// Every lock command through one cluster member reaches the master of its
/// key's slot, on every shard, with and without hash tags; the member is
/// one vote (its grant counts once, whatever the shard).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_route_to_the_master_of_each_slot_on_every_shard() {
    let cluster = shared();
    let rl = client(&[cluster.member()]).await;
    assert_eq!(rl.majority(), 1, "one member: one vote");
    let mut keys: Vec<String> = cluster.keys_per_master("route", 2).into_iter().flatten().collect();
    keys.extend(["{route}:a".to_string(), "{route}:b".to_string()]);
    for key in &keys {
        let owner = cluster.master_of(key);
        let guard = rl.try_acquire(key, Mode::Plain, TTL).await.unwrap_or_else(|e| panic!("{key}: {e}"));
        assert_eq!(holder_on(owner, key).as_deref(), Some(guard.token()), "{key} on {}", owner.port);
        for other in cluster.masters().into_iter().filter(|m| m.port != owner.port) {
            assert_eq!(
                cmd("EXISTS")
                    .arg(key)
                    .query::<i64>(&mut other.conn())
                    .map_err(|e| e.code().map(String::from)),
                Err(Some("MOVED".into())),
                "{key}"
            );
        }
        let fence = guard.fencing_token().await.expect("fence");
        assert_eq!(info_int(&mut owner.conn(), key, "fence"), Some(fence as i64));
        guard.extend(TTL * 2).await.expect("extend");
        assert!(info_int(&mut owner.conn(), key, "ttl-ms").unwrap() > 10_000);
        let other = rl.try_acquire(key, Mode::Plain, TTL).await.expect_err("held");
        assert!(matches!(other, Error::Contended { .. }), "{other}");
        let tally = guard.release().await.expect("release");
        assert_eq!((tally.nodes, tally.yes), (1, 1));
        assert_eq!(holder_on(owner, key), None);
    }
    let info = rl.info("{route}:a").await;
    assert_eq!(info.len(), 1);
    assert_eq!(info[0].node, cluster.member());
    assert_eq!(
        info[0].shard.as_deref(),
        Some(format!("127.0.0.1:{}", cluster.master_of("{route}:a").port).as_str())
    );
    rl.settle().await;
}

/// Calls of `command` (e.g. `cluster|shards`) on every running node.
fn calls_everywhere(cluster: &RedisCluster, command: &str) -> i64 {
    cluster.running().iter().map(|n| calls(n, command)).sum()
}

/// A classic resharding (`SETSLOT` + `MIGRATE` + `SETSLOT NODE`) moves a
/// held lock with its slot: the client, whose map still names the old
/// master, follows `MOVED`, and the lock is still held, extended, fenced
/// and released there. The map follows at once: the next call goes to the
/// new master directly; a storm of `MOVED` replies costs one topology fetch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_lock_moves_with_its_slot_and_the_client_follows_moved() {
    let cluster = RedisCluster::start(ClusterSpec::new(3, 0));
    let rl = client(&[cluster.member()]).await;
    let key = "{moved}:job";
    let slot = cluster.slot(key);
    let from = cluster.master_of(key);
    let to = cluster.masters().into_iter().find(|m| m.port != from.port).unwrap();
    let guard = rl.try_acquire(key, Mode::Plain, TTL).await.expect("acquire");
    // Fifty more locks of the same slot, held too.
    let others: Vec<_> = (0..50).map(|i| format!("{{moved}}:{i}")).collect();
    let mut held = Vec::new();
    for other in &others {
        held.push(rl.try_acquire(other, Mode::Plain, TTL).await.expect("acquire"));
    }

    cluster.move_slot(slot, to);
    assert_eq!(holder(to, key).as_deref(), Some(guard.token()), "the lock moved with its slot");
    let fetches_before = calls_everywhere(&cluster, "cluster|shards");
    let moved_before = calls(from, "lock.extend");
    // Every held lock is extended at once: each call meets MOVED.
    let extended = futures_util::future::join_all(held.iter().map(|g| g.extend(TTL))).await;
    assert!(extended.iter().all(Result::is_ok), "{extended:?}");
    // The fetch runs in the background: wait for it, then count.
    let fetches = || calls_everywhere(&cluster, "cluster|shards") - fetches_before;
    wait_until(Duration::from_secs(5), "the topology fetch a MOVED asks for", || fetches() >= 1);
    rl.settle().await;
    assert!(fetches() <= 2, "{} topology fetches for a storm of 50 MOVED", fetches());
    let redirected = calls(from, "lock.extend") - moved_before;
    assert!(redirected <= 50, "{redirected} extends reached the old master");

    // The lock itself: fenced, extended, released on its new master, and
    // none of it through the old one (the map was updated).
    let at_old = calls(from, "lock.fence") + calls(from, "lock.release");
    let fence = guard.fencing_token().await.expect("fence after the move");
    assert_eq!(info_int(&mut to.conn(), key, "fence"), Some(fence as i64));
    guard.extend(TTL).await.expect("extend after the move");
    let other = rl.try_acquire(key, Mode::Plain, TTL).await.expect_err("still held");
    assert!(matches!(other, Error::Contended { .. }), "{other}");
    guard.release().await.expect("release after the move");
    assert_eq!(holder(to, key), None);
    assert_eq!(
        calls(from, "lock.fence") + calls(from, "lock.release"),
        at_old,
        "no call went to the old master"
    );
    for g in held {
        g.release().await.expect("release");
    }
    rl.settle().await;
    assert_eq!(cmd("DBSIZE").query::<i64>(&mut to.conn()).unwrap(), 0, "every lock released");
}

/// During a classic migration (slot MIGRATING on the old master, IMPORTING
/// on the new one), a key already migrated is served by the new master
/// through `ASK` + `ASKING`, and the map is unchanged: a key not migrated
/// yet is still served by the old master, without a redirect.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ask_during_a_migration_is_followed_once_without_changing_the_map() {
    let cluster = RedisCluster::start(ClusterSpec::new(3, 0));
    let rl = client(&[cluster.member()]).await;
    let (moving, staying) = ("{ask}:moving", "{ask}:staying");
    let slot = cluster.slot(moving);
    let from = cluster.master_of(moving);
    let to = cluster.masters().into_iter().find(|m| m.port != from.port).unwrap();
    let guard = rl.try_acquire(moving, Mode::Plain, TTL).await.expect("acquire");
    let staying_guard = rl.try_acquire(staying, Mode::Plain, TTL).await.expect("acquire");

    cluster.begin_migration(slot, from, to);
    cluster.migrate_keys(from, to, &[moving.to_string()]);
    let asking = calls(to, "asking");
    let fence = guard.fencing_token().await.expect("fence through ASK");
    assert_eq!(importing_field(to, moving, "fence"), Some(Value::Int(fence as i64)));
    guard.extend(TTL).await.expect("extend through ASK");
    assert_eq!(calls(to, "asking") - asking, 2, "one ASKING per call that met ASK");
    // The map still names the old master: the key still there is served
    // there, with no ASKING anywhere.
    let (asking, extends_there) = (calls(to, "asking"), calls(from, "lock.extend"));
    staying_guard.extend(TTL).await.expect("extend on the old master");
    assert_eq!(calls(from, "lock.extend") - extends_there, 1);
    assert_eq!(calls(to, "asking"), asking);
    // A new lock in the migrating slot is created on the new master (the
    // old one answers ASK for a key it does not have).
    let fresh = rl.try_acquire("{ask}:fresh", Mode::Plain, TTL).await.expect("acquire through ASK");
    assert_eq!(importing_holder(to, "{ask}:fresh").as_deref(), Some(fresh.token()));
    let info = rl.info(moving).await;
    assert_eq!(info[0].shard.as_deref(), Some(format!("127.0.0.1:{}", to.port).as_str()), "{info:?}");
    guard.release().await.expect("release through ASK");
    fresh.release().await.expect("release through ASK");
    assert_eq!((importing_holder(to, moving), importing_holder(to, "{ask}:fresh")), (None, None));

    cluster.migrate_keys(from, to, &[staying.to_string()]);
    cluster.end_migration(slot, to);
    staying_guard.release().await.expect("release after the migration (MOVED)");
    assert_eq!(holder(to, staying), None);
    rl.settle().await;
}

/// A cluster whose nodes write every grant to disk before replying
/// (`appendfsync always`: no start-up quarantine), fail a silent master
/// over after 1.5 s (`cluster-node-timeout`), quarantine a promoted
/// replica for [`QUARANTINE_MS`], and keep serving the other shards' slots
/// while one shard has no master (`cluster-require-full-coverage no`, as
/// docs/operations.md advises).
fn failover_cluster() -> RedisCluster {
    let opts = Opts::new()
        .aof_always()
        .module_arg("quarantine-ms", &QUARANTINE_MS.to_string())
        .config("cluster-require-full-coverage", "no");
    RedisCluster::start(ClusterSpec::new(3, 1).opts(opts).node_timeout_ms(1_500))
}

/// What a client saw while one shard failed over: per attempt (every 20 ms)
/// whether the other shards granted, and when the failed shard granted.
#[derive(Debug, Default)]
struct Probe {
    others_granted: usize,
    others_refused: Vec<String>,
}

/// Takes and releases a lock on every shard (`keys`, the failed shard's
/// last) every 20 ms through its own client, until `stop`; each grant on
/// the failed shard is noted in `shard_grants`, at the moment its request left.
async fn probe(
    member: String,
    keys: Vec<String>,
    shard_grants: Arc<Mutex<Vec<std::time::Instant>>>,
    stop: Arc<AtomicBool>,
) -> Probe {
    let client = Redlock::connect([member], config()).await.unwrap();
    let (started, mut seen) = (std::time::Instant::now(), Probe::default());
    let (shard, others) = keys.split_last().unwrap();
    while !stop.load(Ordering::Relaxed) {
        for key in others {
            match client.try_acquire(key, Mode::Plain, TTL).await {
                Ok(guard) => {
                    seen.others_granted += 1;
                    let _ = guard.release().await;
                }
                Err(e) => seen.others_refused.push(format!("{:?}: {e}", started.elapsed())),
            }
        }
        // A new key of that shard each time: a lock the kill left behind
        // there is held until its TTL, as it should be.
        let fresh = format!("{shard}:{}", started.elapsed().as_micros());
        // When the request left, not when the grant came back: a request
        // the old master answered just before its kill returns just after
        // it (a cold run saw one 55 µs after), and that grant is no
        // evidence that the shard granted again.
        let asked = std::time::Instant::now();
        if let Ok(guard) = client.try_acquire(&fresh, Mode::Plain, TTL).await {
            shard_grants.lock().unwrap().push(asked);
            let _ = guard.release().await;
        }
        tokio::time::sleep(ms(20)).await;
    }
    client.settle().await;
    seen
}

/// Waits until `master`'s replicas acknowledged every write so far.
fn replicated(master: &Server) {
    let acked: i64 = cmd("WAIT").arg(1).arg(5_000).query(&mut master.conn()).unwrap();
    assert_eq!(acked, 1, "the replica acknowledged the lock");
}

/// A key served by each master, other than `master`'s.
fn keys_elsewhere(cluster: &RedisCluster, master: u16, prefix: &str) -> Vec<String> {
    cluster
        .masters()
        .iter()
        .zip(cluster.keys_per_master(prefix, 1))
        .filter(|(m, _)| m.port != master)
        .map(|(_, keys)| keys[0].clone())
        .collect()
}

const QUARANTINE_MS: u64 = 2_000;

/// `CLUSTER FAILOVER` of one shard: its promoted replica refuses new
/// grants for its quarantine (the client says "quarantined"), keeps the
/// held lock (not granted to another holder, released by its holder), and
/// the other shards keep granting throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shard_failover_quarantines_that_shard_only() {
    let cluster = failover_cluster();
    let rl = client(&[cluster.member()]).await;
    let (held, fresh) = ("{failover}:held", "{failover}:fresh");
    let master = cluster.master_of(held);
    // The longest TTL a node allows: the failover and the calls below may
    // take seconds under load, and the lock must still be held when the
    // promoted master is asked (a 10 s TTL ran out once under load).
    let guard = rl.try_acquire(held, Mode::Plain, Duration::from_secs(30)).await.expect("acquire");
    replicated(master);
    let replica = cluster.replicas_of(master)[0];
    let elsewhere = keys_elsewhere(&cluster, master.port, "failover-other");

    cluster.failover(replica);
    let promoted = std::time::Instant::now();
    let refused =
        rl.try_acquire(fresh, Mode::Plain, TTL).await.expect_err("the promoted master is quarantined");
    assert!(refused.to_string().contains("1 quarantined"), "{refused}");
    for key in &elsewhere {
        let granted = rl.try_acquire(key, Mode::Plain, TTL).await.expect("the other shards grant");
        granted.release().await.expect("release");
    }
    let other = Redlock::connect([cluster.member()], config()).await.unwrap();
    let taken =
        other.try_acquire(held, Mode::Plain, TTL).await.expect_err("the held lock is not granted again");
    assert!(!matches!(taken, Error::InvalidArgument(_)), "{taken}");
    assert_eq!(holder(replica, held).as_deref(), Some(guard.token()), "the promoted master has the lock");
    // The shard grants again once its quarantine ends.
    let mut refusing = Duration::ZERO;
    let granted = loop {
        match rl.try_acquire(fresh, Mode::Plain, TTL).await {
            Ok(granted) => break granted,
            Err(e) => assert!(e.to_string().contains("quarantined"), "{e}"),
        }
        refusing = promoted.elapsed();
        assert!(refusing < Duration::from_secs(20), "still refusing after {refusing:?}");
        tokio::time::sleep(ms(50)).await;
    };
    eprintln!("the promoted shard refused grants for {refusing:?} (lock.quarantine-ms {QUARANTINE_MS})");
    assert!(refusing >= ms(QUARANTINE_MS / 2), "refused for {refusing:?} only");
    granted.release().await.expect("release");
    guard.release().await.expect("the holder releases on the promoted master");
    assert_eq!(holder(replica, held), None);
    rl.settle().await;
    other.settle().await;
}

/// kill -9 of a shard's master and the promotion of its replica: the
/// promoted master refuses grants with QUARANTINE, then still holds the
/// replicated lock for its holder (not granted to anyone else before its
/// TTL); the other shards keep granting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_master_is_replaced_and_its_lock_is_not_granted_twice() {
    let mut cluster = failover_cluster();
    let rl = client(&[cluster.member()]).await;
    let key = "{killed}:job";
    let master_port = cluster.master_of(key).port;
    let elsewhere = keys_elsewhere(&cluster, master_port, "killed-other");
    let guard = rl.try_acquire(key, Mode::Plain, Duration::from_secs(20)).await.expect("acquire");
    replicated(cluster.node(master_port));
    let index = cluster.nodes.iter().position(|n| n.port == master_port).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let shard_grants = Arc::new(Mutex::new(Vec::new()));
    let mut probed = keys_elsewhere(&cluster, master_port, "killed-probe");
    probed.push("{killed}:probe".into());
    assert_eq!(cluster.master_of("{killed}:probe:1").port, master_port);
    let prober = tokio::spawn(probe(cluster.member(), probed, shard_grants.clone(), stop.clone()));

    let (promoted, killed) = cluster.kill_master_and_wait_promotion(index);
    let promoted = &cluster.nodes[promoted];
    let other = Redlock::connect([cluster.member()], config()).await.unwrap();
    for key in &elsewhere {
        let granted = other.try_acquire(key, Mode::Plain, TTL).await.expect("the other shards grant");
        granted.release().await.expect("release");
    }
    let refused = other.try_acquire(key, Mode::Plain, TTL).await.expect_err("quarantined, and held");
    assert!(matches!(refused, Error::NoQuorum { .. } | Error::Contended { .. }), "{refused}");
    // Past the quarantine the lock is still there, for its holder only.
    wait_until(Duration::from_secs(20), "the end of the promoted master's quarantine", || {
        info_stat(&mut promoted.conn(), "quarantine") == 0
    });
    let taken = other.try_acquire(key, Mode::Plain, TTL).await.expect_err("still held");
    assert!(matches!(taken, Error::Contended { .. }), "{taken}");
    let back_after = || shard_grants.lock().unwrap().iter().find(|&&at| at > killed).map(|&at| at - killed);
    wait_until(Duration::from_secs(10), "the probe's grant on the failed shard", || back_after().is_some());
    stop.store(true, Ordering::Relaxed);
    let seen = prober.await.unwrap();
    eprintln!(
        "kill -9 of a shard master: the other shards granted {} times and refused {} ({:?}); the failed \
         shard granted again {:?} after the kill (detection + election + lock.quarantine-ms {QUARANTINE_MS})",
        seen.others_granted,
        seen.others_refused.len(),
        seen.others_refused.first(),
        back_after()
    );
    assert!(seen.others_refused.is_empty(), "the other shards refused: {:?}", seen.others_refused);
    assert!(back_after().is_some_and(|after| after > ms(QUARANTINE_MS)), "{:?}", back_after());
    guard.extend(TTL).await.expect("the holder extends on the promoted master");
    guard.release().await.expect("the holder releases on the promoted master");
    let next = other.try_acquire(key, Mode::Plain, TTL).await.expect("free after the release");
    next.release().await.expect("release");
    rl.settle().await;
    other.settle().await;
}

/// A cluster that lost a shard with no replica answers `CLUSTERDOWN`: that
/// member's answer is "no", and the error names the member and the cause.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clusterdown_is_that_members_no_and_says_why() {
    let mut cluster = RedisCluster::start(ClusterSpec::new(3, 0).node_timeout_ms(1_500));
    let member = cluster.member();
    let rl = client(std::slice::from_ref(&member)).await;
    let victim = cluster.masters()[2].port;
    let key = keys_elsewhere(&cluster, victim, "down").remove(0);
    let index = cluster.nodes.iter().position(|n| n.port == victim).unwrap();
    cluster.kill_and_wait_down(index);
    let error = rl.try_acquire(&key, Mode::Plain, TTL).await.expect_err("the cluster is down");
    let text = error.to_string();
    assert!(
        text.ends_with(&format!(
            "1 cluster unavailable (member 1 ({member}): CLUSTERDOWN The cluster is down)"
        )),
        "{text}"
    );
    match &error {
        Error::NoQuorum { tally, .. } => assert_eq!((tally.yes, tally.cluster_unavailable), (0, 1)),
        other => panic!("{other:?}"),
    }
    // `status` says the same: the shards that answer `INFO lock` (and
    // would read "grants") refuse every key while the cluster is down.
    let status = rl.status().await;
    assert_eq!((status.granting, status.granting_some_slots()), (0, 0), "{status:?}");
    let shards = &status.members[0];
    let live: Vec<String> = cluster.running().iter().map(|n| format!("127.0.0.1:{}", n.port)).collect();
    for node in shards.nodes.iter().filter(|n| live.contains(&n.node)) {
        match node.blocker() {
            Some(Blocker::Unreachable(why)) => {
                assert!(why.starts_with("CLUSTERDOWN: cluster_state:fail"), "{why}")
            }
            other => panic!("{}: {other:?}", node.node),
        }
    }
    assert_eq!(shards.nodes.iter().filter(|n| live.contains(&n.node)).count(), 2, "{shards:?}");
    let (code, report) = tokio::task::spawn_blocking(move || cli_status(&member)).await.unwrap();
    assert_eq!(code, common::UNREACHABLE, "{report}");
    assert!(report.contains("unreachable: CLUSTERDOWN: cluster_state:fail"), "{report}");
    rl.settle().await;
}

/// In a cluster member a set must be in one slot: a set across slots is
/// refused before any round, with the hash-tag advice; a set in one slot
/// (a hash tag) is granted, fenced, extended and released on its master.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_set_must_be_in_one_slot_of_a_cluster_member() {
    let cluster = shared();
    let rl = client(&[cluster.member()]).await;
    let spread = [("orders:1", Mode::Plain), ("orders:2", Mode::Plain)];
    let macquires = calls_everywhere(&cluster, "lock.macquire");
    let refused = rl.try_acquire_many(&spread, TTL).await.expect_err("across slots");
    let text = refused.to_string();
    assert!(matches!(refused, Error::InvalidArgument(_)), "{refused:?}");
    assert!(text.contains("'orders:1' (slot") && text.contains("'orders:2' (slot"), "{text}");
    assert!(text.contains("{orders}:1 and {orders}:2"), "{text}");
    let policy = RetryPolicy::attempts(3);
    assert!(matches!(rl.acquire_many(&spread, TTL, &policy).await, Err(Error::InvalidArgument(_))));
    assert!(matches!(rl.release_many(&["orders:1", "orders:2"], "t").await, Err(Error::InvalidArgument(_))));
    assert_eq!(calls_everywhere(&cluster, "lock.macquire"), macquires, "no round ran");

    let tagged = [("{orders}:1", Mode::Plain), ("{orders}:2", Mode::Read)];
    let guard = rl.try_acquire_many(&tagged, TTL).await.expect("one slot");
    let master = cluster.master_of("{orders}:1");
    assert_eq!(holder(master, "{orders}:1").as_deref(), Some(guard.token()));
    let fence = guard.fencing_token().await.expect("the set's fencing round (pipelined)");
    assert!(fence > 0);
    guard.extend(TTL).await.expect("renew");
    guard.release().await.expect("release");
    assert_free(&[master], "{orders}:1");
    rl.settle().await;
}

/// Masters and a cluster in one quorum: a cluster is one vote, and a
/// majority may be made of both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quorum_mixes_masters_and_a_cluster() {
    let cluster = shared();
    let mut masters = lock_testkit_client::cluster(2);
    let members = vec![masters[0].url(), cluster.member(), masters[1].url()];
    let rl = client(&members).await;
    assert_eq!(rl.majority(), 2);
    assert_eq!(rl.node_urls(), members);
    let key = "mixed:job";
    let guard = rl.try_acquire(key, Mode::Plain, TTL).await.expect("all three");
    guard.fencing_token().await.expect("fence");
    guard.release().await.expect("release");

    masters[1].kill();
    let guard = rl.try_acquire(key, Mode::Plain, TTL).await.expect("a master and the cluster");
    assert_eq!(holder(cluster.master_of(key), key).as_deref(), Some(guard.token()));
    assert_eq!(holder(&masters[0], key).as_deref(), Some(guard.token()));
    let fence = guard.fencing_token().await.expect("fence on a master and the cluster");
    assert!(fence > 0);
    let tally = rl.release(key, guard.token(), Mode::Plain).await.expect("released on two");
    assert_eq!((tally.yes, tally.unreachable), (2, 1), "{tally:?}");
    guard.detach();

    masters[0].kill();
    let error =
        rl.try_acquire(key, Mode::Plain, TTL).await.expect_err("the cluster alone is one vote of three");
    let text = error.to_string();
    assert!(
        text.starts_with("no quorum for 'mixed:job': 1 of 3 granted (need 2); 2 unreachable (first: "),
        "{text}"
    );
    rl.settle().await;
}

/// Valkey 9's atomic slot migration (`CLUSTER MIGRATESLOTS`) with locks
/// held in the slot: they move with every holder, and the client follows
/// the `MOVED` that comes after: extended, fenced and released there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn valkey_atomic_slot_migration_moves_held_locks() {
    let (product, (major, _)) = server_version();
    if product != "Valkey" || major < 9 {
        eprintln!("skipped: CLUSTER MIGRATESLOTS needs Valkey 9 ({} here)", server_name());
        return;
    }
    let cluster = RedisCluster::start(ClusterSpec::new(3, 0));
    let rl = client(&[cluster.member()]).await;
    let (plain, read) = ("{asm}:plain", "{asm}:read");
    let slot = cluster.slot(plain);
    let from = cluster.master_of(plain);
    let to = cluster.masters().into_iter().find(|m| m.port != from.port).unwrap();
    let guard = rl.try_acquire(plain, Mode::Plain, TTL).await.expect("acquire");
    let reader = rl.try_acquire(read, Mode::Read, TTL).await.expect("read");
    let set =
        rl.try_acquire_many(&[("{asm}:a", Mode::Plain), ("{asm}:b", Mode::Write)], TTL).await.expect("set");

    cluster.migrate_slot_atomically(slot, to);
    assert_eq!(holder(to, plain).as_deref(), Some(guard.token()));
    for g in [&guard, &reader, &set] {
        g.extend(TTL).await.expect("extend after the migration");
        assert!(g.fencing_token().await.expect("fence after the migration") > 0);
    }
    let taken = rl.try_acquire(plain, Mode::Plain, TTL).await.expect_err("still held");
    assert!(matches!(taken, Error::Contended { .. }), "{taken}");
    for g in [guard, reader, set] {
        g.release().await.expect("release after the migration");
    }
    rl.settle().await;
    assert_eq!(cmd("DBSIZE").query::<i64>(&mut to.conn()).unwrap(), 0);
}

/// The `redlock` CLI with a cluster member in `REDLOCK_NODES`: acquire
/// (with its fencing token), extend, info (the shard that answered) and
/// release, as a user would.
#[test]
fn the_cli_takes_a_cluster_member() {
    let cluster = shared();
    let run = |words: &[&str], token: Option<&str>| {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_redlock"));
        cmd.env("REDLOCK_NODES", cluster.member()).args(["--timeout", "500"]).args(words);
        cmd.env_remove("REDLOCK_TOKEN");
        if let Some(token) = token {
            cmd.env("REDLOCK_TOKEN", token);
        }
        let out = cmd.output().expect("run redlock");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let key = "cli:cluster";
    let (code, stdout, stderr) = run(&["acquire", key, "--ttl", "10000"], None);
    assert_eq!(code, Some(0), "{stderr}");
    let value = |name: &str| {
        stdout
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{name}=")))
            .unwrap_or_else(|| panic!("{stdout}"))
            .to_string()
    };
    let token = value("REDLOCK_TOKEN");
    assert!(value("REDLOCK_FENCING_TOKEN").parse::<u64>().unwrap() > 0);
    let master = cluster.master_of(key);
    assert_eq!(holder(master, key).as_deref(), Some(token.as_str()));
    let (code, _, stderr) = run(&["extend", key, "--ttl", "20000"], Some(&token));
    assert_eq!(code, Some(0), "{stderr}");
    assert!(info_int(&mut master.conn(), key, "ttl-ms").unwrap() > 15_000);
    let (code, table, _) = run(&["info", key], None);
    assert_eq!(code, Some(0));
    let row: Vec<&str> = table.lines().nth(1).unwrap_or_default().split_whitespace().collect();
    assert_eq!(
        row[..4],
        [cluster.member().as_str(), &format!("127.0.0.1:{}", master.port), "held", "plain"],
        "{table}"
    );
    let (code, _, stderr) = run(&["release", key, "--token", &token], None);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(holder(master, key), None);
    // A bad cluster spelling is a usage error that says what to write.
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_redlock"));
    cmd.env("REDLOCK_NODES", "redis+cluster://127.0.0.1:1/2").args(["acquire", key]);
    let out = cmd.output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("a cluster has database 0 only"));
}

/// `redlock status` through a cluster member, run to completion (bounded):
/// its exit code and what it printed.
fn cli_status(member: &str) -> (i32, String) {
    let mut cmd = std::process::Command::new(common::BIN);
    cmd.env("REDLOCK_NODES", member).args(["--timeout", "500", "--connect-timeout", "500", "status"]);
    let out = common::run_bounded(cmd, Duration::from_secs(10));
    let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
    (out.status.code().unwrap_or(-1), format!("{}{}", text(&out.stdout), text(&out.stderr)))
}

fn line<'a>(report: &'a str, start: &str) -> &'a str {
    report.lines().find(|l| l.starts_with(start)).unwrap_or_else(|| panic!("no line {start:?}:\n{report}"))
}

/// `status` (Rust and the CLI) through a cluster member asks every shard
/// master: one row each. The member grants only when every shard does; a
/// quarantined shard leaves it granting the keys of the other shards'
/// slots only, and says so (and those keys are indeed granted, the
/// quarantined shard's refused). A killed shard master is unreachable for
/// that member while the other shards answer, and once the cluster
/// marks it failed its slots are named as served by no master. A cluster
/// member no seed of which answers says why.
#[test]
fn status_asks_every_shard_master_of_a_cluster_member() {
    let opts = Opts::new().module_arg("quarantine-ms", "30000").config("cluster-require-full-coverage", "no");
    let mut cluster = RedisCluster::start(ClusterSpec::new(3, 0).opts(opts).node_timeout_ms(1_500));
    let masters: Vec<u16> = cluster.masters().iter().map(|m| m.port).collect();
    let addr = |port: u16| format!("127.0.0.1:{port}");
    // Every shard but the first ends its start-up quarantine.
    for &port in &masters[1..] {
        let left: i64 =
            cmd("LOCK.UNQUARANTINE").arg("STARTUP").query(&mut cluster.node(port).conn()).unwrap();
        assert!(left > 0);
    }
    let member = cluster.member();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let rl = runtime.block_on(client(std::slice::from_ref(&member)));
    let status = runtime.block_on(rl.status());
    let [shards] = &status.members[..] else { panic!("one member: {status:?}") };
    let mut rows: Vec<&str> = shards.nodes.iter().map(|n| n.node.as_str()).collect();
    rows.sort_unstable();
    let mut expected: Vec<String> = masters.iter().map(|&p| addr(p)).collect();
    expected.sort_unstable();
    assert_eq!(rows, expected, "one row per shard master");
    for node in &shards.nodes {
        match node.blocker() {
            None => assert_ne!(node.node, addr(masters[0])),
            Some(Blocker::Quarantined(q)) => {
                assert_eq!((node.node.as_str(), q.reason.as_str()), (addr(masters[0]).as_str(), "startup"));
                assert!(q.ms_left > 10_000, "{q:?}");
            }
            other => panic!("{}: {other:?}", node.node),
        }
    }
    assert!(shards.grants_some_slots());
    assert!(matches!(shards.blocker(), Some(Blocker::Quarantined(_))));
    assert_eq!((status.granting, status.granting_some_slots()), (0, 1));
    assert!(matches!(status.readiness, Readiness::Blocked { cause: Some(Blocker::Quarantined(_)), .. }));
    // What the verdict says is what a call meets.
    let keys = cluster.keys_per_master("status", 1);
    runtime.block_on(async {
        let granted = rl.try_acquire(&keys[1][0], Mode::Plain, TTL).await.expect("a granting shard's key");
        granted.release().await.expect("release");
        let refused = rl.try_acquire(&keys[0][0], Mode::Plain, TTL).await.expect_err("the quarantined shard");
        assert!(refused.to_string().contains("quarantine"), "{refused}");
    });
    let (code, report) = cli_status(&member);
    assert_eq!(code, common::QUARANTINED, "{report}");
    assert!(
        line(&report, &member).ends_with("cluster: grants some slots only (2 of 3 shards grant)"),
        "{report}"
    );
    assert!(line(&report, &format!("  {}", addr(masters[0]))).contains("startup"), "{report}");
    assert!(line(&report, &format!("  {}", addr(masters[1]))).contains(" grants "), "{report}");
    assert!(report.ends_with("keys of the granting shards' slots may still be granted\n"), "{report}");

    // The quarantine ends: every shard grants.
    let left: i64 =
        cmd("LOCK.UNQUARANTINE").arg("STARTUP").query(&mut cluster.node(masters[0]).conn()).unwrap();
    assert!(left > 0);
    let (code, report) = cli_status(&member);
    assert_eq!(code, common::OK, "{report}");
    assert!(line(&report, &member).ends_with("cluster: grants every slot (3 of 3 shards grant)"), "{report}");
    assert!(report.ends_with("a majority can grant now: 1 of 1 members grant (need 1)\n"), "{report}");

    // kill -9 of a shard master (no replica): unreachable for this member,
    // the other shards answer; once the cluster marks it failed, the map
    // has no master for its slots, and that is said instead.
    let victim = masters[2];
    let index = cluster.nodes.iter().position(|n| n.port == victim).unwrap();
    cluster.nodes[index].kill();
    let (mut dead_node, mut unserved) = (false, false);
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !unserved {
        assert!(std::time::Instant::now() < deadline, "no map without the killed master\n{}", cluster.logs());
        let status = runtime.block_on(rl.status());
        let shards = &status.members[0];
        assert!(matches!(shards.blocker(), Some(Blocker::Unreachable(_))), "{shards:?}");
        assert_eq!(status.granting, 0);
        for node in &shards.nodes {
            match node.blocker() {
                None => assert!(node.node == addr(masters[0]) || node.node == addr(masters[1]), "{node:?}"),
                Some(Blocker::Unreachable(why)) if node.node == addr(victim) => dead_node |= !why.is_empty(),
                Some(Blocker::Unreachable(why)) if node.node.ends_with(" slots") => {
                    assert!(why.contains("no master serves") && why.contains(&member), "{why}");
                    unserved = true;
                }
                other => panic!("{}: {other:?}", node.node),
            }
        }
        assert_eq!(shards.nodes_granting(), (2, 3), "{shards:?}");
        std::thread::sleep(ms(100));
    }
    eprintln!("the killed master seen as unreachable before the map dropped it: {dead_node}");
    let (code, report) = cli_status(&member);
    assert_eq!(code, common::UNREACHABLE, "{report}");
    assert!(line(&report, &member).ends_with("(2 of 3 shards grant)"), "{report}");
    assert!(report.contains(" slots  unreachable: ") && report.contains("no master serves"), "{report}");

    // A cluster member no seed of which answers: one row that says why.
    let gone = format!("redis+cluster://{}", addr(victim));
    let status = runtime.block_on(async { client(std::slice::from_ref(&gone)).await.status().await });
    let node = &status.members[0].nodes[..];
    assert_eq!(node.len(), 1, "{node:?}");
    match &node[0].health {
        Err(Blocker::Unreachable(why)) => {
            assert!(why.contains("member 1") && why.contains(&addr(victim)), "{why}")
        }
        other => panic!("{other:?}"),
    }
    let (code, report) = cli_status(&gone);
    assert_eq!(code, common::UNREACHABLE, "{report}");
    assert!(line(&report, &gone).contains("unreachable: member 1"), "{report}");
    runtime.block_on(rl.settle());
}
