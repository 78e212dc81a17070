//! The checker: reads a history and the registers after a run and counts
//! violations of
//!
//! 1. mutual exclusion: the windows (grant .. min(validity end, release))
//!    of one resource never overlap where the modes exclude each other (a
//!    plain, reentrant or write hold with anyone; readers share), and never
//!    more than L permit holders of an L-permit semaphore are in their
//!    windows at one instant. A holder paused past its validity is not a
//!    violation here: its window ended with its validity, whatever it did
//!    later;
//! 2. fencing: in grant order, a plain, reentrant or write holder's fencing
//!    token is above every earlier holder's of the resource, and a reader's
//!    above every earlier writer's; and for every kind, a grant that began
//!    after another had completed carries a higher token (real-time order);
//! 3. the register: a fenced register never accepts an access with a token
//!    below one it accepted before; no accepted write overwrote an
//!    increment it had not read (a lost update); the final value equals the
//!    number of accepted (acknowledged) increments;
//! 4. writes within validity: a holder writes only while it knows itself
//!    valid (the latest lease it had learned of when it wrote has not
//!    ended), except the deliberate writes of a paused holder;
//! 5. lock-delay (when the nodes have `lock.expiry-delay-ms`): after a lock
//!    ran out without a release (its holder crashed), it is granted again
//!    no earlier than the delay after its deadline on the nodes;
//! 6. liveness: after each fault heals, every workload resource is granted
//!    within `bound` (TTL + quarantine + lock-delay + slack), unless the
//!    next fault starts first;
//! 7. what the run itself found (`Recorder::found`): a misuse call that was
//!    not refused, a node that died by itself, a lock left behind on a
//!    node, a probe's lock never granted again, a grant by a node whose
//!    eviction guard had to refuse it.

use std::collections::BTreeMap;
use std::time::Duration;

use super::history::{Event, Found, Op, Outcome, RegEntry, Want};

#[derive(Clone, Debug, Default)]
pub struct Violations {
    pub overlaps: usize,
    pub holders: usize,
    pub token_order: usize,
    pub stale_accepted: usize,
    pub lost_updates: usize,
    pub final_mismatch: usize,
    pub outside_validity: usize,
    pub lock_delay: usize,
    pub liveness: usize,
    pub misuse: usize,
    pub node_died: usize,
    pub left_behind: usize,
    pub guard: usize,
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
    fn counts(&self) -> [(usize, &'static str); 13] {
        [
            (self.overlaps, "overlap"),
            (self.holders, "more than L holders"),
            (self.token_order, "token order"),
            (self.stale_accepted, "stale token accepted"),
            (self.lost_updates, "lost update"),
            (self.final_mismatch, "final value"),
            (self.outside_validity, "write outside validity"),
            (self.lock_delay, "lock-delay"),
            (self.liveness, "liveness"),
            (self.misuse, "misuse accepted"),
            (self.node_died, "node died"),
            (self.left_behind, "lock left behind"),
            (self.guard, "eviction guard"),
        ]
    }

    pub fn total(&self) -> usize {
        self.counts().iter().map(|(n, _)| n).sum()
    }

    fn add(&mut self, text: String) {
        if self.details.len() < DETAILS_MAX {
            self.details.push(text);
        }
    }

    /// The kinds found, e.g. `overlap 1, lost update 2` (empty: none).
    pub fn kinds(&self) -> String {
        let parts: Vec<String> =
            self.counts().iter().filter(|(n, _)| *n > 0).map(|(n, what)| format!("{what} {n}")).collect();
        parts.join(", ")
    }

    /// `0`, or `**3** (overlap 1, lost update 2)`.
    pub fn summary(&self) -> String {
        if self.total() == 0 {
            "0".to_string()
        } else {
            format!("**{}** ({})", self.total(), self.kinds())
        }
    }
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1e3)
}

/// What the checker needs to know about the run besides its history.
pub struct Rules<'a> {
    pub workload: &'a [String],
    pub run_end: Duration,
    /// How long after a heal every workload resource must be granted.
    pub bound: Duration,
    pub ttl: Duration,
    /// The nodes' `lock.expiry-delay-ms`, when set.
    pub lock_delay: Option<Duration>,
}

pub fn check(
    ops: &[Op],
    events: &[Event],
    registers: &[(String, u64, Vec<RegEntry>)],
    found: &[(Found, Duration, String)],
    rules: &Rules<'_>,
) -> Violations {
    let mut v = Violations::default();
    let mut granted: BTreeMap<&str, Vec<&Op>> = BTreeMap::new();
    for op in ops.iter().filter(|op| op.outcome == Outcome::Ok) {
        granted.entry(op.resource.as_str()).or_default().push(op);
    }
    for (resource, list) in granted.iter_mut() {
        list.sort_by_key(|op| op.complete);
        exclusion(&mut v, resource, list);
        permits(&mut v, resource, list);
        token_order(&mut v, resource, list);
        precedence(&mut v, resource, list);
        if let Some(delay) = rules.lock_delay {
            lock_delay(&mut v, resource, list, rules.ttl, delay);
        }
    }
    within_validity(&mut v, ops);
    register(&mut v, registers);
    liveness(&mut v, ops, events, rules);
    for (what, at, detail) in found {
        match what {
            Found::Misuse => v.misuse += 1,
            Found::NodeDied => v.node_died += 1,
            Found::LeftBehind => v.left_behind += 1,
            Found::Liveness => v.liveness += 1,
            Found::Guard => v.guard += 1,
        }
        v.add(format!("{what:?} at {}: {detail}", ms(*at)));
    }
    v
}

/// Check 1: windows of holders that exclude each other never overlap (in start
/// order, each window against the latest end of the earlier ones).
fn exclusion(v: &mut Violations, resource: &str, list: &[&Op]) {
    let mut latest_any: Option<(&Op, Duration)> = None;
    let mut latest_alone: Option<(&Op, Duration)> = None;
    for op in list.iter().filter(|op| !matches!(op.want, Want::Permit(_))) {
        let Some((start, end)) = op.window() else { continue };
        let against = if op.want.alone() { latest_any } else { latest_alone };
        if let Some((other, other_end)) = against {
            if start < other_end {
                v.overlaps += 1;
                v.add(format!(
                    "overlap on '{resource}': client {} ({}) granted at {} while client {} ({}) held it \
                     (granted {}, valid until {}, released {})",
                    op.client,
                    op.want.name(),
                    ms(start),
                    other.client,
                    other.want.name(),
                    ms(other.complete),
                    other.validity_end.map_or("-".into(), ms),
                    other.release.map_or("-".into(), ms),
                ));
            }
        }
        if latest_any.is_none_or(|(_, e)| end > e) {
            latest_any = Some((op, end));
        }
        if op.want.alone() && latest_alone.is_none_or(|(_, e)| end > e) {
            latest_alone = Some((op, end));
        }
    }
}

/// Check 1: at most L permit holders in their windows at any instant.
fn permits(v: &mut Violations, resource: &str, list: &[&Op]) {
    let mut edges: Vec<(Duration, i32, u32, usize)> = Vec::new();
    for op in list {
        let Want::Permit(limit) = op.want else { continue };
        let Some((start, end)) = op.window() else { continue };
        if end > start {
            // Ends sort before starts at the same instant: touching
            // windows do not overlap.
            edges.push((start, 1, limit, op.client));
            edges.push((end, -1, limit, op.client));
        }
    }
    edges.sort_by_key(|&(at, delta, _, _)| (at, delta));
    let mut holding = 0i32;
    for (at, delta, limit, client) in edges {
        holding += delta;
        if delta > 0 && holding > limit as i32 {
            v.holders += 1;
            v.add(format!(
                "'{resource}': {holding} holders of {limit} permits at {} (client {client} granted)",
                ms(at)
            ));
        }
    }
}

/// Check 2: in grant order, a holder that must be alone has a token above every
/// earlier holder's; a reader above every earlier writer's.
fn token_order(v: &mut Violations, resource: &str, list: &[&Op]) {
    let mut highest: Option<&Op> = None;
    let mut highest_alone: Option<&Op> = None;
    for op in list.iter().filter(|op| !matches!(op.want, Want::Permit(_))) {
        let Some(fence) = op.fence else { continue };
        let against = if op.want.alone() { highest } else { highest_alone };
        if let Some(prev) = against {
            let prev_fence = prev.fence.unwrap_or_default();
            if fence <= prev_fence {
                v.token_order += 1;
                v.add(format!(
                    "token order on '{resource}': client {} ({}) granted at {} with fencing token {fence}, \
                     not above client {}'s {prev_fence} ({}) granted at {}",
                    op.client,
                    op.want.name(),
                    ms(op.complete),
                    prev.client,
                    prev.want.name(),
                    ms(prev.complete)
                ));
            }
        }
        if highest.is_none_or(|p| fence > p.fence.unwrap_or_default()) {
            highest = Some(op);
        }
        if op.want.alone() && highest_alone.is_none_or(|p| fence > p.fence.unwrap_or_default()) {
            highest_alone = Some(op);
        }
    }
}

/// Check 2: real-time order, for every kind: a grant invoked after another had
/// completed carries a higher token.
fn precedence(v: &mut Violations, resource: &str, list: &[&Op]) {
    let mut by_invoke: Vec<&Op> = list.iter().copied().filter(|op| op.fence.is_some()).collect();
    by_invoke.sort_by_key(|op| op.invoke);
    let by_complete: Vec<&Op> = list.iter().copied().filter(|op| op.fence.is_some()).collect();
    let mut done = 0;
    let mut highest: Option<&Op> = None;
    for op in by_invoke {
        while let Some(prev) = by_complete.get(done) {
            if prev.complete >= op.invoke {
                break;
            }
            if highest.is_none_or(|h| prev.fence > h.fence) {
                highest = Some(prev);
            }
            done += 1;
        }
        if let Some(prev) = highest {
            if op.fence <= prev.fence {
                v.token_order += 1;
                v.add(format!(
                    "token order on '{resource}': client {} ({}) invoked at {} after client {}'s grant \
                     completed at {} with {:?}, got {:?}",
                    op.client,
                    op.want.name(),
                    ms(op.invoke),
                    prev.client,
                    ms(prev.complete),
                    prev.fence,
                    op.fence
                ));
            }
        }
    }
}

/// Check 5: after a hold that must be alone ran out without a release, nobody is
/// granted before its deadline on the nodes (at least its last renewal's
/// invoke + TTL) plus the lock-delay.
fn lock_delay(v: &mut Violations, resource: &str, list: &[&Op], ttl: Duration, delay: Duration) {
    for (i, op) in list.iter().enumerate() {
        if !op.want.alone() || !op.expired_unreleased() {
            continue;
        }
        let free_at = op.renewed_invoke + ttl + delay;
        if let Some(next) = list.get(i + 1..).and_then(|rest| rest.first()) {
            if next.complete < free_at {
                v.lock_delay += 1;
                v.add(format!(
                    "lock-delay on '{resource}': client {}'s lock ran out unreleased (renewed at {}), \
                     client {} was granted at {}, before {} (deadline + {} delay)",
                    op.client,
                    ms(op.renewed_invoke),
                    next.client,
                    ms(next.complete),
                    ms(free_at),
                    ms(delay)
                ));
            }
        }
    }
}

/// Check 4: every write (but a paused holder's) within the validity the writer
/// knew of when it wrote.
fn within_validity(v: &mut Violations, ops: &[Op]) {
    for op in ops.iter().filter(|op| op.outcome == Outcome::Ok && !op.paused) {
        let Some(at) = op.write_at else { continue };
        let until = op.valid_until_at(at);
        if until.is_none_or(|until| at >= until) {
            v.outside_validity += 1;
            v.add(format!(
                "write outside validity on '{}': client {} wrote at {}, its lease then ended at {}",
                op.resource,
                op.client,
                ms(at),
                until.map_or("-".into(), ms)
            ));
        }
    }
}

/// Check 3: the registers.
fn register(v: &mut Violations, registers: &[(String, u64, Vec<RegEntry>)]) {
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
}

/// Check 6: liveness after each heal.
fn liveness(v: &mut Violations, ops: &[Op], events: &[Event], rules: &Rules<'_>) {
    let mut events: Vec<&Event> = events.iter().collect();
    events.sort_by_key(|e| e.start);
    for (i, event) in events.iter().enumerate() {
        let heal = event.end;
        // The next fault that starts after this one healed (faults in the
        // suite do not overlap, but a later one may start while an earlier
        // one's effect, e.g. a quarantine, still runs: that is fine).
        let next =
            events[i + 1..].iter().map(|e| e.start).filter(|&s| s >= heal).min().unwrap_or(rules.run_end);
        let quiet = next.saturating_sub(heal);
        let window_end = heal + quiet.min(rules.bound);
        let mut missing = Vec::new();
        let mut recovery = Duration::ZERO;
        for resource in rules.workload {
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
        } else if quiet >= rules.bound {
            v.liveness_checked += 1;
            v.liveness += 1;
            v.add(format!(
                "liveness: no grant of {missing:?} within {} after '{}' ({}) healed at {}",
                ms(rules.bound),
                event.name,
                event.detail,
                ms(heal)
            ));
        }
        // Otherwise the next fault started first: nothing to conclude.
    }
}
