//! The quorum client through Sentinel-managed members: a master with two
//! replicas and three Sentinel processes (the test kit's
//! [`SentinelGroup`]), the module on every data node. The member finds its
//! master through the Sentinels, takes, fences, extends and releases
//! there, follows a failover after a SIGKILL of the master, never gives a
//! lock to two holders meanwhile, and grants again once the promoted
//! master's quarantine is over. The same member over TLS
//! (`rediss+sentinel://`: the Sentinels and the data nodes on TLS ports)
//! where the server under test has TLS (Redis 7.0 of the matrix).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lock_testkit_client::*;
use redlock_client::{Config, Mode, Redlock, Tls};

const QUARANTINE_MS: u64 = 2_000;

fn config() -> Config {
    Config { command_timeout: Duration::from_millis(500), ..test_config() }
}

/// Data nodes as production runs them: `appendfsync always` (no start-up
/// quarantine), and a short failover quarantine.
fn opts() -> Opts {
    Opts::new().aof_always().module_arg("quarantine-ms", &QUARANTINE_MS.to_string())
}

/// Takes, fences and extends a lock through `rl` (`group`'s first master
/// as its one member), checks that the master holds it, releases it and
/// checks that it is free there; then that `status()` names the master at
/// `port` (its address as the Sentinels give it) and every Sentinel.
async fn take_fence_extend_release(group: &SentinelGroup, rl: &Redlock, port: u16) {
    let guard = rl.try_acquire("orders", Mode::Plain, Duration::from_secs(10)).await.expect("acquire");
    let token = guard.fencing_token().await.expect("fence");
    assert!(token > 0);
    guard.extend(Duration::from_secs(10)).await.expect("extend");
    assert_eq!(holder(&group.nodes[0], "orders").as_deref(), Some(guard.token()), "held on the master");
    guard.release().await.expect("release");
    assert_eq!(holder(&group.nodes[0], "orders"), None);
    let status = rl.status().await;
    let node = &status.members[0].nodes[0].node;
    assert!(
        node.contains(&format!("127.0.0.1:{port}")) && node.contains("by 3 of 3 Sentinels"),
        "status names the master and the Sentinels reached: {node}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sentinel_member_takes_fences_extends_and_releases_on_its_master() {
    let group = SentinelGroup::start(opts(), 2, 3);
    let rl = Redlock::connect([group.url()], config()).await.expect("connect");
    take_fence_extend_release(&group, &rl, group.nodes[0].port).await;
    // A master name no Sentinel monitors: the member's "no", with why.
    let unknown = group.url().replace("/locks?", "/nosuch?");
    let other = Redlock::connect([unknown], config()).await.expect("connect");
    let refused =
        other.try_acquire("orders", Mode::Plain, Duration::from_secs(1)).await.expect_err("no master");
    assert!(refused.to_string().contains("monitors no master named \"nosuch\""), "{refused}");
    rl.settle().await;
    other.settle().await;
}

/// A `rediss+sentinel://` member: the Sentinels and the data nodes with
/// TLS ports, the Sentinels reaching the nodes and each other over TLS
/// (`tls-replication yes`), so that they name the master's TLS port; the
/// client trusts the test CA and reaches the Sentinels and the master by
/// IP address over TLS.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sentinel_member_over_tls_takes_fences_extends_and_releases() {
    if !tls_or_skip("a_sentinel_member_over_tls_takes_fences_extends_and_releases") {
        return;
    }
    let group = SentinelGroup::with(SentinelSpec::new(opts(), 1, 3).tls(TlsPort::new("server", false)));
    let url = group.tls_url_of(0, "127.0.0.1");
    assert!(url.starts_with("rediss+sentinel://"), "{url}");
    let tls = Tls { ca_file: Some(certs().crt("ca")), ..Tls::default() };
    let rl = Redlock::connect([url], Config { tls, ..config() }).await.expect("connect over TLS");
    let port = group.nodes[0].tls_port.expect("a TLS port");
    take_fence_extend_release(&group, &rl, port).await;
    rl.settle().await;
}

/// What the contenders saw.
#[derive(Default)]
struct Seen {
    grants: usize,
    /// Quorum fencing tokens in grant order.
    tokens: Vec<u64>,
    overlaps: usize,
}

/// Many tasks contend for one key over [the Sentinel member, two masters]
/// while the Sentinel member's master is killed (SIGKILL) and a replica is
/// promoted: never two holders at once, every fencing token above the one
/// before, and the member grants again within the failover's time plus the
/// quarantine.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failover_under_load_never_gives_a_lock_twice_and_the_member_comes_back() {
    let mut group = SentinelGroup::start(opts(), 2, 3);
    let masters = [Server::with(opts()), Server::with(opts())];
    let members = vec![group.url(), masters[0].url(), masters[1].url()];
    let holders = Arc::new(AtomicUsize::new(0));
    let seen = Arc::new(Mutex::new(Seen::default()));
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for _ in 0..16 {
        let (members, holders, seen, stop) = (members.clone(), holders.clone(), seen.clone(), stop.clone());
        tasks.push(tokio::spawn(async move {
            let rl = Redlock::connect(members, config()).await.expect("connect");
            while !stop.load(Ordering::Relaxed) {
                let Ok(guard) = rl.try_acquire("job", Mode::Plain, Duration::from_secs(2)).await else {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                };
                let Ok(token) = guard.fencing_token().await else {
                    let _ = guard.release().await;
                    continue;
                };
                let overlapping = holders.fetch_add(1, Ordering::SeqCst) > 0;
                {
                    let mut seen = seen.lock().unwrap();
                    seen.grants += 1;
                    seen.overlaps += usize::from(overlapping);
                    seen.tokens.push(token);
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
                holders.fetch_sub(1, Ordering::SeqCst);
                let _ = guard.release().await;
            }
            rl.settle().await;
        }));
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = seen.lock().unwrap().grants;
    assert!(before > 0, "grants before the kill");
    let (promoted, failover) = tokio::task::block_in_place(|| group.kill_master_and_wait_failover());
    let killed_at = Instant::now() - failover;
    // The member alone: back once the promoted master's quarantine is over.
    let alone = Redlock::connect([group.url()], config()).await.expect("connect");
    let back = loop {
        if let Ok(guard) = alone.try_acquire("probe", Mode::Plain, Duration::from_secs(2)).await {
            let _ = guard.release().await;
            break killed_at.elapsed();
        }
        assert!(killed_at.elapsed() < Duration::from_secs(60), "the member never granted again");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.store(true, Ordering::Relaxed);
    for task in tasks {
        task.await.expect("a contender panicked");
    }
    alone.settle().await;
    let seen = seen.lock().unwrap();
    eprintln!(
        "sentinel failover: {} grants ({} before the kill), master {} -> {}, failover {:?}, the member \
         granted again {:?} after the kill (lock.quarantine-ms {QUARANTINE_MS})",
        seen.grants, before, group.nodes[0].port, group.nodes[promoted].port, failover, back
    );
    assert_eq!(seen.overlaps, 0, "two holders at once");
    let mut sorted = seen.tokens.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(sorted.len(), seen.tokens.len(), "a fencing token was given twice");
    assert!(
        seen.tokens.windows(2).all(|w| w[0] < w[1]) || seen.tokens.len() < 2,
        "tokens rise in grant order"
    );
    assert!(seen.grants > before, "grants after the failover too");
    assert!(
        back <= failover + Duration::from_millis(QUARANTINE_MS) + Duration::from_secs(10),
        "back after {back:?}: failover {failover:?} + quarantine {QUARANTINE_MS} ms"
    );
    assert_ne!(group.master_index(), Some(0), "the Sentinels name the promoted replica");
}
