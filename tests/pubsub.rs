//! Pub/sub on free: `released` or `expired` on `__lock@<db>__:<key>` when a
//! lock is freed and no waiter takes it; nothing when a waiter is handed it;
//! nothing at all with `lock.publish-freed no`, the default. In a cluster: a sharded
//! message, heard at the key's shard only, on a channel in the key's slot.

use std::time::Duration;

use lock_testkit::{
    cluster_info, cmd, info_stat, int, keyslot, wait_until, ClusterSpec, Connection, Opts, RedisCluster,
    Server, Value,
};

const CHANNEL: &str = "__lock@0__:job";

/// The next message on the subscription, or None within `within`.
fn next_message(pubsub: &mut redis::PubSub<'_>, within: Duration) -> Option<String> {
    pubsub.set_read_timeout(Some(within)).unwrap();
    match pubsub.get_message() {
        Ok(msg) => Some(msg.get_payload().unwrap()),
        Err(e) if e.is_timeout() => None,
        Err(e) => panic!("pub/sub read failed: {e}"),
    }
}

#[test]
fn freed_locks_are_announced_unless_handed_off_or_turned_off() {
    let server = Server::start();
    let mut c = server.conn();
    let mut sub_conn = server.conn();
    let mut pubsub = sub_conn.as_pubsub();
    pubsub.subscribe(CHANNEL).unwrap();

    // Off by default: a release announces nothing.
    assert_eq!(info_stat(&mut c, "publish_freed"), 0);
    int(&mut c, &["LOCK.ACQUIRE", "job", "a", "10000"]);
    assert_eq!(int(&mut c, &["LOCK.RELEASE", "job", "a"]), 1);
    assert_eq!(next_message(&mut pubsub, Duration::from_millis(300)), None, "off by default");
    let _: () = cmd("CONFIG").arg("SET").arg("lock.publish-freed").arg("yes").query(&mut c).unwrap();
    assert_eq!(info_stat(&mut c, "publish_freed"), 1);

    // A release.
    int(&mut c, &["LOCK.ACQUIRE", "job", "a", "10000"]);
    assert_eq!(int(&mut c, &["LOCK.RELEASE", "job", "a"]), 1);
    assert_eq!(next_message(&mut pubsub, Duration::from_secs(5)).as_deref(), Some("released"));

    // A reentrant lock: only the exit that frees it.
    int(&mut c, &["LOCK.ENTER", "job", "o", "10000"]);
    int(&mut c, &["LOCK.ENTER", "job", "o", "10000"]);
    assert_eq!(int(&mut c, &["LOCK.EXIT", "job", "o"]), 1);
    assert_eq!(next_message(&mut pubsub, Duration::from_millis(200)), None, "still held once");
    assert_eq!(int(&mut c, &["LOCK.EXIT", "job", "o"]), 0);
    assert_eq!(next_message(&mut pubsub, Duration::from_secs(5)).as_deref(), Some("released"));

    // An expired lock found by a write.
    int(&mut c, &["LOCK.ACQUIRE", "job", "a", "50"]);
    std::thread::sleep(Duration::from_millis(120));
    assert_eq!(int(&mut c, &["LOCK.RELEASE", "job", "a"]), 0);
    assert_eq!(next_message(&mut pubsub, Duration::from_secs(5)).as_deref(), Some("expired"));

    // A read-write lock: when its last reader leaves, not before.
    int(&mut c, &["LOCK.SHARED", "job", "r1", "10000"]);
    int(&mut c, &["LOCK.SHARED", "job", "r2", "10000"]);
    assert_eq!(int(&mut c, &["LOCK.RELEASE", "job", "r1"]), 1);
    assert_eq!(next_message(&mut pubsub, Duration::from_millis(200)), None, "r2 still reads");
    assert_eq!(int(&mut c, &["LOCK.RELEASE", "job", "r2"]), 1);
    assert_eq!(next_message(&mut pubsub, Duration::from_secs(5)).as_deref(), Some("released"));

    // Handed to a waiter: nobody else needs to hear of it.
    int(&mut c, &["LOCK.ACQUIRE", "job", "a", "10000"]);
    let url = server.url();
    let waiter = std::thread::spawn(move || {
        let mut w = redis::Client::open(url).unwrap().get_connection().unwrap();
        let v: i64 = cmd("LOCK.ACQUIRE")
            .arg("job")
            .arg("b")
            .arg(10_000)
            .arg("WAIT")
            .arg(10_000)
            .query(&mut w)
            .unwrap();
        v
    });
    wait_until(Duration::from_secs(5), "the waiter queued", || info_stat(&mut c, "waiters") == 1);
    assert_eq!(int(&mut c, &["LOCK.RELEASE", "job", "a"]), 1);
    assert!(waiter.join().unwrap() > 0);
    assert_eq!(next_message(&mut pubsub, Duration::from_millis(300)), None, "handed off, not announced");
    assert_eq!(int(&mut c, &["LOCK.RELEASE", "job", "b"]), 1);
    assert_eq!(next_message(&mut pubsub, Duration::from_secs(5)).as_deref(), Some("released"));

    // Turned off.
    let _: () = cmd("CONFIG").arg("SET").arg("lock.publish-freed").arg("no").query(&mut c).unwrap();
    assert_eq!(info_stat(&mut c, "publish_freed"), 0);
    int(&mut c, &["LOCK.ACQUIRE", "job", "a", "10000"]);
    assert_eq!(int(&mut c, &["LOCK.RELEASE", "job", "a"]), 1);
    assert_eq!(next_message(&mut pubsub, Duration::from_millis(300)), None);
}

/// A connection that subscribed to `channel` at `node` with `verb`
/// (`SUBSCRIBE` or `SSUBSCRIBE`), after `READONLY` when `readonly`.
fn listener(node: &Server, verb: &str, channel: &str, readonly: bool) -> Connection {
    let mut c = node.conn();
    if readonly {
        let _: () = cmd("READONLY").query(&mut c).unwrap();
    }
    c.send_packed_command(&cmd(verb).arg(channel).get_packed_command()).unwrap();
    let confirmed =
        heard(&mut c, Duration::from_secs(10)).unwrap_or_else(|| panic!("{verb} {channel}: no answer"));
    assert_eq!(confirmed.0, verb.to_lowercase(), "{verb} {channel} at {}: {confirmed:?}", node.port);
    c
}

/// The next push on a subscribed connection as (kind, channel, payload),
/// or None within `within`.
fn heard(c: &mut Connection, within: Duration) -> Option<(String, String, String)> {
    c.set_read_timeout(Some(within)).unwrap();
    match c.recv_response() {
        Ok(Value::Array(items)) => {
            let words: Vec<String> = items
                .iter()
                .map(|item| match item {
                    Value::Int(n) => n.to_string(),
                    other => redis::from_redis_value(other).unwrap(),
                })
                .collect();
            match &words[..] {
                [kind, channel, payload] => Some((kind.clone(), channel.clone(), payload.clone())),
                _ => panic!("a push of {} items: {words:?}", words.len()),
            }
        }
        Ok(other) => panic!("not a push: {other:?}"),
        Err(e) if e.is_timeout() => None,
        Err(e) => panic!("subscriber read failed: {e}"),
    }
}

/// The next message heard on `c` is `payload` on `channel` (as `kind`).
fn hears(c: &mut Connection, kind: &str, channel: &str, payload: &str, who: &str) {
    let got = heard(c, Duration::from_secs(10));
    assert_eq!(got, Some((kind.into(), channel.into(), payload.into())), "{who}");
}

/// The pub/sub messages a cluster node has sent over the cluster bus:
/// (classic, sharded), as `CLUSTER INFO` counts them (one per receiving
/// node; a counter still at zero is not listed).
fn bus_messages_sent(c: &mut Connection) -> (u64, u64) {
    let info = cluster_info(c);
    let count = |name: &str| {
        info.iter().find(|(field, _)| field == name).map_or(0, |(_, value)| value.parse::<u64>().unwrap())
    };
    (count("cluster_stats_messages_publish_sent"), count("cluster_stats_messages_publishshard_sent"))
}

#[test]
fn in_a_cluster_freed_locks_are_announced_to_the_keys_shard_only() {
    let cluster =
        RedisCluster::start(ClusterSpec::new(3, 1).opts(Opts::new().module_arg("publish-freed", "yes")));
    // A key with a hash tag keeps its channel; one without becomes the tag.
    for (key, channel) in [("{user:7}:job", "__lock@0__:{user:7}:job"), ("job", "__lock@0__:{job}")] {
        let owner = cluster.master_of(key);
        let mut c = owner.conn();
        assert_eq!(keyslot(&mut c, channel), keyslot(&mut c, key), "{channel} is in {key}'s slot");
        let replica = cluster.replicas_of(owner)[0];
        // A sharded message goes to the replicas the master knows of (the
        // replica learns its master first).
        let replica_id = cluster.id(replica).to_string();
        let master_id = cluster.id(owner).to_string();
        wait_until(Duration::from_secs(60), "the master knows its replica", || {
            let known: Vec<String> = cmd("CLUSTER").arg("REPLICAS").arg(&master_id).query(&mut c).unwrap();
            known.iter().any(|line| line.starts_with(&replica_id))
        });
        let other = *cluster.masters().iter().find(|m| m.port != owner.port).unwrap();
        let mut at_master = listener(owner, "SSUBSCRIBE", channel, false);
        let mut at_replica = listener(replica, "SSUBSCRIBE", channel, true);
        // Where a classic PUBLISH would reach: any node, on the classic name.
        let classic = format!("__lock@0__:{key}");
        let mut elsewhere = listener(other, "SUBSCRIBE", &classic, false);

        let sent_before = bus_messages_sent(&mut c);
        int(&mut c, &["LOCK.ACQUIRE", key, "a", "10000"]);
        assert_eq!(int(&mut c, &["LOCK.RELEASE", key, "a"]), 1);
        hears(&mut at_master, "smessage", channel, "released", "the master, released");
        hears(&mut at_replica, "smessage", channel, "released", "the replica, released");

        int(&mut c, &["LOCK.ACQUIRE", key, "a", "50"]);
        std::thread::sleep(Duration::from_millis(120));
        assert_eq!(int(&mut c, &["LOCK.RELEASE", key, "a"]), 0);
        hears(&mut at_master, "smessage", channel, "expired", "the master, expired");
        hears(&mut at_replica, "smessage", channel, "expired", "the replica, expired");
        // Two announcements, each one bus message to the shard's one
        // replica, and no classic publish to every node.
        let (publish, shard) = sent_before;
        assert_eq!(bus_messages_sent(&mut c), (publish, shard + 2), "(publish, publishshard) sent");

        // A classic PUBLISH from the owner reaches the other master over
        // the same cluster-bus link after anything sent before it: so the
        // first message heard there proves that no announcement was.
        let _: i64 = cmd("PUBLISH").arg(&classic).arg("marker").query(&mut c).unwrap();
        hears(&mut elsewhere, "message", &classic, "marker", "another master heard no announcement");
    }

    // A key with no tag but a `}`, or an empty key: no channel in the
    // key's slot exists; the classic broadcast, heard on every node.
    for key in ["a}b", ""] {
        let channel = format!("__lock@0__:{key}");
        let owner = cluster.master_of(key);
        let other = *cluster.masters().iter().find(|m| m.port != owner.port).unwrap();
        let mut elsewhere = listener(other, "SUBSCRIBE", &channel, false);
        let mut c = owner.conn();
        int(&mut c, &["LOCK.ACQUIRE", key, "a", "10000"]);
        assert_eq!(int(&mut c, &["LOCK.RELEASE", key, "a"]), 1);
        hears(&mut elsewhere, "message", &channel, "released", &format!("{key:?}: broadcast"));
    }
}
