//! The most contended keys of a node, in fixed memory: the Space-Saving
//! algorithm (Metwally, Agrawal, El Abbadi, "Efficient Computation of
//! Frequent and Top-k Elements in Data Streams", ICDT 2005), with decay.
//!
//! Why: an exact count per key grows with every distinct key ever contended
//! (unbounded, and a client choosing key names chooses our memory).
//! Space-Saving keeps [`SLOTS`] counters and still names every heavy key,
//! with a known overestimate per counter. On a key that is not counted, it
//! takes over the smallest counter and adds one to it; the old value is the
//! new key's `error`.
//!
//! Guarantees. Call a key's "true count" its contended attempts, halved
//! (rounding down) at each decay like the table's counts, and `S` the sum
//! of the table's counts. For every key, at any time:
//! - `count >= true count` (never undercounts) and
//!   `count - error <= true count`, with `error <= count`;
//! - a key whose true count exceeds `S / SLOTS` is in the table.
//!
//! Without a decay in between, `S` is the number of attempts recorded, so
//! every key with more than `1 / SLOTS` of the attempts is listed.
//!
//! Decay: the table shows recent contention. Every [`HALF_LIFE_MS`] (on a
//! fixed grid from the first call, applied lazily by `record` and `top`, no
//! timer) counts are halved rounding down, errors halved rounding up (so
//! `count - error` stays a lower bound) and capped at the count, and keys
//! whose count reaches 0 leave the table.
//!
//! Keys: a key is (database, first [`KEY_BYTES_MAX`] bytes, truncated?).
//! Keys longer than the bound that share their first `KEY_BYTES_MAX` bytes
//! are counted together, as one key marked `truncated`.
//!
//! Cost: `record` compares with each of the `SLOTS` keys (bytes only when
//! database and length match) and never allocates; `top` allocates its
//! answer.

/// Counters kept: keys with more than 1/16 of recent contention are listed.
pub const SLOTS: usize = 16;
/// Key bytes kept per counter.
pub const KEY_BYTES_MAX: usize = 128;
/// Counts halve every minute: a key contended a minute ago weighs half of
/// one contended now.
pub const HALF_LIFE_MS: i64 = 60_000;

const _: () = assert!(SLOTS > 0 && KEY_BYTES_MAX > 0 && HALF_LIFE_MS > 0);
// Fixed memory whatever the keys: the slots plus a little bookkeeping.
const _: () = assert!(std::mem::size_of::<HotKeys>() <= SLOTS * (KEY_BYTES_MAX + 48) + 32);

/// One row of [`HotKeys::top`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HotKey {
    pub db: i32,
    /// At most `KEY_BYTES_MAX` bytes: the key, or its prefix if `truncated`.
    pub key: Vec<u8>,
    pub truncated: bool,
    /// An upper bound of the key's recent contended attempts.
    pub count: u64,
    /// How much `count` may overestimate: `count - error` is a lower bound.
    pub error: u64,
}

#[derive(Clone, Copy, Debug)]
struct Slot {
    db: i32,
    key: [u8; KEY_BYTES_MAX],
    key_len: usize,
    truncated: bool,
    /// 0 for a free slot.
    count: u64,
    error: u64,
}

impl Slot {
    const FREE: Slot =
        Slot { db: 0, key: [0; KEY_BYTES_MAX], key_len: 0, truncated: false, count: 0, error: 0 };

    fn key(&self) -> &[u8] {
        self.key.get(..self.key_len).unwrap_or(&[])
    }

    fn counts(&self, db: i32, kept: &[u8], truncated: bool) -> bool {
        self.count > 0 && self.db == db && self.truncated == truncated && self.key() == kept
    }

    /// Gives the slot to another key, which inherits its count as error.
    fn take_over(&mut self, db: i32, kept: &[u8], truncated: bool) {
        let inherited = self.count;
        *self = Slot::FREE;
        for (to, from) in self.key.iter_mut().zip(kept) {
            *to = *from;
        }
        self.key_len = kept.len().min(KEY_BYTES_MAX);
        self.db = db;
        self.truncated = truncated;
        self.count = inherited.saturating_add(1);
        self.error = inherited;
    }

    /// `halvings` decays at once.
    fn halve(&mut self, halvings: u32) {
        let count = self.count.checked_shr(halvings).unwrap_or(0);
        if count == 0 {
            *self = Slot::FREE;
            return;
        }
        self.error = halve_up(self.error, halvings).min(count);
        self.count = count;
    }

    fn to_hot_key(self) -> HotKey {
        HotKey {
            db: self.db,
            key: self.key().to_vec(),
            truncated: self.truncated,
            count: self.count,
            error: self.error,
        }
    }
}

/// `value / 2^halvings`, rounded up.
fn halve_up(value: u64, halvings: u32) -> u64 {
    match value.checked_shr(halvings) {
        Some(down) if down << halvings == value => down,
        Some(down) => down.saturating_add(1),
        None => u64::from(value > 0),
    }
}

/// The table; see the module doc for what it guarantees.
#[derive(Clone, Debug)]
pub struct HotKeys {
    slots: [Slot; SLOTS],
    /// Where the decay grid stands: the last halving, or the first call.
    epoch_ms: Option<i64>,
}

impl Default for HotKeys {
    fn default() -> Self {
        Self::new()
    }
}

impl HotKeys {
    pub const fn new() -> HotKeys {
        HotKeys { slots: [Slot::FREE; SLOTS], epoch_ms: None }
    }

    /// Counts one contended attempt on `key` of database `db`.
    pub fn record(&mut self, db: i32, key: &[u8], now_ms: i64) {
        self.decay(now_ms);
        let truncated = key.len() > KEY_BYTES_MAX;
        let kept = key.get(..KEY_BYTES_MAX).unwrap_or(key);
        if let Some(slot) = self.slots.iter_mut().find(|s| s.counts(db, kept, truncated)) {
            slot.count = slot.count.saturating_add(1);
            return;
        }
        // A free slot has count 0, so the smallest counter is a free one if
        // there is one.
        if let Some(smallest) = self.slots.iter_mut().min_by_key(|s| s.count) {
            smallest.take_over(db, kept, truncated);
        }
    }

    /// Up to `n` keys, the most contended first (ties: smaller error, then
    /// database and key, so the order is stable).
    pub fn top(&mut self, n: usize, now_ms: i64) -> Vec<HotKey> {
        self.decay(now_ms);
        let mut live: Vec<&Slot> = self.slots.iter().filter(|s| s.count > 0).collect();
        live.sort_by(|a, b| {
            (b.count, a.error, a.db, a.key(), a.truncated).cmp(&(
                a.count,
                b.error,
                b.db,
                b.key(),
                b.truncated,
            ))
        });
        live.into_iter().take(n).map(|s| s.to_hot_key()).collect()
    }

    /// Applies the halvings due by `now_ms`. A clock that steps back
    /// applies none.
    fn decay(&mut self, now_ms: i64) {
        let epoch = *self.epoch_ms.get_or_insert(now_ms);
        let halvings = now_ms.saturating_sub(epoch) / HALF_LIFE_MS;
        if halvings <= 0 {
            return;
        }
        self.epoch_ms = Some(epoch.saturating_add(halvings.saturating_mul(HALF_LIFE_MS)));
        let halvings = u32::try_from(halvings).unwrap_or(u32::MAX);
        for slot in &mut self.slots {
            slot.halve(halvings);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;

    type Id = (i32, Vec<u8>, bool);

    fn id(db: i32, key: &[u8]) -> Id {
        let truncated = key.len() > KEY_BYTES_MAX;
        (db, key[..key.len().min(KEY_BYTES_MAX)].to_vec(), truncated)
    }

    fn row(db: i32, key: &[u8], count: u64, error: u64) -> HotKey {
        HotKey { db, key: key.to_vec(), truncated: false, count, error }
    }

    fn all(t: &mut HotKeys, now_ms: i64) -> Vec<HotKey> {
        t.top(SLOTS, now_ms)
    }

    #[test]
    fn counts_and_orders_keys() {
        let mut t = HotKeys::new();
        for key in [&b"a"[..], b"b", b"b", b"c", b"b", b"a"] {
            t.record(0, key, 0);
        }
        t.record(3, b"a", 0);
        assert_eq!(
            all(&mut t, 0),
            vec![row(0, b"b", 3, 0), row(0, b"a", 2, 0), row(0, b"c", 1, 0), row(3, b"a", 1, 0)],
            "highest first; databases apart; ties by database then key"
        );
        assert_eq!(t.top(2, 0), vec![row(0, b"b", 3, 0), row(0, b"a", 2, 0)]);
        assert!(t.top(0, 0).is_empty());
        assert!(HotKeys::default().top(SLOTS, 0).is_empty());
    }

    #[test]
    fn a_new_key_takes_over_the_smallest_counter() {
        let mut t = HotKeys::new();
        for i in 0..SLOTS {
            for _ in 0..=i {
                t.record(0, &[b'k', i as u8], 0);
            }
        }
        t.record(0, b"new", 0);
        let rows = all(&mut t, 0);
        assert_eq!(rows.len(), SLOTS);
        assert!(!rows.iter().any(|r| r.key == [b'k', 0]), "k0 had the smallest count");
        let new = rows.iter().find(|r| r.key == b"new").unwrap();
        assert_eq!((new.count, new.error), (2, 1), "inherits k0's count as error");
        // Ties between equal counts: the smaller error first.
        let k1 = rows.iter().position(|r| r.key == [b'k', 1]).unwrap();
        let new = rows.iter().position(|r| r.key == b"new").unwrap();
        assert!(k1 < new, "k1 (2, error 0) before new (2, error 1)");
    }

    #[test]
    fn long_keys_are_kept_truncated_and_share_their_prefix() {
        let mut t = HotKeys::new();
        let exact = vec![b'x'; KEY_BYTES_MAX];
        let mut long1 = exact.clone();
        long1.push(1);
        let mut long2 = exact.clone();
        long2.extend_from_slice(b"more bytes");
        t.record(0, &long1, 0);
        t.record(0, &long2, 0);
        t.record(0, &exact, 0);
        let rows = all(&mut t, 0);
        assert_eq!(
            rows,
            vec![
                HotKey { db: 0, key: exact.clone(), truncated: true, count: 2, error: 0 },
                HotKey { db: 0, key: exact.clone(), truncated: false, count: 1, error: 0 },
            ],
            "the two long keys count together; the key of exactly the bound stays apart"
        );
    }

    #[test]
    fn counts_halve_every_half_life_on_a_fixed_grid() {
        let mut t = HotKeys::new();
        let start = 5_000;
        for _ in 0..8 {
            t.record(0, b"a", start);
        }
        t.record(0, b"b", start);
        assert_eq!(all(&mut t, start + HALF_LIFE_MS - 1), vec![row(0, b"a", 8, 0), row(0, b"b", 1, 0)]);
        // A halving 10 ms late: the next is due at start + 2 half-lives
        // all the same.
        assert_eq!(all(&mut t, start + HALF_LIFE_MS + 10), vec![row(0, b"a", 4, 0)], "b fell to 0 and left");
        assert_eq!(all(&mut t, start + 2 * HALF_LIFE_MS - 1), vec![row(0, b"a", 4, 0)]);
        assert_eq!(all(&mut t, start + 2 * HALF_LIFE_MS), vec![row(0, b"a", 2, 0)]);
        for _ in 0..6 {
            t.record(0, b"a", start + 2 * HALF_LIFE_MS);
        }
        assert_eq!(
            all(&mut t, start + 4 * HALF_LIFE_MS),
            vec![row(0, b"a", 2, 0)],
            "two halvings at once: 8 / 4"
        );
        assert!(all(&mut t, i64::MAX).is_empty(), "every count decays to 0");
    }

    #[test]
    fn a_clock_stepping_back_decays_nothing() {
        let mut t = HotKeys::new();
        t.record(0, b"a", 10 * HALF_LIFE_MS);
        t.record(0, b"a", 0);
        t.record(0, b"a", i64::MIN);
        assert_eq!(all(&mut t, 10 * HALF_LIFE_MS), vec![row(0, b"a", 3, 0)]);
    }

    #[test]
    fn errors_halve_rounding_up_within_the_count() {
        let mut s = Slot { count: 7, error: 5, ..Slot::FREE };
        s.halve(1);
        assert_eq!((s.count, s.error), (3, 3), "ceil(5 / 2) = 3, within the count");
        let mut s = Slot { count: 9, error: 5, ..Slot::FREE };
        s.halve(1);
        assert_eq!((s.count, s.error), (4, 3));
        s.halve(1);
        assert_eq!((s.count, s.error), (2, 2));
        assert_eq!(halve_up(8, 2), 2);
        assert_eq!(halve_up(9, 2), 3);
        assert_eq!(halve_up(0, 70), 0);
        assert_eq!(halve_up(1, 70), 1);
        assert_eq!(halve_up(u64::MAX, 1), 1 << 63);
    }

    /// A stream over a few keys (so some are heavy), with some long ones
    /// sharing a prefix and two databases.
    fn stream() -> impl Strategy<Value = Vec<(i32, Vec<u8>)>> {
        let key = prop_oneof![
            4 => (0u8..4).prop_map(|k| vec![b'h', k]),
            4 => (0u8..60).prop_map(|k| vec![b'k', k]),
            1 => (0usize..3).prop_map(|extra| vec![b'p'; KEY_BYTES_MAX + extra]),
        ];
        proptest::collection::vec((0i32..2, key), 0..600)
    }

    /// The module doc's guarantees, against the true counts `truth`.
    fn check(t: &mut HotKeys, truth: &HashMap<Id, u64>, now_ms: i64) -> Result<(), TestCaseError> {
        let rows = all(t, now_ms);
        let sum: u64 = rows.iter().map(|r| r.count).sum();
        prop_assert!(rows.len() <= SLOTS);
        for r in &rows {
            let real = truth.get(&(r.db, r.key.clone(), r.truncated)).copied().unwrap_or(0);
            prop_assert!(r.count >= real, "{:?} undercounts {}", r, real);
            prop_assert!(r.count - r.error <= real, "{:?}: lower bound above {}", r, real);
            prop_assert!(r.error <= r.count);
            prop_assert!(r.key.len() <= KEY_BYTES_MAX);
        }
        for ((db, key, truncated), &real) in truth {
            if real * SLOTS as u64 > sum {
                let listed = rows.iter().any(|r| (r.db, &r.key, r.truncated) == (*db, key, *truncated));
                prop_assert!(listed, "{:?} with {} of {} is not listed", (db, key), real, sum);
            }
        }
        Ok(())
    }

    proptest! {
        /// Without decay: the Space-Saving guarantees with `S` = attempts.
        #[test]
        fn heavy_keys_are_listed_and_never_undercounted(stream in stream()) {
            let mut t = HotKeys::new();
            let mut truth: HashMap<Id, u64> = HashMap::new();
            for (db, key) in &stream {
                t.record(*db, key, 0);
                *truth.entry(id(*db, key)).or_default() += 1;
            }
            let sum: u64 = all(&mut t, 0).iter().map(|r| r.count).sum();
            prop_assert_eq!(sum, stream.len() as u64, "each attempt adds exactly one");
            check(&mut t, &truth, 0)?;
        }

        /// With decay: the same guarantees against counts halved alike.
        #[test]
        fn guarantees_hold_across_decays(stream in stream(), steps in proptest::collection::vec(0i64..HALF_LIFE_MS / 3, 600)) {
            let mut t = HotKeys::new();
            let mut truth: HashMap<Id, u64> = HashMap::new();
            let mut now = 0;
            // The table's grid starts at its first call.
            let mut next_halving = None;
            for ((db, key), step) in stream.iter().zip(&steps) {
                now += step;
                let next_halving = next_halving.get_or_insert(now + HALF_LIFE_MS);
                while now >= *next_halving {
                    truth.values_mut().for_each(|c| *c /= 2);
                    *next_halving += HALF_LIFE_MS;
                }
                t.record(*db, key, now);
                *truth.entry(id(*db, key)).or_default() += 1;
                check(&mut t, &truth, now)?;
            }
        }

        /// Many distinct huge keys: never more than `SLOTS` rows of at most
        /// `KEY_BYTES_MAX` bytes, the counts still adding up.
        #[test]
        fn memory_stays_bounded_under_distinct_huge_keys(seeds in proptest::collection::vec(any::<u64>(), 1..300), len in KEY_BYTES_MAX..4 * KEY_BYTES_MAX) {
            let mut t = HotKeys::new();
            for seed in &seeds {
                let mut key = seed.to_le_bytes().repeat(len / 8 + 1);
                key.truncate(len);
                t.record(0, &key, 0);
            }
            let rows = all(&mut t, 0);
            prop_assert_eq!(rows.len(), seeds.iter().collect::<std::collections::HashSet<_>>().len().min(SLOTS));
            prop_assert!(rows.iter().all(|r| r.key.len() == KEY_BYTES_MAX && r.truncated == (len > KEY_BYTES_MAX)));
            prop_assert_eq!(rows.iter().map(|r| r.count).sum::<u64>(), seeds.len() as u64);
        }
    }
}
