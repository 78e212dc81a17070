//! The quorum protocol against five real servers: acquire, extend and
//! release with nodes down, fencing tokens across holders and node subsets,
//! mutual exclusion under contention, reentrant locks.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use lock_testkit_client::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use redlock_client::{Error, Lost, Mode, Phase, Redlock, RetryPolicy, Status};
use tokio::time::Instant;

const SECOND: Duration = Duration::from_secs(1);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquire_extend_release_with_five_then_three_then_two_nodes_up() {
    let mut servers = cluster(5);
    let rl = redlock(&servers).await;
    assert_eq!(rl.majority(), 3);

    // All five up.
    let guard = rl.try_acquire("basic", Mode::Plain, 2 * SECOND).await.expect("acquire with 5 up");
    assert_eq!(guard.token().len(), 32);
    assert!(guard.token().bytes().all(|b| b.is_ascii_hexdigit()));
    assert!(guard.fencing_token().await.expect("the fencing round") > 0);
    let left = guard.validity_remaining();
    assert!(left > ms(1_500) && left <= ms(2_000 - 22), "validity {left:?}");
    // The acquire returned at the majority; settle() waits for the rest.
    rl.settle().await;
    for server in &servers {
        assert_eq!(holder(server, "basic").as_deref(), Some(guard.token()), "port {}", server.port);
    }
    // Held: a second client gets Contended, with the counts.
    let other = rl.try_acquire("basic", Mode::Plain, SECOND).await.expect_err("held");
    assert!(matches!(other, Error::Contended { .. }), "{other:?}");
    assert_eq!(
        other.to_string(),
        "'basic' is held by another owner: 0 of 5 granted (need 3); 5 held by another owner"
    );
    let left = guard.extend(5 * SECOND).await.expect("extend");
    assert!(left > ms(4_500), "{left:?}");
    rl.settle().await;
    let node_ttl = info_int(&mut servers[2].conn(), "basic", "ttl-ms").unwrap();
    assert!(node_ttl > 4_000, "node ttl {node_ttl}");
    let tally = guard.release().await.expect("release");
    assert!(tally.yes >= 3 && tally.yes + tally.pending() == 5, "{tally:?}");
    rl.settle().await;
    assert_free(&all(&servers), "basic");

    // Two down: still a majority.
    servers[0].kill();
    servers[3].kill();
    let guard = rl.try_acquire("basic", Mode::Plain, 2 * SECOND).await.expect("acquire with 3 up");
    for i in [1, 2, 4] {
        assert_eq!(holder(&servers[i], "basic").as_deref(), Some(guard.token()));
    }
    guard.extend(3 * SECOND).await.expect("extend with 3 up");
    let tally = guard.release().await.expect("release with 3 up");
    assert_eq!((tally.yes, tally.unreachable + tally.pending()), (3, 2), "{tally:?}");
    // By token: every answer waited for, exact counts.
    let guard = rl.try_acquire("basic", Mode::Plain, 2 * SECOND).await.expect("acquire with 3 up");
    let tally = rl.release("basic", guard.token(), Mode::Plain).await.expect("release by token with 3 up");
    assert_eq!((tally.yes, tally.unreachable, tally.pending()), (3, 2, 0), "{tally:?}");
    guard.detach();
    assert_free(&[&servers[1], &servers[2], &servers[4]], "basic");

    // Three down: fails fast, says why, leaves nothing locked.
    servers[1].kill();
    let started = Instant::now();
    let error = rl.try_acquire("basic", Mode::Plain, 2 * SECOND).await.expect_err("no quorum with 2 up");
    let took = started.elapsed();
    assert!(took < ms(500), "failing took {took:?}");
    match &error {
        Error::NoQuorum { phase: Phase::Acquire, tally, .. } => {
            assert_eq!((tally.yes, tally.unreachable), (2, 3), "{tally:?}")
        }
        other => panic!("expected NoQuorum, got {other:?}"),
    }
    let text = error.to_string();
    assert!(
        text.starts_with("no quorum for 'basic': 2 of 5 granted (need 3); 3 unreachable (first: "),
        "{text}"
    );
    assert_free(&[&servers[2], &servers[4]], "basic");

    // The nodes come back (empty): the client reconnects by itself.
    for i in [0, 1, 3] {
        servers[i].restart();
    }
    tokio::time::sleep(ms(60)).await; // past the reconnect backoff
    let guard = rl.try_acquire("basic", Mode::Plain, 2 * SECOND).await.expect("acquire after the restarts");
    assert!(guard.release().await.expect("release").yes >= 3);
    rl.settle().await;
    assert_free(&all(&servers), "basic");

    // Caller mistakes are named, not retried.
    let bad = rl.try_acquire("basic", Mode::Plain, ms(2)).await.expect_err("ttl below drift");
    assert!(matches!(bad, Error::InvalidArgument(_)) && !bad.is_retryable(), "{bad:?}");
    assert!(matches!(rl.try_acquire("", Mode::Plain, SECOND).await, Err(Error::InvalidArgument(_))));
}

/// Nodes that are down when the client starts are not an error: they count
/// as unreachable, and are used once they come up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_down_at_connect_are_tried_again_later() {
    let mut servers = cluster(5);
    servers[1].kill();
    servers[4].kill();
    let rl = redlock(&servers).await;
    let guard = rl.try_acquire("late-nodes", Mode::Plain, 2 * SECOND).await.expect("3 of 5 up at connect");
    let tally = guard.release().await.expect("release");
    assert_eq!((tally.yes, tally.unreachable + tally.pending()), (3, 2), "{tally:?}");
    servers[1].restart();
    servers[4].restart();
    tokio::time::sleep(ms(60)).await; // past the reconnect backoff
    let guard = rl.try_acquire("late-nodes", Mode::Plain, 2 * SECOND).await.expect("all up");
    // The acquire returned at the majority; the other grants land in the
    // background.
    rl.settle().await;
    for server in &servers {
        assert_eq!(holder(server, "late-nodes").as_deref(), Some(guard.token()), "port {}", server.port);
    }
    // A guard dropped without release is released in the background.
    drop(guard);
    wait_until(SECOND * 2, "the dropped guard's release", || {
        servers.iter().all(|s| holder(s, "late-nodes").is_none())
    });
}

/// The lock.acquire calls each node has run so far.
fn acquire_calls(servers: &[Server]) -> Vec<i64> {
    servers.iter().map(|s| calls(s, "lock.acquire")).collect()
}

/// A request the nodes refuse itself (a TTL above their lock.max-ttl-ms, a
/// key that is not a lock) ends at the first attempt, within any retry
/// policy, as a non-retryable `Refused` that names a node and its reply,
/// when the refusals alone rule the majority out; a node alone that
/// refuses (a smaller limit there) does not stop the others from granting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_the_nodes_refuse_ends_at_once() {
    let servers = start_all(vec![Opts::new(), Opts::new(), Opts::new().module_arg("max-ttl-ms", "2000")]);
    let rl = redlock(&servers).await;
    let wait = RetryPolicy::within(Duration::from_secs(10));
    let before = acquire_calls(&servers);
    let started = Instant::now();
    let error =
        rl.acquire("big", Mode::Plain, Duration::from_secs(60), &wait).await.expect_err("ttl above max");
    let took = started.elapsed();
    assert!(matches!(error, Error::Refused { phase: Phase::Acquire, .. }), "{error:?}");
    assert!(!error.is_retryable() && error.is_invalid_argument());
    let text = error.to_string();
    let first = format!("member 1 ({})", servers[0].url());
    assert!(
        text.starts_with(&format!(
            "the nodes refuse the request for 'big' (3 of 3 nodes; a retry would be refused again): {first}: \
             ERR lock.acquire: ttl-ms 60000 is out of range, must be 1..30000"
        )),
        "{text}"
    );
    let after = acquire_calls(&servers);
    assert_eq!(after.iter().zip(&before).map(|(a, b)| a - b).collect::<Vec<_>>(), [1, 1, 1], "one attempt");
    assert!(took < Duration::from_secs(5), "took {took:?} of a 10 s wait");

    // One node with a smaller limit refuses 5 s; the other two grant.
    let guard = rl.acquire("mid", Mode::Plain, 5 * SECOND, &wait).await.expect("2 of 3 grant");
    assert_eq!(holder(&servers[2], "mid"), None);
    guard.release().await.unwrap();

    // A key that is not a lock: WRONGTYPE. On one node only, with the
    // others held by another owner: that is contention (retryable).
    let _: () = redis::cmd("SET").arg("plain").arg("x").query(&mut servers[0].conn()).unwrap();
    let other = rl.try_acquire("plain", Mode::Plain, SECOND).await.expect("2 of 3 grant");
    let error = rl.try_acquire("plain", Mode::Plain, SECOND).await.expect_err("held");
    assert!(matches!(error, Error::Contended { .. }) && error.is_retryable(), "{error:?}");
    assert!(error.to_string().contains("1 other error (WRONGTYPE"), "{error}");
    other.release().await.unwrap();
    // On two of three: no majority can ever grant; what the third granted
    // is released before the error returns.
    let _: () = redis::cmd("SET").arg("plain").arg("x").query(&mut servers[1].conn()).unwrap();
    let before = acquire_calls(&servers);
    let error = rl.acquire("plain", Mode::Plain, SECOND, &wait).await.expect_err("2 of 3 refuse");
    assert!(matches!(error, Error::Refused { .. }) && !error.is_retryable(), "{error:?}");
    assert!(
        error
            .to_string()
            .contains(&format!("(2 of 3 nodes; a retry would be refused again): {first}: WRONGTYPE")),
        "{error}"
    );
    let after = acquire_calls(&servers);
    assert_eq!(after.iter().zip(&before).map(|(a, b)| a - b).collect::<Vec<_>>(), [1, 1, 1], "one attempt");
    assert_free(&[&servers[2]], "plain");
}

/// Node `i`'s wall clock runs `i * 7` s behind, so each node's own tokens
/// (which follow its clock) are far apart: only the fencing round keeps the
/// quorum's token increasing when the majority is made of slow nodes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fencing_tokens_strictly_increase_across_holders_and_node_subsets() {
    let clocks: Vec<ClockFile> = (0..5).map(|i| ClockFile::starting_at(-i * 7_000, 0)).collect();
    let opts: Vec<Opts> = clocks
        .iter()
        .map(|clock| {
            // appendfsync always: a restart keeps the FENCE raises. The
            // clocks are skewed from the start and never step, so no
            // clock-jump tolerance is needed; with none, a node restarted
            // from its AOF has no restart grace either, and the expiry
            // checked below is taken over at its deadline.
            Opts::new().aof_always().clock_file(clock.path()).module_arg("clock-jump-tolerance-ms", "0")
        })
        .collect();
    let mut servers = start_all(opts);
    let rl = redlock(&servers).await;

    // The nodes' own tokens really are skewed (a direct grant on each).
    let raw: Vec<i64> = servers
        .iter()
        .map(|s| {
            let mut c = s.conn();
            let token: i64 =
                redis::cmd("LOCK.ACQUIRE").arg("probe").arg("p").arg(1000).query(&mut c).unwrap();
            let _: i64 = redis::cmd("LOCK.RELEASE").arg("probe").arg("p").query(&mut c).unwrap();
            token
        })
        .collect();
    assert!(raw[4] + 20_000_000 < raw[0], "node clocks not skewed: {raw:?}");

    let mut rng = StdRng::seed_from_u64(seed());
    let mut down: Vec<usize> = Vec::new();
    let mut last = 0u64;
    let mut slow_majority_rounds = 0;
    let mut unfenced_rounds = 0;
    for round in 0..200 {
        if round % 40 == 20 {
            for &i in &down {
                servers[i].restart();
            }
            // The first time, take down the two fastest clocks; then random.
            down = if round == 20 { vec![0, 1] } else { rand::seq::index::sample(&mut rng, 5, 2).into_vec() };
            for &i in &down {
                servers[i].kill();
            }
        }
        if down.contains(&0) && down.contains(&1) {
            slow_majority_rounds += 1;
        }
        // Within a TTL and a half: a release returns once a majority
        // released, so a node killed just after may come back (from its
        // AOF) still holding the last holder's lock, and then refuses until
        // that lock's deadline, 2 s at most. With two other nodes down, the
        // round must wait that out.
        let policy = RetryPolicy::within(3 * SECOND).with_delays(ms(10), ms(60));
        let guard = rl
            .acquire("fenced", Mode::Plain, 2 * SECOND, &policy)
            .await
            .unwrap_or_else(|e| panic!("round {round} (down {down:?}): {e}"));
        // Every third holder never asks for its token (no fencing round):
        // the fenced holders' tokens still increase across it.
        if round % 3 == 1 {
            unfenced_rounds += 1;
        } else {
            let token = guard.fencing_token().await.unwrap_or_else(|e| panic!("round {round}: fence: {e}"));
            assert!(token > last, "round {round} (down {down:?}): token {token} not above {last}");
            last = token;
        }
        guard.release().await.unwrap_or_else(|e| panic!("round {round}: release: {e}"));
    }
    assert!(slow_majority_rounds >= 20);
    assert_eq!(unfenced_rounds, 67);
    // The slow nodes' clocks alone are still far below the last token.
    assert!((raw[2] as u64) + 5_000_000 < last);

    // A holder that stalls past its validity: the next holder's token is
    // above it, and the stalled one learns it lost the lock.
    let stalled = rl.try_acquire("paused", Mode::Plain, ms(300)).await.expect("stalled holder");
    let stalled_token = stalled.fencing_token().await.expect("fenced before the stall");
    tokio::time::sleep(ms(350)).await;
    assert!(!stalled.is_held());
    let reason = tokio::time::timeout(ms(10), stalled.lost()).await.expect("lost() fires at once");
    assert_eq!(reason, Lost::Expired);
    assert_eq!(stalled.fencing_token().await, Ok(stalled_token), "the token stays known");
    let next = rl.try_acquire("paused", Mode::Plain, SECOND).await.expect("next holder after the expiry");
    assert!(next.fencing_token().await.unwrap() > stalled_token);
    // A holder that asks for its token only after its validity ran out
    // gets none: the fencing round would not count.
    let late = rl.try_acquire("late-ask", Mode::Plain, ms(300)).await.expect("acquire");
    tokio::time::sleep(ms(350)).await;
    let refused = late.fencing_token().await.expect_err("asked after the validity");
    assert!(matches!(refused, Error::Lost { reason: Lost::Expired, .. }), "{refused:?}");
    drop(late);
    let refused = stalled.extend(SECOND).await.expect_err("a lost lock cannot be extended");
    assert!(matches!(refused, Error::Lost { reason: Lost::Expired, .. }), "{refused:?}");
    assert!(matches!(stalled.status(), Status::Lost(Lost::Expired)));
    // Its release (on drop) must not free the next holder's lock.
    drop(stalled);
    rl.settle().await;
    let live: Vec<&Server> = (0..5).filter(|i| !down.contains(i)).map(|i| &servers[i]).collect();
    for server in live {
        assert_eq!(holder(server, "paused").as_deref(), Some(next.token()), "port {}", server.port);
    }
    next.release().await.unwrap();
}

/// When a client believed it held the lock: from, until, client, fencing
/// token (if it asked for one).
type Window = (Instant, Instant, usize, Option<u64>);

/// Ten clients contend for one lock; each holds it a few times, sometimes
/// "crashing" (the lock then runs out at its TTL). The windows in which
/// each believed it held the lock never overlap, and the tokens of the
/// clients that ask for one (every other client) strictly increase.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contending_clients_never_overlap() {
    let servers = cluster(5);
    let urls = urls(&servers);
    let windows: Arc<Mutex<Vec<Window>>> = Arc::default();
    let mut tasks = Vec::new();
    for client in 0..10usize {
        // Each client sends to the nodes in a different order, so that
        // simultaneous attempts split the grants between them.
        let mut urls = urls.clone();
        urls.rotate_left(client % 5);
        let windows = windows.clone();
        tasks.push(tokio::spawn(async move {
            let rl = Redlock::connect(urls, test_config()).await.unwrap();
            let policy = RetryPolicy::within(Duration::from_secs(20)).with_delays(ms(5), ms(40));
            for hold in 0..4 {
                let guard = rl
                    .acquire("contended", Mode::Plain, ms(400), &policy)
                    .await
                    .expect("acquire under contention");
                let fence = match client % 2 {
                    0 => Some(guard.fencing_token().await.expect("the fencing round")),
                    _ => None,
                };
                let acquired_at = Instant::now();
                let deadline = guard.lease().deadline;
                assert!(acquired_at < deadline);
                let work = ms(rand::thread_rng().gen_range(0..15));
                tokio::time::sleep(work).await;
                if hold == 1 && client % 3 == 0 {
                    // Crash while holding: nobody releases.
                    let held = guard.detach();
                    windows.lock().unwrap().push((acquired_at, held.deadline, client, held.fencing_token));
                } else {
                    let end = Instant::now().min(deadline);
                    windows.lock().unwrap().push((acquired_at, end, client, fence));
                    guard.release().await.expect("release");
                }
            }
            // Releases return at the majority: let the rest land.
            rl.settle().await;
        }));
    }
    for task in tasks {
        tokio::time::timeout(Duration::from_secs(40), task)
            .await
            .expect("clients finish")
            .expect("client ok");
    }
    let mut windows = windows.lock().unwrap().clone();
    assert_eq!(windows.len(), 40);
    windows.sort_by_key(|w| w.0);
    for pair in windows.windows(2) {
        let (a, b) = (pair[0], pair[1]);
        assert!(a.1 <= b.0, "client {} held until {:?} after client {} acquired", a.2, a.1 - b.0, b.2);
    }
    let fenced: Vec<u64> = windows.iter().filter_map(|w| w.3).collect();
    assert_eq!(fenced.len(), 20);
    for pair in fenced.windows(2) {
        assert!(pair[1] > pair[0], "fencing token went from {} to {}", pair[0], pair[1]);
    }
    assert_free(&all(&servers), "contended");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reentrant_enter_and_exit_over_the_quorum() {
    let servers = cluster(5);
    let rl = redlock(&servers).await;
    let first = rl.enter("re", "owner-a", 2 * SECOND).await.expect("first entry");
    let second = rl.enter("re", "owner-a", 2 * SECOND).await.expect("second entry");
    // The same token, or a higher one: the first round returned at its
    // majority, and a slower node's own token may be above the quorum's
    // (the second round's FENCE then raises every node to it). Never lower.
    assert!(
        second.fencing_token >= first.fencing_token,
        "{} then {}",
        first.fencing_token,
        second.fencing_token
    );
    rl.settle().await;
    let third = rl.enter("re", "owner-a", 2 * SECOND).await.expect("third entry");
    assert!(third.fencing_token >= second.fencing_token);
    rl.settle().await; // enter returns at the majority
    assert_eq!(info_int(&mut servers[0].conn(), "re", "holds"), Some(3));
    let other = rl.enter("re", "owner-b", SECOND).await.expect_err("another owner");
    assert!(matches!(other, Error::Contended { .. }), "{other:?}");
    assert_eq!(info_int(&mut servers[0].conn(), "re", "holds"), Some(3), "owner-b's attempt left no hold");
    // A plain acquire on a reentrant key is a node error, not "held".
    let wrong = rl.try_acquire("re", Mode::Plain, SECOND).await.expect_err("wrong kind");
    assert!(wrong.to_string().contains("WRONGTYPE"), "{wrong}");
    assert_eq!(rl.exit("re", "owner-a").await.expect("exit"), 2);
    assert_eq!(rl.exit("re", "owner-a").await.expect("exit"), 1);
    assert_eq!(rl.exit("re", "owner-a").await.expect("exit"), 0);
    assert_free(&all(&servers), "re");
    let not_holding = rl.exit("re", "owner-a").await.expect_err("nothing to exit");
    assert!(matches!(not_holding, Error::NoQuorum { phase: Phase::Exit, .. }), "{not_holding:?}");
    let again = rl.enter("re", "owner-b", SECOND).await.expect("free again");
    assert!(again.fencing_token > first.fencing_token);
    assert_eq!(rl.exit("re", "owner-b").await.unwrap(), 0);
}

/// The fencing round runs only for a holder that asks for its token, once
/// per guard, and not on a node whose grant already carried T.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fencing_round_runs_only_when_asked_and_skips_nodes_at_t() {
    // One node: its own token is always the quorum's, so no FENCE at all.
    let single = cluster(1);
    let rl = redlock(&single).await;
    let mut last = 0;
    for _ in 0..5 {
        let guard = rl.try_acquire("one", Mode::Plain, SECOND).await.expect("acquire");
        let token = guard.fencing_token().await.expect("fenced without a command");
        assert!(token > last);
        last = token;
        guard.release().await.expect("release");
    }
    rl.settle().await;
    assert_eq!(fence_calls(&single[0]), 0, "a single node needs no fencing round");
    // Five nodes, and nobody asks for the token: no FENCE at all.
    let servers = cluster(5);
    let rl = redlock(&servers).await;
    for i in 0..10 {
        let guard = rl.try_acquire(&format!("unfenced-{i}"), Mode::Plain, SECOND).await.expect("acquire");
        guard.release().await.expect("release");
    }
    rl.settle().await;
    assert_eq!(servers.iter().map(fence_calls).sum::<i64>(), 0, "an unfenced holder pays no fencing round");
    // Asked for (twice): one round; at most the nodes below the quorum
    // token are fenced, and the token is on a majority either way.
    let guard = rl.try_acquire("five", Mode::Plain, SECOND).await.expect("acquire");
    let t = guard.fencing_token().await.expect("the fencing round") as i64;
    assert_eq!(guard.fencing_token().await, Ok(t as u64), "the same token, without a round");
    rl.settle().await;
    let fenced: i64 = servers.iter().map(fence_calls).sum();
    assert!(fenced <= 4, "{fenced} FENCE calls");
    let at_t = servers.iter().filter(|s| info_int(&mut s.conn(), "five", "fence") == Some(t)).count();
    // The deciding majority stores T; a node that answered after the round
    // had returned keeps its own token if that is higher.
    assert!(at_t >= 3, "only {at_t} nodes store T for the holder");
    guard.release().await.expect("release");
    rl.settle().await;
    assert_free(&all(&servers), "five");
}

/// A node URL's user, password and database are used: every new
/// connection sends AUTH and SELECT first, and checks their replies; a
/// refused handshake makes the node unreachable, and says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn urls_with_a_user_a_password_and_a_database() {
    let servers = cluster(3);
    for server in &servers {
        let _: () = redis::cmd("ACL")
            .arg(&["SETUSER", "locker", "on", ">secret", "~*", "+@all"])
            .query(&mut server.conn())
            .unwrap();
    }
    let url =
        |server: &Server, password: &str| format!("redis://locker:{password}@127.0.0.1:{}/3", server.port);
    let good: Vec<String> = servers.iter().map(|s| url(s, "secret")).collect();
    let rl = Redlock::connect(&good, test_config()).await.expect("connect");
    let guard = rl.try_acquire("in-db-3", Mode::Plain, SECOND).await.expect("acquire");
    rl.settle().await;
    for server in &servers {
        assert_eq!(holder(server, "in-db-3"), None, "the lock is not in db 0");
        let mut c = server.conn();
        let _: () = redis::cmd("SELECT").arg(3).query(&mut c).unwrap();
        let info = lock_info(&mut c, "in-db-3").expect("the lock is in db 3");
        let holder = info.iter().find(|(name, _)| name == "holder").map(|(_, v)| v.clone());
        assert_eq!(holder, Some(redis::Value::BulkString(guard.token().as_bytes().to_vec())));
        let users: String = redis::cmd("CLIENT").arg("LIST").query(&mut c).unwrap();
        assert!(users.contains("user=locker"), "the client authenticated as locker: {users}");
    }
    guard.release().await.expect("release");

    let wrong: Vec<String> = servers.iter().map(|s| url(s, "wrong")).collect();
    let rl =
        Redlock::connect(&wrong, test_config()).await.expect("a node that refuses is not a connect error");
    let error = rl.try_acquire("in-db-3", Mode::Plain, SECOND).await.expect_err("AUTH refused");
    // The nodes refuse the credentials: no retry helps.
    assert!(matches!(error, Error::Refused { .. }) && !error.is_retryable(), "{error:?}");
    let text = error.to_string();
    assert!(
        text.starts_with(&format!(
            "the nodes refuse the request for 'in-db-3' (3 of 3 nodes; a retry would be refused again): \
             member 1 ({}): WRONGPASS ",
            wrong[0]
        )),
        "{text}"
    );
    assert!(text.ends_with(" (on connect, AUTH)"), "{text}");

    for bad in
        ["rediss://127.0.0.1:1/#insecure", "redis+unix:///tmp/x.sock", "redis://127.0.0.1:1/?protocol=resp3"]
    {
        let error = Redlock::connect([bad], test_config()).await.expect_err(bad);
        assert!(matches!(error, Error::InvalidArgument(_)), "{bad}: {error:?}");
    }
}
