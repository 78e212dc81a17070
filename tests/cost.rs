//! Cost that stays flat as a lock gets busy (docs/evidence.md): the bytes a
//! grant, renewal or release replicates (and appends to the AOF) do not grow
//! with the number of holders. Bytes, unlike time, are exact: measured as the
//! growth of `master_repl_offset` on a master with a replica attached.
//! Server time per call is measured by `scripts/bench-scaling`, not here.

use lock_testkit::{cmd, fast_sync, replicate, Connection, Server};

/// The replication offset: every byte the master sent to its replicas.
fn repl_offset(c: &mut Connection) -> i64 {
    let text: String = cmd("INFO").arg("replication").query(c).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix("master_repl_offset:"))
        .expect("master_repl_offset")
        .trim()
        .parse()
        .unwrap()
}

/// Tokens of equal length, so that every call carries the same bytes.
fn token(i: usize) -> String {
    format!("holder-{i:06}")
}

/// Average replicated bytes of `calls` run one after another.
fn bytes_per_call(c: &mut Connection, calls: impl IntoIterator<Item = redis::Cmd>) -> f64 {
    let before = repl_offset(c);
    let mut n = 0;
    for command in calls {
        let _: redis::Value = command.query(c).unwrap();
        n += 1;
    }
    (repl_offset(c) - before) as f64 / f64::from(n)
}

/// How a kind of lock is granted: key, token -> the command.
type GrantCmd = dyn Fn(&str, &str) -> redis::Cmd;

/// Grants, renewals and releases with `holders` others holding the lock.
fn costs_with(c: &mut Connection, key: &str, holders: usize, grant: &GrantCmd) -> [f64; 3] {
    for i in 0..holders {
        let _: i64 = grant(key, &token(i)).query(c).unwrap();
    }
    let newcomers: Vec<String> = (900_000..900_020).map(token).collect();
    let granted = bytes_per_call(c, newcomers.iter().map(|t| grant(key, t)));
    let renewed =
        bytes_per_call(c, newcomers.iter().map(|t| cmd("LOCK.EXTEND").arg(key).arg(t).arg(20_000).clone()));
    let released = bytes_per_call(c, newcomers.iter().map(|t| cmd("LOCK.RELEASE").arg(key).arg(t).clone()));
    [granted, renewed, released]
}

#[test]
fn replicated_bytes_per_call_do_not_grow_with_holders() {
    let master = Server::with(fast_sync());
    let replica = Server::start();
    replicate(&replica, &master);
    let mut c = master.conn();
    let kinds: [(&str, &GrantCmd); 2] = [
        ("readers", &|key, t| cmd("LOCK.SHARED").arg(key).arg(t).arg(20_000).clone()),
        ("permits", &|key, t| cmd("LOCK.SEMAPHORE").arg(key).arg(t).arg(1_000).arg(20_000).clone()),
    ];
    for (what, grant) in kinds {
        // 980 holders, plus the 20 measured newcomers: 1000 at the most.
        let few = costs_with(&mut c, &format!("{what}:few"), 1, grant);
        let many = costs_with(&mut c, &format!("{what}:many"), 980, grant);
        eprintln!(
            "{what}: bytes per grant / extend / release with 1 holder {few:?}, with 980 holders {many:?}"
        );
        for (op, (a, b)) in ["grant", "extend", "release"].iter().zip(few.iter().zip(many.iter())) {
            assert!(*a > 0.0 && *b > 0.0, "{what} {op}: nothing replicated?");
            assert!(b / a <= 2.0, "{what}: a {op} replicates {b} bytes with 980 holders, {a} with 1");
        }
    }
}
