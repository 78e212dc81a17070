//! Where a call's replies go: back to its own caller (one channel per
//! call), or into the inbox of the round it belongs to (one per round,
//! shared by the round's N calls, read by the one task that runs the
//! round).
//!
//! Why a round has one inbox: a call with its own channel, its own timer
//! and its own future polled in a set of futures costs a few allocations,
//! a timer entry and a wake-up chain per node and round; a round's calls
//! all go to different nodes and are all read by one task, so they share
//! one inbox, one waker and (in `rounds/flight.rs`) one timer instead.
//!
//! Either way a caller gives up a call by dropping what reads it (the
//! channel's receiver, the round's inbox as a whole) or, in an inbox, by
//! [`Inbox::give_up`] of its slot when its deadline passed: the node's
//! writer then does not write it if it has not yet (see `node/mod.rs`),
//! and its reply, when one comes, is dropped.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::Waker;

use tokio::sync::oneshot;

use crate::quorum::Raw;
use crate::resp::Reply;

/// A reply, or why there is none; a pipeline's replies in order.
pub(crate) type Replies = Result<Vec<Reply>, Raw>;

/// Where one call's replies go.
pub(crate) enum ReplyTo {
    /// Its own caller, waiting on this channel.
    Caller(oneshot::Sender<Replies>),
    /// A slot of its round's inbox.
    Round(Slot),
}

impl ReplyTo {
    /// Hands over the call's replies (or why it has none); nothing
    /// happens when nobody waits for them any more.
    pub fn send(self, replies: Replies) {
        match self {
            ReplyTo::Caller(done) => {
                let _ = done.send(replies);
            }
            ReplyTo::Round(slot) => slot.put(replies),
        }
    }

    /// Whether nobody waits for the replies any more (so the call need
    /// not be written).
    pub fn is_closed(&self) -> bool {
        match self {
            ReplyTo::Caller(done) => done.is_closed(),
            ReplyTo::Round(slot) => slot.is_closed(),
        }
    }
}

/// One call's place in a round's inbox. A slot dropped without a reply
/// (its job dropped because the node's writer task ended) answers that.
pub(crate) struct Slot {
    /// `None` once the reply was put.
    inbox: Option<Arc<Inbox>>,
    index: usize,
}

impl Slot {
    fn put(mut self, replies: Replies) {
        if let Some(inbox) = self.inbox.take() {
            inbox.put(self.index, replies);
        }
    }

    fn is_closed(&self) -> bool {
        self.inbox.as_ref().is_none_or(|inbox| !inbox.wants(self.index))
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        if let Some(inbox) = self.inbox.take() {
            let ended = Raw::Unreachable("the node's connection task has ended".into());
            inbox.put(self.index, Err(ended));
        }
    }
}

/// The replies of one round's calls, by slot, in the order they arrived,
/// until the round's task takes them.
#[derive(Default)]
pub(crate) struct Inbox {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    arrived: VecDeque<(usize, Replies)>,
    /// Slots whose caller gave up (their deadline passed); grows with the
    /// slots given up.
    given_up: Vec<bool>,
    /// The round's task is gone: every slot is given up.
    closed: bool,
    /// The round's task, woken by the next reply.
    waker: Option<Waker>,
}

impl Inbox {
    pub fn new() -> Arc<Inbox> {
        Arc::new(Inbox::default())
    }

    /// The place of call `index` (numbered by the round, from 0).
    pub fn slot(self: &Arc<Inbox>, index: usize) -> ReplyTo {
        ReplyTo::Round(Slot { inbox: Some(self.clone()), index })
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // Nothing can panic while it is held; if it ever were poisoned,
        // the data is still consistent (whole-field writes).
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn wants(&self, index: usize) -> bool {
        let state = self.state();
        !state.closed && !state.given_up.get(index).copied().unwrap_or(false)
    }

    fn put(&self, index: usize, replies: Replies) {
        let waker = {
            let mut state = self.state();
            if state.closed || state.given_up.get(index).copied().unwrap_or(false) {
                return;
            }
            state.arrived.push_back((index, replies));
            state.waker.take()
        };
        if let Some(waker) = waker {
            waker.wake();
        }
    }

    /// The oldest reply not taken yet; when there is none, `waker` is
    /// woken by the next one.
    pub fn take(&self, waker: &Waker) -> Option<(usize, Replies)> {
        let mut state = self.state();
        let next = state.arrived.pop_front();
        if next.is_none() && !state.waker.as_ref().is_some_and(|w| w.will_wake(waker)) {
            state.waker = Some(waker.clone());
        }
        next
    }

    /// Gives up slot `index` (its deadline passed), unless replies are
    /// waiting to be taken (one may be its own): then `false`, and the
    /// caller takes them first.
    pub fn give_up(&self, index: usize) -> bool {
        let mut state = self.state();
        if !state.arrived.is_empty() {
            return false;
        }
        if state.given_up.len() <= index {
            state.given_up.resize(index + 1, false);
        }
        if let Some(given_up) = state.given_up.get_mut(index) {
            *given_up = true;
        }
        true
    }

    /// The round's task is gone: every slot is given up, and the replies
    /// not taken are dropped.
    pub fn close(&self) {
        let mut state = self.state();
        state.closed = true;
        state.arrived.clear();
        state.waker = None;
    }
}

#[cfg(test)]
mod tests {
    use futures_util::task::noop_waker;

    use super::*;

    fn int(n: i64) -> Replies {
        Ok(vec![Reply::Int(n)])
    }

    /// A slot given up is closed (its node's writer skips it) and its
    /// reply, when one comes, is dropped; the other slots are not touched.
    /// A slot is not given up while replies wait to be taken; one dropped
    /// unanswered answers why; a closed inbox closes every slot.
    #[test]
    fn slots_answer_once_and_a_slot_given_up_takes_nothing() {
        let waker = noop_waker();
        let inbox = Inbox::new();
        let (first, second) = (inbox.slot(0), inbox.slot(1));
        assert!(!first.is_closed() && !second.is_closed());
        assert!(inbox.give_up(0));
        assert!(first.is_closed() && !second.is_closed());
        first.send(int(1));
        second.send(int(2));
        assert_eq!(inbox.take(&waker), Some((1, int(2))), "slot 0's late reply was dropped");
        assert_eq!(inbox.take(&waker), None);

        inbox.slot(2).send(int(3));
        assert!(!inbox.give_up(3), "a reply waits: taken first");
        drop(inbox.slot(3));
        assert_eq!(inbox.take(&waker), Some((2, int(3))));
        let ended = Err(Raw::Unreachable("the node's connection task has ended".into()));
        assert_eq!(inbox.take(&waker), Some((3, ended)));

        inbox.close();
        let late = inbox.slot(4);
        assert!(late.is_closed());
        late.send(int(5));
        assert_eq!(inbox.take(&waker), None);
    }
}
