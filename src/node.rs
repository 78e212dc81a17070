//! Node-wide lock state: the fencing counter, the quarantines (of the
//! node after a start or a promotion; of keys and databases whose locks were
//! removed behind the module's back) and the eviction guard. Commands run
//! on Redis' main thread, so the mutexes are never contended; they only
//! make the statics safe.

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Mutex;

use crate::clock;
use crate::config;
use crate::core::fencing::Fencer;
use crate::core::forgetting::{self, Cause, Forgetting, Quarantined};
use crate::core::quarantine::{self, Quarantine, Reason, Refusal};

static FENCER: Mutex<Fencer> = Mutex::new(Fencer::new(0));
static QUARANTINE: Mutex<Option<Quarantine>> = Mutex::new(None);
/// Set once a quarantine is found over, so that every later grant checks
/// one flag instead of the clock (a quarantine, once over, stays over).
static QUARANTINE_OVER: AtomicBool = AtomicBool::new(true);
/// Whether the start-up quarantine keeps every restored lock from being
/// taken over early (see [`quarantine::covers_restored_locks`]).
static START_QUARANTINE_COVERS: AtomicBool = AtomicBool::new(false);
/// When the restart grace started (module clock), or `NO_GRACE`.
static RESTART_GRACE_SINCE: AtomicI64 = AtomicI64::new(NO_GRACE);
const NO_GRACE: i64 = i64::MIN;

pub fn with_fencer<T>(f: impl FnOnce(&mut Fencer) -> T) -> T {
    let mut guard = FENCER.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    f(&mut guard)
}

pub fn last_fence() -> u64 {
    with_fencer(|f| f.last())
}

/// Starts (or restarts) the quarantine now.
pub fn start_quarantine(reason: Reason) {
    let mut guard = QUARANTINE.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    *guard = Some(Quarantine { reason, since_ms: clock::now_ms() });
    QUARANTINE_OVER.store(false, Ordering::Relaxed);
    let length = current_length_ms();
    if length > 0 {
        redis_module::logging::log_warning(format!(
            "lock: quarantine ({}): refusing new locks for {length} ms (lock.quarantine-ms), \
             because locks granted before may have been lost",
            reason.name()
        ));
    } else {
        redis_module::logging::log_warning(format!(
            "lock: {}: running WITHOUT quarantine (lock.quarantine-ms is 0): \
             a lock forgotten by this node can be granted twice",
            reason.name()
        ));
    }
}

fn current_length_ms() -> i64 {
    quarantine::length_ms(
        config::QUARANTINE_MS.get(),
        config::MAX_TTL_MS.get(),
        config::EXPIRY_DELAY_MS.get(),
    )
}

/// The quarantine in force, with the milliseconds left; `None` when the
/// node may grant.
pub fn quarantine() -> Option<(Reason, i64)> {
    if QUARANTINE_OVER.load(Ordering::Relaxed) {
        return None;
    }
    let current = *QUARANTINE.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let left = quarantine::remaining_ms(current, clock::now_ms(), current_length_ms());
    match current {
        Some(q) if left > 0 => Some((q.reason, left)),
        _ => {
            QUARANTINE_OVER.store(true, Ordering::Relaxed);
            None
        }
    }
}

/// At module load: quarantines the node unless its persistence proves that
/// no acknowledged grant can have been lost (`appendonly yes` with
/// `appendfsync always`). Returns whether it did.
pub fn quarantine_at_start(appendonly: bool, appendfsync: &str) -> bool {
    let needed = quarantine::needed_at_start(appendonly, appendfsync);
    if needed {
        start_quarantine(Reason::Startup);
    }
    let covered = needed
        && quarantine::covers_restored_locks(
            current_length_ms(),
            config::MAX_TTL_MS.get(),
            config::EXPIRY_DELAY_MS.get(),
        );
    START_QUARANTINE_COVERS.store(covered, Ordering::Relaxed);
    needed
}

/// The node's own AOF or RDB file was loaded at start: the locks in it were
/// granted by the process before, on a module clock this one may be ahead
/// of. Unless the start-up quarantine already covers them, start the restart
/// grace.
pub fn on_loaded_from_disk() {
    if START_QUARANTINE_COVERS.load(Ordering::Relaxed) {
        return;
    }
    RESTART_GRACE_SINCE.store(clock::now_ms(), Ordering::Relaxed);
    let tolerance = config::CLOCK_JUMP_TOLERANCE_MS.get();
    let lasts = quarantine::restart_grace_lasts_ms(
        config::MAX_TTL_MS.get(),
        config::EXPIRY_DELAY_MS.get(),
        tolerance,
    );
    redis_module::logging::log_notice(format!(
        "lock: restart grace: locks were restored from disk without a quarantine covering them; \
         for {lasts} ms a lock that expires by itself is taken over {tolerance} ms \
         (lock.clock-jump-tolerance-ms) after its deadline, so that a wall-clock step before \
         this restart cannot shorten it"
    ));
}

/// The restart grace in force at `now_ms` (0 when none): see
/// [`quarantine::restart_grace_ms`].
pub fn restart_grace_ms(now_ms: i64) -> i64 {
    let since = RESTART_GRACE_SINCE.load(Ordering::Relaxed);
    quarantine::restart_grace_ms(
        (since != NO_GRACE).then_some(since),
        now_ms,
        config::MAX_TTL_MS.get(),
        config::EXPIRY_DELAY_MS.get(),
        config::CLOCK_JUMP_TOLERANCE_MS.get(),
    )
}

/// How long an expired holder keeps its slot at `now_ms`: the lock-delay
/// (`lock.expiry-delay-ms`) plus the restart grace while it lasts.
pub fn expiry_delay_ms(now_ms: i64) -> i64 {
    config::EXPIRY_DELAY_MS.get().saturating_add(restart_grace_ms(now_ms))
}

/// This node was a replica and is now a master: asynchronous replication may
/// have lost grants its old master acknowledged.
pub fn on_promoted() {
    if config::FAILOVER_QUARANTINE.load(Ordering::Relaxed) {
        start_quarantine(Reason::Promotion);
    } else {
        redis_module::logging::log_warning(
            "lock: promoted to master WITHOUT quarantine (lock.failover-quarantine is no): \
             a lock the old master granted but did not replicate can be granted twice",
        );
    }
}

static FORGETTING: Mutex<Option<Forgetting>> = Mutex::new(None);
/// Set while a key or database quarantine may be in force: a grant checks
/// this flag, not the mutex, in the common case.
static ANY_FORGOTTEN: AtomicBool = AtomicBool::new(false);
/// The eviction policy when it may evict lock keys (`maxmemory` set, not
/// `noeviction`); `None` when it cannot.
static EVICTING_POLICY: Mutex<Option<String>> = Mutex::new(None);
static EVICTABLE: AtomicBool = AtomicBool::new(false);

fn with_forgetting<T>(f: impl FnOnce(&mut Forgetting) -> T) -> T {
    let mut guard = FORGETTING.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    f(guard.get_or_insert_with(Forgetting::default))
}

/// The refusal of a new grant of `key` in `db` at `now_ms`, if any: the
/// node's quarantine first, then the eviction guard, then the key's or its
/// database's quarantine.
pub fn refusal(db: i32, key: &[u8], now_ms: i64) -> Option<Refusal> {
    if let Some((reason, left)) = self::quarantine() {
        return Some(Refusal::Node(reason, left));
    }
    if EVICTABLE.load(Ordering::Relaxed) && config::eviction_mode() == config::EvictionMode::refuse {
        let policy = EVICTING_POLICY.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).clone();
        return Some(Refusal::Evictable(policy.unwrap_or_default()));
    }
    if !ANY_FORGOTTEN.load(Ordering::Relaxed) {
        return None;
    }
    let found = with_forgetting(|f| {
        let found = f.refusal(db, key, now_ms);
        if found.is_none() && f.in_force_counts(now_ms) == (0, 0, 0) {
            ANY_FORGOTTEN.store(false, Ordering::Relaxed);
        }
        found
    });
    found.map(|q| {
        let left = q.left_ms(now_ms);
        Refusal::Forgotten(q, left)
    })
}

/// This node wrote a lock at `key` of `db` that holds until `deadline_ms`
/// (or found one arriving by a migration).
pub fn note_lock(db: i32, key: &[u8], deadline_ms: i64, now_ms: i64) {
    let cool_down = expiry_delay_ms(now_ms);
    with_forgetting(|f| f.note(db, forgetting::key_hash(db, key), deadline_ms, now_ms, cool_down));
}

/// Locks this process did not write may now be on the node (a start from
/// disk, a promotion, a slot import): until the longest TTL has run out,
/// every key and database counts as holding one.
pub fn note_imported_locks(now_ms: i64) {
    let bound = now_ms.saturating_add(config::max_ttl_seen_ms()).saturating_add(quarantine::AUTO_MARGIN_MS);
    with_forgetting(|f| f.raise_floor(bound));
}

fn quarantined(found: &[Quarantined]) {
    if found.is_empty() || !config::REMOVAL_QUARANTINE.load(Ordering::Relaxed) {
        return;
    }
    ANY_FORGOTTEN.store(true, Ordering::Relaxed);
}

/// Another command removed or changed `key` of `db` (a keyspace event):
/// if a lock there may still be in force, the key is quarantined until it
/// is not. Returns the quarantine.
pub fn key_changed(db: i32, key: &[u8], cause: Cause, now_ms: i64) -> Option<Quarantined> {
    if !config::REMOVAL_QUARANTINE.load(Ordering::Relaxed) {
        return None;
    }
    let cool_down = expiry_delay_ms(now_ms);
    let found = with_forgetting(|f| f.key_changed(db, key, cause, now_ms, cool_down));
    quarantined(found.as_slice());
    found
}

/// FLUSHDB of `db` or FLUSHALL (`forgetting::ALL_DBS`).
pub fn db_flushed(db: i32, now_ms: i64) -> Vec<Quarantined> {
    if !config::REMOVAL_QUARANTINE.load(Ordering::Relaxed) {
        return Vec::new();
    }
    let cool_down = expiry_delay_ms(now_ms);
    let found = with_forgetting(|f| f.flushed(db, now_ms, cool_down));
    quarantined(&found);
    found
}

/// SWAPDB `a` `b`.
pub fn dbs_swapped(a: i32, b: i32, now_ms: i64) -> Vec<Quarantined> {
    if !config::REMOVAL_QUARANTINE.load(Ordering::Relaxed) {
        return Vec::new();
    }
    let cool_down = expiry_delay_ms(now_ms);
    let found = with_forgetting(|f| f.swapped(a, b, now_ms, cool_down));
    quarantined(&found);
    found
}

/// LOCK.REVOKE freed the key on purpose: its quarantine ends.
pub fn end_key_quarantine(db: i32, key: &[u8]) -> bool {
    ANY_FORGOTTEN.load(Ordering::Relaxed) && with_forgetting(|f| f.end_key(db, key))
}

/// `lock.removal-quarantine no`: every key and database quarantine ends.
pub fn end_removal_quarantines() {
    with_forgetting(Forgetting::clear);
    ANY_FORGOTTEN.store(false, Ordering::Relaxed);
}

/// (keys, databases) in quarantine now, and the most ms left (INFO).
pub fn removal_quarantines(now_ms: i64) -> (usize, usize, i64) {
    if !ANY_FORGOTTEN.load(Ordering::Relaxed) {
        return (0, 0, 0);
    }
    with_forgetting(|f| f.in_force_counts(now_ms))
}

/// The server's `maxmemory` and `maxmemory-policy`, read at load and after
/// every CONFIG SET: lock keys may be evicted when a limit is set and the
/// policy is not `noeviction` (lock keys carry an expiry, so `volatile-*`
/// policies evict them too). Returns whether that changed.
pub fn set_memory_policy(maxmemory: u64, policy: &str) -> bool {
    let evicting = maxmemory > 0 && !policy.eq_ignore_ascii_case("noeviction");
    let was = EVICTABLE.swap(evicting, Ordering::Relaxed);
    *EVICTING_POLICY.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) =
        evicting.then(|| policy.to_ascii_lowercase());
    was != evicting
}

/// The eviction policy when it may evict lock keys (INFO).
pub fn evicting_policy() -> Option<String> {
    EVICTABLE
        .load(Ordering::Relaxed)
        .then(|| EVICTING_POLICY.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).clone())
        .flatten()
}
