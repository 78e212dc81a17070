//! Read-write locks and semaphores over five real servers: readers share,
//! writers are alone, tokens increase across writers, and a semaphore's
//! quorum (4 of 5 for 2 permits, not a majority) is enforced when nodes are
//! down, for grants and for extensions.

use std::time::Duration;

use lock_testkit_client::*;
use redlock_client::{Error, Mode, Phase, Status};

const SECOND: Duration = Duration::from_secs(1);

/// How many holders `key` has on `server` (0 when it is free there).
fn holds(server: &Server, key: &str) -> i64 {
    info_int(&mut server.conn(), key, "holds").unwrap_or(0)
}

/// No lock of any kind on `key` on any of `servers` (the support's
/// `assert_free` looks at the plain lock's single holder only).
fn assert_unlocked(servers: &[&Server], key: &str) {
    for server in servers {
        assert_eq!(lock_info(&mut server.conn(), key), None, "'{key}' is locked on port {}", server.port);
    }
}

fn contended(result: Result<redlock_client::Guard, Error>, what: &str) -> Error {
    let error = result.expect_err(what);
    assert!(matches!(error, Error::Contended { .. }), "{what}: {error:?}");
    error
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_share_writers_are_alone_and_tokens_increase() {
    let servers = cluster(5);
    let rl = redlock(&servers).await;
    assert_eq!((rl.quorum(Mode::Read), rl.quorum(Mode::Write)), (3, 3));

    // Three readers at once. Each asks for its token before the next one
    // is granted: strictly increasing tokens (the next reader's majority
    // meets the fenced majority of the one before).
    let mut readers = Vec::new();
    let mut fences = Vec::new();
    for _ in 0..3 {
        let reader =
            rl.try_acquire("catalog", Mode::Read, 5 * SECOND).await.expect("a reader joins the others");
        fences.push(reader.fencing_token().await.expect("a reader's fencing round"));
        readers.push(reader);
    }
    assert!(readers.iter().all(|r| r.mode() == Mode::Read && r.is_held()));
    assert!(fences.windows(2).all(|pair| pair[1] > pair[0]), "{fences:?}");
    // Rounds return at the majority: let the late grants land everywhere.
    rl.settle().await;
    for server in &servers {
        assert_eq!(holds(server, "catalog"), 3, "port {}", server.port);
    }

    // A writer is refused while they hold, with the counts.
    let refused =
        contended(rl.try_acquire("catalog", Mode::Write, SECOND).await, "a writer while 3 readers hold");
    assert_eq!(
        refused.to_string(),
        "'catalog' is held by another owner: 0 of 5 granted (need 3); 5 held by another owner"
    );
    // Reads and writes are extended like the plain lock.
    readers[0].extend(5 * SECOND).await.expect("a reader extends");
    for reader in readers {
        reader.release().await.expect("a reader releases");
    }
    rl.settle().await;
    assert_unlocked(&all(&servers), "catalog");

    // With the readers gone the writer gets it, and excludes readers and
    // writers.
    let writer =
        rl.try_acquire("catalog", Mode::Write, 5 * SECOND).await.expect("the writer after the readers left");
    assert_eq!(writer.mode(), Mode::Write);
    let mut last = writer.fencing_token().await.expect("the writer's fencing round");
    assert!(last > *fences.iter().max().unwrap(), "above every reader's");
    rl.settle().await;
    contended(rl.try_acquire("catalog", Mode::Read, SECOND).await, "a reader while the writer holds");
    contended(rl.try_acquire("catalog", Mode::Write, SECOND).await, "a second writer");
    writer.release().await.expect("the writer releases");

    // Successive writers: strictly increasing tokens.
    for round in 0..5 {
        let writer = rl.try_acquire("catalog", Mode::Write, 2 * SECOND).await.expect("the next writer");
        let token = writer.fencing_token().await.expect("the fencing round");
        assert!(token > last, "round {round}: {token} after {last}");
        last = token;
        writer.release().await.expect("release");
    }
    rl.settle().await;
    assert_unlocked(&all(&servers), "catalog");

    // A read-write lock is not a plain lock: the module's WRONGTYPE is
    // named in the error.
    let reader = rl.try_acquire("catalog", Mode::Read, 2 * SECOND).await.expect("a reader");
    rl.settle().await;
    let wrong =
        rl.try_acquire("catalog", Mode::Plain, SECOND).await.expect_err("plain lock on a read-write lock");
    assert!(wrong.to_string().contains("WRONGTYPE"), "{wrong}");
    reader.release().await.expect("release");
    rl.settle().await;
    assert_unlocked(&all(&servers), "catalog");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_two_permit_semaphore_needs_four_of_five_nodes() {
    let mut servers = cluster(5);
    let rl = redlock(&servers).await;
    assert_eq!(rl.quorum(Mode::Permit { permits: 1 }), 3);
    assert_eq!(rl.quorum(Mode::Permit { permits: 2 }), 4);
    assert_eq!(rl.quorum(Mode::Permit { permits: 4 }), 5);

    // Two holders, the third is refused.
    let first =
        rl.try_acquire("backups", Mode::Permit { permits: 2 }, 5 * SECOND).await.expect("the first permit");
    let first_token = first.fencing_token().await.expect("the fencing round, a majority");
    let second =
        rl.try_acquire("backups", Mode::Permit { permits: 2 }, 5 * SECOND).await.expect("the second permit");
    assert_eq!(second.mode(), Mode::Permit { permits: 2 });
    assert!(second.fencing_token().await.unwrap() > first_token, "fenced one after the other");
    rl.settle().await;
    for server in &servers {
        assert_eq!(holds(server, "backups"), 2, "port {}", server.port);
        assert_eq!(info_int(&mut server.conn(), "backups", "permits"), Some(2));
    }
    let third = contended(
        rl.try_acquire("backups", Mode::Permit { permits: 2 }, SECOND).await,
        "a third holder of 2 permits",
    );
    assert_eq!(
        third.to_string(),
        "'backups' is held by another owner: 0 of 5 granted (need 4 for a 2-permit semaphore); \
         5 held by another owner"
    );
    // Another permit count is refused by every node, and says so: a
    // caller mistake (every client must give the same count), not retried.
    let other = rl
        .try_acquire("backups", Mode::Permit { permits: 3 }, SECOND)
        .await
        .expect_err("3 permits on a 2-permit semaphore");
    assert!(matches!(other, Error::Refused { phase: Phase::Acquire, .. }), "{other:?}");
    assert!(!other.is_retryable());
    assert!(other.to_string().contains("this semaphore has 2 permits, not 3"), "{other}");
    // Bad counts never reach the nodes.
    assert!(matches!(
        rl.try_acquire("backups", Mode::Permit { permits: 0 }, SECOND).await,
        Err(Error::InvalidArgument(_))
    ));

    second.release().await.expect("release the second permit");
    rl.settle().await;

    // Two nodes die: three are left, a majority but not the 4 that two
    // permits need. The held permit cannot be extended (it would no longer
    // bound the holders), and it is marked lost.
    servers[0].kill();
    servers[3].kill();
    let error = first.extend(5 * SECOND).await.expect_err("extend on 3 of 5");
    let text = error.to_string();
    assert!(
        text.starts_with(
            "no quorum for 'backups' to extend: 3 of 5 extended (need 4 for a 2-permit semaphore); 2 unreachable \
             (first: "
        ),
        "{text}"
    );
    assert!(matches!(first.status(), Status::Lost(_)), "{:?}", first.status());
    let release = first.release().await.expect_err("released on 3, fewer than 4");
    assert!(matches!(release, Error::NoQuorum { phase: Phase::Release, .. }), "{release:?}");
    let live = [&servers[1], &servers[2], &servers[4]];
    assert_unlocked(&live, "backups");

    // A new 2-permit grant fails with a clear "need 4", and leaves nothing.
    let error = rl
        .try_acquire("backups", Mode::Permit { permits: 2 }, 2 * SECOND)
        .await
        .expect_err("2 permits with 2 nodes down");
    match &error {
        Error::NoQuorum { phase: Phase::Acquire, tally, .. } => {
            assert_eq!((tally.yes, tally.unreachable, tally.need()), (3, 2, 4), "{tally:?}")
        }
        other => panic!("expected NoQuorum, got {other:?}"),
    }
    let text = error.to_string();
    assert!(
        text.starts_with(
            "no quorum for 'backups': 3 of 5 granted (need 4 for a 2-permit semaphore); 2 unreachable (first: "
        ),
        "{text}"
    );
    assert!(error.is_retryable());
    assert_unlocked(&live, "backups");

    // One permit is a plain lock's majority: 3 of 5 will do.
    let single = rl
        .try_acquire("one-at-a-time", Mode::Permit { permits: 1 }, 2 * SECOND)
        .await
        .expect("1 permit with 2 nodes down");
    single.extend(2 * SECOND).await.expect("extended on 3 of 5");
    contended(
        rl.try_acquire("one-at-a-time", Mode::Permit { permits: 1 }, SECOND).await,
        "the only permit is taken",
    );
    let tally = single.release().await.expect("release on 3 of 5");
    assert!(tally.yes >= 3, "{tally:?}");
    // So do reads and writes.
    let writer = rl.try_acquire("catalog", Mode::Write, 2 * SECOND).await.expect("write with 2 nodes down");
    writer.release().await.expect("release");
    rl.settle().await;
    assert_unlocked(&live, "one-at-a-time");
    assert_unlocked(&live, "catalog");
}
