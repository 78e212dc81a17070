//! What happened in one simulated run, as the checker needs it, and the
//! checker: the fault suite's properties over the holds the clients saw
//! and the writes the protected resource accepted.
//!
//! - mutual exclusion: no two holds of a resource in common (a set holds
//!   several) that exclude each other (any two but two readers, or two
//!   permits) overlap in validity
//!   (from the grant's return to the earlier of the lease's deadline and
//!   the release; the lease is the latest one an extension or the watchdog
//!   gave);
//! - the semaphore bound: no more holders of permits at once than permits;
//! - the lock-delay: a hold that ran out unreleased keeps others out for
//!   the nodes' lock-delay after its lease's deadline (less the 1% of
//!   drift the client budgets: a node's clock may run fast);
//! - fencing on the resource's side: the resource accepts the writes of
//!   holders in the order they were granted (a write of a superseded
//!   holder after its successor's is a violation);
//! - token order: a hold's fencing token is above the token of every hold
//!   that ended before its grant round began (what `Guard::fencing_token`
//!   promises, whether or not the resource saw a write);
//! - no lock left behind: once every client is done, every fault over and
//!   every TTL and quarantine run out, a new client takes the lock (checked
//!   in `run.rs`, by a probe client); and no node grants a lock to an owner
//!   whose release it already served (a release that overtook its acquire
//!   leaves the lock behind on that node until its TTL runs out).
//! - sets all or nothing: a node that answers a `LOCK.MACQUIRE` with a
//!   token holds the owner on every key of the set, one that refuses it on
//!   no key it did not hold before (checked as the node serves it, in
//!   `net.rs`, by `sets.rs`);
//! - misuse refused: no node answers that it extended (`LOCK.EXTEND`) or
//!   exited (`LOCK.EXIT`) a lock for an owner that holds nothing there
//!   (checked as the misusing client calls, in `run.rs`).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use redlock_client::Mode;

/// One hold a client obtained (and fenced).
#[derive(Clone, Debug)]
pub struct Hold {
    pub client: usize,
    /// Plain, a reader or the writer of a read-write lock, or a permit.
    pub mode: Mode,
    pub token: u64,
    /// When its grant round started (the nodes may grant a reader or a
    /// permit from there, beside holders that end later).
    pub began_ms: i64,
    /// When the fencing round returned: held from there.
    pub granted_ms: i64,
    /// The lease's deadline: after it the lock may be someone else's.
    pub valid_until_ms: i64,
    pub released_ms: Option<i64>,
    /// The resources it holds: one, or a set (taken all or nothing).
    pub keys: Vec<String>,
}

impl Hold {
    /// Whether two holds hold a resource in common.
    pub fn meets(&self, other: &Hold) -> bool {
        self.keys.iter().any(|k| other.keys.contains(k))
    }
}

/// One write the resource saw: which hold, when, and whether it took it.
#[derive(Clone, Debug)]
pub struct Write {
    pub hold: usize,
    /// The resource written (a set's holder writes each of its own).
    pub key: String,
    pub at_ms: i64,
    pub accepted: bool,
}

#[derive(Default)]
pub struct History {
    /// Every event, one line each, in order: the printed history.
    pub lines: Vec<String>,
    /// No lines are kept (a bulk run: a failing seed runs again to print).
    pub unrecorded: bool,
    pub holds: Vec<Hold>,
    pub writes: Vec<Write>,
    /// Each resource's highest accepted token (when it checks tokens).
    pub resource_top: BTreeMap<String, u64>,
    /// The nodes' `lock.expiry-delay-ms` (0: none).
    pub lock_delay_ms: i64,
    /// The (node, owner) pairs whose release a node served.
    pub released: BTreeSet<(usize, Vec<u8>)>,
    /// Violations seen as they happened (a grant after its release).
    pub seen: Vec<String>,
    /// Whether the tokens are fencing tokens (the module's; the classic
    /// recipe's are only counters of grants, and promise no order).
    pub fenced: bool,
}

impl History {
    pub fn note(&mut self, at_ms: i64, what: impl AsRef<str>) {
        if self.unrecorded {
            return;
        }
        self.lines.push(format!("{at_ms:>7} ms  {}", what.as_ref()));
    }

    /// Each resource of `hold` receives a write from it; with `fencing`,
    /// a resource takes only tokens at or above the highest it took.
    /// Whether every one took it.
    pub fn write(&mut self, hold: usize, at_ms: i64, fencing: bool) -> bool {
        let (token, keys) = self.holds.get(hold).map_or((0, Vec::new()), |h| (h.token, h.keys.clone()));
        let mut all = true;
        for key in keys {
            let top = self.resource_top.entry(key.clone()).or_default();
            let accepted = !fencing || token >= *top;
            if accepted {
                *top = (*top).max(token);
            }
            all &= accepted;
            self.writes.push(Write { hold, key, at_ms, accepted });
        }
        all
    }

    /// Node `node` served `words` with a grant (`granted`) or not: a
    /// release is remembered, a grant to an owner whose release the node
    /// served before is a lock left behind.
    pub fn served(&mut self, node: usize, at_ms: i64, words: &[Vec<u8>], granted: bool) {
        let (Some(name), Some(owner)) = (words.first(), words.get(2)) else { return };
        if name.eq_ignore_ascii_case(b"LOCK.RELEASE") {
            self.released.insert((node, owner.clone()));
        } else if granted && self.released.contains(&(node, owner.clone())) {
            self.seen.push(format!(
                "left behind: n{node} granted the lock at {at_ms} ms to {} after serving its release",
                String::from_utf8_lossy(owner)
            ));
        }
    }

    /// The violations of the properties, one line each.
    pub fn violations(&self) -> Vec<String> {
        let mut found = self.seen.clone();
        // A hold released within its lease ends there; one that ran out
        // unreleased (paused past it) keeps the lock taken for the
        // lock-delay after its deadline, less the 1% a fast node clock may
        // take off it (the client budgets 1% of drift on the TTL), or
        // until a late release (a node whose deadline had not come yet
        // takes it).
        let kept_ms = self.lock_delay_ms - self.lock_delay_ms / 100;
        let end = |h: &Hold, kept_ms: i64| {
            let kept_until = h.valid_until_ms.saturating_add(kept_ms);
            h.released_ms.map_or(kept_until, |r| r.min(kept_until))
        };
        let overlap = |a: &Hold, b: &Hold, kept_ms: i64| {
            a.granted_ms < end(b, kept_ms) && b.granted_ms < end(a, kept_ms)
        };
        // Readers share, and so do permits (up to their number).
        let share = |a: &Hold, b: &Hold| {
            matches!((a.mode, b.mode), (Mode::Read, Mode::Read) | (Mode::Permit { .. }, Mode::Permit { .. }))
        };
        for (i, a) in self.holds.iter().enumerate() {
            if let Mode::Permit { permits } = a.mode {
                let at_once = self
                    .holds
                    .iter()
                    .filter(|b| a.meets(b) && b.granted_ms <= a.granted_ms && a.granted_ms < end(b, kept_ms))
                    .count();
                if at_once > permits as usize {
                    found.push(format!(
                        "more than L holders: {at_once} holders of {permits} permits at {} ms, when hold {i} (client {}) was granted",
                        a.granted_ms, a.client
                    ));
                }
            }
            for (j, b) in self.holds.iter().enumerate().skip(i + 1) {
                if a.meets(b) && !share(a, b) && overlap(a, b, kept_ms) {
                    // Within the leases themselves, or only in the
                    // lock-delay after one ran out.
                    let property = if overlap(a, b, 0) { "mutual exclusion" } else { "lock-delay" };
                    found.push(format!(
                        "{property}: hold {i} (client {}, token {}, {}..{} ms) overlaps hold {j} (client {}, token {}, {}..{} ms)",
                        a.client, a.token, a.granted_ms, end(a, kept_ms), b.client, b.token, b.granted_ms, end(b, kept_ms)
                    ));
                }
            }
        }
        for (i, a) in self.holds.iter().enumerate().filter(|_| self.fenced) {
            for (j, b) in self.holds.iter().enumerate() {
                // Holds are recorded in the order they were granted.
                // Within one millisecond, two holds that share the lock
                // may have run in either order.
                let ended_before = if share(a, b) { end(a, 0) < b.began_ms } else { end(a, 0) <= b.began_ms };
                if i < j && ended_before && b.token <= a.token && a.meets(b) {
                    found.push(format!(
                        "token order: hold {j} (client {}, its grant round from {} ms) has token {}, not above token {} of hold {i} (client {}, ended at {} ms)",
                        b.client, b.began_ms, b.token, a.token, a.client, end(a, 0)
                    ));
                }
            }
        }
        let accepted: Vec<&Write> = self.writes.iter().filter(|w| w.accepted).collect();
        let mut seen = Vec::new();
        for (k, later) in accepted.iter().enumerate() {
            for earlier in &accepted[..k] {
                let (e, l) = (&self.holds[earlier.hold], &self.holds[later.hold]);
                // Holders that share the lock may write in any order.
                let shared = share(e, l) && end(l, 0) > e.granted_ms;
                if earlier.hold != later.hold
                    && earlier.key == later.key
                    && !shared
                    && e.granted_ms > l.granted_ms
                    && !seen.contains(&(earlier.hold, later.hold))
                {
                    seen.push((earlier.hold, later.hold));
                    found.push(format!(
                        "fencing: the resource took a write of hold {} (token {}, granted at {} ms) at {} ms, after one of hold {} (token {}, granted later, at {} ms)",
                        later.hold, l.token, l.granted_ms, later.at_ms, earlier.hold, e.token, e.granted_ms
                    ));
                }
            }
        }
        found
    }

    /// The history as printed: every line, then the violations.
    pub fn render(&self, violations: &[String]) -> String {
        let mut out = String::new();
        for line in &self.lines {
            let _ = writeln!(out, "{line}");
        }
        for v in violations {
            let _ = writeln!(out, "VIOLATION {v}");
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hold(
        client: usize,
        token: u64,
        granted_ms: i64,
        valid_until_ms: i64,
        released_ms: Option<i64>,
    ) -> Hold {
        Hold {
            client,
            mode: Mode::Plain,
            token,
            began_ms: granted_ms,
            granted_ms,
            valid_until_ms,
            released_ms,
            keys: vec!["res".to_string()],
        }
    }

    fn properties(history: &History) -> Vec<String> {
        history.violations().iter().map(|v| v.split(':').next().unwrap_or_default().to_string()).collect()
    }

    #[test]
    fn a_later_hold_with_a_lower_token_breaks_token_order() {
        let mut h = History { fenced: true, ..History::default() };
        h.holds = vec![hold(0, 50, 0, 100, Some(40)), hold(1, 60, 40, 140, Some(90))];
        assert!(h.violations().is_empty(), "{:?}", h.violations());
        h.holds.push(hold(0, 55, 90, 190, Some(120)));
        assert_eq!(properties(&h), ["token order"]);
        // The classic recipe's tokens are counters, not fencing tokens.
        h.fenced = false;
        assert!(h.violations().is_empty());
    }

    #[test]
    fn a_hold_that_ran_out_unreleased_keeps_the_lock_delay() {
        let mut h = History { lock_delay_ms: 200, fenced: true, ..History::default() };
        // Paused past its lease (released at 300, after 100): others wait
        // until 100 + 198.
        h.holds = vec![hold(0, 50, 0, 100, Some(300)), hold(1, 60, 250, 350, Some(260))];
        assert_eq!(properties(&h), ["lock-delay"]);
        h.holds[1].granted_ms = 298;
        assert!(h.violations().is_empty(), "{:?}", h.violations());
        // Released within its lease: no lock-delay.
        h.holds = vec![hold(0, 50, 0, 100, Some(60)), hold(1, 60, 61, 160, Some(70))];
        assert!(h.violations().is_empty(), "{:?}", h.violations());
        // Overlapping leases are a mutual exclusion violation.
        h.holds[1].granted_ms = 50;
        assert_eq!(properties(&h), ["mutual exclusion"]);
    }

    #[test]
    fn holds_exclude_each_other_only_on_a_resource_in_common() {
        let mut h = History { fenced: true, ..History::default() };
        let on =
            |keys: &[&str], hold: Hold| Hold { keys: keys.iter().map(|k| k.to_string()).collect(), ..hold };
        h.holds = vec![
            on(&["res", "res2"], hold(0, 50, 0, 100, Some(90))),
            on(&["res3"], hold(1, 40, 10, 100, Some(80))),
        ];
        assert!(h.violations().is_empty(), "{:?}", h.violations());
        h.holds.push(on(&["res3", "res2"], hold(1, 60, 20, 100, Some(80))));
        assert_eq!(properties(&h), ["mutual exclusion", "mutual exclusion"]);
        // Each resource keeps its own highest token.
        let mut h = History { fenced: true, ..History::default() };
        h.holds =
            vec![on(&["res"], hold(0, 50, 0, 100, Some(90))), on(&["res2"], hold(1, 40, 10, 100, Some(80)))];
        assert!(h.write(0, 5, true) && h.write(1, 15, true));
    }

    #[test]
    fn readers_share_permits_share_up_to_their_number() {
        let mut h = History { fenced: true, ..History::default() };
        let with = |mode: Mode, hold: Hold| Hold { mode, ..hold };
        h.holds = vec![
            with(Mode::Read, hold(0, 50, 0, 100, Some(90))),
            with(Mode::Read, hold(1, 50, 10, 100, Some(80))),
        ];
        assert!(h.violations().is_empty(), "{:?}", h.violations());
        h.holds[1].mode = Mode::Write;
        assert_eq!(properties(&h), ["mutual exclusion"]);
        let permit = Mode::Permit { permits: 2 };
        h.holds =
            vec![with(permit, hold(0, 50, 0, 100, Some(90))), with(permit, hold(1, 60, 10, 100, Some(80)))];
        assert!(h.violations().is_empty(), "{:?}", h.violations());
        h.holds.push(with(permit, hold(2, 70, 20, 100, Some(30))));
        assert_eq!(properties(&h), ["more than L holders"]);
    }

    #[test]
    fn a_grant_after_the_owners_release_is_a_lock_left_behind() {
        let mut h = History::default();
        let words = |name: &str, owner: &str| {
            vec![name.as_bytes().to_vec(), b"res".to_vec(), owner.as_bytes().to_vec()]
        };
        h.served(0, 5, &words("LOCK.ACQUIRE", "a"), true);
        h.served(0, 6, &words("LOCK.RELEASE", "a"), false);
        h.served(1, 7, &words("LOCK.RELEASE", "b"), false);
        h.served(0, 8, &words("LOCK.ACQUIRE", "b"), true);
        h.served(1, 8, &words("LOCK.ACQUIRE", "b"), false);
        assert!(h.violations().is_empty(), "{:?}", h.violations());
        h.served(1, 9, &words("LOCK.ACQUIRE", "b"), true);
        assert_eq!(properties(&h), ["left behind"]);
    }
}
