//! Property tests of what the node remembers about the locks it wrote,
//! against a plain model, for any sequence of writes, removals, flushes,
//! swaps and time passing (property 10 of docs/safety.md):
//!
//! - the sketch never under-reports a key's latest deadline in force, also
//!   when keys share a bucket (more of them than it has ways: wildcards),
//!   share a bucket and a tag (it cannot tell them apart), and ways are
//!   reused once their deadline passed; a key alone in its bucket is
//!   reported exactly;
//! - a key removed, or a database flushed or swapped, while a lock there may
//!   be in force is refused to newcomers until that lock's deadline (plus
//!   the cool-down), whatever the sketch or the per-database deadlines
//!   remembered or merged: the key's own quarantine or its database's
//!   covers it.

use std::collections::HashMap;

use proptest::prelude::*;

use super::*;

const NOW: i64 = 1_800_000_000_000;

/// The hash of a key of the sketch test, built from its bucket and tag so
/// that keys collide on purpose. Tags 0 to 3 are the edges the sketch
/// clamps (0 reads as 1, `TAG_MAX` as `TAG_MAX - 1`, so each pair is one
/// tag); the others are ordinary tags.
fn raw_hash(bucket: u8, tag: u8) -> u64 {
    let tag = match tag {
        0 => 0,
        1 => 1,
        2 => TAG_MAX - 1,
        3 => TAG_MAX,
        t => u64::from(t),
    };
    (tag << DEADLINE_BITS) | u64::from(bucket)
}

#[derive(Clone, Debug)]
enum SketchOp {
    /// A lock written at pool key `key`, until now + `ahead_ms` (in the
    /// past too: a write the sketch may ignore).
    Note {
        key: usize,
        ahead_ms: i64,
    },
    Advance {
        ms: i64,
    },
}

fn sketch_op(keys: usize) -> impl Strategy<Value = SketchOp> {
    prop_oneof![
        4 => (0..keys, -300i64..3_000).prop_map(|(key, ahead_ms)| SketchOp::Note { key, ahead_ms }),
        1 => (0i64..1_500).prop_map(|ms| SketchOp::Advance { ms }),
    ]
}

/// Ten keys over three buckets and eight tags: buckets of more keys than
/// ways, and keys that share bucket and tag.
fn sketch_case() -> impl Strategy<Value = (Vec<u64>, i64, Vec<SketchOp>)> {
    (prop::collection::vec((0u8..3, 0u8..8), 10), 0i64..400).prop_flat_map(|(keys, cool_down)| {
        let hashes: Vec<u64> = keys.iter().map(|&(bucket, tag)| raw_hash(bucket, tag)).collect();
        let count = hashes.len();
        (Just(hashes), Just(cool_down), prop::collection::vec(sketch_op(count), 1..120))
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn the_sketch_never_under_reports_a_deadline_in_force((hashes, cool_down, ops) in sketch_case()) {
        let mut sketch = DeadlineSketch::default();
        // The latest deadline written per pool key.
        let mut model: HashMap<usize, i64> = HashMap::new();
        let mut now = NOW;
        for op in ops {
            match op {
                SketchOp::Note { key, ahead_ms } => {
                    let deadline = now + ahead_ms;
                    sketch.note(hashes[key], deadline, now, cool_down);
                    let latest = model.entry(key).or_insert(deadline);
                    *latest = (*latest).max(deadline);
                }
                SketchOp::Advance { ms } => now += ms,
            }
            for (&key, &deadline) in &model {
                let reported = sketch.latest(hashes[key], now, cool_down);
                if let Some(r) = reported {
                    prop_assert!(r + cool_down > now, "key {key}: reported {r}, over at {now}");
                }
                if deadline + cool_down <= now {
                    continue;
                }
                prop_assert!(
                    reported >= Some(deadline),
                    "key {key} (bucket {}): reported {reported:?}, wrote {deadline}",
                    hashes[key] as usize & (SKETCH_BUCKETS - 1)
                );
                // Alone in its bucket: nothing to merge, so exact.
                let bucket = |h: u64| bucket_and_tag(h).0;
                let alone = model.keys().all(|&k| k == key || bucket(hashes[k]) != bucket(hashes[key]));
                if alone {
                    prop_assert_eq!(reported, Some(deadline), "key {} alone in its bucket", key);
                }
            }
        }
    }
}

/// Databases of the node test: low ones with a slot of their own, and
/// three past the last slot, which share it.
const DBS: [i32; 6] = [0, 1, 5, DB_SLOTS as i32 - 1, DB_SLOTS as i32, DB_SLOTS as i32 + 2];
const KEYS: [&[u8]; 4] = [b"a", b"b", b"orders:1", b"orders:2"];

#[derive(Clone, Debug)]
enum Op {
    /// A lock written at a key (a grant, a renewal, an extension, a
    /// hand-off), until now + `ahead_ms`.
    Note {
        db: usize,
        key: usize,
        ahead_ms: i64,
    },
    Advance {
        ms: i64,
    },
    /// Another command removed the key (a DEL, RENAME, MOVE, eviction...).
    Remove {
        db: usize,
        key: usize,
    },
    /// FLUSHDB of one database, or FLUSHALL (`db` None).
    Flush {
        db: Option<usize>,
    },
    Swap {
        a: usize,
        b: usize,
    },
}

fn op() -> impl Strategy<Value = Op> {
    let (db, key) = (0..DBS.len(), 0..KEYS.len());
    prop_oneof![
        5 => (db.clone(), key.clone(), -300i64..3_000).prop_map(|(db, key, ahead_ms)| Op::Note { db, key, ahead_ms }),
        2 => (0i64..1_000).prop_map(|ms| Op::Advance { ms }),
        2 => (db.clone(), key).prop_map(|(db, key)| Op::Remove { db, key }),
        1 => prop::option::of(db.clone()).prop_map(|db| Op::Flush { db }),
        1 => (db.clone(), db).prop_filter("two databases", |(a, b)| a != b).prop_map(|(a, b)| Op::Swap { a, b }),
    ]
}

/// What must hold: the locks present and the latest deadline written to
/// each since it was last removed (keys follow a swap to their new
/// database), and the removals that must refuse newcomers until a given
/// instant (a holder of a removed lock still believes it holds it, in the
/// database it took it in).
#[derive(Default)]
struct Model {
    present: HashMap<(i32, usize), i64>,
    refuse: Vec<(i32, usize, i64)>,
}

impl Model {
    fn forget(&mut self, db: i32, key: usize, now: i64, cool_down: i64) {
        if let Some(deadline) = self.present.remove(&(db, key)) {
            if deadline + cool_down > now {
                self.refuse.push((db, key, deadline + cool_down));
            }
        }
    }

    fn forget_db(&mut self, db: i32, now: i64, cool_down: i64) {
        for key in 0..KEYS.len() {
            self.forget(db, key, now, cool_down);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn a_lock_removed_in_force_is_refused_until_its_latest_deadline(
        cool_down in 0i64..400,
        ops in prop::collection::vec(op(), 1..80),
    ) {
        let mut f = Forgetting::default();
        let mut model = Model::default();
        let mut now = NOW;
        for op in ops {
            match op {
                Op::Note { db, key, ahead_ms } => {
                    let (db, deadline) = (DBS[db], now + ahead_ms);
                    f.note(db, key_hash(db, KEYS[key]), deadline, now, cool_down);
                    let latest = model.present.entry((db, key)).or_insert(deadline);
                    *latest = (*latest).max(deadline);
                }
                Op::Advance { ms } => now += ms,
                Op::Remove { db, key } => {
                    f.key_changed(DBS[db], KEYS[key], Cause::Changed("del".into()), now, cool_down);
                    model.forget(DBS[db], key, now, cool_down);
                }
                Op::Flush { db: Some(db) } => {
                    f.flushed(DBS[db], now, cool_down);
                    model.forget_db(DBS[db], now, cool_down);
                }
                Op::Flush { db: None } => {
                    f.flushed(ALL_DBS, now, cool_down);
                    for db in DBS {
                        model.forget_db(db, now, cool_down);
                    }
                }
                Op::Swap { a, b } => {
                    let (a, b) = (DBS[a], DBS[b]);
                    f.swapped(a, b, now, cool_down);
                    // The holders of both databases' locks lost them where
                    // they took them; the locks themselves moved.
                    let moved: Vec<((i32, usize), i64)> =
                        model.present.iter().filter(|((db, _), _)| *db == a || *db == b).map(|(k, d)| (*k, *d)).collect();
                    for &((db, key), deadline) in &moved {
                        if deadline + cool_down > now {
                            model.refuse.push((db, key, deadline + cool_down));
                        }
                        model.present.remove(&(db, key));
                    }
                    for ((db, key), deadline) in moved {
                        model.present.insert((if db == a { b } else { a }, key), deadline);
                    }
                }
            }
            model.refuse.retain(|&(_, _, until)| until > now);
            for &(db, key, until) in &model.refuse {
                let refused = f.refusal(db, KEYS[key], now);
                prop_assert!(
                    refused.as_ref().is_some_and(|q| q.until_ms >= until),
                    "db {db} key {key}: must be refused until {until} (now {now}), refusal {refused:?}"
                );
            }
        }
    }
}
