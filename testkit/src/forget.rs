//! The ways a lock key is forgotten behind the module's back (property 10
//! of docs/safety.md), one row each, for the tests that cross them with
//! every way a lock's deadline moves (`tests/forgetting.rs` for the lock
//! commands, `client/tests/forgetting.rs` for the quorum client's
//! watchdog): a new way is one row here.

use std::thread::sleep;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use redis::{cmd, Connection, Value};

use crate::replies::{err_text, info_field, int, is_held, refusal};
use crate::server::Opts;
use crate::wait::wait_until;

/// How far a quarantine's end may sit from the lock's deadline: a test
/// reads both clocks a few milliseconds apart.
pub const QUARANTINE_SLACK_MS: i64 = 150;
/// The TTL of the grant that shows a key grantable again
/// ([`granted_after_deadline`]).
pub const AFTER_TTL_MS: i64 = 100;

/// Databases the tests may use, and how far a target's partner (where
/// `MOVE` puts a key, what `SWAPDB` swaps a database with) lies: targets
/// live below [`PARTNER_DB_OFFSET`].
pub const FORGET_DATABASES: i64 = 32;
pub const PARTNER_DB_OFFSET: i64 = 16;

/// A lock key to forget: its database and name.
#[derive(Clone, Debug)]
pub struct Target {
    pub db: i64,
    pub key: String,
}

impl Target {
    fn partner(&self) -> i64 {
        self.db + PARTNER_DB_OFFSET
    }
}

/// One way a held lock's key is removed by something else than a lock
/// command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Forget {
    Del,
    Unlink,
    /// Overwritten by a plain `SET` (the value left is no lock).
    Set,
    Rename,
    /// `MOVE` to another database.
    Move,
    /// Evicted under `maxmemory` (every key at once).
    Evict,
    FlushDb,
    /// `SWAPDB` with an empty database.
    SwapDb,
}

impl Forget {
    pub const ALL: [Forget; 8] = [
        Forget::Del,
        Forget::Unlink,
        Forget::Set,
        Forget::Rename,
        Forget::Move,
        Forget::Evict,
        Forget::FlushDb,
        Forget::SwapDb,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Forget::Del => "DEL",
            Forget::Unlink => "UNLINK",
            Forget::Set => "SET",
            Forget::Rename => "RENAME",
            Forget::Move => "MOVE",
            Forget::Evict => "eviction",
            Forget::FlushDb => "FLUSHDB",
            Forget::SwapDb => "SWAPDB",
        }
    }

    /// The `refused` code of `LOCK.INFO` for a newcomer afterwards.
    pub fn code(self) -> &'static str {
        match self {
            Forget::Evict => "evicted",
            Forget::FlushDb => "flushed",
            Forget::SwapDb => "swapped",
            _ => "changed",
        }
    }

    /// Whether the key's whole database is quarantined (else the key).
    pub fn whole_database(self) -> bool {
        matches!(self, Forget::FlushDb | Forget::SwapDb)
    }

    /// The server options every row needs: the databases of the targets
    /// and their partners.
    pub fn opts() -> Opts {
        Opts::new().config("databases", &FORGET_DATABASES.to_string())
    }

    /// Forgets every target at once, on `c` (which is left on database 0),
    /// and checks that it took effect: the key is gone from its database,
    /// or holds what `SET` wrote.
    pub fn strike(self, c: &mut Connection, targets: &[Target]) {
        let what = self.name();
        if self == Forget::Evict {
            evict_every_key(c, targets);
        }
        for t in targets {
            select(c, t.db);
            let key = t.key.as_str();
            let reply: Value = match self {
                Forget::Del => cmd("DEL").arg(key).query(c),
                Forget::Unlink => cmd("UNLINK").arg(key).query(c),
                Forget::Set => cmd("SET").arg(key).arg("x").query(c),
                Forget::Rename => cmd("RENAME").arg(key).arg(format!("{key}:renamed")).query(c),
                Forget::Move => cmd("MOVE").arg(key).arg(t.partner()).query(c),
                Forget::Evict => Ok(Value::Okay),
                Forget::FlushDb => cmd("FLUSHDB").query(c),
                Forget::SwapDb => cmd("SWAPDB").arg(t.db).arg(t.partner()).query(c),
            }
            .unwrap_or_else(|e| panic!("{what} of {t:?}: {e}"));
            assert!(matches!(reply, Value::Okay | Value::Int(1)), "{what} of {t:?} answered {reply:?}");
            let left: Option<Vec<u8>> = cmd("GET").arg(key).query(c).unwrap_or(None);
            let exists = int(c, &["EXISTS", key]);
            match self {
                Forget::Set => assert_eq!(left.as_deref(), Some(&b"x"[..]), "{what} of {t:?}"),
                _ => assert_eq!(exists, 0, "{what} of {t:?}: the key is still there"),
            }
        }
        select(c, 0);
    }

    /// Removes what the strike left at each target, so that a newcomer may
    /// be granted the key once its quarantine ends (`SET` left a value
    /// that is no lock; the `DEL` of it is one more removal, which only
    /// keeps the same quarantine).
    pub fn clear(self, c: &mut Connection, targets: &[Target]) {
        if self != Forget::Set {
            return;
        }
        for t in targets {
            select(c, t.db);
            assert_eq!(int(c, &["DEL", &t.key]), 1);
        }
        select(c, 0);
    }
}

/// `SELECT db` on `c`.
pub fn select(c: &mut Connection, db: i64) {
    let _: () = cmd("SELECT").arg(db).query(c).unwrap_or_else(|e| panic!("SELECT {db}: {e}"));
}

/// An evicting policy and a `maxmemory` of 1 byte: each write is refused
/// after Redis evicted what it could; repeated (bounded) until every target
/// is gone. Then the limit is lifted and `noeviction` restored.
fn evict_every_key(c: &mut Connection, targets: &[Target]) {
    let evicted_before = info_field(c, "stats", "evicted_keys");
    let _: () = cmd("CONFIG").arg("SET").arg("maxmemory-policy").arg("allkeys-lru").query(c).unwrap();
    let _: () = cmd("CONFIG").arg("SET").arg("maxmemory").arg(1).query(c).unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    let gone = |c: &mut Connection| {
        targets.iter().all(|t| {
            select(c, t.db);
            int(c, &["EXISTS", &t.key]) == 0
        })
    };
    loop {
        select(c, 0);
        let _ = cmd("SET").arg("forget:trigger").arg("x").query::<Value>(c);
        if gone(c) {
            break;
        }
        assert!(Instant::now() < deadline, "maxmemory 1 did not evict every target within 5 s");
        sleep(Duration::from_millis(10));
    }
    select(c, 0);
    let _: () = cmd("CONFIG").arg("SET").arg("maxmemory").arg(0).query(c).unwrap();
    let _: () = cmd("CONFIG").arg("SET").arg("maxmemory-policy").arg("noeviction").query(c).unwrap();
    let evicted = info_field(c, "stats", "evicted_keys") - evicted_before;
    assert!(evicted >= targets.len() as i64, "{evicted} keys evicted for {} targets", targets.len());
}

/// Now on the wall clock, epoch ms (the module's clock follows it).
pub fn wall_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

/// A lock a test forgets: its key, the highest fencing token granted
/// there, and the latest deadline written to it (epoch ms).
#[derive(Clone, Debug)]
pub struct HeldLock {
    pub key: String,
    pub fence: i64,
    pub deadline_ms: i64,
}

/// The ms left in a QUARANTINE error.
pub fn quarantine_left(e: &str) -> i64 {
    assert!(e.starts_with("QUARANTINE") && e.ends_with(" ms"), "not a QUARANTINE error: {e}");
    e.split_whitespace().rev().nth(1).and_then(|n| n.parse().ok()).unwrap_or_else(|| panic!("{e}"))
}

/// A newcomer is refused `held.key` (on `c`'s database) with QUARANTINE
/// until the lock's deadline: no sooner, and no later than `late_ms` (a
/// renewal that may have landed after the deadline was read) and the
/// slack; `LOCK.INFO` says so with one of `codes`.
pub fn assert_quarantined_until(
    c: &mut Connection,
    held: &HeldLock,
    late_ms: i64,
    codes: &[&str],
    what: &str,
) {
    let e = err_text(cmd("LOCK.ACQUIRE").arg(&held.key).arg("second").arg(1_000).query(c));
    let left = quarantine_left(&e);
    let expected = held.deadline_ms - wall_ms();
    let within = |left: i64| {
        left >= expected - QUARANTINE_SLACK_MS && left <= expected + late_ms + QUARANTINE_SLACK_MS
    };
    assert!(within(left), "{what}: {left} ms left, the lock had {expected} ms: {e}");
    let (refused, info_left) = refusal(c, &held.key).unwrap_or_else(|| panic!("{what}: LOCK.INFO nil"));
    assert!(codes.contains(&refused.as_str()), "{what}: refused {refused}, expected {codes:?}");
    assert!(within(info_left), "{what}: LOCK.INFO {info_left} ms, expected {expected}");
    assert!(!is_held(c, &held.key), "{what}");
}

/// Polls (bounded) until a newcomer is granted `held.key`; asserts it was
/// not before the lock's deadline, and that its token is above the lock's.
pub fn granted_after_deadline(c: &mut Connection, held: &HeldLock, what: &str) {
    let mut granted = None;
    let within = Duration::from_millis((held.deadline_ms - wall_ms()).max(0) as u64 + 3_000);
    wait_until(within, what, || {
        match cmd("LOCK.ACQUIRE").arg(&held.key).arg("after").arg(AFTER_TTL_MS).query(c) {
            Ok(Some(fence)) => {
                granted = Some((fence, wall_ms()));
                true
            }
            Ok(None) => panic!("{what}: held by someone"),
            Err(e) => {
                assert_eq!(e.code(), Some("QUARANTINE"), "{what}: {e}");
                false
            }
        }
    });
    let (fence, at): (i64, i64) = granted.unwrap_or_default();
    assert!(
        at >= held.deadline_ms - QUARANTINE_SLACK_MS / 3,
        "{what}: granted {} ms before the deadline",
        held.deadline_ms - at
    );
    assert!(fence > held.fence, "{what}: token {fence} not above {}", held.fence);
    assert_eq!(int(c, &["LOCK.RELEASE", &held.key, "after"]), 1);
}
