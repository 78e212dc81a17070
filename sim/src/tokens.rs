//! What property 9 promises of one node's fencing tokens, checked as the
//! node issues them: every token a node issues for a new grant is above
//! every token it issued, and every counter floor a `LOCK.FENCE` raised it
//! to, before, in this process or an earlier one, however its persistence
//! lost data ("tokens issued after a restart are above every token issued
//! before it"). The simulated histories keep the documented assumptions
//! (a wall clock that steps back across a restart by less than the
//! quarantine, or not at all without one), so the promise holds in each.
//! The ledger is the checker's, not the node's: a restart does not touch
//! it.

/// One node's tokens so far, and what broke the promise.
#[derive(Default)]
pub struct Ledger {
    /// The highest token issued or counter floor reached, and when (on
    /// the simulated clock) and in which process (the node's epoch).
    top: Option<(u64, i64, u64)>,
    pub violations: Vec<String>,
}

impl Ledger {
    /// The node issued `token` for a new grant at `at_ms` in process
    /// `epoch`.
    pub fn issued(&mut self, token: u64, at_ms: i64, epoch: u64) {
        if let Some((top, top_ms, top_epoch)) = self.top.filter(|(top, ..)| token <= *top) {
            let across = match epoch - top_epoch {
                0 => String::new(),
                1 => ", before a restart".to_string(),
                n => format!(", {n} restarts before"),
            };
            self.violations.push(format!(
                "issued token {token} at {at_ms} ms, not above token {top} it reached at {top_ms} ms{across}"
            ));
        }
        self.reached(token, at_ms, epoch);
    }

    /// The ledger of a replica promoted in this node's place: its own
    /// tokens from now on, and what this one saw.
    pub fn of_another_process(&self) -> Ledger {
        Ledger { top: None, violations: self.violations.clone() }
    }

    /// The node's counter is at `last` (a `LOCK.FENCE` raise, or a grant).
    pub fn reached(&mut self, last: u64, at_ms: i64, epoch: u64) {
        if self.top.is_none_or(|(top, ..)| last > top) {
            self.top = Some((last, at_ms, epoch));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_at_or_below_one_reached_before_is_a_violation_across_restarts_too() {
        let mut ledger = Ledger::default();
        ledger.issued(5_000, 5, 0);
        ledger.reached(9_000, 6, 0);
        ledger.issued(9_001, 7, 0);
        ledger.issued(12_000, 20, 1);
        assert!(ledger.violations.is_empty(), "{:?}", ledger.violations);
        // A raise below the top changes nothing.
        ledger.reached(100, 21, 1);
        ledger.issued(12_000, 22, 1);
        ledger.issued(1, 40, 2);
        assert_eq!(
            ledger.violations,
            [
                "issued token 12000 at 22 ms, not above token 12000 it reached at 20 ms",
                "issued token 1 at 40 ms, not above token 12000 it reached at 20 ms, before a restart",
            ]
        );
    }
}
