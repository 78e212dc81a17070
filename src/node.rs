//! Node-wide lock state: the fencing counter and the quarantine. Commands
//! run on Redis' main thread, so the mutexes are never contended; they only
//! make the statics safe.

use std::sync::atomic::{AtomicBool, Ordering};
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
    needed
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
