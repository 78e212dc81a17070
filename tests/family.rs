//! The lock family beyond the plain lock: read-write locks (LOCK.SHARED /
//! LOCK.EXCLUSIVE) and semaphores with expiring permits, on a
//! real redis-server with the module loaded. Every line of docs/commands.md
//! for LOCK.SHARED, LOCK.EXCLUSIVE and LOCK.SEMAPHORE, the misuse, FIFO
//! across modes, the semaphore bound under 50 clients, lock-delay,
//! sequencer checks, replication and AOF restart.

use lock_testkit::*;

use std::sync::{Arc, Barrier, Mutex};
use std::thread::{self, sleep};
use std::time::{Duration, Instant};

fn shared(c: &mut Connection, key: &str, token: &str, ttl: i64) -> Value {
    cmd("LOCK.SHARED").arg(key).arg(token).arg(ttl).query(c).unwrap()
}

fn exclusive(c: &mut Connection, key: &str, token: &str, ttl: i64) -> Value {
    cmd("LOCK.EXCLUSIVE").arg(key).arg(token).arg(ttl).query(c).unwrap()
}

fn permit(c: &mut Connection, key: &str, token: &str, permits: i64, ttl: i64) -> Value {
    cmd("LOCK.SEMAPHORE").arg(key).arg(token).arg(permits).arg(ttl).query(c).unwrap()
}

fn token_of(v: Value) -> i64 {
    match v {
        Value::Int(t) => t,
        other => panic!("expected a fencing token, got {other:?}"),
    }
}

fn int(c: &mut Connection, words: &[&str]) -> i64 {
    let mut command = cmd(words[0]);
    for w in &words[1..] {
        command.arg(*w);
    }
    command.query(c).unwrap()
}

/// The key's stored bytes, whatever its form (see [`stored_bytes`]).
fn raw(c: &mut Connection, key: &str) -> Option<String> {
    stored_bytes(c, key).map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
}

/// The holders listed by LOCK.INFO: (holder, mode, fence).
fn holders(c: &mut Connection, key: &str) -> Vec<(String, String, i64)> {
    let Some(info) = lock_info(c, key) else { return Vec::new() };
    let (_, list) = info.iter().find(|(n, _)| n == "holders").expect("holders field");
    let Value::Array(items) = list else { panic!("holders is not an array: {list:?}") };
    items
        .iter()
        .map(|item| {
            let Value::Array(pairs) = item else { panic!("holder is not an array") };
            let field = |name: &str| {
                let at = pairs
                    .chunks(2)
                    .position(|p| redis::from_redis_value::<String>(&p[0]).unwrap() == name)
                    .unwrap();
                pairs[at * 2 + 1].clone()
            };
            (
                redis::from_redis_value(&field("holder")).unwrap(),
                redis::from_redis_value(&field("mode")).unwrap(),
                redis::from_redis_value(&field("fence")).unwrap(),
            )
        })
        .collect()
}

#[test]
fn readers_share_a_writer_excludes_and_tokens_increase() {
    let s = Server::start();
    let mut c = s.conn();
    let r1 = token_of(shared(&mut c, "rw", "r1", 10_000));
    let r2 = token_of(shared(&mut c, "rw", "r2", 10_000));
    assert!(r2 > r1);
    assert_eq!(exclusive(&mut c, "rw", "w", 10_000), Value::Nil, "readers hold it");
    // A retry by a reader is idempotent: same token, TTL reset.
    sleep(Duration::from_millis(20));
    assert_eq!(token_of(shared(&mut c, "rw", "r1", 10_000)), r1);
    assert_eq!(holders(&mut c, "rw").len(), 2);
    assert_eq!(int(&mut c, &["LOCK.RELEASE", "rw", "r1"]), 1);
    assert_eq!(int(&mut c, &["LOCK.RELEASE", "rw", "r1"]), 0, "released once");
    assert_eq!(exclusive(&mut c, "rw", "w", 10_000), Value::Nil, "r2 still holds it");
    assert_eq!(int(&mut c, &["LOCK.RELEASE", "rw", "r2"]), 1);
    assert_eq!(int(&mut c, &["EXISTS", "rw"]), 0, "the last holder leaves nothing behind");
    let w = token_of(exclusive(&mut c, "rw", "w", 10_000));
    assert!(w > r2);
    assert_eq!(shared(&mut c, "rw", "r3", 10_000), Value::Nil, "a writer excludes readers");
    assert_eq!(exclusive(&mut c, "rw", "w2", 10_000), Value::Nil, "and other writers");
    assert_eq!(token_of(exclusive(&mut c, "rw", "w", 10_000)), w, "the writer's retry");
    let info = lock_info(&mut c, "rw").unwrap();
    assert_eq!(info[0], ("kind".to_string(), Value::BulkString(b"shared".to_vec())));
    assert_eq!(holders(&mut c, "rw"), vec![("w".to_string(), "write".to_string(), w)]);
    assert_eq!(int(&mut c, &["LOCK.EXTEND", "rw", "w", "20000"]), 1);
    assert_eq!(int(&mut c, &["LOCK.EXTEND", "rw", "r3", "20000"]), 0);
    let ttl = info_int_nested(&mut c, "rw", "ttl-ms");
    assert!(ttl > 10_000 && ttl <= 20_000, "{ttl}");
}

/// The first holder's field of a group's LOCK.INFO.
fn info_int_nested(c: &mut Connection, key: &str, field: &str) -> i64 {
    let info = lock_info(c, key).unwrap();
    let (_, Value::Array(list)) = info.iter().find(|(n, _)| n == "holders").unwrap() else { panic!() };
    let Value::Array(pairs) = &list[0] else { panic!() };
    let at =
        pairs.chunks(2).position(|p| redis::from_redis_value::<String>(&p[0]).unwrap() == field).unwrap();
    redis::from_redis_value(&pairs[at * 2 + 1]).unwrap()
}

#[test]
fn misuse_gets_clear_errors_and_changes_nothing() {
    let s = Server::start();
    let mut c = s.conn();
    token_of(shared(&mut c, "rw", "r1", 10_000));
    token_of(permit(&mut c, "sem", "p1", 2, 10_000));
    token_of(cmd("LOCK.ACQUIRE").arg("plain").arg("t").arg(10_000).query(&mut c).unwrap());
    let before: Vec<Option<String>> = ["rw", "sem", "plain"].iter().map(|k| raw(&mut c, k)).collect();
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec!["LOCK.EXCLUSIVE", "rw", "r1", "1000"],
            "ERR lock.exclusive: this token already holds the lock in read mode",
        ),
        (
            vec!["LOCK.SEMAPHORE", "sem", "p2", "3", "1000"],
            "ERR lock.semaphore: this semaphore has 2 permits, not 3",
        ),
        (vec!["LOCK.SEMAPHORE", "sem", "p2", "0", "1000"], "ERR lock.semaphore: permits 0 is out of range"),
        (
            vec!["LOCK.SEMAPHORE", "sem", "p2", "1001", "1000"],
            "ERR lock.semaphore: permits 1001 is out of range",
        ),
        (
            vec!["LOCK.SEMAPHORE", "sem", "p2", "+2", "1000"],
            "ERR lock.semaphore: permits '+2' is not an integer",
        ),
        (vec!["LOCK.SEMAPHORE", "sem", "p2", "2"], "ERR wrong number of arguments"),
        (vec!["LOCK.SEMAPHORE", "sem", "", "2", "1000"], "ERR lock.semaphore: token must not be empty"),
        (vec!["LOCK.SHARED", "rw", "r2", "0"], "ERR lock.shared: ttl-ms 0 is out of range"),
        (vec!["LOCK.SHARED", "rw", "r2", "1000", "WAIT"], "ERR lock.shared: option WAIT needs a value"),
        (vec!["LOCK.EXCLUSIVE", "rw", "w", "1000", "NX"], "ERR lock.exclusive: unknown option 'NX'"),
        (vec!["LOCK.EXCLUSIVE", "rw", "w", "07"], "ERR lock.exclusive: ttl-ms '07' is not an integer"),
        (vec!["LOCK.SHARED", "sem", "r", "1000"], "WRONGTYPE"),
        (vec!["LOCK.EXCLUSIVE", "plain", "r", "1000"], "WRONGTYPE"),
        (vec!["LOCK.SEMAPHORE", "rw", "r", "2", "1000"], "WRONGTYPE"),
        (vec!["LOCK.ACQUIRE", "rw", "r", "1000"], "WRONGTYPE"),
        (vec!["LOCK.ENTER", "sem", "r", "1000"], "WRONGTYPE"),
        (vec!["LOCK.EXIT", "rw", "r1"], "WRONGTYPE"),
        (vec!["LOCK.SEMAPHORE", "plain", "r", "2", "1000"], "WRONGTYPE"),
    ];
    for (words, want) in cases {
        let bytes: Vec<&[u8]> = words.iter().map(|w| w.as_bytes()).collect();
        let got = err_text(run(&mut c, &bytes));
        assert!(got.starts_with(want), "{words:?}: {got}");
    }
    let wrong = err_text(run(&mut c, &[b"LOCK.SHARED", b"sem", b"r", b"1000"]));
    assert!(wrong.contains("a semaphore lock, this command needs a shared lock"), "{wrong}");
    let after: Vec<Option<String>> = ["rw", "sem", "plain"].iter().map(|k| raw(&mut c, k)).collect();
    assert_eq!(before, after, "a refused call changes nothing");
    // A string that is not a lock.
    let _: () = cmd("SET").arg("str").arg("hello").query(&mut c).unwrap();
    assert!(err_text(run(&mut c, &[b"LOCK.SHARED", b"str", b"r", b"1000"])).starts_with("WRONGTYPE"));
    // Stored groups that break their kind's rules are not locks either.
    let _: () = cmd("SET").arg("bad").arg("LK1|S|0|2|w|1|2|1|a|r|1|2|1|b|").query(&mut c).unwrap();
    assert!(err_text(run(&mut c, &[b"LOCK.INFO", b"bad"])).starts_with("WRONGTYPE"));
}

#[test]
fn semaphore_grants_up_to_its_permits_each_expiring_alone() {
    let s = Server::start();
    let mut c = s.conn();
    let a = token_of(permit(&mut c, "sem", "a", 3, 300));
    let b = token_of(permit(&mut c, "sem", "b", 3, 10_000));
    let cc = token_of(permit(&mut c, "sem", "c", 3, 10_000));
    assert!(a < b && b < cc);
    assert_eq!(permit(&mut c, "sem", "d", 3, 10_000), Value::Nil, "all 3 permits taken");
    assert_eq!(token_of(permit(&mut c, "sem", "b", 3, 10_000)), b, "a holder's retry keeps its permit");
    let info = lock_info(&mut c, "sem").unwrap();
    assert!(info.contains(&("permits".to_string(), Value::Int(3))), "{info:?}");
    // `a` crashed: its permit expires alone, the others stay.
    sleep(Duration::from_millis(350));
    let d = token_of(permit(&mut c, "sem", "d", 3, 10_000));
    assert!(d > cc);
    let names: Vec<String> = holders(&mut c, "sem").into_iter().map(|h| h.0).collect();
    assert_eq!(names, ["b", "c", "d"]);
    assert_eq!(int(&mut c, &["LOCK.RELEASE", "sem", "a"]), 0, "an expired permit cannot be released");
    assert_eq!(int(&mut c, &["LOCK.CHECK", "sem", &b.to_string()]), 1);
    assert_eq!(int(&mut c, &["LOCK.CHECK", "sem", &a.to_string()]), 0);
    for t in ["b", "c", "d"] {
        assert_eq!(int(&mut c, &["LOCK.RELEASE", "sem", t]), 1);
    }
    assert_eq!(int(&mut c, &["EXISTS", "sem"]), 0);
    // Gone with its last holder, the semaphore may be created again with
    // another size.
    token_of(permit(&mut c, "sem", "x", 5, 1_000));
}

#[test]
fn fifo_across_modes_a_queued_writer_is_not_starved_by_readers() {
    let s = Server::start();
    let mut c = s.conn();
    token_of(shared(&mut c, "rw", "r0", 10_000));
    // A writer queues behind the reader.
    let order = Arc::new(Mutex::new(Vec::<String>::new()));
    let spawn = |name: &'static str, write: bool, start_after_ms: u64| {
        let url = s.url();
        let order = order.clone();
        thread::spawn(move || {
            sleep(Duration::from_millis(start_after_ms));
            let mut c = redis::Client::open(url).unwrap().get_connection().unwrap();
            let command = if write { "LOCK.EXCLUSIVE" } else { "LOCK.SHARED" };
            let v: Value =
                cmd(command).arg("rw").arg(name).arg(10_000).arg("WAIT").arg(10_000).query(&mut c).unwrap();
            token_of(v);
            order.lock().unwrap().push(name.to_string());
            if write {
                sleep(Duration::from_millis(100));
                assert_eq!(int(&mut c, &["LOCK.RELEASE", "rw", name]), 1);
            } else {
                // Readers keep holding (they are released below).
                sleep(Duration::from_millis(400));
                assert_eq!(int(&mut c, &["LOCK.RELEASE", "rw", name]), 1);
            }
        })
    };
    let w = spawn("w", true, 0);
    wait_until(Duration::from_secs(5), "the writer queued", || info_stat(&mut c, "waiters") == 1);
    // New readers arrive while the writer waits: they must not barge ahead,
    // even though a reader holds the lock (compatible with them).
    assert_eq!(shared(&mut c, "rw", "late", 10_000), Value::Nil, "no barging past the queued writer");
    let r1 = spawn("r1", false, 0);
    let r2 = spawn("r2", false, 50);
    wait_until(Duration::from_secs(5), "readers queued", || info_stat(&mut c, "waiters") == 3);
    let t = Instant::now();
    assert_eq!(int(&mut c, &["LOCK.RELEASE", "rw", "r0"]), 1);
    for h in [w, r1, r2] {
        h.join().unwrap();
    }
    let order = order.lock().unwrap().clone();
    assert_eq!(order[0], "w", "the writer first: {order:?}");
    let mut readers = order[1..].to_vec();
    readers.sort();
    assert_eq!(readers, ["r1", "r2"]);
    assert!(t.elapsed() < Duration::from_secs(3));
}

#[test]
fn queued_readers_are_served_together_when_the_writer_leaves() {
    let s = Server::start();
    let mut c = s.conn();
    token_of(exclusive(&mut c, "rw", "w", 10_000));
    let readers: Vec<_> = (0..5)
        .map(|i| {
            let url = s.url();
            thread::spawn(move || {
                let mut c = redis::Client::open(url).unwrap().get_connection().unwrap();
                let name = format!("r{i}");
                let v: Value = cmd("LOCK.SHARED")
                    .arg("rw")
                    .arg(&name)
                    .arg(5_000)
                    .arg("WAIT")
                    .arg(10_000)
                    .query(&mut c)
                    .unwrap();
                (token_of(v), Instant::now())
            })
        })
        .collect();
    wait_until(Duration::from_secs(5), "5 readers queued", || info_stat(&mut c, "waiters") == 5);
    let released = Instant::now();
    assert_eq!(int(&mut c, &["LOCK.RELEASE", "rw", "w"]), 1);
    let got: Vec<(i64, Instant)> = readers.into_iter().map(|h| h.join().unwrap()).collect();
    assert_eq!(holders(&mut c, "rw").len(), 5, "all 5 readers hold it at once");
    for (_, at) in got {
        assert!(at.duration_since(released) < Duration::from_millis(500));
    }
}

#[test]
fn a_waiting_writer_gets_the_lock_when_a_reader_expires() {
    let s = Server::start();
    let mut c = s.conn();
    token_of(shared(&mut c, "rw", "crashed", 300));
    let start = Instant::now();
    let v: Value =
        cmd("LOCK.EXCLUSIVE").arg("rw").arg("w").arg(5_000).arg("WAIT").arg(5_000).query(&mut c).unwrap();
    token_of(v);
    let waited = start.elapsed();
    assert!(waited >= Duration::from_millis(250) && waited < Duration::from_millis(800), "{waited:?}");
}

#[test]
fn semaphore_bound_holds_under_50_concurrent_clients() {
    let s = Server::start();
    const CLIENTS: usize = 50;
    const PERMITS: usize = 3;
    const ROUNDS: usize = 6;
    let barrier = Arc::new(Barrier::new(CLIENTS));
    // Windows [granted, releasing] on this process's monotonic clock. The
    // client's window lies inside the server's, so overlaps seen here are at
    // most the server's.
    let windows = Arc::new(Mutex::new(Vec::<(Instant, Instant)>::new()));
    let handles: Vec<_> = (0..CLIENTS)
        .map(|i| {
            let url = s.url();
            let barrier = barrier.clone();
            let windows = windows.clone();
            thread::spawn(move || {
                let mut c = redis::Client::open(url).unwrap().get_connection().unwrap();
                barrier.wait();
                let mut granted = 0;
                for round in 0..ROUNDS {
                    let token = format!("client-{i}-{round}");
                    let v: Value = cmd("LOCK.SEMAPHORE")
                        .arg("sem")
                        .arg(&token)
                        .arg(PERMITS)
                        .arg(10_000)
                        .arg("WAIT")
                        .arg(20_000)
                        .query(&mut c)
                        .unwrap();
                    if v == Value::Nil {
                        continue;
                    }
                    let from = Instant::now();
                    sleep(Duration::from_millis(2));
                    let to = Instant::now();
                    let released: i64 = cmd("LOCK.RELEASE").arg("sem").arg(&token).query(&mut c).unwrap();
                    assert_eq!(released, 1);
                    windows.lock().unwrap().push((from, to));
                    granted += 1;
                }
                granted
            })
        })
        .collect();
    let granted: usize = handles.into_iter().map(|h| h.join().unwrap()).sum();
    assert_eq!(granted, CLIENTS * ROUNDS, "every waiter was served in time");
    let windows = windows.lock().unwrap().clone();
    let mut events: Vec<(Instant, i32)> = windows.iter().flat_map(|&(a, b)| [(a, 1), (b, -1)]).collect();
    // At equal instants, count the end first (the windows are half-open).
    events.sort_by_key(|&(t, delta)| (t, delta));
    let (mut now, mut most) = (0, 0);
    for (_, delta) in events {
        now += delta;
        most = most.max(now);
    }
    assert!(most as usize <= PERMITS, "{most} holders at once, {PERMITS} permits");
    assert!(most >= 2, "the test should see permits in parallel (saw {most})");
    let mut c = s.conn();
    assert_eq!(int(&mut c, &["EXISTS", "sem"]), 0);
}

#[test]
fn lock_delay_after_expiry_but_not_after_release_for_groups() {
    let s = Server::with(Opts::new().module_arg("expiry-delay-ms", "400"));
    let mut c = s.conn();
    // Released: free at once.
    token_of(exclusive(&mut c, "rw", "w", 200));
    assert_eq!(int(&mut c, &["LOCK.RELEASE", "rw", "w"]), 1);
    token_of(shared(&mut c, "rw", "r", 200));
    assert_eq!(int(&mut c, &["LOCK.RELEASE", "rw", "r"]), 1);
    // Expired: the writer's slot stays taken for the delay.
    token_of(exclusive(&mut c, "rw", "w", 200));
    sleep(Duration::from_millis(300));
    assert_eq!(shared(&mut c, "rw", "r", 1_000), Value::Nil, "within the lock-delay");
    assert!(!is_held(&mut c, "rw"), "nobody holds it meanwhile");
    assert_eq!(refused_code(&mut c, "rw").as_deref(), Some("lock-delay"), "LOCK.INFO says why it is refused");
    let start = Instant::now();
    let v: Value =
        cmd("LOCK.SHARED").arg("rw").arg("r").arg(1_000).arg("WAIT").arg(2_000).query(&mut c).unwrap();
    token_of(v);
    let waited = start.elapsed();
    assert!(waited > Duration::from_millis(200) && waited < Duration::from_millis(700), "{waited:?}");
    // A semaphore permit that expired keeps its slot for the delay too.
    token_of(permit(&mut c, "sem", "a", 1, 200));
    sleep(Duration::from_millis(300));
    assert_eq!(permit(&mut c, "sem", "b", 1, 1_000), Value::Nil);
    sleep(Duration::from_millis(400));
    token_of(permit(&mut c, "sem", "b", 1, 1_000));
}

#[test]
fn quarantine_refuses_group_grants_but_not_renewals_or_releases() {
    let s = Server::with(Opts::new().module_arg("quarantine-ms", "0"));
    let mut c = s.conn();
    token_of(shared(&mut c, "rw", "r", 10_000));
    token_of(permit(&mut c, "sem", "a", 2, 10_000));
    let _: () = cmd("CONFIG").arg("SET").arg("lock.quarantine-ms").arg(60_000).query(&mut c).unwrap();
    // Only a start or a promotion begins a quarantine; simulate a
    // promotion of this master by making it a replica and back.
    let _: () = cmd("REPLICAOF").arg("127.0.0.1").arg(1).query(&mut c).unwrap();
    let _: () = cmd("REPLICAOF").arg("NO").arg("ONE").query(&mut c).unwrap();
    wait_until(Duration::from_secs(5), "quarantine", || info_stat(&mut c, "quarantine") == 1);
    for words in [
        vec!["LOCK.SHARED", "rw", "r2", "1000"],
        vec!["LOCK.SEMAPHORE", "sem", "b", "2", "1000"],
        vec!["LOCK.EXCLUSIVE", "free", "w", "1000"],
        vec!["LOCK.SHARED", "rw", "r2", "1000", "WAIT", "1000"],
    ] {
        let bytes: Vec<&[u8]> = words.iter().map(|w| w.as_bytes()).collect();
        assert!(err_text(run(&mut c, &bytes)).starts_with("QUARANTINE"), "{words:?}");
    }
    assert!(matches!(shared(&mut c, "rw", "r", 10_000), Value::Int(_)), "the holder's renewal works");
    assert_eq!(int(&mut c, &["LOCK.EXTEND", "sem", "a", "5000"]), 1);
    assert_eq!(int(&mut c, &["LOCK.RELEASE", "sem", "a"]), 1);
}

#[test]
fn renew_fence_and_check_work_on_every_kind() {
    let s = Server::start();
    let mut c = s.conn();
    let r = token_of(shared(&mut c, "rw", "t", 1_000));
    let p = token_of(permit(&mut c, "sem", "t", 4, 1_000));
    token_of(cmd("LOCK.ACQUIRE").arg("plain").arg("t").arg(1_000).query(&mut c).unwrap());
    let renewed: Vec<i64> = cmd("LOCK.RENEW")
        .arg("t")
        .arg(20_000)
        .arg("rw")
        .arg("sem")
        .arg("plain")
        .arg("none")
        .query(&mut c)
        .unwrap();
    assert_eq!(renewed, [1, 1, 1, 0]);
    assert!(info_int_nested(&mut c, "sem", "ttl-ms") > 10_000);
    let floor = p + 1_000_000;
    assert_eq!(int(&mut c, &["LOCK.FENCE", "sem", "t", &floor.to_string()]), 1);
    assert_eq!(int(&mut c, &["LOCK.FENCE", "rw", "other", &floor.to_string()]), 0);
    let next = token_of(permit(&mut c, "sem", "u", 4, 1_000));
    assert!(next > floor, "the counter was raised");
    assert_eq!(int(&mut c, &["LOCK.CHECK", "rw", &r.to_string()]), 1);
    assert_eq!(int(&mut c, &["LOCK.CHECK", "rw", &(r + 1).to_string()]), 0);
}

/// Raw value, native expiry and LOCK.INFO (without relative TTLs).
fn exact_state(c: &mut Connection, key: &str) -> (Option<String>, i64, Vec<(String, String, i64)>) {
    let pexpiretime: i64 = cmd("PEXPIRETIME").arg(key).query(c).unwrap();
    (raw(c, key), pexpiretime, holders(c, key))
}

#[test]
fn replicas_and_aof_restarts_reproduce_every_kind_exactly() {
    let master = Server::with(fast_sync().aof_always());
    let replica = Server::start();
    replicate(&replica, &master);
    let mut m = master.conn();
    token_of(shared(&mut m, "rw", "r1", 20_000));
    token_of(shared(&mut m, "rw", "r2", 20_000));
    token_of(exclusive(&mut m, "wx", "w", 20_000));
    token_of(permit(&mut m, "sem", "a", 3, 20_000));
    token_of(permit(&mut m, "sem", "b", 3, 25_000));
    assert_eq!(int(&mut m, &["LOCK.RELEASE", "sem", "a"]), 1);
    assert_eq!(int(&mut m, &["LOCK.EXTEND", "rw", "r2", "25000"]), 1);
    let acked: i64 = cmd("WAIT").arg(1).arg(2_000).query(&mut m).unwrap();
    assert_eq!(acked, 1);
    let mut r = replica.conn();
    let keys = ["rw", "wx", "sem"];
    let on_master: Vec<_> = keys.iter().map(|k| exact_state(&mut m, k)).collect();
    let on_replica: Vec<_> = keys.iter().map(|k| exact_state(&mut r, k)).collect();
    assert_eq!(on_master, on_replica);
    assert_eq!(on_master[2].2.len(), 1, "only b holds the semaphore");
    let mut master = master;
    master.kill_and_restart();
    let mut m = master.conn();
    let after: Vec<_> = keys.iter().map(|k| exact_state(&mut m, k)).collect();
    assert_eq!(on_master, after, "the AOF replay reproduces holders, tokens and deadlines");
    // Tokens issued after the restart are above every stored one.
    let highest = on_master.iter().flat_map(|s| s.2.iter().map(|h| h.2)).max().unwrap();
    assert!(token_of(permit(&mut m, "sem", "c", 3, 1_000)) > highest);
}

#[test]
fn a_run_of_readers_is_handed_off_in_one_replicated_write() {
    let master = Server::with(fast_sync());
    let replica = Server::start();
    replicate(&replica, &master);
    let mut m = master.conn();
    let mut r = replica.conn();
    token_of(exclusive(&mut m, "rw", "w", 10_000));
    let readers: Vec<_> = (0..8)
        .map(|i| {
            let url = master.url();
            thread::spawn(move || {
                let mut c = redis::Client::open(url).unwrap().get_connection().unwrap();
                let v: Value = cmd("LOCK.SHARED")
                    .arg("rw")
                    .arg(format!("r{i}"))
                    .arg(5_000)
                    .arg("WAIT")
                    .arg(10_000)
                    .query(&mut c)
                    .unwrap();
                token_of(v)
            })
        })
        .collect();
    wait_until(Duration::from_secs(5), "8 readers queued", || info_stat(&mut m, "waiters") == 8);
    let acked: i64 = cmd("WAIT").arg(1).arg(2_000).query(&mut m).unwrap();
    assert_eq!(acked, 1);
    let writes_before = (command_calls(&mut r, "set"), command_calls(&mut r, "hset"));
    assert_eq!(int(&mut m, &["LOCK.RELEASE", "rw", "w"]), 1);
    let mut tokens: Vec<i64> = readers.into_iter().map(|h| h.join().unwrap()).collect();
    let acked: i64 = cmd("WAIT").arg(1).arg(2_000).query(&mut m).unwrap();
    assert_eq!(acked, 1);
    let writes =
        (command_calls(&mut r, "set") - writes_before.0, command_calls(&mut r, "hset") - writes_before.1);
    assert_eq!(writes, (0, 1), "one HSET (of the 8 readers' fields) for the 8 readers");
    let on_replica = holders(&mut r, "rw");
    assert_eq!(on_replica, holders(&mut m, "rw"));
    assert_eq!(on_replica.len(), 8);
    tokens.sort();
    tokens.dedup();
    assert_eq!(tokens.len(), 8, "each reader has its own token");
}

#[test]
fn random_readers_and_writers_never_overlap_a_writer() {
    let s = Server::start();
    const CLIENTS: usize = 8;
    const ROUNDS: usize = 25;
    let windows = Arc::new(Mutex::new(Vec::<(bool, Instant, Instant)>::new()));
    let barrier = Arc::new(Barrier::new(CLIENTS));
    let handles: Vec<_> = (0..CLIENTS)
        .map(|i| {
            let (url, windows, barrier) = (s.url(), windows.clone(), barrier.clone());
            thread::spawn(move || {
                use rand::{Rng, SeedableRng};
                let mut rng = rand::rngs::StdRng::seed_from_u64(i as u64);
                let mut c = redis::Client::open(url).unwrap().get_connection().unwrap();
                barrier.wait();
                for round in 0..ROUNDS {
                    let write = rng.gen_bool(0.3);
                    let token = format!("c{i}-{round}");
                    let command = if write { "LOCK.EXCLUSIVE" } else { "LOCK.SHARED" };
                    let v: Value = cmd(command)
                        .arg("rw")
                        .arg(&token)
                        .arg(10_000)
                        .arg("WAIT")
                        .arg(20_000)
                        .query(&mut c)
                        .unwrap();
                    token_of(v);
                    let from = Instant::now();
                    sleep(Duration::from_micros(rng.gen_range(0..1500)));
                    let to = Instant::now();
                    assert_eq!(int(&mut c, &["LOCK.RELEASE", "rw", &token]), 1);
                    windows.lock().unwrap().push((write, from, to));
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let windows = windows.lock().unwrap().clone();
    assert_eq!(windows.len(), CLIENTS * ROUNDS);
    let writers = windows.iter().filter(|w| w.0).count();
    assert!(writers > 0 && writers < windows.len());
    for (i, &(write, from, to)) in windows.iter().enumerate() {
        if !write {
            continue;
        }
        for (j, &(_, f2, t2)) in windows.iter().enumerate() {
            assert!(i == j || t2 <= from || to <= f2, "a writer's window overlaps another hold");
        }
    }
    let readers_together = windows.iter().filter(|w| !w.0).any(|&(_, f, t)| {
        windows.iter().filter(|w| !w.0).filter(|&&(_, f2, t2)| f2 < t && f < t2).count() > 1
    });
    assert!(readers_together, "readers should have shared the lock at least once");
}

#[test]
fn two_holders_fenced_to_one_token_stay_a_readable_lock() {
    // Two nodes can issue the same number; the quorum client then raises two
    // readers (or permit holders) of one node to the same token.
    let s = Server::start();
    let mut c = s.conn();
    token_of(permit(&mut c, "sem", "a", 2, 10_000));
    let b = token_of(permit(&mut c, "sem", "b", 2, 10_000));
    let floor = (b + 1_000_000).to_string();
    assert_eq!(int(&mut c, &["LOCK.FENCE", "sem", "a", &floor]), 1);
    assert_eq!(int(&mut c, &["LOCK.FENCE", "sem", "b", &floor]), 1, "b holds: the counter is raised");
    let listed = holders(&mut c, "sem");
    assert_eq!(listed.len(), 2, "{listed:?}");
    assert_eq!(
        listed.iter().filter(|h| h.2.to_string() == floor).count(),
        1,
        "tokens stay unique: {listed:?}"
    );
    assert_eq!(int(&mut c, &["LOCK.CHECK", "sem", &floor]), 1);
    assert_eq!(int(&mut c, &["LOCK.RELEASE", "sem", "b"]), 1);
    assert_eq!(int(&mut c, &["LOCK.CHECK", "sem", &floor]), 1, "a still holds it");
    assert!(token_of(permit(&mut c, "sem", "c", 2, 10_000)) > floor.parse().unwrap());
}
