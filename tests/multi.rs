//! Multi-key locks (`LOCK.MACQUIRE` / `LOCK.MRELEASE`) and the visible queue
//! (`LOCK.WAITERS`, `LOCK.CONTENDED`, wait and hold times in `INFO lock`)
//! against real servers: all or nothing, one fencing token per set,
//! idempotent retries, modes, strict parsing, waiting for sets without
//! deadlock or barging, replication and restart.

use lock_testkit::*;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

fn call(c: &mut Connection, words: &[&str]) -> redis::RedisResult<Value> {
    let mut command = cmd(words[0]);
    for w in &words[1..] {
        command.arg(*w);
    }
    command.query(c)
}

/// A fencing token, or None for nil; anything else fails the test.
fn token(reply: redis::RedisResult<Value>) -> Option<i64> {
    match reply {
        Ok(Value::Int(n)) => Some(n),
        Ok(Value::Nil) => None,
        other => panic!("expected a fencing token or nil, got {other:?}"),
    }
}

/// `LOCK.MACQUIRE token ttl numkeys keys... extra...`
fn macquire(
    c: &mut Connection,
    owner: &str,
    ttl: i64,
    keys: &[&str],
    extra: &[&str],
) -> redis::RedisResult<Value> {
    let ttl = ttl.to_string();
    let n = keys.len().to_string();
    let mut words = vec!["LOCK.MACQUIRE", owner, &ttl, &n];
    words.extend_from_slice(keys);
    words.extend_from_slice(extra);
    call(c, &words)
}

fn mrelease(c: &mut Connection, owner: &str, keys: &[&str]) -> Vec<i64> {
    let mut words = vec!["LOCK.MRELEASE", owner];
    words.extend_from_slice(keys);
    let mut command = cmd(words[0]);
    for w in &words[1..] {
        command.arg(*w);
    }
    command.query(c).unwrap_or_else(|e| panic!("{words:?}: {e}"))
}

fn holder(c: &mut Connection, key: &str) -> Option<String> {
    let fields = lock_info(c, key)?;
    fields.iter().find(|(n, _)| n == "holder").map(|(_, v)| redis::from_redis_value(v).unwrap())
}

/// Every key: (holder, fence) from LOCK.INFO of a plain lock.
fn holders(c: &mut Connection, keys: &[&str]) -> Vec<Option<(String, i64)>> {
    keys.iter().map(|k| holder(c, k).map(|h| (h, info_int(c, k, "fence").unwrap()))).collect()
}

fn dbsize(c: &mut Connection) -> i64 {
    int(c, &["DBSIZE"])
}

/// A list of field/value arrays (LOCK.WAITERS, LOCK.CONTENDED) as maps.
fn rows(reply: Value) -> Vec<Vec<(String, Value)>> {
    let Value::Array(items) = reply else { panic!("expected an array, got {reply:?}") };
    items
        .into_iter()
        .map(|item| {
            let Value::Array(fields) = item else { panic!("expected a field array, got {item:?}") };
            fields
                .chunks(2)
                .map(|pair| (redis::from_redis_value::<String>(&pair[0]).unwrap(), pair[1].clone()))
                .collect()
        })
        .collect()
}

fn field<T: redis::FromRedisValue>(row: &[(String, Value)], name: &str) -> T {
    let (_, v) = row.iter().find(|(n, _)| n == name).unwrap_or_else(|| panic!("no {name} in {row:?}"));
    redis::from_redis_value(v).unwrap()
}

fn waiters(c: &mut Connection, key: &str) -> Vec<Vec<(String, Value)>> {
    rows(call(c, &["LOCK.WAITERS", key]).unwrap())
}

/// Sends a blocking MACQUIRE ... WAIT on its own connection; the thread
/// returns the reply.
fn spawn_macquire(
    server: &Server,
    owner: &str,
    ttl: i64,
    keys: &[&str],
    wait_ms: i64,
) -> thread::JoinHandle<redis::RedisResult<Value>> {
    let mut c = server.conn();
    let owner = owner.to_string();
    let keys: Vec<String> = keys.iter().map(|k| k.to_string()).collect();
    thread::spawn(move || {
        let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
        macquire(&mut c, &owner, ttl, &keys, &["WAIT", &wait_ms.to_string()])
    })
}

fn wait_node_waiters(c: &mut Connection, n: i64) {
    wait_until(Duration::from_secs(10), &format!("lock_waiters == {n}"), || info_stat(c, "waiters") == n);
}

#[test]
fn a_set_is_granted_whole_with_one_token_or_not_at_all() {
    let server = Server::start();
    let mut c = server.conn();
    let keys = ["a", "b", "c"];
    let t = token(macquire(&mut c, "t1", 10_000, &keys, &[])).expect("a free set is granted");
    for (key, held) in keys.iter().zip(holders(&mut c, &keys)) {
        assert_eq!(held, Some(("t1".to_string(), t)), "{key} holds t1 with the set's token");
        assert_eq!(int(&mut c, &["LOCK.CHECK", key, &t.to_string()]), 1);
    }
    // Overlapping on one key: nothing of the second set is granted.
    let before = dbsize(&mut c);
    assert_eq!(token(macquire(&mut c, "t2", 10_000, &["d", "e", "c"], &[])), None);
    assert_eq!(dbsize(&mut c), before, "d and e were not taken");
    assert_eq!(holder(&mut c, "d"), None);
    // A single-key grant on a member is refused too.
    assert_eq!(token(call(&mut c, &["LOCK.ACQUIRE", "b", "t2", "1000"])), None);
    // Each key is an ordinary plain lock: released alone, or all at once.
    assert_eq!(int(&mut c, &["LOCK.RELEASE", "a", "t1"]), 1);
    assert_eq!(mrelease(&mut c, "t1", &["a", "b", "c", "zz"]), vec![0, 1, 1, 0]);
    assert_eq!(dbsize(&mut c), 0, "a freed set leaves nothing");
    let t2 = token(macquire(&mut c, "t2", 10_000, &["d", "e", "c"], &[])).unwrap();
    assert!(t2 > t, "tokens rise across sets: {t2} after {t}");
}

#[test]
fn a_retry_renews_the_set_and_a_partial_hold_is_granted_anew() {
    let server = Server::start();
    let mut c = server.conn();
    let t = token(macquire(&mut c, "o", 2_000, &["a", "b"], &[])).unwrap();
    let again = token(macquire(&mut c, "o", 20_000, &["a", "b"], &[])).unwrap();
    assert_eq!(again, t, "a retry after a lost reply gets the same token");
    assert!(info_int(&mut c, "b", "ttl-ms").unwrap() > 10_000, "and a new TTL");
    // The owner lost one key (released it): the set is granted anew, and
    // the key it kept moves to the new token.
    assert_eq!(int(&mut c, &["LOCK.RELEASE", "a", "o"]), 1);
    let fresh = token(macquire(&mut c, "o", 20_000, &["a", "b"], &[])).unwrap();
    assert!(fresh > t);
    assert_eq!(holders(&mut c, &["a", "b"]), vec![Some(("o".into(), fresh)), Some(("o".into(), fresh))]);
    assert_eq!(int(&mut c, &["LOCK.CHECK", "b", &t.to_string()]), 0, "the old token no longer holds b");
    // Extending the set: LOCK.RENEW over its keys.
    assert_eq!(
        cmd("LOCK.RENEW").arg("o").arg(30_000).arg("a").arg("b").arg("x").query::<Vec<i64>>(&mut c).unwrap(),
        vec![1, 1, 0]
    );
}

#[test]
fn modes_per_key_share_and_exclude() {
    let server = Server::start();
    let mut c = server.conn();
    // Two readers of r1 and r2 together; a writer of r2 waits for both.
    let r = token(macquire(&mut c, "reader1", 10_000, &["r1", "r2"], &["MODES", "SHARED"])).unwrap();
    let r2 = token(macquire(&mut c, "reader2", 10_000, &["r1", "r2"], &["MODES", "shared"])).unwrap();
    assert!(r2 > r);
    assert_eq!(info_int(&mut c, "r1", "holds"), Some(2));
    assert_eq!(
        token(macquire(&mut c, "writer", 10_000, &["w", "r2"], &["MODES", "EXCLUSIVE", "EXCLUSIVE"])),
        None
    );
    assert_eq!(holder(&mut c, "w"), None, "w was not taken");
    // Mixed: read r1, write w, plain p.
    let m = token(macquire(
        &mut c,
        "mixed",
        10_000,
        &["r1", "w", "p"],
        &["MODES", "SHARED", "EXCLUSIVE", "PLAIN"],
    ))
    .unwrap();
    assert!(m > r2);
    let kinds: Vec<String> = ["r1", "w", "p"]
        .iter()
        .map(|k| {
            let info = lock_info(&mut c, k).unwrap();
            redis::from_redis_value(&info.iter().find(|(n, _)| n == "kind").unwrap().1).unwrap()
        })
        .collect();
    assert_eq!(kinds, vec!["shared", "shared", "plain"]);
    // A key of another kind refuses the whole set, naming the key.
    let e = err_text(macquire(&mut c, "x", 10_000, &["q", "w"], &[]));
    assert!(e.starts_with("WRONGTYPE") && e.contains("key #2 of the set"), "{e}");
    assert_eq!(holder(&mut c, "q"), None);
    // A token holds one mode per key.
    let e = err_text(macquire(&mut c, "reader1", 10_000, &["r1"], &["MODES", "EXCLUSIVE"]));
    assert!(e.contains("read mode") && e.contains("key #1"), "{e}");
}

#[test]
fn bad_calls_are_refused_and_change_nothing() {
    let server = Server::start();
    let mut c = server.conn();
    call(&mut c, &["SET", "str", "v"]).unwrap();
    token(call(&mut c, &["LOCK.ENTER", "re", "o", "10000"])).unwrap();
    let before = dbsize(&mut c);
    let cases: &[(&[&str], &str)] = &[
        (&["LOCK.MACQUIRE", "t", "100", "0"], "ERR wrong number"),
        (&["LOCK.MACQUIRE", "t", "100", "0", "a"], "numkeys 0 is out of range"),
        (&["LOCK.MACQUIRE", "t", "100", "3", "a", "b"], "ERR wrong number"),
        (&["LOCK.MACQUIRE", "t", "100", "-1", "a"], "numkeys -1 is out of range"),
        (&["LOCK.MACQUIRE", "t", "100", "x", "a"], "numkeys 'x' is not an integer"),
        (&["LOCK.MACQUIRE", "t", "100", "2", "a", "a"], "key #2 'a' appears twice"),
        (&["LOCK.MACQUIRE", "t", "0", "1", "a"], "ttl"),
        (&["LOCK.MACQUIRE", "", "100", "1", "a"], "token must not be empty"),
        (&["LOCK.MACQUIRE", "t", "100", "1", "a", "WAIT"], "WAIT needs a value"),
        (&["LOCK.MACQUIRE", "t", "100", "1", "a", "WAIT", "5", "WAIT", "5"], "WAIT given twice"),
        (&["LOCK.MACQUIRE", "t", "100", "1", "a", "MODES", "READ"], "unknown mode 'READ'"),
        (&["LOCK.MACQUIRE", "t", "100", "3", "a", "b", "c", "MODES", "PLAIN", "PLAIN"], "2 modes for 3 keys"),
        (&["LOCK.MACQUIRE", "t", "100", "1", "a", "MODES"], "MODES needs a value"),
        (&["LOCK.MACQUIRE", "t", "100", "1", "a", "LIMIT", "2"], "unknown option 'LIMIT'"),
        (&["LOCK.MACQUIRE", "t", "100", "2", "a", "str"], "WRONGTYPE"),
        (&["LOCK.MACQUIRE", "t", "100", "2", "re", "a"], "WRONGTYPE"),
        (&["LOCK.MRELEASE", "t"], "ERR wrong number"),
        (&["LOCK.MRELEASE", "", "a"], "token must not be empty"),
        (&["LOCK.MRELEASE", "t", "a", "str"], "WRONGTYPE"),
        (&["LOCK.WAITERS", "a", "COUNT", "0"], "count 0 is out of range"),
        (&["LOCK.WAITERS", "a", "COUNT"], "COUNT needs a value"),
        (&["LOCK.WAITERS", "a", "TOP", "1"], "unknown option 'TOP'"),
        (&["LOCK.WAITERS", "str"], "WRONGTYPE"),
        (&["LOCK.CONTENDED", "COUNT", "17"], "count 17 is out of range"),
        (&["LOCK.CONTENDED", "COUNT", "1", "x"], "ERR lock.contended: unknown option 'x'"),
    ];
    for (words, expected) in cases {
        let e = err_text(call(&mut c, words));
        assert!(e.contains(expected), "{words:?}: {e:?} does not say {expected:?}");
    }
    assert_eq!(dbsize(&mut c), before, "no bad call created a key");
    // More keys than lock.max-multi-keys.
    call(&mut c, &["CONFIG", "SET", "lock.max-multi-keys", "2"]).unwrap();
    let e = err_text(macquire(&mut c, "t", 100, &["a", "b", "c"], &[]));
    assert!(e.contains("numkeys 3 is out of range") && e.contains("lock.max-multi-keys"), "{e}");
    let e = err_text(call(&mut c, &["LOCK.MRELEASE", "t", "a", "b", "c"]));
    assert!(e.contains("3 keys, more than the limit of 2"), "{e}");
    assert_eq!(dbsize(&mut c), before);
}

#[test]
fn command_getkeys_names_every_key_of_a_set() {
    let server = Server::start();
    let mut c = server.conn();
    let keys: Vec<String> = cmd("COMMAND")
        .arg("GETKEYS")
        .arg("LOCK.MACQUIRE")
        .arg("t")
        .arg(100)
        .arg(2)
        .arg("k1")
        .arg("k2")
        .arg("WAIT")
        .arg(5)
        .query(&mut c)
        .unwrap();
    assert_eq!(keys, vec!["k1", "k2"]);
    let keys: Vec<String> = cmd("COMMAND")
        .arg("GETKEYS")
        .arg("LOCK.MRELEASE")
        .arg("t")
        .arg("k1")
        .arg("k2")
        .query(&mut c)
        .unwrap();
    assert_eq!(keys, vec!["k1", "k2"]);
}

#[test]
fn a_waiting_set_holds_nothing_and_is_served_whole() {
    let server = Server::start();
    let mut c = server.conn();
    token(call(&mut c, &["LOCK.ACQUIRE", "b", "holder", "30000"])).unwrap();
    let set = spawn_macquire(&server, "set", 10_000, &["a", "b"], 10_000);
    wait_node_waiters(&mut c, 1);
    // It holds nothing while it waits, and nobody overtakes it on a.
    assert_eq!(holder(&mut c, "a"), None);
    assert_eq!(token(call(&mut c, &["LOCK.ACQUIRE", "a", "late", "1000"])), None, "no barging on a free key");
    let listed = waiters(&mut c, "a");
    assert_eq!(listed.len(), 1);
    assert_eq!(field::<String>(&listed[0], "token"), "set");
    assert_eq!(field::<i64>(&listed[0], "keys"), 2);
    assert_eq!(field::<i64>(&listed[0], "position"), 1);
    // The holder of b leaves: the set gets both at once.
    let before = Instant::now();
    assert_eq!(int(&mut c, &["LOCK.RELEASE", "b", "holder"]), 1);
    let t = token(set.join().unwrap()).expect("the set was handed over");
    let took = before.elapsed();
    assert_eq!(holders(&mut c, &["a", "b"]), vec![Some(("set".into(), t)), Some(("set".into(), t))]);
    assert!(took < Duration::from_secs(2), "hand-off took {took:?}");
    assert_eq!(info_stat(&mut c, "waiters"), 0);
}

#[test]
fn a_set_waiter_that_times_out_lets_the_next_one_take_a_free_key() {
    let server = Server::start();
    let mut c = server.conn();
    token(call(&mut c, &["LOCK.ACQUIRE", "b", "holder", "30000"])).unwrap();
    let set = spawn_macquire(&server, "set", 10_000, &["a", "b"], 300);
    wait_node_waiters(&mut c, 1);
    // Behind the set on a, which is free.
    let mut single = server.conn();
    let next = thread::spawn(move || {
        token(call(&mut single, &["LOCK.ACQUIRE", "a", "next", "5000", "WAIT", "10000"]))
    });
    wait_node_waiters(&mut c, 2);
    let started = Instant::now();
    assert_eq!(token(set.join().unwrap()), None, "the set timed out");
    let t = next.join().unwrap().expect("a went to the next waiter");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "served right after the timeout, not at b's deadline"
    );
    assert_eq!(holder(&mut c, "a"), Some("next".into()));
    assert_eq!(info_int(&mut c, "a", "fence"), Some(t));
}

#[test]
fn overlapping_sets_in_opposite_orders_never_deadlock_nor_hold_half() {
    let server = Server::start();
    let rounds = 60;
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicUsize::new(0));
    let mut workers = Vec::new();
    // Four clients: two take {a, b, c}, two take {c, b, a}; each holds its
    // set briefly, checks it holds every key, and releases.
    for (i, keys) in
        [["a", "b", "c"], ["c", "b", "a"], ["a", "b", "c"], ["c", "b", "a"]].into_iter().enumerate()
    {
        let mut c = server.conn();
        let mut check = server.conn();
        let stop = stop.clone();
        let done = done.clone();
        workers.push(thread::spawn(move || {
            let owner = format!("w{i}");
            for _ in 0..rounds {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                let t = token(macquire(&mut c, &owner, 5_000, &keys, &["WAIT", "20000"]))
                    .unwrap_or_else(|| panic!("{owner} timed out: a deadlock?"));
                for key in keys {
                    assert_eq!(holder(&mut check, key), Some(owner.clone()), "{owner} holds all of its set");
                    assert_eq!(info_int(&mut check, key, "fence"), Some(t));
                }
                assert_eq!(mrelease(&mut c, &owner, &keys), vec![1, 1, 1]);
                done.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    let deadline = Instant::now() + Duration::from_secs(120);
    while done.load(Ordering::Relaxed) < 4 * rounds && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(20));
    }
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.join().expect("a worker failed");
    }
    assert_eq!(done.load(Ordering::Relaxed), 4 * rounds, "every round completed");
    let mut c = server.conn();
    assert_eq!(dbsize(&mut c), 0);
    assert_eq!(info_stat(&mut c, "waiters"), 0);
}

#[test]
fn the_queue_is_listed_in_order_with_wait_times() {
    let server = Server::start();
    let mut c = server.conn();
    token(call(&mut c, &["LOCK.ACQUIRE", "k", "holder", "30000"])).unwrap();
    let mut handles = Vec::new();
    for (i, extra) in [&["WAIT", "20000"][..], &["WAIT", "0"][..]].iter().enumerate() {
        let mut w = server.conn();
        let extra: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
        handles.push(thread::spawn(move || {
            let mut words = vec!["LOCK.ACQUIRE".to_string(), "k".into(), format!("w{i}"), "5000".into()];
            words.extend(extra);
            let words: Vec<&str> = words.iter().map(String::as_str).collect();
            token(call(&mut w, &words))
        }));
        wait_node_waiters(&mut c, i as i64 + 1);
    }
    let set = spawn_macquire(&server, "w2", 5_000, &["k", "other"], 20_000);
    wait_node_waiters(&mut c, 3);
    thread::sleep(Duration::from_millis(50));
    let listed = waiters(&mut c, "k");
    let tokens: Vec<String> = listed.iter().map(|r| field(r, "token")).collect();
    assert_eq!(tokens, vec!["w0", "w1", "w2"], "head first");
    let positions: Vec<i64> = listed.iter().map(|r| field(r, "position")).collect();
    assert_eq!(positions, vec![1, 2, 3]);
    let waited: Vec<i64> = listed.iter().map(|r| field(r, "waited-ms")).collect();
    assert!(waited[0] >= waited[1] && waited[1] >= waited[2] && waited[2] >= 50, "{waited:?}");
    assert!(field::<i64>(&listed[0], "timeout-ms") > 0);
    assert_eq!(field::<i64>(&listed[1], "timeout-ms"), -1, "WAIT 0 has no timeout");
    assert_eq!(field::<String>(&listed[2], "mode"), "write");
    assert_eq!(rows(call(&mut c, &["LOCK.WAITERS", "k", "COUNT", "1"]).unwrap()).len(), 1);
    assert!(waiters(&mut c, "nobody").is_empty());
    // Served in that order as the lock passes on.
    assert_eq!(int(&mut c, &["LOCK.RELEASE", "k", "holder"]), 1);
    let first = handles.remove(0).join().unwrap().unwrap();
    assert_eq!(int(&mut c, &["LOCK.RELEASE", "k", "w0"]), 1);
    let second = handles.remove(0).join().unwrap().unwrap();
    assert_eq!(int(&mut c, &["LOCK.RELEASE", "k", "w1"]), 1);
    let third = token(set.join().unwrap()).unwrap();
    assert!(first < second && second < third);
    // Wait and hold times were recorded; k is the most contended key.
    let text: String = cmd("INFO").arg("lock").query(&mut c).unwrap();
    let line = |name: &str| text.lines().find_map(|l| l.strip_prefix(name)).unwrap_or_default().to_string();
    assert!(line("lock_wait_time_ms:").starts_with("count=3,"), "{text}");
    assert!(line("lock_hold_time_ms:").starts_with("count=3,"), "{text}");
    let hot = rows(call(&mut c, &["LOCK.CONTENDED"]).unwrap());
    assert_eq!(field::<String>(&hot[0], "key"), "k");
    assert!(field::<i64>(&hot[0], "count") >= 3);
}

#[test]
fn a_set_is_replicated_and_persisted_exactly() {
    let master = Server::with(fast_sync().config("appendonly", "yes").config("appendfsync", "always"));
    let replica = Server::start();
    replicate(&replica, &master);
    let mut m = master.conn();
    let keys = ["x", "y", "z"];
    let t = token(macquire(&mut m, "o", 20_000, &keys, &["MODES", "PLAIN", "SHARED", "EXCLUSIVE"])).unwrap();
    let snapshots: Vec<LockSnapshot> = keys.iter().map(|k| lock_snapshot(&mut m, k)).collect();
    let mut r = replica.conn();
    wait_until(Duration::from_secs(10), "the set on the replica", || lock_info(&mut r, "z").is_some());
    for (key, snap) in keys.iter().zip(&snapshots) {
        let copy = lock_snapshot(&mut r, key);
        assert_eq!((&copy.raw, copy.pexpiretime), (&snap.raw, snap.pexpiretime), "{key} on the replica");
    }
    drop(m);
    let mut master = master;
    master.kill_and_restart();
    let mut m = master.conn();
    for (key, snap) in keys.iter().zip(&snapshots) {
        let back = lock_snapshot(&mut m, key);
        assert_eq!((&back.raw, back.pexpiretime), (&snap.raw, snap.pexpiretime), "{key} after a restart");
    }
    assert_eq!(mrelease(&mut m, "o", &keys), vec![1, 1, 1]);
    let next = token(call(&mut m, &["LOCK.ACQUIRE", "x", "n", "1000"])).unwrap();
    assert!(next > t, "no token is issued twice after a restart");
}

#[test]
fn inside_multi_a_set_does_not_block() {
    let server = Server::start();
    let mut c = server.conn();
    token(call(&mut c, &["LOCK.ACQUIRE", "b", "holder", "30000"])).unwrap();
    let replies: Vec<Value> = redis::pipe()
        .atomic()
        .cmd("LOCK.MACQUIRE")
        .arg("t")
        .arg(1000)
        .arg(2)
        .arg("a")
        .arg("b")
        .arg("WAIT")
        .arg(0)
        .query(&mut c)
        .unwrap();
    assert_eq!(replies, vec![Value::Nil]);
    assert_eq!(info_stat(&mut c, "waiters"), 0);
}

#[test]
fn a_set_is_refused_in_quarantine() {
    let server = Server::with(Opts::new().module_arg("quarantine-ms", "30000"));
    let mut c = server.conn();
    let e = err_text(macquire(&mut c, "t", 1000, &["a", "b"], &["WAIT", "1000"]));
    assert!(e.starts_with("QUARANTINE"), "{e}");
    assert_eq!(dbsize(&mut c), 0);
    assert_eq!(info_stat(&mut c, "waiters"), 0, "nobody waits out a quarantine");
}
