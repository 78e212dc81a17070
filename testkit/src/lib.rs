//! The test kit: real `redis-server` processes with the module loaded, for
//! the module's tests (`tests/`), the client's tests (`client/tests/`), the
//! fault suite (`faults/`) and the benchmarks (`examples/`,
//! `client/examples/`).
//!
//! Every server gets a free loopback port, its own temporary directory and a
//! log file there; every wait has a deadline; every process is killed by PID
//! when its [`Server`] is dropped, also when the test panics.
//!
//! The server binary is `$LOCK_SERVER_BIN` (default `redis-server` on the
//! PATH), so the same tests run on Redis 7.0, Redis 8.2 and Valkey 9.1
//! (`scripts/test` runs them on each). A failing test names the server it
//! ran against. The module is `$LOCK_MODULE_SO`, or else built once per
//! test binary.
//!
//! A Redis Cluster of such servers (S shards of a master and R replicas),
//! and the faults done to it, is [`RedisCluster`].
//!
//! Everything is exported at the top: a test says `use lock_testkit::*;`.
//! The quorum client over these servers is in `lock-testkit-client`
//! (`testkit-client/`), so that the module's tests do not depend on it.

mod binary;
mod built;
mod clock;
mod dirs;
mod forget;
mod nodes;
mod ports;
mod rediscluster;
mod replies;
mod sentinel;
mod server;
mod tls;
mod wait;

pub use binary::{server_bin, server_name, server_version};
pub use built::{clock_shim_path, module_path, outside_cargo_test, repo_dir, target_dir};
pub use clock::ClockFile;
pub use dirs::{fresh_dir, TempDir};
pub use forget::{
    assert_quarantined_until, granted_after_deadline, quarantine_left, select, wall_ms, Forget, HeldLock,
    Target, AFTER_TTL_MS, FORGET_DATABASES, PARTNER_DB_OFFSET, QUARANTINE_SLACK_MS,
};
pub use nodes::{
    all, assert_free, calls, checks, cluster, fence_calls, holder, holders, seed, start_all, urls,
};
pub use ports::free_port;
pub use redis::{cmd, Connection, Value};
pub use rediscluster::{cluster_info, keyslot, role, ClusterSpec, RedisCluster, CLUSTER_DEADLINE};
pub use replies::{
    command_calls, err_text, holders_in, info_field, info_int, info_stat, int, is_held, lock_info,
    lock_snapshot, refusal, refused_code, run, stored_bytes, LockSnapshot,
};
pub use sentinel::{
    master_name, SentinelGroup, SentinelProcess, SentinelSpec, DOWN_AFTER_MS, SENTINEL_MASTER,
};
pub use server::{fast_sync, replicate, replicate_to, rewrite_aof, server_clock_ms, Opts, Server};
pub use tls::{certs, tls_or_skip, tls_support, Certs, TlsPort};
pub use wait::wait_until;
