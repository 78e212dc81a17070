//! Safety property 8 (docs/safety.md): a jump of the server's wall clock neither shortens nor
//! lengthens a held lock. The server runs under the LD_PRELOAD clock shim
//! (testkit/shim/clockshim.c); writing a number of milliseconds into its file
//! moves the server's CLOCK_REALTIME, gettimeofday and time at run time,
//! while its monotonic clock keeps running normally.
//!
//! Lock validity follows the monotonic clock. Redis itself still expires
//! keys by the wall clock, so the key's native expiry sits
//! `lock.clock-jump-tolerance-ms` after the deadline: that is the bound of
//! forward jump a held lock survives, and the last test shows what happens
//! beyond it.

use lock_testkit::*;

use std::thread::sleep;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

fn real_wall_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as i64
}

/// Writes the offset and waits until both Redis (`TIME`) and the module
/// (`lock_wall_clock_offset_ms`) see it; returns how long that took.
fn jump(c: &mut Connection, clock: &ClockFile, offset_ms: i64) -> Duration {
    let t = Instant::now();
    clock.set(offset_ms);
    wait_until(Duration::from_secs(2), "the server to see the jump", || {
        let skew = server_clock_ms(c) - real_wall_ms();
        let module = info_stat(c, "wall_clock_offset_ms");
        (skew - offset_ms).abs() < 100 && (module - offset_ms).abs() < 100
    });
    t.elapsed()
}

fn acquire(c: &mut Connection, key: &str, token: &str, ttl_ms: i64) -> Value {
    cmd("LOCK.ACQUIRE").arg(key).arg(token).arg(ttl_ms).query(c).unwrap()
}

fn acquire_ok(c: &mut Connection, key: &str, token: &str, ttl_ms: i64) -> i64 {
    match acquire(c, key, token, ttl_ms) {
        Value::Int(fence) => fence,
        other => panic!("ACQUIRE {key} {token} not granted: {other:?}"),
    }
}

fn int(c: &mut Connection, words: &[&str]) -> i64 {
    let mut command = cmd(words[0]);
    for w in &words[1..] {
        command.arg(*w);
    }
    command.query(c).unwrap()
}

/// Polls another token's ACQUIRE every 2 ms until it is granted; returns
/// the fencing token and the time since `since`.
fn wait_for_grant(
    c: &mut Connection,
    key: &str,
    token: &str,
    since: Instant,
    within: Duration,
) -> (i64, Duration) {
    loop {
        // Not granted yet: nil (held), or QUARANTINE (the key's lock was
        // removed before its deadline).
        let reply: redis::RedisResult<Value> = cmd("LOCK.ACQUIRE").arg(key).arg(token).arg(1_000).query(c);
        match reply {
            Ok(Value::Int(fence)) => return (fence, since.elapsed()),
            Ok(_) => {}
            Err(e) => assert_eq!(e.code(), Some("QUARANTINE"), "{e}"),
        }
        assert!(since.elapsed() < within, "{token} got no grant on {key} within {within:?}");
        sleep(Duration::from_millis(2));
    }
}

#[test]
fn forward_jump_does_not_shorten_a_held_lock() {
    let clock = ClockFile::new();
    let s = Server::with(Opts::new().clock_file(clock.path()));
    let mut c = s.conn();
    let offset0 = info_stat(&mut c, "wall_clock_offset_ms");
    assert!(offset0.abs() < 100, "offset before any jump: {offset0}");

    let t0 = Instant::now();
    let fence = acquire_ok(&mut c, "k", "tok-A", 2_000);
    let deadline = info_int(&mut c, "k", "deadline-ms").unwrap();
    // Control: the same lock done the client-side way, by Redis expiry.
    let set: String = cmd("SET").arg("plain-set-px").arg("tok-A").arg("PX").arg(2_000).query(&mut c).unwrap();
    assert_eq!(set, "OK");

    // 30 s forward: far more than the TTL, below the 60 s default tolerance.
    let seen_after = jump(&mut c, &clock, 30_000);
    let offset = info_stat(&mut c, "wall_clock_offset_ms");
    assert!((offset - 30_000).abs() < 100, "lock_wall_clock_offset_ms {offset} after a +30000 jump");

    // Kleppmann's scenario: the SET PX lock is gone at once...
    assert_eq!(int(&mut c, &["EXISTS", "plain-set-px"]), 0, "the jump did not reach Redis' expiry");
    // ...the module's lock is still held, by the same holder, same deadline.
    assert!(lock_info(&mut c, "k").is_some(), "lock gone after the jump");
    assert_eq!(info_int(&mut c, "k", "deadline-ms"), Some(deadline));
    let ttl = info_int(&mut c, "k", "ttl-ms").unwrap();
    assert!(ttl > 0 && ttl <= 2_000, "ttl-ms {ttl} after the jump");
    assert_eq!(acquire(&mut c, "k", "tok-B", 1_000), Value::Nil);
    assert_eq!(int(&mut c, &["EXISTS", "k"]), 1);
    // Give Redis' active expiry (10 times a second) a chance: DBSIZE does
    // not expire keys lazily, so it sees what the expire cycle did.
    sleep(Duration::from_millis(300));
    assert_eq!(int(&mut c, &["DBSIZE"]), 1, "active expiry deleted the lock");
    assert_eq!(int(&mut c, &["EXISTS", "k"]), 1);
    assert!(lock_info(&mut c, "k").is_some());
    assert!(
        t0.elapsed() < Duration::from_millis(1_800),
        "test too slow to observe the held lock: {:?}",
        t0.elapsed()
    );

    // The lock frees when 2000 ms of real time have passed, not earlier.
    let (next, after) = wait_for_grant(&mut c, "k", "tok-B", t0, Duration::from_secs(5));
    assert!(
        after >= Duration::from_millis(1_950),
        "another token got the lock {after:?} after a 2000 ms grant"
    );
    assert!(after <= Duration::from_millis(3_000), "the lock freed only {after:?} after a 2000 ms grant");
    assert!(next > fence, "token {next} not above {fence}");

    // The new grant's native expiry is laid onto the (jumped) wall clock,
    // plus the tolerance: about deadline + 30000 + 60000.
    let new_deadline = info_int(&mut c, "k", "deadline-ms").unwrap();
    let pexpiretime = int(&mut c, &["PEXPIRETIME", "k"]);
    let margin = pexpiretime - new_deadline;
    assert!(
        (margin - 90_000).abs() < 100,
        "native expiry {margin} ms after the deadline, expected about 90000"
    );
    eprintln!(
        "forward +30 s: jump visible after {seen_after:?}; other token granted {after:?} \
         after the acquire ({} ms past the 2000 ms TTL); new backstop deadline+{margin} ms",
        after.as_millis() as i64 - 2_000
    );
}

#[test]
fn backward_jump_does_not_lengthen_a_held_lock() {
    let clock = ClockFile::new();
    let s = Server::with(Opts::new().clock_file(clock.path()));
    let mut c = s.conn();

    let t0 = Instant::now();
    let fence = acquire_ok(&mut c, "k", "tok-A", 1_500);
    let deadline = info_int(&mut c, "k", "deadline-ms").unwrap();
    let seen_after = jump(&mut c, &clock, -30_000);
    let offset = info_stat(&mut c, "wall_clock_offset_ms");
    assert!((offset + 30_000).abs() < 100, "lock_wall_clock_offset_ms {offset} after a -30000 jump");
    assert_eq!(info_int(&mut c, "k", "deadline-ms"), Some(deadline));
    let ttl = info_int(&mut c, "k", "ttl-ms").unwrap();
    assert!(ttl > 0 && ttl <= 1_500, "ttl-ms {ttl} after the jump");
    assert_eq!(acquire(&mut c, "k", "tok-B", 1_000), Value::Nil);

    // Frees after 1500 ms of real time, not 31.5 s.
    let (next, after) = wait_for_grant(&mut c, "k", "tok-B", t0, Duration::from_secs(3));
    assert!(
        after >= Duration::from_millis(1_450),
        "another token got the lock {after:?} after a 1500 ms grant"
    );
    assert!(after <= Duration::from_millis(3_000), "the lock freed only {after:?} after a 1500 ms grant");
    assert!(next > fence, "token {next} not above {fence} after a clock step back");
    eprintln!(
        "backward -30 s: jump visible after {seen_after:?}; other token granted {after:?} \
         after the acquire ({} ms past the 1500 ms TTL)",
        after.as_millis() as i64 - 1_500
    );
}

/// The documented bound: a forward jump larger than
/// `lock.clock-jump-tolerance-ms` lets Redis' own (wall-clock) expiry delete
/// the key before the lock's deadline. The holder loses it early (its
/// EXTEND answers 0), but the module sees the deletion and quarantines the
/// key until the lock's deadline on its monotonic clock: no second holder
/// before then.
#[test]
fn forward_jump_beyond_the_tolerance_loses_the_key_but_grants_nobody_before_the_deadline() {
    let clock = ClockFile::new();
    let s = Server::with(Opts::new().module_arg("clock-jump-tolerance-ms", "1000").clock_file(clock.path()));
    let mut c = s.conn();
    assert_eq!(info_stat(&mut c, "clock_jump_tolerance_ms"), 1_000);

    let t0 = Instant::now();
    let fence = acquire_ok(&mut c, "k", "tok-A", 5_000);
    let deadline = info_int(&mut c, "k", "deadline-ms").unwrap();
    let margin = int(&mut c, &["PEXPIRETIME", "k"]) - deadline;
    assert!((margin - 1_000).abs() < 50, "native expiry {margin} ms after the deadline, expected about 1000");

    // 10 s forward: past deadline + tolerance on the wall clock.
    let jumped = Instant::now();
    clock.set(10_000);
    // Watch with DBSIZE, which does not expire keys on access: this is
    // Redis' active expiry cycle removing the key on its own.
    wait_until(Duration::from_secs(3), "Redis to expire the lock key after the jump", || {
        int(&mut c, &["DBSIZE"]) == 0
    });
    let gone_after = jumped.elapsed();
    assert!(gone_after < Duration::from_millis(1_500), "key removed {gone_after:?} after the jump");
    let lost_at = t0.elapsed();
    assert!(
        lost_at < Duration::from_millis(4_000),
        "the test did not observe the early loss before the deadline ({lost_at:?})"
    );
    // The holder lost its key: this is the stated limit...
    assert!(!is_held(&mut c, "k"));
    assert_eq!(int(&mut c, &["LOCK.EXTEND", "k", "tok-A", "5000"]), 0);
    // ...but nobody else gets the lock before its deadline.
    let (next, after) = wait_for_grant(&mut c, "k", "tok-B", t0, Duration::from_secs(8));
    assert!(after >= Duration::from_millis(4_950), "tok-B got the lock {after:?} into a 5000 ms lock");
    assert!(next > fence);
    eprintln!(
        "forward +10 s with tolerance 1000 ms: key removed by Redis {gone_after:?} after the \
         jump, {lost_at:?} into a 5000 ms lock; tok-B granted {after:?} after the grant"
    );
}

/// Within the tolerance the same +10 s jump is harmless (the contrast to
/// the test above, with the same TTL and jump).
#[test]
fn forward_jump_within_the_tolerance_keeps_the_lock() {
    let clock = ClockFile::new();
    let s = Server::with(Opts::new().module_arg("clock-jump-tolerance-ms", "12000").clock_file(clock.path()));
    let mut c = s.conn();
    let t0 = Instant::now();
    acquire_ok(&mut c, "k", "tok-A", 1_500);
    jump(&mut c, &clock, 10_000);
    sleep(Duration::from_millis(300));
    assert_eq!(int(&mut c, &["DBSIZE"]), 1, "active expiry deleted the lock");
    assert!(lock_info(&mut c, "k").is_some());
    assert_eq!(acquire(&mut c, "k", "tok-B", 1_000), Value::Nil);
    let (_, after) = wait_for_grant(&mut c, "k", "tok-B", t0, Duration::from_secs(4));
    assert!(
        after >= Duration::from_millis(1_450),
        "another token got the lock {after:?} after a 1500 ms grant"
    );
}

/// An AOF-always server with `lock.clock-jump-tolerance-ms` at
/// `tolerance_ms` whose wall clock steps `step_ms` forward, then grants
/// `tok-A` a `ttl_ms` lock on `k`, then is killed (-9) and restarted from
/// its AOF with the step still in its clock file (so the new process
/// anchors its module clock `step_ms` ahead of the old one). Returns the
/// server (and its clock file, which must outlive it), a connection to the
/// restarted process, the instant just before the grant, and tok-A's token.
fn step_then_aof_restart(
    tolerance_ms: i64,
    step_ms: i64,
    ttl_ms: i64,
) -> (Server, ClockFile, Connection, Instant, i64) {
    let clock = ClockFile::new();
    let mut s = Server::with(
        Opts::new()
            .aof_always()
            .module_arg("clock-jump-tolerance-ms", &tolerance_ms.to_string())
            .clock_file(clock.path()),
    );
    let mut c = s.conn();
    assert_eq!(info_stat(&mut c, "restart_grace_ms"), 0, "a first start restores nothing");
    jump(&mut c, &clock, step_ms);
    let t0 = Instant::now();
    let fence = acquire_ok(&mut c, "k", "tok-A", ttl_ms);
    s.kill_and_restart();
    let mut c = s.conn();
    assert_eq!(info_stat(&mut c, "quarantine"), 0, "appendfsync always: no quarantine");
    assert_eq!(info_stat(&mut c, "restart_grace_ms"), tolerance_ms);
    assert_eq!(info_int(&mut c, "k", "fence"), Some(fence), "the AOF restored tok-A's lock");
    (s, clock, c, t0, fence)
}

/// A forward step of the wall clock while the node runs moves no deadline
/// (the tests above). A restart re-anchors the module clock on the wall
/// clock, so the same step would land at a restart from the AOF: the
/// restored lock's deadline would come that much early in real time. The
/// restart grace keeps a restored lock from being taken over until
/// `lock.clock-jump-tolerance-ms` after its deadline, so a step up to the
/// tolerance cannot shorten it.
#[test]
fn a_step_before_an_aof_restart_does_not_shorten_the_restored_lock() {
    let (_s, _clock, mut c, t0, fence) = step_then_aof_restart(3_000, 2_000, 4_000);
    let (next, after) = wait_for_grant(&mut c, "k", "tok-B", t0, Duration::from_secs(10));
    assert!(
        after >= Duration::from_millis(3_990),
        "tok-B got the lock {after:?} after a 4000 ms grant: the restart cut it short"
    );
    // Its deadline read on the new clock plus the grace: 4 - 2 + 3 s.
    assert!(after < Duration::from_millis(7_000), "tok-B waited {after:?}");
    assert!(next > fence);
    eprintln!("step +2 s, then AOF restart: tok-B granted {after:?} after a 4000 ms grant (grace 3000 ms)");
}

/// The bound: a step larger than the tolerance before an AOF restart
/// shortens the restored lock by the difference.
#[test]
fn a_step_beyond_the_tolerance_before_an_aof_restart_shortens_the_restored_lock() {
    let (_s, _clock, mut c, t0, _) = step_then_aof_restart(1_000, 3_000, 5_000);
    let (_, after) = wait_for_grant(&mut c, "k", "tok-B", t0, Duration::from_secs(10));
    // Deadline read 3 s early, 1 s of grace: lost about 2 s early.
    assert!(
        after < Duration::from_millis(4_000),
        "the test did not observe the early loss ({after:?} into a 5000 ms lock)"
    );
    assert!(after >= Duration::from_millis(2_950), "tok-B got the lock {after:?} after the grant");
    eprintln!("step +3 s, then AOF restart, tolerance 1 s: tok-B granted {after:?} into a 5000 ms lock");
}
