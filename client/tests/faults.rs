//! Faults between the client and the nodes: lost and delayed replies (a TCP
//! proxy in front of real nodes), quarantined nodes, and the watchdog
//! noticing a lost majority.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use lock_testkit_client::*;
use redlock_client::{Error, Lost, Mode, Phase, Redlock, RetryPolicy, Status, Watchdog};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::time::Instant;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// A TCP proxy in front of one node. It can drop the next reply and cut
/// the connection (the node did the work, the client never hears of it),
/// or delay requests (in order) on their way to the node.
struct Proxy {
    port: u16,
    drop_next_reply: Arc<AtomicBool>,
    request_delay_ms: Arc<AtomicU64>,
    accept: tokio::task::JoinHandle<()>,
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

impl Proxy {
    async fn start(upstream: u16) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let drop_next_reply = Arc::new(AtomicBool::new(false));
        let request_delay_ms = Arc::new(AtomicU64::new(0));
        let (drop_flag, delay) = (drop_next_reply.clone(), request_delay_ms.clone());
        let accept = tokio::spawn(async move {
            let mut connections = Vec::new();
            while let Ok((client, _)) = listener.accept().await {
                connections.push(tokio::spawn(pipe(client, upstream, drop_flag.clone(), delay.clone())));
                connections.retain(|c| !c.is_finished());
            }
        });
        Proxy { port, drop_next_reply, request_delay_ms, accept }
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }
}

async fn pipe(client: TcpStream, upstream: u16, drop_next_reply: Arc<AtomicBool>, delay_ms: Arc<AtomicU64>) {
    let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)).await else { return };
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    // Requests go through a queue so that a delay keeps their order.
    let (queue, mut queued) = mpsc::unbounded_channel::<(Instant, Vec<u8>)>();
    let writer = tokio::spawn(async move {
        while let Some((at, bytes)) = queued.recv().await {
            tokio::time::sleep_until(at).await;
            if server_write.write_all(&bytes).await.is_err() {
                return;
            }
        }
    });
    let requests = async {
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            match client_read.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    let at = Instant::now() + ms(delay_ms.load(Ordering::SeqCst));
                    if queue.send((at, buf[..n].to_vec())).is_err() {
                        return;
                    }
                }
            }
        }
    };
    let replies = async {
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            match server_read.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    if drop_next_reply.swap(false, Ordering::SeqCst) {
                        return; // cut: both sockets close when this task ends
                    }
                    if client_write.write_all(&buf[..n]).await.is_err() {
                        return;
                    }
                }
            }
        }
    };
    tokio::select! {
        _ = requests => {}
        _ = replies => {}
    }
    // Let queued requests reach the node before closing (they were sent).
    drop(queue);
    let _ = tokio::time::timeout(Duration::from_secs(5), writer).await;
}

/// A node grants, but its reply is lost with the connection: the client
/// counts it as no answer, still releases there, and a retry succeeds.
/// Then requests are delayed past the timeout: the release is queued behind
/// the late acquire on the same connection and cannot overtake it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_and_late_replies_leave_no_lock_behind() {
    let servers = cluster(5);
    let mut proxies = Vec::new();
    for server in &servers[2..] {
        proxies.push(Proxy::start(server.port).await);
    }
    let mut nodes = vec![servers[0].url(), servers[1].url()];
    nodes.extend(proxies.iter().map(|p| p.url()));
    let rl = Redlock::connect(nodes, test_config()).await.unwrap();
    let grants = |i: usize| info_stat(&mut servers[i].conn(), "grants");
    let releases = |i: usize| info_stat(&mut servers[i].conn(), "releases");

    // One reply lost: 4 of 5 is a quorum; the release reaches all 5. The
    // acquire returns at the majority: node 4's grant has landed by the time
    // the other calls of the round have ended.
    proxies[2].drop_next_reply.store(true, Ordering::SeqCst);
    let guard = rl.try_acquire("lost-reply", Mode::Plain, ms(3_000)).await.expect("4 of 5 grant");
    rl.settle().await;
    assert_eq!(holder(&servers[4], "lost-reply").as_deref(), Some(guard.token()), "node 4 did grant");
    // The guard's release returns at the majority; the rest land in the
    // background, and settle() waits for them.
    let tally = guard.release().await.expect("release");
    assert!(tally.yes >= 3 && tally.yes + tally.pending() == 5, "{tally:?}");
    rl.settle().await;
    assert_free(&all(&servers), "lost-reply");

    // Three replies lost: no quorum; released everywhere; a retry works.
    let before: Vec<i64> = (0..5).map(grants).collect();
    for proxy in &proxies {
        proxy.drop_next_reply.store(true, Ordering::SeqCst);
    }
    let error = rl.try_acquire("lost-reply", Mode::Plain, ms(3_000)).await.expect_err("3 replies lost");
    let text = error.to_string();
    assert!(
        text.starts_with("no quorum for 'lost-reply': 2 of 5 granted (need 3); 3 unreachable (first: "),
        "{text}"
    );
    for (i, before) in before.iter().enumerate() {
        assert_eq!(grants(i), before + 1, "node {i} granted");
    }
    assert_free(&all(&servers), "lost-reply");
    let guard = rl.try_acquire("lost-reply", Mode::Plain, ms(3_000)).await.expect("the retry succeeds");
    assert!(guard.release().await.expect("release").yes >= 3);
    rl.settle().await;
    assert_free(&all(&servers), "lost-reply");

    // Requests delayed 500 ms on three nodes (the timeout is 200 ms).
    let (grants_before, releases_before): (Vec<i64>, Vec<i64>) =
        (0..5).map(|i| (grants(i), releases(i))).unzip();
    for proxy in &proxies {
        proxy.request_delay_ms.store(500, Ordering::SeqCst);
    }
    let started = Instant::now();
    let error = rl.try_acquire("late", Mode::Plain, ms(3_000)).await.expect_err("3 nodes late");
    assert!(started.elapsed() < ms(1_000), "bounded by the timeouts: {:?}", started.elapsed());
    assert!(
        matches!(&error, Error::NoQuorum { tally, .. } if tally.timed_out == 3 && tally.yes == 2),
        "{error:?}"
    );
    for proxy in &proxies {
        proxy.request_delay_ms.store(0, Ordering::SeqCst);
    }
    // The late ACQUIREs land, then the RELEASEs queued behind them.
    wait_until(Duration::from_secs(5), "late acquires and releases to land", || {
        (2..5).all(|i| grants(i) == grants_before[i] + 1 && releases(i) == releases_before[i] + 1)
    });
    assert_free(&all(&servers), "late");
    let guard = rl
        .acquire("late", Mode::Plain, ms(3_000), &RetryPolicy::within(Duration::from_secs(3)))
        .await
        .expect("acquire once the late replies are in");
    assert!(guard.release().await.expect("release").yes >= 3);
    rl.settle().await;
    assert_free(&all(&servers), "late");
}

/// Five servers, the fifth behind a [`Proxy`] (to delay its requests), and
/// a client whose per-command timeout (5 s) is above the delays used, so
/// that the fifth node's replies are late, not lost.
async fn five_with_a_slow_fifth() -> (Vec<Server>, Proxy, Redlock) {
    let servers = cluster(5);
    let slow = Proxy::start(servers[4].port).await;
    let mut nodes = urls(&servers[..4]);
    nodes.push(slow.url());
    let config = redlock_client::Config { command_timeout: ms(5_000), ..test_config() };
    let rl = Redlock::connect(nodes, config).await.unwrap();
    (servers, slow, rl)
}

/// Waits until no server in `servers` holds `key`, at most `within`, then
/// asserts it: a round that returned at its majority leaves the other
/// nodes' calls landing just after.
async fn until_free(servers: &[&Server], key: &str, within: Duration) {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline && servers.iter().any(|server| holder(server, key).is_some()) {
        tokio::time::sleep(ms(5)).await;
    }
    assert_free(servers, key);
}

/// One node out of five is 2 s away (its requests are delayed, in order)
/// while the per-command timeout is 5 s: acquire, extend and release return
/// at the majority, well before that node answers, instead of waiting for
/// it. Its commands then land in the order they were issued: the late
/// ACQUIRE grants, the EXTEND and the RELEASE follow it, and nothing stays
/// locked. A failing round still waits for every answer, for exact counts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rounds_return_at_the_majority_and_the_slow_node_is_released_after() {
    const DELAY: Duration = Duration::from_secs(2);
    let (servers, slow, rl) = five_with_a_slow_fifth().await;
    let grants = || info_stat(&mut servers[4].conn(), "grants");
    let releases = || info_stat(&mut servers[4].conn(), "releases");
    let extensions = || info_stat(&mut servers[4].conn(), "extensions");
    let before = (grants(), releases(), extensions());
    // Set once connected: the connection's own setup is not delayed.
    slow.request_delay_ms.store(DELAY.as_millis() as u64, Ordering::SeqCst);

    let fences = || fence_calls(&servers[4]);
    let fences_before = fences();
    let started = Instant::now();
    let guard = rl.try_acquire("early", Mode::Plain, ms(10_000)).await.expect("4 fast nodes grant");
    guard.fencing_token().await.expect("the fencing round on the fast nodes");
    let acquired = started.elapsed();
    assert!(acquired < ms(1_000), "acquire waited for the slow node: {acquired:?}");
    let left = guard.extend(ms(10_000)).await.expect("extend on the 4 fast nodes");
    assert!(left > ms(9_000), "{left:?}");
    let tally = guard.release().await.expect("release on the 4 fast nodes");
    let took = started.elapsed();
    assert!(took < ms(1_000), "acquire + extend + release took {took:?}");
    assert!(tally.yes >= 3 && tally.yes + tally.pending() == 5, "{tally:?}");
    // The fast nodes are free: the round returned at three of them, and
    // the fourth's RELEASE lands just after (waited for, well within the
    // delay). Nothing has reached the slow node yet.
    let fast = [&servers[0], &servers[1], &servers[2], &servers[3]];
    until_free(&fast, "early", ms(1_000)).await;
    assert_eq!((grants(), releases(), extensions()), before, "the slow node already answered");

    // The slow node's ACQUIRE, FENCE, EXTEND and RELEASE arrive in that
    // order: it grants (the late grant of standard Redlock), then releases.
    rl.settle().await;
    let settled = started.elapsed();
    assert!(settled >= DELAY && settled < DELAY + ms(2_000), "settled after {settled:?}");
    assert_eq!(grants(), before.0 + 1, "the late ACQUIRE landed");
    assert_eq!(fences(), fences_before + 1, "the late FENCE landed, behind it");
    assert_eq!(extensions(), before.2 + 1, "the late EXTEND landed, behind it");
    assert_eq!(releases(), before.1 + 1, "the RELEASE landed, behind them");
    assert_free(&all(&servers), "early");

    // A failing round waits for the slow node's answer: exact counts.
    let holder_guard = rl.try_acquire("held", Mode::Plain, ms(10_000)).await.expect("acquire");
    let started = Instant::now();
    let error = rl.try_acquire("held", Mode::Plain, ms(10_000)).await.expect_err("held by the first guard");
    let took = started.elapsed();
    assert_eq!(
        error.to_string(),
        "'held' is held by another owner: 0 of 5 granted (need 3); 5 held by another owner"
    );
    // After the slow node's answer, and its undo (a RELEASE, delayed too).
    assert!(took >= DELAY && took < DELAY * 3, "the failure returned after {took:?}");
    slow.request_delay_ms.store(0, Ordering::SeqCst);
    holder_guard.release().await.expect("release");
    rl.settle().await;
    assert_free(&all(&servers), "held");
}

/// A late node whose own grant carried a higher token than the quorum's:
/// the third node's counter is raised far ahead first (a FENCE of another
/// key), then its requests are delayed, so the round decides at the two
/// others and T is theirs. Its ACQUIRE lands late with its own, higher
/// token, and the FENCE queued behind it records T there too: after the
/// fencing round, `LOCK.CHECK key T` answers 1 on every node that holds
/// the lock, and `Redlock::check` (the CLI's `redlock check`) counts all
/// three.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_quorum_token_checks_on_every_node_also_a_late_one() {
    let servers = cluster(3);
    let late = Proxy::start(servers[2].port).await;
    let mut nodes = urls(&servers[..2]);
    nodes.push(late.url());
    let config = redlock_client::Config { command_timeout: ms(5_000), ..test_config() };
    let rl = Redlock::connect(nodes, config).await.unwrap();

    // The third node's counter 10 minutes ahead of the others' clocks.
    let mut direct = servers[2].conn();
    let bump = int(&mut direct, &["LOCK.ACQUIRE", "bump", "b", "10000"]);
    let ahead = (bump + 600_000_000).to_string();
    assert_eq!(int(&mut direct, &["LOCK.FENCE", "bump", "b", &ahead]), 1);
    assert_eq!(int(&mut direct, &["LOCK.RELEASE", "bump", "b"]), 1);

    late.request_delay_ms.store(300, Ordering::SeqCst);
    let guard = rl.try_acquire("res", Mode::Plain, ms(10_000)).await.expect("2 of 3 grant");
    let token = guard.fencing_token().await.expect("fenced at the two fast nodes");
    assert!(token < bump as u64 + 600_000_000, "T came from the fast nodes: {token}");
    rl.settle().await;

    let own = info_stat(&mut direct, "last_fencing_token");
    assert!(own > token as i64 + 500_000_000, "the late node granted its own, higher token: {own}");
    for (i, server) in servers.iter().enumerate() {
        assert_eq!(holder(server, "res").as_deref(), Some(guard.token()), "node {i} holds it");
        assert!(checks(server, "res", token), "node {i}: LOCK.CHECK res {token} answers 0");
    }
    let tally = rl.check("res", token).await.expect("check");
    assert_eq!((tally.yes, tally.no), (3, 0), "{tally:?}");
    late.request_delay_ms.store(0, Ordering::SeqCst);
    guard.release().await.expect("release");
    rl.settle().await;
    assert_free(&all(&servers), "res");
}

/// Many tasks share one client (one ordered connection per node) while one
/// node is 150 ms away: every round returns at the four fast nodes, and on
/// the slow node each task's ACQUIRE, FENCE and RELEASE still land in the
/// order they were issued, interleaved with the other tasks' on the same
/// connection: every grant there is released, nothing stays locked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_tasks_on_one_connection_leave_nothing_locked_behind_a_slow_node() {
    const TASKS: usize = 32;
    const CYCLES: usize = 5;
    let (servers, slow, rl) = five_with_a_slow_fifth().await;
    let grants = || info_stat(&mut servers[4].conn(), "grants");
    let releases = || info_stat(&mut servers[4].conn(), "releases");
    let before = (grants(), releases());
    slow.request_delay_ms.store(150, Ordering::SeqCst);

    let mut tasks = Vec::new();
    for task in 0..TASKS {
        let rl = rl.clone();
        tasks.push(tokio::spawn(async move {
            for cycle in 0..CYCLES {
                let resource = format!("many-{task}");
                let guard = rl.try_acquire(&resource, Mode::Plain, ms(10_000)).await.expect("acquire");
                if cycle % 2 == 0 {
                    guard.fencing_token().await.expect("fence");
                }
                guard.release().await.expect("release");
            }
        }));
    }
    for task in tasks {
        tokio::time::timeout(Duration::from_secs(30), task).await.expect("tasks finish").expect("task ok");
    }
    rl.settle().await;
    let cycles = (TASKS * CYCLES) as i64;
    assert_eq!(grants() - before.0, cycles, "every ACQUIRE reached the slow node");
    assert_eq!(releases() - before.1, cycles, "every RELEASE reached it after its ACQUIRE");
    for task in 0..TASKS {
        assert_free(&all(&servers), &format!("many-{task}"));
    }
}

/// Three of five nodes restarted without persistence refuse grants for
/// `lock.quarantine-ms`; the error says so, and acquisition works after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quarantined_nodes_are_counted_then_serve_after_the_period() {
    let quarantined = || Opts::new().module_arg("quarantine-ms", "2000");
    let mut servers = start_all(vec![Opts::new(), Opts::new(), quarantined(), quarantined(), quarantined()]);
    let restarting = Instant::now();
    for server in &mut servers[2..] {
        server.kill_and_restart();
    }
    let rl = redlock(&servers).await;
    let error = rl.try_acquire("q", Mode::Plain, ms(1_000)).await.expect_err("3 quarantined");
    let text = error.to_string();
    assert!(text.starts_with("no quorum for 'q': 2 of 5 granted (need 3); 3 quarantined (up to "), "{text}");
    match &error {
        Error::NoQuorum { phase: Phase::Acquire, tally, .. } => {
            assert_eq!(tally.quarantined, 3);
            assert!(tally.quarantine_left_ms.is_some_and(|left| left <= 2_000));
        }
        other => panic!("expected NoQuorum, got {other:?}"),
    }
    assert_free(&all(&servers), "q");

    let policy = RetryPolicy::within(Duration::from_secs(6)).with_delays(ms(50), ms(100));
    let guard = rl.acquire("q", Mode::Plain, ms(1_000), &policy).await.expect("granted after the quarantine");
    let after = restarting.elapsed();
    // The first restarted node leaves quarantine 2 s after it started, which
    // was after `restarting`.
    assert!(after >= ms(1_950), "granted {after:?} after the restarts began");
    assert!(after < ms(5_000), "granted only {after:?} after the restarts began");
    guard.release().await.expect("release");
}

/// The watchdog renews every ttl/3; when three of five nodes die, the holder
/// learns of the loss before the validity of its last renewal ends. (The
/// exact schedule, renewal at ttl/3 and the loss reported as the failed
/// renewal returns, is asserted on tokio's paused clock in `guard.rs`;
/// here the servers are real, so real time, and no tight windows.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watchdog_renews_then_reports_a_lost_majority_before_the_validity_ends() {
    let mut servers = cluster(5);
    let rl = redlock(&servers).await;
    let ttl = ms(900);
    let mut guard = rl.try_acquire("wd", Mode::Plain, ttl).await.expect("acquire");
    guard.start_watchdog(Watchdog::default());
    let mut status = guard.subscribe();
    // Past the TTL: still held, because it was renewed.
    tokio::time::sleep(ms(1_500)).await;
    assert!(guard.is_held(), "{:?}", guard.status());
    assert!(matches!(*status.borrow_and_update(), Status::Held { .. }));
    let extensions = info_stat(&mut servers[0].conn(), "extensions");
    assert!(extensions >= 1, "{extensions} renewals");
    assert!(info_int(&mut servers[0].conn(), "wd", "ttl-ms").unwrap() > 0);

    // The deadline of the last renewal before the loss, as the guard saw it.
    let deadlines = tokio::spawn({
        let mut status = guard.subscribe();
        async move {
            let mut last = None;
            loop {
                match status.borrow_and_update().clone() {
                    Status::Held { deadline, .. } => last = Some(deadline),
                    _ => return last,
                }
                if status.changed().await.is_err() {
                    return last;
                }
            }
        }
    });
    let lost = guard.lost();
    for server in &mut servers[..3] {
        server.kill();
    }
    let reason = tokio::time::timeout(ttl * 3, lost).await.expect("the loss is reported");
    let noticed = Instant::now();
    let last_deadline = deadlines.await.unwrap().expect("held before");
    assert!(noticed < last_deadline, "noticed {:?} after the validity ended", noticed - last_deadline);
    match &reason {
        Lost::RenewalFailed(error) => {
            let text = error.to_string();
            assert!(
                text.starts_with(
                    "no quorum for 'wd' to extend: 2 of 5 extended (need 3); 3 unreachable (first: "
                ),
                "{text}"
            )
        }
        other => panic!("expected RenewalFailed, got {other:?}"),
    }
    assert!(status.has_changed().unwrap());
    assert!(matches!(guard.status(), Status::Lost(_)));
    assert_eq!(guard.validity_remaining(), Duration::ZERO);
    assert!(matches!(guard.extend(ttl).await, Err(Error::Lost { .. })));
    // Releasing a lost guard still cleans up the live nodes.
    let released = guard.release().await.expect_err("no majority to release on");
    assert!(matches!(released, Error::NoQuorum { phase: Phase::Release, .. }), "{released:?}");
    assert_free(&[&servers[3], &servers[4]], "wd");
}

/// A bounded watchdog stops renewing and then reports the loss at the end
/// of the last validity (not before); a guard without a watchdog reports
/// it at its deadline. The exact instants are asserted on paused time in
/// `guard.rs`; here, with real servers, only the order and loose bounds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bounded_watchdog_and_plain_expiry_are_reported() {
    let servers = cluster(3);
    let rl = redlock(&servers).await;
    let mut guard = rl.try_acquire("bounded", Mode::Plain, ms(300)).await.expect("acquire");
    let first_deadline = guard.lease().deadline;
    guard.start_watchdog(Watchdog { renewals_max: 2, duration_max: Duration::from_secs(60) });
    let reason = tokio::time::timeout(Duration::from_secs(5), guard.lost()).await.expect("reported");
    assert_eq!(reason, Lost::WatchdogLimit { renewals: 2 });
    // Renewed twice, so it lasted past its first deadline; reported only
    // once the last lease ran out.
    let last_deadline = guard.lease().deadline;
    assert!(last_deadline > first_deadline, "never renewed");
    assert!(Instant::now() >= last_deadline, "reported while still valid");
    assert_eq!(info_stat(&mut servers[0].conn(), "extensions"), 2);
    drop(guard);

    let plain = rl.try_acquire("plain-expiry", Mode::Plain, ms(400)).await.expect("acquire");
    let deadline = plain.lease().deadline;
    let reason = tokio::time::timeout(Duration::from_secs(5), plain.lost()).await.expect("reported");
    assert_eq!(reason, Lost::Expired);
    let late = Instant::now().saturating_duration_since(deadline);
    assert!(
        Instant::now() >= deadline && late < Duration::from_secs(1),
        "reported {late:?} after the deadline"
    );
    drop(plain);
}
