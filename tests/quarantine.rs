//! Restart-proof fencing tokens (safety properties 4 and 9), the delayed-restart and failover
//! quarantine, and LOCK.FENCE replication and persistence.

use lock_testkit::*;
use std::thread::sleep;
use std::time::{Duration, Instant};

const QUARANTINE_MS: i64 = 1500;

fn acquire(c: &mut Connection, key: &str, token: &str) -> redis::RedisResult<Option<i64>> {
    cmd("LOCK.ACQUIRE").arg(key).arg(token).arg(10_000).query(c)
}

fn quarantined_opts() -> Opts {
    Opts::new().module_arg("quarantine-ms", &QUARANTINE_MS.to_string())
}

/// Waits (bounded) until the node has left its quarantine.
fn wait_out_quarantine(c: &mut Connection) {
    wait_until(Duration::from_secs(10), "quarantine to end", || info_stat(c, "quarantine") == 0);
}

/// A text field of `INFO lock` (`lock_<field>:<value>`).
fn info_text(c: &mut Connection, field: &str) -> String {
    let text: String = cmd("INFO").arg("lock").query(c).unwrap();
    let prefix = format!("lock_{field}:");
    text.lines()
        .find_map(|l| l.strip_prefix(prefix.as_str()))
        .map(|v| v.trim().to_string())
        .unwrap_or_else(|| panic!("no {prefix} in {text}"))
}

/// The milliseconds left in a QUARANTINE error, asserting its form.
fn quarantine_left(result: redis::RedisResult<Option<i64>>) -> i64 {
    let e = match result {
        Err(e) => e,
        Ok(v) => panic!("expected a QUARANTINE error, got {v:?}"),
    };
    assert_eq!(e.code(), Some("QUARANTINE"), "{e}");
    let detail = e.detail().unwrap_or("");
    assert!(detail.contains("refusing new locks for"), "{detail}");
    detail.split_whitespace().rev().nth(1).unwrap().parse().unwrap()
}

#[test]
fn restart_without_persistence_quarantines_then_grants_above_old_tokens() {
    let mut s = Server::with(quarantined_opts());
    let mut c = s.conn();
    let left = quarantine_left(acquire(&mut c, "res", "a"));
    assert!(left > 0 && left <= QUARANTINE_MS, "{left}");
    wait_out_quarantine(&mut c);
    let t1 = acquire(&mut c, "res", "a").unwrap().expect("granted after quarantine");

    s.kill_and_restart();
    let restarted = Instant::now();
    let mut c = s.conn();
    assert_eq!(info_stat(&mut c, "quarantine"), 1);
    assert_eq!(info_stat(&mut c, "restart_grace_ms"), 0, "nothing was restored from disk");
    let left = quarantine_left(acquire(&mut c, "res", "b"));
    assert!(left > QUARANTINE_MS - 1000, "{left}");
    // Everything but new grants keeps working in quarantine.
    assert!(!is_held(&mut c, "res"), "the lock was lost with the process");
    // LOCK.INFO says why a grant is refused, and the error which setting
    // skips the quarantine on a brand-new node.
    assert_eq!(refused_code(&mut c, "res").as_deref(), Some("startup"));
    let e = err_text(cmd("LOCK.ACQUIRE").arg("res").arg("b").arg(100).query(&mut c));
    assert!(e.contains("LOCK.UNQUARANTINE STARTUP") && e.contains("brand-new node"), "{e}");
    assert_eq!(cmd("LOCK.RELEASE").arg("res").arg("a").query::<i64>(&mut c).unwrap(), 0);
    assert_eq!(cmd("LOCK.EXTEND").arg("res").arg("a").arg(100).query::<i64>(&mut c).unwrap(), 0);
    assert!(err_text(cmd("LOCK.ENTER").arg("r").arg("o").arg(100).query(&mut c)).starts_with("QUARANTINE"));
    let waited = err_text(cmd("LOCK.ACQUIRE").arg("res").arg("b").arg(100).arg("WAIT").arg(0).query(&mut c));
    assert!(waited.starts_with("QUARANTINE"), "WAIT does not block through a quarantine: {waited}");

    wait_out_quarantine(&mut c);
    assert!(restarted.elapsed() >= Duration::from_millis(QUARANTINE_MS as u64 - 50));
    let t2 = acquire(&mut c, "res", "b").unwrap().expect("granted after the quarantine");
    assert!(t2 > t1, "tokens after a crash are above tokens before: {t1} then {t2}");
    let text: String = cmd("INFO").arg("lock").query(&mut c).unwrap();
    assert!(text.contains("lock_quarantine_reason:none"), "{text}");
    assert!(info_stat(&mut c, "quarantined") >= 3);
}

#[test]
fn aof_always_needs_no_quarantine_and_keeps_the_lock() {
    let mut s = Server::with(quarantined_opts().aof_always());
    let mut c = s.conn();
    assert_eq!(info_stat(&mut c, "quarantine"), 0, "appendfsync always proves nothing was lost");
    let t1 = acquire(&mut c, "res", "a").unwrap().unwrap();
    s.kill_and_restart();
    let mut c = s.conn();
    assert_eq!(info_stat(&mut c, "quarantine"), 0);
    // No quarantine covers the restored lock: it gets the restart grace
    // (lock.clock-jump-tolerance-ms, 60 s by default) after its deadline.
    assert_eq!(info_stat(&mut c, "restart_grace_ms"), 60_000);
    assert_eq!(acquire(&mut c, "res", "b").unwrap(), None, "still held by a");
    assert_eq!(acquire(&mut c, "res", "a").unwrap(), Some(t1), "the holder's retry keeps its token");
    assert!(acquire(&mut c, "other", "b").unwrap().unwrap() > t1);
}

#[test]
fn aof_always_restart_after_a_rewrite_keeps_a_quorum_token_from_a_node_ahead_without_a_lead() {
    // After a rewrite the AOF replays no LOCK.FENCE raise, and a released
    // lock's key is gone: the node's ledger in the rewritten AOF's RDB
    // preamble keeps the counter. A quorum token T from a node whose clock
    // is AHEAD_MS ahead of this one's is below this node's next token, and
    // the node's own tokens stay on its clock (no lead that another node's
    // restart would not wait for).
    const QUARANTINE_MS: i64 = 10_000;
    const AHEAD_MS: i64 = 4_000;
    let mut s =
        Server::with(Opts::new().module_arg("quarantine-ms", &QUARANTINE_MS.to_string()).aof_always());
    let mut c = s.conn();
    assert_eq!(info_stat(&mut c, "quarantine"), 0);
    let first = acquire(&mut c, "res", "a").unwrap().unwrap();
    assert!(first <= (server_clock_ms(&mut c) + 1_100) * 1000, "on the clock, no lead: {first}");
    let t = (server_clock_ms(&mut c) + AHEAD_MS) * 1000;
    assert_eq!(cmd("LOCK.FENCE").arg("res").arg("a").arg(t).query::<i64>(&mut c).unwrap(), 1);
    assert_eq!(cmd("LOCK.RELEASE").arg("res").arg("a").query::<i64>(&mut c).unwrap(), 1);
    assert_eq!(cmd("EXISTS").arg("res").query::<i64>(&mut c).unwrap(), 0, "the key went with the release");

    rewrite_aof(&mut c);

    s.kill_and_restart();
    let mut c = s.conn();
    assert_eq!(info_stat(&mut c, "quarantine"), 0, "appendfsync always: no quarantine");
    let next = acquire(&mut c, "res", "b").unwrap().expect("granted at once");
    assert!(next > t, "the token after the restart is above the quorum token: {next} after {t}");
    assert!(next <= t + 1_000 * 1_100, "and not further ahead than a second past it: {next}");
}

/// How the node grants its own token in [`own_token_across_a_restart`].
#[derive(Clone, Copy, PartialEq)]
enum OwnGrant {
    /// `LOCK.ACQUIRE` of one key.
    Key,
    /// `LOCK.MACQUIRE` of a set of two keys (one token for the set), after
    /// an AOF rewrite dropped the `LOCK.FENCE` raise: a raise the set's grant
    /// writes itself is then the only record of its token.
    Set,
}

/// On a node with `appendfsync always` and a quarantine of
/// `quarantine_ms`: LOCK.FENCE raises the counter to F, `ahead_ms` ahead
/// of the clock; once the clock is `then_ahead_ms` from F, the node grants
/// F + 1 itself (`how`) and the lock is released (its key, the only place
/// that held F + 1, is gone); the node is killed and restarted. Returns
/// F + 1 and the next token.
fn own_token_across_a_restart(
    quarantine_ms: i64,
    ahead_ms: i64,
    then_ahead_ms: i64,
    how: OwnGrant,
) -> (i64, i64) {
    let mut s =
        Server::with(Opts::new().module_arg("quarantine-ms", &quarantine_ms.to_string()).aof_always());
    let mut c = s.conn();
    let f = (server_clock_ms(&mut c) + ahead_ms) * 1000;
    acquire(&mut c, "a", "o1").unwrap().unwrap();
    assert_eq!(cmd("LOCK.FENCE").arg("a").arg("o1").arg(f).query::<i64>(&mut c).unwrap(), 1);
    assert_eq!(cmd("LOCK.RELEASE").arg("a").arg("o1").query::<i64>(&mut c).unwrap(), 1);
    if how == OwnGrant::Set {
        rewrite_aof(&mut c);
    }
    wait_until(Duration::from_secs(20), "the clock to come near F", || {
        server_clock_ms(&mut c) + then_ahead_ms >= f / 1000
    });
    let own = match how {
        OwnGrant::Key => {
            let own = acquire(&mut c, "b", "o2").unwrap().unwrap();
            assert_eq!(cmd("LOCK.RELEASE").arg("b").arg("o2").query::<i64>(&mut c).unwrap(), 1);
            own
        }
        OwnGrant::Set => {
            let own: i64 =
                cmd("LOCK.MACQUIRE").arg("o2").arg(10_000).arg(2).arg("b1").arg("b2").query(&mut c).unwrap();
            let released: Vec<i64> =
                cmd("LOCK.MRELEASE").arg("o2").arg("b1").arg("b2").query(&mut c).unwrap();
            assert_eq!(released, [1, 1]);
            own
        }
    };
    assert_eq!(own, f + 1, "the node's own grant just above the raise");
    s.kill_and_restart();
    let mut c = s.conn();
    (own, acquire(&mut c, "c", "o3").unwrap().unwrap())
}

#[test]
fn aof_always_restart_keeps_a_token_granted_above_a_fence_raise_after_its_key_is_gone() {
    // The AOF replays the raise to F and the counter the grant of F + 1
    // kept a second ahead (`Fencer::to_keep`). No rewrite needed.
    let (own, next) = own_token_across_a_restart(10_000, 11_000, 9_700, OwnGrant::Key);
    assert!(next > own, "a token granted before the restart is not granted again: {next} after {own}");
}

#[test]
fn aof_always_restart_keeps_a_token_granted_further_ahead_than_the_quarantine() {
    // A token granted further ahead of the clock than the quarantine (the
    // counter raised there by another node's token): the grant also wrote
    // it to the AOF as a counter raise.
    let (own, next) = own_token_across_a_restart(5_000, 25_000, 25_000, OwnGrant::Key);
    assert!(next > own, "a token granted before the restart is not granted again: {next} after {own}");
}

#[test]
fn aof_always_restart_keeps_a_set_token_granted_further_ahead_than_the_quarantine() {
    // The same for a set: LOCK.MACQUIRE grants through a path of its own,
    // which must write its token as a counter raise too. The rewrite before
    // the set's grant leaves no LOCK.FENCE raise to F in the AOF, so only
    // the set's own raise can put the next token above its token.
    let (own, next) = own_token_across_a_restart(5_000, 25_000, 25_000, OwnGrant::Set);
    assert!(next > own, "a set's token granted before the restart is not granted again: {next} after {own}");
}

#[test]
fn config_set_zero_ends_the_quarantine_and_turns_the_protection_off_loudly() {
    let s = Server::with(Opts::new().module_arg("quarantine-ms", "60000"));
    let mut c = s.conn();
    assert!(quarantine_left(acquire(&mut c, "res", "a")) > 50_000);
    assert_eq!(info_text(&mut c, "protections_off"), "none");
    let _: () = cmd("CONFIG").arg("SET").arg("lock.quarantine-ms").arg(0).query(&mut c).unwrap();
    assert!(acquire(&mut c, "res", "a").unwrap().is_some());
    let log = s.log();
    assert!(log.contains("lock.quarantine-ms set to 0"), "{log}");
    assert!(log.contains("lock.quarantine-ms 0 ended the startup quarantine in force"), "{log}");
    assert!(log.contains("turns the start-up and failover quarantines OFF"), "{log}");
    // INFO lock says which protections are off, one field each and a list.
    assert_eq!(info_stat(&mut c, "protection_startup_quarantine"), 0);
    assert_eq!(info_stat(&mut c, "protection_failover_quarantine"), 0);
    assert_eq!(info_stat(&mut c, "protection_removal_quarantine"), 1);
    assert_eq!(info_text(&mut c, "protections_off"), "startup-quarantine,failover-quarantine");
}

#[test]
fn raising_the_length_later_does_not_start_a_quarantine_that_was_off() {
    let s = Server::with(Opts::new().module_arg("quarantine-ms", "0"));
    let mut c = s.conn();
    let _: () = cmd("CONFIG").arg("SET").arg("lock.quarantine-ms").arg(-1).query(&mut c).unwrap();
    assert_eq!(info_stat(&mut c, "quarantine"), 0);
    assert!(acquire(&mut c, "res", "a").unwrap().is_some());
    assert_eq!(info_text(&mut c, "protections_off"), "none", "on for the next start");
}

#[test]
fn a_node_started_with_a_protection_off_says_so_at_load() {
    let s =
        Server::with(Opts::new().module_arg("quarantine-ms", "1500").module_arg("removal-quarantine", "no"));
    let mut c = s.conn();
    let log = s.log();
    // Settings applied at load are reported once, after the quarantine
    // started: no line says grants are allowed while they are refused.
    assert!(!log.contains("new grants are allowed"), "{log}");
    assert!(log.contains("quarantine (startup): refusing new locks for 1500 ms"), "{log}");
    assert!(log.contains("LOCK.UNQUARANTINE STARTUP"), "{log}");
    let warning = log
        .lines()
        .find(|l| l.contains("protection OFF: removal-quarantine"))
        .unwrap_or_else(|| panic!("{log}"));
    assert!(warning.contains(" # "), "at warning level: {warning}");
    assert_eq!(log.matches("protection OFF").count(), 1, "{log}");
    assert_eq!(info_text(&mut c, "protections_off"), "removal-quarantine");
    assert_eq!(info_stat(&mut c, "protection_removal_quarantine"), 0);
    assert_eq!(info_stat(&mut c, "protection_startup_quarantine"), 1);
    // Turned off at run time: said at once.
    let _: () = cmd("CONFIG").arg("SET").arg("lock.failover-quarantine").arg("no").query(&mut c).unwrap();
    assert!(s.log().contains("protection OFF: failover-quarantine"), "{}", s.log());
    assert_eq!(info_text(&mut c, "protections_off"), "failover-quarantine,removal-quarantine");
}

#[test]
fn unquarantine_ends_the_startup_quarantine_once_and_a_later_promotion_is_quarantined() {
    let master = Server::with(fast_sync());
    // A brand-new replica: its start-up quarantine is in force.
    let replica = Server::with(Opts::new().module_arg("quarantine-ms", "60000"));
    let mut r = replica.conn();
    assert_eq!(info_text(&mut r, "quarantine_reason"), "startup");
    let unquarantine =
        |c: &mut Connection, reason: &str| cmd("LOCK.UNQUARANTINE").arg(reason).query::<i64>(c);

    // It must name the quarantine in force; a wrong or missing name ends
    // nothing.
    let e = err_text(cmd("LOCK.UNQUARANTINE").arg("PROMOTION").query(&mut r));
    assert!(
        e.starts_with("ERR lock.unquarantine: the quarantine in force is STARTUP (node restarted, ")
            && e.ends_with(" ms left), not PROMOTION: nothing ended"),
        "{e}"
    );
    let e = err_text(cmd("LOCK.UNQUARANTINE").arg("everything").query(&mut r));
    assert!(
        e.starts_with("ERR lock.unquarantine: unknown quarantine 'everything' (STARTUP or PROMOTION"),
        "{e}"
    );
    let e = err_text(cmd("LOCK.UNQUARANTINE").query(&mut r));
    assert!(e.contains("wrong number of arguments"), "{e}");
    assert_eq!(info_stat(&mut r, "quarantine"), 1, "nothing ended");
    assert_eq!(info_stat(&mut r, "quarantines_ended"), 0);

    let before_ms = server_clock_ms(&mut r);
    let left = unquarantine(&mut r, "startup").unwrap();
    assert!(left > 50_000 && left <= 60_000, "{left}");
    assert_eq!(info_stat(&mut r, "quarantine"), 0);
    // Its counter stays on its clock: a counter moved ahead would put its
    // tokens ahead of the other nodes' clocks, which their own restarts do
    // not wait for (docs/safety.md, assumption 2). (100 ms for the module
    // clock against TIME's.)
    let counter = info_stat(&mut r, "last_fencing_token");
    assert!(counter <= (before_ms + 1_100) * 1000, "{counter} vs {before_ms} ms");
    assert_eq!(info_stat(&mut r, "quarantines_ended"), 1);
    let log = replica.log();
    let line = log
        .lines()
        .find(|l| l.contains("LOCK.UNQUARANTINE STARTUP by client"))
        .unwrap_or_else(|| panic!("{log}"));
    assert!(
        line.contains(" # ") && line.contains("(user default, 127.0.0.1:"),
        "logged at warning level, with who: {line}"
    );
    assert!(line.contains("a later start is quarantined again (60000 ms"), "{line}");
    let e = err_text(cmd("LOCK.UNQUARANTINE").arg("STARTUP").query(&mut r));
    assert!(e.starts_with("ERR lock.unquarantine: no start-up or promotion quarantine is in force"), "{e}");
    // The setting is untouched, and no protection is off.
    let setting: Vec<String> = cmd("CONFIG").arg("GET").arg("lock.quarantine-ms").query(&mut r).unwrap();
    assert_eq!(setting, ["lock.quarantine-ms", "60000"]);
    assert_eq!(info_text(&mut r, "protections_off"), "none");

    // Hours later, a failover: the replica is promoted, and refuses new
    // grants (asynchronous replication may have lost some).
    replicate(&replica, &master);
    let mut m = master.conn();
    acquire(&mut m, "seen", "A").unwrap().expect("granted on the master");
    let _: i64 = cmd("WAIT").arg(1).arg(2000).query(&mut m).unwrap();
    let _: () = cmd("REPLICAOF").arg("NO").arg("ONE").query(&mut r).unwrap();
    let left = quarantine_left(acquire(&mut r, "other", "B"));
    assert!(left > 50_000, "{left}");
    assert_eq!(info_text(&mut r, "quarantine_reason"), "promotion");
    assert_eq!(acquire(&mut r, "seen", "B").unwrap(), None, "a replicated lock is held");
    // It too can be ended, by name, once.
    assert!(unquarantine(&mut r, "STARTUP").is_err());
    assert!(unquarantine(&mut r, "PROMOTION").unwrap() > 50_000);
    assert!(acquire(&mut r, "other", "B").unwrap().is_some());
    assert_eq!(acquire(&mut r, "seen", "B").unwrap(), None, "the replicated lock is still held");
    assert_eq!(info_stat(&mut r, "quarantines_ended"), 2);
}

#[test]
fn locks_restored_under_an_ended_startup_quarantine_get_the_restart_grace() {
    // The default quarantine (max-ttl + 1 s) covers locks restored from
    // disk, so they need no restart grace; ending it early takes that cover
    // away, and the grace takes its place.
    let mut s = Server::with(Opts::new().module_arg("quarantine-ms", "-1"));
    let mut c = s.conn();
    assert!(cmd("LOCK.UNQUARANTINE").arg("STARTUP").query::<i64>(&mut c).unwrap() > 30_000);
    acquire(&mut c, "res", "a").unwrap().expect("granted");
    let _: () = cmd("SAVE").query(&mut c).unwrap();
    s.kill_and_restart();
    let mut c = s.conn();
    assert_eq!(info_stat(&mut c, "quarantine"), 1);
    assert_eq!(info_stat(&mut c, "restart_grace_ms"), 0, "the quarantine covers the restored lock");
    assert!(cmd("LOCK.UNQUARANTINE").arg("STARTUP").query::<i64>(&mut c).unwrap() > 20_000);
    assert_eq!(info_stat(&mut c, "restart_grace_ms"), 60_000, "lock.clock-jump-tolerance-ms");
    assert_eq!(acquire(&mut c, "res", "b").unwrap(), None, "the restored lock is still held");
}

#[test]
fn unquarantine_is_neither_replayed_from_the_aof_nor_replicated() {
    // LOCK.UNQUARANTINE STARTUP is the node's own one-shot act: written to
    // the AOF, it would end the start-up quarantine of the next restart from
    // an `everysec` AOF (which may have lost the grants of its last second);
    // replicated, it would end a replica's own quarantine.
    let mut master = Server::with(
        fast_sync()
            .module_arg("quarantine-ms", "60000")
            .config("appendonly", "yes")
            .config("appendfsync", "everysec"),
    );
    let replica = Server::with(Opts::new().module_arg("quarantine-ms", "60000"));
    replicate(&replica, &master);
    let mut m = master.conn();
    let mut r = replica.conn();
    assert_eq!(info_text(&mut m, "quarantine_reason"), "startup");
    assert_eq!(info_text(&mut r, "quarantine_reason"), "startup");

    assert!(cmd("LOCK.UNQUARANTINE").arg("STARTUP").query::<i64>(&mut m).unwrap() > 50_000);
    // A grant after it: the replica has it once it has everything before,
    // and the AOF holds everything before it once it holds it.
    acquire(&mut m, "after", "A").unwrap().expect("granted once the quarantine ended");
    assert_eq!(cmd("WAIT").arg(1).arg(5000).query::<i64>(&mut m).unwrap(), 1, "the replica acknowledged");
    assert!(is_held(&mut r, "after"), "replicated");
    assert_eq!(info_stat(&mut r, "quarantine"), 1, "the replica's own quarantine is untouched");
    assert_eq!(info_text(&mut r, "quarantine_reason"), "startup");
    assert_eq!(info_stat(&mut r, "quarantines_ended"), 0);

    // The grant has left the AOF buffer for the file (where a kill -9 does
    // not lose it; `everysec` fsyncs it within a second, against a crash of
    // the machine, which this test does not need).
    wait_until(Duration::from_secs(5), "the AOF buffer written out", || {
        info_field(&mut m, "persistence", "aof_buffer_length") == 0
    });
    master.kill_and_restart();
    let mut m = master.conn();
    assert!(is_held(&mut m, "after"), "the AOF was replayed up to the grant");
    assert_eq!(info_stat(&mut m, "quarantine"), 1, "the restart is quarantined again");
    assert_eq!(info_text(&mut m, "quarantine_reason"), "startup");
    assert!(quarantine_left(acquire(&mut m, "other", "B")) > 50_000);
    assert_eq!(info_stat(&mut m, "quarantines_ended"), 0);
}

#[test]
fn tokens_never_go_down_across_restart_flushall_and_reload() {
    // Tokens only: a flush's quarantine of the database (tests/forgetting.rs)
    // is off here, so that each step can grant at once.
    let mut s = Server::with(
        Opts::new().config("enable-debug-command", "yes").module_arg("removal-quarantine", "no"),
    );
    let mut c = s.conn();
    let mut last = 0;
    let mut next = |c: &mut Connection, step: &str| {
        let t = acquire(c, &format!("k{last}"), "x").unwrap().unwrap();
        assert!(t > last, "{step}: {t} after {last}");
        last = t;
    };
    next(&mut c, "first");
    let _: () = cmd("FLUSHALL").query(&mut c).unwrap();
    next(&mut c, "after FLUSHALL");
    let _: () = cmd("DEBUG").arg("RELOAD").query(&mut c).unwrap();
    next(&mut c, "after DEBUG RELOAD");
    let _: Result<(), _> = cmd("SHUTDOWN").arg("NOSAVE").query::<()>(&mut c);
    s.kill();
    s.restart();
    let mut c = s.conn();
    next(&mut c, "after a clean restart");
    s.kill_and_restart();
    let mut c = s.conn();
    next(&mut c, "after kill -9");
}

#[test]
fn quarantine_runs_on_the_monotonic_clock() {
    let clock = ClockFile::new();
    let s = Server::with(Opts::new().module_arg("quarantine-ms", "3000").clock_file(clock.path()));
    let mut c = s.conn();
    let before = quarantine_left(acquire(&mut c, "res", "a"));
    // Jump the server's wall clock a minute forward.
    clock.set(60_000);
    sleep(Duration::from_millis(50));
    let after = quarantine_left(acquire(&mut c, "res", "a"));
    assert!(after > 2000 && after <= before, "a wall-clock jump did not shorten it: {before} then {after}");
}

#[test]
fn promoted_replica_refuses_grants_it_may_have_missed() {
    let mut master = Server::with(fast_sync());
    // The replica itself starts without a start-up quarantine, so that only
    // the promotion starts one.
    let replica =
        Server::with(Opts::new().module_arg("quarantine-ms", &QUARANTINE_MS.to_string()).aof_always());
    replicate(&replica, &master);
    let mut m = master.conn();
    let mut r = replica.conn();
    let seen = acquire(&mut m, "seen", "a").unwrap().unwrap();
    let _: i64 = cmd("WAIT").arg(1).arg(2000).query(&mut m).unwrap();

    // A grant the replica never receives: the replica is paused and its link
    // cut while the master acknowledges the grant, then the master dies
    // before the replica can reconnect and catch up.
    replica.signal("STOP");
    let _: i64 = cmd("CLIENT").arg("KILL").arg("TYPE").arg("replica").query(&mut m).unwrap();
    let lost = acquire(&mut m, "lost", "a").unwrap().unwrap();
    master.kill();
    replica.signal("CONT");
    let _: () = cmd("REPLICAOF").arg("NO").arg("ONE").query(&mut r).unwrap();

    let text: String = cmd("INFO").arg("lock").query(&mut r).unwrap();
    assert!(text.contains("lock_quarantine_reason:promotion"), "{text}");
    let left = quarantine_left(acquire(&mut r, "lost", "b"));
    assert!(left > 0 && left <= QUARANTINE_MS);
    assert_eq!(acquire(&mut r, "seen", "b").unwrap(), None, "a replicated lock is still held");
    wait_out_quarantine(&mut r);
    let next = acquire(&mut r, "lost", "b").unwrap().expect("granted after the quarantine");
    assert!(next > lost && next > seen, "promoted node's token {next} above the old master's {lost}");
}

#[test]
fn fence_is_replicated_and_persisted() {
    let master = Server::with(fast_sync().aof_always());
    let mut replica = Server::with(Opts::new().aof_always());
    replicate(&replica, &master);
    // After a full sync a replica starts a new AOF base and appends nothing
    // until that is done: wait, so that what follows is on disk. Redis
    // rewrites the AOF (aof_rewrites goes to 1); Valkey 9 takes the RDB it
    // received as the new base without a rewrite. Either way the manifest
    // then names a base file after the first one.
    let mut r = replica.conn();
    let manifest = replica.dir.join("appendonlydir/appendonly.aof.manifest");
    wait_until(Duration::from_secs(10), "replica AOF base after sync", || {
        let text: String = cmd("INFO").arg("persistence").query(&mut r).unwrap();
        let base = std::fs::read_to_string(&manifest).unwrap_or_default();
        text.contains("aof_rewrite_in_progress:0")
            && text.contains("aof_rewrite_scheduled:0")
            && text.contains("aof_last_bgrewrite_status:ok")
            && base.lines().any(|l| l.contains("type b") && !l.contains("appendonly.aof.1.base"))
    });
    let mut m = master.conn();
    let t = acquire(&mut m, "res", "a").unwrap().unwrap();
    let floor = t + 1_000_000_000; // a million ms of tokens ahead
    assert_eq!(cmd("LOCK.FENCE").arg("res").arg("a").arg(floor).query::<i64>(&mut m).unwrap(), 1);
    assert_eq!(cmd("LOCK.RELEASE").arg("res").arg("a").query::<i64>(&mut m).unwrap(), 1);
    let _: i64 = cmd("WAIT").arg(1).arg(2000).query(&mut m).unwrap();
    let mut r = replica.conn();
    assert!(info_stat(&mut r, "last_fencing_token") >= floor, "the replica applied the raise");

    // The raise survives a crash of the replica (AOF replay), with the lock
    // itself long gone; then the replica is promoted and grants above it.
    replica.kill_and_restart();
    let mut r = replica.conn();
    assert!(info_stat(&mut r, "last_fencing_token") >= floor, "the AOF replayed the raise");
    let _: () = cmd("REPLICAOF").arg("NO").arg("ONE").query(&mut r).unwrap();
    let _: () = cmd("CONFIG").arg("SET").arg("lock.quarantine-ms").arg(0).query(&mut r).unwrap();
    let next = acquire(&mut r, "res", "b").unwrap().unwrap();
    assert!(next > floor, "{next} > {floor}");
}
