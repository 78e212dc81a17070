//! The N nodes of one client and how a round reaches them: one call per
//! node, all at once, the answers recorded as they come, and the calls
//! left in flight when a round returns kept running in the background.
//!
//! # Rounds return at the majority
//!
//! Every round sends its command to all N nodes at once. The grant round,
//! the fencing round, extensions and a guard's release return as soon as
//! their outcome is decided by a majority of yes answers (by the larger
//! quorum of a semaphore with 2 or more permits, for its grant, extend and
//! release rounds: see `quorum::semaphore_quorum`); the calls to the
//! nodes that have not answered yet are not abandoned: they go on in one
//! background task (each still bounded by its own timeouts, see
//! [`Members::settle`]). A round that fails waits for every answer (again
//! bounded by the per-node timeouts) before it returns, so that its error
//! gives exact counts and the undo knows which nodes granted.
//!
//! Why returning early is safe:
//! - Order per node. Each node has one connection, which writes commands
//!   in the order they were issued (see `node/mod.rs`). A call still in flight
//!   when its round returned was issued before anything the caller does
//!   next, so a later FENCE, EXTEND or RELEASE on that node is queued
//!   behind it and cannot overtake it. The late calls are kept running
//!   rather than dropped: a call whose caller went away before the node's
//!   writer took it is not written, which would still keep the order (sent
//!   in order, or never) but could lose a release.
//! - The fencing token. T is the highest token among the grants received
//!   when the grant round was decided. Any majority that granted us
//!   intersects the previous fenced holder's FENCE majority, whose nodes
//!   will not grant a token at or below the previous T; so our T is above
//!   it. Our own FENCE majority then holds T for the next holder in the
//!   same way. A node that grants after we returned only grants a token
//!   above its own earlier ones; it changes nothing in that argument.
//! - Late grants. A node may grant after the round returned (its reply is
//!   late). It then holds our lock, as in standard Redlock, until our
//!   release (which always goes to all N nodes, queued behind that grant)
//!   or its TTL. A lock on a minority of nodes cannot be granted to anyone
//!   else's majority, and is gone at the release.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::join_all;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::claim::Classify;
use crate::error::{Error, Phase, Result};
use crate::member::{self, Member};
use crate::node::{Limits, Request};
use crate::quorum::{self, Answer, Progress, Quorum, Tally};
use crate::rounds::flight::Flight;
use crate::tls::Tls;

/// Timeouts, and TLS. Every network call is bounded by one of the
/// timeouts; nothing is retried behind the caller's back (retries are
/// [`crate::Redlock::acquire`]'s [`crate::RetryPolicy`], and the
/// watchdog's renewals).
#[derive(Clone, Debug)]
pub struct Config {
    /// Opening a connection to one node (also at `connect`).
    pub connect_timeout: Duration,
    /// One command on one node. An acquire round uses
    /// `min(command_timeout, ttl)`; keep it well below the TTLs you use.
    pub command_timeout: Duration,
    /// After a node failed to connect, calls within this time count it as
    /// unreachable at once instead of paying a connect timeout again.
    pub reconnect_backoff: Duration,
    /// How the `rediss://` members are spoken to (TLS, mutual TLS); the
    /// default: the system's CAs, no client certificate. Settings given
    /// with no `rediss` member are refused (a plain connection where TLS
    /// was meant).
    pub tls: Tls,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            connect_timeout: Duration::from_millis(500),
            command_timeout: Duration::from_millis(250),
            reconnect_backoff: Duration::from_millis(250),
            tls: Tls::default(),
        }
    }
}

struct Inner {
    members: Vec<Member>,
    config: Config,
    /// How many background tasks are running: calls left in flight by a
    /// round that returned at its majority, and releases of dropped guards.
    /// [`Members::settle`] waits for zero, woken by `idle`.
    background: AtomicUsize,
    idle: Notify,
}

/// The nodes a client was connected to, with its timeouts and its count of
/// background work: what every round runs on. Cheap to clone (shared);
/// held by the `Redlock` handle and by every guard it gave out.
#[derive(Clone)]
pub(crate) struct Members {
    inner: Arc<Inner>,
}

/// Counts one background task while alive (see [`Members::settle`]). It
/// keeps the nodes, and so their connections, alive until the task ends.
pub(crate) struct Background(Arc<Inner>);

impl Drop for Background {
    fn drop(&mut self) {
        if self.0.background.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

/// Takes answers from the calls in flight, recording each in its round,
/// until `done` says so or no call is left. Every call ends by its own
/// deadline, so this wait is bounded too.
pub(crate) async fn drive(flight: &mut Flight, rounds: &mut [Progress], done: impl Fn(&[Progress]) -> bool) {
    while !done(rounds) {
        let Some(reply) = flight.next().await else { return };
        if let Some(round) = rounds.get_mut(reply.round) {
            round.record(reply.node, reply.answer);
        }
    }
}

impl Members {
    /// Parses the node URLs and starts each node's connection task;
    /// opens one connection to each, in parallel. A node that cannot be
    /// reached now is not an error: it counts as unreachable, and later
    /// calls try it again.
    pub(crate) async fn connect<I, S>(urls: I, config: Config) -> Result<Members>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let limits =
            Limits { connect_timeout: config.connect_timeout, reconnect_backoff: config.reconnect_backoff };
        if config.command_timeout.is_zero() || config.connect_timeout.is_zero() {
            return Err(Error::InvalidArgument("timeouts must be above zero".into()));
        }
        let texts: Vec<String> = urls.into_iter().map(|text| text.as_ref().trim().to_string()).collect();
        let tls = if texts.iter().any(|text| member::uses_tls(text)) {
            Some(Arc::new(config.tls.client().map_err(Error::InvalidArgument)?))
        } else if let Some(setting) = config.tls.named().first() {
            return Err(Error::InvalidArgument(format!(
                "{setting} is given but no member is rediss://: write the members that speak TLS as \
                 rediss://host:port (or rediss+cluster://...), or drop the TLS settings"
            )));
        } else {
            None
        };
        let mut parsed: Vec<Member> = Vec::new();
        for text in &texts {
            if parsed.iter().any(|m| &m.text == text) {
                return Err(Error::InvalidArgument(format!("member {text} is listed twice")));
            }
            let number = parsed.len() + 1;
            let member = Member::new(number, text, limits, config.command_timeout, tls.as_ref())
                .map_err(|e| Error::InvalidArgument(format!("member {text:?}: {e}")))?;
            parsed.push(member);
        }
        if parsed.is_empty() {
            return Err(Error::InvalidArgument("no members given".into()));
        }
        if parsed.len() > quorum::NODES_MAX {
            return Err(Error::InvalidArgument(format!(
                "{} members given, at most {} are supported",
                parsed.len(),
                quorum::NODES_MAX
            )));
        }
        let inner = Inner { members: parsed, config, background: AtomicUsize::new(0), idle: Notify::new() };
        let members = Members { inner: Arc::new(inner) };
        join_all(members.inner.members.iter().map(Member::warm_up)).await;
        Ok(members)
    }

    /// Every member, in the order given.
    pub(crate) fn list(&self) -> &[Member] {
        &self.inner.members
    }

    /// The error of a round on `resource` that fell short of its quorum:
    /// [`Error::Refused`], naming the first member that refused, when the
    /// nodes' refusals of the request alone rule the quorum out (the same
    /// request would be refused again: no retry), else `NoQuorum`.
    pub(crate) fn shortfall(&self, resource: &str, phase: Phase, tally: Tally) -> Error {
        let resource = resource.to_string();
        match &tally.first_refusal {
            Some((node, _)) if tally.refused_outright() => {
                let text = self.inner.members.get(*node).map_or("?", |m| m.text.as_str());
                let node = format!("member {} ({text})", node + 1);
                Error::Refused { resource, phase, node, tally: tally.into() }
            }
            _ => Error::NoQuorum { resource, phase, tally: tally.into() },
        }
    }

    /// Whether any member is a cluster.
    pub(crate) fn has_cluster(&self) -> bool {
        self.inner.members.iter().any(Member::is_cluster)
    }

    /// N.
    pub(crate) fn len(&self) -> usize {
        self.inner.members.len()
    }

    pub(crate) fn config(&self) -> &Config {
        &self.inner.config
    }

    /// Waits until the work that earlier calls left running in the
    /// background has ended (see `Redlock::settle`, which documents it).
    ///
    /// Bounded: it returns after `2 * (2 * connect_timeout +
    /// command_timeout)` at the latest. One call takes at most `2 *
    /// connect_timeout + command_timeout` (waiting for a connection that
    /// another call is opening, opening one, the command), and a dropped
    /// guard's release may first wait for an extension in flight.
    pub(crate) async fn settle(&self) {
        let config = &self.inner.config;
        let one_call = config.connect_timeout.saturating_mul(2).saturating_add(config.command_timeout);
        let deadline = Instant::now() + one_call.saturating_mul(2);
        loop {
            // Registered before the count is read: a task that ends in
            // between still wakes this one.
            let idle = self.inner.idle.notified();
            tokio::pin!(idle);
            idle.as_mut().enable();
            if self.inner.background.load(Ordering::Acquire) == 0 {
                return;
            }
            if tokio::time::timeout_at(deadline, idle).await.is_err() {
                return;
            }
        }
    }

    /// Counts a background task until the returned value is dropped.
    pub(crate) fn background(&self) -> Background {
        self.inner.background.fetch_add(1, Ordering::AcqRel);
        Background(self.inner.clone())
    }

    pub(crate) fn every_node(&self) -> Vec<usize> {
        (0..self.inner.members.len()).collect()
    }

    /// An empty flight for this client's rounds.
    pub(crate) fn flight(&self) -> Flight {
        Flight::new(self.inner.members.len())
    }

    /// One call of `request` as round `round` per node listed in `targets`
    /// (all: [`Members::every_node`]), each given up `timeout` after it was
    /// issued: queued on their nodes now, in the order listed.
    pub(crate) fn send(
        &self,
        flight: &mut Flight,
        round: usize,
        (request, classify): (&Request, Classify),
        timeout: Duration,
        targets: impl IntoIterator<Item = usize>,
    ) {
        flight.send(&self.inner.members, round, (request, classify), timeout, targets);
    }

    /// Lets the calls still in flight run to their end in one background
    /// task, once their round is decided. They are not dropped: see the
    /// module's comment (a dropped call may never be sent).
    pub(crate) fn detach(&self, mut flight: Flight) {
        if flight.is_empty() {
            return;
        }
        // Rounds run inside a Tokio runtime (the connections need one); if
        // there were none, dropping is the only option, and a call already
        // handed to its connection is still sent.
        let Ok(runtime) = tokio::runtime::Handle::try_current() else { return };
        let background = self.background();
        runtime.spawn(async move {
            let _background = background;
            // Bounded: each call ends by its own deadline.
            while flight.next().await.is_some() {}
        });
    }

    /// Sends `request` to the nodes listed in `targets` and records their
    /// answers in `round` (which may hold answers known without a command);
    /// returns once the round's quorum said yes (the other calls go on in
    /// the background) or, when it cannot be reached, once every node
    /// answered or timed out.
    pub(crate) async fn quorum_round(
        &self,
        (request, classify): (Request, Classify),
        round: Progress,
        targets: Vec<usize>,
        timeout: Duration,
    ) -> Progress {
        let mut flight = self.flight();
        self.send(&mut flight, 0, (&request, classify), timeout, targets);
        let mut rounds = [round];
        drive(&mut flight, &mut rounds, |r| r[0].decided().is_some()).await;
        if rounds[0].decided() == Some(true) {
            self.detach(flight);
        } else {
            drive(&mut flight, &mut rounds, |_| false).await;
        }
        let [round] = rounds;
        round
    }

    /// [`Members::quorum_round`] on every node, needing `quorum`.
    pub(crate) async fn every_node_round(
        &self,
        request: (Request, Classify),
        quorum: Quorum,
        timeout: Duration,
    ) -> Progress {
        let round = Progress::with_quorum(self.inner.members.len(), quorum);
        self.quorum_round(request, round, self.every_node(), timeout).await
    }

    /// Sends `request` to every node at once and waits for every answer;
    /// each node's call is given up `timeout` after it was issued. Answers
    /// are in node order.
    pub(crate) async fn round(
        &self,
        request: &Request,
        timeout: Duration,
        classify: Classify,
    ) -> Vec<Answer> {
        self.round_on(request, timeout, classify, self.every_node()).await
    }

    /// [`Members::round`] on the nodes listed in `targets`: their answers,
    /// in node order.
    pub(crate) async fn round_on(
        &self,
        request: &Request,
        timeout: Duration,
        classify: Classify,
        targets: impl IntoIterator<Item = usize>,
    ) -> Vec<Answer> {
        let mut flight = self.flight();
        self.send(&mut flight, 0, (request, classify), timeout, targets);
        let mut rounds = [Progress::new(self.len())];
        drive(&mut flight, &mut rounds, |_| false).await;
        let [round] = rounds;
        round.into_answers().into_iter().flatten().collect()
    }
}
