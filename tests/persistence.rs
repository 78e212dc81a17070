//! Safety property 6 (docs/safety.md, exact persistence): an AOF replay and an RDB load
//! reproduce the same holders, hold counts, fencing tokens and absolute
//! expiry instants. Nothing time-relative is persisted: a lock replayed after
//! its deadline must not come back with a fresh TTL.
//!
//! Every test kills redis-server with SIGKILL (no shutdown save, no AOF
//! rewrite) and starts it again on the same directory.

use lock_testkit::*;

use std::thread::sleep;
use std::time::{Duration, Instant};

/// LOCK.INFO, GET and PEXPIRETIME of a held lock, checked for its stored form.
fn snapshot(c: &mut Connection, key: &str) -> LockSnapshot {
    let snap = lock_snapshot(c, key);
    check_stored_form(&snap);
    snap
}

/// The raw value is `LK1|<P|R>|fence|deadline|holds|owner` and agrees with
/// LOCK.INFO; the native expiry is a backstop at or after the deadline.
fn check_stored_form(snap: &LockSnapshot) {
    let text = String::from_utf8(snap.raw.clone()).expect("utf-8 lock value in these tests");
    let letter = match snap.text("kind").as_str() {
        "plain" => "P",
        "reentrant" => "R",
        other => panic!("unknown kind {other}"),
    };
    let expected = format!(
        "LK1|{letter}|{}|{}|{}|{}",
        snap.int("fence"),
        snap.int("deadline-ms"),
        snap.int("holds"),
        snap.text("holder")
    );
    assert_eq!(text, expected, "stored form disagrees with LOCK.INFO");
    assert!(
        snap.pexpiretime >= snap.int("deadline-ms"),
        "native expiry {} before the lock deadline {}",
        snap.pexpiretime,
        snap.int("deadline-ms")
    );
}

fn acquire(c: &mut Connection, key: &str, token: &str, ttl_ms: i64) -> Value {
    run(c, &[b"LOCK.ACQUIRE", key.as_bytes(), token.as_bytes(), ttl_ms.to_string().as_bytes()]).unwrap()
}

fn acquire_ok(c: &mut Connection, key: &str, token: &str, ttl_ms: i64) -> i64 {
    match acquire(c, key, token, ttl_ms) {
        Value::Int(fence) => fence,
        other => panic!("ACQUIRE {key} {token} was not granted: {other:?}"),
    }
}

fn enter_ok(c: &mut Connection, key: &str, owner: &str, ttl_ms: i64) -> i64 {
    cmd("LOCK.ENTER").arg(key).arg(owner).arg(ttl_ms).query(c).unwrap()
}

fn exists(c: &mut Connection, key: &str) -> i64 {
    cmd("EXISTS").arg(key).query(c).unwrap()
}

/// Sleeps until `since + wait` on the monotonic clock.
fn sleep_until(since: Instant, wait: Duration) {
    let left = wait.saturating_sub(since.elapsed());
    sleep(left);
}

/// kill -9 and restart, reporting how long the server was down.
fn crash(s: &mut Server) -> Duration {
    let t = Instant::now();
    s.kill_and_restart();
    t.elapsed()
}

#[test]
fn aof_always_restores_a_held_lock_exactly() {
    let mut s = Server::with(Opts::new().aof_always());
    let mut c = s.conn();
    let fence = acquire_ok(&mut c, "res", "tok-A", 20_000);
    // An EXTEND must be replayed with its absolute deadline too.
    sleep(Duration::from_millis(200));
    let extended: i64 = cmd("LOCK.EXTEND").arg("res").arg("tok-A").arg(25_000).query(&mut c).unwrap();
    assert_eq!(extended, 1);
    let before = snapshot(&mut c, "res");
    assert_eq!(before.int("fence"), fence);
    assert_eq!(before.text("holder"), "tok-A");
    assert_eq!(before.text("kind"), "plain");
    assert_eq!(before.int("holds"), 1);
    let last_before = info_stat(&mut c, "last_fencing_token");

    // Let some time pass so that a fresh TTL would show in deadline-ms.
    sleep(Duration::from_millis(300));
    let down = crash(&mut s);
    let mut c = s.conn();
    let after = snapshot(&mut c, "res");
    assert_eq!(after, before, "AOF replay changed the lock (down {down:?})");
    let ttl = info_int(&mut c, "res", "ttl-ms").unwrap();
    assert!(
        ttl > 0 && ttl < 25_000 - 300,
        "ttl-ms {ttl} after restart is not the remaining time of the old deadline"
    );

    // Still held: another token is refused, the holder keeps its token.
    assert_eq!(acquire(&mut c, "res", "tok-B", 1_000), Value::Nil);
    let released: i64 = cmd("LOCK.RELEASE").arg("res").arg("tok-B").query(&mut c).unwrap();
    assert_eq!(released, 0, "a non-holder released the restored lock");
    assert_eq!(
        acquire_ok(&mut c, "res", "tok-A", 20_000),
        fence,
        "the holder's idempotent re-acquire must keep its fencing token"
    );

    // Fencing tokens issued after the restart are above every earlier one.
    let next = acquire_ok(&mut c, "other", "tok-C", 1_000);
    assert!(
        next > fence && next > last_before,
        "token {next} after restart not above {fence} / {last_before}"
    );
    eprintln!("aof exact restore: down {down:?}, fence {fence} -> next grant {next}");
}

/// Servers here whose locks expire while they are down run with a restart
/// grace of 1 s (`lock.clock-jump-tolerance-ms`): a lock restored from disk
/// is taken over that long after its deadline, not at it.
fn short_grace() -> Opts {
    Opts::new().module_arg("clock-jump-tolerance-ms", "1000")
}

/// Waits (bounded) until `token` gets `key`, a 1500 ms lock granted just
/// after `t0` and restored from disk, and checks that it did not before the
/// deadline plus the 1 s grace; returns the new fencing token.
fn taken_over_after_the_grace(c: &mut Connection, key: &str, token: &str, t0: Instant) -> i64 {
    let mut next = None;
    wait_until(Duration::from_secs(5), "another token to get the expired lock", || {
        next = match acquire(c, key, token, 1_000) {
            Value::Int(fence) => Some(fence),
            _ => None,
        };
        next.is_some()
    });
    let granted_after = t0.elapsed();
    assert!(
        granted_after >= Duration::from_millis(2_450),
        "{key} taken over {granted_after:?} after a 1500 ms grant: before the restart grace ended"
    );
    next.unwrap_or_default()
}

#[test]
fn aof_replay_after_the_deadline_does_not_revive_the_lock() {
    let mut s = Server::with(short_grace().aof_always());
    let mut c = s.conn();
    let t0 = Instant::now();
    let fence = acquire_ok(&mut c, "res", "tok-A", 1_500);
    let before = snapshot(&mut c, "res");
    s.kill();
    // Down for longer than the TTL: a replayed relative TTL would revive it.
    sleep_until(t0, Duration::from_millis(2_000));
    s.restart();
    let mut c = s.conn();

    // The backstop key may still be there; if it is, it is byte-identical
    // and carries the same absolute native expiry (nothing re-timed).
    let backstop_present = exists(&mut c, "res") == 1;
    eprintln!(
        "late AOF replay: restarted {:?} after acquire (ttl 1500 ms); backstop key present: {backstop_present}",
        t0.elapsed()
    );
    if backstop_present {
        let raw: Vec<u8> = cmd("GET").arg("res").query(&mut c).unwrap();
        let pexpiretime: i64 = cmd("PEXPIRETIME").arg("res").query(&mut c).unwrap();
        assert_eq!(raw, before.raw);
        assert_eq!(pexpiretime, before.pexpiretime);
    }
    assert!(!is_held(&mut c, "res"), "lock replayed {:?} after its deadline came back", t0.elapsed());
    // Within the restart grace, LOCK.INFO says why it is not grantable yet.
    assert_eq!(refused_code(&mut c, "res").as_deref(), Some("restart-grace"));
    let next = taken_over_after_the_grace(&mut c, "res", "tok-B", t0);
    assert!(next > fence, "token {next} not above {fence}");
    assert_eq!(info_int(&mut c, "res", "fence"), Some(next));
}

#[test]
fn aof_restores_a_reentrant_lock_with_its_hold_count() {
    let mut s = Server::with(Opts::new().aof_always());
    let mut c = s.conn();
    let fence = enter_ok(&mut c, "re", "owner-1", 20_000);
    assert_eq!(enter_ok(&mut c, "re", "owner-1", 20_000), fence);
    let before = snapshot(&mut c, "re");
    assert_eq!(before.int("holds"), 2);
    assert_eq!(before.text("kind"), "reentrant");

    crash(&mut s);
    let mut c = s.conn();
    let after = snapshot(&mut c, "re");
    assert_eq!(after, before);
    let other: Value = cmd("LOCK.ENTER").arg("re").arg("owner-2").arg(1_000).query(&mut c).unwrap();
    assert_eq!(other, Value::Nil, "another owner entered a restored lock");
    let left: i64 = cmd("LOCK.EXIT").arg("re").arg("owner-1").query(&mut c).unwrap();
    assert_eq!(left, 1);
    let left: i64 = cmd("LOCK.EXIT").arg("re").arg("owner-1").query(&mut c).unwrap();
    assert_eq!(left, 0);
    assert_eq!(exists(&mut c, "re"), 0);
}

#[test]
fn rdb_restores_held_locks_and_drops_expired_ones() {
    // No AOF: the restart loads dump.rdb from the server's directory.
    let mut s = Server::with(short_grace());
    let mut c = s.conn();
    let t0 = Instant::now();
    let long_fence = acquire_ok(&mut c, "long", "tok-A", 20_000);
    let short_fence = acquire_ok(&mut c, "short", "tok-S", 1_500);
    let re_fence = enter_ok(&mut c, "re", "owner-1", 20_000);
    enter_ok(&mut c, "re", "owner-1", 20_000);
    let long = snapshot(&mut c, "long");
    let short = snapshot(&mut c, "short");
    let re = snapshot(&mut c, "re");
    let last_before = info_stat(&mut c, "last_fencing_token");
    let saved: String = cmd("SAVE").query(&mut c).unwrap();
    assert_eq!(saved, "OK");
    s.kill();
    assert!(s.dir.join("dump.rdb").exists(), "SAVE wrote no dump.rdb");
    sleep_until(t0, Duration::from_millis(2_000));
    s.restart();
    let mut c = s.conn();

    assert_eq!(snapshot(&mut c, "long"), long, "RDB load changed the lock");
    assert_eq!(snapshot(&mut c, "re"), re, "RDB load changed the lock");
    assert_eq!(re.int("holds"), 2);
    assert_eq!(acquire(&mut c, "long", "tok-B", 1_000), Value::Nil);

    // The short lock's deadline passed while the server was down.
    let backstop_present = exists(&mut c, "short") == 1;
    eprintln!("RDB restart: expired lock's backstop key present: {backstop_present}");
    if backstop_present {
        let pexpiretime: i64 = cmd("PEXPIRETIME").arg("short").query(&mut c).unwrap();
        assert_eq!(pexpiretime, short.pexpiretime);
    }
    assert!(!is_held(&mut c, "short"), "expired lock came back");
    let next = taken_over_after_the_grace(&mut c, "short", "tok-T", t0);
    assert!(
        next > short_fence && next > long_fence && next > re_fence && next > last_before,
        "token {next} after RDB restart not above {last_before}"
    );
}

#[test]
fn released_locks_stay_released_after_restart() {
    let mut s = Server::with(Opts::new().aof_always());
    let mut c = s.conn();
    let fence = acquire_ok(&mut c, "plain", "tok-A", 20_000);
    let released: i64 = cmd("LOCK.RELEASE").arg("plain").arg("tok-A").query(&mut c).unwrap();
    assert_eq!(released, 1);
    enter_ok(&mut c, "re", "owner-1", 20_000);
    enter_ok(&mut c, "re", "owner-1", 20_000);
    for expect in [1i64, 0] {
        let left: i64 = cmd("LOCK.EXIT").arg("re").arg("owner-1").query(&mut c).unwrap();
        assert_eq!(left, expect);
    }
    // A key that is still held next to them, so the AOF is not trivially empty.
    let kept = acquire_ok(&mut c, "kept", "tok-K", 20_000);

    crash(&mut s);
    let mut c = s.conn();
    assert_eq!(exists(&mut c, "plain"), 0, "released lock came back");
    assert_eq!(exists(&mut c, "re"), 0, "exited lock came back");
    assert!(lock_info(&mut c, "plain").is_none());
    assert!(lock_info(&mut c, "re").is_none());
    assert_eq!(info_int(&mut c, "kept", "fence"), Some(kept));
    let next = acquire_ok(&mut c, "plain", "tok-B", 1_000);
    assert!(next > fence && next > kept);
}
