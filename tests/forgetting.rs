//! Nothing makes a node forget a held lock silently. A lock removed by
//! anything but a lock command (eviction, FLUSHALL / FLUSHDB, SWAPDB, DEL,
//! RENAME, MOVE, RESTORE, an overwrite, ...) quarantines its key or its
//! database until the lock's deadline, and not longer; a value the module
//! could not have written is refused; LOCK.INFO says why a free key is not
//! grantable; LOCK.REVOKE frees a lock on purpose.

use lock_testkit::*;
use std::thread::{self, sleep};
use std::time::Duration;

/// Long enough for every step of a case to run well inside it, short enough
/// that waiting it out keeps the tests quick.
const TTL_MS: i64 = 2_000;

fn acquire(c: &mut Connection, key: &str, token: &str, ttl: i64) -> redis::RedisResult<Option<i64>> {
    cmd("LOCK.ACQUIRE").arg(key).arg(token).arg(ttl).query(c)
}

fn hold(c: &mut Connection, key: &str) -> HeldLock {
    let fence = acquire(c, key, "first", TTL_MS).unwrap().expect("granted");
    let deadline_ms = info_int(c, key, "deadline-ms").expect("held");
    HeldLock { key: key.to_string(), fence, deadline_ms }
}

/// A newcomer is refused `held.key` with QUARANTINE until the lock's
/// deadline (no sooner, no later than the slack), and LOCK.INFO says so
/// with `code`.
fn assert_quarantined_until_deadline(c: &mut Connection, held: &HeldLock, code: &str, what: &str) {
    // Valkey answers EXPIRE in the past with an `expired` event (Redis with
    // `del`): Redis' own expiry of a lock in force is a forgetting too.
    let codes: &[&str] =
        if code == "changed" && what.contains("EXPIRE") { &["changed", "expired"] } else { &[code] };
    assert_quarantined_until(c, held, 0, codes, what);
}

#[test]
fn every_command_that_removes_or_changes_a_held_lock_quarantines_its_key_until_its_deadline() {
    let s = Server::start();
    let mut c = s.conn();
    let dump: Vec<u8> = {
        let _: () = cmd("SET").arg("source").arg("value").query(&mut c).unwrap();
        cmd("DUMP").arg("source").query(&mut c).unwrap()
    };
    let _: i64 = cmd("SADD").arg("members").arg("m").query(&mut c).unwrap();
    // (what, the command run on the held key {k}, whether it leaves a value
    // there for a while: not a lock, or the lock until a shortened expiry)
    let cases: [(&str, Vec<Vec<u8>>, bool); 13] = [
        ("DEL", vec![b"DEL".to_vec(), b"{k}".to_vec()], false),
        ("UNLINK", vec![b"UNLINK".to_vec(), b"{k}".to_vec()], false),
        ("GETDEL", vec![b"GETDEL".to_vec(), b"{k}".to_vec()], false),
        ("RENAME", vec![b"RENAME".to_vec(), b"{k}".to_vec(), b"{k}-renamed".to_vec()], false),
        ("MOVE", vec![b"MOVE".to_vec(), b"{k}".to_vec(), b"3".to_vec()], false),
        (
            "RESTORE REPLACE",
            vec![b"RESTORE".to_vec(), b"{k}".to_vec(), b"0".to_vec(), dump, b"REPLACE".to_vec()],
            true,
        ),
        ("SET", vec![b"SET".to_vec(), b"{k}".to_vec(), b"x".to_vec()], true),
        (
            "SET PX",
            vec![b"SET".to_vec(), b"{k}".to_vec(), b"x".to_vec(), b"PX".to_vec(), b"50".to_vec()],
            true,
        ),
        ("APPEND", vec![b"APPEND".to_vec(), b"{k}".to_vec(), b"x".to_vec()], true),
        ("PEXPIRE", vec![b"PEXPIRE".to_vec(), b"{k}".to_vec(), b"20".to_vec()], true),
        ("EXPIRE 0", vec![b"EXPIRE".to_vec(), b"{k}".to_vec(), b"0".to_vec()], false),
        (
            "COPY REPLACE",
            vec![b"COPY".to_vec(), b"members".to_vec(), b"{k}".to_vec(), b"REPLACE".to_vec()],
            true,
        ),
        ("SUNIONSTORE", vec![b"SUNIONSTORE".to_vec(), b"{k}".to_vec(), b"members".to_vec()], true),
    ];
    let mut held = Vec::new();
    for (i, (what, words, _)) in cases.iter().enumerate() {
        let key = format!("k{i}");
        let h = hold(&mut c, &key);
        let words: Vec<Vec<u8>> = words
            .iter()
            .map(|w| match std::str::from_utf8(w) {
                Ok(text) if text.contains("{k}") => text.replace("{k}", &key).into_bytes(),
                _ => w.clone(),
            })
            .collect();
        let words: Vec<&[u8]> = words.iter().map(Vec::as_slice).collect();
        run(&mut c, &words).unwrap_or_else(|e| panic!("{what}: {e}"));
        held.push(h);
    }
    for ((what, _, leaves_value), h) in cases.iter().zip(&held) {
        if *leaves_value {
            // What the command left is no lock (refused as such), or the
            // lock until its new expiry, or already expired (a short PX on
            // a loaded machine: the key is then quarantined); once it is
            // deleted too, the quarantine still stands.
            let refused =
                cmd("LOCK.ACQUIRE").arg(&h.key).arg("second").arg(TTL_MS).query::<Option<i64>>(&mut c);
            let answer = match &refused {
                Ok(None) => "nil",
                Ok(Some(_)) => "a grant",
                Err(e) => e.code().unwrap_or("an error"),
            };
            assert!(["nil", "WRONGTYPE", "QUARANTINE"].contains(&answer), "{what}: {refused:?}");
            let _: i64 = cmd("DEL").arg(&h.key).query(&mut c).unwrap();
        }
        assert_quarantined_until_deadline(&mut c, h, "changed", what);
    }
    assert_eq!(info_stat(&mut c, "quarantined_keys"), cases.len() as i64);
    // Each counted once (the DELs of what the commands left, after them,
    // only extend the same quarantines).
    assert!(info_stat(&mut c, "locks_removed") >= cases.len() as i64);
    // Other keys, and the keys the locks were moved to, are not quarantined.
    assert!(acquire(&mut c, "untouched", "second", 100).unwrap().is_some());
    assert_eq!(acquire(&mut c, "k3-renamed", "second", 100).unwrap(), None, "the renamed lock is held there");
    assert!(s.log().contains("removed or changed by another command (del)"), "{}", s.log());

    // Grantable again at the deadline, with a higher token; a value left by
    // the command is not a lock, so it goes first (that DEL, after the
    // deadline, quarantines nothing).
    // Grantable again at the deadline, with a higher token.
    for ((what, _, _), h) in cases.iter().zip(&held) {
        granted_after_deadline(&mut c, h, what);
    }
    // A DEL once the last lock's deadline passed quarantines nothing (a
    // released lock counts until its deadline: the node keeps deadlines,
    // not the set of held locks).
    sleep(Duration::from_millis(AFTER_TTL_MS as u64 + 20));
    let _: () = cmd("SET").arg("k0").arg("x").query(&mut c).unwrap();
    let _: i64 = cmd("DEL").arg("k0").query(&mut c).unwrap();
    assert!(acquire(&mut c, "k0", "later", 100).unwrap().is_some());
}

/// The first grant's TTL in the moved-deadline table, and the TTL its
/// deadline then moves to: the table strikes after every first deadline
/// has passed, well before the moved ones.
const FIRST_TTL_MS: i64 = 300;
const MOVED_TTL_MS: i64 = 2_000;
/// The key of every row (each row has a database of its own).
const KEY: &str = "lock";

/// One way a lock's deadline moves after its first grant: a row of the
/// table below (the quorum client's watchdog is a row of the client's
/// `tests/forgetting.rs`). `setup` takes the lock at `key` on `c` (`w` is a
/// second connection on the same database) with a first grant of
/// [`FIRST_TTL_MS`], then moves its deadline to [`MOVED_TTL_MS`] from
/// about now; it returns the fencing tokens granted.
struct Move {
    name: &'static str,
    setup: fn(&mut Connection, &mut Connection, &str) -> Vec<i64>,
}

fn token(c: &mut Connection, words: &[&str]) -> i64 {
    let reply = run(c, &words.iter().map(|w| w.as_bytes()).collect::<Vec<_>>());
    match reply {
        Ok(Value::Int(t)) if t > 0 => t,
        other => panic!("{words:?}: {other:?}"),
    }
}

/// [`FIRST_TTL_MS`] and [`MOVED_TTL_MS`] as command arguments.
fn ttls() -> (String, String) {
    (FIRST_TTL_MS.to_string(), MOVED_TTL_MS.to_string())
}

const MOVES: [Move; 11] = [
    Move { name: "EXTEND", setup: move_by_extend },
    Move { name: "EXTEND of a reader", setup: move_by_extending_a_reader },
    Move { name: "RENEW", setup: move_by_renew },
    Move { name: "re-acquire by the holder", setup: move_by_reacquire },
    Move { name: "ENTER again", setup: move_by_entering_again },
    Move { name: "hand-off to a waiter", setup: move_by_hand_off },
    Move { name: "a later holder after a release", setup: move_by_a_holder_after_release },
    Move { name: "a later holder after expiry", setup: move_by_a_holder_after_expiry },
    Move { name: "MACQUIRE of the set again", setup: move_by_macquire_again },
    Move { name: "a second reader", setup: move_by_a_second_reader },
    Move { name: "a second permit", setup: move_by_a_second_permit },
];

fn move_by_extend(c: &mut Connection, _: &mut Connection, k: &str) -> Vec<i64> {
    let (first, moved) = ttls();
    let t = token(c, &["LOCK.ACQUIRE", k, "a", &first]);
    assert_eq!(int(c, &["LOCK.EXTEND", k, "a", &moved]), 1);
    vec![t]
}

fn move_by_extending_a_reader(c: &mut Connection, _: &mut Connection, k: &str) -> Vec<i64> {
    let (first, moved) = ttls();
    let t = token(c, &["LOCK.SHARED", k, "r1", &first]);
    assert_eq!(int(c, &["LOCK.EXTEND", k, "r1", &moved]), 1);
    vec![t]
}

fn move_by_renew(c: &mut Connection, _: &mut Connection, k: &str) -> Vec<i64> {
    let (first, moved) = ttls();
    let t = token(c, &["LOCK.ACQUIRE", k, "a", &first]);
    let renewed: Vec<i64> = cmd("LOCK.RENEW").arg("a").arg(&moved).arg(k).query(c).unwrap();
    assert_eq!(renewed, vec![1]);
    vec![t]
}

fn move_by_reacquire(c: &mut Connection, _: &mut Connection, k: &str) -> Vec<i64> {
    let (first, moved) = ttls();
    let t = token(c, &["LOCK.ACQUIRE", k, "a", &first]);
    assert_eq!(token(c, &["LOCK.ACQUIRE", k, "a", &moved]), t, "the same grant");
    vec![t]
}

fn move_by_entering_again(c: &mut Connection, _: &mut Connection, k: &str) -> Vec<i64> {
    let (first, moved) = ttls();
    let t = token(c, &["LOCK.ENTER", k, "o", &first]);
    assert_eq!(token(c, &["LOCK.ENTER", k, "o", &moved]), t, "the same grant, one more hold");
    vec![t]
}

fn move_by_hand_off(c: &mut Connection, w: &mut Connection, k: &str) -> Vec<i64> {
    let (first, moved) = ttls();
    let t = token(c, &["LOCK.ACQUIRE", k, "a", &first]);
    w.send_packed_command(
        &cmd("LOCK.ACQUIRE").arg(k).arg("b").arg(&moved).arg("WAIT").arg(5_000).get_packed_command(),
    )
    .unwrap();
    wait_until(Duration::from_secs(2), "the waiter queued", || info_int(c, k, "waiters") == Some(1));
    assert_eq!(int(c, &["LOCK.RELEASE", k, "a"]), 1);
    match w.recv_response().unwrap() {
        Value::Int(handed) => vec![t, handed],
        other => panic!("the waiter got {other:?}"),
    }
}

fn move_by_a_holder_after_release(c: &mut Connection, _: &mut Connection, k: &str) -> Vec<i64> {
    let (first, moved) = ttls();
    let t = token(c, &["LOCK.ACQUIRE", k, "a", &first]);
    assert_eq!(int(c, &["LOCK.RELEASE", k, "a"]), 1);
    vec![t, token(c, &["LOCK.ACQUIRE", k, "b", &moved])]
}

fn move_by_a_holder_after_expiry(c: &mut Connection, _: &mut Connection, k: &str) -> Vec<i64> {
    let (first, _) = ttls();
    let t = token(c, &["LOCK.ACQUIRE", k, "a", &first]);
    let mut later = None;
    wait_until(Duration::from_secs(2), "the first grant to expire", || {
        later = acquire(c, k, "b", MOVED_TTL_MS).unwrap();
        later.is_some()
    });
    vec![t, later.unwrap()]
}

fn move_by_macquire_again(c: &mut Connection, _: &mut Connection, k: &str) -> Vec<i64> {
    let (first, moved) = ttls();
    let other = format!("{k}:other");
    let t = token(c, &["LOCK.MACQUIRE", "a", &first, "2", k, &other]);
    assert_eq!(
        token(c, &["LOCK.MACQUIRE", "a", &moved, "2", k, &other]),
        t,
        "the same grant, every TTL reset"
    );
    vec![t]
}

fn move_by_a_second_reader(c: &mut Connection, _: &mut Connection, k: &str) -> Vec<i64> {
    let (first, moved) = ttls();
    vec![token(c, &["LOCK.SHARED", k, "r1", &first]), token(c, &["LOCK.SHARED", k, "r2", &moved])]
}

fn move_by_a_second_permit(c: &mut Connection, _: &mut Connection, k: &str) -> Vec<i64> {
    let (first, moved) = ttls();
    vec![
        token(c, &["LOCK.SEMAPHORE", k, "p1", "2", &first]),
        token(c, &["LOCK.SEMAPHORE", k, "p2", "2", &moved]),
    ]
}

/// The latest deadline of the lock at `key`: its own, or its latest
/// holder's (a read-write lock or a semaphore).
fn latest_deadline(c: &mut Connection, key: &str) -> i64 {
    let fields = lock_info(c, key).unwrap_or_else(|| panic!("{key} is not held"));
    let int_of = |fields: &[(String, Value)], name: &str| {
        fields.iter().find(|(n, _)| n == name).map(|(_, v)| redis::from_redis_value::<i64>(v).unwrap())
    };
    if let Some(deadline) = int_of(&fields, "deadline-ms") {
        return deadline;
    }
    let Some((_, Value::Array(holders))) = fields.iter().find(|(n, _)| n == "holders") else {
        panic!("{key}: no deadline in {fields:?}")
    };
    holders
        .iter()
        .filter_map(|h| match h {
            Value::Array(items) => {
                let pairs: Vec<(String, Value)> = items
                    .chunks(2)
                    .map(|p| (redis::from_redis_value(&p[0]).unwrap(), p[1].clone()))
                    .collect();
                int_of(&pairs, "deadline-ms")
            }
            _ => None,
        })
        .max()
        .unwrap_or_else(|| panic!("{key}: no holder's deadline"))
}

/// Every row of [`MOVES`], each in a database of its own, then `forget`
/// strikes them all once every first deadline has passed: a newcomer is
/// refused each key until its moved deadline, and granted it then, with a
/// higher token.
fn forgotten_after_the_deadline_moved(forget: Forget) {
    let s = Server::with(Forget::opts());
    let mut c = s.conn();
    let mut w = s.conn();
    let mut rows = Vec::new();
    let mut first_deadlines_by = 0;
    for (db, m) in (0..).zip(MOVES.iter()) {
        select(&mut c, db);
        select(&mut w, db);
        let fences = (m.setup)(&mut c, &mut w, KEY);
        first_deadlines_by = first_deadlines_by.max(wall_ms() + FIRST_TTL_MS);
        let deadline_ms = latest_deadline(&mut c, KEY);
        let what = format!("{} after {}", forget.name(), m.name);
        assert!(deadline_ms >= wall_ms() + MOVED_TTL_MS - 500, "{what}: the deadline did not move");
        rows.push((
            db,
            what,
            HeldLock { key: KEY.into(), fence: fences.into_iter().max().unwrap(), deadline_ms },
        ));
    }
    assert!(rows.len() as i64 <= PARTNER_DB_OFFSET);
    // A node that kept only a first deadline would now let newcomers in.
    sleep(Duration::from_millis((first_deadlines_by + 50 - wall_ms()).max(0) as u64));
    let time_left = rows.iter().map(|(_, _, h)| h.deadline_ms).min().unwrap() - wall_ms();
    assert!(time_left > 500, "{}: the setup took too long to tell ({time_left} ms left)", forget.name());
    let targets: Vec<Target> = rows.iter().map(|(db, _, _)| Target { db: *db, key: KEY.into() }).collect();
    let (removed, dbs) = (info_stat(&mut c, "locks_removed"), info_stat(&mut c, "db_quarantines"));
    forget.strike(&mut c, &targets);
    if forget.whole_database() {
        assert_eq!(info_stat(&mut c, "db_quarantines") - dbs, rows.len() as i64, "{}", forget.name());
    } else {
        assert!(info_stat(&mut c, "locks_removed") - removed >= rows.len() as i64, "{}", forget.name());
    }
    forget.clear(&mut c, &targets);
    for (db, what, held) in &rows {
        select(&mut c, *db);
        assert_quarantined_until_deadline(&mut c, held, forget.code(), what);
    }
    for (db, what, held) in &rows {
        select(&mut c, *db);
        granted_after_deadline(&mut c, held, what);
    }
}

/// Property 10 for every way a lock's deadline moves (a row of [`MOVES`])
/// crossed with every way its key is forgotten (a row of [`Forget::ALL`]):
/// no grant before the moved deadline. Every path that notes a deadline is
/// struck after its first one has passed, which a node that remembered
/// only the first deadline of a key would fail.
#[test]
fn a_lock_forgotten_after_its_deadline_moved_is_refused_until_the_moved_deadline() {
    let threads: Vec<_> = Forget::ALL
        .into_iter()
        .map(|f| (f, thread::spawn(move || forgotten_after_the_deadline_moved(f))))
        .collect();
    for (forget, t) in threads {
        if t.join().is_err() {
            panic!("{}: see the panic above", forget.name());
        }
    }
}

#[test]
fn a_removed_group_lock_or_an_edited_holder_quarantines_the_key() {
    let s = Server::start();
    let mut c = s.conn();
    let read: i64 = cmd("LOCK.SHARED").arg("rw").arg("r1").arg(TTL_MS).query(&mut c).unwrap();
    let _: i64 = cmd("LOCK.SEMAPHORE").arg("sem").arg("p1").arg(2).arg(TTL_MS).query(&mut c).unwrap();
    let _: i64 = cmd("LOCK.ENTER").arg("re").arg("o").arg(TTL_MS).query(&mut c).unwrap();
    let _: i64 = cmd("DEL").arg("rw").query(&mut c).unwrap();
    let _: i64 = cmd("HDEL").arg("sem").arg("h|p1").query(&mut c).unwrap();
    let _: () = cmd("SET").arg("re").arg("x").query(&mut c).unwrap();
    assert!(
        err_text(cmd("LOCK.ENTER").arg("re").arg("o2").arg(TTL_MS).query(&mut c)).starts_with("WRONGTYPE")
    );
    let _: i64 = cmd("DEL").arg("re").query(&mut c).unwrap();
    for (key, verb) in [("rw", "LOCK.EXCLUSIVE"), ("re", "LOCK.ENTER")] {
        let e = err_text(cmd(verb).arg(key).arg("second").arg(TTL_MS).query(&mut c));
        assert!(e.starts_with("QUARANTINE"), "{key}: {e}");
    }
    // The semaphore's hash lost a holder's field: not a lock any more, so
    // grants get WRONGTYPE, and once it is deleted the key is quarantined.
    let e = err_text(cmd("LOCK.SEMAPHORE").arg("sem").arg("p2").arg(2).arg(TTL_MS).query(&mut c));
    assert!(e.starts_with("WRONGTYPE") || e.starts_with("QUARANTINE"), "{e}");
    let _: i64 = cmd("DEL").arg("sem").query(&mut c).unwrap();
    let e = err_text(cmd("LOCK.SEMAPHORE").arg("sem").arg("p2").arg(2).arg(TTL_MS).query(&mut c));
    assert!(e.starts_with("QUARANTINE"), "{e}");
    assert!(read > 0);
}

/// One case of a flush or swap: a lock held in db 0, then `words`.
fn database_case(words: &[&str], code: &str) {
    let what = words.join(" ");
    let s = Server::start();
    let mut c = s.conn();
    let mut w = s.conn();
    let h = hold(&mut c, "k");
    // A waiter for the lock.
    w.send_packed_command(
        &cmd("LOCK.ACQUIRE").arg("k").arg("waiter").arg(TTL_MS).arg("WAIT").arg(0).get_packed_command(),
    )
    .unwrap();
    wait_until(Duration::from_secs(2), "waiter queued", || info_stat(&mut c, "waiters") == 1);
    let words_bytes: Vec<&[u8]> = words.iter().map(|w| w.as_bytes()).collect();
    run(&mut c, &words_bytes).unwrap_or_else(|e| panic!("{what}: {e}"));
    // The waiter of a forgotten key is told why, at once.
    let e = err_text(w.recv_response().and_then(Value::extract_error));
    assert!(e.starts_with("QUARANTINE"), "{what}: waiter got {e}");
    assert_quarantined_until_deadline(&mut c, &h, code, &what);
    // The whole database: another key too.
    let e = err_text(cmd("LOCK.ACQUIRE").arg("other").arg("x").arg(100).query(&mut c));
    assert!(e.contains("database") && e.starts_with("QUARANTINE"), "{what}: {e}");
    assert!(refusal(&mut c, "other").is_some(), "{what}: LOCK.INFO other");
    assert_eq!(info_stat(&mut c, "db_quarantines"), 1, "{what}");
    assert_eq!(info_stat(&mut c, "quarantined_dbs"), if code == "swapped" { 2 } else { 1 }, "{what}");
    assert!(info_stat(&mut c, "removal_quarantine_ms_left") > 0);
    // A database that never held a lock is not quarantined.
    let _: () = cmd("SELECT").arg(5).query(&mut c).unwrap();
    assert!(acquire(&mut c, "k", "x", 100).unwrap().is_some(), "{what}: db 5");
    let _: () = cmd("SELECT").arg(0).query(&mut c).unwrap();
    granted_after_deadline(&mut c, &h, &what);
    assert_eq!(info_stat(&mut c, "quarantined_dbs"), 0, "{what}: ended");
}

#[test]
fn flushes_and_swapdb_quarantine_the_database_until_its_latest_deadline() {
    let cases: [(&[&str], &str); 6] = [
        (&["FLUSHALL"], "flushed"),
        (&["FLUSHALL", "ASYNC"], "flushed"),
        (&["FLUSHDB"], "flushed"),
        (&["FLUSHDB", "ASYNC"], "flushed"),
        (&["FLUSHDB", "SYNC"], "flushed"),
        (&["SWAPDB", "0", "1"], "swapped"),
    ];
    let threads: Vec<_> =
        cases.into_iter().map(|(words, code)| thread::spawn(move || database_case(words, code))).collect();
    for t in threads {
        t.join().expect("case");
    }
}

#[test]
fn a_flush_quarantines_only_databases_that_may_hold_locks() {
    let s = Server::start();
    let mut c = s.conn();
    let _: () = cmd("SET").arg("cache").arg("v").query(&mut c).unwrap();
    let _: () = cmd("FLUSHALL").query(&mut c).unwrap();
    assert!(acquire(&mut c, "k", "a", 300).unwrap().is_some(), "no lock was ever held: no quarantine");
    assert_eq!(int(&mut c, &["LOCK.RELEASE", "k", "a"]), 1);
    // A lock released before the flush still counts until its deadline (the
    // node keeps one number per database, not the set of held locks).
    let _: () = cmd("FLUSHDB").query(&mut c).unwrap();
    assert!(err_text(cmd("LOCK.ACQUIRE").arg("k").arg("b").arg(100).query(&mut c)).starts_with("QUARANTINE"));
    // Another database, which never held a lock, is not quarantined...
    let _: () = cmd("SELECT").arg(1).query(&mut c).unwrap();
    assert!(acquire(&mut c, "k", "b", 100).unwrap().is_some());
    // ... until SWAPDB 0 1 gives it db 0's locks.
    let _: () = cmd("SWAPDB").arg(0).arg(1).query(&mut c).unwrap();
    assert_eq!(refused_code(&mut c, "fresh").as_deref(), Some("swapped"));
}

/// Fills the node until it evicts every key it may (`maxmemory 1`), then
/// lifts the limit again. Returns the evictions seen.
fn evict_everything(c: &mut Connection) -> i64 {
    let before = evicted_keys(c);
    let _: () = cmd("CONFIG").arg("SET").arg("maxmemory").arg(1).query(c).unwrap();
    // The write makes Redis evict before it runs (and is then refused).
    let _ = cmd("SET").arg("filler").arg("x").query::<Value>(c);
    let _: () = cmd("CONFIG").arg("SET").arg("maxmemory").arg(0).query(c).unwrap();
    evicted_keys(c) - before
}

fn evicted_keys(c: &mut Connection) -> i64 {
    info_field(c, "stats", "evicted_keys")
}

#[test]
fn an_evicted_lock_quarantines_its_key_under_every_policy_and_mode() {
    // (policy, lock.eviction-mode): volatile-* policies evict lock keys too
    // (they carry an expiry); in refuse mode, a lock taken before the policy
    // changed is still watched.
    let cases = [
        ("volatile-lru", "quarantine"),
        ("allkeys-lru", "quarantine"),
        ("volatile-ttl", "quarantine"),
        ("allkeys-random", "refuse"),
    ];
    let threads: Vec<_> = cases
        .into_iter()
        .map(|(policy, mode)| {
            thread::spawn(move || {
                let what = format!("{policy}, {mode}");
                let s = Server::with(Opts::new().module_arg("eviction-mode", mode));
                let mut c = s.conn();
                let h = hold(&mut c, "k");
                let _: () = cmd("SET").arg("cache").arg("v").arg("PX").arg(600_000).query(&mut c).unwrap();
                let _: () =
                    cmd("CONFIG").arg("SET").arg("maxmemory-policy").arg(policy).query(&mut c).unwrap();
                let evicted = evict_everything(&mut c);
                assert!(evicted >= 1, "{what}: nothing evicted");
                assert_eq!(int(&mut c, &["EXISTS", "k"]), 0, "{what}: the lock key was evicted");
                assert_quarantined_until_deadline(&mut c, &h, "evicted", &what);
                assert_eq!(info_stat(&mut c, "locks_evicted"), 1, "{what}");
                assert_eq!(info_stat(&mut c, "locks_removed"), 1, "{what}");
                assert!(acquire(&mut c, "other", "x", 100).unwrap().is_some(), "{what}: only the key");
                granted_after_deadline(&mut c, &h, &what);
            })
        })
        .collect();
    for t in threads {
        t.join().expect("case");
    }
}

#[test]
fn the_eviction_guard_refuses_grants_while_lock_keys_can_be_evicted() {
    let s = Server::start();
    let mut c = s.conn();
    let mut w = s.conn();
    let held = acquire(&mut c, "held", "holder", 10_000).unwrap().unwrap();
    assert_eq!(info_stat(&mut c, "evictable"), 0);
    // A waiter queued before the policy changes is told at once.
    w.send_packed_command(
        &cmd("LOCK.ACQUIRE").arg("held").arg("w").arg(1000).arg("WAIT").arg(0).get_packed_command(),
    )
    .unwrap();
    wait_until(Duration::from_secs(2), "waiter queued", || info_stat(&mut c, "waiters") == 1);
    let _: () = cmd("CONFIG").arg("SET").arg("maxmemory-policy").arg("allkeys-lru").query(&mut c).unwrap();
    assert!(acquire(&mut c, "k", "a", 100).unwrap().is_some(), "no maxmemory: nothing is evicted");
    let _: () = cmd("CONFIG").arg("SET").arg("maxmemory").arg("100mb").query(&mut c).unwrap();
    let e = err_text(w.recv_response().and_then(Value::extract_error));
    assert!(e.starts_with("EVICTION"), "waiter: {e}");
    for verb in ["LOCK.ACQUIRE", "LOCK.ENTER", "LOCK.SHARED", "LOCK.EXCLUSIVE"] {
        let e = err_text(cmd(verb).arg("fresh").arg("a").arg(100).query(&mut c));
        assert!(
            e.starts_with("EVICTION maxmemory-policy allkeys-lru") && e.contains("noeviction"),
            "{verb}: {e}"
        );
    }
    let e = err_text(cmd("LOCK.ACQUIRE").arg("fresh").arg("a").arg(100).arg("WAIT").arg(0).query(&mut c));
    assert!(e.starts_with("EVICTION"), "WAIT does not block: {e}");
    let e = err_text(cmd("LOCK.MACQUIRE").arg("a").arg(100).arg(2).arg("m1").arg("m2").query(&mut c));
    assert!(e.starts_with("EVICTION"), "{e}");
    assert_eq!(refusal(&mut c, "fresh"), Some(("evictable".into(), -1)));
    assert_eq!(info_stat(&mut c, "evictable"), 1);
    let text: String = cmd("INFO").arg("lock").query(&mut c).unwrap();
    assert!(text.contains("lock_maxmemory_policy_evicting:allkeys-lru"), "{text}");
    assert!(info_stat(&mut c, "refused_evictable") >= 6);
    // The holder keeps its lock: renewal, extension and release work.
    assert_eq!(acquire(&mut c, "held", "holder", 10_000).unwrap(), Some(held));
    assert_eq!(int(&mut c, &["LOCK.EXTEND", "held", "holder", "5000"]), 1);
    assert!(s.log().contains("can evict lock keys: new locks are refused"), "{}", s.log());
    // Every evicting policy counts; noeviction or no limit lifts the guard.
    for policy in ["volatile-ttl", "allkeys-lfu", "volatile-random"] {
        let _: () = cmd("CONFIG").arg("SET").arg("maxmemory-policy").arg(policy).query(&mut c).unwrap();
        assert!(err_text(cmd("LOCK.ACQUIRE").arg("fresh").arg("a").arg(100).query(&mut c))
            .starts_with("EVICTION"));
    }
    let _: () = cmd("CONFIG").arg("SET").arg("maxmemory-policy").arg("noeviction").query(&mut c).unwrap();
    assert!(acquire(&mut c, "fresh", "a", 100).unwrap().is_some());
    let _: () = cmd("CONFIG").arg("SET").arg("maxmemory-policy").arg("allkeys-lru").query(&mut c).unwrap();
    assert!(
        err_text(cmd("LOCK.ACQUIRE").arg("fresh2").arg("a").arg(100).query(&mut c)).starts_with("EVICTION")
    );
    let _: () = cmd("CONFIG").arg("SET").arg("maxmemory").arg(0).query(&mut c).unwrap();
    assert!(acquire(&mut c, "fresh2", "a", 100).unwrap().is_some());
    assert_eq!(info_stat(&mut c, "evictable"), 0);
    // The opt-in for shared instances grants under an evicting policy.
    let _: () = cmd("CONFIG").arg("SET").arg("maxmemory").arg("100mb").query(&mut c).unwrap();
    let _: () = cmd("CONFIG").arg("SET").arg("lock.eviction-mode").arg("quarantine").query(&mut c).unwrap();
    assert!(acquire(&mut c, "fresh3", "a", 100).unwrap().is_some());
    let mode: Vec<String> = cmd("CONFIG").arg("GET").arg("lock.eviction-mode").query(&mut c).unwrap();
    assert_eq!(mode[1], "quarantine");
}

#[test]
fn a_node_started_with_an_evicting_policy_refuses_from_the_start() {
    let s = Server::with(Opts::new().config("maxmemory", "100mb").config("maxmemory-policy", "volatile-lru"));
    let mut c = s.conn();
    let e = err_text(cmd("LOCK.ACQUIRE").arg("k").arg("a").arg(100).query(&mut c));
    assert!(e.starts_with("EVICTION maxmemory-policy volatile-lru"), "{e}");
}

#[test]
fn values_the_module_could_not_have_written_are_refused_not_trusted() {
    let s = Server::with(Opts::new().module_arg("clock-jump-tolerance-ms", "1000"));
    let mut c = s.conn();
    let far = wall_ms() + 100_000_000_000;
    // A string lock 3,000 years long, and a hash lock with such a holder.
    let forged = format!("LK1|P|1|{far}|1|owner");
    let _: () = cmd("SET").arg("forged").arg(&forged).query(&mut c).unwrap();
    // Its header's earliest deadline has passed, so the next call reads every
    // holder (a header is only a lower bound; it is bounded too).
    let now = wall_ms() - 1_000;
    let _: i64 = cmd("HSET")
        .arg("forged-hash")
        .arg("lock")
        .arg(format!("LK2|S|0|w|{now}|5|"))
        .arg("h|x")
        .arg(format!("w|5|{far}"))
        .arg("f|5")
        .arg("x")
        .query(&mut c)
        .unwrap();
    for (key, verb) in [("forged", "LOCK.ACQUIRE"), ("forged-hash", "LOCK.EXCLUSIVE")] {
        let e = err_text(cmd(verb).arg(key).arg("t").arg(1000).query(&mut c));
        assert!(e.starts_with("WRONGTYPE") && e.contains("could not have written"), "{key}: {e}");
        for words in [vec!["LOCK.INFO", key], vec!["LOCK.CHECK", key, "5"], vec!["LOCK.RELEASE", key, "x"]] {
            let e = err_text(run(&mut c, &words.iter().map(|w| w.as_bytes()).collect::<Vec<_>>()));
            assert!(e.contains("could not have written"), "{words:?}: {e}");
        }
    }
    let raw: String = cmd("GET").arg("forged").query(&mut c).unwrap();
    assert_eq!(raw, forged, "refused, and left as it was");
    // LOCK.REVOKE removes them, and the keys are grantable at once.
    for key in ["forged", "forged-hash"] {
        assert_eq!(int(&mut c, &["LOCK.REVOKE", key]), 1);
        assert!(acquire(&mut c, key, "t", 100).unwrap().is_some(), "{key}");
    }
    // A value within what a grant could set holds, but only that long.
    let soon = wall_ms() + 800;
    let _: () = cmd("SET").arg("bounded").arg(format!("LK1|P|1|{soon}|1|owner")).query(&mut c).unwrap();
    assert_eq!(acquire(&mut c, "bounded", "t", 100).unwrap(), None);
    wait_until(Duration::from_secs(3), "the bounded value to end", || {
        acquire(&mut c, "bounded", "t", 100).unwrap().is_some()
    });
    // The bound follows the settings: max-ttl 30 s + tolerance 1 s.
    let beyond = wall_ms() + 31_000 + 2_000;
    let _: () = cmd("SET").arg("beyond").arg(format!("LK1|P|1|{beyond}|1|owner")).query(&mut c).unwrap();
    assert!(
        err_text(cmd("LOCK.ACQUIRE").arg("beyond").arg("t").arg(100).query(&mut c)).starts_with("WRONGTYPE")
    );
    let _: () = cmd("CONFIG").arg("SET").arg("lock.max-ttl-ms").arg(60_000).query(&mut c).unwrap();
    assert_eq!(acquire(&mut c, "beyond", "t", 100).unwrap(), None, "within the new bound");
}

#[test]
fn revoke_frees_a_lock_on_purpose_counted_logged_and_with_rising_tokens() {
    let s = Server::start();
    let mut c = s.conn();
    let mut w = s.conn();
    let t1 = acquire(&mut c, "k", "a", 30_000).unwrap().unwrap();
    w.send_packed_command(
        &cmd("LOCK.ACQUIRE").arg("k").arg("waiter").arg(1000).arg("WAIT").arg(0).get_packed_command(),
    )
    .unwrap();
    wait_until(Duration::from_secs(2), "waiter queued", || info_stat(&mut c, "waiters") == 1);
    assert_eq!(int(&mut c, &["LOCK.REVOKE", "k"]), 1);
    let t2 = match w.recv_response().unwrap() {
        Value::Int(t) => t,
        other => panic!("waiter got {other:?}"),
    };
    assert!(t2 > t1, "the waiter is served, with a higher token");
    assert_eq!(int(&mut c, &["LOCK.RELEASE", "k", "a"]), 0, "the revoked holder holds nothing");
    assert_eq!(info_stat(&mut c, "revoked"), 1);
    assert_eq!(info_stat(&mut c, "locks_removed"), 0, "a revoke is not a forgetting");
    assert!(s.log().contains("LOCK.REVOKE of 'k' (db 0): removed a (token"), "{}", s.log());
    // Every kind; a key without a lock answers 0; a non-lock is refused.
    let _: i64 = cmd("LOCK.SEMAPHORE").arg("sem").arg("p1").arg(2).arg(30_000).query(&mut c).unwrap();
    let _: i64 = cmd("LOCK.SEMAPHORE").arg("sem").arg("p2").arg(2).arg(30_000).query(&mut c).unwrap();
    assert_eq!(int(&mut c, &["LOCK.REVOKE", "sem"]), 1);
    assert_eq!(int(&mut c, &["EXISTS", "sem"]), 0);
    assert_eq!(int(&mut c, &["LOCK.REVOKE", "nothing"]), 0);
    let _: () = cmd("SET").arg("plain").arg("data").query(&mut c).unwrap();
    assert!(err_text(cmd("LOCK.REVOKE").arg("plain").query(&mut c)).starts_with("WRONGTYPE"));
    let v: String = cmd("GET").arg("plain").query(&mut c).unwrap();
    assert_eq!(v, "data");
    assert!(err_text(cmd("LOCK.REVOKE").query(&mut c)).contains("wrong number of arguments"));
    assert!(err_text(cmd("LOCK.REVOKE").arg("k").arg("extra").query(&mut c))
        .contains("wrong number of arguments"));
    // It ends the quarantine a DEL started: the operator declares it gone.
    acquire(&mut c, "d", "a", 30_000).unwrap().unwrap();
    let _: i64 = cmd("DEL").arg("d").query(&mut c).unwrap();
    assert!(err_text(cmd("LOCK.ACQUIRE").arg("d").arg("b").arg(100).query(&mut c)).starts_with("QUARANTINE"));
    assert_eq!(int(&mut c, &["LOCK.REVOKE", "d"]), 0);
    assert!(acquire(&mut c, "d", "b", 100).unwrap().is_some());
    assert!(s.log().contains("its quarantine ended"), "{}", s.log());
}

#[test]
fn revoke_is_replicated_as_a_delete() {
    let master = Server::start();
    let replica = Server::start();
    replicate(&replica, &master);
    let mut m = master.conn();
    let mut r = replica.conn();
    acquire(&mut m, "k", "a", 30_000).unwrap().unwrap();
    assert_eq!(int(&mut m, &["LOCK.REVOKE", "k"]), 1);
    assert_eq!(int(&mut m, &["WAIT", "1", "2000"]), 1);
    assert_eq!(int(&mut r, &["EXISTS", "k"]), 0);
}

#[test]
fn the_module_s_own_writes_and_redis_own_expiry_never_quarantine() {
    // The backstop is the deadline plus a short tolerance, so that Redis'
    // own expiry comes soon after it.
    let s = Server::with(Opts::new().module_arg("clock-jump-tolerance-ms", "100"));
    let mut c = s.conn();
    let mut w = s.conn();
    for i in 0..50 {
        let k = format!("k{}", i % 5);
        acquire(&mut c, &k, "a", 1_000).unwrap().unwrap();
        assert_eq!(int(&mut c, &["LOCK.EXTEND", &k, "a", "2000"]), 1);
        assert!(acquire(&mut c, &k, "a", 1_000).unwrap().is_some(), "the holder renews");
        assert_eq!(int(&mut c, &["LOCK.RELEASE", &k, "a"]), 1);
        let _: i64 = cmd("LOCK.ENTER").arg("re").arg("o").arg(1_000).query(&mut c).unwrap();
        assert_eq!(int(&mut c, &["LOCK.EXIT", "re", "o"]), 0);
        let _: i64 = cmd("LOCK.SHARED").arg("rw").arg(format!("r{i}")).arg(1_000).query(&mut c).unwrap();
        let _: i64 =
            cmd("LOCK.SEMAPHORE").arg("sem").arg(format!("p{i}")).arg(100).arg(1_000).query(&mut c).unwrap();
        let _: i64 =
            cmd("LOCK.MACQUIRE").arg("m").arg(1_000).arg(2).arg("{s}1").arg("{s}2").query(&mut c).unwrap();
        let _: Vec<i64> = cmd("LOCK.MRELEASE").arg("m").arg("{s}1").arg("{s}2").query(&mut c).unwrap();
    }
    // A hand-off on release and one on expiry.
    acquire(&mut c, "h", "a", 100).unwrap().unwrap();
    w.send_packed_command(
        &cmd("LOCK.ACQUIRE").arg("h").arg("b").arg(100).arg("WAIT").arg(2000).get_packed_command(),
    )
    .unwrap();
    assert!(matches!(w.recv_response().unwrap(), Value::Int(_)));
    // Redis' own expiry at the backstop (100 ms after the deadline).
    acquire(&mut c, "expiring", "a", 50).unwrap().unwrap();
    wait_until(Duration::from_secs(3), "Redis to expire the key", || {
        int(&mut c, &["EXISTS", "expiring"]) == 0
    });
    assert!(acquire(&mut c, "expiring", "b", 100).unwrap().is_some(), "an expiry is no forgetting");
    assert_eq!(info_stat(&mut c, "locks_removed"), 0);
    assert_eq!(info_stat(&mut c, "quarantined_keys"), 0);
    assert_eq!(info_stat(&mut c, "quarantined"), 0);
}

#[test]
fn locks_restored_from_disk_are_watched_from_the_start() {
    let mut s = Server::with(Opts::new().aof_always().module_arg("clock-jump-tolerance-ms", "0"));
    let mut c = s.conn();
    acquire(&mut c, "k", "a", 10_000).unwrap().unwrap();
    s.kill_and_restart();
    let mut c = s.conn();
    assert!(is_held(&mut c, "k"), "restored");
    // This process never wrote it: the floor covers it (the longest TTL).
    let _: i64 = cmd("DEL").arg("k").query(&mut c).unwrap();
    let e = err_text(cmd("LOCK.ACQUIRE").arg("k").arg("b").arg(100).query(&mut c));
    assert!(e.starts_with("QUARANTINE") && e.contains("(del)"), "{e}");
    let left = quarantine_left(&e);
    assert!(left > 25_000 && left <= 31_000, "until the longest TTL from the restart: {left}");
}

#[test]
fn turning_the_removal_quarantine_off_ends_those_in_force() {
    let s = Server::start();
    let mut c = s.conn();
    acquire(&mut c, "k", "a", 30_000).unwrap().unwrap();
    let _: i64 = cmd("DEL").arg("k").query(&mut c).unwrap();
    let _: () = cmd("FLUSHDB").query(&mut c).unwrap();
    assert!(err_text(cmd("LOCK.ACQUIRE").arg("k").arg("b").arg(100).query(&mut c)).starts_with("QUARANTINE"));
    let _: () = cmd("CONFIG").arg("SET").arg("lock.removal-quarantine").arg("no").query(&mut c).unwrap();
    assert!(acquire(&mut c, "k", "b", 30_000).unwrap().is_some());
    assert_eq!(info_stat(&mut c, "removal_quarantine"), 0);
    let _: i64 = cmd("DEL").arg("k").query(&mut c).unwrap();
    assert!(acquire(&mut c, "k", "c", 100).unwrap().is_some(), "off: a DEL frees the key");
    assert!(s.log().contains("lock.removal-quarantine no"), "{}", s.log());
}

#[test]
fn lock_info_is_nil_only_when_a_new_grant_would_be_made_now() {
    let s = Server::with(Opts::new().module_arg("quarantine-ms", "3000"));
    let mut c = s.conn();
    let (code, left) = refusal(&mut c, "k").expect("refused in the start-up quarantine");
    assert_eq!(code, "startup");
    assert!(left > 0 && left <= 3_000, "{left}");
    let _: () = cmd("CONFIG").arg("SET").arg("lock.quarantine-ms").arg(0).query(&mut c).unwrap();
    assert!(lock_info(&mut c, "k").is_none(), "grantable: nil");
    // A waiter for a set at the head of a free key's queue: a newcomer is
    // refused that key, and LOCK.INFO says so.
    acquire(&mut c, "{s}b", "holder", 5_000).unwrap().unwrap();
    let mut w = s.conn();
    w.send_packed_command(
        &cmd("LOCK.MACQUIRE")
            .arg("set")
            .arg(1000)
            .arg(2)
            .arg("{s}a")
            .arg("{s}b")
            .arg("WAIT")
            .arg(0)
            .get_packed_command(),
    )
    .unwrap();
    wait_until(Duration::from_secs(2), "set waiter queued", || info_stat(&mut c, "waiters") == 1);
    assert_eq!(acquire(&mut c, "{s}a", "newcomer", 100).unwrap(), None, "no barging");
    assert_eq!(refusal(&mut c, "{s}a"), Some(("queued".into(), -1)));
    assert_eq!(int(&mut c, &["LOCK.RELEASE", "{s}b", "holder"]), 1);
    assert!(matches!(w.recv_response().unwrap(), Value::Int(_)));
    assert!(is_held(&mut c, "{s}a"));
    sleep(Duration::from_millis(1));
}
