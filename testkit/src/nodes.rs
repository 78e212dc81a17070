//! Several servers, and what one node holds, seen from outside (the
//! client's tests and the fault suite look at each node by itself).

use crate::replies::{holders_in, lock_info};
use crate::server::{Opts, Server};

/// Starts `opts.len()` servers in parallel (each start waits for PING).
pub fn start_all(opts: Vec<Opts>) -> Vec<Server> {
    std::thread::scope(|scope| {
        let starting: Vec<_> = opts.into_iter().map(|o| scope.spawn(move || Server::with(o))).collect();
        starting.into_iter().map(|h| h.join().expect("server start")).collect()
    })
}

/// `n` plain servers.
pub fn cluster(n: usize) -> Vec<Server> {
    start_all((0..n).map(|_| Opts::new()).collect())
}

pub fn urls(servers: &[Server]) -> Vec<String> {
    servers.iter().map(|s| s.url()).collect()
}

/// The holder of `key` on `server`, or None when it holds no lock.
pub fn holder(server: &Server, key: &str) -> Option<String> {
    let mut c = server.conn();
    let fields = lock_info(&mut c, key)?;
    fields.iter().find(|(name, _)| name == "holder").map(|(_, v)| redis::from_redis_value(v).unwrap())
}

/// Asserts that no server in `servers` holds a lock on `key`.
pub fn assert_free(servers: &[&Server], key: &str) {
    for server in servers {
        assert_eq!(holder(server, key), None, "'{key}' is still locked on port {}", server.port);
    }
}

/// `calls` of LOCK.FENCE on one node (`INFO commandstats`).
pub fn fence_calls(server: &Server) -> i64 {
    calls(server, "lock.fence")
}

pub fn all(servers: &[Server]) -> Vec<&Server> {
    servers.iter().collect()
}

/// A seed from $REDLOCK_TEST_SEED or the clock, printed so a failing run
/// can be replayed.
pub fn seed() -> u64 {
    let seed = std::env::var("REDLOCK_TEST_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64
    });
    eprintln!("seed: {seed} (replay with REDLOCK_TEST_SEED={seed})");
    seed
}

/// Every holder of `key` on `server` with its fencing token: the plain
/// lock's one, or each holder of a read-write lock; empty when free.
pub fn holders(server: &Server, key: &str) -> Vec<(String, i64)> {
    let reply: redis::Value = redis::cmd("LOCK.INFO").arg(key).query(&mut server.conn()).expect("LOCK.INFO");
    holders_in(&reply)
}

/// `LOCK.CHECK key fence` on one node: is `fence` the key's live grant.
pub fn checks(server: &Server, key: &str, fence: u64) -> bool {
    let reply: i64 = redis::cmd("LOCK.CHECK").arg(key).arg(fence).query(&mut server.conn()).unwrap();
    reply == 1
}

/// `calls` of one command on one node (`INFO commandstats`), e.g.
/// `lock.macquire`.
pub fn calls(server: &Server, command: &str) -> i64 {
    let text: String = redis::cmd("INFO").arg("commandstats").query(&mut server.conn()).unwrap();
    let prefix = format!("cmdstat_{command}:calls=");
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|rest| rest.split(',').next())
        .map_or(0, |n| n.parse().unwrap())
}
