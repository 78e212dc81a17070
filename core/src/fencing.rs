//! The per-node fencing counter.
//!
//! A token is `max(last + 1, now_ms * 1000)`: a hybrid of a counter and the
//! module clock. Read as a number it is "microsecond-ish epoch time", so a
//! node that restarts and forgets its counter still starts above every token
//! it issued before, provided its wall clock did not step back across the
//! restart (assumption 1 of docs/safety.md; the restart quarantine covers a
//! step back of up to its own length). Up to 1000 grants per millisecond stay
//! on the clock; a faster burst runs ahead and the clock catches up.

/// Tokens per millisecond of clock.
pub const TOKENS_PER_MS: u64 = 1000;

/// The furthest ahead of its clock a start without quarantine sets the
/// counter (30 minutes): half of the one hour ahead of a node's clock past
/// which `LOCK.FENCE` refuses a floor, so that the other nodes still accept
/// this node's tokens when their clocks are up to 30 minutes behind.
pub const START_AHEAD_MAX_MS: i64 = 30 * 60 * 1000;

#[derive(Clone, Debug)]
pub struct Fencer {
    last: u64,
}

impl Fencer {
    pub const fn new(last: u64) -> Fencer {
        Fencer { last }
    }

    pub fn last(&self) -> u64 {
        self.last
    }

    /// The token for a new grant: above every token issued or observed.
    pub fn next(&mut self, now_ms: i64) -> u64 {
        let clock = Self::clock_floor(now_ms);
        self.last = self.last.saturating_add(1).max(clock);
        self.last
    }

    /// Never issue a token at or below one seen in stored state (a replica
    /// promoted, a restart from AOF, a FENCE from the quorum client).
    pub fn raise_to(&mut self, floor: u64) {
        self.last = self.last.max(floor);
    }

    /// The smallest token the clock alone would give at `now_ms`.
    pub fn clock_floor(now_ms: i64) -> u64 {
        u64::try_from(now_ms).unwrap_or(0).saturating_mul(TOKENS_PER_MS)
    }
}

/// The counter's floor at a start that skipped the quarantine (an
/// `appendfsync always` AOF), or whose quarantine an operator ended early:
/// where that quarantine, `quarantine_ms` long from `started_ms`, would have
/// ended, at most [`START_AHEAD_MAX_MS`] ahead of `started_ms`.
///
/// Why: the counter is not stored. After an AOF rewrite the replayed
/// `LOCK.FENCE` raises are gone, and a released lock's key (with the token
/// it was raised to) too, so the clock is the only floor left. A quorum
/// token T came from a node whose clock may be ahead of this one's (within
/// the quarantine period, assumption 2); a node that quarantines grants
/// nothing until its clock has moved `quarantine_ms` on, which puts its
/// tokens above T. Starting the counter there gives the node that skips the
/// wait the same floor.
pub fn start_floor(started_ms: i64, quarantine_ms: i64) -> u64 {
    let ahead_ms = quarantine_ms.clamp(0, START_AHEAD_MAX_MS);
    Fencer::clock_floor(started_ms.saturating_add(ahead_ms))
}

/// Whether a token this node grants at `now_ms` must also be kept in the
/// AOF and on replicas as a counter raise: the key holds it only until the
/// lock is released or expires, and after that a restart without quarantine
/// gets it back only if it is below that start's floor. A restart comes at
/// least a millisecond later, so its floor is at least
/// `start_floor(now_ms + 1, quarantine_ms)` (the clock does not step back
/// across a restart: assumption 1). A token at or above that came from a
/// raise to another node's token or start floor (or a burst of more than
/// 1000 grants in a millisecond with no quarantine set).
///
/// It runs on every grant: a token below the next millisecond's clock floor
/// (nearly all of them) is below every start floor, so the quarantine's
/// length, which takes three settings to work out, is asked for only past
/// that.
pub fn outruns_start_floor(fence: u64, now_ms: i64, quarantine_ms: impl FnOnce() -> i64) -> bool {
    let next_ms = now_ms.saturating_add(1);
    fence >= Fencer::clock_floor(next_ms) && fence >= start_floor(next_ms, quarantine_ms())
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
    fn a_start_without_quarantine_floors_the_counter_where_it_would_have_ended() {
        // Quarantine 5 s: the first token is as if the node had waited it out.
        let mut f = Fencer::new(0);
        f.raise_to(start_floor(1_000, 5_000));
        assert_eq!(f.next(1_000), 6_000_000 + 1);
        // A quorum token from a node whose clock is 2 s ahead stays below.
        assert!(Fencer::clock_floor(1_000 + 2_000) < start_floor(1_000, 5_000));
        assert_eq!(start_floor(1_000, 0), 1_000_000, "quarantine 0: the clock alone");
        assert_eq!(start_floor(1_000, -1), 1_000_000, "a negative length counts as 0");
        assert_eq!(
            start_floor(1_000, 10 * START_AHEAD_MAX_MS),
            Fencer::clock_floor(1_000 + START_AHEAD_MAX_MS),
            "never more than 30 minutes ahead"
        );
        assert_eq!(START_AHEAD_MAX_MS, 1_800_000);
        assert_eq!(start_floor(i64::MAX, 5_000), Fencer::clock_floor(i64::MAX), "saturates");
        assert_eq!(start_floor(-5, 0), 0, "a clock before the epoch: no floor");
    }

    #[test]
    fn a_token_at_or_above_the_start_floor_is_kept_as_a_raise() {
        // At 1,000 ms with a 5 s quarantine, a restart's floor is at least
        // 6,001 ms of tokens.
        assert!(!outruns_start_floor(6_000_999, 1_000, || 5_000), "below: the next start covers it");
        assert!(outruns_start_floor(6_001_000, 1_000, || 5_000));
        assert!(outruns_start_floor(9_000_000, 1_000, || 5_000));
        assert!(!outruns_start_floor(1_000_000, 1_000, || 0), "a token on the clock: never");
        assert!(!outruns_start_floor(1_000_999, 1_000, || 0), "nor a burst within the millisecond");
        assert!(outruns_start_floor(1_001_000, 1_000, || 0));
        assert!(
            !outruns_start_floor(1_000_500, 1_000, || unreachable!("a token on the clock needs no settings")),
            "the quarantine's length is asked for only past the next millisecond's clock floor"
        );
    }

    #[test]
    fn the_start_floor_never_lowers_a_replayed_counter() {
        let mut f = Fencer::new(9_000_000);
        f.raise_to(start_floor(1_000, 5_000));
        assert_eq!(f.last(), 9_000_000);
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
