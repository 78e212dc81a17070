//! Property 10 of docs/safety.md through the quorum client's watchdog: a
//! lock whose deadline the watchdog keeps moving (`LOCK.EXTEND` of one
//! key, `LOCK.RENEW` of a set) is forgotten in every way the test kit
//! knows (`Forget::ALL`: DEL, UNLINK, SET, RENAME, MOVE, eviction,
//! FLUSHDB, SWAPDB) after its first deadline has passed; a newcomer is
//! refused until the deadline of the watchdog's last renewal, not only
//! the first grant's. The rows of the lock commands are the module's
//! `tests/forgetting.rs`.

use std::sync::Arc;
use std::thread;
use std::time::Duration;

use lock_testkit_client::*;
use redlock_client::{Mode, Redlock, Watchdog};
use tokio::runtime::Runtime;

/// The first grant's TTL: the watchdog renews every third of it.
const TTL: Duration = Duration::from_millis(600);
/// The strike comes this long after the first deadline: two renewals later.
const AFTER_FIRST: Duration = Duration::from_millis(450);

/// A way the watchdog holds the key `lock`: alone, or in a set.
#[derive(Clone, Copy, Debug)]
enum Held {
    One,
    Set,
}

fn case(rt: &Runtime, held: Held, forget: Forget) {
    let what = format!("{} of a lock the watchdog renews ({held:?})", forget.name());
    let server = Server::with(Forget::opts());
    let mut c = server.conn();
    let client = rt.block_on(Redlock::connect(vec![server.url()], test_config())).expect("connect");
    let started = wall_ms();
    let mut guard = rt
        .block_on(async {
            match held {
                Held::One => client.try_acquire("lock", Mode::Plain, TTL).await,
                Held::Set => {
                    client.try_acquire_many(&[("lock", Mode::Plain), ("lock:2", Mode::Plain)], TTL).await
                }
            }
        })
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    let first_deadline = started + TTL.as_millis() as i64;
    rt.block_on(async { guard.start_watchdog(Watchdog::default()) });
    thread::sleep(TTL + AFTER_FIRST);
    assert!(guard.is_held(), "{what}: the watchdog did not keep it");
    let fence = info_int(&mut c, "lock", "fence").expect("held");
    // A renewal may land between this read and the strike: the quarantine
    // may then end up to a renewal period later.
    let deadline_ms = info_int(&mut c, "lock", "deadline-ms").expect("held");
    assert!(deadline_ms > first_deadline + 200, "{what}: not renewed past its first deadline");
    forget.strike(&mut c, &[Target { db: 0, key: "lock".into() }]);
    forget.clear(&mut c, &[Target { db: 0, key: "lock".into() }]);
    let lost = rt.block_on(async { tokio::time::timeout(TTL * 2, guard.lost()).await });
    assert!(lost.is_ok(), "{what}: the watchdog did not report the loss");
    let lock = HeldLock { key: "lock".into(), fence, deadline_ms };
    let renewal = TTL.as_millis() as i64 / 3;
    assert_quarantined_until(&mut c, &lock, renewal, &[forget.code()], &what);
    granted_after_deadline(&mut c, &lock, &what);
}

#[test]
fn a_lock_the_watchdog_renews_is_refused_until_its_last_renewal_s_deadline_once_forgotten() {
    let rt =
        Arc::new(tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap());
    let cases: Vec<(Held, Forget)> =
        [Held::One, Held::Set].into_iter().flat_map(|h| Forget::ALL.map(|f| (h, f))).collect();
    let threads: Vec<_> = cases
        .into_iter()
        .map(|(held, forget)| {
            let rt = rt.clone();
            (held, forget, thread::spawn(move || case(&rt, held, forget)))
        })
        .collect();
    for (held, forget, t) in threads {
        if t.join().is_err() {
            panic!("{} of {held:?}: see the panic above", forget.name());
        }
    }
}
