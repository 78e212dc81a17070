//! Safety property 6 (docs/safety.md, exact replication): a replica reproduces the same
//! holders, hold counts, fencing tokens, absolute deadlines and native
//! expiry instants as its master, both through the full sync (RDB) and the
//! command stream. Writes are replicated as core commands (`SET .. PXAT`,
//! `DEL`), so a replica without the module still holds the locks as plain
//! string keys.

use lock_testkit::*;

use std::time::Duration;

/// `WAIT 1 2000` on the master: the replica acknowledged every write.
fn wait_for_replica(m: &mut Connection) {
    let acked: i64 = cmd("WAIT").arg(1).arg(2_000).query(m).unwrap();
    assert_eq!(acked, 1, "the replica did not acknowledge within 2 s");
}

fn acquire_ok(c: &mut Connection, key: &str, token: &str, ttl_ms: i64) -> i64 {
    cmd("LOCK.ACQUIRE").arg(key).arg(token).arg(ttl_ms).query(c).unwrap()
}

fn enter_ok(c: &mut Connection, key: &str, owner: &str, ttl_ms: i64) -> i64 {
    cmd("LOCK.ENTER").arg(key).arg(owner).arg(ttl_ms).query(c).unwrap()
}

fn int(c: &mut Connection, words: &[&str]) -> i64 {
    let mut command = cmd(words[0]);
    for w in &words[1..] {
        command.arg(*w);
    }
    command.query(c).unwrap()
}

#[test]
fn replica_with_the_module_reproduces_locks_exactly() {
    let master = Server::with(fast_sync());
    let replica = Server::start();
    let mut m = master.conn();
    // Taken before the link: reaches the replica through the full sync RDB.
    let pre_fence = acquire_ok(&mut m, "pre", "tok-P", 20_000);
    let linked = replicate(&replica, &master);
    let mut r = replica.conn();

    // Through the command stream: acquire, extend, two reentrant entries.
    let fence = acquire_ok(&mut m, "plain", "tok-A", 20_000);
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(int(&mut m, &["LOCK.EXTEND", "plain", "tok-A", "25000"]), 1);
    let re_fence = enter_ok(&mut m, "re", "owner-1", 20_000);
    assert_eq!(enter_ok(&mut m, "re", "owner-1", 20_000), re_fence);
    wait_for_replica(&mut m);

    for key in ["pre", "plain", "re"] {
        let on_master = lock_snapshot(&mut m, key);
        let on_replica = lock_snapshot(&mut r, key);
        assert_eq!(on_replica, on_master, "replica differs on {key}");
    }
    let plain = lock_snapshot(&mut r, "plain");
    assert_eq!(plain.text("kind"), "plain");
    assert_eq!(plain.text("holder"), "tok-A");
    assert_eq!(plain.int("holds"), 1);
    assert_eq!(plain.int("fence"), fence);
    let re = lock_snapshot(&mut r, "re");
    assert_eq!(re.text("kind"), "reentrant");
    assert_eq!(re.text("holder"), "owner-1");
    assert_eq!(re.int("holds"), 2);
    assert_eq!(re.int("fence"), re_fence);
    assert_eq!(lock_snapshot(&mut r, "pre").int("fence"), pre_fence);

    // Writes on the replica are refused by Redis itself, and change nothing.
    for words in [
        &["LOCK.ACQUIRE", "new", "tok-X", "1000"][..],
        &["LOCK.ACQUIRE", "plain", "tok-A", "1000"],
        &["LOCK.RELEASE", "plain", "tok-A"],
        &["LOCK.EXTEND", "plain", "tok-A", "1000"],
        &["LOCK.ENTER", "re", "owner-1", "1000"],
        &["LOCK.EXIT", "re", "owner-1"],
        &["LOCK.FENCE", "plain", "tok-A", "1"],
    ] {
        let words: Vec<&[u8]> = words.iter().map(|w| w.as_bytes()).collect();
        let e = err_text(run(&mut r, &words));
        assert!(e.starts_with("READONLY"), "{words:?} on replica: {e}");
    }
    assert_eq!(int(&mut r, &["EXISTS", "new"]), 0);
    assert_eq!(lock_snapshot(&mut r, "plain"), lock_snapshot(&mut m, "plain"));
    assert_eq!(lock_snapshot(&mut r, "re").int("holds"), 2);

    // Frees on the master reach the replica as deletions.
    assert_eq!(int(&mut m, &["LOCK.RELEASE", "plain", "tok-A"]), 1);
    assert_eq!(int(&mut m, &["LOCK.RELEASE", "pre", "tok-P"]), 1);
    assert_eq!(int(&mut m, &["LOCK.EXIT", "re", "owner-1"]), 1);
    wait_for_replica(&mut m);
    assert_eq!(lock_snapshot(&mut r, "re").int("holds"), 1);
    assert_eq!(lock_snapshot(&mut r, "re"), lock_snapshot(&mut m, "re"));
    assert_eq!(int(&mut m, &["LOCK.EXIT", "re", "owner-1"]), 0);
    wait_for_replica(&mut m);
    for key in ["pre", "plain", "re"] {
        assert_eq!(int(&mut r, &["EXISTS", key]), 0, "{key} left on replica");
        assert!(lock_info(&mut r, key).is_none());
    }
    assert_eq!(int(&mut r, &["DBSIZE"]), 0);
    eprintln!("replica with module: link up after {linked:?}");
}

/// Replicas load the module (docs/safety.md, assumption 7): a master's full
/// sync carries its ledger (the fencing counter and the removal
/// quarantines, docs/design.md "Where the node's state lives"), which a
/// server without the module refuses to load. It stops, loudly, with
/// Redis' own line naming the module's data; it never runs holding locks it
/// cannot protect. The master goes on granting.
#[test]
fn a_replica_without_the_module_refuses_the_masters_data_loudly() {
    let master = Server::with(fast_sync());
    let mut replica = Server::with(Opts { without_module: true, ..Opts::new() });
    let mut m = master.conn();
    acquire_ok(&mut m, "pre", "tok-P", 20_000);
    let mut r = replica.conn();
    let ok: String = cmd("REPLICAOF").arg("127.0.0.1").arg(master.port).query(&mut r).unwrap();
    assert_eq!(ok, "OK");
    let exited = replica.wait_exit(Duration::from_secs(20));
    assert!(exited.is_some(), "the bare replica keeps running; log: {}", replica.log());
    let log = replica.log();
    assert!(log.contains("no matching module 'lockledgr'"), "{log}");
    assert!(acquire_ok(&mut m, "after", "tok-B", 1_000) > 0, "the master grants on");
}
