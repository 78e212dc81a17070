//! What the node may have forgotten, and for how long it must refuse grants
//! because of it (the safety property "nothing forgets a held lock
//! silently").
//!
//! A lock can vanish from a key without any lock command: eviction under
//! `maxmemory`, `FLUSHALL` / `FLUSHDB`, `SWAPDB`, and `DEL`, `RENAME`,
//! `MOVE`, `RESTORE`, `SET` or any other command run on the key. Its holder
//! still believes it holds the lock until its deadline, so handing the key
//! to someone else before then would give two holders. The adapter learns
//! of each such event (keyspace events per key, server events per
//! database) after the fact, when the old value is gone; this module
//! remembers enough to bound the deadline of what was lost, and keeps the
//! quarantines that follow:
//!
//! - [`DeadlineSketch`]: for every key this node wrote a lock to, the
//!   latest deadline it wrote, in a fixed-size table (a set-associative
//!   cache of (key fingerprint, deadline), O(1) per write and per lookup,
//!   never more memory). It can only over-state a deadline: a way that must
//!   be reused while live becomes a wildcard for its whole bucket.
//! - [`Forgetting::latest_by_db`]: the latest deadline written per
//!   database, for flushes and swaps (one number per database).
//! - a floor: locks this process did not write (restored from disk, taken
//!   over by a promotion, imported by a slot migration) are unknown to both,
//!   so after such an import every key and database counts as holding a
//!   lock until the longest TTL has run out.
//! - quarantines of keys (bounded: past [`KEY_QUARANTINES_MAX`] a key's
//!   whole database is quarantined instead) and of databases.
//!
//! Every "deadline" here is a lock deadline on the module clock; a lock is
//! still in force until `deadline + cool_down` (the lock-delay and the
//! restart grace, which keep an expired lock's slot too), so that is how
//! long a quarantine lasts.

use std::collections::HashMap;

/// Buckets of the deadline sketch (a power of two).
pub const SKETCH_BUCKETS: usize = 8192;
/// Ways per bucket: this many keys whose fingerprints share a bucket are
/// told apart before the bucket needs a wildcard.
pub const SKETCH_WAYS: usize = 4;
/// Most keys quarantined at once; one more quarantines its database
/// instead (memory stays bounded whatever an operator deletes).
pub const KEY_QUARANTINES_MAX: usize = 10_000;
/// Databases with a slot of their own in the per-database deadlines and
/// quarantines; databases above share the last one (which then only
/// over-states: a flush of one of them refuses grants in all of them).
pub const DB_SLOTS: usize = 64;

const _: () = assert!(SKETCH_BUCKETS.is_power_of_two());

/// A way of the sketch: a 22-bit key fingerprint above a 42-bit deadline
/// (epoch ms, enough until the year 2109). 0 is an empty way.
const DEADLINE_BITS: u32 = 42;
const DEADLINE_MAX: u64 = (1 << DEADLINE_BITS) - 1;
const TAG_MAX: u64 = (1 << (64 - DEADLINE_BITS)) - 1;
/// A way whose deadline holds for every key of its bucket.
const WILDCARD: u64 = TAG_MAX;

/// A key's identity for the sketch: its database and name, hashed eight
/// bytes at a time with a folded multiply (the 128-bit product's halves
/// XORed, as foldhash does: one `mul` on x86-64), then mixed so that the low
/// bits pick the bucket well. On every grant: a key of 10 to 40 bytes costs
/// a handful of multiplications. (Multiply-and-rotate, as FxHash does, let
/// a difference in a word's top byte cancel one in the next word's low
/// byte: 1.2% of the keys `orders:0` to `orders:32767` shared a hash.)
pub fn key_hash(db: i32, key: &[u8]) -> u64 {
    const K: u64 = 0x517c_c1b7_2722_0a95;
    let add = |h: u64, word: u64| {
        let product = u128::from(h ^ word) * u128::from(K);
        (product as u64) ^ ((product >> 64) as u64)
    };
    let mut h = add(0, u64::from(db as u32) ^ ((key.len() as u64) << 32));
    let mut chunks = key.chunks_exact(8);
    for chunk in &mut chunks {
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        h = add(h, u64::from_le_bytes(word));
    }
    let rest = chunks.remainder();
    if !rest.is_empty() {
        let mut word = [0u8; 8];
        if let Some(dst) = word.get_mut(..rest.len()) {
            dst.copy_from_slice(rest);
        }
        h = add(h, u64::from_le_bytes(word));
    }
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h
}

fn bucket_and_tag(hash: u64) -> (usize, u64) {
    let bucket = (hash as usize) & (SKETCH_BUCKETS - 1);
    // The tag comes from the high bits (the bucket used the low ones); 0
    // marks an empty way and TAG_MAX a wildcard, so neither is a key's.
    let tag = (hash >> DEADLINE_BITS).clamp(1, TAG_MAX - 1);
    (bucket, tag)
}

fn way(tag: u64, deadline_ms: i64) -> u64 {
    let deadline = u64::try_from(deadline_ms).unwrap_or(0).min(DEADLINE_MAX);
    (tag << DEADLINE_BITS) | deadline
}

fn way_tag(way: u64) -> u64 {
    way >> DEADLINE_BITS
}

fn way_deadline(way: u64) -> i64 {
    i64::try_from(way & DEADLINE_MAX).unwrap_or(i64::MAX)
}

/// The latest deadline written per key, approximately: never below the
/// truth, in a fixed table.
pub struct DeadlineSketch {
    ways: Vec<u64>,
}

impl Default for DeadlineSketch {
    fn default() -> Self {
        DeadlineSketch { ways: vec![0; SKETCH_BUCKETS * SKETCH_WAYS] }
    }
}

impl DeadlineSketch {
    fn bucket_mut(&mut self, bucket: usize) -> &mut [u64] {
        let start = bucket * SKETCH_WAYS;
        self.ways.get_mut(start..start + SKETCH_WAYS).unwrap_or_default()
    }

    fn bucket(&self, bucket: usize) -> &[u64] {
        let start = bucket * SKETCH_WAYS;
        self.ways.get(start..start + SKETCH_WAYS).unwrap_or_default()
    }

    /// Records that the key with `hash` holds a lock until `deadline_ms`. A
    /// way is free for reuse once its deadline plus `cool_down_ms` has
    /// passed at `now_ms`; when every way of the bucket is still in force,
    /// the one that ends first becomes the bucket's wildcard, so no deadline
    /// in force is ever forgotten.
    pub fn note(&mut self, hash: u64, deadline_ms: i64, now_ms: i64, cool_down_ms: i64) {
        let (bucket, tag) = bucket_and_tag(hash);
        let ways = self.bucket_mut(bucket);
        let live = |w: u64| w != 0 && way_deadline(w).saturating_add(cool_down_ms) > now_ms;
        if let Some(w) = ways.iter_mut().find(|w| live(**w) && way_tag(**w) == tag) {
            *w = way(tag, way_deadline(*w).max(deadline_ms));
            return;
        }
        if let Some(w) = ways.iter_mut().find(|w| !live(**w)) {
            *w = way(tag, deadline_ms);
            return;
        }
        // Every way in force: merge into the wildcard, or make the way that
        // ends first the wildcard (it keeps its own deadline's cover).
        let merge = match ways.iter().position(|&w| way_tag(w) == WILDCARD) {
            Some(at) => Some(at),
            None => ways.iter().enumerate().min_by_key(|(_, &w)| way_deadline(w)).map(|(at, _)| at),
        };
        if let Some(w) = merge.and_then(|at| ways.get_mut(at)) {
            *w = way(WILDCARD, way_deadline(*w).max(deadline_ms));
        }
        invariant!(
            deadline_ms.saturating_add(cool_down_ms) <= now_ms
                || self
                    .latest(hash, now_ms, cool_down_ms)
                    .is_some_and(|d| d >= deadline_ms.min(DEADLINE_MAX as i64)),
            "a deadline in force is never forgotten"
        );
    }

    /// The latest deadline still in force at `now_ms` (with `cool_down_ms`)
    /// that may be the key's: its own way, or its bucket's wildcard.
    pub fn latest(&self, hash: u64, now_ms: i64, cool_down_ms: i64) -> Option<i64> {
        let (bucket, tag) = bucket_and_tag(hash);
        self.bucket(bucket)
            .iter()
            .filter(|&&w| w != 0 && (way_tag(w) == tag || way_tag(w) == WILDCARD))
            .map(|&w| way_deadline(w))
            .filter(|d| d.saturating_add(cool_down_ms) > now_ms)
            .max()
    }
}

/// Why grants on a key or a database are refused for now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Cause {
    /// The key was evicted (`maxmemory`) while its lock may have been held.
    Evicted,
    /// Redis expired the key while its lock may have been held: its native
    /// expiry was shortened (`EXPIRE`), or the wall clock jumped forward
    /// beyond the tolerance. Judged by the deadlines this process wrote
    /// only (see [`Forgetting::key_changed`]).
    Expired,
    /// Another command removed or changed the key (the keyspace event:
    /// `del`, `rename_from`, `move_from`, `set`, `restore`, ...).
    Changed(Box<str>),
    /// `FLUSHDB` or `FLUSHALL`.
    Flushed,
    /// `SWAPDB` with this other database.
    Swapped(i32),
    /// More keys lost their locks at once than the node keeps apart.
    TooManyKeys,
    /// The key's lock arrived from another node (a slot migration): its
    /// record may be behind its holder's lease (the exporter a promoted
    /// replica in its failover quarantine), so it is not taken over by
    /// expiry before the importer's quarantine has run; its holder's
    /// release ends this at once.
    Imported,
}

impl Cause {
    /// The cause a keyspace event names (`evicted`, `expired`, or another
    /// command's: `del`, `set`, `restore`, ...).
    pub fn of_event(event: &[u8]) -> Cause {
        match event {
            b"evicted" => Cause::Evicted,
            b"expired" => Cause::Expired,
            b"imported" => Cause::Imported,
            other => Cause::Changed(String::from_utf8_lossy(other).into()),
        }
    }

    /// The code shown in `LOCK.INFO` and `INFO lock`.
    pub fn code(&self) -> &'static str {
        match self {
            Cause::Evicted => "evicted",
            Cause::Expired => "expired",
            Cause::Changed(_) => "changed",
            Cause::Flushed => "flushed",
            Cause::Swapped(_) => "swapped",
            Cause::TooManyKeys => "overflow",
            Cause::Imported => "imported",
        }
    }

    /// What happened, in words, for the error reply and the log.
    pub fn describe(&self, db: i32) -> String {
        let scope = if db == ALL_DBS { "every database".to_string() } else { format!("db {db}") };
        match self {
            Cause::Evicted => "this key's lock was evicted (maxmemory-policy) while it may have been held".into(),
            Cause::Expired => "this key expired while its lock may have been held (an EXPIRE shortened it, or the \
                               wall clock jumped forward beyond lock.clock-jump-tolerance-ms)"
                .into(),
            Cause::Changed(event) => format!(
                "this key's lock was removed or changed by another command ({event}) while it may have been held; \
                 free a lock on purpose with LOCK.REVOKE"
            ),
            Cause::Flushed => format!("{scope} was flushed while it may have held locks"),
            Cause::Swapped(other) => {
                format!("{scope} was swapped with db {other} (SWAPDB) while either may have held locks")
            }
            Cause::TooManyKeys => format!("more than {KEY_QUARANTINES_MAX} keys of {scope} lost their locks at once"),
            Cause::Imported => "this key's lock arrived from another node by a slot migration, and its record may \
                                be behind its holder's lease: it is not taken over by expiry before this node's \
                                quarantine has run since (its holder's release ends this)"
                .into(),
        }
    }
}

/// The database slot of "every database" (a FLUSHALL while imported locks
/// may be anywhere).
pub const ALL_DBS: i32 = -1;

/// A quarantine in force: until when (module clock) and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Quarantined {
    pub until_ms: i64,
    pub cause: Cause,
    /// The database it covers ([`ALL_DBS`] for every one), or the key's.
    pub db: i32,
    /// A quarantine of one key (else of its database).
    pub key: bool,
}

impl Quarantined {
    pub fn left_ms(&self, now_ms: i64) -> i64 {
        self.until_ms.saturating_sub(now_ms).max(0)
    }
}

/// A removal quarantine as the node's ledger keeps it
/// (`ledger.rs`): of one key of `db`, or (`key` None) of the
/// database ([`ALL_DBS`] for every one).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub db: i32,
    pub key: Option<Vec<u8>>,
    pub until_ms: i64,
    pub cause: Cause,
}

/// Everything the node keeps about what it may have forgotten.
#[derive(Default)]
pub struct Forgetting {
    /// Allocated with the first lock written (a node that never holds a
    /// lock pays nothing).
    sketch: Option<DeadlineSketch>,
    latest_by_db: Vec<i64>,
    /// Every key and database counts as holding a lock until this deadline
    /// (locks this process did not write).
    floor_ms: i64,
    keys: HashMap<(i32, Vec<u8>), (i64, Cause)>,
    dbs: HashMap<i32, (i64, Cause)>,
}

fn db_slot(db: i32) -> usize {
    usize::try_from(db).unwrap_or(0).min(DB_SLOTS - 1)
}

/// Where a database's quarantine is kept: databases past the last slot
/// share it, as they share their latest deadline (a FLUSHALL quarantines
/// each slot, so a database kept apart from its slot would be missed).
fn db_scope(db: i32) -> i32 {
    if db == ALL_DBS {
        ALL_DBS
    } else {
        i32::try_from(db_slot(db)).unwrap_or(0)
    }
}

impl Forgetting {
    /// A lock at `key` (its [`key_hash`]) of `db` holds until `deadline_ms`:
    /// written by this node (a grant, a renewal, an extension, a hand-off)
    /// or found arriving by a migration.
    pub fn note(&mut self, db: i32, hash: u64, deadline_ms: i64, now_ms: i64, cool_down_ms: i64) {
        self.sketch.get_or_insert_with(DeadlineSketch::default).note(hash, deadline_ms, now_ms, cool_down_ms);
        self.raise_latest(db, deadline_ms);
    }

    /// The latest deadline of `db`'s locks is at least `deadline_ms`.
    fn raise_latest(&mut self, db: i32, deadline_ms: i64) {
        let slot = db_slot(db);
        if self.latest_by_db.len() <= slot {
            self.latest_by_db.resize(slot + 1, 0);
        }
        if let Some(latest) = self.latest_by_db.get_mut(slot) {
            *latest = (*latest).max(deadline_ms);
        }
    }

    /// Locks this process did not write may hold until `deadline_ms` (a
    /// start from disk, a promotion, a slot import: now plus the longest
    /// TTL).
    pub fn raise_floor(&mut self, deadline_ms: i64) {
        self.floor_ms = self.floor_ms.max(deadline_ms);
    }

    fn in_force(deadline_ms: i64, now_ms: i64, cool_down_ms: i64) -> Option<i64> {
        let until = deadline_ms.saturating_add(cool_down_ms);
        (until > now_ms).then_some(until)
    }

    /// The latest instant a lock at the key may still be in force, if later
    /// than now; with `floor`, counting the locks this process did not
    /// write.
    fn key_bound(&self, hash: u64, now_ms: i64, cool_down_ms: i64, floor: bool) -> Option<i64> {
        let sketched = self.sketch.as_ref().and_then(|s| s.latest(hash, now_ms, cool_down_ms));
        let floor_ms = if floor { self.floor_ms } else { i64::MIN };
        let latest = sketched.unwrap_or(i64::MIN).max(floor_ms);
        Self::in_force(latest, now_ms, cool_down_ms)
    }

    fn db_latest(&self, db: i32) -> i64 {
        self.latest_by_db.get(db_slot(db)).copied().unwrap_or(0).max(self.floor_ms)
    }

    /// Another command removed or changed the key: if a lock there may
    /// still be in force, the key is quarantined until it is not (or, past
    /// [`KEY_QUARANTINES_MAX`], its database). Returns the quarantine.
    ///
    /// Redis' own expiry ([`Cause::Expired`]) is judged by the deadlines
    /// this process wrote only: Redis expires a lock key at its backstop,
    /// after the lock's deadline and the tolerance, so an expiry of a lock
    /// restored from disk is its natural end, and the floor would
    /// quarantine every key that expires in the first TTL after a restart.
    pub fn key_changed(
        &mut self,
        db: i32,
        key: &[u8],
        cause: Cause,
        now_ms: i64,
        cool_down_ms: i64,
    ) -> Option<Quarantined> {
        let floor = cause != Cause::Expired;
        let until = self.key_bound(key_hash(db, key), now_ms, cool_down_ms, floor)?;
        Some(self.quarantine_key(db, key.to_vec(), until, cause, now_ms))
    }

    /// Quarantines `key` of `db` until `until_ms` (or, past
    /// [`KEY_QUARANTINES_MAX`], its database).
    fn quarantine_key(
        &mut self,
        db: i32,
        key: Vec<u8>,
        until_ms: i64,
        cause: Cause,
        now_ms: i64,
    ) -> Quarantined {
        let id = (db, key);
        if let Some((held_until, held_cause)) = self.keys.get_mut(&id) {
            // Already quarantined: the first cause is what happened to the
            // lock (a DEL, then the DEL of what came after, say).
            *held_until = (*held_until).max(until_ms);
            return Quarantined { until_ms: *held_until, cause: held_cause.clone(), db, key: true };
        }
        if self.keys.len() >= KEY_QUARANTINES_MAX {
            self.keys.retain(|_, (until, _)| *until > now_ms);
        }
        if self.keys.len() >= KEY_QUARANTINES_MAX {
            return self.quarantine_db(db, until_ms, Cause::TooManyKeys);
        }
        self.keys.insert(id, (until_ms, cause.clone()));
        Quarantined { until_ms, cause, db, key: true }
    }

    fn quarantine_db(&mut self, db: i32, until_ms: i64, cause: Cause) -> Quarantined {
        let entry = self.dbs.entry(db_scope(db)).or_insert((until_ms, cause.clone()));
        entry.0 = entry.0.max(until_ms);
        entry.1 = cause.clone();
        Quarantined { until_ms: entry.0, cause, db, key: false }
    }

    /// `FLUSHDB` of `db`, or `FLUSHALL` ([`ALL_DBS`]): every database whose
    /// latest lock may still be in force is quarantined until it is not.
    pub fn flushed(&mut self, db: i32, now_ms: i64, cool_down_ms: i64) -> Vec<Quarantined> {
        if db != ALL_DBS {
            return Self::in_force(self.db_latest(db), now_ms, cool_down_ms)
                .map(|until| self.quarantine_db(db, until, Cause::Flushed))
                .into_iter()
                .collect();
        }
        let mut out = Vec::new();
        if let Some(until) = Self::in_force(self.floor_ms, now_ms, cool_down_ms) {
            out.push(self.quarantine_db(ALL_DBS, until, Cause::Flushed));
        }
        let latest: Vec<(i32, i64)> = (0..self.latest_by_db.len())
            .filter_map(|slot| Some((i32::try_from(slot).ok()?, *self.latest_by_db.get(slot)?)))
            .collect();
        for (slot, latest) in latest {
            if let Some(until) = Self::in_force(latest, now_ms, cool_down_ms) {
                out.push(self.quarantine_db(slot, until, Cause::Flushed));
            }
        }
        out
    }

    /// `SWAPDB a b`: each database now holds the other's locks under the
    /// same names, so both are quarantined until the latest lock of either
    /// may be in force, and each takes on the other's latest deadline.
    pub fn swapped(&mut self, a: i32, b: i32, now_ms: i64, cool_down_ms: i64) -> Vec<Quarantined> {
        let latest = self.db_latest(a).max(self.db_latest(b));
        for db in [a, b] {
            self.raise_latest(db, latest);
        }
        let Some(until) = Self::in_force(latest, now_ms, cool_down_ms) else { return Vec::new() };
        vec![self.quarantine_db(a, until, Cause::Swapped(b)), self.quarantine_db(b, until, Cause::Swapped(a))]
    }

    /// The quarantine that refuses a new grant of `key` in `db` at `now_ms`,
    /// if any (the longest, when several apply). Quarantines that ended
    /// are dropped here.
    pub fn refusal(&mut self, db: i32, key: &[u8], now_ms: i64) -> Option<Quarantined> {
        if self.keys.is_empty() && self.dbs.is_empty() {
            return None;
        }
        let mut found: Option<Quarantined> = None;
        let mut consider = |q: Quarantined| {
            if found.as_ref().is_none_or(|f| q.until_ms > f.until_ms) {
                found = Some(q);
            }
        };
        for (scope, shown) in [(db_scope(db), db), (ALL_DBS, ALL_DBS)] {
            match self.dbs.get(&scope) {
                Some((until, _)) if *until <= now_ms => {
                    self.dbs.remove(&scope);
                }
                Some((until, cause)) => {
                    consider(Quarantined { until_ms: *until, cause: cause.clone(), db: shown, key: false })
                }
                None => {}
            }
        }
        if !self.keys.is_empty() {
            let id = (db, key.to_vec());
            match self.keys.get(&id) {
                Some((until, _)) if *until <= now_ms => {
                    self.keys.remove(&id);
                }
                Some((until, cause)) => {
                    consider(Quarantined { until_ms: *until, cause: cause.clone(), db, key: true })
                }
                None => {}
            }
        }
        found
    }

    /// The key and database quarantines in force at `now_ms`, for the
    /// ledger.
    pub fn quarantines_in_force(&self, now_ms: i64) -> Vec<Entry> {
        let keys =
            self.keys.iter().filter(|(_, (until, _))| *until > now_ms).map(|((db, key), (until, cause))| {
                Entry { db: *db, key: Some(key.clone()), until_ms: *until, cause: cause.clone() }
            });
        let dbs = self
            .dbs
            .iter()
            .filter(|(_, (until, _))| *until > now_ms)
            .map(|(db, (until, cause))| Entry { db: *db, key: None, until_ms: *until, cause: cause.clone() });
        keys.chain(dbs).collect()
    }

    /// A quarantine read back from the ledger, or replayed from the AOF or
    /// received from a master as it started: kept as it was (the later
    /// instant where one is in force already), unless it is over at
    /// `now_ms`. Returns the quarantine in force.
    pub fn restore(&mut self, entry: Entry, now_ms: i64) -> Option<Quarantined> {
        if entry.until_ms <= now_ms {
            return None;
        }
        let Entry { db, key, until_ms, cause } = entry;
        Some(match key {
            Some(key) => self.quarantine_key(db, key, until_ms, cause, now_ms),
            None => self.quarantine_db(db, until_ms, cause),
        })
    }

    /// The key's lock was released by its holder: a quarantine of the key
    /// for its arrival ([`Cause::Imported`]) ends (any other stays).
    /// Returns whether one did.
    pub fn end_imported(&mut self, db: i32, key: &[u8]) -> bool {
        if self.keys.is_empty() {
            return false;
        }
        let id = (db, key.to_vec());
        let imported = matches!(self.keys.get(&id), Some((_, Cause::Imported)));
        if imported {
            self.keys.remove(&id);
        }
        imported
    }

    /// LOCK.REVOKE: the operator freed the key on purpose; its quarantine
    /// ends. Returns whether it had one.
    pub fn end_key(&mut self, db: i32, key: &[u8]) -> bool {
        !self.keys.is_empty() && self.keys.remove(&(db, key.to_vec())).is_some()
    }

    /// Ends every key and database quarantine (the protection turned off).
    pub fn clear(&mut self) {
        self.keys.clear();
        self.dbs.clear();
    }

    /// (keys, databases) in quarantine at `now_ms`, and the most ms left.
    pub fn in_force_counts(&self, now_ms: i64) -> (usize, usize, i64) {
        let keys = self.keys.values().filter(|(until, _)| *until > now_ms).count();
        let dbs = self.dbs.values().filter(|(until, _)| *until > now_ms).count();
        let left = self
            .keys
            .values()
            .chain(self.dbs.values())
            .map(|(until, _)| until.saturating_sub(now_ms))
            .max()
            .unwrap_or(0)
            .max(0);
        (keys, dbs, left)
    }
}

#[cfg(test)]
mod properties;

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_800_000_000_000;

    fn changed() -> Cause {
        Cause::Changed("del".into())
    }

    /// The database and end of each quarantine, in order.
    fn spans(quarantines: &[Quarantined]) -> Vec<(i32, i64)> {
        quarantines.iter().map(|q| (q.db, q.until_ms)).collect()
    }

    /// The sketch's precision rests on the hash: keys that differ (in any
    /// byte, in length, in database) must get different hashes, and
    /// spread over the buckets and tags, or a grant elsewhere would keep
    /// a freed key quarantined (safe, but refusals nobody asked for).
    #[test]
    fn quarantines_in_force_come_back_from_the_ledger_as_they_were() {
        let mut f = Forgetting::default();
        f.note(0, key_hash(0, b"orders"), 5_000, 1_000, 100);
        f.note(2, key_hash(2, b"x"), 9_000, 1_000, 100);
        f.key_changed(0, b"orders", Cause::Changed("del".into()), 2_000, 100).unwrap();
        f.flushed(2, 2_000, 100);
        let saved = f.quarantines_in_force(2_000);
        assert_eq!(saved.len(), 2);
        let mut back = Forgetting::default();
        for entry in saved.clone() {
            back.restore(entry, 2_500).unwrap();
        }
        assert_eq!(back.refusal(0, b"orders", 2_500), f.refusal(0, b"orders", 2_500));
        assert_eq!(back.refusal(2, b"any", 2_500).map(|q| q.until_ms), Some(9_100));
        assert_eq!(back.quarantines_in_force(2_500).len(), 2);
        assert!(back.restore(saved[0].clone(), 10_000).is_none(), "over: dropped");
        assert!(back.refusal(0, b"orders", 5_100).is_none(), "grantable again at the deadline");
    }

    #[test]
    fn the_key_hash_tells_keys_apart_and_spreads_them() {
        let mut seen = std::collections::HashSet::new();
        for len in 0..=24usize {
            let base = vec![b'k'; len];
            assert!(seen.insert(key_hash(0, &base)), "length {len}");
            for at in 0..len {
                let mut other = base.clone();
                other[at] = b'j';
                assert!(seen.insert(key_hash(0, &other)), "byte {at} of {len}");
            }
        }
        assert_ne!(key_hash(0, b"a"), key_hash(0, b"a\0"), "a trailing zero byte");
        assert_ne!(key_hash(0, b"lock:1"), key_hash(1, b"lock:1"), "the database");

        let keys = 4 * SKETCH_BUCKETS;
        let mut per_bucket = vec![0usize; SKETCH_BUCKETS];
        let mut tags = std::collections::HashSet::new();
        for i in 0..keys {
            let (bucket, tag) = bucket_and_tag(key_hash(0, format!("orders:{i}").as_bytes()));
            per_bucket[bucket] += 1;
            tags.insert((bucket, tag));
        }
        // 4 keys per bucket on average: a fair hash leaves about e^-4 (2%)
        // of the buckets empty and none with more than about 16.
        let empty = per_bucket.iter().filter(|&&n| n == 0).count();
        let fullest = per_bucket.iter().copied().max().unwrap_or(0);
        assert!(empty < SKETCH_BUCKETS / 20, "{empty} empty buckets");
        assert!(fullest <= 16, "a bucket of {fullest} keys");
        // Within a bucket a key is known by its tag: two keys sharing both
        // would share a deadline (35 bits: a clash among these is unlikely).
        assert!(tags.len() + 2 >= keys, "{} distinct buckets and tags for {keys} keys", tags.len());
    }

    #[test]
    fn the_sketch_remembers_each_key_s_latest_deadline() {
        let mut s = DeadlineSketch::default();
        let (a, b) = (key_hash(0, b"a"), key_hash(0, b"b"));
        s.note(a, NOW + 5_000, NOW, 0);
        s.note(a, NOW + 2_000, NOW, 0);
        assert_eq!(s.latest(a, NOW, 0), Some(NOW + 5_000), "the later of two writes");
        assert_eq!(s.latest(b, NOW, 0), None, "a key never written");
        assert_eq!(s.latest(key_hash(1, b"a"), NOW, 0), None, "the same name in another database");
        assert_eq!(s.latest(a, NOW + 5_000, 0), None, "over at its deadline");
        assert_eq!(s.latest(a, NOW + 5_000, 1_000), Some(NOW + 5_000), "in force through the cool-down");
        assert_eq!(s.latest(a, NOW + 6_000, 1_000), None);
    }

    #[test]
    fn a_full_bucket_never_forgets_a_deadline_in_force() {
        // Many keys in one bucket (the same low bits): more than the ways.
        let mut s = DeadlineSketch::default();
        let bucket = key_hash(0, b"k0") as usize & (SKETCH_BUCKETS - 1);
        let keys: Vec<Vec<u8>> = (0..200_000)
            .map(|i| format!("k{i}").into_bytes())
            .filter(|k| key_hash(0, k) as usize & (SKETCH_BUCKETS - 1) == bucket)
            .take(3 * SKETCH_WAYS)
            .collect();
        assert!(keys.len() > SKETCH_WAYS, "found {} keys of one bucket", keys.len());
        for (i, k) in keys.iter().enumerate() {
            s.note(key_hash(0, k), NOW + 1_000 * (i as i64 + 1), NOW, 0);
        }
        for (i, k) in keys.iter().enumerate() {
            let latest = s.latest(key_hash(0, k), NOW, 0);
            assert!(latest >= Some(NOW + 1_000 * (i as i64 + 1)), "key {i}: {latest:?}");
        }
        // Once they all ran out, the ways are free again and exact.
        let late = NOW + 1_000_000;
        s.note(key_hash(0, &keys[0]), late + 10, late, 0);
        assert_eq!(s.latest(key_hash(0, &keys[0]), late, 0), Some(late + 10));
        assert_eq!(s.latest(key_hash(0, &keys[1]), late, 0), None);
    }

    #[test]
    fn a_removed_key_is_quarantined_until_its_lock_s_deadline_and_no_longer() {
        let mut f = Forgetting::default();
        f.note(0, key_hash(0, b"k"), NOW + 10_000, NOW, 0);
        let q = f.key_changed(0, b"k", changed(), NOW + 1_000, 500).expect("quarantined");
        assert_eq!(q.until_ms, NOW + 10_500, "the deadline plus the cool-down");
        assert!(q.key);
        assert_eq!(f.refusal(0, b"k", NOW + 10_499).map(|q| q.until_ms), Some(NOW + 10_500));
        assert_eq!(f.refusal(0, b"other", NOW + 2_000), None, "another key");
        assert_eq!(f.refusal(1, b"k", NOW + 2_000), None, "another database");
        assert_eq!(f.refusal(0, b"k", NOW + 10_500), None, "grantable again at the bound");
        assert!(f.keys.is_empty(), "an ended quarantine leaves nothing behind");
        assert_eq!(f.key_changed(0, b"k", changed(), NOW + 10_500, 500), None, "no lock in force: nothing");
        assert_eq!(f.key_changed(0, b"never", Cause::Evicted, NOW, 500), None, "never a lock");
    }

    #[test]
    fn locks_not_written_here_count_until_the_floor() {
        let mut f = Forgetting::default();
        f.raise_floor(NOW + 31_000);
        let q = f.key_changed(3, b"restored", Cause::Evicted, NOW, 0).expect("floor");
        assert_eq!(q.until_ms, NOW + 31_000);
        let flushed = f.flushed(ALL_DBS, NOW, 0);
        assert_eq!(flushed.len(), 1);
        assert_eq!(flushed[0].db, ALL_DBS);
        assert_eq!(f.refusal(9, b"x", NOW + 1).map(|q| q.cause), Some(Cause::Flushed), "every database");
        assert_eq!(f.key_changed(3, b"x", Cause::Evicted, NOW + 31_000, 0), None, "after the floor");
    }

    #[test]
    fn redis_own_expiry_is_judged_by_the_deadlines_written_here_only() {
        let mut f = Forgetting::default();
        f.raise_floor(NOW + 31_000);
        assert_eq!(f.key_changed(0, b"restored", Cause::Expired, NOW, 0), None, "the floor does not count");
        f.note(0, key_hash(0, b"mine"), NOW + 5_000, NOW, 0);
        let q = f.key_changed(0, b"mine", Cause::Expired, NOW, 0).expect("expired early");
        assert_eq!(q.until_ms, NOW + 5_000, "its own deadline, not the floor");
    }

    #[test]
    fn a_flush_quarantines_the_databases_whose_locks_may_be_in_force() {
        let mut f = Forgetting::default();
        f.note(0, key_hash(0, b"a"), NOW + 4_000, NOW, 0);
        f.note(2, key_hash(2, b"b"), NOW + 9_000, NOW, 0);
        assert!(f.flushed(5, NOW, 0).is_empty(), "a database that never held a lock");
        let one = f.flushed(0, NOW + 1_000, 0);
        assert_eq!(one.len(), 1);
        assert_eq!((one[0].db, one[0].until_ms), (0, NOW + 4_000));
        let all = f.flushed(ALL_DBS, NOW + 5_000, 0);
        assert_eq!(spans(&all), vec![(2, NOW + 9_000)]);
        assert_eq!(f.refusal(2, b"any", NOW + 8_999).map(|q| q.key), Some(false));
        assert_eq!(f.refusal(2, b"any", NOW + 9_000), None);
    }

    #[test]
    fn a_flush_of_one_database_leaves_the_others_and_high_numbers_share_a_slot() {
        let mut f = Forgetting::default();
        f.note(1, key_hash(1, b"a"), NOW + 4_000, NOW, 0);
        let one = f.flushed(1, NOW, 0);
        assert_eq!(spans(&one), vec![(1, NOW + 4_000)]);
        assert_eq!(f.refusal(0, b"a", NOW), None, "FLUSHDB of db 1 is not a FLUSHALL");
        assert_eq!(f.refusal(1, b"a", NOW).map(|q| q.left_ms(NOW + 1_000)), Some(3_000));
        assert_eq!(
            f.refusal(1, b"a", NOW + 3_999).map(|q| q.left_ms(NOW + 4_500)),
            Some(0),
            "never negative"
        );
        // Databases past the last slot share it: a flush of one of them
        // covers the latest lock of any (more refusals, never fewer).
        let high = DB_SLOTS as i32 + 5;
        f.note(high, key_hash(high, b"h"), NOW + 7_000, NOW, 0);
        let flushed = f.flushed(high + 1, NOW, 0);
        assert_eq!(spans(&flushed), vec![(high + 1, NOW + 7_000)]);
        assert_eq!(f.refusal(high, b"h", NOW).map(|q| (q.db, q.until_ms)), Some((high, NOW + 7_000)));
        // A FLUSHALL reaches them too (it quarantines each slot).
        let mut f = Forgetting::default();
        f.note(high, key_hash(high, b"h"), NOW + 7_000, NOW, 0);
        f.flushed(ALL_DBS, NOW, 0);
        assert_eq!(f.refusal(high, b"h", NOW + 6_999).map(|q| q.until_ms), Some(NOW + 7_000));
    }

    #[test]
    fn a_swap_keeps_every_other_database_s_latest_and_reaches_new_ones() {
        let mut f = Forgetting::default();
        f.note(5, key_hash(5, b"e"), NOW + 6_000, NOW, 0);
        f.note(2, key_hash(2, b"c"), NOW + 3_000, NOW, 0);
        f.swapped(0, 1, NOW, 0);
        let five = f.flushed(5, NOW, 0);
        assert_eq!(spans(&five), vec![(5, NOW + 6_000)]);
        // Database 9 never held a lock of its own: it now holds db 2's.
        f.swapped(2, 9, NOW, 0);
        let nine = f.flushed(9, NOW + 1_000, 0);
        assert_eq!(spans(&nine), vec![(9, NOW + 3_000)]);
    }

    #[test]
    fn a_refusal_names_the_longest_quarantine_that_applies() {
        let mut f = Forgetting::default();
        f.note(0, key_hash(0, b"z"), NOW + 3_000, NOW, 0);
        f.flushed(0, NOW, 0);
        f.note(0, key_hash(0, b"k"), NOW + 8_000, NOW, 0);
        f.key_changed(0, b"k", changed(), NOW, 0);
        let found = f.refusal(0, b"k", NOW + 1_000);
        assert_eq!(found.as_ref().map(|q| (q.key, q.until_ms)), Some((true, NOW + 8_000)), "{found:?}");
        let other = f.refusal(0, b"other", NOW + 1_000);
        assert_eq!(other.map(|q| (q.key, q.until_ms)), Some((false, NOW + 3_000)));
    }

    /// The node stops looking for quarantines once these counts are all 0:
    /// a quarantine in force that they miss would let grants through.
    #[test]
    fn the_counts_cover_exactly_the_quarantines_in_force() {
        let mut f = Forgetting::default();
        f.note(0, key_hash(0, b"k"), NOW + 5_000, NOW, 0);
        f.key_changed(0, b"k", changed(), NOW, 0);
        f.note(3, key_hash(3, b"d"), NOW + 2_000, NOW, 0);
        f.flushed(3, NOW, 0);
        assert_eq!(f.in_force_counts(NOW), (1, 1, 5_000));
        assert_eq!(f.in_force_counts(NOW + 1_999), (1, 1, 3_001));
        assert_eq!(f.in_force_counts(NOW + 2_000), (1, 0, 3_000));
        assert_eq!(f.in_force_counts(NOW + 4_999), (1, 0, 1));
        assert_eq!(f.in_force_counts(NOW + 5_000), (0, 0, 0));
    }

    #[test]
    fn a_swap_quarantines_both_databases_until_the_later_lock() {
        let mut f = Forgetting::default();
        f.note(0, key_hash(0, b"a"), NOW + 4_000, NOW, 0);
        f.note(1, key_hash(1, b"b"), NOW + 7_000, NOW, 0);
        let q = f.swapped(0, 1, NOW, 0);
        assert_eq!(spans(&q), vec![(0, NOW + 7_000), (1, NOW + 7_000)]);
        assert_eq!(f.refusal(0, b"a", NOW + 6_999).map(|q| q.cause), Some(Cause::Swapped(1)));
        // Each database took on the other's latest lock: a flush now covers it.
        assert_eq!(f.flushed(0, NOW + 7_000, 0), vec![]);
        assert_eq!(f.flushed(0, NOW + 6_000, 0)[0].until_ms, NOW + 7_000);
        assert!(f.swapped(3, 4, NOW, 0).is_empty(), "no lock in either");
    }

    #[test]
    fn too_many_key_quarantines_quarantine_the_database() {
        let mut f = Forgetting::default();
        f.raise_floor(NOW + 1_000);
        for i in 0..KEY_QUARANTINES_MAX {
            let q = f.key_changed(0, format!("k{i}").as_bytes(), Cause::Evicted, NOW, 0).expect("floor");
            assert!(q.key);
        }
        let q = f.key_changed(0, b"one-more", Cause::Evicted, NOW, 0).expect("floor");
        assert!(!q.key, "the database instead");
        assert_eq!(q.cause, Cause::TooManyKeys);
        assert_eq!(f.keys.len(), KEY_QUARANTINES_MAX, "bounded");
        assert_eq!(f.refusal(0, b"anything", NOW + 999).map(|q| q.key), Some(false));
        // Ended ones make room again.
        assert!(f.key_changed(0, b"later", Cause::Evicted, NOW + 1_000, 600).expect("in force").key);
        assert_eq!(f.keys.len(), 1);
    }

    #[test]
    fn revoking_ends_a_key_quarantine_and_clearing_ends_them_all() {
        let mut f = Forgetting::default();
        f.note(0, key_hash(0, b"k"), NOW + 10_000, NOW, 0);
        assert!(f.key_changed(0, b"k", changed(), NOW, 0).is_some());
        assert!(!f.flushed(0, NOW, 0).is_empty());
        assert!(f.end_key(0, b"k"));
        assert!(!f.end_key(0, b"k"));
        assert_eq!(f.refusal(0, b"k", NOW).map(|q| q.key), Some(false), "the database's still holds");
        assert_eq!(f.in_force_counts(NOW), (0, 1, 10_000));
        f.clear();
        assert_eq!(f.refusal(0, b"k", NOW), None);
        assert_eq!(f.in_force_counts(NOW), (0, 0, 0));
    }

    #[test]
    fn causes_read_as_documented() {
        assert_eq!(Cause::Evicted.code(), "evicted");
        assert!(Cause::Changed("rename_from".into()).describe(0).contains("(rename_from)"));
        assert_eq!(
            Cause::Flushed.describe(ALL_DBS),
            "every database was flushed while it may have held locks"
        );
        assert_eq!(Cause::Flushed.describe(3), "db 3 was flushed while it may have held locks");
        assert!(Cause::Swapped(1).describe(0).starts_with("db 0 was swapped with db 1"));
    }
}
