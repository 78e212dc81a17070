//! The lock commands in a Redis Cluster: three masters on loopback, each
//! with the module loaded and a third of the slots.
//!
//! The commands declare their key (argv[1], first/last/step 1/1/1 and a key
//! spec), so Redis routes them like any core command: a node that does not
//! own the key's slot answers MOVED, a cluster client follows the slot map,
//! and `COMMAND GETKEYS` / `COMMAND INFO` describe them.

use lock_testkit::*;

use std::time::{Duration, Instant};

use redis::cluster::{ClusterClient, ClusterConnection};
use redis::{ErrorKind, RedisResult};

/// The slot ranges the test kit gives node 0, 1 and 2 (equal shares).
const RANGES: [(u16, u16); 3] = [(0, 5460), (5461, 10921), (10922, 16383)];

/// Three masters with the module, the slots in [`RANGES`], met, and
/// agreeing that the cluster is ok (the test kit's [`RedisCluster`]).
fn start_cluster() -> RedisCluster {
    let cluster = RedisCluster::start(ClusterSpec::new(3, 0));
    for (node, &(first, last)) in cluster.nodes.iter().zip(RANGES.iter()) {
        assert_eq!(cluster.master_of_slot(first).port, node.port, "slot {first}");
        assert_eq!(cluster.master_of_slot(last).port, node.port, "slot {last}");
    }
    cluster
}

fn owner_of(slot: u16) -> usize {
    RANGES.iter().position(|&(first, last)| (first..=last).contains(&slot)).expect("slot in range")
}

/// `count` keys with the given prefix for each node, with their slots.
fn keys_per_node(c: &mut Connection, prefix: &str, count: usize) -> Vec<Vec<(String, u16)>> {
    let mut per_node: Vec<Vec<(String, u16)>> = vec![Vec::new(); 3];
    for i in 0..10_000 {
        if per_node.iter().all(|keys| keys.len() >= count) {
            return per_node;
        }
        let key = format!("{prefix}:{i}");
        let slot = keyslot(c, &key);
        let keys = &mut per_node[owner_of(slot)];
        if keys.len() < count {
            keys.push((key, slot));
        }
    }
    panic!("could not find {count} keys per node");
}

fn cluster_conn(nodes: &[Server]) -> ClusterConnection {
    let urls: Vec<String> = nodes.iter().map(Server::url).collect();
    ClusterClient::builder(urls)
        .connection_timeout(Duration::from_secs(2))
        .response_timeout(Duration::from_secs(10))
        .build()
        .expect("cluster client")
        .get_connection()
        .expect("cluster connection")
}

fn ccall(cc: &mut ClusterConnection, words: &[&str]) -> RedisResult<Value> {
    let mut command = cmd(words[0]);
    for w in &words[1..] {
        command.arg(*w);
    }
    command.query(cc)
}

fn as_int(v: &Value) -> i64 {
    redis::from_redis_value(v).unwrap_or_else(|e| panic!("not an integer: {v:?}: {e}"))
}

/// `LOCK.INFO` reply as (field, value) pairs; None for nil.
fn info_fields(v: &Value) -> Option<Vec<(String, Value)>> {
    match v {
        Value::Nil => None,
        Value::Array(items) => {
            Some(items.chunks(2).map(|p| (redis::from_redis_value(&p[0]).unwrap(), p[1].clone())).collect())
        }
        other => panic!("unexpected LOCK.INFO reply {other:?}"),
    }
}

fn get<'a>(fields: &'a [(String, Value)], name: &str) -> &'a Value {
    &fields.iter().find(|(k, _)| k == name).unwrap_or_else(|| panic!("LOCK.INFO has no {name}: {fields:?}")).1
}

fn exists(c: &mut Connection, key: &str) -> RedisResult<i64> {
    cmd("EXISTS").arg(key).query(c)
}

#[test]
fn lock_commands_route_to_the_owner_of_each_slot() {
    let started = Instant::now();
    let cluster = start_cluster();
    let nodes = &cluster.nodes;
    let mut direct: Vec<Connection> = nodes.iter().map(Server::conn).collect();
    let plain_keys = keys_per_node(&mut direct[0], "plain", 2);
    let reentrant_keys = keys_per_node(&mut direct[0], "reentrant", 2);
    let mut cc = cluster_conn(nodes);
    let grants_before: Vec<i64> = direct.iter_mut().map(|c| info_stat(c, "grants")).collect();

    // Plain locks: every command through the cluster client, on keys of
    // all three nodes.
    for (owner, keys) in plain_keys.iter().enumerate() {
        for (key, slot) in keys {
            let fence = as_int(&ccall(&mut cc, &["LOCK.ACQUIRE", key, "tok-a", "10000"]).unwrap());
            assert!(fence > 0, "{key}: fence {fence}");
            assert_eq!(
                ccall(&mut cc, &["LOCK.ACQUIRE", key, "tok-b", "10000"]).unwrap(),
                Value::Nil,
                "{key} is held by tok-a"
            );
            assert_eq!(
                as_int(&ccall(&mut cc, &["LOCK.ACQUIRE", key, "tok-a", "10000"]).unwrap()),
                fence,
                "{key}: idempotent re-acquire keeps the token"
            );
            // The key lives on the owner of its slot, and only there.
            assert_eq!(exists(&mut direct[owner], key).unwrap(), 1, "{key} on its owner");
            let stored: Vec<u8> = cmd("GET").arg(key).query(&mut direct[owner]).unwrap();
            assert!(stored.starts_with(b"LK1|P|"), "{key}: {stored:?}");
            for (i, c) in direct.iter_mut().enumerate() {
                if i != owner {
                    let e = exists(c, key).expect_err("non-owner must redirect");
                    assert_eq!(e.kind(), ErrorKind::Moved, "{key} on node {i}: {e}");
                }
            }

            let info = info_fields(&ccall(&mut cc, &["LOCK.INFO", key]).unwrap())
                .unwrap_or_else(|| panic!("{key}: LOCK.INFO nil while held"));
            let kind: String = redis::from_redis_value(get(&info, "kind")).unwrap();
            let holder: String = redis::from_redis_value(get(&info, "holder")).unwrap();
            assert_eq!((kind.as_str(), holder.as_str()), ("plain", "tok-a"));
            assert_eq!(as_int(get(&info, "fence")), fence);
            let ttl = as_int(get(&info, "ttl-ms"));
            assert!(ttl > 0 && ttl <= 10_000, "{key}: ttl {ttl}");

            assert_eq!(ccall(&mut cc, &["LOCK.EXTEND", key, "tok-a", "20000"]).unwrap(), Value::Int(1));
            assert_eq!(ccall(&mut cc, &["LOCK.EXTEND", key, "tok-b", "20000"]).unwrap(), Value::Int(0));
            let info = info_fields(&ccall(&mut cc, &["LOCK.INFO", key]).unwrap()).unwrap();
            let ttl = as_int(get(&info, "ttl-ms"));
            assert!(ttl > 10_000 && ttl <= 20_000, "{key}: extended ttl {ttl}");

            let floor = (fence + 5).to_string();
            assert_eq!(ccall(&mut cc, &["LOCK.FENCE", key, "tok-a", &floor]).unwrap(), Value::Int(1));

            assert_eq!(ccall(&mut cc, &["LOCK.RELEASE", key, "tok-b"]).unwrap(), Value::Int(0));
            assert_eq!(ccall(&mut cc, &["LOCK.RELEASE", key, "tok-a"]).unwrap(), Value::Int(1));
            assert_eq!(exists(&mut direct[owner], key).unwrap(), 0, "{key} freed");
            assert_eq!(ccall(&mut cc, &["LOCK.INFO", key]).unwrap(), Value::Nil);

            // The next holder on that node gets a token above the fenced floor.
            let next = as_int(&ccall(&mut cc, &["LOCK.ACQUIRE", key, "tok-c", "5000"]).unwrap());
            assert!(next > fence + 5, "{key} (slot {slot}): {next} after floor {floor}");
            assert_eq!(ccall(&mut cc, &["LOCK.RELEASE", key, "tok-c"]).unwrap(), Value::Int(1));
        }
    }

    // Reentrant locks likewise.
    for (owner, keys) in reentrant_keys.iter().enumerate() {
        for (key, _) in keys {
            let fence = as_int(&ccall(&mut cc, &["LOCK.ENTER", key, "own-a", "10000"]).unwrap());
            assert_eq!(as_int(&ccall(&mut cc, &["LOCK.ENTER", key, "own-a", "10000"]).unwrap()), fence);
            assert_eq!(ccall(&mut cc, &["LOCK.ENTER", key, "own-b", "10000"]).unwrap(), Value::Nil);
            assert_eq!(exists(&mut direct[owner], key).unwrap(), 1);
            let info = info_fields(&ccall(&mut cc, &["LOCK.INFO", key]).unwrap()).unwrap();
            assert_eq!(as_int(get(&info, "holds")), 2, "{key}");
            assert_eq!(ccall(&mut cc, &["LOCK.EXIT", key, "own-a"]).unwrap(), Value::Int(1));
            assert_eq!(ccall(&mut cc, &["LOCK.EXIT", key, "own-a"]).unwrap(), Value::Int(0));
            assert_eq!(exists(&mut direct[owner], key).unwrap(), 0);
        }
    }

    // Each node granted exactly the locks whose slots it owns: 2 grants per
    // plain key (tok-a, tok-c) and 1 per reentrant key.
    for (i, c) in direct.iter_mut().enumerate() {
        let granted = info_stat(c, "grants") - grants_before[i];
        let expected = (2 * plain_keys[i].len() + reentrant_keys[i].len()) as i64;
        assert_eq!(granted, expected, "grants on node {i}");
        let dbsize: i64 = cmd("DBSIZE").query(c).unwrap();
        assert_eq!(dbsize, 0, "node {i} left keys behind");
    }
    eprintln!("cluster routing test took {:?}", started.elapsed());
}

#[test]
fn wrong_node_answers_moved_for_every_lock_command() {
    let cluster = start_cluster();
    let nodes = &cluster.nodes;
    let mut direct: Vec<Connection> = nodes.iter().map(Server::conn).collect();
    let keys = keys_per_node(&mut direct[0], "moved", 1);
    for (owner, keys) in keys.iter().enumerate() {
        let (key, slot) = &keys[0];
        let owner_addr = format!("127.0.0.1:{}", nodes[owner].port);
        let calls: [&[&str]; 10] = [
            &["LOCK.ACQUIRE", key, "t", "1000"],
            &["LOCK.ENTER", key, "t", "1000"],
            &["LOCK.SHARED", key, "t", "1000"],
            &["LOCK.EXCLUSIVE", key, "t", "1000"],
            &["LOCK.SEMAPHORE", key, "t", "2", "1000"],
            &["LOCK.RELEASE", key, "t"],
            &["LOCK.EXTEND", key, "t", "1000"],
            &["LOCK.EXIT", key, "t"],
            &["LOCK.FENCE", key, "t", "1"],
            &["LOCK.INFO", key],
        ];
        for (i, c) in direct.iter_mut().enumerate() {
            if i == owner {
                continue;
            }
            let grants = info_stat(c, "grants");
            let dbsize: i64 = cmd("DBSIZE").query(c).unwrap();
            for call in calls {
                let words: Vec<&[u8]> = call.iter().map(|w| w.as_bytes()).collect();
                let e = run(c, &words).expect_err("wrong node must not run the command");
                assert_eq!(e.kind(), ErrorKind::Moved, "{call:?} on node {i}: {e}");
                assert_eq!(
                    e.redirect_node(),
                    Some((owner_addr.as_str(), *slot)),
                    "{call:?} on node {i}: {e}"
                );
            }
            assert_eq!(info_stat(c, "grants"), grants, "node {i} granted nothing");
            let after: i64 = cmd("DBSIZE").query(c).unwrap();
            assert_eq!(after, dbsize, "node {i} stored nothing");
        }
        // The owner runs it.
        let fence = run(&mut direct[owner], &[b"LOCK.ACQUIRE", key.as_bytes(), b"t", b"1000"])
            .unwrap_or_else(|e| panic!("owner of {key}: {e}"));
        assert!(as_int(&fence) > 0);
        assert_eq!(exists(&mut direct[owner], key).unwrap(), 1);
    }
}

/// Flattens a reply into words, for "contains" checks on nested metadata.
fn words(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Array(items) | Value::Set(items) => items.iter().for_each(|i| words(i, out)),
        Value::Map(pairs) => pairs.iter().for_each(|(k, v)| {
            words(k, out);
            words(v, out);
        }),
        Value::BulkString(b) => out.push(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => out.push(s.clone()),
        Value::Int(n) => out.push(n.to_string()),
        Value::Okay => out.push("OK".into()),
        Value::Nil => out.push("(nil)".into()),
        other => out.push(format!("{other:?}")),
    }
}

/// The value that follows `name` in a flat RESP2 map (array of pairs).
fn map_get<'a>(v: &'a Value, name: &str) -> Option<&'a Value> {
    let Value::Array(items) = v else {
        return None;
    };
    items.chunks(2).find_map(|p| match &p[0] {
        Value::BulkString(b) if b == name.as_bytes() => p.get(1),
        Value::SimpleString(s) if s == name => p.get(1),
        _ => None,
    })
}

#[test]
fn command_metadata_declares_the_key() {
    let cluster = start_cluster();
    let nodes = &cluster.nodes;
    let mut c = nodes[0].conn();

    let getkeys = |c: &mut Connection, call: &[&str]| -> Vec<String> {
        let mut command = cmd("COMMAND");
        command.arg("GETKEYS");
        for w in call {
            command.arg(*w);
        }
        command.query(c).unwrap_or_else(|e| panic!("COMMAND GETKEYS {call:?}: {e}"))
    };
    assert_eq!(getkeys(&mut c, &["LOCK.ACQUIRE", "k", "t", "100"]), ["k"]);
    assert_eq!(getkeys(&mut c, &["LOCK.ACQUIRE", "k", "t", "100", "WAIT", "5"]), ["k"]);
    assert_eq!(getkeys(&mut c, &["LOCK.ENTER", "{x}k", "o", "100"]), ["{x}k"]);
    assert_eq!(getkeys(&mut c, &["LOCK.RELEASE", "k2", "t"]), ["k2"]);
    assert_eq!(getkeys(&mut c, &["LOCK.EXTEND", "k3", "t", "100"]), ["k3"]);
    assert_eq!(getkeys(&mut c, &["LOCK.EXIT", "k4", "o"]), ["k4"]);
    assert_eq!(getkeys(&mut c, &["LOCK.FENCE", "k5", "t", "7"]), ["k5"]);
    assert_eq!(getkeys(&mut c, &["LOCK.INFO", "k6"]), ["k6"]);

    // (name, arity from the command's syntax, writes?)
    let commands = [
        ("lock.acquire", -4, true),
        ("lock.release", 3, true),
        ("lock.extend", 4, true),
        ("lock.enter", -4, true),
        ("lock.exit", -3, true),
        ("lock.fence", 4, true),
        ("lock.info", 2, false),
    ];
    for (name, arity, writes) in commands {
        let reply: Value = cmd("COMMAND").arg("INFO").arg(name).query(&mut c).unwrap();
        let Value::Array(entries) = &reply else { panic!("COMMAND INFO {name}: {reply:?}") };
        let Some(Value::Array(entry)) = entries.first() else { panic!("COMMAND INFO {name}: {reply:?}") };
        assert!(entry.len() >= 9, "COMMAND INFO {name}: {entry:?}");
        let got_name: String = redis::from_redis_value(&entry[0]).unwrap();
        assert_eq!(got_name, name);
        assert_eq!(as_int(&entry[1]), arity, "{name} arity");
        let (first, last, step) = (as_int(&entry[3]), as_int(&entry[4]), as_int(&entry[5]));
        assert_eq!((first, last, step), (1, 1, 1), "{name} first/last/step");
        let mut flags = Vec::new();
        words(&entry[2], &mut flags);
        assert_eq!(flags.iter().any(|f| f == "write"), writes, "{name} flags {flags:?}");
        if !writes {
            assert!(flags.iter().any(|f| f == "readonly"), "{name} {flags:?}");
        }

        let Value::Array(specs) = &entry[8] else { panic!("{name}: key specs {:?}", entry[8]) };
        assert_eq!(specs.len(), 1, "{name}: one key spec: {specs:?}");
        let spec = &specs[0];
        let mut spec_flags = Vec::new();
        words(map_get(spec, "flags").expect("key spec flags"), &mut spec_flags);
        let want = if writes { "RW" } else { "RO" };
        assert!(spec_flags.iter().any(|f| f == want), "{name}: key spec flags {spec_flags:?}");
        let begin = map_get(spec, "begin_search").expect("begin_search");
        let mut begin_words = Vec::new();
        words(begin, &mut begin_words);
        assert_eq!(begin_words, ["type", "index", "spec", "index", "1"], "{name}: begin_search");
        let find = map_get(spec, "find_keys").expect("find_keys");
        let mut find_words = Vec::new();
        words(find, &mut find_words);
        assert_eq!(
            find_words,
            ["type", "range", "spec", "lastkey", "0", "keystep", "1", "limit", "0"],
            "{name}: find_keys"
        );
    }
}

fn myid(c: &mut Connection) -> String {
    cmd("CLUSTER").arg("MYID").query(c).expect("CLUSTER MYID")
}

fn setslot(c: &mut Connection, slot: u16, how: &str, node_id: &str) {
    let reply: String = cmd("CLUSTER")
        .arg("SETSLOT")
        .arg(slot)
        .arg(how)
        .arg(node_id)
        .query(c)
        .unwrap_or_else(|e| panic!("CLUSTER SETSLOT {slot} {how}: {e}"));
    assert_eq!(reply, "OK");
}

/// The first half of a classic slot migration, node 0 -> node 1: the slot
/// marked IMPORTING / MIGRATING and `key` moved with MIGRATE (which deletes
/// it on node 0). Returns node 1's id, for [`assign_slot`].
fn migrate_key(nodes: &[Server], direct: &mut [Connection], slot: u16, key: &str) -> String {
    let from = myid(&mut direct[0]);
    let to = myid(&mut direct[1]);
    setslot(&mut direct[1], slot, "IMPORTING", &from);
    setslot(&mut direct[0], slot, "MIGRATING", &to);
    migrate_more(nodes, direct, key);
    to
}

/// MIGRATE of one more `key` of the slot [`migrate_key`] is moving.
fn migrate_more(nodes: &[Server], direct: &mut [Connection], key: &str) {
    let moved: String = cmd("MIGRATE")
        .arg("127.0.0.1")
        .arg(nodes[1].port)
        .arg(key)
        .arg(0)
        .arg(5000)
        .query(&mut direct[0])
        .expect("MIGRATE");
    assert_eq!(moved, "OK");
}

/// The second half: every node learns that `owner` serves the slot.
fn assign_slot(direct: &mut [Connection], slot: u16, owner: &str) {
    for c in direct.iter_mut() {
        setslot(c, slot, "NODE", owner);
    }
}

/// Resharding moves a held lock like any key (MIGRATE copies the stored
/// string and its expiry); a cluster client that still has the old slot map
/// gets MOVED from the old owner, follows it, and finds the same holder and
/// fencing token on the new owner. The new owner notes a lock's deadline
/// when it arrives (the target's RESTORE): a second lock of the slot,
/// deleted there before anyone wrote it again, quarantines its key until
/// that deadline (property 10).
#[test]
fn held_lock_moves_with_its_slot_and_the_client_follows_moved() {
    let cluster = start_cluster();
    let nodes = &cluster.nodes;
    let mut direct: Vec<Connection> = nodes.iter().map(Server::conn).collect();
    let (key, slot) = keys_per_node(&mut direct[0], "migrating", 1)[0][0].clone();
    let mut cc = cluster_conn(nodes);
    let fence = as_int(&ccall(&mut cc, &["LOCK.ACQUIRE", &key, "tok-a", "30000"]).unwrap());
    assert_eq!(exists(&mut direct[0], &key).unwrap(), 1);
    let expire_at: i64 = cmd("PEXPIRETIME").arg(&key).query(&mut direct[0]).unwrap();
    // The second lock, in the same slot (the first key as its hash tag).
    let deleted = format!("{{{key}}}:deleted");
    let deleted_fence = as_int(&ccall(&mut cc, &["LOCK.ACQUIRE", &deleted, "tok-d", "20000"]).unwrap());
    let deleted_deadline = info_int(&mut direct[0], &deleted, "deadline-ms").expect("held");

    // The standard slot migration, node 0 -> node 1.
    let to = migrate_key(nodes, &mut direct, slot, &key);
    migrate_more(nodes, &mut direct, &deleted);
    assign_slot(&mut direct, slot, &to);

    // A DEL on the new owner forgets the second lock: a newcomer is refused
    // the key until its deadline.
    assert_eq!(cmd("DEL").arg(&deleted).query::<i64>(&mut direct[1]).unwrap(), 1);
    let held = HeldLock { key: deleted.clone(), fence: deleted_fence, deadline_ms: deleted_deadline };
    assert_quarantined_until(
        &mut direct[1],
        &held,
        0,
        &["changed"],
        "a migrated lock deleted on its new owner",
    );
    assert_eq!(exists(&mut direct[1], &key).unwrap(), 1, "key on new owner");
    let e = exists(&mut direct[0], &key).expect_err("old owner redirects");
    assert_eq!(e.kind(), ErrorKind::Moved, "{e}");
    let moved_expire: i64 = cmd("PEXPIRETIME").arg(&key).query(&mut direct[1]).unwrap();
    assert!((moved_expire - expire_at).abs() <= 1_000, "backstop expiry {expire_at} became {moved_expire}");

    // The client's slot map is stale: it asks node 0, gets MOVED, follows.
    let grants_before = info_stat(&mut direct[1], "grants");
    let info =
        info_fields(&ccall(&mut cc, &["LOCK.INFO", &key]).unwrap()).expect("lock still held after migration");
    let holder: String = redis::from_redis_value(get(&info, "holder")).unwrap();
    assert_eq!(holder, "tok-a");
    assert_eq!(as_int(get(&info, "fence")), fence);
    assert_eq!(
        ccall(&mut cc, &["LOCK.ACQUIRE", &key, "tok-b", "1000"]).unwrap(),
        Value::Nil,
        "migrated lock still excludes others"
    );
    assert_eq!(
        as_int(&ccall(&mut cc, &["LOCK.ACQUIRE", &key, "tok-a", "1000"]).unwrap()),
        fence,
        "holder's retry on the new owner keeps its token"
    );
    assert_eq!(ccall(&mut cc, &["LOCK.EXTEND", &key, "tok-a", "5000"]).unwrap(), Value::Int(1));
    assert_eq!(ccall(&mut cc, &["LOCK.RELEASE", &key, "tok-a"]).unwrap(), Value::Int(1));
    assert_eq!(exists(&mut direct[1], &key).unwrap(), 0);
    assert_eq!(
        info_stat(&mut direct[1], "grants"),
        grants_before,
        "the new owner made no new grant for the migrated lock"
    );

    // The new owner saw the migrated token, so its next grant is above it.
    let next = as_int(&ccall(&mut cc, &["LOCK.ACQUIRE", &key, "tok-c", "1000"]).unwrap());
    assert!(next > fence, "{next} after migrated {fence}");
    assert_eq!(info_stat(&mut direct[1], "grants"), grants_before + 1);
}

/// Blocks `LOCK.ACQUIRE key token 30000 WAIT 0` (no timeout of its own) on
/// a direct connection to `node`; the thread returns its reply, or the
/// connection's read timeout error (10 s) if nobody answers it.
fn spawn_waiter(node: &Server, key: &str, token: &str) -> std::thread::JoinHandle<RedisResult<Value>> {
    let mut c = node.conn();
    let (key, token) = (key.to_string(), token.to_string());
    std::thread::spawn(move || {
        cmd("LOCK.ACQUIRE").arg(&key).arg(&token).arg(30_000).arg("WAIT").arg(0).query(&mut c)
    })
}

fn waiters(c: &mut Connection, key: &str) -> i64 {
    info_int(c, key, "waiters").unwrap_or(0)
}

/// The waiter's answer must be the TRYAGAIN error, and must have come.
fn assert_told_to_retry(waiter: std::thread::JoinHandle<RedisResult<Value>>, who: &str) {
    match waiter.join().expect("waiter thread") {
        Err(e) => {
            assert_eq!(e.code(), Some("TRYAGAIN"), "{who}: {e}");
            assert!(e.to_string().contains("moved to another node"), "{who}: {e}");
        }
        Ok(v) => panic!("{who} was answered {v:?} by the old owner; it must be told to retry"),
    }
}

/// The holder's lock on its new owner, as a cluster client sees it: `token`
/// holds it with `fence`; then a waiter that retries through the cluster
/// client queues there and gets it, with a higher fencing token, when the
/// holder releases.
fn retry_finds_the_lock_on_the_new_owner(nodes: &[Server], new_owner: usize, key: &str, fence: i64) {
    let mut cc = cluster_conn(nodes);
    let info =
        info_fields(&ccall(&mut cc, &["LOCK.INFO", key]).unwrap()).expect("lock held on its new owner");
    assert_eq!(redis::from_redis_value::<String>(get(&info, "holder")).unwrap(), "tok-a");
    assert_eq!(as_int(get(&info, "fence")), fence);
    let urls: Vec<String> = nodes.iter().map(Server::url).collect();
    let retry_key = key.to_string();
    let retry = std::thread::spawn(move || {
        let client = ClusterClient::builder(urls).response_timeout(Duration::from_secs(10)).build().unwrap();
        let mut cc = client.get_connection().expect("cluster connection");
        ccall(&mut cc, &["LOCK.ACQUIRE", &retry_key, "tok-b", "10000", "WAIT", "8000"])
    });
    let mut target = nodes[new_owner].conn();
    wait_until(Duration::from_secs(8), "the retried waiter queued on the new owner", || {
        waiters(&mut target, key) == 1
    });
    assert_eq!(ccall(&mut cc, &["LOCK.RELEASE", key, "tok-a"]).unwrap(), Value::Int(1));
    let next = as_int(&retry.join().unwrap().expect("retried waiter served on the new owner"));
    assert!(next > fence, "{next} after {fence}");
}

/// Legacy resharding (SETSLOT MIGRATING/IMPORTING + MIGRATE + SETSLOT NODE,
/// what `redis-cli --cluster reshard` does) of a slot holding a lock with
/// two clients blocked in WAIT on the old owner. MIGRATE deletes the key
/// there and fires a `del` event; the hand-off must not take that for a
/// release (it once granted the head waiter a second lock on the old owner
/// while the holder's lock lived on the new one).
#[test]
fn migrate_tells_waiters_on_the_old_owner_to_retry() {
    let cluster = start_cluster();
    let nodes = &cluster.nodes;
    let mut direct: Vec<Connection> = nodes.iter().map(Server::conn).collect();
    let (key, slot) = keys_per_node(&mut direct[0], "resharded", 1)[0][0].clone();
    let fence = as_int(&run(&mut direct[0], &[b"LOCK.ACQUIRE", key.as_bytes(), b"tok-a", b"30000"]).unwrap());
    let grants = info_stat(&mut direct[0], "grants");
    let b = spawn_waiter(&nodes[0], &key, "tok-b");
    let c = spawn_waiter(&nodes[0], &key, "tok-c");
    wait_until(Duration::from_secs(5), "two waiters queued", || waiters(&mut direct[0], &key) == 2);

    let to = migrate_key(nodes, &mut direct, slot, &key);
    assert_told_to_retry(b, "waiter tok-b");
    assert_told_to_retry(c, "waiter tok-c");
    assign_slot(&mut direct, slot, &to);

    // The old owner granted nothing and kept nothing.
    let count: i64 = cmd("CLUSTER").arg("COUNTKEYSINSLOT").arg(slot).query(&mut direct[0]).unwrap();
    assert_eq!(count, 0, "a lock was left (or granted) on the old owner");
    assert_eq!(info_stat(&mut direct[0], "grants"), grants, "the old owner granted a waiter");
    assert_eq!(info_stat(&mut direct[0], "waits_failed"), 2);
    assert_eq!(info_stat(&mut direct[0], "waiters"), 0);
    retry_finds_the_lock_on_the_new_owner(nodes, 1, &key, fence);
}

/// `CLUSTER GETSLOTMIGRATIONS` on the source until the job succeeded.
fn wait_for_slot_migration(source: &mut Connection) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let reply: Value = cmd("CLUSTER").arg("GETSLOTMIGRATIONS").query(source).expect("GETSLOTMIGRATIONS");
        let mut all = Vec::new();
        words(&reply, &mut all);
        if all.iter().any(|w| w == "success") {
            return;
        }
        assert!(!all.iter().any(|w| w == "failed" || w == "cancelled"), "slot migration failed: {all:?}");
        assert!(Instant::now() < deadline, "slot migration not done after 30 s: {all:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Whether the server has Valkey 9's `CLUSTER MIGRATESLOTS`.
fn has_atomic_slot_migration() -> bool {
    let (product, (major, _)) = server_version();
    product == "Valkey" && major >= 9
}

/// A test of `CLUSTER MIGRATESLOTS` skips itself, saying why, where the
/// server has none.
fn skipped_without_atomic_slot_migration() -> bool {
    let skipped = !has_atomic_slot_migration();
    if skipped {
        eprintln!("skipped: CLUSTER MIGRATESLOTS needs Valkey 9 ({} here)", server_name());
    }
    skipped
}

/// Valkey 9's atomic slot migration (`CLUSTER MIGRATESLOTS`), which Valkey
/// refuses while a loaded module has not declared that it handles it (the
/// module declares it on Valkey 9+). A slot with a plain lock, a reentrant
/// lock entered twice and a semaphore with two holders moves with every
/// holder, hold count, fencing token and deadline (and the key's backstop
/// expiry) intact; two clients blocked in WAIT on the source are answered
/// TRYAGAIN as soon as the export completes (the source deletes the slot's
/// keys without keyspace events; the module hears the migration event).
#[test]
fn atomic_slot_migration_moves_locks_and_answers_waiters() {
    if skipped_without_atomic_slot_migration() {
        return;
    }
    let cluster = start_cluster();
    let nodes = &cluster.nodes;
    let mut direct: Vec<Connection> = nodes.iter().map(Server::conn).collect();
    // Three keys in one slot of node 0 (a shared hash tag).
    let tag = (0..1000)
        .map(|i| format!("asm{i}"))
        .find(|tag| owner_of(keyslot(&mut direct[0], &format!("{{{tag}}}"))) == 0)
        .expect("a tag on node 0");
    let slot = keyslot(&mut direct[0], &format!("{{{tag}}}"));
    let (plain, reentrant, semaphore) =
        (format!("{{{tag}}}:plain"), format!("{{{tag}}}:reentrant"), format!("{{{tag}}}:semaphore"));
    let source = &mut direct[0];
    let fence = as_int(&run(source, &[b"LOCK.ACQUIRE", plain.as_bytes(), b"tok-a", b"30000"]).unwrap());
    for _ in 0..2 {
        run(source, &[b"LOCK.ENTER", reentrant.as_bytes(), b"owner-r", b"30000"]).unwrap();
    }
    for holder in [b"p1".as_slice(), b"p2"] {
        run(source, &[b"LOCK.SEMAPHORE", semaphore.as_bytes(), holder, b"2", b"30000"]).unwrap();
    }
    let before: Vec<LockSnapshot> = [&plain, &reentrant, &semaphore].map(|k| lock_snapshot(source, k)).into();
    let b = spawn_waiter(&nodes[0], &plain, "tok-b");
    let c = spawn_waiter(&nodes[0], &plain, "tok-c");
    wait_until(Duration::from_secs(5), "two waiters queued", || waiters(&mut direct[0], &plain) == 2);

    let to = myid(&mut direct[1]);
    let started: String = cmd("CLUSTER")
        .arg("MIGRATESLOTS")
        .arg("SLOTSRANGE")
        .arg(slot)
        .arg(slot)
        .arg("NODE")
        .arg(&to)
        .query(&mut direct[0])
        .unwrap_or_else(|e| panic!("MIGRATESLOTS refused with the module loaded: {e}"));
    assert_eq!(started, "OK");
    wait_for_slot_migration(&mut direct[0]);
    assert_told_to_retry(b, "waiter tok-b");
    assert_told_to_retry(c, "waiter tok-c");

    // Every lock on the new owner exactly as it was (the stored value holds
    // every holder, hold count, fencing token and deadline); nothing on the
    // old one.
    for (key, was) in [&plain, &reentrant, &semaphore].into_iter().zip(&before) {
        let now = lock_snapshot(&mut direct[1], key);
        assert_eq!((&now.raw, now.pexpiretime), (&was.raw, was.pexpiretime), "{key} after the migration");
    }
    let count: i64 = cmd("CLUSTER").arg("COUNTKEYSINSLOT").arg(slot).query(&mut direct[0]).unwrap();
    assert_eq!(count, 0, "keys left (or a lock granted) on the old owner");
    assert_eq!(info_stat(&mut direct[0], "waiters"), 0);
    retry_finds_the_lock_on_the_new_owner(nodes, 1, &plain, fence);
}

/// A set of keys in one slot (hash tags) goes to the slot's owner and is
/// granted there; keys in different slots get CROSSSLOT from the server,
/// on the owner itself too, and nothing is taken.
#[test]
fn a_set_needs_one_slot_and_goes_to_its_owner() {
    let cluster = start_cluster();
    let nodes = &cluster.nodes;
    let mut cc = cluster_conn(nodes);
    let mut direct: Vec<Connection> = nodes.iter().map(Server::conn).collect();
    let tagged = ["{order:7}:stock", "{order:7}:payment", "{order:7}:ship"];
    let slot = keyslot(&mut direct[0], tagged[0]);
    let owner = owner_of(slot);
    let mut words = vec!["LOCK.MACQUIRE", "t", "10000", "3"];
    words.extend_from_slice(&tagged);
    let fence = as_int(&ccall(&mut cc, &words).expect("a one-slot set is granted"));
    for key in tagged {
        let info = info_fields(&ccall(&mut cc, &["LOCK.INFO", key]).unwrap()).expect("held");
        assert_eq!(as_int(get(&info, "fence")), fence);
        assert_eq!(exists(&mut direct[owner], key).unwrap(), 1, "{key} lives on the slot's owner");
    }
    let released: Vec<i64> = cmd("LOCK.MRELEASE").arg("t").arg(&tagged[..]).query(&mut cc).unwrap();
    assert_eq!(released, vec![1, 1, 1]);
    // Two keys of different slots (both owned by one node, even): CROSSSLOT.
    let per_node = keys_per_node(&mut direct[0], "multi", 2);
    let (a, b) = (&per_node[owner][0].0, &per_node[owner][1].0);
    assert_ne!(keyslot(&mut direct[0], a), keyslot(&mut direct[0], b));
    let e = err_text(
        cmd("LOCK.MACQUIRE").arg("t").arg(1000).arg(2).arg(a).arg(b).query::<Value>(&mut direct[owner]),
    );
    assert!(e.starts_with("CROSSSLOT"), "{e}");
    let e = err_text(cmd("LOCK.MRELEASE").arg("t").arg(a).arg(b).query::<Value>(&mut direct[owner]));
    assert!(e.starts_with("CROSSSLOT"), "{e}");
    for key in [a, b] {
        assert_eq!(exists(&mut direct[owner], key).unwrap(), 0, "{key} was not taken");
    }
}

/// Valkey 9: every `CLUSTER MIGRATESLOTS` import onto a node, not only the
/// first, leaves a moved lock grantable again as soon as its holder
/// releases it. (The import writes the slot's keys on the target; a write
/// there by anyone but the import would be a lock removed behind the
/// module's back, but these are the lock arriving.)
#[test]
fn locks_moved_by_repeated_atomic_imports_are_granted_again_once_released() {
    if skipped_without_atomic_slot_migration() {
        return;
    }
    let cluster = start_cluster();
    let nodes = &cluster.nodes;
    let mut direct: Vec<Connection> = nodes.iter().map(Server::conn).collect();
    // One key on node 0 and one on node 2, both to move to node 1.
    let key_on = |c: &mut Connection, node: usize| {
        (0..1000)
            .map(|i| format!("moved{i}"))
            .find(|k| owner_of(keyslot(c, k)) == node)
            .expect("a key on the node")
    };
    let first = key_on(&mut direct[0], 0);
    let second = key_on(&mut direct[0], 2);
    for (node, key) in [(0, &first), (2, &second)] {
        as_int(&run(&mut direct[node], &[b"LOCK.ACQUIRE", key.as_bytes(), b"h1", b"4000"]).unwrap());
    }
    for (key, import) in [(&first, "the first import"), (&second, "the second import")] {
        let slot = keyslot(&mut direct[1], key);
        cluster.migrate_slot_atomically(slot, &nodes[1]);
        let target = &mut direct[1];
        assert_eq!(int(target, &["LOCK.RELEASE", key, "h1"]), 1, "{import}: the holder releases on node 1");
        let granted = run(target, &[b"LOCK.ACQUIRE", key.as_bytes(), b"h2", b"4000"]);
        assert!(
            matches!(granted, Ok(Value::Int(_))),
            "{import}: a released lock is granted again at once: {granted:?}"
        );
    }
}

/// Three masters with `appendfsync always` (no start-up quarantine) and
/// this quarantine, connections to each, and two keys of node 0 named from
/// `prefix`, in different slots.
fn quarantined_cluster(quarantine_ms: i64, prefix: &str) -> (RedisCluster, Vec<Connection>, Vec<String>) {
    let spec = ClusterSpec::new(3, 0)
        .opts(Opts::new().aof_always().module_arg("quarantine-ms", &quarantine_ms.to_string()));
    let cluster = RedisCluster::start(spec);
    let mut direct: Vec<Connection> = cluster.nodes.iter().map(Server::conn).collect();
    let mut keys: Vec<String> = Vec::new();
    for key in (0..2000).map(|i| format!("{prefix}{i}")) {
        let slot = keyslot(&mut direct[0], &key);
        if owner_of(slot) == 0 && keys.iter().all(|k| keyslot(&mut direct[0], k) != slot) {
            keys.push(key);
        }
        if keys.len() == 2 {
            break;
        }
    }
    (cluster, direct, keys)
}

/// A lock that arrives by a slot migration may be behind its holder's lease
/// (the exporter a promoted replica that missed an extension, in its
/// failover quarantine): the importer does not take it over by expiry
/// before its own quarantine has run since the arrival. Its holder's
/// release ends that at once. Classic migration (`MIGRATE`) on every
/// server, Valkey's `MIGRATESLOTS` too where it runs.
#[test]
fn an_imported_lock_is_not_taken_over_by_expiry_before_the_quarantine_but_its_release_frees_it() {
    // Longer than the two migrations take on a loaded machine; the test
    // does not wait it out.
    const QUARANTINE_MS: i64 = 30_000;
    let (cluster, mut direct, on_node_0) = quarantined_cluster(QUARANTINE_MS, "arrive");
    let nodes = &cluster.nodes;
    let (expiring, released) = (&on_node_0[0], &on_node_0[1]);
    assert_ne!(keyslot(&mut direct[0], expiring), keyslot(&mut direct[0], released));
    run(&mut direct[0], &[b"LOCK.ACQUIRE", expiring.as_bytes(), b"h1", b"1500"]).unwrap();
    run(&mut direct[0], &[b"LOCK.ACQUIRE", released.as_bytes(), b"h1", b"30000"]).unwrap();
    let atomic = has_atomic_slot_migration();
    for key in [expiring, released] {
        let slot = keyslot(&mut direct[0], key);
        if atomic && key == released {
            cluster.migrate_slot_atomically(slot, &nodes[1]);
        } else {
            cluster.move_slot(slot, &nodes[1]);
        }
    }
    let arrived = Instant::now();
    let target = &mut direct[1];
    // Past the expiring lock's deadline: still refused, for the arrival.
    wait_until(Duration::from_secs(5), "the expiring lock's deadline", || {
        refusal(target, expiring).is_some()
    });
    let (code, left) = refusal(target, expiring).expect("refused for its arrival");
    assert_eq!(code, "imported");
    assert!(left > 0 && left <= QUARANTINE_MS, "{left}");
    let refused = run(target, &[b"LOCK.ACQUIRE", expiring.as_bytes(), b"h2", b"1000"]);
    assert!(format!("{refused:?}").contains("QUARANTINE"), "{refused:?}");
    // The other one's holder releases it: granted again at once.
    assert_eq!(int(target, &["LOCK.RELEASE", released, "h1"]), 1);
    let granted = run(target, &[b"LOCK.ACQUIRE", released.as_bytes(), b"h2", b"1000"]);
    assert!(matches!(granted, Ok(Value::Int(_))), "released: granted at once: {granted:?}");
    // The refusal ends with the quarantine that began at the arrival.
    assert!(left <= QUARANTINE_MS - arrived.elapsed().as_millis() as i64 + 50, "{left}");
}

/// Raises `owner`'s token on node 0 to two seconds of clock ahead of node
/// 1's, as a raise from a quorum member whose clock is ahead would put
/// there; the token.
fn fence_ahead(direct: &mut [Connection], key: &str, owner: &str) -> i64 {
    let ahead = (server_clock_ms(&mut direct[1]) + 2_000) * 1000;
    assert_eq!(int(&mut direct[0], &["LOCK.FENCE", key, owner, &ahead.to_string()]), 1);
    ahead
}

/// Moves `key`'s slot from node 0 to node 1: by Valkey's `MIGRATESLOTS`
/// the first time where it runs (`atomic` then turns false), else by
/// `MIGRATE`.
fn move_to_node_1(cluster: &RedisCluster, direct: &mut [Connection], key: &str, atomic: &mut bool) {
    let slot = keyslot(&mut direct[0], key);
    if *atomic {
        cluster.migrate_slot_atomically(slot, &cluster.nodes[1]);
    } else {
        cluster.move_slot(slot, &cluster.nodes[1]);
    }
    *atomic = false;
}

/// A lock released before its slot moves leaves no key to carry its last
/// token, which the exporter's counter issued up to a second ahead of its
/// clock plus what the masters' clocks disagree by (a raise from the
/// quorum: `LOCK.FENCE`). The importer's counter has only its clock, so
/// from the import's start until its quarantine has run since the end it
/// refuses new grants in the slot (code `importing`), and then grants above
/// that token. A lock that moves with its slot carries its tokens: the
/// importer's counter rises to them at its arrival, and once its holder
/// releases it, it is granted again at once, above them. Classic migration
/// on every server; Valkey's `MIGRATESLOTS` too where it runs.
#[test]
fn a_released_locks_token_stays_below_the_next_after_its_slot_moves() {
    const QUARANTINE_MS: i64 = 3_000;
    let (cluster, mut direct, on_node_0) = quarantined_cluster(QUARANTINE_MS, "carried");
    let (released, carried) = (&on_node_0[0], &on_node_0[1]);
    let mut atomic = has_atomic_slot_migration();
    for key in [released, carried] {
        // A token two seconds of clock ahead of node 1's, as a raise from a
        // quorum member whose clock is ahead would put there.
        as_int(&run(&mut direct[0], &[b"LOCK.ACQUIRE", key.as_bytes(), b"h1", b"30000"]).unwrap());
        let ahead = fence_ahead(&mut direct, key, "h1");
        if key == released {
            assert_eq!(int(&mut direct[0], &["LOCK.RELEASE", key, "h1"]), 1);
        }
        move_to_node_1(&cluster, &mut direct, key, &mut atomic);
        let target = &mut direct[1];
        if key == released {
            let refused = run(target, &[b"LOCK.ACQUIRE", key.as_bytes(), b"h2", b"1000"]);
            assert!(format!("{refused:?}").contains("QUARANTINE"), "right after the import: {refused:?}");
            let (code, left) = refusal(target, key).expect("LOCK.INFO says why");
            assert_eq!(code, "importing");
            assert!(left > 0 && left <= QUARANTINE_MS, "{left}");
            let mut token = None;
            wait_until(Duration::from_secs(10), "the slot's wait to end", || {
                token = match run(target, &[b"LOCK.ACQUIRE", key.as_bytes(), b"h2", b"1000"]) {
                    Ok(Value::Int(t)) => Some(t),
                    _ => None,
                };
                token.is_some()
            });
            assert!(token.unwrap() > ahead, "the next token {token:?} is above the released one {ahead}");
        } else {
            assert_eq!(int(target, &["LOCK.RELEASE", key, "h1"]), 1, "its holder releases it on node 1");
            let granted = run(target, &[b"LOCK.ACQUIRE", key.as_bytes(), b"h2", b"1000"]);
            let Ok(Value::Int(token)) = granted else {
                panic!("a carried lock is granted again at once: {granted:?}")
            };
            assert!(token > ahead, "the next token {token} is above the carried one {ahead}");
        }
    }
}

/// A shared lock carries the highest token it granted, also a released
/// holder's, while another holder keeps its key: the importer's counter
/// rises to that one at the arrival, not only to the tokens of the holders
/// that moved (the simulator's seed 9300335455: a reader fenced ahead
/// released, the slot moved with an older reader, whose release on the
/// importer let the next reader in below the released token). Classic
/// migration on every server; Valkey's `MIGRATESLOTS` too where it runs.
#[test]
fn a_released_readers_token_moves_with_the_readers_left_and_stays_below_the_next() {
    let (cluster, mut direct, on_node_0) = quarantined_cluster(3_000, "readers");
    let mut atomic = has_atomic_slot_migration();
    for key in &on_node_0 {
        let older = as_int(&run(&mut direct[0], &[b"LOCK.SHARED", key.as_bytes(), b"r1", b"30000"]).unwrap());
        as_int(&run(&mut direct[0], &[b"LOCK.SHARED", key.as_bytes(), b"r2", b"30000"]).unwrap());
        // r2's token ahead of node 1's clock, then r2 leaves.
        let ahead = fence_ahead(&mut direct, key, "r2");
        assert_eq!(int(&mut direct[0], &["LOCK.RELEASE", key, "r2"]), 1);
        move_to_node_1(&cluster, &mut direct, key, &mut atomic);
        let target = &mut direct[1];
        assert_eq!(int(target, &["LOCK.RELEASE", key, "r1"]), 1, "r1 releases it on node 1");
        let granted = run(target, &[b"LOCK.SHARED", key.as_bytes(), b"r3", b"1000"]);
        let Ok(Value::Int(token)) = granted else { panic!("granted again at once: {granted:?}") };
        assert!(
            token > ahead,
            "the next token {token} is above the released reader's {ahead} (r1's was {older})"
        );
    }
}

/// An import whose command the server refuses (`SETSLOT IMPORTING` of a
/// slot the node owns) leaves no wait behind; `CLUSTER ADDSLOTS` of a slot
/// nobody served makes it wait like an import.
#[test]
fn a_refused_import_leaves_no_wait_and_addslots_waits() {
    let spec = ClusterSpec::new(3, 0).opts(Opts::new().aof_always().module_arg("quarantine-ms", "60000"));
    let cluster = RedisCluster::start(spec);
    let nodes = &cluster.nodes;
    let mut direct: Vec<Connection> = nodes.iter().map(Server::conn).collect();
    let key =
        (0..1000).map(|i| format!("own{i}")).find(|k| owner_of(keyslot(&mut direct[0], k)) == 0).unwrap();
    let slot = keyslot(&mut direct[0], &key);
    let other = myid(&mut direct[1]);
    let refused: RedisResult<String> =
        cmd("CLUSTER").arg("SETSLOT").arg(slot).arg("IMPORTING").arg(&other).query(&mut direct[0]);
    assert!(refused.is_err(), "a node does not import a slot it owns: {refused:?}");
    wait_until(Duration::from_secs(5), "the import's check", || info_stat(&mut direct[0], "slot_waits") == 0);
    assert!(matches!(
        run(&mut direct[0], &[b"LOCK.ACQUIRE", key.as_bytes(), b"h", b"1000"]),
        Ok(Value::Int(_))
    ));
    // A slot no node serves, taken by node 2.
    for c in direct.iter_mut() {
        let _: String = cmd("CLUSTER").arg("DELSLOTS").arg(slot).query(c).expect("DELSLOTS");
    }
    let _: String = cmd("CLUSTER").arg("ADDSLOTS").arg(slot).query(&mut direct[2]).expect("ADDSLOTS");
    assert_eq!(info_stat(&mut direct[2], "slot_waits"), 1);
    let refused = run(&mut direct[2], &[b"LOCK.ACQUIRE", key.as_bytes(), b"h2", b"1000"]);
    assert!(format!("{refused:?}").contains("slot"), "{refused:?}");
    assert_eq!(refusal(&mut direct[2], &key).map(|(code, _)| code).as_deref(), Some("importing"));
}
