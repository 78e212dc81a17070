//! Pub/sub on free: `released` or `expired` on `__lock@<db>__:<key>` when a
//! lock is freed and no waiter takes it; nothing when a waiter is handed it;
//! nothing at all with `lock.publish-freed no`.

use std::time::Duration;

use lock_testkit::{cmd, info_stat, int, wait_until, Server};

const CHANNEL: &str = "__lock@0__:job";

/// The next message on the subscription, or None within `within`.
fn next_message(pubsub: &mut redis::PubSub<'_>, within: Duration) -> Option<String> {
    pubsub.set_read_timeout(Some(within)).unwrap();
    match pubsub.get_message() {
        Ok(msg) => Some(msg.get_payload().unwrap()),
        Err(e) if e.is_timeout() => None,
        Err(e) => panic!("pub/sub read failed: {e}"),
    }
}

#[test]
fn freed_locks_are_announced_unless_handed_off_or_turned_off() {
    let server = Server::start();
    let mut c = server.conn();
    let mut sub_conn = server.conn();
    let mut pubsub = sub_conn.as_pubsub();
    pubsub.subscribe(CHANNEL).unwrap();

    // A release.
    int(&mut c, &["LOCK.ACQUIRE", "job", "a", "10000"]);
    assert_eq!(int(&mut c, &["LOCK.RELEASE", "job", "a"]), 1);
    assert_eq!(next_message(&mut pubsub, Duration::from_secs(5)).as_deref(), Some("released"));

    // A reentrant lock: only the exit that frees it.
    int(&mut c, &["LOCK.ENTER", "job", "o", "10000"]);
    int(&mut c, &["LOCK.ENTER", "job", "o", "10000"]);
    assert_eq!(int(&mut c, &["LOCK.EXIT", "job", "o"]), 1);
    assert_eq!(next_message(&mut pubsub, Duration::from_millis(200)), None, "still held once");
    assert_eq!(int(&mut c, &["LOCK.EXIT", "job", "o"]), 0);
    assert_eq!(next_message(&mut pubsub, Duration::from_secs(5)).as_deref(), Some("released"));

    // An expired lock found by a write.
    int(&mut c, &["LOCK.ACQUIRE", "job", "a", "50"]);
    std::thread::sleep(Duration::from_millis(120));
    assert_eq!(int(&mut c, &["LOCK.RELEASE", "job", "a"]), 0);
    assert_eq!(next_message(&mut pubsub, Duration::from_secs(5)).as_deref(), Some("expired"));

    // A read-write lock: when its last reader leaves, not before.
    int(&mut c, &["LOCK.SHARED", "job", "r1", "10000"]);
    int(&mut c, &["LOCK.SHARED", "job", "r2", "10000"]);
    assert_eq!(int(&mut c, &["LOCK.RELEASE", "job", "r1"]), 1);
    assert_eq!(next_message(&mut pubsub, Duration::from_millis(200)), None, "r2 still reads");
    assert_eq!(int(&mut c, &["LOCK.RELEASE", "job", "r2"]), 1);
    assert_eq!(next_message(&mut pubsub, Duration::from_secs(5)).as_deref(), Some("released"));

    // Handed to a waiter: nobody else needs to hear of it.
    int(&mut c, &["LOCK.ACQUIRE", "job", "a", "10000"]);
    let url = server.url();
    let waiter = std::thread::spawn(move || {
        let mut w = redis::Client::open(url).unwrap().get_connection().unwrap();
        let v: i64 = cmd("LOCK.ACQUIRE")
            .arg("job")
            .arg("b")
            .arg(10_000)
            .arg("WAIT")
            .arg(10_000)
            .query(&mut w)
            .unwrap();
        v
    });
    wait_until(Duration::from_secs(5), "the waiter queued", || info_stat(&mut c, "waiters") == 1);
    assert_eq!(int(&mut c, &["LOCK.RELEASE", "job", "a"]), 1);
    assert!(waiter.join().unwrap() > 0);
    assert_eq!(next_message(&mut pubsub, Duration::from_millis(300)), None, "handed off, not announced");
    assert_eq!(int(&mut c, &["LOCK.RELEASE", "job", "b"]), 1);
    assert_eq!(next_message(&mut pubsub, Duration::from_secs(5)).as_deref(), Some("released"));

    // Turned off.
    let _: () = cmd("CONFIG").arg("SET").arg("lock.publish-freed").arg("no").query(&mut c).unwrap();
    assert_eq!(info_stat(&mut c, "publish_freed"), 0);
    int(&mut c, &["LOCK.ACQUIRE", "job", "a", "10000"]);
    assert_eq!(int(&mut c, &["LOCK.RELEASE", "job", "a"]), 1);
    assert_eq!(next_message(&mut pubsub, Duration::from_millis(300)), None);
}
