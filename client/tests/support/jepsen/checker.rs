//! The checker: reads a history and the registers after a run and counts
//! violations of
//!
//! 1. mutual exclusion: the validity windows (grant .. min(validity end,
//!    release)) of successful acquisitions of one resource never overlap. A
//!    holder paused past its validity is not a violation here: its window
//!    ended with its validity, whatever it did later;
//! 2. fencing: ordered by grant (a total order on the one clock, and the
//!    order of the windows when 1 holds), fencing tokens of one resource
//!    strictly increase; so also in real-time order (A complete before B
//!    invoked);
//! 3. the register: a fenced register never accepts an access with a token
//!    below one it accepted before; no accepted write overwrote an
//!    increment it had not read (a lost update); the final value equals the
//!    number of accepted (acknowledged) increments;
//! 4. liveness: after each fault heals, every workload resource is granted
//!    within `bound` (TTL + quarantine + slack), unless the next fault
//!    starts first.

use std::collections::BTreeMap;
use std::time::Duration;

use super::history::{Event, Op, Outcome, RegEntry};

#[derive(Clone, Debug, Default)]
pub struct Violations {
    pub overlaps: usize,
    pub token_order: usize,
    pub stale_accepted: usize,
    pub lost_updates: usize,
    pub final_mismatch: usize,
    pub liveness: usize,
    /// Heals after which liveness could be decided (a grant of every
    /// workload resource came, or a quiet period of `bound` passed).
    pub liveness_checked: usize,
    /// The longest time from a heal to the first grant of every workload
    /// resource, over the heals checked.
    pub recovery_max: Duration,
    /// The first few, described.
    pub details: Vec<String>,
}

const DETAILS_MAX: usize = 12;

impl Violations {
    pub fn total(&self) -> usize {
        self.overlaps
            + self.token_order
            + self.stale_accepted
            + self.lost_updates
            + self.final_mismatch
            + self.liveness
    }

    fn add(&mut self, text: String) {
        if self.details.len() < DETAILS_MAX {
            self.details.push(text);
        }
    }

    /// `0`, or `3 (overlap 1, lost update 2)`.
    pub fn summary(&self) -> String {
        let parts: Vec<String> = [
            (self.overlaps, "overlap"),
            (self.token_order, "token order"),
            (self.stale_accepted, "stale token accepted"),
            (self.lost_updates, "lost update"),
            (self.final_mismatch, "final value"),
            (self.liveness, "liveness"),
        ]
        .iter()
        .filter(|(n, _)| *n > 0)
        .map(|(n, what)| format!("{what} {n}"))
        .collect();
        if parts.is_empty() {
            "0".to_string()
        } else {
            format!("**{}** ({})", self.total(), parts.join(", "))
        }
    }
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1e3)
}

pub fn check(
    ops: &[Op],
    events: &[Event],
    registers: &[(String, u64, Vec<RegEntry>)],
    workload: &[String],
    run_end: Duration,
    bound: Duration,
) -> Violations {
    let mut v = Violations::default();
    let mut granted: BTreeMap<&str, Vec<&Op>> = BTreeMap::new();
    for op in ops.iter().filter(|op| op.outcome == Outcome::Ok) {
        granted.entry(op.resource.as_str()).or_default().push(op);
    }
    for (resource, list) in granted.iter_mut() {
        list.sort_by_key(|op| op.complete);
        // 1. Windows never overlap.
        let mut latest: Option<(&Op, Duration)> = None;
        for op in list.iter() {
            let Some((start, end)) = op.window() else { continue };
            if let Some((other, other_end)) = latest {
                if start < other_end {
                    v.overlaps += 1;
                    v.add(format!(
                        "overlap on '{resource}': client {} granted at {} while client {} held it \
                         (granted {}, valid until {}, released {})",
                        op.client,
                        ms(start),
                        other.client,
                        ms(other.complete),
                        other.validity_end.map_or("-".into(), ms),
                        other.release.map_or("-".into(), ms),
                    ));
                }
            }
            if latest.is_none_or(|(_, e)| end > e) {
                latest = Some((op, end));
            }
        }
        // 2. Fencing tokens strictly increase in grant order.
        let mut highest: Option<&Op> = None;
        for op in list.iter() {
            let Some(fence) = op.fence else { continue };
            if let Some(prev) = highest {
                let prev_fence = prev.fence.unwrap_or_default();
                if fence <= prev_fence {
                    v.token_order += 1;
                    v.add(format!(
                        "token order on '{resource}': client {} granted at {} with fencing token {fence}, \
                         not above client {}'s {prev_fence} granted at {}",
                        op.client,
                        ms(op.complete),
                        prev.client,
                        ms(prev.complete)
                    ));
                }
            }
            if highest.is_none_or(|p| fence > p.fence.unwrap_or_default()) {
                highest = Some(op);
            }
        }
    }

    // 3. The registers.
    for (resource, value, log) in registers {
        let mut highest: Option<u64> = None;
        let mut accepted_writes = 0u64;
        for entry in log.iter().filter(|e| e.accepted) {
            if let Some(token) = entry.token {
                if highest.is_some_and(|h| token < h) {
                    v.stale_accepted += 1;
                    v.add(format!(
                        "register '{resource}' accepted client {}'s token {token} at {} after seeing {}",
                        entry.client,
                        ms(entry.at),
                        highest.unwrap_or_default()
                    ));
                }
                highest = highest.max(Some(token));
            }
            if let Some(base) = entry.base {
                accepted_writes += 1;
                if base != entry.before {
                    v.lost_updates += 1;
                    v.add(format!(
                        "lost update on '{resource}': client {} wrote {} (read {base}) over {} at {}",
                        entry.client,
                        base + 1,
                        entry.before,
                        ms(entry.at)
                    ));
                }
            }
        }
        if *value != accepted_writes {
            v.final_mismatch += 1;
            v.add(format!(
                "register '{resource}' ends at {value} after {accepted_writes} accepted increments"
            ));
        }
    }

    // 4. Liveness after each heal.
    let mut events: Vec<&Event> = events.iter().collect();
    events.sort_by_key(|e| e.start);
    for (i, event) in events.iter().enumerate() {
        let heal = event.end;
        // The next fault that starts after this one healed (faults in the
        // suite do not overlap, but a later one may start while an earlier
        // one's effect, e.g. a quarantine, still runs: that is fine).
        let next = events[i + 1..].iter().map(|e| e.start).filter(|&s| s >= heal).min().unwrap_or(run_end);
        let quiet = next.saturating_sub(heal);
        let window_end = heal + quiet.min(bound);
        let mut missing = Vec::new();
        let mut recovery = Duration::ZERO;
        for resource in workload {
            let first = ops
                .iter()
                .filter(|op| op.outcome == Outcome::Ok && &op.resource == resource)
                .map(|op| op.complete)
                .filter(|&c| c > heal && c <= window_end)
                .min();
            match first {
                Some(c) => recovery = recovery.max(c - heal),
                None => missing.push(resource.as_str()),
            }
        }
        if missing.is_empty() {
            v.liveness_checked += 1;
            v.recovery_max = v.recovery_max.max(recovery);
        } else if quiet >= bound {
            v.liveness_checked += 1;
            v.liveness += 1;
            v.add(format!(
                "liveness: no grant of {missing:?} within {} after '{}' ({}) healed at {}",
                ms(bound),
                event.name,
                event.detail,
                ms(heal)
            ));
        }
        // Otherwise the next fault started first: nothing to conclude.
    }
    v
}
