//! The per-node fencing counter.
//!
//! A token is `max(last + 1, now_ms * 1000)`: a hybrid of a counter and the
//! module clock. Read as a number it is "microsecond-ish epoch time", so a
//! node that restarts and forgets its counter still starts above every token
//! it issued before once its quarantine is over (docs/safety.md,
//! assumptions 1 and 2). Up to 1000 grants per millisecond stay on the
//! clock; a faster burst runs ahead and the clock catches up.
//!
//! What a node keeps of its counter: the value its AOF and replicas hold,
//! [`Fencer::kept`]. It only rises: a `LOCK.FENCE` raise (replicated as
//! itself), the node's ledger read back from an RDB or an AOF's RDB preamble
//! (every save writes the counter), and [`Fencer::to_keep`], which a grant
//! calls: a token above what is kept has the counter written ahead by
//! [`KEEP_AHEAD_MS`] of clock, so every token the node ever issued is at or
//! below a value that survives a restart from an `appendfsync always` AOF,
//! with or without a rewrite, and the write happens about once a second at
//! most. So a start without quarantine needs no floor ahead of the clock,
//! and no token is ever further ahead of the clocks than `KEEP_AHEAD_MS`
//! plus what they disagree by.

/// Tokens per millisecond of clock.
pub const TOKENS_PER_MS: u64 = 1000;

/// How far ahead of its clock a grant writes the counter it keeps (1 s):
/// the next second of grants on the clock needs no write. It is also the
/// most a token is ever ahead of the clock of the node that issued it
/// (beyond a raise to another node's token), which the quarantine must
/// cover on the other nodes (docs/safety.md, assumption 2).
pub const KEEP_AHEAD_MS: i64 = 1000;

#[derive(Clone, Debug)]
pub struct Fencer {
    last: u64,
    kept: u64,
}

impl Fencer {
    /// A counter at `last`, which the node's persistence already holds (a
    /// start, a restored ledger).
    pub const fn new(last: u64) -> Fencer {
        Fencer { last, kept: last }
    }

    pub fn last(&self) -> u64 {
        self.last
    }

    /// The value the node's AOF and replicas hold: every token issued is at
    /// or below it once the grant's writes are propagated.
    pub fn kept(&self) -> u64 {
        self.kept
    }

    /// The token for a new grant: above every token issued or observed.
    pub fn next(&mut self, now_ms: i64) -> u64 {
        let clock = Self::clock_floor(now_ms);
        self.last = self.last.saturating_add(1).max(clock);
        self.last
    }

    /// Never issue a token at or below one seen in stored state (a token
    /// read back from a stored lock, a FENCE from the quorum client).
    pub fn raise_to(&mut self, floor: u64) {
        self.last = self.last.max(floor);
    }

    /// A raise the AOF and replicas hold already (a `LOCK.FENCE` that is
    /// replicated as itself, a replayed one, the ledger read back).
    pub fn raise_kept(&mut self, floor: u64) {
        self.raise_to(floor);
        self.kept = self.kept.max(floor);
    }

    /// After a grant at `now_ms`: the value to write to the AOF and replicas
    /// as a counter raise, when the counter is above what they hold. It is
    /// [`KEEP_AHEAD_MS`] of clock ahead, so that the grants of the next
    /// second need none; `None` (nearly always) when nothing is to write.
    pub fn to_keep(&mut self, now_ms: i64) -> Option<u64> {
        if self.last <= self.kept {
            return None;
        }
        self.kept = self.last.max(Self::clock_floor(now_ms.saturating_add(KEEP_AHEAD_MS)));
        Some(self.kept)
    }

    /// The smallest token the clock alone would give at `now_ms`.
    pub fn clock_floor(now_ms: i64) -> u64 {
        u64::try_from(now_ms).unwrap_or(0).saturating_mul(TOKENS_PER_MS)
    }
}

/// When the grant that issued `fence` happened, on the module clock (ms):
/// a token is the grant's clock in microsecond-ish units unless more than
/// `TOKENS_PER_MS` grants a millisecond ran the counter ahead, or a FENCE
/// raised the holder to another node's token (whose clock agrees with this
/// one's as far as the quorum's drift bound). Good for statistics (hold
/// times), not for safety.
pub fn granted_at_ms(fence: u64) -> i64 {
    i64::try_from(fence / TOKENS_PER_MS).unwrap_or(i64::MAX)
}

/// A token as a reply integer. Tokens stay far below i64::MAX until the
/// year 2262 (`now_ms * 1000`); saturate rather than wrap past it.
pub fn to_reply(fence: u64) -> i64 {
    i64::try_from(fence).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn follows_the_clock_and_never_repeats() {
        let mut f = Fencer::new(0);
        assert_eq!(f.next(5), 5000);
        assert_eq!(f.next(5), 5001);
        assert_eq!(f.next(4), 5002, "a clock step back does not lower tokens");
        assert_eq!(f.next(9), 9000);
    }

    #[test]
    fn last_is_the_latest_token_or_floor() {
        let mut f = Fencer::new(0);
        assert_eq!(f.last(), 0);
        let t = f.next(7);
        assert_eq!(f.last(), t);
        f.raise_to(t + 40);
        assert_eq!(f.last(), t + 40, "INFO shows the raised counter");
    }

    #[test]
    fn replies_carry_the_token_and_saturate_rather_than_wrap() {
        // Every grant replies its token as an integer (safety property 4): a
        // token past i64::MAX must not come out negative, below earlier ones.
        assert_eq!(to_reply(1_795_312_345_678_001), 1_795_312_345_678_001);
        assert_eq!(to_reply(i64::MAX as u64), i64::MAX);
        assert_eq!(to_reply(u64::MAX), i64::MAX);
    }

    #[test]
    fn a_grant_above_what_is_kept_writes_the_counter_a_second_ahead() {
        let mut f = Fencer::new(0);
        let t = f.next(1_000);
        assert_eq!(t, 1_000_000);
        assert_eq!(f.to_keep(1_000), Some(2_000_000), "one second of clock ahead");
        assert_eq!(f.kept(), 2_000_000);
        for now in [1_000, 1_500, 1_999] {
            let t = f.next(now);
            assert!(t <= f.kept());
            assert_eq!(f.to_keep(now), None, "the next second of grants writes nothing");
        }
        assert_eq!(f.next(2_000), 2_000_000, "at the kept value");
        assert_eq!(f.to_keep(2_000), None);
        assert_eq!(f.next(2_000), 2_000_001, "above the kept value");
        assert_eq!(f.to_keep(2_000), Some(3_000_000));
    }

    #[test]
    fn a_raise_far_ahead_is_kept_by_the_grant_above_it() {
        let mut f = Fencer::new(0);
        f.next(1_000);
        f.to_keep(1_000);
        f.raise_to(600_000_000);
        let t = f.next(1_000);
        assert_eq!(t, 600_000_001);
        assert_eq!(f.to_keep(1_000), Some(600_000_001), "the token itself, already past a second of clock");
        assert_eq!(f.to_keep(1_000), None);
    }

    #[test]
    fn a_kept_raise_needs_no_write() {
        let mut f = Fencer::new(0);
        f.raise_kept(5_000_000);
        assert_eq!((f.last(), f.kept()), (5_000_000, 5_000_000));
        assert_eq!(f.to_keep(1), None);
        f.raise_kept(4_000_000);
        assert_eq!((f.last(), f.kept()), (5_000_000, 5_000_000), "never lowered");
    }

    proptest! {
        /// Whatever the clock, the raises and the grants: after each grant's
        /// keep, every token issued is at or below what is kept, so a
        /// restart from the kept value issues none of them again.
        #[test]
        fn every_token_is_at_or_below_what_is_kept(ops in proptest::collection::vec((0i64..1_000_000, 0u8..3, 0u64..2_000_000_000), 1..200)) {
            let mut f = Fencer::new(0);
            let mut issued = 0;
            for (now, op, floor) in ops {
                match op {
                    0 => f.raise_to(floor),
                    1 => f.raise_kept(floor),
                    _ => {}
                }
                issued = issued.max(f.next(now));
                f.to_keep(now);
                prop_assert!(issued <= f.kept());
                let mut restarted = Fencer::new(f.kept());
                prop_assert!(restarted.next(0) > issued);
            }
        }
    }

    proptest! {
        #[test]
        fn strictly_increasing(ops in proptest::collection::vec((0i64..1_000_000, any::<bool>(), 0u64..2_000_000_000), 1..200)) {
            let mut f = Fencer::new(0);
            let mut prev = 0;
            for (now, raise, floor) in ops {
                if raise { f.raise_to(floor); prev = prev.max(floor); }
                let t = f.next(now);
                prop_assert!(t > prev);
                prev = t;
            }
        }
    }
}
