//! Every command of docs/commands.md against a real server, including
//! every misuse: each bad call gets a clear error and changes nothing.

use lock_testkit::*;
use std::thread::sleep;
use std::time::Duration;

fn acquire(c: &mut Connection, key: &str, token: &str, ttl: i64) -> Option<i64> {
    cmd("LOCK.ACQUIRE").arg(key).arg(token).arg(ttl).query(c).unwrap()
}

fn words(line: &[&str]) -> Vec<Vec<u8>> {
    line.iter().map(|w| w.as_bytes().to_vec()).collect()
}

fn call(c: &mut Connection, line: &[&str]) -> redis::RedisResult<Value> {
    let w = words(line);
    let refs: Vec<&[u8]> = w.iter().map(Vec::as_slice).collect();
    run(c, &refs)
}

fn int(c: &mut Connection, line: &[&str]) -> i64 {
    redis::from_redis_value(&call(c, line).unwrap()).unwrap()
}

fn is_nil(c: &mut Connection, line: &[&str]) -> bool {
    call(c, line).unwrap() == Value::Nil
}

/// Everything observable about the keyspace, to prove an error changed nothing.
fn snapshot(c: &mut Connection) -> Vec<(String, String, Option<Vec<u8>>, i64)> {
    let mut keys: Vec<String> = cmd("KEYS").arg("*").query(c).unwrap();
    keys.sort();
    keys.into_iter()
        .map(|k| {
            let t: String = cmd("TYPE").arg(&k).query(c).unwrap();
            let v: Option<Vec<u8>> = if t == "string" { cmd("GET").arg(&k).query(c).unwrap() } else { None };
            let e: i64 = cmd("PEXPIRETIME").arg(&k).query(c).unwrap();
            (k, t, v, e)
        })
        .collect()
}

#[test]
fn acquire_grants_renews_and_refuses() {
    let s = Server::start();
    let mut c = s.conn();
    let t1 = acquire(&mut c, "res", "alice", 10_000).expect("grant");
    assert_eq!(acquire(&mut c, "res", "bob", 10_000), None, "held by another token: nil");
    sleep(Duration::from_millis(20));
    let before = info_int(&mut c, "res", "deadline-ms").unwrap();
    assert_eq!(acquire(&mut c, "res", "alice", 10_000), Some(t1), "idempotent re-acquire: same token");
    assert!(info_int(&mut c, "res", "deadline-ms").unwrap() > before, "re-acquire resets the TTL");
    assert_eq!(int(&mut c, &["LOCK.RELEASE", "res", "alice"]), 1);
    let t2 = acquire(&mut c, "res", "bob", 10_000).expect("free again");
    assert!(t2 > t1, "fencing tokens increase: {t1} then {t2}");
    let t3 = acquire(&mut c, "other", "carol", 10_000).unwrap();
    assert!(t3 > t2, "one counter per node, across keys");
    // Binary tokens are compared byte for byte.
    let bin: Option<i64> =
        cmd("LOCK.ACQUIRE").arg("bin").arg(&b"a\x00b\xff"[..]).arg(1000).query(&mut c).unwrap();
    assert!(bin.is_some());
    let other: Option<i64> =
        cmd("LOCK.ACQUIRE").arg("bin").arg(&b"a\x00c\xff"[..]).arg(1000).query(&mut c).unwrap();
    assert_eq!(other, None);
}

#[test]
fn expired_lock_is_free_for_everyone_and_counted() {
    let s = Server::start();
    let mut c = s.conn();
    let t1 = acquire(&mut c, "res", "alice", 100).unwrap();
    sleep(Duration::from_millis(150));
    assert!(lock_info(&mut c, "res").is_none(), "expired lock reads as absent");
    assert_eq!(
        int(&mut c, &["LOCK.EXTEND", "res", "alice", "1000"]),
        0,
        "an expired lock cannot be extended"
    );
    assert_eq!(int(&mut c, &["EXISTS", "res"]), 0, "the write that found it expired removed it");
    assert_eq!(info_stat(&mut c, "expiries"), 1);
    acquire(&mut c, "res2", "alice", 100).unwrap();
    sleep(Duration::from_millis(150));
    assert_eq!(
        int(&mut c, &["LOCK.RELEASE", "res2", "alice"]),
        0,
        "an expired lock is not released by its old holder"
    );
    let t2 = acquire(&mut c, "res", "bob", 1000).expect("free after expiry");
    assert!(t2 > t1);
    assert_eq!(info_stat(&mut c, "expiries"), 2);
}

#[test]
fn release_only_by_the_holder() {
    let s = Server::start();
    let mut c = s.conn();
    assert_eq!(int(&mut c, &["LOCK.RELEASE", "res", "alice"]), 0, "free lock: 0");
    acquire(&mut c, "res", "alice", 10_000).unwrap();
    assert_eq!(int(&mut c, &["LOCK.RELEASE", "res", "bob"]), 0, "another token: 0");
    assert!(lock_info(&mut c, "res").is_some(), "still held after a foreign release");
    assert_eq!(int(&mut c, &["LOCK.RELEASE", "res", "alice"]), 1);
    assert_eq!(int(&mut c, &["EXISTS", "res"]), 0, "a freed lock leaves no key");
    assert_eq!(int(&mut c, &["LOCK.RELEASE", "res", "alice"]), 0, "second release: 0");
}

#[test]
fn extend_resets_ttl_and_never_creates() {
    let s = Server::start();
    let mut c = s.conn();
    assert_eq!(int(&mut c, &["LOCK.EXTEND", "res", "alice", "5000"]), 0);
    assert_eq!(int(&mut c, &["EXISTS", "res"]), 0, "EXTEND never re-creates a lock");
    acquire(&mut c, "res", "alice", 1000).unwrap();
    assert_eq!(int(&mut c, &["LOCK.EXTEND", "res", "bob", "5000"]), 0);
    let ttl = info_int(&mut c, "res", "ttl-ms").unwrap();
    assert!(ttl <= 1000, "foreign extend changed nothing: {ttl}");
    assert_eq!(int(&mut c, &["LOCK.EXTEND", "res", "alice", "20000"]), 1);
    let ttl = info_int(&mut c, "res", "ttl-ms").unwrap();
    assert!((19_000..=20_000).contains(&ttl), "TTL is now 20 s from now: {ttl}");
    assert_eq!(int(&mut c, &["LOCK.EXTEND", "res", "alice", "500"]), 1, "extend may also shorten");
    assert!(info_int(&mut c, "res", "ttl-ms").unwrap() <= 500);
}

#[test]
fn info_describes_the_lock() {
    let s = Server::start();
    let mut c = s.conn();
    assert!(is_nil(&mut c, &["LOCK.INFO", "res"]));
    let t = acquire(&mut c, "res", "alice", 5000).unwrap();
    let fields = lock_info(&mut c, "res").unwrap();
    let names: Vec<&str> = fields.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["kind", "holder", "holds", "fence", "ttl-ms", "deadline-ms", "waiters"]);
    let text = |name: &str| -> String {
        redis::from_redis_value(&fields.iter().find(|(n, _)| n == name).unwrap().1).unwrap()
    };
    assert_eq!(text("kind"), "plain");
    assert_eq!(text("holder"), "alice");
    assert_eq!(info_int(&mut c, "res", "holds"), Some(1));
    assert_eq!(info_int(&mut c, "res", "fence"), Some(t));
    let ttl = info_int(&mut c, "res", "ttl-ms").unwrap();
    assert!((4000..=5000).contains(&ttl));
    // The stored form is readable without the module.
    let raw: String = cmd("GET").arg("res").query(&mut c).unwrap();
    let deadline = info_int(&mut c, "res", "deadline-ms").unwrap();
    assert_eq!(raw, format!("LK1|P|{t}|{deadline}|1|alice"));
    // Native expiry is a backstop after the deadline (default tolerance 60 s).
    let pexpiretime: i64 = cmd("PEXPIRETIME").arg("res").query(&mut c).unwrap();
    assert!(
        pexpiretime >= deadline + 60_000 && pexpiretime < deadline + 61_000,
        "{pexpiretime} vs {deadline}"
    );
}

#[test]
fn reentrant_enter_exit() {
    let s = Server::start();
    let mut c = s.conn();
    let t = int(&mut c, &["LOCK.ENTER", "r", "owner-1", "5000"]);
    assert_eq!(int(&mut c, &["LOCK.ENTER", "r", "owner-1", "5000"]), t, "same token for every entry");
    assert_eq!(int(&mut c, &["LOCK.ENTER", "r", "owner-1", "5000"]), t);
    assert!(is_nil(&mut c, &["LOCK.ENTER", "r", "owner-2", "5000"]), "foreign owner: nil");
    assert_eq!(info_int(&mut c, "r", "holds"), Some(3));
    assert!(is_nil(&mut c, &["LOCK.EXIT", "r", "owner-2"]), "exit by a non-owner: nil");
    assert_eq!(int(&mut c, &["LOCK.EXIT", "r", "owner-1"]), 2);
    assert_eq!(int(&mut c, &["LOCK.EXIT", "r", "owner-1"]), 1);
    assert_eq!(int(&mut c, &["LOCK.EXIT", "r", "owner-1"]), 0);
    assert_eq!(int(&mut c, &["EXISTS", "r"]), 0);
    assert!(is_nil(&mut c, &["LOCK.EXIT", "r", "owner-1"]), "exit of a free lock: nil");
    // EXTEND, RELEASE and INFO work on reentrant locks too; RELEASE frees all holds.
    int(&mut c, &["LOCK.ENTER", "r", "o", "5000"]);
    int(&mut c, &["LOCK.ENTER", "r", "o", "5000"]);
    assert_eq!(int(&mut c, &["LOCK.EXTEND", "r", "o", "9000"]), 1);
    assert_eq!(info_int(&mut c, "r", "holds"), Some(2));
    assert_eq!(int(&mut c, &["LOCK.RELEASE", "r", "o"]), 1);
    assert_eq!(int(&mut c, &["EXISTS", "r"]), 0);
}

#[test]
fn exit_retried_with_the_same_request_id_is_applied_once() {
    let s = Server::start();
    let mut c = s.conn();
    for _ in 0..3 {
        int(&mut c, &["LOCK.ENTER", "r", "o", "5000"]);
    }
    assert_eq!(int(&mut c, &["LOCK.EXIT", "r", "o", "ID", "req-1"]), 2);
    // The reply was "lost"; the client retries the same request.
    assert_eq!(int(&mut c, &["LOCK.EXIT", "r", "o", "ID", "req-1"]), 2, "applied once");
    assert_eq!(int(&mut c, &["LOCK.EXIT", "r", "o", "id", "req-1"]), 2);
    assert_eq!(info_int(&mut c, "r", "holds"), Some(2));
    let raw: String = cmd("GET").arg("r").query(&mut c).unwrap();
    assert!(raw.contains("|2;req-1|o"), "the id is stored with the lock: {raw}");
    assert_eq!(int(&mut c, &["LOCK.EXIT", "r", "o", "ID", "req-2"]), 1);
    assert!(is_nil(&mut c, &["LOCK.EXIT", "r", "other", "ID", "req-2"]), "another owner: nil");
    let too_long = "x".repeat(65);
    for (line, expect) in [
        (vec!["LOCK.EXIT", "r", "o", "ID"], "needs a value"),
        (vec!["LOCK.EXIT", "r", "o", "ID", "a|b"], "request id 'a|b' must be"),
        (vec!["LOCK.EXIT", "r", "o", "ID", &too_long], "...(cut, 65 bytes) must be"),
        (vec!["LOCK.EXIT", "r", "o", "ID", "x", "extra"], "unknown option"),
        (vec!["LOCK.EXIT", "r", "o", "NX"], "unknown option"),
    ] {
        let e = err_text(call(&mut c, &line));
        assert!(e.starts_with("ERR") && e.contains(expect), "{line:?}: {e}");
    }
    assert_eq!(info_int(&mut c, "r", "holds"), Some(1), "refused calls changed nothing");
    assert_eq!(int(&mut c, &["LOCK.EXIT", "r", "o"]), 0);
    assert_eq!(int(&mut c, &["EXISTS", "r"]), 0);
}

#[test]
fn fence_raises_the_counter_and_the_holders_token_only_for_the_holder() {
    let s = Server::start();
    let mut c = s.conn();
    let t = acquire(&mut c, "res", "alice", 5000).unwrap();
    let floor = (t + 5_000_000).to_string();
    assert_eq!(int(&mut c, &["LOCK.FENCE", "res", "bob", &floor]), 0, "non-holder: 0");
    let next = acquire(&mut c, "other", "x", 5000).unwrap();
    assert!(next < t + 5_000_000, "a refused FENCE raised nothing");
    assert_eq!(int(&mut c, &["LOCK.FENCE", "res", "alice", &floor]), 1);
    let after = acquire(&mut c, "third", "x", 5000).unwrap();
    assert!(after > t + 5_000_000, "next grant is above the floor: {after}");
    // The holder's own token followed the floor: its retry, LOCK.INFO and
    // LOCK.CHECK now agree with the quorum's token.
    let raised = t + 5_000_000;
    assert_eq!(info_int(&mut c, "res", "fence"), Some(raised));
    assert_eq!(acquire(&mut c, "res", "alice", 5000).unwrap(), raised, "a retry answers the raised token");
    assert_eq!(int(&mut c, &["LOCK.CHECK", "res", &raised.to_string()]), 1);
    assert_eq!(int(&mut c, &["LOCK.CHECK", "res", &t.to_string()]), 0);
    // A lower floor (a quorum token below this node's own) is recorded
    // too; the counter is not lowered.
    assert_eq!(int(&mut c, &["LOCK.FENCE", "res", "alice", &t.to_string()]), 1);
    assert_eq!(info_int(&mut c, "res", "fence"), Some(t));
    assert_eq!(int(&mut c, &["LOCK.CHECK", "res", &t.to_string()]), 1);
    assert_eq!(int(&mut c, &["LOCK.CHECK", "res", &raised.to_string()]), 0);
    assert!(acquire(&mut c, "fourth", "x", 5000).unwrap() > after, "the counter stays above the floor");
    let absurd = err_text(call(&mut c, &["LOCK.FENCE", "res", "alice", "9223372036854775807"]));
    assert!(absurd.starts_with("ERR") && absurd.contains("floor"), "{absurd}");
}

#[test]
fn check_answers_whether_a_token_is_the_current_grant() {
    let s = Server::start();
    let mut c = s.conn();
    let t1 = acquire(&mut c, "res", "alice", 5000).unwrap();
    assert_eq!(int(&mut c, &["LOCK.CHECK", "res", &t1.to_string()]), 1);
    assert_eq!(int(&mut c, &["LOCK.CHECK", "res", &(t1 - 1).to_string()]), 0);
    assert_eq!(int(&mut c, &["LOCK.RELEASE", "res", "alice"]), 1);
    assert_eq!(int(&mut c, &["LOCK.CHECK", "res", &t1.to_string()]), 0, "released: no longer current");
    let t2 = acquire(&mut c, "res", "bob", 100).unwrap();
    assert_eq!(int(&mut c, &["LOCK.CHECK", "res", &t1.to_string()]), 0, "the old holder's token is stale");
    assert_eq!(int(&mut c, &["LOCK.CHECK", "res", &t2.to_string()]), 1);
    sleep(Duration::from_millis(150));
    assert_eq!(int(&mut c, &["LOCK.CHECK", "res", &t2.to_string()]), 0, "expired: no longer current");
    int(&mut c, &["LOCK.ENTER", "re", "o", "5000"]);
    let t3 = info_int(&mut c, "re", "fence").unwrap();
    assert_eq!(int(&mut c, &["LOCK.CHECK", "re", &t3.to_string()]), 1, "works on reentrant locks");
    for (line, expect) in [
        (vec!["LOCK.CHECK", "res", "-1"], "out of range"),
        (vec!["LOCK.CHECK", "res", "x"], "not an integer"),
        (vec!["LOCK.CHECK", "res"], "wrong number of arguments"),
    ] {
        let e = err_text(call(&mut c, &line));
        assert!(e.starts_with("ERR") && e.contains(expect), "{line:?}: {e}");
    }
    let _: () = cmd("SET").arg("str").arg("x").query(&mut c).unwrap();
    assert!(err_text(call(&mut c, &["LOCK.CHECK", "str", "1"])).starts_with("WRONGTYPE"));
}

#[test]
fn renew_extends_many_locks_of_one_owner() {
    let s = Server::start();
    let mut c = s.conn();
    // 100 keys per call by default; up to 1000 when configured.
    let limit: Vec<String> = cmd("CONFIG").arg("GET").arg("lock.max-renew-keys").query(&mut c).unwrap();
    assert_eq!(limit, ["lock.max-renew-keys", "100"]);
    let hundred_and_one: Vec<String> = (0..101).map(|i| format!("job:{i}")).collect();
    let e = err_text(cmd("LOCK.RENEW").arg("watchdog").arg(100).arg(&hundred_and_one).query(&mut c));
    assert!(e.contains("101 keys, more than the limit of 100"), "{e}");
    let _: () = cmd("CONFIG").arg("SET").arg("lock.max-renew-keys").arg(1000).query(&mut c).unwrap();
    let e = err_text(cmd("CONFIG").arg("SET").arg("lock.max-renew-keys").arg(1001).query(&mut c));
    assert!(e.contains("lock.max-renew-keys must be between 1 and 1000"), "{e}");
    let keys: Vec<String> = (0..1000).map(|i| format!("job:{i}")).collect();
    let mut pipe = redis::pipe();
    for k in &keys {
        pipe.cmd("LOCK.ACQUIRE").arg(k).arg("watchdog").arg(1000);
    }
    let tokens: Vec<i64> = pipe.query(&mut c).unwrap();
    assert_eq!(tokens.len(), 1000);
    acquire(&mut c, "foreign", "someone-else", 1000).unwrap();
    let mut renew = cmd("LOCK.RENEW");
    renew.arg("watchdog").arg(20_000).arg(&keys);
    let replies: Vec<i64> = renew.query(&mut c).unwrap();
    assert_eq!(replies, vec![1; 1000], "all 1000 of the owner's locks renewed in one call");
    let replies: Vec<i64> = cmd("LOCK.RENEW")
        .arg("watchdog")
        .arg(20_000)
        .arg("job:5")
        .arg("foreign")
        .arg("missing")
        .query(&mut c)
        .unwrap();
    assert_eq!(replies, [1, 0, 0], "a foreign lock and a missing one are not renewed");
    assert!(info_int(&mut c, "job:0", "ttl-ms").unwrap() > 19_000);
    assert!(info_int(&mut c, "job:999", "ttl-ms").unwrap() > 19_000);
    assert!(info_int(&mut c, "foreign", "ttl-ms").unwrap() <= 1000);
    assert_eq!(int(&mut c, &["EXISTS", "missing"]), 0, "RENEW never creates a lock");

    // A key that is not a lock fails the whole call, and nothing changes.
    let _: () = cmd("SET").arg("str").arg("x").query(&mut c).unwrap();
    let before = snapshot(&mut c);
    let e = err_text(call(&mut c, &["LOCK.RENEW", "watchdog", "25000", "job:1", "str"]));
    assert!(e.starts_with("WRONGTYPE"), "{e}");
    assert_eq!(snapshot(&mut c), before);
    for (line, expect) in [
        (vec!["LOCK.RENEW", "watchdog", "0", "job:1"], "out of range"),
        (vec!["LOCK.RENEW", "", "100", "job:1"], "must not be empty"),
        (vec!["LOCK.RENEW", "watchdog", "100"], "wrong number of arguments"),
    ] {
        let e = err_text(call(&mut c, &line));
        assert!(e.starts_with("ERR") && e.contains(expect), "{line:?}: {e}");
    }
    let mut too_many = cmd("LOCK.RENEW");
    too_many.arg("watchdog").arg(100).arg(&keys).arg("one-more");
    let e = err_text(too_many.query(&mut c));
    assert!(e.contains("more than the limit of 1000"), "{e}");
    assert_eq!(snapshot(&mut c), before, "refused calls changed nothing");
    let getkeys: Vec<String> = cmd("COMMAND")
        .arg("GETKEYS")
        .arg("LOCK.RENEW")
        .arg("t")
        .arg(5)
        .arg("a")
        .arg("b")
        .query(&mut c)
        .unwrap();
    assert_eq!(getkeys, ["a", "b"]);
}

#[test]
fn lock_delay_after_expiry_but_not_after_release() {
    let s = Server::with(Opts::new().module_arg("expiry-delay-ms", "400"));
    let mut c = s.conn();
    let t1 = acquire(&mut c, "res", "alice", 100).unwrap();
    sleep(Duration::from_millis(150));
    // Expired without a release: nobody gets it during the delay.
    assert_eq!(acquire(&mut c, "res", "bob", 1000), None, "lock-delay after expiry");
    assert!(!is_held(&mut c, "res"), "nobody holds it meanwhile");
    assert_eq!(
        refused_code(&mut c, "res").as_deref(),
        Some("lock-delay"),
        "LOCK.INFO says why it is refused"
    );
    assert_eq!(int(&mut c, &["LOCK.RELEASE", "res", "alice"]), 0, "the old holder cannot act");
    assert_eq!(int(&mut c, &["LOCK.CHECK", "res", &t1.to_string()]), 0);
    wait_until(Duration::from_secs(3), "lock-delay to pass", || {
        acquire(&mut c, "res", "bob", 1000).is_some()
    });
    // A normal release frees at once.
    acquire(&mut c, "other", "alice", 100).unwrap();
    assert_eq!(int(&mut c, &["LOCK.RELEASE", "other", "alice"]), 1);
    assert!(acquire(&mut c, "other", "bob", 100).is_some(), "no delay after a release");
    // A waiter is served when the delay ends, not at the deadline.
    let started = std::time::Instant::now();
    acquire(&mut c, "w", "alice", 100).unwrap();
    let served: Option<i64> =
        cmd("LOCK.ACQUIRE").arg("w").arg("bob").arg(1000).arg("WAIT").arg(3000).query(&mut c).unwrap();
    let waited = started.elapsed();
    assert!(served.is_some());
    assert!(waited >= Duration::from_millis(480) && waited < Duration::from_millis(1500), "{waited:?}");
    // The key's backstop expiry covers the delay too.
    let deadline = info_int(&mut c, "w", "deadline-ms").unwrap();
    let pexpiretime: i64 = cmd("PEXPIRETIME").arg("w").query(&mut c).unwrap();
    assert!(pexpiretime >= deadline + 60_000 + 400, "{pexpiretime} vs {deadline}");
}

#[test]
fn wrongtype_on_keys_that_are_not_locks_of_that_kind() {
    let s = Server::start();
    let mut c = s.conn();
    let _: () = cmd("SET").arg("str").arg("hello").query(&mut c).unwrap();
    let _: () = cmd("RPUSH").arg("list").arg("a").query(&mut c).unwrap();
    acquire(&mut c, "plain", "o", 5000).unwrap();
    int(&mut c, &["LOCK.ENTER", "re", "o", "5000"]);
    let before = snapshot(&mut c);
    for line in [
        &["LOCK.ACQUIRE", "str", "o", "100"][..],
        &["LOCK.RELEASE", "list", "o"],
        &["LOCK.EXTEND", "str", "o", "100"],
        &["LOCK.ENTER", "list", "o", "100"],
        &["LOCK.EXIT", "str", "o"],
        &["LOCK.FENCE", "str", "o", "1"],
        &["LOCK.INFO", "list"],
        &["LOCK.ACQUIRE", "re", "o", "100"],
        &["LOCK.ENTER", "plain", "o", "100"],
        &["LOCK.EXIT", "plain", "o"],
    ] {
        let e = err_text(call(&mut c, line));
        assert!(e.starts_with("WRONGTYPE"), "{line:?}: {e}");
    }
    assert_eq!(snapshot(&mut c), before, "WRONGTYPE changed nothing");
}

#[test]
fn every_misuse_is_an_err_that_changes_nothing() {
    let s = Server::start();
    let mut c = s.conn();
    acquire(&mut c, "held", "alice", 20_000).unwrap();
    int(&mut c, &["LOCK.ENTER", "re", "alice", "20000"]);
    let before = snapshot(&mut c);
    let grants = info_stat(&mut c, "grants");
    let long = "x".repeat(257);
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["LOCK.ACQUIRE", "k", "t"], "wrong number of arguments"),
        (vec!["LOCK.ACQUIRE", "k"], "wrong number of arguments"),
        (vec!["LOCK.ACQUIRE", "k", "t", "0"], "out of range"),
        (vec!["LOCK.ACQUIRE", "k", "t", "-5"], "out of range"),
        (vec!["LOCK.ACQUIRE", "k", "t", "30001"], "lock.max-ttl-ms"),
        (vec!["LOCK.ACQUIRE", "k", "t", "+5"], "not an integer"),
        (vec!["LOCK.ACQUIRE", "k", "t", "07"], "not an integer"),
        (vec!["LOCK.ACQUIRE", "k", "t", " 5"], "not an integer"),
        (vec!["LOCK.ACQUIRE", "k", "t", "1.5"], "not an integer"),
        (vec!["LOCK.ACQUIRE", "k", "t", "99999999999999999999"], "not an integer"),
        (vec!["LOCK.ACQUIRE", "k", "", "100"], "must not be empty"),
        (vec!["LOCK.ACQUIRE", "k", &long, "100"], "longer than the limit of 256"),
        (vec!["LOCK.ACQUIRE", "k", "t", "100", "NX"], "unknown option 'NX'"),
        (vec!["LOCK.ACQUIRE", "k", "t", "100", "WAIT"], "needs a value"),
        (vec!["LOCK.ACQUIRE", "k", "t", "100", "WAIT", "1", "wait", "2"], "given twice"),
        (vec!["LOCK.ACQUIRE", "k", "t", "100", "WAIT", "-1"], "out of range"),
        (vec!["LOCK.ACQUIRE", "k", "t", "100", "WAIT", "x"], "not an integer"),
        (vec!["LOCK.ACQUIRE", "held", "alice", "0"], "out of range"),
        (vec!["LOCK.RELEASE", "held"], "wrong number of arguments"),
        (vec!["LOCK.RELEASE", "held", "alice", "extra"], "wrong number of arguments"),
        (vec!["LOCK.RELEASE", "held", ""], "must not be empty"),
        (vec!["LOCK.EXTEND", "held", "alice"], "wrong number of arguments"),
        (vec!["LOCK.EXTEND", "held", "alice", "0"], "out of range"),
        (vec!["LOCK.EXTEND", "held", "alice", "30001"], "lock.max-ttl-ms"),
        (vec!["LOCK.EXTEND", "held", "alice", "1e3"], "not an integer"),
        (vec!["LOCK.EXTEND", "held", "alice", "100", "extra"], "wrong number of arguments"),
        (vec!["LOCK.ENTER", "re", "alice", "-1"], "out of range"),
        (vec!["LOCK.ENTER", "re", "alice"], "wrong number of arguments"),
        (vec!["LOCK.EXIT", "re"], "wrong number of arguments"),
        (vec!["LOCK.EXIT", "re", &long], "longer than the limit"),
        (vec!["LOCK.FENCE", "held", "alice"], "wrong number of arguments"),
        (vec!["LOCK.FENCE", "held", "alice", "-1"], "out of range"),
        (vec!["LOCK.FENCE", "held", "alice", "x"], "not an integer"),
        (vec!["LOCK.INFO"], "wrong number of arguments"),
        (vec!["LOCK.INFO", "held", "extra"], "wrong number of arguments"),
    ];
    for (line, expect) in &cases {
        let e = err_text(call(&mut c, line));
        assert!(e.starts_with("ERR"), "{line:?}: {e}");
        assert!(e.contains(expect), "{line:?}: {e:?} should mention {expect:?}");
    }
    assert_eq!(snapshot(&mut c), before, "no error changed any key or TTL");
    assert_eq!(info_stat(&mut c, "grants"), grants);
    // Arity errors are answered by Redis itself (the arity is declared);
    // every other rejection reached the module and was counted.
    let reached = cases.iter().filter(|(_, e)| !e.contains("wrong number")).count() as i64;
    assert_eq!(info_stat(&mut c, "rejected"), reached, "rejections counted");
}

#[test]
fn info_lock_counts() {
    let s = Server::start();
    let mut c = s.conn();
    let t = acquire(&mut c, "a", "x", 5000).unwrap();
    acquire(&mut c, "a", "x", 5000).unwrap();
    acquire(&mut c, "a", "y", 5000);
    int(&mut c, &["LOCK.EXTEND", "a", "x", "5000"]);
    int(&mut c, &["LOCK.RELEASE", "a", "x"]);
    assert_eq!(info_stat(&mut c, "grants"), 1);
    assert_eq!(info_stat(&mut c, "renewals"), 1);
    assert_eq!(info_stat(&mut c, "contended"), 1);
    assert_eq!(info_stat(&mut c, "extensions"), 1);
    assert_eq!(info_stat(&mut c, "releases"), 1);
    assert_eq!(info_stat(&mut c, "last_fencing_token"), t);
}

#[test]
fn keys_are_declared_for_cluster_routing() {
    let s = Server::start();
    let mut c = s.conn();
    for line in [
        &["COMMAND", "GETKEYS", "LOCK.ACQUIRE", "mykey", "t", "100"][..],
        &["COMMAND", "GETKEYS", "LOCK.RELEASE", "mykey", "t"],
        &["COMMAND", "GETKEYS", "LOCK.EXTEND", "mykey", "t", "5"],
        &["COMMAND", "GETKEYS", "LOCK.ENTER", "mykey", "t", "5"],
        &["COMMAND", "GETKEYS", "LOCK.EXIT", "mykey", "t"],
        &["COMMAND", "GETKEYS", "LOCK.FENCE", "mykey", "t", "5"],
        &["COMMAND", "GETKEYS", "LOCK.INFO", "mykey"],
        &["COMMAND", "GETKEYS", "LOCK.CHECK", "mykey", "5"],
        &["COMMAND", "GETKEYS", "LOCK.SHARED", "mykey", "t", "5"],
        &["COMMAND", "GETKEYS", "LOCK.EXCLUSIVE", "mykey", "t", "5", "WAIT", "10"],
        &["COMMAND", "GETKEYS", "LOCK.SEMAPHORE", "mykey", "t", "3", "5"],
    ] {
        let keys: Vec<String> = redis::from_redis_value(&call(&mut c, line).unwrap()).unwrap();
        assert_eq!(keys, ["mykey"], "{line:?}");
    }
    // Redis enforces the declared arity itself.
    let e = err_text(call(&mut c, &["LOCK.INFO"]));
    assert!(e.contains("wrong number of arguments"), "{e}");
}

#[test]
fn max_ttl_is_configurable_everywhere() {
    // As a loadmodule argument.
    let s = Server::with(Opts::new().module_arg("max-ttl-ms", "5000"));
    let mut c = s.conn();
    let e = err_text(call(&mut c, &["LOCK.ACQUIRE", "k", "t", "5001"]));
    assert!(e.contains("5000"), "{e}");
    assert!(acquire(&mut c, "k", "t", 5000).is_some());
    // With CONFIG SET / GET.
    let _: () = cmd("CONFIG").arg("SET").arg("lock.max-ttl-ms").arg("60000").query(&mut c).unwrap();
    let got: Vec<String> = cmd("CONFIG").arg("GET").arg("lock.max-ttl-ms").query(&mut c).unwrap();
    assert_eq!(got, ["lock.max-ttl-ms", "60000"]);
    assert!(acquire(&mut c, "k2", "t", 60_000).is_some());
    // Invalid values are refused with a message naming the setting and range.
    for bad in ["0", "-1", "86400001", "abc"] {
        let e = err_text(cmd("CONFIG").arg("SET").arg("lock.max-ttl-ms").arg(bad).query(&mut c));
        assert!(e.contains("lock.max-ttl-ms") || e.contains("argument"), "{bad}: {e}");
    }
    let got: Vec<String> = cmd("CONFIG").arg("GET").arg("lock.max-ttl-ms").query(&mut c).unwrap();
    assert_eq!(got[1], "60000", "a refused CONFIG SET changed nothing");

    // As a redis.conf / command-line setting.
    let s = Server::with(Opts::new().config("lock.max-ttl-ms", "2000"));
    let mut c = s.conn();
    assert!(err_text(call(&mut c, &["LOCK.ACQUIRE", "k", "t", "2001"])).contains("2000"));
}

#[test]
fn invalid_config_at_startup_is_logged_clearly() {
    let dir = TempDir::new("badconf");
    let log = dir.path().join("redis.log");
    let port = free_port();
    let status = std::process::Command::new(server_bin())
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", ""])
        .arg("--dir")
        .arg(dir.path())
        .arg("--logfile")
        .arg(&log)
        .arg("--loadmodule")
        .arg(module_path())
        .args(["max-ttl-ms", "0"])
        .stdout(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(!status.success(), "{}: a server with an invalid lock setting must not start", server_name());
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.contains("lock.max-ttl-ms must be between 1 and 86400000, got 0"),
        "{}: {text}",
        server_name()
    );
}
