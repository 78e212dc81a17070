//! The test kit (all of `lock_testkit`, re-exported: a test says `use
//! lock_testkit_client::*;`) and the quorum client over its servers.

use std::time::Duration;

pub use lock_testkit::*;
use redlock_client::{Config, Redlock};

/// Timeouts for tests: short enough that a dead node costs little, long
/// enough for a loaded 2-core machine running five servers.
pub fn test_config() -> Config {
    Config {
        connect_timeout: Duration::from_millis(300),
        command_timeout: Duration::from_millis(200),
        reconnect_backoff: Duration::from_millis(50),
        ..Config::default()
    }
}

/// A quorum client over `servers`, with [`test_config`].
pub async fn redlock(servers: &[Server]) -> Redlock {
    Redlock::connect(urls(servers), test_config()).await.expect("connect")
}
