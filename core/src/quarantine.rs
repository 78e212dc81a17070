//! The restart and failover quarantine, as pure arithmetic.
//!
//! A node that may have forgotten acknowledged grants (it restarted without
//! `appendfsync always`, or it is a replica just promoted over an
//! asynchronous link) must not grant anything until every lock it might have
//! forgotten has expired. It does not know those locks, so it waits for the
//! longest TTL any of them could have had: `lock.max-ttl-ms`, plus the
//! lock-delay that would have followed its expiry (`lock.expiry-delay-ms`),
//! plus a margin.
//! Time is the module clock (monotonic), so a wall-clock jump cannot shorten
//! the wait.

/// Added to `lock.max-ttl-ms` when `lock.quarantine-ms` is left on auto
/// (-1): covers the gap between a grant's deadline being computed on the old
/// node and the millisecond rounding of both clocks.
pub const AUTO_MARGIN_MS: i64 = 1_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reason {
    /// The node (or the module) started and could not prove that no
    /// acknowledged lock was lost.
    Startup,
    /// The node was a replica and became a master.
    Promotion,
}

impl Reason {
    pub fn name(self) -> &'static str {
        match self {
            Reason::Startup => "startup",
            Reason::Promotion => "promotion",
        }
    }

    /// The first words of the QUARANTINE error.
    pub fn describe(self) -> &'static str {
        match self {
            Reason::Startup => "node restarted",
            Reason::Promotion => "replica promoted to master",
        }
    }
}

/// Why a new grant is refused now, though the key is free.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The node's start-up or promotion quarantine, with the ms left.
    Node(Reason, i64),
    /// The key's or its database's quarantine after its locks were removed
    /// by something other than a lock command, with the ms left.
    Forgotten(super::forgetting::Quarantined, i64),
    /// `maxmemory-policy` may evict lock keys (`lock.eviction-mode refuse`):
    /// the policy's name.
    Evictable(String),
    /// The key's slot was imported: it waits (`imports.rs`), with the ms
    /// left (-1 while the import runs).
    Importing(super::imports::Waiting, i64),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Quarantine {
    pub reason: Reason,
    /// Module-clock instant at which it started.
    pub since_ms: i64,
}

/// The quarantine length in force: `configured` if >= 0, else auto: the
/// longest TTL, then the lock-delay a forgotten lock would still impose
/// after expiring, then the margin.
pub fn length_ms(configured: i64, max_ttl_ms: i64, expiry_delay_ms: i64) -> i64 {
    if configured >= 0 {
        configured
    } else {
        max_ttl_ms.saturating_add(expiry_delay_ms.max(0)).saturating_add(AUTO_MARGIN_MS)
    }
}

/// Milliseconds of quarantine left at `now_ms`; 0 when over (or none).
pub fn remaining_ms(quarantine: Option<Quarantine>, now_ms: i64, length_ms: i64) -> i64 {
    match quarantine {
        Some(q) => q.since_ms.saturating_add(length_ms).saturating_sub(now_ms).max(0),
        None => 0,
    }
}

/// Whether a start needs a quarantine: only `appendonly yes` with
/// `appendfsync always` proves that every acknowledged grant is on disk.
pub fn needed_at_start(appendonly: bool, appendfsync: &str) -> bool {
    !(appendonly && appendfsync.eq_ignore_ascii_case("always"))
}

/// The restart grace: after a start that kept its locks (restored from the
/// AOF or RDB) and started no quarantine covering them, a lock that expires
/// by itself is taken over `tolerance_ms` (`lock.clock-jump-tolerance-ms`)
/// after its deadline instead of at it, until every restored lock has run
/// out. Returns the extra lock-delay in force at `now_ms`.
///
/// Why: a restart re-anchors the module clock to the wall clock, so a
/// forward wall-clock step taken while the old process ran (which moved no
/// deadline then, property 8) lands at the restart: a restored deadline
/// comes that much early in real time. The grace makes a step of up to the
/// tolerance harmless across a restart too, as the key's backstop expiry
/// does while the node runs. A restored deadline is at most `max_ttl_ms`
/// after the old process stopped, which was before `started_ms` on the new
/// clock whenever that clock stepped forward (a backward step only makes
/// restored locks last longer), so the grace lasts until `started_ms +
/// max_ttl_ms + expiry_delay_ms + tolerance_ms`.
#[inline]
pub fn restart_grace_ms(
    started_ms: Option<i64>,
    now_ms: i64,
    max_ttl_ms: i64,
    expiry_delay_ms: i64,
    tolerance_ms: i64,
) -> i64 {
    let Some(started_ms) = started_ms else { return 0 };
    let tolerance_ms = tolerance_ms.max(0);
    let ends_ms =
        started_ms.saturating_add(restart_grace_lasts_ms(max_ttl_ms, expiry_delay_ms, tolerance_ms));
    if now_ms < ends_ms {
        tolerance_ms
    } else {
        0
    }
}

/// How long the restart grace lasts after it starts: until every restored
/// lock has run out and its lock-delay and the grace itself have passed.
pub fn restart_grace_lasts_ms(max_ttl_ms: i64, expiry_delay_ms: i64, tolerance_ms: i64) -> i64 {
    max_ttl_ms.max(0).saturating_add(expiry_delay_ms.max(0)).saturating_add(tolerance_ms.max(0))
}

/// Whether a start-up quarantine of `length_ms` already keeps every
/// restored lock from being taken over early, whatever the clock step: no
/// grant at all happens before `start + length_ms`, and a restored lock ran
/// out (in real time) by `start + max_ttl_ms` plus its lock-delay.
pub fn covers_restored_locks(length_ms: i64, max_ttl_ms: i64, expiry_delay_ms: i64) -> bool {
    length_ms >= max_ttl_ms.saturating_add(expiry_delay_ms.max(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_length_covers_the_longest_ttl() {
        assert_eq!(length_ms(-1, 30_000, 0), 31_000);
        assert_eq!(length_ms(-1, 30_000, 5_000), 36_000, "and the lock-delay after it");
        assert_eq!(length_ms(0, 30_000, 5_000), 0);
        assert_eq!(length_ms(5_000, 30_000, 0), 5_000);
    }

    #[test]
    fn remaining_counts_down_on_the_module_clock() {
        let q = Some(Quarantine { reason: Reason::Startup, since_ms: 1_000 });
        assert_eq!(remaining_ms(q, 1_000, 500), 500);
        assert_eq!(remaining_ms(q, 1_400, 500), 100);
        assert_eq!(remaining_ms(q, 1_500, 500), 0);
        assert_eq!(remaining_ms(q, 9_000, 500), 0);
        assert_eq!(remaining_ms(None, 0, 500), 0);
        assert_eq!(remaining_ms(q, 1_200, 0), 0, "setting the length to 0 ends it");
    }

    #[test]
    fn only_aof_always_skips_it() {
        assert!(!needed_at_start(true, "always"));
        assert!(needed_at_start(true, "everysec"));
        assert!(needed_at_start(false, "always"));
        assert!(needed_at_start(false, "no"));
    }

    #[test]
    fn reasons_read_as_documented() {
        // INFO lock_quarantine_reason and the QUARANTINE error's words.
        assert_eq!(Reason::Startup.name(), "startup");
        assert_eq!(Reason::Promotion.name(), "promotion");
        assert_eq!(Reason::Startup.describe(), "node restarted");
        assert_eq!(Reason::Promotion.describe(), "replica promoted to master");
    }

    #[test]
    fn the_restart_grace_lasts_until_every_restored_lock_has_run_out() {
        // Started at 1,000; max-ttl 30 s, lock-delay 2 s, tolerance 5 s:
        // the grace is 5 s until 1,000 + 30,000 + 2,000 + 5,000.
        let grace = |now| restart_grace_ms(Some(1_000), now, 30_000, 2_000, 5_000);
        assert_eq!(grace(1_000), 5_000);
        assert_eq!(grace(37_999), 5_000, "the latest restored deadline plus its delays");
        assert_eq!(grace(38_000), 0);
        assert_eq!(grace(90_000), 0);
        assert_eq!(restart_grace_ms(None, 1_000, 30_000, 2_000, 5_000), 0, "no grace unless started");
        assert_eq!(restart_grace_ms(Some(1_000), 1_000, 30_000, 0, 0), 0, "tolerance 0: none");
        assert_eq!(restart_grace_ms(Some(1_000), 30_999, 30_000, 0, 0), 0);
        assert_eq!(restart_grace_ms(Some(1_000), 30_999, 30_000, -5, 10), 10, "a negative delay counts as 0");
        assert_eq!(restart_grace_ms(Some(1_000), 31_010, 30_000, -5, 10), 0);
    }

    #[test]
    fn a_quarantine_as_long_as_the_longest_lock_covers_restored_ones() {
        assert!(covers_restored_locks(31_000, 30_000, 0));
        assert!(covers_restored_locks(32_000, 30_000, 2_000));
        assert!(!covers_restored_locks(31_999, 30_000, 2_000));
        assert!(!covers_restored_locks(0, 30_000, 0), "quarantine off");
    }
}
