//! The quorum arithmetic, as pure functions: no I/O and no clock reads.
//!
//! Every function that needs time takes the instants or durations it works
//! on, so the unit tests below drive it with a fake clock (instants built by
//! adding durations to one base instant) instead of sleeping. The instants
//! are tokio's (`tokio::time::Instant`), the one clock of the whole client:
//! the guard, the watchdog and the retries read it too, so their tests run
//! on tokio's paused clock and assert exact schedules.

use std::time::Duration;

use tokio::time::Instant;

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

/// The most resources one set may hold: the nodes' defaults for one
/// `LOCK.MACQUIRE` / `LOCK.MRELEASE` (`lock.max-multi-keys`, 100) and for
/// one `LOCK.RENEW` (`lock.max-renew-keys`, 100), which renews the set; a
/// larger set is refused before any round rather than by every node (or,
/// worse, granted and then never extended).
pub const SET_KEYS_MAX: usize = 100;

const _: () = assert!(RENEWAL_DIVISOR >= 2, "renewing only at the deadline would always be late");
const _: () = assert!(DRIFT_PERCENT < 100);
const _: () = assert!(NODES_MAX % 2 == 1);

/// How many grants make a quorum among `nodes` nodes: a strict majority, so
/// that any two quorums share at least one node.
pub fn majority(nodes: usize) -> usize {
    nodes / 2 + 1
}

/// How many grants a semaphore with `permits` permits needs among `nodes`
/// nodes: `floor(permits * nodes / (permits + 1)) + 1`, the least `q` with
/// `(permits + 1) * q > permits * nodes`. A majority for one permit; all
/// nodes once `permits >= nodes - 1`. `permits` 0 (refused before any
/// round) is treated as 1.
///
/// # Why a majority is not enough
///
/// Each node lets at most L = `permits` tokens hold a permit at once. A
/// client believes it holds a permit when q nodes granted it. Two majorities
/// share a node, so for L = 1 a majority excludes a second holder; for
/// L >= 2 it does not: with N = 3, L = 2, holders A on {1, 2}, B on {2, 3}
/// and C on {1, 3} leave each node with 2 holders (within its limit), yet
/// three clients hold one of two permits.
///
/// # Why this q is enough, and the least that is
///
/// Enough (pigeonhole): suppose L + 1 clients hold a permit at the same
/// time, each granted by q nodes. That is (L + 1) * q (client, node) grants
/// live at once, and each node carries at most L of them, so at most L * N
/// in all. (L + 1) * q > L * N makes that impossible: at most L clients
/// hold a permit at any moment.
///
/// Least: with q' = q - 1, (L + 1) * q' <= L * N, and L + 1 clients can
/// each get q' nodes without any node exceeding L: deal the (L + 1) * q'
/// grants round-robin over the nodes (client i takes nodes i*q', ...,
/// i*q' + q' - 1, mod N). Each node receives at most
/// ceil((L + 1) * q' / N) <= L grants, and a client's q' <= N nodes are
/// distinct. The unit tests check both directions by brute force.
///
/// The same q is needed wherever a permit must still be counted: to extend
/// it (a permit renewed on fewer than q nodes no longer bounds the holders)
/// and to confirm a release. The fencing round stays a majority: its
/// argument (every later grant quorum, at least a majority, meets our FENCE
/// majority in a node that will not grant a token at or below T) does not
/// depend on the permit count.
pub fn semaphore_quorum(nodes: usize, permits: u32) -> usize {
    let l = u64::from(permits.max(1));
    let n = nodes as u64;
    let q = l * n / (l + 1) + 1;
    usize::try_from(q).unwrap_or(nodes).min(nodes.max(1))
}

/// What a grant asks the nodes for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Mode {
    /// The plain lock (`LOCK.ACQUIRE`): one holder.
    #[default]
    Exclusive,
    /// A read hold of a read-write lock (`LOCK.SHARED`): many readers.
    Read,
    /// A write hold of a read-write lock (`LOCK.EXCLUSIVE`): alone, no
    /// readers.
    Write,
    /// One of `permits` permits of a semaphore (`LOCK.SEMAPHORE`).
    Permit { permits: u32 },
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Exclusive => "exclusive",
            Mode::Read => "read",
            Mode::Write => "write",
            Mode::Permit { .. } => "permit",
        }
    }

    /// The quorum its grants (and extensions, and releases) need.
    ///
    /// Read and write: a majority. A reader's majority and a writer's
    /// majority share a node, and that node does not let a writer hold
    /// together with anyone; two writers' majorities likewise. Readers
    /// among themselves need no exclusion. A semaphore: see
    /// [`semaphore_quorum`].
    pub fn quorum(self) -> Quorum {
        match self {
            Mode::Exclusive | Mode::Read | Mode::Write => Quorum::Majority,
            Mode::Permit { permits } => Quorum::Permits(permits),
        }
    }
}

/// How many yes answers a round needs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Quorum {
    /// N/2 + 1: plain, reentrant, read and write locks, every fencing round.
    #[default]
    Majority,
    /// A semaphore with this many permits: [`semaphore_quorum`].
    Permits(u32),
}

impl Quorum {
    pub fn need(self, nodes: usize) -> usize {
        match self {
            Quorum::Majority => majority(nodes),
            Quorum::Permits(permits) => semaphore_quorum(nodes, permits),
        }
    }
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

/// How [`crate::Redlock::acquire`] (and [`RetryPolicy::retry`]) retries: at
/// most `attempts_max` attempts, a random delay in `delay_min..=delay_max`
/// between two, and no new attempt after `total_max` (when set).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    pub attempts_max: u32,
    pub delay_min: Duration,
    pub delay_max: Duration,
    pub total_max: Option<Duration>,
}

impl Default for RetryPolicy {
    fn default() -> RetryPolicy {
        RetryPolicy {
            attempts_max: 3,
            delay_min: Duration::from_millis(50),
            delay_max: Duration::from_millis(200),
            total_max: None,
        }
    }
}

impl RetryPolicy {
    /// A fixed number of attempts (at least one) with the default delays.
    pub fn attempts(attempts_max: u32) -> RetryPolicy {
        RetryPolicy { attempts_max: attempts_max.max(1), ..RetryPolicy::default() }
    }

    /// Keep trying for `total` (the last attempt starts at `total` at the
    /// latest); the attempt count is bounded by `total / delay_min + 2`.
    pub fn within(total: Duration) -> RetryPolicy {
        let policy = RetryPolicy { total_max: Some(total), ..RetryPolicy::default() };
        policy.with_delays(policy.delay_min, policy.delay_max)
    }

    /// Other delay bounds (`max` below `min` means `min`); a policy with a
    /// total time gets the attempt bound that goes with them.
    pub fn with_delays(mut self, min: Duration, max: Duration) -> RetryPolicy {
        self.delay_min = min;
        self.delay_max = max.max(min);
        if let Some(total) = self.total_max {
            let attempts = total.as_millis() / min.as_millis().max(1) + 2;
            self.attempts_max = u32::try_from(attempts).unwrap_or(u32::MAX);
        }
        self
    }

    /// The delay before the next attempt, after `attempts_done` attempts
    /// that failed with a retryable error and took `elapsed` since the
    /// first began; `None`: give up. `unit` is a random number in `[0, 1)`
    /// (see [`retry_delay`]). The delay is cut to what is left of
    /// `total_max`, so that no attempt starts after it.
    pub fn delay_after(&self, attempts_done: u32, elapsed: Duration, unit: f64) -> Option<Duration> {
        if attempts_done >= self.attempts_max {
            return None;
        }
        let delay = retry_delay(self.delay_min, self.delay_max, unit);
        match self.total_max {
            None => Some(delay),
            Some(total) => {
                let left = total.saturating_sub(elapsed);
                (!left.is_zero()).then(|| delay.min(left))
            }
        }
    }
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
    /// An array (`LOCK.RENEW`, `LOCK.MRELEASE`), or the replies of a
    /// pipeline in order (the fencing round of a set): one entry per key.
    Array(Vec<Raw>),
    /// Any other well-formed reply (a string, ...).
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

/// Interprets one node's per-key 1/0 replies for a set of keys
/// (`LOCK.RENEW`, `LOCK.MRELEASE`, or the pipelined `LOCK.FENCE`s of the
/// fencing round): yes only when every key answered 1, so that a node
/// counts towards a set's quorum only if it did the whole set. Any error
/// among them is the node's answer (the first one); else any 0 makes it a
/// no (that node no longer holds the whole set).
pub fn classify_every_flag(raw: &Raw) -> Answer {
    let Raw::Array(flags) = raw else { return classify_failure(raw) };
    if flags.is_empty() {
        return Answer::Failed("unexpected empty array".into());
    }
    let mut answer = Answer::Yes(1);
    for flag in flags {
        match classify_flag(flag) {
            Answer::Yes(_) => {}
            Answer::No => answer = Answer::No,
            failure => return failure,
        }
    }
    answer
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
        Raw::Array(items) => Answer::Failed(format!("unexpected array of {} replies", items.len())),
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
pub fn fence_floor<'a>(answers: impl IntoIterator<Item = &'a Answer>) -> Option<u64> {
    answers
        .into_iter()
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
    /// What "enough yes answers" means in this round (a majority unless it
    /// is a semaphore's grant, extension or release).
    pub quorum: Quorum,
    pub yes: usize,
    pub no: usize,
    pub quarantined: usize,
    /// The longest quarantine left among the quarantined nodes.
    pub quarantine_left_ms: Option<u64>,
    pub unreachable: usize,
    pub timed_out: usize,
    pub failed: usize,
    /// The first error text, to show what "other errors" were. A boxed
    /// `str` (16 bytes, not a `String`'s 24) keeps the errors that carry a
    /// tally small, now that it also carries its quorum.
    pub first_failure: Option<Box<str>>,
}

impl Tally {
    pub fn of(answers: &[Answer]) -> Tally {
        Tally::of_partial(answers.iter().map(Some))
    }

    /// The counts of a round that may not have heard from every node yet
    /// (`None`: still pending).
    pub fn of_partial<'a>(answers: impl IntoIterator<Item = Option<&'a Answer>>) -> Tally {
        let mut tally = Tally::default();
        for answer in answers {
            tally.nodes += 1;
            let Some(answer) = answer else { continue };
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
                    tally.first_failure.get_or_insert_with(|| why.as_str().into());
                }
            }
        }
        tally
    }

    /// The nodes that had not answered yet when the round was decided: a
    /// success returns at the majority, and these calls finish in the
    /// background (see `Redlock::settle`). Always 0 in an error's counts:
    /// a failed round waits for every answer.
    pub fn pending(&self) -> usize {
        let answered =
            self.yes + self.no + self.quarantined + self.timed_out + self.unreachable + self.failed;
        self.nodes.saturating_sub(answered)
    }

    pub fn need(&self) -> usize {
        self.quorum.need(self.nodes)
    }

    /// The same counts, judged against `quorum`.
    pub fn with_quorum(mut self, quorum: Quorum) -> Tally {
        self.quorum = quorum;
        self
    }

    pub fn has_quorum(&self) -> bool {
        self.yes >= self.need()
    }

    /// `"2 of 5 granted (need 3); 3 quarantined (up to 1995 ms left)"`, with
    /// `yes` naming what a yes is and `no` what a no is in this round.
    pub fn describe(&self, yes: &str, no: &str) -> String {
        // A quorum above the majority surprises: say where it comes from.
        let why = match self.quorum {
            Quorum::Permits(permits) if self.need() > majority(self.nodes) => {
                format!(" for a {permits}-permit semaphore")
            }
            _ => String::new(),
        };
        let mut text = format!("{} of {} {yes} (need {}{why})", self.yes, self.nodes, self.need());
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
        part(self.pending(), "still in flight".to_string());
        text
    }
}

/// The answers of one round as they come in, in node order, and whether
/// they decide it yet.
///
/// A round is decided as soon as its quorum (a majority, or a semaphore's
/// larger one) said yes (success), or so many said anything else that the
/// quorum is out of reach (failure). The client
/// returns at a success at once; on a failure it still waits for every
/// answer (each bounded by its timeout), so that errors give exact counts
/// and the undo knows which nodes granted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Progress {
    answers: Vec<Option<Answer>>,
    quorum: Quorum,
    yes: usize,
    answered: usize,
}

impl Progress {
    /// A round that needs a majority.
    pub fn new(nodes: usize) -> Progress {
        Progress::with_quorum(nodes, Quorum::Majority)
    }

    /// A round that needs `quorum` (a semaphore's, for its grant round).
    pub fn with_quorum(nodes: usize, quorum: Quorum) -> Progress {
        Progress { answers: vec![None; nodes], quorum, yes: 0, answered: 0 }
    }

    /// Records node `node`'s answer; a second answer for the same node, or
    /// a node out of range, is ignored (it cannot happen: one call per node).
    pub fn record(&mut self, node: usize, answer: Answer) {
        if let Some(slot @ None) = self.answers.get_mut(node) {
            if matches!(answer, Answer::Yes(_)) {
                self.yes += 1;
            }
            self.answered += 1;
            *slot = Some(answer);
        }
    }

    /// `Some(true)` once the round's quorum (a majority unless a
    /// semaphore's) said yes, `Some(false)` once it cannot be reached any
    /// more, `None` while it still depends on the answers to come.
    pub fn decided(&self) -> Option<bool> {
        let need = self.quorum.need(self.answers.len());
        let nodes = self.answers.len();
        if self.yes >= need {
            Some(true)
        } else if self.yes + (nodes - self.answered) < need {
            Some(false)
        } else {
            None
        }
    }

    /// Every node has answered (or timed out).
    pub fn complete(&self) -> bool {
        self.answered == self.answers.len()
    }

    pub fn answers(&self) -> &[Option<Answer>] {
        &self.answers
    }

    /// The highest token among the yes answers so far (see [`fence_floor`]).
    pub fn fence_floor(&self) -> Option<u64> {
        fence_floor(self.answers.iter().flatten())
    }

    /// The answers, given up by the round (kept by a guard for a later
    /// fencing round).
    pub fn into_answers(self) -> Vec<Option<Answer>> {
        self.answers
    }

    /// The fencing round that raises every node holding our lock to the
    /// quorum token `floor`, planned from the grant round's `grants`:
    /// the round (a majority) with the answers already known recorded, and
    /// the nodes that still need `LOCK.FENCE key token floor`.
    ///
    /// Two kinds of node need no FENCE, as it would change nothing there:
    /// one whose grant carried `floor` itself (its counter is at `floor`
    /// and it granted us: it counts as fenced; with one node, or when one
    /// node's token is the highest, that saves a command), and one that
    /// said "held" (it would answer 0). Every other node gets one, also a
    /// node whose grant is still on its way or timed out: the FENCE is
    /// queued behind that grant on the node's connection.
    pub fn fencing(grants: &[Option<Answer>], floor: u64) -> (Progress, Vec<usize>) {
        let mut round = Progress::new(grants.len());
        let mut targets = Vec::with_capacity(grants.len());
        for (node, answer) in grants.iter().enumerate() {
            match answer {
                Some(Answer::Yes(token)) if *token == floor => round.record(node, Answer::Yes(1)),
                Some(Answer::No) => round.record(node, Answer::No),
                _ => targets.push(node),
            }
        }
        (round, targets)
    }

    pub fn tally(&self) -> Tally {
        Tally::of_partial(self.answers.iter().map(Option::as_ref)).with_quorum(self.quorum)
    }
}

/// How a grant round ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The round's quorum granted.
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
pub fn holds_left<'a>(answers: impl IntoIterator<Item = &'a Answer>) -> Option<u64> {
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
    fn semaphore_quorum_table() {
        // The README's table for five nodes.
        let five: Vec<usize> = (1..=6).map(|permits| semaphore_quorum(5, permits)).collect();
        assert_eq!(five, [3, 4, 4, 5, 5, 5]);
        assert_eq!(semaphore_quorum(3, 1), 2);
        assert_eq!(semaphore_quorum(3, 2), 3, "the counterexample's size needs all three");
        assert_eq!(semaphore_quorum(7, 2), 5);
        assert_eq!(semaphore_quorum(7, 3), 6);
        assert_eq!(semaphore_quorum(1, 5), 1);
        assert_eq!(semaphore_quorum(5, 0), 3, "0 permits counts as 1");
        assert_eq!(semaphore_quorum(5, u32::MAX), 5, "no overflow, never above N");
        for n in 1..=NODES_MAX {
            assert_eq!(semaphore_quorum(n, 1), majority(n), "one permit is a plain lock, n = {n}");
            for permits in 1..=40u32 {
                let q = semaphore_quorum(n, permits);
                let l = permits as usize;
                // The least q with (L + 1) * q > L * N, capped at N.
                assert!(q <= n && q >= majority(n), "n = {n}, permits = {permits}");
                assert!((l + 1) * q > l * n, "enough: n = {n}, permits = {permits}");
                assert!((l + 1) * (q - 1) <= l * n, "least: n = {n}, permits = {permits}");
            }
        }
        assert_eq!(Mode::Permit { permits: 2 }.quorum().need(5), 4);
        for mode in [Mode::Exclusive, Mode::Read, Mode::Write, Mode::Permit { permits: 1 }] {
            assert_eq!(mode.quorum().need(5), 3, "{mode:?}");
        }
    }

    /// Can `holders` clients each be granted by `size` distinct nodes out
    /// of `nodes`, with no node granting more than `limit` of them at once?
    /// Exhaustive search (clients' node sets in non-decreasing order, as
    /// clients are interchangeable).
    fn overbooked(nodes: usize, limit: usize, holders: usize, size: usize) -> bool {
        let sets: Vec<u32> = (0u32..1 << nodes).filter(|s| s.count_ones() as usize == size).collect();
        fn place(sets: &[u32], from: usize, left: usize, load: &mut [usize], limit: usize) -> bool {
            if left == 0 {
                return true;
            }
            for (i, set) in sets.iter().enumerate().skip(from) {
                let nodes: Vec<usize> = (0..load.len()).filter(|b| set & (1 << b) != 0).collect();
                if nodes.iter().all(|&b| load[b] < limit) {
                    nodes.iter().for_each(|&b| load[b] += 1);
                    let found = place(sets, i, left - 1, load, limit);
                    nodes.iter().for_each(|&b| load[b] -= 1);
                    if found {
                        return true;
                    }
                }
            }
            false
        }
        place(&sets, 0, holders, &mut vec![0; nodes], limit)
    }

    #[test]
    fn semaphore_quorum_is_enough_and_the_least_by_brute_force() {
        // The counterexample: three nodes, two permits, majorities of two.
        let (a, b, c) = (0b011u32, 0b110u32, 0b101u32);
        for node in 0..3 {
            let load = [a, b, c].iter().filter(|s| *s & (1 << node) != 0).count();
            assert_eq!(load, 2, "node {node} is within its 2 permits");
        }
        assert!(overbooked(3, 2, 3, majority(3)), "a majority lets 3 clients hold 2 permits");
        assert!(!overbooked(3, 2, 3, semaphore_quorum(3, 2)));

        for nodes in 1..=6 {
            for permits in 1..=5u32 {
                let limit = permits as usize;
                let q = semaphore_quorum(nodes, permits);
                // L + 1 clients holding one permit each at once: impossible
                // with q grants each, possible with q - 1.
                assert!(
                    !overbooked(nodes, limit, limit + 1, q),
                    "q = {q} overbooked: nodes = {nodes}, permits = {permits}"
                );
                if q > 1 {
                    assert!(
                        overbooked(nodes, limit, limit + 1, q - 1),
                        "q - 1 = {} is safe too: nodes = {nodes}, permits = {permits}",
                        q - 1
                    );
                }
            }
        }
    }

    #[test]
    fn a_semaphore_round_decides_at_its_quorum() {
        use Answer::*;
        let permits = Quorum::Permits(2);
        let mut p = Progress::with_quorum(5, permits);
        for node in 0..3 {
            p.record(node, Yes(node as u64 + 1));
        }
        assert_eq!(p.decided(), None, "3 of 5 is a majority, not the 4 two permits need");
        p.record(3, Unreachable("down".into()));
        p.record(4, Unreachable("down".into()));
        assert_eq!(p.decided(), Some(false));
        let t = p.tally();
        assert!(!t.has_quorum());
        assert_eq!(verdict(&t), Verdict::NoQuorum);
        assert_eq!(
            t.describe("granted", "held by another owner"),
            "3 of 5 granted (need 4 for a 2-permit semaphore); 2 unreachable"
        );
        // Out of reach as soon as two nodes cannot grant.
        let mut p = Progress::with_quorum(5, permits);
        p.record(0, No);
        assert_eq!(p.decided(), None);
        p.record(1, No);
        assert_eq!(p.decided(), Some(false));
        // A full house of "held" is contention.
        let t = Tally::of(&[No, No, No, No, No]).with_quorum(permits);
        assert_eq!(verdict(&t), Verdict::Contended);
        // One permit: a majority, and the message says nothing more.
        let t = Tally::of(&[Yes(1), Yes(2), No, No, No]).with_quorum(Quorum::Permits(1));
        assert_eq!(t.describe("granted", "held"), "2 of 5 granted (need 3); 3 held");
    }

    #[test]
    fn modes_have_the_cli_names() {
        // The CLI prints them (REDLOCK_MODE) and reads them back (--mode).
        let names: Vec<&str> =
            [Mode::Exclusive, Mode::Read, Mode::Write, Mode::Permit { permits: 3 }].map(Mode::name).to_vec();
        assert_eq!(names, ["exclusive", "read", "write", "permit"]);
        assert_eq!(Mode::default(), Mode::Exclusive);
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
    fn retry_policy_bounds_attempts_delays_and_total_time() {
        let policy = RetryPolicy::default();
        assert_eq!((policy.attempts_max, policy.delay_min, policy.delay_max), (3, ms(50), ms(200)));
        assert_eq!(policy.delay_after(1, ms(0), 0.0), Some(ms(50)));
        assert_eq!(policy.delay_after(2, ms(10_000), 0.5), Some(ms(125)), "no total bound");
        assert_eq!(policy.delay_after(3, ms(0), 0.0), None, "attempts spent");
        assert_eq!(RetryPolicy::attempts(0).attempts_max, 1, "at least one attempt");
        assert_eq!(RetryPolicy::attempts(1).delay_after(1, ms(0), 0.0), None);

        // within(1 s): 1000 / 50 + 2 attempts; the delay is cut to what is
        // left, and nothing is left at the total.
        let within = RetryPolicy::within(ms(1_000));
        assert_eq!((within.attempts_max, within.total_max), (22, Some(ms(1_000))));
        assert_eq!(within.delay_after(1, ms(900), 0.99), Some(ms(100)), "cut to the time left");
        assert_eq!(within.delay_after(1, ms(900), 0.0), Some(ms(50)));
        assert_eq!(within.delay_after(1, ms(1_000), 0.0), None, "no attempt after the total");
        assert_eq!(within.delay_after(1, ms(1_500), 0.0), None);
        assert_eq!(within.delay_after(22, ms(0), 0.0), None);

        // Other delays re-derive the attempt bound; max below min is min.
        let fast = RetryPolicy::within(ms(1_000)).with_delays(ms(10), ms(5));
        assert_eq!((fast.delay_min, fast.delay_max, fast.attempts_max), (ms(10), ms(10), 102));
        let zero = RetryPolicy::within(ms(100)).with_delays(ms(0), ms(0));
        assert_eq!(zero.attempts_max, 102, "a zero delay counts as 1 ms for the bound");
        let counted = RetryPolicy::attempts(4).with_delays(ms(1), ms(2));
        assert_eq!((counted.attempts_max, counted.total_max), (4, None), "a count stays a count");
        let huge = RetryPolicy::within(Duration::from_secs(u64::MAX / 1_000)).with_delays(ms(1), ms(1));
        assert_eq!(huge.attempts_max, u32::MAX, "saturates");
    }

    #[test]
    fn the_fencing_round_skips_nodes_at_the_floor_and_nodes_held() {
        use Answer::*;
        let grants = [Some(Yes(30)), Some(No), Some(Yes(10)), None, Some(TimedOut)];
        let (round, targets) = Progress::fencing(&grants, 30);
        assert_eq!(targets, [2, 3, 4], "below the floor, still in flight, timed out");
        assert_eq!(round.answers(), &[Some(Yes(1)), Some(No), None, None, None]);
        assert_eq!(round.decided(), None, "1 of the 3 yes needed");
        let t = round.tally();
        assert_eq!((t.yes, t.no, t.pending(), t.quorum), (1, 1, 3, Quorum::Majority));
        // One node: its own grant carries the floor: fenced with no command.
        let (round, targets) = Progress::fencing(&[Some(Yes(7))], 7);
        assert!(targets.is_empty());
        assert_eq!(round.decided(), Some(true));
        // A fencing round is a majority even after a semaphore's grant.
        let (round, targets) = Progress::fencing(&[Some(Yes(5)), Some(Yes(5)), Some(Yes(4)), None, None], 5);
        assert_eq!((round.decided(), targets), (None, vec![2, 3, 4]), "two of the three needed");
        assert_eq!(round.tally().need(), 3);
        let (round, targets) = Progress::fencing(&[Some(Yes(5)), Some(Yes(5)), Some(Yes(5)), None], 5);
        assert_eq!((round.decided(), targets), (Some(true), vec![3]), "three nodes granted T itself");
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
        assert!(matches!(classify_exit(&Raw::Int(-1)), Answer::Failed(_)), "no count wraps to 2^64 - 1");
    }

    #[test]
    fn a_node_counts_for_a_set_only_when_every_key_answered_1() {
        let flags = |ns: &[i64]| Raw::Array(ns.iter().map(|n| Raw::Int(*n)).collect());
        assert_eq!(classify_every_flag(&flags(&[1, 1, 1])), Answer::Yes(1));
        assert_eq!(classify_every_flag(&flags(&[1, 0, 1])), Answer::No, "one key not held: not the set");
        assert_eq!(classify_every_flag(&flags(&[0, 0])), Answer::No);
        // An error among the replies (a pipelined FENCE on a key of
        // another kind) is the node's answer, even after a 0.
        let mixed = Raw::Array(vec![
            Raw::Int(0),
            Raw::ServerError { code: "WRONGTYPE".into(), detail: "x".into() },
            Raw::ServerError { code: "ERR".into(), detail: "y".into() },
        ]);
        assert_eq!(classify_every_flag(&mixed), Answer::Failed("WRONGTYPE x".into()));
        assert!(matches!(classify_every_flag(&flags(&[1, 2])), Answer::Failed(_)), "2 is no flag");
        assert!(matches!(classify_every_flag(&Raw::Array(vec![])), Answer::Failed(_)));
        // The whole command failing (WRONGTYPE, QUARANTINE, a timeout).
        assert_eq!(classify_every_flag(&Raw::TimedOut), Answer::TimedOut);
        assert_eq!(
            classify_every_flag(&Raw::ServerError { code: "QUARANTINE".into(), detail: "for 5 ms".into() }),
            Answer::Quarantined(Some(5))
        );
        assert!(matches!(classify_every_flag(&Raw::Int(1)), Answer::Failed(_)), "not an array");
        assert!(matches!(classify_flag(&flags(&[1])), Answer::Failed(_)), "an array is no single flag");
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
        // All answered, fewer "held" than a majority, yet only "held" kept
        // the grants short: contention (3 + 3 of 6, need 4).
        assert_eq!(verdict(&tally(&[Yes(1), Yes(2), Yes(3), No, No, No])), Verdict::Contended);
        assert_eq!(verdict(&Tally::default()), Verdict::NoQuorum, "no answer is no contention");
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
    fn progress_decides_at_the_majority_either_way() {
        use Answer::*;
        // Five nodes: three yes decide a success, whatever the other two say.
        let mut p = Progress::new(5);
        assert_eq!(p.decided(), None);
        p.record(3, Yes(30));
        p.record(0, No);
        p.record(1, Yes(10));
        assert_eq!(p.decided(), None, "2 yes, 1 no, 2 to come");
        p.record(4, Yes(20));
        assert_eq!(p.decided(), Some(true));
        assert!(!p.complete());
        assert_eq!(p.fence_floor(), Some(30));
        let t = p.tally();
        assert_eq!((t.nodes, t.yes, t.no, t.pending()), (5, 3, 1, 1));
        assert!(t.has_quorum());
        assert_eq!(
            t.describe("released", "not holding"),
            "3 of 5 released (need 3); 1 not holding; 1 still in flight"
        );
        p.record(2, TimedOut);
        assert!(p.complete());
        assert_eq!(p.tally().pending(), 0);

        // Three answers other than yes out of five: a majority is out of reach.
        let mut p = Progress::new(5);
        p.record(0, Yes(1));
        p.record(1, TimedOut);
        p.record(2, Unreachable("down".into()));
        assert_eq!(p.decided(), None);
        p.record(3, Quarantined(None));
        assert_eq!(p.decided(), Some(false));
        assert_eq!(p.tally().pending(), 1);

        // A repeated or out-of-range answer changes nothing.
        let mut p = Progress::new(3);
        p.record(0, Yes(5));
        p.record(0, Yes(6));
        p.record(7, Yes(7));
        assert_eq!((p.tally().yes, p.tally().pending()), (1, 2));
        assert_eq!(p.decided(), None);

        // One node: its answer decides.
        let mut p = Progress::new(1);
        p.record(0, No);
        assert_eq!(p.decided(), Some(false));
        assert!(p.complete());
    }

    #[test]
    fn a_round_gives_up_its_answers_in_node_order() {
        use Answer::*;
        let mut p = Progress::new(3);
        p.record(2, Yes(9));
        p.record(0, No);
        assert_eq!(p.into_answers(), vec![Some(No), None, Some(Yes(9))]);
    }

    #[test]
    fn holds_left_is_the_largest_count() {
        assert_eq!(holds_left(&[Answer::Yes(0), Answer::Yes(1), Answer::No]), Some(1));
        assert_eq!(holds_left(&[Answer::No]), None);
    }
}
