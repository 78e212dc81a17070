//! Upgrade: locks stored by the previous release still work.
//!
//! The previous release stored every lock as one string, replicated and
//! appended to the AOF as `SET key value PXAT backstop` (a shared lock or a
//! semaphore listed all its holders in that string). Each test writes those
//! exact commands into a server that does not load the module, has that
//! server persist them (AOF with fsync always, or an RDB snapshot), and
//! restarts it from its files with this release loaded: every holder, token
//! and deadline must be there, the module must go on from them, and the
//! first write must turn a shared lock or semaphore into this release's hash,
//! replicated exactly.

use std::time::{SystemTime, UNIX_EPOCH};

use lock_testkit::{
    cmd, fast_sync, int, lock_info, replicate, stored_bytes, Connection, Opts, Server, Value,
};

fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as i64
}

/// What the previous release wrote for each kind, with deadlines 20 s ahead
/// (the second reader's 5 s later, so that a conversion that mixes up
/// holders' deadlines shows) and tokens from 2036, far above this node's
/// clock-derived counter.
struct Old {
    deadline: i64,
}

/// How much later than the others the second reader's deadline is.
const R2_LATER_MS: i64 = 5_000;

const PLAIN_FENCE: i64 = 2_100_000_000_000_001;
const READER_FENCES: [i64; 2] = [2_100_000_000_000_002, 2_100_000_000_000_003];
const PERMIT_FENCE: i64 = 2_100_000_000_000_004;

impl Old {
    fn new() -> Old {
        Old { deadline: now_ms() + 20_000 }
    }

    fn values(&self) -> Vec<(&'static str, String)> {
        let d = self.deadline;
        let d2 = d + R2_LATER_MS;
        let [r1, r2] = READER_FENCES;
        vec![
            ("plain", format!("LK1|P|{PLAIN_FENCE}|{d}|1|owner-p")),
            ("rw", format!("LK1|S|0|2|r|{r1}|{d}|2|r1|r|{r2}|{d2}|2|r2|")),
            ("sem", format!("LK1|M|3|1|p|{PERMIT_FENCE}|{d}|8|permit-a|")),
        ]
    }

    /// Writes them as the previous release replicated them.
    fn write(&self, c: &mut Connection) {
        let backstop = self.deadline + 60_000;
        for (key, value) in self.values() {
            let _: () = cmd("SET").arg(key).arg(value).arg("PXAT").arg(backstop).query(c).unwrap();
        }
    }
}

fn info_field(c: &mut Connection, key: &str, field: &str) -> Value {
    let info = lock_info(c, key).unwrap_or_else(|| panic!("{key} is not held"));
    info.into_iter().find(|(n, _)| n == field).map(|(_, v)| v).unwrap()
}

/// (holder, fence, deadline) of every live holder of a shared lock or
/// semaphore, from LOCK.INFO.
fn holders(c: &mut Connection, key: &str) -> Vec<(String, i64, i64)> {
    let Value::Array(items) = info_field(c, key, "holders") else { panic!("no holder list") };
    let mut out: Vec<(String, i64, i64)> = items
        .iter()
        .map(|item| {
            let Value::Array(pairs) = item else { panic!() };
            let get = |name: &str| {
                let at =
                    pairs.chunks(2).position(|p| redis::from_redis_value::<String>(&p[0]).unwrap() == name);
                pairs[at.unwrap() * 2 + 1].clone()
            };
            (
                redis::from_redis_value(&get("holder")).unwrap(),
                redis::from_redis_value(&get("fence")).unwrap(),
                redis::from_redis_value(&get("deadline-ms")).unwrap(),
            )
        })
        .collect();
    out.sort();
    out
}

/// Starts a plain Redis, has it persist the old values through `persist`,
/// and restarts it from its files with this release's module loaded.
fn restarted_with_the_module(opts: Opts, persist: impl FnOnce(&mut Connection), old: &Old) -> Server {
    let mut server = Server::with(Opts { without_module: true, ..opts });
    let mut c = server.conn();
    old.write(&mut c);
    persist(&mut c);
    server.kill();
    server.opts.without_module = false;
    server.restart();
    server
}

fn check_upgraded(server: &Server, old: &Old) {
    let mut c = server.conn();
    // Read as they were.
    assert_eq!(int(&mut c, &["LOCK.CHECK", "plain", &PLAIN_FENCE.to_string()]), 1);
    assert_eq!(redis::from_redis_value::<String>(&info_field(&mut c, "plain", "holder")).unwrap(), "owner-p");
    let [r1, r2] = READER_FENCES;
    let readers =
        vec![("r1".to_string(), r1, old.deadline), ("r2".to_string(), r2, old.deadline + R2_LATER_MS)];
    assert_eq!(holders(&mut c, "rw"), readers);
    assert_eq!(holders(&mut c, "sem"), vec![("permit-a".to_string(), PERMIT_FENCE, old.deadline)]);
    let kind: String = cmd("TYPE").arg("rw").query(&mut c).unwrap();
    assert_eq!(kind, "string", "reading does not convert");

    // The first write converts, keeping every holder with its token and its
    // own deadline; new tokens rise above the stored ones.
    let before_r3 = now_ms();
    let r3 = int(&mut c, &["LOCK.SHARED", "rw", "r3", "20000"]);
    assert!(r3 > r2, "{r3} after {r2}");
    let kind: String = cmd("TYPE").arg("rw").query(&mut c).unwrap();
    assert_eq!(kind, "hash");
    let seen = holders(&mut c, "rw");
    let (old_seen, new_seen) = seen.split_at(2);
    assert_eq!(old_seen, readers.as_slice(), "the old holders, tokens and deadlines");
    let [(name, fence, deadline)] = new_seen else { panic!("{seen:?}") };
    assert_eq!((name.as_str(), *fence), ("r3", r3));
    // Its own 20 s on the module clock (within a second of the wall clock).
    assert!((before_r3 + 19_000..now_ms() + 21_000).contains(deadline), "r3's deadline: {deadline}");
    assert_eq!(int(&mut c, &["LOCK.RELEASE", "rw", "r1"]), 1);
    assert_eq!(int(&mut c, &["LOCK.CHECK", "rw", &r2.to_string()]), 1);
    assert!(int(&mut c, &["LOCK.SEMAPHORE", "sem", "permit-b", "3", "20000"]) > PERMIT_FENCE);
    let permits = holders(&mut c, "sem");
    assert_eq!(permits.len(), 2);
    assert_eq!(permits[0], ("permit-a".to_string(), PERMIT_FENCE, old.deadline), "kept by the conversion");
    assert_eq!(int(&mut c, &["LOCK.RELEASE", "sem", "permit-a"]), 1);
    assert_eq!(holders(&mut c, "sem").len(), 1);
    assert_eq!(int(&mut c, &["LOCK.EXTEND", "plain", "owner-p", "20000"]), 1);
    assert_eq!(int(&mut c, &["LOCK.RELEASE", "plain", "owner-p"]), 1);
    assert!(int(&mut c, &["LOCK.ACQUIRE", "plain", "next", "20000"]) > PLAIN_FENCE);
}

#[test]
fn locks_in_the_previous_form_survive_an_aof_restart() {
    let old = Old::new();
    let server = restarted_with_the_module(Opts::new().aof_always(), |_| {}, &old);
    check_upgraded(&server, &old);
}

#[test]
fn locks_in_the_previous_form_survive_an_rdb_restart() {
    let old = Old::new();
    let server = restarted_with_the_module(
        Opts::new(),
        |c| {
            let _: () = cmd("SAVE").query(c).unwrap();
        },
        &old,
    );
    check_upgraded(&server, &old);
}

#[test]
fn the_conversion_is_replicated_exactly() {
    let old = Old::new();
    let master = Server::with(fast_sync());
    let replica = Server::start();
    replicate(&replica, &master);
    let mut m = master.conn();
    old.write(&mut m);
    let [_, r2] = READER_FENCES;
    // A write that changes a holder: r2 extends.
    assert_eq!(int(&mut m, &["LOCK.EXTEND", "rw", "r2", "15000"]), 1);
    assert_eq!(int(&mut m, &["LOCK.CHECK", "rw", &r2.to_string()]), 1);
    let acked: i64 = cmd("WAIT").arg(1).arg(5_000).query(&mut m).unwrap();
    assert_eq!(acked, 1);
    let mut r = replica.conn();
    for key in ["rw", "sem", "plain"] {
        let dump = |c: &mut Connection| -> (String, Option<Vec<u8>>, i64) {
            let kind: String = cmd("TYPE").arg(key).query(c).unwrap();
            let expiry: i64 = cmd("PEXPIRETIME").arg(key).query(c).unwrap();
            (kind, stored_bytes(c, key), expiry)
        };
        let on_master = dump(&mut m);
        assert_eq!(on_master, dump(&mut r), "{key} on the replica");
        if key == "rw" {
            assert_eq!(on_master.0, "hash");
            assert!(on_master.2 >= old.deadline + 60_000, "the backstop never moves earlier");
        }
    }
    let [r1, _] = READER_FENCES;
    let on_replica: Vec<(String, i64)> = holders(&mut r, "rw").into_iter().map(|(h, f, _)| (h, f)).collect();
    assert_eq!(on_replica, vec![("r1".to_string(), r1), ("r2".to_string(), r2)], "every holder was kept");
    let r1_on_replica = holders(&mut r, "rw").into_iter().find(|(h, ..)| h == "r1").map(|(_, _, d)| d);
    assert_eq!(r1_on_replica, Some(old.deadline), "r1's deadline is the one it was granted");
}
