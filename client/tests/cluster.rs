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
