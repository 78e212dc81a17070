//! The quorum arithmetic, as pure functions: no I/O and no clock reads.
//!
//! Every function that needs time takes the instants or durations it works
//! on, so the unit tests below drive it with a fake clock (instants built by
//! adding durations to one base instant) instead of sleeping.

use std::time::{Duration, Instant};

/// The fixed part of the clock-drift allowance (SPEC: ttl * 1% + 2 ms).
pub const DRIFT_FIXED: Duration = Duration::from_millis(2);

/// The proportional part of the drift allowance, in percent of the TTL.
pub const DRIFT_PERCENT: u32 = 1;

/// The watchdog renews after this fraction (1/N) of the TTL.
pub const RENEWAL_DIVISOR: u32 = 3;

/// Tokens and owners the module accepts are at most this long.
pub const TOKEN_BYTES_MAX: usize = 256;

/// The most nodes a client may name: a bound on every per-node loop and on
/// the parallel fan-out (Redlock deployments use 3, 5 or 7).
pub const NODES_MAX: usize = 31;

const _: () = assert!(RENEWAL_DIVISOR >= 2, "renewing only at the deadline would always be late");
const _: () = assert!(DRIFT_PERCENT < 100);
const _: () = assert!(NODES_MAX % 2 == 1);

/// How many grants make a quorum among `nodes` nodes: a strict majority, so
/// that any two quorums share at least one node.
pub fn majority(nodes: usize) -> usize {
    nodes / 2 + 1
}

/// The allowance for clock drift between this client and the nodes.
pub fn drift(ttl: Duration) -> Duration {
    ttl * DRIFT_PERCENT / 100 + DRIFT_FIXED
}

/// The instant until which a lock whose acquisition (or extension) round
/// *started* at `start` is valid: `start + ttl - drift`. Measured from the
/// start, not the end, of the round: a node may have granted at any moment
/// of the round, at the earliest just after `start`.
pub fn deadline(start: Instant, ttl: Duration) -> Instant {
    start + ttl.saturating_sub(drift(ttl))
}

/// The validity left after rounds that took `elapsed`: `ttl - elapsed -
/// drift`, or `None` when nothing is left (the lock expired before use).
pub fn validity(ttl: Duration, elapsed: Duration) -> Option<Duration> {
    ttl.checked_sub(elapsed.saturating_add(drift(ttl))).filter(|left| !left.is_zero())
}

/// Time left until `deadline` at `now` (zero once it has passed).
pub fn remaining(deadline: Instant, now: Instant) -> Duration {
    deadline.saturating_duration_since(now)
}

/// When the watchdog renews a lease that started at `lease_start`.
pub fn next_renewal(lease_start: Instant, ttl: Duration) -> Instant {
    lease_start + (ttl / RENEWAL_DIVISOR).max(Duration::from_millis(1))
}

/// Whether a renewal at `at` stays within the watchdog's bounds.
pub fn renewal_allowed(
    renewals_done: u32,
    renewals_max: u32,
    started: Instant,
    at: Instant,
    duration_max: Duration,
) -> bool {
    renewals_done < renewals_max && at.saturating_duration_since(started) <= duration_max
}

/// The random delay before retry: `min + (max - min) * unit`, with `unit`
/// a random number in `[0, 1)` chosen by the caller.
pub fn retry_delay(min: Duration, max: Duration, unit: f64) -> Duration {
    let spread = max.saturating_sub(min);
    min + spread.mul_f64(unit.clamp(0.0, 1.0))
}

/// A lock token: 128 random bits as 32 lowercase hex digits.
pub fn token_from_bits(bits: u128) -> String {
    format!("{bits:032x}")
}

/// What one node's reply looked like at the transport level.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Raw {
    Int(i64),
    Nil,
    /// Any other well-formed reply (a string, an array, ...).
    Other(String),
    /// An error reply: its code (`ERR`, `WRONGTYPE`, `QUARANTINE`, ...) and
    /// the rest of the line.
    ServerError {
        code: String,
        detail: String,
    },
    /// No reply within the per-node timeout (the command may have run).
    TimedOut,
    /// No connection, or the connection broke (the command may have run).
    Unreachable(String),
}

/// One node's answer to one quorum round, after interpretation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answer {
    /// Granted (with this fencing token), or 1 for FENCE/EXTEND/RELEASE.
    Yes(u64),
    /// Held by another token (ACQUIRE/ENTER), or "not the holder" (0 / nil).
    No,
    /// The node refuses grants for now; the milliseconds left when known.
    Quarantined(Option<u64>),
    TimedOut,
    Unreachable(String),
    /// An error reply or an unexpected reply.
    Failed(String),
}

/// Interprets a reply to `LOCK.ACQUIRE` or `LOCK.ENTER`.
pub fn classify_grant(raw: &Raw) -> Answer {
    match raw {
        Raw::Int(token) if *token > 0 => Answer::Yes(*token as u64),
        Raw::Nil => Answer::No,
        other => classify_failure(other),
    }
}

/// Interprets a 1/0 reply (`LOCK.FENCE`, `LOCK.EXTEND`, `LOCK.RELEASE`).
pub fn classify_flag(raw: &Raw) -> Answer {
    match raw {
        Raw::Int(1) => Answer::Yes(1),
        Raw::Int(0) => Answer::No,
        other => classify_failure(other),
    }
}

/// Interprets a reply to `LOCK.EXIT`: holds left, or nil (not the holder).
pub fn classify_exit(raw: &Raw) -> Answer {
    match raw {
        Raw::Int(left) if *left >= 0 => Answer::Yes(*left as u64),
        Raw::Nil => Answer::No,
        other => classify_failure(other),
    }
}

fn classify_failure(raw: &Raw) -> Answer {
    match raw {
        Raw::ServerError { code, detail } if code == "QUARANTINE" => {
            Answer::Quarantined(quarantine_left_ms(detail))
        }
        Raw::ServerError { code, detail } => Answer::Failed(format!("{code} {detail}").trim().to_string()),
        Raw::TimedOut => Answer::TimedOut,
        Raw::Unreachable(why) => Answer::Unreachable(why.clone()),
        Raw::Int(n) => Answer::Failed(format!("unexpected integer reply {n}")),
        Raw::Nil => Answer::Failed("unexpected nil reply".into()),
        Raw::Other(what) => Answer::Failed(format!("unexpected reply {what}")),
    }
}

/// The milliseconds in `node restarted, refusing new locks for 41250 ms`.
pub fn quarantine_left_ms(detail: &str) -> Option<u64> {
    let before_unit = detail.trim_end().strip_suffix("ms")?.trim_end();
    let digits_at = before_unit.rfind(|c: char| !c.is_ascii_digit()).map_or(0, |i| i + 1);
    before_unit[digits_at..].parse().ok()
}

/// The highest fencing token among the granting nodes: the floor the
/// fencing round raises every node to. `None` when nobody granted.
pub fn fence_floor(answers: &[Answer]) -> Option<u64> {
    answers
        .iter()
        .filter_map(|a| match a {
            Answer::Yes(token) => Some(*token),
            _ => None,
        })
        .max()
}

/// The answers of one round, counted by kind.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    pub nodes: usize,
    pub yes: usize,
    pub no: usize,
    pub quarantined: usize,
    /// The longest quarantine left among the quarantined nodes.
    pub quarantine_left_ms: Option<u64>,
    pub unreachable: usize,
    pub timed_out: usize,
    pub failed: usize,
    /// The first error text, to show what "other errors" were.
    pub first_failure: Option<String>,
}

impl Tally {
    pub fn of(answers: &[Answer]) -> Tally {
        let mut tally = Tally { nodes: answers.len(), ..Tally::default() };
        for answer in answers {
            match answer {
                Answer::Yes(_) => tally.yes += 1,
                Answer::No => tally.no += 1,
                Answer::Quarantined(left) => {
                    tally.quarantined += 1;
                    tally.quarantine_left_ms = tally.quarantine_left_ms.max(*left);
                }
                Answer::TimedOut => tally.timed_out += 1,
                Answer::Unreachable(_) => tally.unreachable += 1,
                Answer::Failed(why) => {
                    tally.failed += 1;
                    tally.first_failure.get_or_insert_with(|| why.clone());
                }
            }
        }
        debug_assert_eq!(
            tally.yes + tally.no + tally.quarantined + tally.timed_out + tally.unreachable + tally.failed,
            tally.nodes
        );
        tally
    }

    pub fn need(&self) -> usize {
        majority(self.nodes)
    }

    pub fn has_quorum(&self) -> bool {
        self.yes >= self.need()
    }

    /// `"2 of 5 granted (need 3); 3 quarantined (up to 1995 ms left)"`, with
    /// `yes` naming what a yes is and `no` what a no is in this round.
    pub fn describe(&self, yes: &str, no: &str) -> String {
        let mut text = format!("{} of {} {yes} (need {})", self.yes, self.nodes, self.need());
        let mut part = |count: usize, what: String| {
            if count > 0 {
                text.push_str(&format!("; {count} {what}"));
            }
        };
        part(self.no, no.to_string());
        part(
            self.quarantined,
            match self.quarantine_left_ms {
                Some(ms) => format!("quarantined (up to {ms} ms left)"),
                None => "quarantined".to_string(),
            },
        );
        part(self.unreachable, "unreachable".to_string());
        part(self.timed_out, "timed out".to_string());
        part(
            self.failed,
            match &self.first_failure {
                Some(why) if self.failed == 1 => format!("other error ({why})"),
                Some(why) => format!("other errors (first: {why})"),
                None => "other errors".to_string(),
            },
        );
        text
    }
}

/// How a grant round ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// A majority granted.
    Quorum,
    /// No majority, and the reason is another holder: either a majority
    /// said "held", or every node answered and only "held" stood in the way.
    Contended,
    /// No majority for other reasons (unreachable, quarantined, timeouts,
    /// errors), possibly mixed with "held".
    NoQuorum,
}

pub fn verdict(tally: &Tally) -> Verdict {
    if tally.has_quorum() {
        Verdict::Quorum
    } else if tally.no > 0 && (tally.no >= tally.need() || tally.yes + tally.no == tally.nodes) {
        Verdict::Contended
    } else {
        Verdict::NoQuorum
    }
}

/// The hold count to report after a reentrant exit: the largest count among
/// the nodes that answered (conservative: "still held somewhere").
pub fn holds_left(answers: &[Answer]) -> Option<u64> {
    fence_floor(answers)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn majority_is_strict() {
        assert_eq!(majority(1), 1);
        assert_eq!(majority(2), 2);
        assert_eq!(majority(3), 2);
        assert_eq!(majority(4), 3);
        assert_eq!(majority(5), 3);
        assert_eq!(majority(7), 4);
        // Any two majorities intersect.
        for n in 1..=NODES_MAX {
            assert!(2 * majority(n) > n, "n = {n}");
        }
    }

    #[test]
    fn drift_is_one_percent_plus_two_ms() {
        assert_eq!(drift(ms(10_000)), ms(102));
        assert_eq!(drift(ms(1_000)), ms(12));
        assert_eq!(drift(ms(100)), ms(3));
        assert_eq!(drift(ms(0)), ms(2));
    }

    #[test]
    fn validity_subtracts_elapsed_and_drift() {
        assert_eq!(validity(ms(10_000), ms(50)), Some(ms(10_000 - 50 - 102)));
        assert_eq!(validity(ms(1_000), ms(988)), None, "exactly zero left is expired");
        assert_eq!(validity(ms(1_000), ms(987)), Some(ms(1)));
        assert_eq!(validity(ms(1_000), ms(5_000)), None);
        assert_eq!(validity(ms(1), ms(0)), None, "a 1 ms ttl is all drift");
    }

    #[test]
    fn deadline_and_remaining_on_a_fake_clock() {
        let t0 = Instant::now();
        let end = deadline(t0, ms(1_000));
        assert_eq!(end, t0 + ms(988));
        assert_eq!(remaining(end, t0 + ms(100)), ms(888));
        assert_eq!(remaining(end, t0 + ms(988)), ms(0));
        assert_eq!(remaining(end, t0 + ms(2_000)), ms(0));
        // The deadline agrees with validity for any elapsed time.
        for elapsed in [0, 1, 500, 987, 988, 1_500] {
            let left = remaining(end, t0 + ms(elapsed));
            assert_eq!(validity(ms(1_000), ms(elapsed)).unwrap_or_default(), left, "elapsed {elapsed}");
        }
    }

    #[test]
    fn renewal_schedule_and_bounds() {
        let t0 = Instant::now();
        assert_eq!(next_renewal(t0, ms(3_000)), t0 + ms(1_000));
        assert_eq!(next_renewal(t0, ms(2)), t0 + ms(1), "never zero");
        assert!(renewal_allowed(0, 3, t0, t0 + ms(10), ms(100)));
        assert!(!renewal_allowed(3, 3, t0, t0 + ms(10), ms(100)), "count bound");
        assert!(!renewal_allowed(0, 3, t0, t0 + ms(101), ms(100)), "duration bound");
        assert!(renewal_allowed(0, 3, t0, t0 + ms(100), ms(100)));
    }

    #[test]
    fn retry_delay_stays_in_range() {
        assert_eq!(retry_delay(ms(50), ms(150), 0.0), ms(50));
        assert_eq!(retry_delay(ms(50), ms(150), 0.5), ms(100));
        assert!(retry_delay(ms(50), ms(150), 0.999_999) <= ms(150));
        assert_eq!(retry_delay(ms(50), ms(150), 7.0), ms(150), "clamped");
        assert_eq!(retry_delay(ms(80), ms(20), 0.5), ms(80), "max below min means min");
    }

    #[test]
    fn tokens_are_32_hex_digits() {
        assert_eq!(token_from_bits(0), "0".repeat(32));
        assert_eq!(token_from_bits(u128::MAX), "f".repeat(32));
        assert_eq!(token_from_bits(0xabc), format!("{}abc", "0".repeat(29)));
        assert!(token_from_bits(u128::MAX).len() <= TOKEN_BYTES_MAX);
    }

    #[test]
    fn grant_replies_are_classified() {
        assert_eq!(classify_grant(&Raw::Int(17)), Answer::Yes(17));
        assert_eq!(classify_grant(&Raw::Nil), Answer::No);
        assert_eq!(
            classify_grant(&Raw::ServerError {
                code: "QUARANTINE".into(),
                detail: "node restarted, refusing new locks for 41250 ms".into()
            }),
            Answer::Quarantined(Some(41_250))
        );
        assert_eq!(
            classify_grant(&Raw::ServerError { code: "WRONGTYPE".into(), detail: "Operation".into() }),
            Answer::Failed("WRONGTYPE Operation".into())
        );
        assert_eq!(classify_grant(&Raw::TimedOut), Answer::TimedOut);
        assert_eq!(
            classify_grant(&Raw::Unreachable("refused".into())),
            Answer::Unreachable("refused".into())
        );
        assert!(matches!(classify_grant(&Raw::Int(0)), Answer::Failed(_)), "0 is not a fencing token");
        assert!(matches!(classify_grant(&Raw::Other("OK".into())), Answer::Failed(_)));
    }

    #[test]
    fn flag_and_exit_replies_are_classified() {
        assert_eq!(classify_flag(&Raw::Int(1)), Answer::Yes(1));
        assert_eq!(classify_flag(&Raw::Int(0)), Answer::No);
        assert!(matches!(classify_flag(&Raw::Int(2)), Answer::Failed(_)));
        assert!(matches!(classify_flag(&Raw::Nil), Answer::Failed(_)));
        assert_eq!(classify_exit(&Raw::Int(0)), Answer::Yes(0));
        assert_eq!(classify_exit(&Raw::Int(3)), Answer::Yes(3));
        assert_eq!(classify_exit(&Raw::Nil), Answer::No);
    }

    #[test]
    fn quarantine_milliseconds_are_parsed() {
        assert_eq!(quarantine_left_ms("node restarted, refusing new locks for 41250 ms"), Some(41_250));
        assert_eq!(quarantine_left_ms("replica promoted to master, refusing new locks for 7 ms"), Some(7));
        assert_eq!(quarantine_left_ms("for 12ms"), Some(12));
        assert_eq!(quarantine_left_ms("refusing new locks"), None);
        assert_eq!(quarantine_left_ms("ms"), None);
    }

    #[test]
    fn fence_floor_is_the_highest_grant() {
        let answers = [Answer::Yes(10), Answer::No, Answer::Yes(30), Answer::TimedOut, Answer::Yes(20)];
        assert_eq!(fence_floor(&answers), Some(30));
        assert_eq!(fence_floor(&[Answer::No, Answer::TimedOut]), None);
    }

    fn tally(answers: &[Answer]) -> Tally {
        Tally::of(answers)
    }

    #[test]
    fn verdicts() {
        use Answer::*;
        let unreachable = || Unreachable("down".into());
        assert_eq!(verdict(&tally(&[Yes(1), Yes(2), Yes(3), No, No])), Verdict::Quorum);
        assert_eq!(verdict(&tally(&[Yes(1), Yes(2), No, No, No])), Verdict::Contended);
        assert_eq!(verdict(&tally(&[No, No, No, unreachable(), unreachable()])), Verdict::Contended);
        assert_eq!(
            verdict(&tally(&[Yes(1), No, unreachable(), unreachable(), unreachable()])),
            Verdict::NoQuorum
        );
        assert_eq!(verdict(&tally(&[Yes(1), Yes(2), No, No])), Verdict::Contended, "all answered");
        assert_eq!(verdict(&tally(&[Yes(1), Yes(2), No, TimedOut])), Verdict::NoQuorum);
        assert_eq!(
            verdict(&tally(&[Yes(1), Yes(2), Quarantined(None), Quarantined(None), Quarantined(None)])),
            Verdict::NoQuorum
        );
        assert_eq!(verdict(&tally(&[Yes(1)])), Verdict::Quorum, "a single node");
    }

    #[test]
    fn tally_describes_every_reason() {
        use Answer::*;
        let t = tally(&[Yes(1), Yes(2), Quarantined(Some(1995)), Quarantined(Some(10)), Quarantined(None)]);
        assert_eq!(
            t.describe("granted", "held by another owner"),
            "2 of 5 granted (need 3); 3 quarantined (up to 1995 ms left)"
        );
        let t = tally(&[Yes(1), No, Unreachable("x".into()), TimedOut, Failed("ERR boom".into())]);
        assert_eq!(
            t.describe("granted", "held by another owner"),
            "1 of 5 granted (need 3); 1 held by another owner; 1 unreachable; 1 timed out; 1 other error (ERR boom)"
        );
        let t = tally(&[Failed("ERR a".into()), Failed("ERR b".into()), Yes(3)]);
        assert_eq!(
            t.describe("fenced", "not holding"),
            "1 of 3 fenced (need 2); 2 other errors (first: ERR a)"
        );
    }

    #[test]
    fn holds_left_is_the_largest_count() {
        assert_eq!(holds_left(&[Answer::Yes(0), Answer::Yes(1), Answer::No]), Some(1));
        assert_eq!(holds_left(&[Answer::No]), None);
    }
}
