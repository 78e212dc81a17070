//! The ordering gate of a cluster member: a call never overtakes an
//! earlier call of its slot that has yet to run, whatever redirects do.
//! Pure state (no I/O, no clock); `cluster.rs` consults it before every
//! write and every re-send, and the node's reader records in it, as each
//! reply arrives, whether the command ran.
//!
//! # Why a gate
//!
//! A single master keeps the order of a client's calls with one ordered
//! connection: a `LOCK.RELEASE` issued after a `LOCK.ACQUIRE` reaches the
//! node after it (see `node/mod.rs`). In a cluster member a call may be
//! written to one node and answered `MOVED`, `ASK` or `TRYAGAIN`, then
//! sent again elsewhere; the order of two calls then depends on when each
//! was re-sent. Two ways it breaks:
//! 1. An acquire is written to A; another call's `MOVED` moves the slot to
//!    B in the map; the release is written to B; A answers the acquire
//!    `MOVED`, and it is re-sent to B after the release: a lock left
//!    behind until its TTL.
//! 2. An acquire and a release both written to A, both answered `MOVED`;
//!    each call's task re-sends its own, in whatever order the tasks run.
//!
//! # The rules
//!
//! Per slot, the gate keeps the calls issued and not yet settled, in issue
//! order, with every write each made: the node, a sequence number, and
//! whether the reply to it said the command ran (`Ran`: a final answer, or
//! no answer at all, which may have run), did not run (`Redirected`), or
//! has not come yet (`Pending`).
//! - **Write.** A call may be written to node X only when every earlier
//!   unsettled call of its slot has its latest write on X, still pending.
//!   Otherwise it waits (bounded by its deadline) until they have.
//! - **Follow.** A call answered with a redirect by X may be sent again
//!   only when no later call of its slot was written to X after it and
//!   might have run there: each such write must be known `Redirected`. If
//!   one is still `Pending` it waits for that reply; if one `Ran`, the call
//!   is not sent again (its answer is "no": it never runs anywhere).
//! - **Settle.** A call is settled at its final answer, when it gives up
//!   (its deadline passed or its caller went away: a redirect is then not
//!   followed), or when it is refused by the follow rule. A settled call
//!   stays in the gate, as a record of its writes, while an earlier call of
//!   its slot is unsettled (the follow rule reads it).
//!
//! # Why the order holds
//!
//! Take calls a before b of one slot, neither given up, and suppose b ran
//! on node O before a ran. b's write w_b to O found a unsettled (a ran
//! later), so by the write rule a's latest write then was on O and
//! pending: a's write w_p came before w_b on O's connection. If a ran from
//! w_p, O ran it before b (one connection, in order): a contradiction. So
//! O answered w_p with a redirect, and a was sent again after w_b. When a
//! followed that redirect, b's write w_b to O came after w_p, so by the
//! follow rule it was known `Redirected`: b did not run from w_b, a
//! contradiction again. Hence whenever both run, a runs first: a release
//! never overtakes an acquire of its slot, and no redirect makes a call
//! run twice (a call runs only where its last write went).
//!
//! Waiting never deadlocks: a call waits under the write rule only for
//! earlier calls, and under the follow rule only for replies that arrive
//! by themselves (recorded by the node's reader, whether or not anybody
//! polls the later call); so the earliest unsettled call of a slot always
//! moves, and every wait is bounded by the waiting call's deadline.
//!
//! What stays: a call that gave up while its write was pending may still
//! run on that node (a timed-out call may run, as on a single master);
//! the gate then no longer holds later calls for it. On a node that no
//! longer serves the slot it cannot run; it could only on a node that lost
//! the slot and got it back within that call's time on the wire.
//!
//! In the common case (no redirect, no call of the slot in flight to
//! another node) the write rule passes at once: a lookup per call.

use std::collections::{HashMap, VecDeque};

/// Calls one member keeps in its gate (unsettled, and settled ones kept as
/// records); more are refused at once.
pub(crate) const CALLS_MAX: usize = 100_000;

/// One call in the gate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Ticket {
    pub slot: u16,
    id: u64,
}

/// What the reply to one write said.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    Pending,
    /// A redirect (`MOVED`, `ASK`, `TRYAGAIN`, `CLUSTERDOWN`), or no
    /// connection to write it on: the command did not run.
    Redirected,
    /// A final answer, or none (a timeout, a broken connection, a caller
    /// that went away): the command ran, or may have.
    Ran,
}

/// Whether a redirected call may be sent again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Follow {
    Yes,
    /// A later call's write to the same node has no reply yet.
    Wait,
    /// A later call may have run on that node after this one was answered:
    /// this call must not run anywhere now.
    No,
}

#[derive(Debug)]
struct Sent<N> {
    node: N,
    seq: u64,
    outcome: Outcome,
}

#[derive(Debug)]
struct Entry<N> {
    id: u64,
    writes: Vec<Sent<N>>,
    settled: bool,
}

/// The gate of one member: per slot, its calls in issue order.
#[derive(Debug)]
pub(crate) struct Gate<N> {
    slots: HashMap<u16, VecDeque<Entry<N>>>,
    next_id: u64,
    next_seq: u64,
    calls: usize,
}

impl<N> Default for Gate<N> {
    fn default() -> Gate<N> {
        Gate { slots: HashMap::new(), next_id: 0, next_seq: 0, calls: 0 }
    }
}

impl<N: PartialEq + Clone> Gate<N> {
    /// A new call of `slot`, after every call issued before it.
    pub fn issue(&mut self, slot: u16) -> Result<Ticket, String> {
        if self.calls >= CALLS_MAX {
            return Err(format!("{CALLS_MAX} calls are already in flight to this cluster"));
        }
        let id = self.next_id;
        self.next_id += 1;
        self.calls += 1;
        self.slots.entry(slot).or_default().push_back(Entry { id, writes: Vec::new(), settled: false });
        Ok(Ticket { slot, id })
    }

    /// The write rule: may `ticket` be written to `node` now?
    pub fn may_write(&self, ticket: Ticket, node: &N) -> bool {
        let Some(calls) = self.slots.get(&ticket.slot) else { return true };
        calls.iter().take_while(|e| e.id < ticket.id).filter(|e| !e.settled).all(|e| {
            matches!(e.writes.last(), Some(last) if last.node == *node && last.outcome == Outcome::Pending)
        })
    }

    /// Records that `ticket` was written to `node`; returns the write's
    /// sequence number, for [`Gate::answered`].
    pub fn wrote(&mut self, ticket: Ticket, node: N) -> u64 {
        let seq = self.next_seq;
        self.next_seq += 1;
        if let Some(entry) = self.entry(ticket) {
            debug_assert!(!entry.settled, "a settled call is not written");
            entry.writes.push(Sent { node, seq, outcome: Outcome::Pending });
        }
        seq
    }

    /// Records the reply to write `seq` of `ticket` (once it is known: a
    /// later outcome does not replace a known one).
    pub fn answered(&mut self, ticket: Ticket, seq: u64, outcome: Outcome) {
        if let Some(sent) = self.entry(ticket).and_then(|e| e.writes.iter_mut().find(|w| w.seq == seq)) {
            if sent.outcome == Outcome::Pending {
                sent.outcome = outcome;
            }
        }
    }

    /// What the reply to write `seq` of `ticket` said, while it is known.
    pub fn outcome(&self, ticket: Ticket, seq: u64) -> Option<Outcome> {
        let calls = self.slots.get(&ticket.slot)?;
        let entry = calls.iter().find(|e| e.id == ticket.id)?;
        entry.writes.iter().find(|w| w.seq == seq).map(|w| w.outcome)
    }

    /// The follow rule, for `ticket` whose latest write was answered with
    /// a redirect.
    pub fn may_follow(&self, ticket: Ticket) -> Follow {
        let Some(calls) = self.slots.get(&ticket.slot) else { return Follow::Yes };
        let Some(last) = calls.iter().find(|e| e.id == ticket.id).and_then(|e| e.writes.last()) else {
            return Follow::Yes;
        };
        let mut follow = Follow::Yes;
        let later_writes = calls.iter().filter(|e| e.id > ticket.id).flat_map(|e| &e.writes);
        for sent in later_writes.filter(|w| w.node == last.node && w.seq > last.seq) {
            match sent.outcome {
                Outcome::Redirected => {}
                Outcome::Pending => follow = Follow::Wait,
                Outcome::Ran => return Follow::No,
            }
        }
        follow
    }

    /// Settles `ticket`: its write still pending (a timeout, a caller gone)
    /// counts as run; it is forgotten once no earlier call of its slot is
    /// unsettled.
    pub fn settle(&mut self, ticket: Ticket) {
        if let Some(entry) = self.entry(ticket) {
            entry.settled = true;
            for sent in &mut entry.writes {
                if sent.outcome == Outcome::Pending {
                    sent.outcome = Outcome::Ran;
                }
            }
        }
        let Some(calls) = self.slots.get_mut(&ticket.slot) else { return };
        while calls.front().is_some_and(|e| e.settled) {
            calls.pop_front();
            self.calls -= 1;
        }
        if calls.is_empty() {
            self.slots.remove(&ticket.slot);
        }
    }

    /// Calls in the gate (unsettled, and settled ones kept as records).
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.calls
    }

    fn entry(&mut self, ticket: Ticket) -> Option<&mut Entry<N>> {
        let calls = self.slots.get_mut(&ticket.slot)?;
        calls.iter_mut().find(|e| e.id == ticket.id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The two races of the module's comment, step by step.
    #[test]
    fn the_two_races_are_ordered() {
        let (a_node, b_node) = ("A", "B");
        // 1. The acquire is on A; the map moved to B; the release waits
        // until the acquire, redirected, is written to B.
        let mut gate = Gate::default();
        let acquire = gate.issue(7).unwrap();
        let on_a = gate.wrote(acquire, a_node);
        let release = gate.issue(7).unwrap();
        assert!(!gate.may_write(release, &b_node), "the acquire is still on A");
        assert!(gate.may_write(release, &a_node), "behind it on A would be in order");
        gate.answered(acquire, on_a, Outcome::Redirected);
        assert!(!gate.may_write(release, &b_node), "between its redirect and its re-send");
        assert_eq!(gate.may_follow(acquire), Follow::Yes);
        assert!(gate.may_write(acquire, &b_node));
        let on_b = gate.wrote(acquire, b_node);
        assert!(gate.may_write(release, &b_node));
        gate.wrote(release, b_node);
        gate.answered(acquire, on_b, Outcome::Ran);
        gate.settle(acquire);
        assert_eq!(gate.len(), 1);

        // 2. Both on A, both redirected: the acquire waits for the
        // release's reply, then goes first.
        let mut gate = Gate::default();
        let acquire = gate.issue(7).unwrap();
        let first = gate.wrote(acquire, a_node);
        let release = gate.issue(7).unwrap();
        assert!(gate.may_write(release, &a_node));
        let second = gate.wrote(release, a_node);
        gate.answered(acquire, first, Outcome::Redirected);
        assert_eq!(gate.may_follow(acquire), Follow::Wait, "the release may yet run on A");
        gate.answered(release, second, Outcome::Redirected);
        assert_eq!(gate.may_follow(release), Follow::Yes, "no later call");
        assert!(!gate.may_write(release, &b_node), "the acquire goes first");
        assert_eq!(gate.may_follow(acquire), Follow::Yes);
        gate.wrote(acquire, b_node);
        assert!(gate.may_write(release, &b_node));

        // The same, but A got the slot back between the two and ran the
        // release: the acquire must not run anywhere now.
        let mut gate = Gate::default();
        let acquire = gate.issue(7).unwrap();
        let first = gate.wrote(acquire, a_node);
        let release = gate.issue(7).unwrap();
        let second = gate.wrote(release, a_node);
        gate.answered(acquire, first, Outcome::Redirected);
        gate.answered(release, second, Outcome::Ran);
        gate.settle(release);
        assert_eq!(gate.len(), 2, "the release is kept as a record for the acquire");
        assert_eq!(gate.may_follow(acquire), Follow::No);
        gate.settle(acquire);
        assert_eq!(gate.len(), 0);
    }

    #[test]
    fn slots_are_independent_and_the_gate_is_bounded() {
        let mut gate = Gate::default();
        let a = gate.issue(1).unwrap();
        gate.wrote(a, 0);
        let b = gate.issue(2).unwrap();
        assert!(gate.may_write(b, &1), "another slot does not wait");
        // A given-up call does not hold later ones.
        let c = gate.issue(1).unwrap();
        assert!(!gate.may_write(c, &1));
        gate.settle(a);
        assert!(gate.may_write(c, &1));
        let mut full = Gate::<u8>::default();
        for _ in 0..CALLS_MAX {
            full.issue(0).unwrap();
        }
        assert!(full.issue(1).is_err());
    }

    /// One step of the model below.
    #[derive(Clone, Debug)]
    enum Step {
        Issue,
        /// The node answers the oldest write in its connection (MOVED
        /// when it does not serve the slot).
        Serve(usize),
        /// The same, but ASK instead of MOVED (the map stays).
        ServeAsk(usize),
        /// A call acts: writes, or reads its reply and follows it.
        Poll(usize),
        /// The slot moves to this node.
        Migrate(usize),
        /// A call's caller gives up (its deadline).
        GiveUp(usize),
    }

    const NODES: usize = 3;

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            2 => Just(Step::Issue),
            4 => (0..NODES).prop_map(Step::Serve),
        1 => (0..NODES).prop_map(Step::ServeAsk),
            6 => (0..16usize).prop_map(Step::Poll),
            1 => (0..NODES).prop_map(Step::Migrate),
            1 => (0..16usize).prop_map(Step::GiveUp),
        ]
    }

    #[derive(Clone, Debug, PartialEq)]
    enum State {
        /// Wants to be written: to the node of an ASK, else where the map
        /// says when it is written.
        ToWrite(Option<usize>),
        /// Written; waiting for the reply to write `seq`.
        Written(usize, u64),
        /// Its reply redirected it (to this node for an ASK).
        Redirected {
            ask: Option<usize>,
        },
        Done,
    }

    /// One slot of a cluster of three nodes, its owner moving at random,
    /// a client map that follows MOVED, and calls that follow the gate.
    struct Model {
        gate: Gate<usize>,
        owner: usize,
        map: usize,
        calls: Vec<(Ticket, State)>,
        gave_up: Vec<bool>,
        /// Per node: the writes on its connection, in order (call, seq).
        wire: Vec<VecDeque<(usize, u64)>>,
        /// Calls as they ran, and whether they had given up by then.
        ran: Vec<(usize, bool)>,
    }

    impl Model {
        fn new() -> Model {
            Model {
                gate: Gate::default(),
                owner: 0,
                map: 0,
                calls: Vec::new(),
                gave_up: Vec::new(),
                wire: vec![VecDeque::new(); NODES],
                ran: Vec::new(),
            }
        }

        fn apply(&mut self, step: &Step, moves: bool) {
            match *step {
                Step::Issue => {
                    let ticket = self.gate.issue(0).unwrap();
                    self.calls.push((ticket, State::ToWrite(None)));
                    self.gave_up.push(false);
                }
                Step::Serve(node) | Step::ServeAsk(node) => {
                    let ask = matches!(step, Step::ServeAsk(_));
                    let Some((call, seq)) = self.wire[node].pop_front() else { return };
                    let ticket = self.calls[call].0;
                    if node == self.owner {
                        self.ran.push((call, self.gave_up[call]));
                        self.gate.answered(ticket, seq, Outcome::Ran);
                        if self.calls[call].1 == State::Written(node, seq) {
                            self.calls[call].1 = State::Done;
                            self.gate.settle(ticket);
                        }
                    } else {
                        self.gate.answered(ticket, seq, Outcome::Redirected);
                        if self.calls[call].1 == State::Written(node, seq) {
                            // MOVED to the owner (the map follows), or ASK.
                            let to = if ask { Some(self.owner) } else { None };
                            if !ask {
                                self.map = self.owner;
                            }
                            self.calls[call].1 = State::Redirected { ask: to };
                        }
                    }
                }
                Step::Poll(i) => {
                    let Some((ticket, state)) = self.calls.get(i).cloned() else { return };
                    match state {
                        State::ToWrite(ask) => {
                            let node = ask.unwrap_or(self.map);
                            if self.gate.may_write(ticket, &node) {
                                let seq = self.gate.wrote(ticket, node);
                                self.wire[node].push_back((i, seq));
                                self.calls[i].1 = State::Written(node, seq);
                            }
                        }
                        State::Redirected { ask } => match self.gate.may_follow(ticket) {
                            Follow::Yes => self.calls[i].1 = State::ToWrite(ask),
                            Follow::Wait => {}
                            Follow::No => {
                                self.calls[i].1 = State::Done;
                                self.gate.settle(ticket);
                            }
                        },
                        State::Written(..) | State::Done => {}
                    }
                }
                Step::Migrate(node) if moves => self.owner = node,
                Step::GiveUp(i) if moves => {
                    if let Some((ticket, state)) = self.calls.get(i).cloned() {
                        if state != State::Done {
                            self.calls[i].1 = State::Done;
                            self.gave_up[i] = true;
                            self.gate.settle(ticket);
                        }
                    }
                }
                Step::Migrate(_) | Step::GiveUp(_) => {}
            }
        }

        /// No call that had not given up ran after a later call.
        fn check_order(&self) -> Result<(), TestCaseError> {
            let ran: Vec<usize> = self.ran.iter().filter(|(_, gave_up)| !gave_up).map(|(c, _)| *c).collect();
            for pair in ran.windows(2) {
                prop_assert!(
                    pair[0] < pair[1],
                    "call {} ran after call {}: {:?}",
                    pair[0],
                    pair[1],
                    self.ran
                );
            }
            // A call runs at most once (no redirect makes it run twice).
            let mut seen = ran.clone();
            seen.sort_unstable();
            seen.dedup();
            prop_assert_eq!(seen.len(), ran.len(), "a call ran twice: {:?}", self.ran);
            Ok(())
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 2_000, ..ProptestConfig::default() })]

        /// Random interleavings of calls, replies, slot moves and
        /// give-ups: calls run in issue order; and once the slot stays
        /// put, every call ends (nobody waits for ever).
        #[test]
        fn calls_run_in_issue_order_and_always_end(steps in prop::collection::vec(step(), 1..120)) {
            let mut model = Model::new();
            for step in &steps {
                model.apply(step, true);
                model.check_order()?;
            }
            // The slot stays put: serve and poll until nothing moves.
            for _ in 0..2_000 {
                if model.calls.iter().all(|(_, s)| *s == State::Done) {
                    break;
                }
                for i in 0..model.calls.len() {
                    model.apply(&Step::Poll(i), false);
                }
                for node in 0..NODES {
                    model.apply(&Step::Serve(node), false);
                }
            }
            model.check_order()?;
            let stuck: Vec<_> = model.calls.iter().filter(|(_, s)| *s != State::Done).collect();
            prop_assert!(stuck.is_empty(), "calls never ended: {:?}", stuck);
            prop_assert_eq!(model.gate.len(), 0, "the gate forgets settled calls");
        }
    }
}
