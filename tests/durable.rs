//! What a node must not lose across a start that skips its quarantine
//! (`appendonly yes` + `appendfsync always`), with or without an AOF
//! rewrite first: its fencing counter (property 9) and its removal
//! quarantines (property 10). And the counter's lead over the clock, which a
//! node without persistence must catch up with after its own restart
//! (property 9 across nodes). docs/safety.md, "Where the node's state lives".

use lock_testkit::*;
use std::time::Duration;

fn acquire(c: &mut Connection, key: &str, token: &str, ttl_ms: i64) -> redis::RedisResult<Option<i64>> {
    cmd("LOCK.ACQUIRE").arg(key).arg(token).arg(ttl_ms).query(c)
}

/// The code of a refused grant's error (`QUARANTINE`), or the grant.
fn refused(result: redis::RedisResult<Option<i64>>) -> String {
    match result {
        Err(e) => e.code().unwrap_or("").to_string(),
        Ok(v) => format!("granted {v:?}"),
    }
}

fn removal_quarantine_across_an_always_restart(rewrite: bool) {
    let mut s = Server::with(Opts::new().aof_always());
    let mut c = s.conn();
    assert_eq!(info_stat(&mut c, "quarantine"), 0, "appendfsync always: no start-up quarantine");
    acquire(&mut c, "orders", "A", 30_000).unwrap().expect("A is granted");
    let _: i64 = cmd("DEL").arg("orders").query(&mut c).unwrap();
    assert_eq!(
        refused(acquire(&mut c, "orders", "B", 30_000)),
        "QUARANTINE",
        "B while A's lock may be in force"
    );
    if rewrite {
        rewrite_aof(&mut c);
    }
    s.kill_and_restart();
    let mut c = s.conn();
    assert_eq!(info_stat(&mut c, "quarantine"), 0, "appendfsync always: no start-up quarantine");
    assert_eq!(
        refused(acquire(&mut c, "orders", "B", 30_000)),
        "QUARANTINE",
        "after kill -9 and a start{}: A's lock may still be in force",
        if rewrite { " (after an AOF rewrite)" } else { "" }
    );
    let (_, left) = refusal(&mut c, "orders").expect("LOCK.INFO says why");
    assert!(left > 20_000 && left <= 31_000 + 60_000, "until A's deadline (and the cool-down): {left} ms");
}

#[test]
fn a_removal_quarantine_survives_an_always_restart() {
    removal_quarantine_across_an_always_restart(false);
}

#[test]
fn a_removal_quarantine_survives_an_aof_rewrite_and_an_always_restart() {
    removal_quarantine_across_an_always_restart(true);
}

/// The removal quarantine's end was written on the module clock of the
/// process before; a forward step of the wall clock (within
/// `lock.clock-jump-tolerance-ms`) before the restart moves the new
/// process's module clock ahead of it. The restored quarantine must not end
/// early by that step (found by the simulator, seed 8100022746 and three
/// more of 8100000000..8100200000). With and without a rewrite (the ledger,
/// the replayed record).
#[test]
fn a_wall_clock_step_before_an_always_restart_does_not_shorten_a_removal_quarantine() {
    for rewrite in [false, true] {
        let clock = ClockFile::new();
        let mut s = Server::with(Opts::new().aof_always().clock_file(clock.path()));
        let mut c = s.conn();
        acquire(&mut c, "orders", "A", 10_000).unwrap().expect("A is granted");
        let _: i64 = cmd("DEL").arg("orders").query(&mut c).unwrap();
        if rewrite {
            rewrite_aof(&mut c);
        }
        clock.set(15_000);
        s.kill_and_restart();
        let mut c = s.conn();
        assert_eq!(
            refused(acquire(&mut c, "orders", "B", 10_000)),
            "QUARANTINE",
            "a step of 15 s before the restart{}: A's lock may still be in force",
            if rewrite { " (after a rewrite)" } else { "" }
        );
    }
}

#[test]
fn a_fence_raise_far_ahead_survives_an_aof_rewrite_and_an_always_restart() {
    let mut s = Server::with(Opts::new().aof_always());
    let mut c = s.conn();
    acquire(&mut c, "k", "A", 30_000).unwrap().expect("A is granted");
    let f = (server_clock_ms(&mut c) + 600_000) * 1000;
    assert_eq!(cmd("LOCK.FENCE").arg("k").arg("A").arg(f).query::<i64>(&mut c).unwrap(), 1);
    assert_eq!(cmd("LOCK.RELEASE").arg("k").arg("A").query::<i64>(&mut c).unwrap(), 1);
    rewrite_aof(&mut c);
    s.kill_and_restart();
    let mut c = s.conn();
    assert_eq!(info_stat(&mut c, "quarantine"), 0, "appendfsync always: no start-up quarantine");
    let next = acquire(&mut c, "k", "B", 30_000).unwrap().expect("granted at once");
    assert!(next > f, "the next token is above the raise the node took: {next} after {f}");
}

/// Issue 41's history on real servers: n2 starts from an `always` AOF (no
/// quarantine), and its first token is fenced onto n0, which has no
/// persistence and a clock 1 s behind; n0 is killed and started again
/// within that second, and waits out its quarantine. Its next token must be
/// above the raise it took.
#[test]
fn a_node_without_persistence_restarts_above_a_raise_from_an_always_node() {
    const QUARANTINE_MS: i64 = 3_000;
    const BEHIND_MS: i64 = 1_000;
    let quarantine = QUARANTINE_MS.to_string();
    let mut n2 = Server::with(Opts::new().module_arg("quarantine-ms", &quarantine).aof_always());
    let mut c2 = n2.conn();
    acquire(&mut c2, "warmup", "x", 1_000).unwrap().expect("n2 grants");
    // A restart of n2 from its always AOF (as in the simulator's history).
    n2.kill_and_restart();
    let mut c2 = n2.conn();
    assert_eq!(info_stat(&mut c2, "quarantine"), 0, "n2: appendfsync always, no quarantine");
    let t = acquire(&mut c2, "k", "A", 10_000).unwrap().expect("n2 grants at once");

    let clock = ClockFile::starting_at(-BEHIND_MS, 0);
    let mut n0 = Server::with(Opts::new().module_arg("quarantine-ms", &quarantine).clock_file(clock.path()));
    let mut c0 = n0.conn();
    let _: String = cmd("LOCK.UNQUARANTINE").arg("STARTUP").query(&mut c0).unwrap();
    acquire(&mut c0, "k", "A", 10_000).unwrap().expect("n0 grants (a brand-new node)");
    assert_eq!(
        cmd("LOCK.FENCE").arg("k").arg("A").arg(t).query::<i64>(&mut c0).unwrap(),
        1,
        "n0 raised to T"
    );
    n0.kill_and_restart();
    let mut c0 = n0.conn();
    wait_until(Duration::from_secs(QUARANTINE_MS as u64 / 1000 + 10), "n0's quarantine to end", || {
        info_stat(&mut c0, "quarantine") == 0
    });
    let next = acquire(&mut c0, "k2", "B", 10_000).unwrap().expect("n0 grants after its quarantine");
    assert!(next > t, "n0's next token is above the raise it took: {next} after {t}");
}

/// Grants a lock, rewrites the AOF with `aof-use-rdb-preamble no` (no
/// ledger in it, as an older release's AOF), kills and starts the server:
/// it must be quarantined. Returns a connection to it.
fn restart_from_an_aof_without_a_ledger(s: &mut Server, mut c: Connection) -> Connection {
    acquire(&mut c, "k", "A", 30_000).unwrap().expect("granted");
    let _: () = cmd("CONFIG").arg("SET").arg("aof-use-rdb-preamble").arg("no").query(&mut c).unwrap();
    rewrite_aof(&mut c);
    let _: () = cmd("CONFIG").arg("SET").arg("aof-use-rdb-preamble").arg("yes").query(&mut c).unwrap();
    s.kill_and_restart();
    let mut c = s.conn();
    assert_eq!(info_stat(&mut c, "quarantine"), 1, "no ledger in the AOF: quarantined");
    c
}

/// A start that skips the quarantine must read the node's ledger back from
/// the AOF. Here the last rewrite wrote none (`aof-use-rdb-preamble no`
/// then, as an AOF written by an older release of the module): the start
/// is quarantined, and the log says why.
#[test]
fn an_always_start_whose_aof_holds_no_ledger_is_quarantined() {
    let mut s = Server::with(Opts::new().module_arg("quarantine-ms", "60000").aof_always());
    let mut c = s.conn();
    assert_eq!(info_stat(&mut c, "quarantine"), 0);
    let mut c = restart_from_an_aof_without_a_ledger(&mut s, c);
    assert_eq!(refused(acquire(&mut c, "other", "B", 30_000)), "QUARANTINE");
    assert!(s.log().contains("the AOF held no lock ledger"), "{}", s.log());
    // The next rewrite writes the ledger: the start after it needs none.
    let _: i64 = cmd("LOCK.UNQUARANTINE").arg("STARTUP").query(&mut c).unwrap();
    rewrite_aof(&mut c);
    s.kill_and_restart();
    let mut c = s.conn();
    assert_eq!(info_stat(&mut c, "quarantine"), 0, "the ledger came back");
}

/// A start from an always AOF whose ledger was written during a quarantine
/// goes on with that quarantine: the grants it covers (of the process
/// before it) are not in that AOF either. Here the quarantine is the one
/// of a start whose AOF held no ledger (the upgrade from a release that
/// wrote none), and a rewrite during it writes the first ledger.
#[test]
fn an_always_start_goes_on_with_the_quarantine_its_ledger_was_written_in() {
    let mut s = Server::with(Opts::new().module_arg("quarantine-ms", "60000").aof_always());
    let c = s.conn();
    let mut c = restart_from_an_aof_without_a_ledger(&mut s, c);
    rewrite_aof(&mut c);
    s.kill_and_restart();
    let mut c = s.conn();
    assert_eq!(info_stat(&mut c, "quarantine"), 1, "the ledger was written during the quarantine");
    let left = info_stat(&mut c, "quarantine_ms_left");
    assert!(left > 40_000 && left <= 60_000, "the same quarantine goes on: {left} ms left");
}

/// `aof-use-rdb-preamble no` at start: a rewrite could not keep the ledger,
/// so even `appendfsync always` is quarantined, and the log names the
/// setting.
#[test]
fn an_always_start_without_the_rdb_preamble_is_quarantined_and_names_the_setting() {
    let s = Server::with(
        Opts::new().module_arg("quarantine-ms", "60000").aof_always().config("aof-use-rdb-preamble", "no"),
    );
    let mut c = s.conn();
    assert_eq!(info_stat(&mut c, "quarantine"), 1);
    assert!(s.log().contains("but aof-use-rdb-preamble no"), "{}", s.log());
}

/// A `FLUSHALL` replayed from the AOF at an always start: the flushed
/// locks' deadlines are not known, so the database stays quarantined as
/// long as a lock may have lasted.
#[test]
fn a_flush_replayed_at_an_always_start_quarantines_the_database() {
    let mut s = Server::with(Opts::new().aof_always());
    let mut c = s.conn();
    acquire(&mut c, "orders", "A", 30_000).unwrap().expect("granted");
    let _: () = cmd("FLUSHALL").query(&mut c).unwrap();
    assert_eq!(refused(acquire(&mut c, "orders", "B", 30_000)), "QUARANTINE");
    s.kill_and_restart();
    let mut c = s.conn();
    assert_eq!(info_stat(&mut c, "quarantine"), 0, "no start-up quarantine");
    assert_eq!(refused(acquire(&mut c, "orders", "B", 30_000)), "QUARANTINE", "the flush came back");
    assert_eq!(refused(acquire(&mut c, "another", "B", 30_000)), "QUARANTINE", "the whole database");
}

/// The removal quarantine reaches replicas: one attached before the `DEL`
/// (the `LOCK.FORGOTTEN` record in the stream) and one attached after it
/// (the ledger in the full sync).
#[test]
fn a_removal_quarantine_reaches_replicas_by_the_stream_and_by_a_full_sync() {
    let master = Server::with(fast_sync());
    let before = Server::with(Opts::new().module_arg("quarantine-ms", "0"));
    replicate(&before, &master);
    let mut m = master.conn();
    acquire(&mut m, "orders", "A", 30_000).unwrap().expect("granted");
    let _: i64 = cmd("DEL").arg("orders").query(&mut m).unwrap();
    let _: i64 = cmd("WAIT").arg(1).arg(5_000).query(&mut m).unwrap();
    let after = Server::with(Opts::new().module_arg("quarantine-ms", "0"));
    replicate(&after, &master);
    for (replica, how) in [(&before, "the stream"), (&after, "a full sync")] {
        let mut r = replica.conn();
        let (code, left) = refusal(&mut r, "orders").unwrap_or_else(|| panic!("by {how}: no quarantine"));
        assert_eq!(code, "changed", "by {how}");
        assert!(left > 20_000, "by {how}: {left} ms");
    }
}

/// `LOCK.FORGOTTEN` is the module's own record: a client's call is
/// refused and changes nothing.
#[test]
fn lock_forgotten_from_a_client_is_refused_and_changes_nothing() {
    let s = Server::with(Opts::new().module_arg("quarantine-ms", "0"));
    let mut c = s.conn();
    let until = server_clock_ms(&mut c) + 60_000;
    let e = err_text(cmd("LOCK.FORGOTTEN").arg("k").arg(until).arg("del").query(&mut c));
    assert!(e.starts_with("ERR lock.forgotten: this command is written by the module"), "{e}");
    assert!(acquire(&mut c, "k", "A", 1_000).unwrap().is_some(), "nothing quarantined");
}

#[test]
fn lock_quarantined_from_a_client_is_refused_and_changes_nothing() {
    let s = Server::with(Opts::new().module_arg("quarantine-ms", "60000"));
    let mut c = s.conn();
    let _: i64 = cmd("LOCK.UNQUARANTINE").arg("STARTUP").query(&mut c).unwrap();
    let until = server_clock_ms(&mut c) + 60_000;
    let e = err_text(cmd("LOCK.QUARANTINED").arg("NODE").arg(until).query(&mut c));
    assert!(e.starts_with("ERR lock.quarantined: this command is written by the module"), "{e}");
    let e = err_text(cmd("LOCK.QUARANTINED").arg("SLOT").arg(until).arg(3).query(&mut c));
    assert!(e.starts_with("ERR lock.quarantined: this command is written by the module"), "{e}");
    assert_eq!(info_stat(&mut c, "quarantine"), 0, "nothing quarantined");
    assert!(acquire(&mut c, "k", "A", 1_000).unwrap().is_some(), "nothing quarantined");
}

/// A node started from an `everysec` AOF is quarantined; `appendfsync`
/// raised to `always` during that quarantine, with no AOF rewrite after,
/// leaves an AOF whose ledger was written before the quarantine began. The
/// quarantine was written into the AOF as it started (`LOCK.QUARANTINED
/// NODE`), so the next start, from that AOF, goes on with it.
#[test]
fn a_quarantine_survives_a_switch_to_always_and_a_restart_without_a_rewrite() {
    let opts = Opts::new().module_arg("quarantine-ms", "60000").config("appendonly", "yes");
    let mut s = Server::with(opts.clone().config("appendfsync", "everysec"));
    let mut c = s.conn();
    assert_eq!(info_stat(&mut c, "quarantine"), 1, "everysec: quarantined at start");
    let _: i64 = cmd("LOCK.UNQUARANTINE").arg("STARTUP").query(&mut c).unwrap();
    acquire(&mut c, "orders", "A", 30_000).unwrap().expect("A is granted");
    rewrite_aof(&mut c);
    // A restart from the everysec AOF: quarantined, as it must be.
    s.kill_and_restart();
    let mut c = s.conn();
    assert_eq!(info_stat(&mut c, "quarantine"), 1);
    let _: String = cmd("CONFIG").arg("SET").arg("appendfsync").arg("always").query(&mut c).unwrap();
    // Let the quarantine's record reach the AOF (it is written from a timer
    // right after the load): any command after it is behind it.
    let _: String = cmd("PING").query(&mut c).unwrap();
    s.kill();
    s.opts = opts.config("appendfsync", "always");
    s.restart();
    let mut c = s.conn();
    assert_eq!(info_stat(&mut c, "quarantine"), 1, "the quarantine started before goes on");
    let left = info_stat(&mut c, "quarantine_ms_left");
    assert!(left > 30_000 && left <= 60_000, "the same quarantine: {left} ms left");
    assert_eq!(refused(acquire(&mut c, "invoices", "B", 30_000)), "QUARANTINE");
}
