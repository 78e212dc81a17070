//! Node-wide lock state: the fencing counter and the quarantine. Commands
//! run on Redis' main thread, so the mutexes are never contended; they only
//! make the statics safe.

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Mutex;

use crate::clock;
use crate::config;
use crate::core::fencing::Fencer;
use crate::core::quarantine::{self, Quarantine, Reason};

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
