//! The quorum client through cluster members: real Redis / Valkey
//! Clusters (the test kit's [`RedisCluster`]), with the module on every
//! node. Routing over every shard, MOVED after a resharding, ASK during a
//! migration, Valkey's atomic slot migration, failovers, CLUSTERDOWN, sets
//! and slots, and quorums that mix masters and clusters.
//!
//! Tests that only take locks share one cluster (and one set of masters);
//! a test that moves slots or kills nodes starts its own.

use std::sync::OnceLock;
use std::time::Duration;

use lock_testkit_client::*;
use redlock_client::{Config, Error, Mode, Redlock, RetryPolicy};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

const TTL: Duration = Duration::from_secs(10);

/// One cluster of three shards (a master and a replica each) shared by the
/// tests that disturb nothing.
fn shared() -> &'static RedisCluster {
    static CLUSTER: OnceLock<RedisCluster> = OnceLock::new();
    CLUSTER.get_or_init(|| RedisCluster::start(ClusterSpec::new(3, 1)))
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
            assert_eq!(cmd("EXISTS").arg(key).query::<i64>(&mut other.conn()).map_err(|e| e.code().map(String::from)), Err(Some("MOVED".into())), "{key}");
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
    assert_eq!(info[0].shard.as_deref(), Some(format!("127.0.0.1:{}", cluster.master_of("{route}:a").port).as_str()));
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
    assert_eq!(calls(from, "lock.fence") + calls(from, "lock.release"), at_old, "no call went to the old master");
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
