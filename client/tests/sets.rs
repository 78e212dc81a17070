//! Sets of resources taken all or nothing over N real servers:
//! one `LOCK.MACQUIRE` per node, the majority rule over the whole set, the
//! set's fencing token above every earlier holder's of any of its keys,
//! release and renewal of the whole set, two clients taking overlapping
//! sets in opposite orders (never both, never half a set, no deadlock), a
//! node that holds one key already, and misuse.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use lock_testkit_client::*;
use redlock_client::{Error, Lost, Mode, Phase, Redlock, RetryPolicy, Watchdog};

const SECOND: Duration = Duration::from_secs(1);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn owned(set: &[(&str, Mode)]) -> Vec<(String, Mode)> {
    set.iter().map(|(r, m)| (r.to_string(), *m)).collect()
}

/// How many of `servers` hold every key of `keys` for `token`, each with
/// the same fencing token (the one the node's MACQUIRE returned).
fn nodes_holding_all(servers: &[Server], keys: &[&str], token: &str) -> usize {
    servers
        .iter()
        .filter(|server| {
            let fences: Vec<Option<i64>> = keys
                .iter()
                .map(|key| holders(server, key).into_iter().find(|(h, _)| h == token).map(|(_, f)| f))
                .collect();
            fences.iter().all(|f| f.is_some() && *f == fences[0])
        })
        .count()
}

/// Nothing held on any key of `keys` on any of `servers`.
fn assert_all_free(servers: &[Server], keys: &[&str]) {
    for server in servers {
        for key in keys {
            assert_eq!(lock_info(&mut server.conn(), key), None, "'{key}' is locked on port {}", server.port);
        }
    }
}

fn contended<T: std::fmt::Debug>(result: Result<T, Error>, what: &str) -> Error {
    let error = result.expect_err(what);
    assert!(matches!(error, Error::Contended { .. }), "{what}: {error:?}");
    error
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_set_is_taken_fenced_extended_and_released_on_three_and_five_nodes() {
    for n in [3, 5] {
        let servers = cluster(n);
        let rl = redlock(&servers).await;
        let majority = n / 2 + 1;
        let set = [("acct:1", Mode::Plain), ("acct:2", Mode::Write), ("rates", Mode::Read)];
        let keys = set.map(|(k, _)| k);

        let guard = rl.try_acquire_many(&set, 5 * SECOND).await.expect("the set");
        assert_eq!(guard.resources(), owned(&set).as_slice());
        assert_eq!((guard.resource(), guard.mode()), ("acct:1", Mode::Plain), "the first of the set");
        let left = guard.validity_remaining();
        assert!(left > ms(4_000) && left <= ms(5_000 - 52), "validity {left:?}");
        rl.settle().await;
        assert_eq!(nodes_holding_all(&servers, &keys, guard.token()), n, "every node granted the whole set");

        // One fencing token for the set, the grant on every key of a
        // majority (LOCK.CHECK key T).
        let fence = guard.fencing_token().await.expect("the fencing round over the set");
        rl.settle().await;
        for key in keys {
            let live = servers.iter().filter(|s| checks(s, key, fence)).count();
            assert!(live >= majority, "'{key}': T={fence} is the live grant on only {live} of {n}");
        }

        // Another client: each key is refused in a conflicting mode, a
        // reader joins the set's read hold, and an overlapping set is
        // refused without taking its free key anywhere.
        contended(rl.try_acquire("acct:1", Mode::Plain, SECOND).await, "a key of the set");
        contended(rl.try_acquire("acct:2", Mode::Read, SECOND).await, "a reader of the set's write hold");
        let reader = rl.try_acquire("rates", Mode::Read, SECOND).await.expect("readers share 'rates'");
        reader.release().await.expect("the reader releases");
        let overlap = [("free-key", Mode::Plain), ("rates", Mode::Write)];
        let error = contended(rl.try_acquire_many(&overlap, SECOND).await, "an overlapping set");
        assert_eq!(
            error.to_string(),
            format!(
                "'{{free-key, rates}}' is held by another owner: 0 of {n} granted (need {majority}); \
                 {n} held by another owner"
            )
        );
        rl.settle().await;
        assert_all_free(&servers, &["free-key"]);

        // Extended as a whole (LOCK.RENEW over the set).
        let left = guard.extend(20 * SECOND).await.expect("extend the set");
        assert!(left > ms(19_000), "{left:?}");
        rl.settle().await;
        for server in &servers {
            for key in keys {
                assert_eq!(holders(server, key).len(), 1, "'{key}' on port {}", server.port);
            }
            let ttl = info_int(&mut server.conn(), "acct:1", "ttl-ms").unwrap();
            assert!(ttl > 15_000, "ttl {ttl} on port {}", server.port);
        }

        // Released everywhere, every key.
        let tally = guard.release().await.expect("release the set");
        assert!(tally.yes >= majority && tally.yes + tally.pending() == n, "{tally:?}");
        rl.settle().await;
        assert_all_free(&servers, &keys);

        // Tokens increase across holders of the set's keys, sets or not.
        let single = rl.try_acquire("acct:1", Mode::Plain, 2 * SECOND).await.expect("one key alone");
        let single_fence = single.fencing_token().await.expect("fence");
        assert!(single_fence > fence, "{single_fence} after the set's {fence}");
        single.release().await.expect("release");
        let again = rl.try_acquire_many(&set, 2 * SECOND).await.expect("the set again");
        let again_fence = again.fencing_token().await.expect("fence");
        assert!(again_fence > single_fence, "{again_fence} after {single_fence}");
        let released = rl.release_many(&keys, again.token()).await.expect("release by token");
        assert_eq!((released.yes, released.pending()), (n, 0), "{released:?}");
        again.detach();
        assert_all_free(&servers, &keys);
    }
}

/// A node where another owner holds one key of the set refuses the whole
/// set (and takes none of its other keys); the majority decides.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_holds_a_key_refuses_the_set_and_the_majority_decides() {
    let servers = cluster(3);
    let rl = redlock(&servers).await;
    let keys = ["a", "b", "c"];
    let set = keys.map(|k| (k, Mode::Plain));
    assert!(int(&mut servers[0].conn(), &["LOCK.ACQUIRE", "b", "other", "30000"]) > 0);

    let guard = rl.try_acquire_many(&set, 5 * SECOND).await.expect("2 of 3 grant the set");
    rl.settle().await;
    assert_eq!(nodes_holding_all(&servers[1..], &keys, guard.token()), 2);
    assert_eq!(holder(&servers[0], "b").as_deref(), Some("other"));
    assert_all_free(&servers[..1], &["a", "c"]);
    let fence = guard.fencing_token().await.expect("fenced on the two");
    assert!(fence > 0);
    // Released on the two; the third answers 0 for every key.
    let released = rl.release_many(&keys, guard.token()).await.expect("a majority released");
    assert_eq!((released.yes, released.no), (2, 1), "{released:?}");
    guard.detach();
    assert_eq!(holder(&servers[0], "b").as_deref(), Some("other"), "another owner's hold stays");

    // Held on two nodes: no majority can grant the set; nothing is left.
    assert!(int(&mut servers[1].conn(), &["LOCK.ACQUIRE", "c", "other", "30000"]) > 0);
    let error = contended(rl.try_acquire_many(&set, 5 * SECOND).await, "held on 2 of 3");
    assert_eq!(
        error.to_string(),
        "'{a, b, c}' is held by another owner: 1 of 3 granted (need 2); 2 held by another owner"
    );
    assert_all_free(&servers[..1], &["a", "c"]);
    assert_all_free(&servers[1..2], &["a", "b"]);
    assert_all_free(&servers[2..], &keys);
}

/// Two clients take overlapping sets, naming the keys in opposite
/// orders, over and over. Never both at once; while one holds, a majority
/// of nodes holds every key of its set for it, and no node holds part of
/// a set; both get through (no deadlock).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overlapping_sets_in_opposite_orders_never_both_hold_and_never_deadlock() {
    const ROUNDS: usize = 12;
    let servers = Arc::new(cluster(5));
    let inside = Arc::new(AtomicUsize::new(0));
    let forward = ["k1", "k2", "k3"];
    let backward = ["k3", "k2", "k1"];
    let mut clients = Vec::new();
    for keys in [forward, backward] {
        let rl = redlock(&servers).await;
        let servers = servers.clone();
        let inside = inside.clone();
        clients.push(tokio::spawn(async move {
            let policy = RetryPolicy::within(20 * SECOND).with_delays(ms(2), ms(20));
            let set = keys.map(|k| (k, Mode::Plain));
            let mut refused = 0;
            for _ in 0..ROUNDS {
                let guard = loop {
                    match rl.acquire_many(&set, 3 * SECOND, &policy).await {
                        Ok(guard) => break guard,
                        Err(error) if error.is_retryable() => refused += 1,
                        Err(error) => panic!("{error}"),
                    }
                    assert!(refused < 1_000, "no progress");
                };
                assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0, "both clients hold the keys");
                check_while_holding(&servers, &keys, guard.token());
                assert!(guard.is_held(), "the checks outlasted the validity");
                inside.fetch_sub(1, Ordering::SeqCst);
                guard.release().await.expect("release");
            }
            rl.settle().await;
        }));
    }
    for client in clients {
        tokio::time::timeout(120 * SECOND, client).await.expect("a client is stuck").expect("client");
    }
    assert_all_free(&servers, &forward);
}

/// While `token` holds the set `keys`: every node's keys, read at once (in
/// MULTI/EXEC), have one holder for all or none (no half sets), and a
/// majority holds every key for `token`.
fn check_while_holding(servers: &[Server], keys: &[&str], token: &str) {
    let mut ours = 0;
    for server in servers {
        let mut pipe = redis::pipe();
        pipe.atomic();
        for key in keys {
            pipe.cmd("LOCK.INFO").arg(*key);
        }
        let replies: Vec<redis::Value> = pipe.query(&mut server.conn()).expect("LOCK.INFO in MULTI");
        let held: Vec<Vec<String>> =
            replies.iter().map(|r| holders_in(r).into_iter().map(|(h, _)| h).collect()).collect();
        assert!(held.iter().all(|h| *h == held[0]), "port {}: half a set: {held:?}", server.port);
        if held[0] == [token.to_string()] {
            ours += 1;
        }
    }
    assert!(ours > servers.len() / 2, "the set is held on {ours} of {} nodes", servers.len());
}

/// The watchdog renews the whole set; when a majority no longer holds
/// every key of it, the renewal fails and `lost()` fires.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watchdog_keeps_a_set_alive_until_a_majority_lacks_a_key() {
    let servers = cluster(3);
    let rl = redlock(&servers).await;
    let keys = ["w1", "w2", "w3"];
    let set = [("w1", Mode::Plain), ("w2", Mode::Read), ("w3", Mode::Write)];
    let mut guard = rl.try_acquire_many(&set, ms(600)).await.expect("the set");
    guard.start_watchdog(Watchdog::default());
    let lost = guard.lost();
    tokio::time::sleep(ms(2_000)).await; // past three TTLs
    assert!(guard.is_held(), "{:?}", guard.status());
    rl.settle().await;
    assert_eq!(nodes_holding_all(&servers, &keys, guard.token()), 3);
    contended(rl.try_acquire("w1", Mode::Plain, SECOND).await, "a key of the renewed set");

    // One key of the set is taken from it on two nodes (released by its
    // token, by hand): the others still hold there, but a node counts only
    // for the whole set, so the next renewal has 1 of 3.
    for server in &servers[..2] {
        assert_eq!(int(&mut server.conn(), &["LOCK.RELEASE", "w2", guard.token()]), 1);
    }
    let reason = tokio::time::timeout(SECOND, lost).await.expect("lost within a renewal interval");
    match &reason {
        Lost::RenewalFailed(error) => assert_eq!(
            error.to_string(),
            "no quorum for '{w1, w2, w3}' to extend: 1 of 3 extended (need 2); 2 not holding (expired or taken)"
        ),
        other => panic!("expected RenewalFailed, got {other:?}"),
    }
    assert!(!guard.is_held());
    let error = guard.release().await.expect_err("the whole set released on 1 of 3 only");
    assert!(matches!(error, Error::NoQuorum { phase: Phase::Release, .. }), "{error:?}");
    rl.settle().await;
    assert_all_free(&servers, &keys);
}

/// Bad sets are refused before any round: no node sees a command.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_set_is_refused_and_changes_nothing() {
    let servers = cluster(3);
    let rl = redlock(&servers).await;
    let refused = |result: Result<redlock_client::Guard, Error>| match result {
        Err(error @ Error::InvalidArgument(_)) => {
            assert!(!error.is_retryable());
            error.to_string()
        }
        other => panic!("expected InvalidArgument, got {other:?}"),
    };
    let none: [(&str, Mode); 0] = [];
    assert_eq!(refused(rl.try_acquire_many(&none, SECOND).await), "invalid argument: no resources given");
    let twice = [("a", Mode::Plain), ("b", Mode::Plain), ("a", Mode::Read)];
    assert_eq!(
        refused(rl.acquire_many(&twice, SECOND, &RetryPolicy::attempts(5)).await),
        "invalid argument: resource 'a' is listed twice"
    );
    let permit = [("a", Mode::Plain), ("s", Mode::Permit { permits: 2 })];
    assert!(refused(rl.try_acquire_many(&permit, SECOND).await)
        .contains("semaphore permit cannot be taken in a set"));
    let empty_name = [("a", Mode::Plain), ("", Mode::Plain)];
    assert!(
        refused(rl.try_acquire_many(&empty_name, SECOND).await).contains("resource must be 1 to 256 bytes")
    );
    let too_many: Vec<(String, Mode)> = (0..101).map(|i| (format!("k{i}"), Mode::Plain)).collect();
    assert!(refused(rl.try_acquire_many(&too_many, SECOND).await).contains("at most 100"));
    let good = [("a", Mode::Plain), ("b", Mode::Plain)];
    assert!(refused(rl.try_acquire_many(&good, ms(2)).await).contains("drift"), "a ttl below the drift");
    assert!(matches!(rl.release_many(&["a", "a"], "t").await, Err(Error::InvalidArgument(_))));
    assert!(matches!(rl.extend_many::<&str>(&[], "t", SECOND).await, Err(Error::InvalidArgument(_))));
    for server in servers.iter() {
        let commands = ["lock.macquire", "lock.mrelease", "lock.renew"].map(|c| calls(server, c));
        assert_eq!(commands, [0, 0, 0], "port {}", server.port);
        let keys: i64 = redis::cmd("DBSIZE").query(&mut server.conn()).unwrap();
        assert_eq!(keys, 0);
    }

    // A key of another kind (a semaphore) in the set: every node answers
    // WRONGTYPE, named in the error (a refusal: not retried), and the
    // set's other key stays free.
    let permit = rl.try_acquire("sem", Mode::Permit { permits: 2 }, 5 * SECOND).await.expect("a permit");
    let error = rl
        .try_acquire_many(&[("free", Mode::Plain), ("sem", Mode::Plain)], SECOND)
        .await
        .expect_err("a semaphore in a set");
    assert!(matches!(error, Error::Refused { phase: Phase::Acquire, .. }), "{error:?}");
    assert!(error.to_string().contains("WRONGTYPE"), "{error}");
    rl.settle().await;
    assert_all_free(&servers, &["free"]);
    permit.release().await.expect("release the permit");

    // A set released or extended with a token that does not hold it.
    let guard = rl.try_acquire_many(&good, 5 * SECOND).await.expect("a set");
    let wrong = rl.release_many(&["a", "b"], "not-the-token").await.expect_err("not the holder");
    match &wrong {
        Error::NoQuorum { phase: Phase::Release, tally, .. } => assert_eq!(tally.no, 3, "{tally:?}"),
        other => panic!("expected NoQuorum, got {other:?}"),
    }
    let wrong = rl.extend_many(&["a", "b"], "not-the-token", SECOND).await.expect_err("not the holder");
    assert!(matches!(wrong, Error::NoQuorum { phase: Phase::Extend, .. }), "{wrong:?}");
    // More than the set is not the set: a node counts only if it extended
    // every key named, and none holds 'c'.
    let part = rl.extend_many(&["a", "b", "c"], guard.token(), SECOND).await.expect_err("c is not held");
    assert!(matches!(part, Error::NoQuorum { phase: Phase::Extend, .. }), "{part:?}");
    guard.release().await.expect("release");
    rl.settle().await;
    assert_all_free(&servers, &["a", "b", "c"]);
}

/// The client also connects to a set of nodes where some are down: the set
/// is taken on the majority that is up, and refused (leaving nothing) when
/// no majority is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_set_needs_a_majority_of_nodes_up() {
    let mut servers = cluster(5);
    let rl: Redlock = redlock(&servers).await;
    let keys = ["d1", "d2"];
    let set = keys.map(|k| (k, Mode::Plain));
    servers[0].kill();
    servers[1].kill();
    let guard = rl.try_acquire_many(&set, 5 * SECOND).await.expect("3 of 5 up");
    guard.fencing_token().await.expect("fenced on the 3");
    let tally = guard.release().await.expect("release on the 3");
    assert_eq!(tally.yes, 3, "{tally:?}");
    servers[2].kill();
    let error = rl.try_acquire_many(&set, 5 * SECOND).await.expect_err("2 of 5 up");
    let text = error.to_string();
    assert!(
        text.starts_with("no quorum for '{d1, d2}': 2 of 5 granted (need 3); 3 unreachable (first: "),
        "{text}"
    );
    assert_all_free(&servers[3..], &keys);
}
