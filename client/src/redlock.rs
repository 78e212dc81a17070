//! The Redlock protocol over N lock nodes: parallel rounds, majority,
//! validity, the fencing round, release on all nodes.
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
//! [`Redlock::settle`]). A round that fails waits for every answer (again
//! bounded by the per-node timeouts) before it returns, so that its error
//! gives exact counts and the undo knows which nodes granted.
//!
//! Why returning early is safe:
//! - Order per node. Each node has one multiplexed connection, which writes
//!   commands in the order they were issued (see `node.rs`). A call still
//!   in flight when its round returned was issued before anything the
//!   caller does next, so a later FENCE, EXTEND or RELEASE on that node is
//!   queued behind it and cannot overtake it. The late calls are kept
//!   running rather than dropped: the redis crate skips a queued command
//!   whose caller went away before its connection task took it, which
//!   would still keep the order (sent in order, or never) but could lose a
//!   release.
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
//!
//! # The fencing round runs when the token is asked for
//!
//! A guard runs the fencing round the first time its
//! [`Guard::fencing_token`] is asked for, not at acquire: a caller who needs
//! mutual exclusion only pays one round to acquire and one to release.
//! Fencing later is as safe as fencing at once. A FENCE answers 1 only on a
//! node that holds our lock at that moment, and the round counts only
//! within the validity; the next holder B (whose hold begins after ours
//! ends) is granted by a majority that meets our FENCE majority in a node
//! X. If B's grant on X came after our FENCE there, X's counter was at T
//! and B's token is above it. It cannot have come before: X held our lock
//! at our FENCE, so B's lock on X would have ended before our hold did,
//! before B's hold began, while B's validity assumes it lives on X until
//! B's deadline. A node whose own grant carried T counts as fenced without
//! a command: its counter reached T when it granted us, and the same
//! argument applies with the grant in place of the FENCE. Reentrant
//! [`Redlock::enter`] runs the fencing round at once (it returns the token
//! as a value, with no guard to ask later).
//!
//! # Sets of resources
//!
//! [`Redlock::try_acquire_many`] takes several resources with one token,
//! one TTL and one quorum token T (the commands are in `claim.rs`). On each
//! node `LOCK.MACQUIRE` grants every key of the set or none, and answers
//! one fencing token g for the whole grant, stored as the holder's token
//! of every key; like a single grant, g is above every token that node
//! granted earlier on any of those keys (and a later grant there, on any
//! of them, is above g). Across nodes the set is one lock to the majority
//! rule: a node counts as a grant only if it granted the whole set (it
//! cannot grant part of it), and every later round counts a node only if
//! it did the whole set: extend (`LOCK.RENEW`, every key 1), release
//! (`LOCK.MRELEASE`, every key 1) and fence (`LOCK.FENCE` on every key, in
//! one pipeline, every key 1).
//!
//! Why that is as safe as one resource, key by key. Take any key k of the
//! set. Mutual exclusion: our grant majority holds k for us, so it meets
//! the majority of any other holder of k (alone or in a set, at least a
//! majority too) in a node that would not grant k to both at once. The
//! quorum token: T is the highest g among the grants that decided the
//! round. Our FENCE majority is a majority on which `LOCK.FENCE k token T`
//! answered 1 (for every key, so in particular for k): each of its nodes
//! held k for us at that moment and raised its counter to T. The next
//! holder B of k, after our hold ends, is granted k by a majority that
//! meets our FENCE majority in a node X; the argument of the previous
//! section, read for k, puts B's grant of k on X after our FENCE there,
//! so its token is above T, and B's quorum token (the highest of its
//! grants) is above T too. A node whose MACQUIRE answered T itself counts
//! as fenced without a command: its counter reached T when it granted us
//! every key. So T is above the quorum token of every earlier fenced
//! holder of any key of the set, the same guarantee as for one resource,
//! and a resource server can check T per key (`LOCK.CHECK key T`).
//!
//! Counting a node only for the whole set (rather than a majority per
//! key, which would be safe too) keeps one tally, one error and one lease
//! per round. A node holds part of a set only after a hand-made per-key
//! release or a failover; there it counts as "not holding", as it should:
//! the guard promises every key.
//!
//! No deadlock: the client never waits while holding. A node grants the
//! whole set at once or refuses it at once (the client does not use
//! `WAIT`), and a failed round releases whatever it got with MRELEASE on
//! all N (also the nodes that did not answer, queued behind the grant), so
//! two clients naming overlapping sets in opposite orders retry instead of
//! each holding half.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::join_all;
use futures_util::stream::{FuturesUnordered, StreamExt};
use redis::Value;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::claim::{check_name, command, millis, Claim, Classify};
use crate::error::{Error, Phase, Result};
use crate::guard::Guard;
use crate::node::{Limits, Node, Request};
use crate::quorum::{self, Answer, Mode, Progress, Quorum, Raw, RetryPolicy, Tally, Verdict};

/// Timeouts. Every network call is bounded by one of them; nothing is
/// retried behind the caller's back (retries are [`Redlock::acquire`]'s
/// [`RetryPolicy`], and the watchdog's renewals).
#[derive(Clone, Copy, Debug)]
pub struct Config {
    /// Opening a connection to one node (also at `connect`).
    pub connect_timeout: Duration,
    /// One command on one node. An acquire round uses
    /// `min(command_timeout, ttl)`; keep it well below the TTLs you use.
    pub command_timeout: Duration,
    /// After a node failed to connect, calls within this time count it as
    /// unreachable at once instead of paying a connect timeout again.
    pub reconnect_backoff: Duration,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            connect_timeout: Duration::from_millis(500),
            command_timeout: Duration::from_millis(250),
            reconnect_backoff: Duration::from_millis(250),
        }
    }
}

impl RetryPolicy {
    /// Runs `attempt` until it succeeds, fails with an error that is not
    /// retryable ([`Error::is_retryable`]), or the policy is spent, sleeping
    /// a random delay within the policy between two attempts (on tokio's
    /// clock). Returns the last attempt's error. [`Redlock::acquire`] is
    /// this around [`Redlock::try_acquire`]; wrap your own steps with it,
    /// e.g. an acquire followed by [`Guard::fencing_token`] (the CLI does).
    pub async fn retry<T, F, Fut>(&self, mut attempt: F) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        let started = Instant::now();
        let mut attempts = 0u32;
        loop {
            attempts = attempts.saturating_add(1);
            let error = match attempt().await {
                Ok(done) => return Ok(done),
                Err(error) => error,
            };
            if !error.is_retryable() {
                return Err(error);
            }
            match self.delay_after(attempts, started.elapsed(), rand::random::<f64>()) {
                Some(delay) => tokio::time::sleep(delay).await,
                None => return Err(error),
            }
        }
    }
}

/// The validity of one grant or extension, on tokio's clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lease {
    /// When the round that obtained it started (before any node saw it).
    pub start: Instant,
    pub ttl: Duration,
    /// `start + ttl - drift`: after this the lock may be someone else's.
    pub deadline: Instant,
}

impl Lease {
    pub(crate) fn new(start: Instant, ttl: Duration) -> Lease {
        Lease { start, ttl, deadline: quorum::deadline(start, ttl) }
    }
}

/// A reentrant hold obtained by [`Redlock::enter`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entered {
    pub fencing_token: u64,
    pub lease: Lease,
}

/// One node's view of a lock, from `LOCK.INFO`.
///
/// A plain or reentrant lock fills `holder`, `fence`, `ttl_ms` and
/// `deadline_ms` with its one holder's. A read-write lock (`kind`
/// "shared") or a semaphore has one entry per live holder in `holders`
/// (`holds` is their count) and leaves those four empty; a semaphore also
/// gives its `permits`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LockInfo {
    pub kind: String,
    pub holder: String,
    pub holds: i64,
    pub fence: i64,
    pub ttl_ms: i64,
    pub deadline_ms: i64,
    pub waiters: i64,
    /// A semaphore's permit count.
    pub permits: Option<i64>,
    /// The holders of a read-write lock or semaphore.
    pub holders: Vec<HolderInfo>,
    /// Nobody holds the lock, yet a new grant would be refused now: why
    /// (`startup`, `promotion`, `flushed`, `swapped`, `evicted`, `changed`,
    /// `overflow`, `evictable`, `lock-delay`, `restart-grace`, `queued`),
    /// for how many ms (-1: until a setting changes or the queue moves), and
    /// the node's explanation.
    pub refused: Option<Refused>,
}

/// Why a node refuses a new grant of a lock nobody holds (`LOCK.INFO`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Refused {
    pub code: String,
    pub ms: i64,
    pub reason: String,
}

/// One holder of a read-write lock or semaphore, from `LOCK.INFO`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HolderInfo {
    pub holder: String,
    /// "read", "write" or "permit".
    pub mode: String,
    pub fence: i64,
    pub ttl_ms: i64,
    pub deadline_ms: i64,
}

/// `LOCK.INFO` on one node: `Ok(None)` when no lock is held there.
#[derive(Clone, Debug)]
pub struct NodeInfo {
    pub node: String,
    pub info: std::result::Result<Option<LockInfo>, String>,
}

#[derive(Clone, Copy)]
enum Kind<'a> {
    /// A token-held grant: one resource (plain, read, write or permit) or
    /// a set. Undone, extended and released by token on every node.
    Lock(&'a Claim),
    /// `LOCK.ENTER` of this resource by owner; undone with `LOCK.EXIT`.
    Reentrant(&'a str),
}

impl Kind<'_> {
    fn quorum(self) -> Quorum {
        match self {
            Kind::Lock(claim) => claim.quorum(),
            Kind::Reentrant(_) => Quorum::Majority,
        }
    }

    /// What errors call it.
    fn label(self) -> String {
        match self {
            Kind::Lock(claim) => claim.label().to_string(),
            Kind::Reentrant(resource) => resource.to_string(),
        }
    }

    fn grant(self, token: &str, ttl: Duration) -> Request {
        match self {
            Kind::Lock(claim) => claim.grant(token, ttl),
            Kind::Reentrant(resource) => command("LOCK.ENTER", resource, token, &[millis(ttl)]).into(),
        }
    }

    fn fence(self, token: &str, floor: u64) -> (Request, Classify) {
        match self {
            Kind::Lock(claim) => claim.fence(token, floor),
            Kind::Reentrant(resource) => {
                (command("LOCK.FENCE", resource, token, &[floor]).into(), quorum::classify_flag)
            }
        }
    }
}

/// A grant round that succeeded: the quorum token T (fenced already when
/// the fencing round ran with it), the lease, and the grant round's
/// answers as they stood when it was decided (for a later fencing round).
pub(crate) struct Granted {
    pub floor: u64,
    pub lease: Lease,
    pub grants: Vec<Option<Answer>>,
}

pub(crate) struct Inner {
    nodes: Vec<Node>,
    config: Config,
    /// How many background tasks are running: calls left in flight by a
    /// round that returned at its majority, and releases of dropped guards.
    /// [`Redlock::settle`] waits for zero, woken by `idle`.
    background: AtomicUsize,
    idle: Notify,
}

/// Counts one background task while alive (see [`Redlock::settle`]).
pub(crate) struct Background(Arc<Inner>);

impl Drop for Background {
    fn drop(&mut self) {
        if self.0.background.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

/// Which round a reply belongs to, in [`Redlock::grant`].
const GRANT: usize = 0;
const FENCE: usize = 1;

/// One node's answer in one round.
struct Reply {
    round: usize,
    node: usize,
    answer: Answer,
}

/// One call of a round, queued on its node NOW (see `node.rs`: the order
/// of calls to a node is the order of these calls, whenever and by
/// whichever task the returned future is polled). The future owns what it
/// uses, so that it can outlive the round: see [`Redlock::detach`].
/// Bounded by the node's timeouts.
fn call(
    inner: &Inner,
    round: usize,
    node: usize,
    request: &Request,
    timeout: Duration,
    classify: Classify,
) -> impl Future<Output = Reply> + Send + 'static {
    let reply = inner.nodes.get(node).map(|target| target.call(request, timeout));
    async move {
        let answer = match reply {
            Some(reply) => classify(&reply.await),
            None => Answer::Failed(format!("no node {node}")),
        };
        Reply { round, node, answer }
    }
}

/// Takes replies from the calls in flight, recording each in its round,
/// until `done` says so or no call is left. Every call ends by its own
/// timeouts, so this wait is bounded too.
async fn drive<F>(
    flight: &mut FuturesUnordered<F>,
    rounds: &mut [Progress],
    done: impl Fn(&[Progress]) -> bool,
) where
    F: Future<Output = Reply>,
{
    while !done(rounds) {
        let Some(reply) = flight.next().await else { return };
        if let Some(round) = rounds.get_mut(reply.round) {
            round.record(reply.node, reply.answer);
        }
    }
}

/// A client for N independent lock nodes. Cheap to clone (shared).
#[derive(Clone)]
pub struct Redlock {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Redlock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Redlock")
            .field("nodes", &self.node_urls())
            .field("config", &self.inner.config)
            .finish()
    }
}

impl Redlock {
    /// Parses the node URLs (`redis://host:port/`) and opens one connection
    /// to each, in parallel. A node that cannot be reached now is not an
    /// error: it counts as unreachable, and later calls try it again.
    pub async fn connect<I, S>(nodes: I, config: Config) -> Result<Redlock>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let limits =
            Limits { connect_timeout: config.connect_timeout, reconnect_backoff: config.reconnect_backoff };
        let mut parsed: Vec<Node> = Vec::new();
        for url in nodes {
            let url = url.as_ref().trim();
            if parsed.iter().any(|n| n.url == url) {
                return Err(Error::InvalidArgument(format!("node {url} is listed twice")));
            }
            let node =
                Node::new(url, limits).map_err(|e| Error::InvalidArgument(format!("node {url:?}: {e}")))?;
            parsed.push(node);
        }
        if parsed.is_empty() {
            return Err(Error::InvalidArgument("no nodes given".into()));
        }
        if parsed.len() > quorum::NODES_MAX {
            return Err(Error::InvalidArgument(format!(
                "{} nodes given, at most {} are supported",
                parsed.len(),
                quorum::NODES_MAX
            )));
        }
        if config.command_timeout.is_zero() || config.connect_timeout.is_zero() {
            return Err(Error::InvalidArgument("timeouts must be above zero".into()));
        }
        let inner = Inner { nodes: parsed, config, background: AtomicUsize::new(0), idle: Notify::new() };
        let redlock = Redlock { inner: Arc::new(inner) };
        join_all(redlock.inner.nodes.iter().map(Node::warm_up)).await;
        Ok(redlock)
    }

    pub fn node_urls(&self) -> Vec<String> {
        self.inner.nodes.iter().map(|n| n.url.clone()).collect()
    }

    /// How many nodes must agree: `N / 2 + 1`.
    pub fn majority(&self) -> usize {
        quorum::majority(self.inner.nodes.len())
    }

    /// How many nodes must grant (and extend) a lock taken in `mode`: a
    /// majority, except for a semaphore with 2 or more permits (see
    /// [`quorum::semaphore_quorum`]: 4 of 5 nodes for 2 permits).
    pub fn quorum(&self, mode: Mode) -> usize {
        mode.quorum().need(self.inner.nodes.len())
    }

    pub fn config(&self) -> Config {
        self.inner.config
    }

    /// Waits until the work that earlier calls left running in the
    /// background has ended: the calls to nodes that had not answered yet
    /// when a round returned at its majority, and the releases of dropped
    /// guards. Call it before the process exits, so that every node gets
    /// its release (a lock left on a minority of nodes is harmless, but
    /// stays there until its TTL).
    ///
    /// Bounded: it returns after `2 * (2 * connect_timeout +
    /// command_timeout)` at the latest. One call takes at most `2 *
    /// connect_timeout + command_timeout` (waiting for a connection that
    /// another call is opening, opening one, the command), and a dropped
    /// guard's release may first wait for an extension in flight.
    pub async fn settle(&self) {
        let config = self.inner.config;
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

    fn every_node(&self) -> Vec<usize> {
        (0..self.inner.nodes.len()).collect()
    }

    /// One call of `request` as round `round` per node listed in `nodes`
    /// (all: [`Redlock::every_node`]), each with its own timeout: queued
    /// on their nodes now, in node order.
    fn calls_to(
        &self,
        round: usize,
        request: Request,
        timeout: Duration,
        classify: Classify,
        nodes: Vec<usize>,
    ) -> Vec<impl Future<Output = Reply> + Send + 'static> {
        nodes.into_iter().map(|node| call(&self.inner, round, node, &request, timeout, classify)).collect()
    }

    /// Lets the calls still in flight run to their end in one background
    /// task, once their round is decided. They are not dropped: see the
    /// module's comment (a dropped call may never be sent).
    fn detach<F>(&self, mut flight: FuturesUnordered<F>)
    where
        F: Future<Output = Reply> + Send + 'static,
    {
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
            // Bounded: each call ends by its own timeouts.
            while flight.next().await.is_some() {}
        });
    }

    /// Sends `request` to the nodes listed in `targets` and records their
    /// answers in `round` (which may hold answers known without a command);
    /// returns once the round's quorum said yes (the other calls go on in
    /// the background) or, when it cannot be reached, once every node
    /// answered or timed out.
    async fn quorum_round(
        &self,
        (request, classify): (Request, Classify),
        round: Progress,
        targets: Vec<usize>,
        timeout: Duration,
    ) -> Progress {
        let mut flight: FuturesUnordered<_> =
            self.calls_to(0, request, timeout, classify, targets).into_iter().collect();
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

    /// [`Redlock::quorum_round`] on every node, needing `quorum`.
    async fn every_node_round(
        &self,
        request: (Request, Classify),
        quorum: Quorum,
        timeout: Duration,
    ) -> Progress {
        let round = Progress::with_quorum(self.inner.nodes.len(), quorum);
        self.quorum_round(request, round, self.every_node(), timeout).await
    }

    /// One attempt to take `resource` in `mode` for `ttl`: the grant
    /// command of that mode (`LOCK.ACQUIRE` for [`Mode::Exclusive`],
    /// `LOCK.SHARED` for [`Mode::Read`], `LOCK.EXCLUSIVE` for
    /// [`Mode::Write`], `LOCK.SEMAPHORE` for [`Mode::Permit`]) on every node
    /// in parallel, needing the mode's quorum ([`Redlock::quorum`]), within
    /// the validity. One round trip: the fencing round runs later, when
    /// [`Guard::fencing_token`] is first asked for. On any failure the
    /// partial grants are released on every node before this returns:
    /// [`Error::Contended`] (another owner holds it), [`Error::NoQuorum`],
    /// [`Error::ExpiredBeforeUse`], or [`Error::InvalidArgument`].
    ///
    /// A read, write or permit guard extends and releases like a plain one,
    /// with its mode's quorum. A fenced holder's token is above the token of
    /// every fenced holder whose hold ended before its own began: from one
    /// exclusive holder (or writer) to the next, tokens strictly increase.
    /// Readers and permit holders hold at the same time; one that asks for
    /// its token before the next is granted gets a lower token than that
    /// one, but two granted before either asked may get the same token.
    pub async fn try_acquire(&self, resource: &str, mode: Mode, ttl: Duration) -> Result<Guard> {
        let ttl = check_ttl(ttl)?;
        self.take(Claim::one(resource, mode)?, ttl).await
    }

    /// [`Redlock::try_acquire`], retried after a random delay while the
    /// failure is retryable (held, no quorum, too slow), within `policy`
    /// (see [`RetryPolicy::retry`]). Returns the last attempt's error.
    pub async fn acquire(
        &self,
        resource: &str,
        mode: Mode,
        ttl: Duration,
        policy: &RetryPolicy,
    ) -> Result<Guard> {
        policy.retry(|| self.try_acquire(resource, mode, ttl)).await
    }

    /// One attempt to take every resource of a set, each in its mode
    /// ([`Mode::Exclusive`], [`Mode::Read`] or [`Mode::Write`]), all or
    /// nothing, with one token, one TTL and one fencing token: one
    /// `LOCK.MACQUIRE` per node, in parallel. A node grants the whole set
    /// or nothing; the set is held when a majority of nodes granted it
    /// within the validity (a node that grants part of it does not exist:
    /// MACQUIRE is atomic). One round trip, like [`Redlock::try_acquire`],
    /// and the same [`Guard`]: its extensions (`LOCK.RENEW` over the set),
    /// watchdog, release (`LOCK.MRELEASE`) and fencing round (`LOCK.FENCE`
    /// on every key) count a node only if it did the whole set. On failure
    /// the set is released on every node before this returns.
    ///
    /// A set of one resource is [`Redlock::try_acquire`] (the single-key
    /// commands). Refused before any round ([`Error::InvalidArgument`]):
    /// no resource, more than [`quorum::SET_KEYS_MAX`], a resource named
    /// twice, a [`Mode::Permit`] (semaphores are not taken in sets).
    ///
    /// No deadlock whatever the order: a node grants the set at once or
    /// refuses it at once, so no client ever holds part of a set while it
    /// waits for the rest; overlapping sets given in any order are free of
    /// deadlock, and a refused attempt retries (see
    /// [`Redlock::acquire_many`]).
    pub async fn try_acquire_many<R: AsRef<str>>(
        &self,
        resources: &[(R, Mode)],
        ttl: Duration,
    ) -> Result<Guard> {
        let ttl = check_ttl(ttl)?;
        self.take(Claim::set(resources)?, ttl).await
    }

    /// [`Redlock::try_acquire_many`], retried like [`Redlock::acquire`].
    pub async fn acquire_many<R: AsRef<str>>(
        &self,
        resources: &[(R, Mode)],
        ttl: Duration,
        policy: &RetryPolicy,
    ) -> Result<Guard> {
        let ttl = check_ttl(ttl)?;
        let claim = Claim::set(resources)?;
        policy.retry(|| self.take(claim.clone(), ttl)).await
    }

    /// One grant round for `claim` under a new random token.
    async fn take(&self, claim: Claim, ttl: Duration) -> Result<Guard> {
        let token = quorum::token_from_bits(rand::random());
        let granted = self.grant(Kind::Lock(&claim), &token, ttl, false).await?;
        Ok(Guard::new(self.clone(), claim, token, granted))
    }

    /// `LOCK.RELEASE` of the lock held with `token` (taken in `mode`) on
    /// every node, waiting for every answer (or its timeout): exact counts,
    /// for tools like the CLI. `Ok` with the counts when the mode's quorum
    /// released (a majority; for a semaphore fewer than its quorum means
    /// the permit was no longer counted on enough nodes to bound the
    /// holders); `Err(NoQuorum)` otherwise (the lock had expired or been
    /// taken on too many nodes, or they did not answer). [`Guard::release`]
    /// returns at the quorum instead.
    pub async fn release(&self, resource: &str, token: &str, mode: Mode) -> Result<Tally> {
        check_name("token", token)?;
        self.release_by_token(&Claim::one(resource, mode)?, token).await
    }

    /// [`Redlock::release`] of a set taken with
    /// [`Redlock::try_acquire_many`] (`LOCK.MRELEASE` on every node): a
    /// node counts as released when it released every resource of the set
    /// (the modes do not matter: a set needs a majority).
    pub async fn release_many<R: AsRef<str>>(&self, resources: &[R], token: &str) -> Result<Tally> {
        check_name("token", token)?;
        self.release_by_token(&by_token(resources)?, token).await
    }

    async fn release_by_token(&self, claim: &Claim, token: &str) -> Result<Tally> {
        let tally = self.release_all(claim, token).await.with_quorum(claim.quorum());
        released(claim.label(), tally)
    }

    /// The release round of a guard: on every node, returning once the
    /// claim's quorum released; the nodes that have not answered yet get
    /// theirs in the background (counted as `pending`). A failure waits
    /// for every answer.
    pub(crate) async fn release_quorum(&self, claim: &Claim, token: &str) -> Result<Tally> {
        let request = claim.release(token);
        let round = self.every_node_round(request, claim.quorum(), self.inner.config.command_timeout).await;
        released(claim.label(), round.tally())
    }

    /// `LOCK.EXTEND` of the lock held with `token` (taken in `mode`) on
    /// every node: held again for `ttl` from the start of the round when the
    /// mode's quorum answered 1 within the new validity (a semaphore permit
    /// extended on fewer nodes than its grant needed no longer bounds the
    /// number of holders). Returns at that quorum (the other nodes' calls go
    /// on in the background, queued before any later command to them).
    pub async fn extend(&self, resource: &str, token: &str, mode: Mode, ttl: Duration) -> Result<Lease> {
        let ttl = check_ttl(ttl)?;
        check_name("token", token)?;
        self.extend_claim(&Claim::one(resource, mode)?, token, ttl).await
    }

    /// [`Redlock::extend`] of a set taken with
    /// [`Redlock::try_acquire_many`] (`LOCK.RENEW` over the set on every
    /// node): a node counts only if it extended every resource of the set.
    pub async fn extend_many<R: AsRef<str>>(
        &self,
        resources: &[R],
        token: &str,
        ttl: Duration,
    ) -> Result<Lease> {
        let ttl = check_ttl(ttl)?;
        check_name("token", token)?;
        self.extend_claim(&by_token(resources)?, token, ttl).await
    }

    /// The extend round (by hand, by token, or by the watchdog).
    pub(crate) async fn extend_claim(&self, claim: &Claim, token: &str, ttl: Duration) -> Result<Lease> {
        let start = Instant::now();
        let timeout = self.inner.config.command_timeout.min(ttl);
        let round = self.every_node_round(claim.extend(token, ttl), claim.quorum(), timeout).await;
        if round.decided() != Some(true) {
            let tally = round.tally();
            return Err(Error::NoQuorum { resource: claim.label().to_string(), phase: Phase::Extend, tally });
        }
        let elapsed = start.elapsed();
        if quorum::validity(ttl, elapsed).is_none() {
            return Err(expired(claim.label(), ttl, elapsed));
        }
        Ok(Lease::new(start, ttl))
    }

    /// Reentrant acquire (`LOCK.ENTER` on every node, then the fencing
    /// round at once): the first entry by `owner` grants a new fencing
    /// token, later ones add a hold on each node and return the same token.
    /// On failure, the hold just added is taken back (`LOCK.EXIT`) on the
    /// nodes that granted it. A node that did not answer may keep that
    /// extra hold until its TTL: the outcome there is unknown, and an EXIT
    /// could take back an earlier hold instead.
    pub async fn enter(&self, resource: &str, owner: &str, ttl: Duration) -> Result<Entered> {
        let ttl = check_ttl(ttl)?;
        check_name("resource", resource)?;
        check_name("owner", owner)?;
        let granted = self.grant(Kind::Reentrant(resource), owner, ttl, true).await?;
        Ok(Entered { fencing_token: granted.floor, lease: granted.lease })
    }

    /// Reentrant release (`LOCK.EXIT` on every node): the holds left (the
    /// largest count among the nodes that answered; 0 = free everywhere
    /// that answered). `Err(NoQuorum)` unless a majority answered.
    pub async fn exit(&self, resource: &str, owner: &str) -> Result<u64> {
        check_name("owner", owner)?;
        let request = command("LOCK.EXIT", resource, owner, &[]).into();
        let answers = self.round(&request, self.inner.config.command_timeout, quorum::classify_exit).await;
        let tally = Tally::of(&answers);
        match quorum::holds_left(answers.iter()) {
            Some(left) if tally.has_quorum() => Ok(left),
            _ => Err(Error::NoQuorum { resource: resource.to_string(), phase: Phase::Exit, tally }),
        }
    }

    /// `LOCK.INFO` on every node, in node order.
    pub async fn info(&self, resource: &str) -> Vec<NodeInfo> {
        let mut cmd = redis::cmd("LOCK.INFO");
        cmd.arg(resource);
        let timeout = self.inner.config.command_timeout;
        let queries: Vec<_> = self.inner.nodes.iter().map(|n| n.query(&cmd, timeout)).collect();
        let replies = join_all(queries).await;
        self.inner
            .nodes
            .iter()
            .zip(replies)
            .map(|(node, reply)| NodeInfo {
                node: node.url.clone(),
                info: match reply {
                    Ok(value) => parse_info(value),
                    Err(raw) => Err(describe_raw(&raw)),
                },
            })
            .collect()
    }

    /// The grant round, and with `fence` the fencing round right after it
    /// (reentrant `enter`); undoes partial grants on failure.
    ///
    /// The grant round needs the kind's quorum (a majority, or a
    /// semaphore's larger one); the fencing round a majority, whatever the
    /// kind: every later grant quorum is at least a majority, so it meets
    /// our FENCE majority in a node that will not grant a token at or
    /// below T.
    ///
    /// Each round returns as soon as its quorum said yes (see the module's
    /// comment for why that is safe); the grant round's late calls keep
    /// running (while the fencing round runs, in the same set of calls in
    /// flight), and go on in the background after a success. On a failure
    /// every call of both rounds is waited for (bounded by the per-node
    /// timeouts) before the undo: exact counts, the grants known node by
    /// node, and the undo queued after every grant call ended.
    async fn grant(&self, kind: Kind<'_>, token: &str, ttl: Duration, fence: bool) -> Result<Granted> {
        let phase = match kind {
            Kind::Lock(_) => Phase::Acquire,
            Kind::Reentrant(_) => Phase::Enter,
        };
        let start = Instant::now();
        let nodes = self.inner.nodes.len();
        let timeout = self.inner.config.command_timeout;
        let request = kind.grant(token, ttl);
        let mut flight: FuturesUnordered<_> = self
            .calls_to(GRANT, request, timeout.min(ttl), quorum::classify_grant, self.every_node())
            .into_iter()
            .collect();
        let mut rounds = [Progress::with_quorum(nodes, kind.quorum()), Progress::new(nodes)];
        drive(&mut flight, &mut rounds, |r| r[GRANT].decided().is_some()).await;

        // T: the highest token of the grants received so far (a quorum).
        let floor = match (rounds[GRANT].decided(), rounds[GRANT].fence_floor()) {
            (Some(true), Some(floor)) => floor,
            _ => {
                drive(&mut flight, &mut rounds, |_| false).await;
                let tally = rounds[GRANT].tally();
                let resource = kind.label();
                let error = match quorum::verdict(&tally) {
                    Verdict::Contended => Error::Contended { resource, tally },
                    // A quorum cannot have no highest token; if it ever did,
                    // it fails like any other round short of a majority.
                    Verdict::Quorum | Verdict::NoQuorum => Error::NoQuorum { resource, phase, tally },
                };
                self.undo(kind, token, rounds[GRANT].answers()).await;
                return Err(error);
            }
        };
        let Some(left) = quorum::validity(ttl, start.elapsed()) else {
            let error = expired(&kind.label(), ttl, start.elapsed());
            drive(&mut flight, &mut rounds, |_| false).await;
            self.undo(kind, token, rounds[GRANT].answers()).await;
            return Err(error);
        };
        if fence {
            // In the same set of calls as the grant round's late ones: a
            // failure below waits for them too, before the undo.
            let (fencing, targets) = Progress::fencing(rounds[GRANT].answers(), floor);
            rounds[FENCE] = fencing;
            let (request, classify) = kind.fence(token, floor);
            flight.extend(self.calls_to(FENCE, request, timeout.min(left), classify, targets));
            drive(&mut flight, &mut rounds, |r| r[FENCE].decided().is_some()).await;
            let fenced = rounds[FENCE].decided() == Some(true);
            let elapsed = start.elapsed();
            if !fenced || quorum::validity(ttl, elapsed).is_none() {
                drive(&mut flight, &mut rounds, |_| false).await;
                let error = if fenced {
                    expired(&kind.label(), ttl, elapsed)
                } else {
                    let tally = rounds[FENCE].tally();
                    Error::NoQuorum { resource: kind.label(), phase: Phase::Fence, tally }
                };
                self.undo(kind, token, rounds[GRANT].answers()).await;
                return Err(error);
            }
        }
        self.detach(flight);
        let [grants, _] = rounds;
        Ok(Granted { floor, lease: Lease::new(start, ttl), grants: grants.into_answers() })
    }

    /// The fencing round of a lock (or set) granted earlier: `LOCK.FENCE
    /// key token floor` (on each key of a set, one pipeline per node; a
    /// node counts only if every key answered 1) on every node that needs
    /// it (see [`Progress::fencing`]), returning at the first majority of
    /// yes; each call is bounded by the time left until `deadline` too.
    /// `Err(NoQuorum)` (phase `Fence`, after every answer) when no
    /// majority answered yes. The caller checks that the round ended
    /// within the validity.
    pub(crate) async fn fence(
        &self,
        claim: &Claim,
        token: &str,
        floor: u64,
        grants: &[Option<Answer>],
        deadline: Instant,
    ) -> Result<()> {
        let (round, targets) = Progress::fencing(grants, floor);
        let left = quorum::remaining(deadline, Instant::now());
        let timeout = self.inner.config.command_timeout.min(left);
        let round = self.quorum_round(claim.fence(token, floor), round, targets, timeout).await;
        if round.decided() == Some(true) {
            return Ok(());
        }
        let tally = round.tally();
        Err(Error::NoQuorum { resource: claim.label().to_string(), phase: Phase::Fence, tally })
    }

    /// Takes back a failed grant round (`answers`: the grant round's, all
    /// in).
    async fn undo(&self, kind: Kind<'_>, token: &str, answers: &[Option<Answer>]) {
        match kind {
            // Release on all N, also where the grant's outcome is unknown: a
            // release by a token that does not hold the lock changes nothing
            // (for a set: MRELEASE, which frees whatever of the set the
            // token holds there).
            Kind::Lock(claim) => {
                self.release_all(claim, token).await;
            }
            Kind::Reentrant(resource) => {
                let request = command("LOCK.EXIT", resource, token, &[]).into();
                let timeout = self.inner.config.command_timeout;
                let exits: Vec<_> = self
                    .inner
                    .nodes
                    .iter()
                    .zip(answers)
                    .filter(|(_, answer)| matches!(answer, Some(Answer::Yes(_))))
                    .map(|(node, _)| node.call(&request, timeout))
                    .collect();
                join_all(exits).await;
            }
        }
    }

    /// The release round on every node, waiting for every answer.
    async fn release_all(&self, claim: &Claim, token: &str) -> Tally {
        let (request, classify) = claim.release(token);
        let answers = self.round(&request, self.inner.config.command_timeout, classify).await;
        Tally::of(&answers)
    }

    /// Sends `request` to every node at once and waits for every answer;
    /// each node's call has its own timeout. Answers are in node order.
    async fn round(&self, request: &Request, timeout: Duration, classify: Classify) -> Vec<Answer> {
        let calls: Vec<_> = self.inner.nodes.iter().map(|node| node.call(request, timeout)).collect();
        join_all(calls).await.iter().map(classify).collect()
    }
}

/// The set a by-token release or extension names: the modes do not change
/// its commands, and a set of two or more needs a majority.
fn by_token<R: AsRef<str>>(resources: &[R]) -> Result<Claim> {
    let keys: Vec<(&str, Mode)> = resources.iter().map(|r| (r.as_ref(), Mode::Exclusive)).collect();
    Claim::set(&keys)
}

fn released(resource: &str, tally: Tally) -> Result<Tally> {
    if tally.has_quorum() {
        Ok(tally)
    } else {
        Err(Error::NoQuorum { resource: resource.to_string(), phase: Phase::Release, tally })
    }
}

fn expired(resource: &str, ttl: Duration, elapsed: Duration) -> Error {
    Error::ExpiredBeforeUse { resource: resource.to_string(), ttl, elapsed, drift: quorum::drift(ttl) }
}

/// Whole milliseconds (the nodes' unit), and long enough to outlast the
/// drift allowance.
pub(crate) fn check_ttl(ttl: Duration) -> Result<Duration> {
    let whole = Duration::from_millis(millis(ttl));
    if quorum::validity(whole, Duration::ZERO).is_none() {
        return Err(Error::InvalidArgument(format!(
            "ttl {} ms is not above the clock-drift allowance ({} ms)",
            whole.as_millis(),
            quorum::drift(whole).as_millis()
        )));
    }
    Ok(whole)
}

fn describe_raw(raw: &Raw) -> String {
    match raw {
        Raw::ServerError { code, detail } => format!("{code} {detail}"),
        Raw::TimedOut => "timed out".into(),
        Raw::Unreachable(why) => format!("unreachable: {why}"),
        Raw::Int(n) => format!("unexpected reply {n}"),
        Raw::Nil => "unexpected nil".into(),
        Raw::Other(what) => format!("unexpected reply {what}"),
        Raw::Array(items) => format!("unexpected array of {} replies", items.len()),
    }
}

fn parse_info(value: Value) -> std::result::Result<Option<LockInfo>, String> {
    let items = match value {
        Value::Nil => return Ok(None),
        Value::Array(items) => items,
        other => return Err(format!("unexpected LOCK.INFO reply {other:?}")),
    };
    let mut info = LockInfo::default();
    for_each_field(&items, "reply", |name, value| {
        match name {
            "kind" => info.kind = text(value)?,
            "holder" => info.holder = text(value)?,
            "holds" => info.holds = int(value)?,
            "fence" => info.fence = int(value)?,
            "ttl-ms" => info.ttl_ms = int(value)?,
            "deadline-ms" => info.deadline_ms = int(value)?,
            "waiters" => info.waiters = int(value)?,
            "permits" => info.permits = Some(int(value)?),
            "holders" => info.holders = parse_holders(value)?,
            "refused" => info.refused.get_or_insert_with(Refused::default).code = text(value)?,
            "refused-ms" => info.refused.get_or_insert_with(Refused::default).ms = int(value)?,
            "reason" => info.refused.get_or_insert_with(Refused::default).reason = text(value)?,
            _ => {}
        }
        Ok(())
    })?;
    Ok(Some(info))
}

/// The `holders` field of a shared lock's or semaphore's `LOCK.INFO`: an
/// array of field/value arrays.
fn parse_holders(value: &Value) -> std::result::Result<Vec<HolderInfo>, String> {
    let Value::Array(entries) = value else {
        return Err(format!("unexpected LOCK.INFO holders {value:?}"));
    };
    let mut holders = Vec::with_capacity(entries.len());
    for entry in entries {
        let Value::Array(items) = entry else {
            return Err(format!("unexpected LOCK.INFO holder {entry:?}"));
        };
        let mut holder = HolderInfo::default();
        for_each_field(items, "holder", |name, value| {
            match name {
                "holder" => holder.holder = text(value)?,
                "mode" => holder.mode = text(value)?,
                "fence" => holder.fence = int(value)?,
                "ttl-ms" => holder.ttl_ms = int(value)?,
                "deadline-ms" => holder.deadline_ms = int(value)?,
                _ => {}
            }
            Ok(())
        })?;
        holders.push(holder);
    }
    Ok(holders)
}

/// Calls `each` with every (field name, value) of a flat field/value array;
/// unknown fields are the caller's to skip (newer modules may add some).
fn for_each_field(
    items: &[Value],
    what: &str,
    mut each: impl FnMut(&str, &Value) -> std::result::Result<(), String>,
) -> std::result::Result<(), String> {
    for pair in items.chunks(2) {
        let [name, value] = pair else { return Err(format!("LOCK.INFO {what} has an odd length")) };
        let name: String = redis::from_redis_value(name).map_err(|e| e.to_string())?;
        each(&name, value)?;
    }
    Ok(())
}

fn text(value: &Value) -> std::result::Result<String, String> {
    redis::from_redis_value(value).map_err(|e| e.to_string())
}

fn int(value: &Value) -> std::result::Result<i64, String> {
    redis::from_redis_value(value).map_err(|e| e.to_string())
}
