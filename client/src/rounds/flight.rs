//! The calls of a round in flight (or of two rounds, the grant round and the
//! fencing round right after it), and their answers, taken as they come by
//! the task that runs the round.
//!
//! One inbox, one waker and one timer per flight, not per call: a master's
//! reply lands in the flight's inbox (see `node/inbox.rs`), and the flight
//! keeps each call's own deadline and arms one timer at the earliest one
//! still waiting. A call whose deadline passes is given up there (its reply,
//! if one comes later, is dropped; if its node's writer has not written it
//! yet, it is not written) and answers [`Raw::TimedOut`], exactly as a call
//! with its own timeout did. A cluster member's call routes itself (its
//! redirects, its ordering gate) in a future of its own, which the flight
//! polls beside the inbox.
//!
//! Dropping a flight gives up every call in it; a round that returns at its
//! majority hands its flight to a background task instead (see
//! `fanout.rs`), so that its late calls are still written and answered.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::future::poll_fn;
use futures_util::stream::{FuturesUnordered, StreamExt};
use tokio::time::{sleep_until, Instant, Sleep};

use crate::claim::Classify;
use crate::member::{Issued, Member};
use crate::node::{as_raw, Inbox, Request};
use crate::quorum::{Answer, Raw};

/// One node's answer in one round.
pub(crate) struct Reply {
    /// Which round it belongs to, when several share a flight (an index
    /// into the rounds given to `fanout::drive`).
    pub round: usize,
    pub node: usize,
    pub answer: Answer,
}

/// A master's call in the flight, at its slot of the inbox.
struct Call {
    round: usize,
    node: usize,
    classify: Classify,
    pipelined: bool,
    /// When the call is given up.
    deadline: Instant,
    /// Not answered yet.
    waiting: bool,
}

type Wait = Pin<Box<dyn Future<Output = Reply> + Send>>;

/// The calls in flight and what their answers are waited for with.
pub(crate) struct Flight {
    inbox: Arc<Inbox>,
    /// The masters' calls, by slot.
    calls: Vec<Call>,
    /// How many of them are not answered yet.
    waiting: usize,
    /// The cluster members' calls (made when the first one is).
    waits: Option<FuturesUnordered<Wait>>,
    /// Armed at the earliest deadline of the masters' calls still waiting
    /// (made when the flight first waits).
    timer: Option<Pin<Box<Sleep>>>,
}

impl Flight {
    pub fn new(nodes: usize) -> Flight {
        Flight { inbox: Inbox::new(), calls: Vec::with_capacity(nodes), waiting: 0, waits: None, timer: None }
    }

    /// One call of `request` as round `round` on each member listed in
    /// `targets` (indexes into `members`), queued on its member now, in
    /// the order listed; each is given up `timeout` after it was issued
    /// (plus the connect timeout for a node with no connection open).
    pub fn send(
        &mut self,
        members: &[Member],
        round: usize,
        (request, classify): (&Request, Classify),
        timeout: Duration,
        targets: impl IntoIterator<Item = usize>,
    ) {
        let pipelined = request.is_pipeline();
        for node in targets {
            let Some(member) = members.get(node) else {
                let answer = Answer::Failed(format!("no node {node}"));
                self.wait(Box::pin(std::future::ready(Reply { round, node, answer })));
                continue;
            };
            let slot = self.calls.len();
            match member.issue(request, timeout, &self.inbox, slot) {
                Issued::Inbox(deadline) => {
                    self.calls.push(Call { round, node, classify, pipelined, deadline, waiting: true });
                    self.waiting += 1;
                }
                Issued::Wait(raw) => {
                    self.wait(Box::pin(async move { Reply { round, node, answer: classify(&raw.await) } }))
                }
            }
        }
    }

    fn wait(&mut self, wait: Wait) {
        self.waits.get_or_insert_with(FuturesUnordered::new).push(wait);
    }

    /// No call is waiting for its answer.
    pub fn is_empty(&self) -> bool {
        self.waiting == 0 && self.waits.as_ref().is_none_or(FuturesUnordered::is_empty)
    }

    /// The next answer, as it comes; `None` once every call answered or
    /// was given up. Bounded: every call ends by its deadline.
    pub async fn next(&mut self) -> Option<Reply> {
        poll_fn(|cx| self.poll_next(cx)).await
    }

    fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Option<Reply>> {
        loop {
            if let Some((slot, replies)) = self.inbox.take(cx.waker()) {
                if let Some(reply) = self.answer(slot, |call| as_raw(replies, call.pipelined)) {
                    return Poll::Ready(Some(reply));
                }
                continue;
            }
            if let Some(Poll::Ready(Some(reply))) = self.waits.as_mut().map(|waits| waits.poll_next_unpin(cx))
            {
                return Poll::Ready(Some(reply));
            }
            let Some((slot, deadline)) = self.earliest() else {
                return if self.is_empty() { Poll::Ready(None) } else { Poll::Pending };
            };
            let timer = self.timer.get_or_insert_with(|| Box::pin(sleep_until(deadline)));
            if timer.deadline() != deadline {
                timer.as_mut().reset(deadline);
            }
            if timer.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            // The deadline passed; replies that came meanwhile first.
            if self.inbox.give_up(slot) {
                return Poll::Ready(self.answer(slot, |_| Raw::TimedOut));
            }
        }
    }

    /// The call at `slot` answered `raw`, as its round reads it (`None`
    /// when it was answered already: it cannot be).
    fn answer(&mut self, slot: usize, raw: impl FnOnce(&Call) -> Raw) -> Option<Reply> {
        let call = self.calls.get_mut(slot).filter(|call| call.waiting)?;
        call.waiting = false;
        self.waiting -= 1;
        let answer = (call.classify)(&raw(call));
        Some(Reply { round: call.round, node: call.node, answer })
    }

    /// The slot and deadline of the master's call that is given up first.
    fn earliest(&self) -> Option<(usize, Instant)> {
        self.calls
            .iter()
            .enumerate()
            .filter(|(_, call)| call.waiting)
            .map(|(slot, call)| (slot, call.deadline))
            .min_by_key(|&(slot, deadline)| (deadline, slot))
    }
}

impl Drop for Flight {
    fn drop(&mut self) {
        self.inbox.close();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;
    use crate::node::recorder::{recorder, SLOW};
    use crate::node::Limits;
    use crate::quorum::classify_grant;

    const LONG: Duration = Duration::from_secs(5);
    const SHORT: Duration = Duration::from_millis(100);
    const _: () = assert!(SLOW.as_millis() > SHORT.as_millis());

    /// A master on a loopback recorder (`node/recorder.rs`), connected.
    async fn node() -> (Member, Arc<Mutex<Vec<String>>>) {
        let (url, seen) = recorder().await;
        let limits = Limits { connect_timeout: LONG, reconnect_backoff: Duration::from_millis(10) };
        let member = Member::new(1, &url, limits, LONG, None).unwrap();
        member.warm_up().await;
        (member, seen)
    }

    fn request(name: &str) -> Request {
        Request::one(redis::cmd(name), "k")
    }

    /// Every answer of a flight, in the order they came (within a bound:
    /// a flight that never ends fails the test).
    async fn answers(flight: &mut Flight) -> Vec<(usize, usize, Answer)> {
        let mut all = Vec::new();
        let every = async {
            while let Some(reply) = flight.next().await {
                all.push((reply.round, reply.node, reply.answer));
            }
        };
        tokio::time::timeout(LONG * 2, every).await.expect("the flight ended");
        all
    }

    /// One timer for the flight keeps each call's own deadline: the call
    /// that does not answer times out at its deadline, the others answer
    /// as they come, and calls added later (a second round) are waited for
    /// with their own deadlines.
    #[tokio::test]
    async fn each_call_answers_or_times_out_by_its_own_deadline() {
        let (a, a_seen) = node().await;
        let (b, _) = node().await;
        let (c, _) = node().await;
        let members = [a, b, c];
        let mut flight = Flight::new(3);
        let started = Instant::now();
        flight.send(&members, 0, (&request("GRANT"), classify_grant), LONG, [0, 2]);
        flight.send(&members, 0, (&request("HANG"), classify_grant), SHORT, [1]);
        let mut got = answers(&mut flight).await;
        got.sort_by_key(|&(_, node, _)| node);
        assert_eq!(got, [(0, 0, Answer::Yes(1)), (0, 1, Answer::TimedOut), (0, 2, Answer::Yes(1))]);
        let waited = started.elapsed();
        assert!(waited >= SHORT && waited < LONG, "given up at its deadline, not later: {waited:?}");
        assert!(flight.is_empty());
        // The flight can take a second round after the first ended.
        flight.send(&members, 1, (&request("FENCE"), classify_grant), LONG, [0]);
        assert_eq!(answers(&mut flight).await, [(1, 0, Answer::Yes(2))]);
        assert_eq!(*a_seen.lock().unwrap(), ["GRANT", "FENCE"]);
    }

    /// A call given up at its deadline whose reply comes later: the late
    /// reply is dropped, and the node's next call gets its own.
    #[tokio::test]
    async fn a_late_reply_is_dropped_and_does_not_answer_the_next_call() {
        let (a, seen) = node().await;
        let members = [a];
        let mut flight = Flight::new(1);
        flight.send(&members, 0, (&request("SLOW"), classify_grant), SHORT, [0]);
        assert_eq!(answers(&mut flight).await, [(0, 0, Answer::TimedOut)]);
        flight.send(&members, 0, (&request("NEXT"), classify_grant), LONG, [0]);
        assert_eq!(answers(&mut flight).await, [(0, 0, Answer::Yes(2))], "NEXT's own reply, :2");
        assert_eq!(*seen.lock().unwrap(), ["SLOW", "NEXT"]);
    }

    /// Dropping a flight gives its calls up: one its node's writer has not
    /// reached yet is not written; the calls made before and after it are,
    /// in order.
    #[tokio::test(flavor = "current_thread")]
    async fn a_dropped_flight_s_unwritten_calls_are_not_written() {
        let (a, seen) = node().await;
        let members = [a];
        // On one thread the node's writer cannot run between these calls.
        let mut first = Flight::new(1);
        first.send(&members, 0, (&request("FIRST"), classify_grant), LONG, [0]);
        let mut dropped = Flight::new(1);
        dropped.send(&members, 0, (&request("DROPPED"), classify_grant), LONG, [0]);
        drop(dropped);
        let mut last = Flight::new(1);
        last.send(&members, 0, (&request("LAST"), classify_grant), LONG, [0]);
        assert_eq!(answers(&mut first).await, [(0, 0, Answer::Yes(1))]);
        assert_eq!(answers(&mut last).await, [(0, 0, Answer::Yes(2))]);
        assert_eq!(*seen.lock().unwrap(), ["FIRST", "LAST"]);
    }

    /// A member index with no member answers as a failure, not a hang.
    #[tokio::test]
    async fn a_call_to_no_member_fails_at_once() {
        let mut flight = Flight::new(0);
        flight.send(&[], 0, (&request("GRANT"), classify_grant), LONG, [3]);
        assert_eq!(answers(&mut flight).await, [(0, 3, Answer::Failed("no node 3".into()))]);
    }
}
