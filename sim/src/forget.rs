//! Locks a node loses behind the module's back (property 10, "nothing
//! forgets a held lock silently"): an eviction under `maxmemory` (with
//! `lock.eviction-mode quarantine`), a stray `DEL`, `FLUSHDB` or `FLUSHALL`.
//! The simulated node keeps the module's real forgetting rules
//! (`lock_core::forgetting`: the deadline sketch of every lock it wrote,
//! the latest deadline per database, the floor for locks it did not write,
//! and the key and database quarantines), fed as the module's glue feeds
//! them: each write notes its latest deadline, a start from disk raises
//! the floor, a removal quarantines the key or the database, and a new
//! grant is refused while one applies.

use std::collections::BTreeMap;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use lock_core::forgetting::{self, Cause, Entry, Forgetting, ALL_DBS};
use lock_core::quarantine;
use lock_core::txn::Changes;

/// The only database the simulated nodes use.
const DB: i32 = 0;

/// How a lock key goes without a lock command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Loss {
    /// `maxmemory` evicts the key (`lock.eviction-mode quarantine`).
    Evicted,
    /// Another client runs `DEL` on it.
    Deleted,
    /// `FLUSHDB` (synchronous or `ASYNC`: the module hears of it the same).
    FlushDb,
    /// `FLUSHALL`.
    FlushAll,
}

impl Loss {
    /// One of the four, from a draw in `0..4`.
    pub fn from_draw(draw: u32) -> Loss {
        match draw {
            0 => Loss::Evicted,
            1 => Loss::Deleted,
            2 => Loss::FlushDb,
            _ => Loss::FlushAll,
        }
    }
}

/// What one node process knows of the locks it may have forgotten (a new
/// process starts with nothing: the module keeps it in memory).
#[derive(Default)]
pub struct Forgotten {
    rules: Forgetting,
}

impl Forgotten {
    /// A new process; `loaded`: it started from its AOF, so locks it did
    /// not write may be in any key until the longest TTL has run out (the
    /// module's `note_imported_locks`).
    pub fn started(loaded: bool, now_ms: i64, ttl_max_ms: i64) -> Forgotten {
        let mut rules = Forgetting::default();
        if loaded {
            rules.raise_floor(now_ms.saturating_add(ttl_max_ms).saturating_add(quarantine::AUTO_MARGIN_MS));
        }
        Forgotten { rules }
    }

    /// After a start from an `always` AOF: the removal quarantines come
    /// back (the ledger in the AOF's RDB preamble, the `LOCK.FORGOTTEN`
    /// records after it), on top of a start's rules. Their ends were
    /// written on the module clock of the process before, which a forward
    /// step of the wall clock before this start puts behind this one's, so
    /// each lasts `tolerance_ms` (`lock.clock-jump-tolerance-ms`) longer, as
    /// the module's `restore_written_quarantine` (src/node.rs) makes them:
    /// those that end by now even so are over.
    pub fn restarted_from_always(&self, now_ms: i64, ttl_max_ms: i64, tolerance_ms: i64) -> Forgotten {
        let mut next = Forgotten::started(true, now_ms, ttl_max_ms);
        for mut entry in self.rules.quarantines_in_force(now_ms.saturating_sub(tolerance_ms)) {
            entry.until_ms = entry.until_ms.saturating_add(tolerance_ms);
            next.rules.restore(entry, now_ms);
        }
        next
    }

    /// A lock arrived at `key` by a slot migration: it is not taken over
    /// by expiry before `until_ms` (cause `imported`, as the module's
    /// `lock_arrived`).
    pub fn arrived(&mut self, key: &[u8], until_ms: i64, now_ms: i64) {
        let entry = Entry { db: DB, key: Some(key.to_vec()), until_ms, cause: Cause::Imported };
        self.rules.restore(entry, now_ms);
    }

    /// Its holder released the lock at `key`: a quarantine for its arrival
    /// ends (the module's `lock_released`).
    pub fn released(&mut self, key: &[u8]) {
        self.rules.end_imported(DB, key);
    }

    /// A write of `key` stored `changes`: its latest deadline is noted, as
    /// the module's store does.
    pub fn wrote(&mut self, key: &[u8], changes: &Changes<'_>, now_ms: i64, cool_down_ms: i64) {
        if let Some(deadline_ms) = changes.last_put_deadline_ms() {
            self.rules.note(DB, forgetting::key_hash(DB, key), deadline_ms, now_ms, cool_down_ms);
        }
    }

    /// Why a new grant of `key` is refused now, with the milliseconds left.
    pub fn refusal(&mut self, key: &[u8], now_ms: i64) -> Option<String> {
        let q = self.rules.refusal(DB, key, now_ms)?;
        let scope = if q.key { "on this key" } else { "in this database" };
        Some(format!("{}, refusing new locks {scope} for {} ms", q.cause.describe(q.db), q.left_ms(now_ms)))
    }

    /// The node loses `key` (an eviction or a `DEL`: only if it exists, as
    /// neither fires for a missing key) or its whole database: gone from
    /// `keys`, and quarantined as the module's keyspace and server events
    /// do. Returns what happened, in words.
    pub fn lose<V>(
        &mut self,
        loss: Loss,
        key: &[u8],
        keys: &mut BTreeMap<Vec<u8>, V>,
        now_ms: i64,
        cool_down_ms: i64,
    ) -> String {
        let quarantined = match loss {
            Loss::Evicted | Loss::Deleted => {
                if keys.remove(key).is_none() {
                    return "no such key: nothing happens".into();
                }
                let cause = if loss == Loss::Evicted { Cause::Evicted } else { Cause::Changed("del".into()) };
                self.rules.key_changed(DB, key, cause, now_ms, cool_down_ms).into_iter().collect()
            }
            Loss::FlushDb | Loss::FlushAll => {
                keys.clear();
                self.rules.flushed(if loss == Loss::FlushAll { ALL_DBS } else { DB }, now_ms, cool_down_ms)
            }
        };
        match quarantined.iter().map(|q| q.until_ms).max() {
            Some(until_ms) => format!("quarantined for {} ms", until_ms.saturating_sub(now_ms)),
            None => "no lock in force: no quarantine".into(),
        }
    }
}

/// The losses of one history, drawn from its own generator (the other
/// faults' draws stay as they were): in `per_mille` of the histories,
/// `count` losses at moments of their own, each of one node or of a
/// majority at once (an operator's command run on several nodes, a
/// memory pressure they share), a few milliseconds apart.
pub fn draw(seed: u64, nodes: usize, count: usize, per_mille: u32) -> Vec<(u64, usize, Loss)> {
    let mut rng = StdRng::seed_from_u64(seed ^ 0x1055_f00d);
    if nodes == 0 || rng.gen_range(0..1000) >= per_mille {
        return Vec::new();
    }
    let mut losses = Vec::new();
    for _ in 0..count {
        let (at, loss) = (rng.gen_range(0..1500), Loss::from_draw(rng.gen_range(0..4)));
        let struck = if rng.gen_bool(0.5) { 1 } else { nodes / 2 + 1 };
        let first = rng.gen_range(0..nodes);
        for i in 0..struck {
            losses.push((at + rng.gen_range(0..30), (first + i) % nodes, loss));
        }
    }
    losses
}
