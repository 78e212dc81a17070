//! Helpers shared by the client's integration tests (on top of the module's
//! harness, `tests/common/mod.rs`, which each test file includes as
//! `common`).
#![allow(dead_code)]

use std::time::Duration;

use redlock_client::{Config, Redlock};

use crate::common::{lock_info, Opts, Server};

/// Timeouts for tests: short enough that a dead node costs little, long
/// enough for a loaded 2-core machine running five servers.
pub fn test_config() -> Config {
    Config {
        connect_timeout: Duration::from_millis(300),
        command_timeout: Duration::from_millis(200),
        reconnect_backoff: Duration::from_millis(50),
    }
}

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

pub async fn redlock(servers: &[Server]) -> Redlock {
    Redlock::connect(urls(servers), test_config()).await.expect("connect")
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

/// The holders in one `LOCK.INFO` reply (see [`holders`]).
pub fn holders_in(reply: &redis::Value) -> Vec<(String, i64)> {
    fn fields(items: &[redis::Value]) -> Vec<(String, redis::Value)> {
        items.chunks(2).map(|p| (redis::from_redis_value(&p[0]).unwrap(), p[1].clone())).collect()
    }
    fn holder(fields: &[(String, redis::Value)]) -> Option<(String, i64)> {
        let get = |name: &str| fields.iter().find(|(n, _)| n == name).map(|(_, v)| v.clone());
        let who: String = redis::from_redis_value(&get("holder")?).unwrap();
        Some((who, redis::from_redis_value(&get("fence")?).unwrap()))
    }
    let redis::Value::Array(items) = reply else { return Vec::new() };
    let top = fields(items);
    match top.iter().find(|(name, _)| name == "holders") {
        Some((_, redis::Value::Array(entries))) => entries
            .iter()
            .filter_map(|e| match e {
                redis::Value::Array(items) => holder(&fields(items)),
                _ => None,
            })
            .collect(),
        _ => holder(&top).into_iter().collect(),
    }
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
