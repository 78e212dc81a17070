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
    let text: String = redis::cmd("INFO").arg("commandstats").query(&mut server.conn()).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix("cmdstat_lock.fence:calls="))
        .and_then(|rest| rest.split(',').next())
        .map_or(0, |n| n.parse().unwrap())
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
