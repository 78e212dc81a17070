//! Counting a round: the answers as they come in and whether they decide
//! it yet ([`Progress`], with the fencing round's plan), the counts an
//! error reports ([`Tally`]), how a failed grant round is judged
//! ([`verdict`]), and the fencing token of a quorum ([`fence_floor`]).

use super::arithmetic::{majority, Quorum};
use super::replies::Answer;

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
    /// Why, for the first of them (a refused connection, a TLS failure
    /// naming the node and its cause, ...).
    pub first_unreachable: Option<Box<str>>,
    /// Cluster members that could not route the call (`CLUSTERDOWN`, no
    /// master for the key's slot, too many redirects, no seed answered).
    pub cluster_unavailable: usize,
    /// Why, for the first of them (it names the member).
    pub first_cluster_unavailable: Option<Box<str>>,
    pub timed_out: usize,
    /// Error replies (and unexpected replies), refusals of the request
    /// included.
    pub failed: usize,
    /// The first error text, to show what "other errors" were. A boxed
    /// `str` (16 bytes, not a `String`'s 24) keeps the errors that carry a
    /// tally small, now that it also carries its quorum.
    pub first_failure: Option<Box<str>>,
    /// Of the `failed`, the nodes that refused the request itself (an
    /// argument out of their range, `WRONGTYPE`, the module not loaded:
    /// [`super::replies::refuses_request`]): they would refuse it again.
    pub refused: usize,
    /// The first of them: its place among the answers (the node's index in
    /// member order when every node was asked) and its reply.
    pub first_refusal: Option<(usize, Box<str>)>,
}

impl Tally {
    pub fn of(answers: &[Answer]) -> Tally {
        Tally::of_partial(answers.iter().map(Some))
    }

    /// The counts of a round that may not have heard from every node yet
    /// (`None`: still pending).
    pub fn of_partial<'a>(answers: impl IntoIterator<Item = Option<&'a Answer>>) -> Tally {
        let mut tally = Tally::default();
        for (node, answer) in answers.into_iter().enumerate() {
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
                Answer::Unreachable(why) => {
                    tally.unreachable += 1;
                    tally.first_unreachable.get_or_insert_with(|| why.as_str().into());
                }
                Answer::ClusterUnavailable(why) => {
                    tally.cluster_unavailable += 1;
                    tally.first_cluster_unavailable.get_or_insert_with(|| why.as_str().into());
                }
                Answer::Failed(why) => {
                    tally.failed += 1;
                    tally.first_failure.get_or_insert_with(|| why.as_str().into());
                }
                Answer::Refused(why) => {
                    tally.failed += 1;
                    tally.first_failure.get_or_insert_with(|| why.as_str().into());
                    tally.refused += 1;
                    tally.first_refusal.get_or_insert_with(|| (node, why.as_str().into()));
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
        let answered = self.yes
            + self.no
            + self.quarantined
            + self.timed_out
            + self.unreachable
            + self.cluster_unavailable
            + self.failed;
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

    /// The refusals of the request alone put the quorum out of reach: had
    /// every other node said yes, the round would still have failed. The
    /// same request can then never succeed on these nodes (see
    /// [`crate::Error::Refused`]).
    pub fn refused_outright(&self) -> bool {
        self.refused > 0 && self.refused > self.nodes.saturating_sub(self.need())
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
        part(
            self.unreachable,
            with_first(self.unreachable, "unreachable", "unreachable", &self.first_unreachable),
        );
        part(
            self.cluster_unavailable,
            with_first(
                self.cluster_unavailable,
                "cluster unavailable",
                "clusters unavailable",
                &self.first_cluster_unavailable,
            ),
        );
        part(self.timed_out, "timed out".to_string());
        part(self.failed, with_first(self.failed, "other error", "other errors", &self.first_failure));
        part(self.pending(), "still in flight".to_string());
        text
    }
}

/// What `count` answers of one kind were, with the first one's reason:
/// `one (why)`, or `many (first: why)`.
fn with_first(count: usize, one: &str, many: &str, first: &Option<Box<str>>) -> String {
    match first {
        Some(why) if count == 1 => format!("{one} ({why})"),
        Some(why) => format!("{many} (first: {why})"),
        None => many.to_string(),
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
            "3 of 5 granted (need 4 for a 2-permit semaphore); 2 unreachable (first: down)"
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
    fn refusals_of_the_request_rule_the_quorum_out_when_they_alone_do() {
        use Answer::*;
        let range = || Refused("ERR lock.acquire: ttl-ms 60000 is out of range".into());
        let t = tally(&[Yes(1), range(), Failed("LOADING".into()), range(), range()]);
        assert_eq!((t.failed, t.refused), (4, 3));
        assert_eq!(t.first_failure.as_deref(), Some("ERR lock.acquire: ttl-ms 60000 is out of range"));
        assert_eq!(t.first_refusal, Some((1, "ERR lock.acquire: ttl-ms 60000 is out of range".into())));
        assert!(t.refused_outright(), "3 of 5: a majority is out of reach");
        // One node without the module, or with a smaller limit: the others
        // may still grant.
        assert!(!tally(&[range(), No, No, TimedOut, Yes(1)]).refused_outright());
        assert!(!tally(&[range(), range(), No, No, No]).refused_outright());
        assert!(!tally(&vec![Failed("LOADING".into()); 5]).refused_outright(), "not a refusal");
        // A 2-permit semaphore on 5 nodes needs 4: two refusals suffice.
        let t = tally(&[range(), range(), Yes(1), Yes(2), Yes(3)]).with_quorum(Quorum::Permits(2));
        assert!(t.refused_outright());
        assert!(tally(&[range()]).refused_outright(), "a single node");
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
            "1 of 5 granted (need 3); 1 held by another owner; 1 unreachable (x); 1 timed out; 1 other error (ERR boom)"
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
