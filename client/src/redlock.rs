//! The Redlock protocol over N lock nodes: parallel rounds, majority,
//! validity, the fencing round, release on all nodes.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use redis::{Cmd, Value};

use crate::error::{Error, Phase, Result};
use crate::guard::Guard;
use crate::node::{Limits, Node};
use crate::quorum::{self, Answer, Raw, Tally, Verdict};

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

/// How [`Redlock::acquire`] retries: at most `attempts_max` attempts, a
/// random delay in `delay_min..=delay_max` between two, and no new attempt
/// after `total_max` (when set).
#[derive(Clone, Copy, Debug)]
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
    /// A fixed number of attempts with the default delays.
    pub fn attempts(attempts_max: u32) -> RetryPolicy {
        RetryPolicy { attempts_max: attempts_max.max(1), ..RetryPolicy::default() }
    }

    /// Keep trying for `total` (the last attempt starts at `total` at the
    /// latest); the attempt count is bounded by `total / delay_min + 2`.
    pub fn within(total: Duration) -> RetryPolicy {
        let policy = RetryPolicy::default();
        let attempts = total.as_millis() / policy.delay_min.as_millis().max(1) + 2;
        RetryPolicy {
            attempts_max: u32::try_from(attempts).unwrap_or(u32::MAX),
            total_max: Some(total),
            ..policy
        }
    }

    pub fn with_delays(mut self, min: Duration, max: Duration) -> RetryPolicy {
        self.delay_min = min;
        self.delay_max = max.max(min);
        if let Some(total) = self.total_max {
            let attempts = total.as_millis() / min.as_millis().max(1) + 2;
            self.attempts_max = u32::try_from(attempts).unwrap_or(u32::MAX);
        }
        self
    }
}

/// The validity of one grant or extension.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lease {
    /// When the round that obtained it started (before any node saw it).
    pub start: Instant,
    pub ttl: Duration,
    /// `start + ttl - drift`: after this the lock may be someone else's.
    pub deadline: Instant,
}

impl Lease {
    fn new(start: Instant, ttl: Duration) -> Lease {
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
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LockInfo {
    pub kind: String,
    pub holder: String,
    pub holds: i64,
    pub fence: i64,
    pub ttl_ms: i64,
    pub deadline_ms: i64,
    pub waiters: i64,
}

/// `LOCK.INFO` on one node: `Ok(None)` when no lock is held there.
#[derive(Clone, Debug)]
pub struct NodeInfo {
    pub node: String,
    pub info: std::result::Result<Option<LockInfo>, String>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Plain,
    Reentrant,
}

pub(crate) struct Inner {
    nodes: Vec<Node>,
    config: Config,
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
        let mut parsed: Vec<Node> = Vec::new();
        for url in nodes {
            let url = url.as_ref().trim();
            if parsed.iter().any(|n| n.url == url) {
                return Err(Error::InvalidArgument(format!("node {url} is listed twice")));
            }
            let node = Node::new(url).map_err(|e| Error::InvalidArgument(format!("node {url:?}: {e}")))?;
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
        let redlock = Redlock { inner: Arc::new(Inner { nodes: parsed, config }) };
        let limits = redlock.limits();
        join_all(redlock.inner.nodes.iter().map(|n| n.warm_up(limits))).await;
        Ok(redlock)
    }

    pub fn node_urls(&self) -> Vec<String> {
        self.inner.nodes.iter().map(|n| n.url.clone()).collect()
    }

    /// How many nodes must agree: `N / 2 + 1`.
    pub fn majority(&self) -> usize {
        quorum::majority(self.inner.nodes.len())
    }

    pub fn config(&self) -> Config {
        self.inner.config
    }

    fn limits(&self) -> Limits {
        Limits {
            connect_timeout: self.inner.config.connect_timeout,
            reconnect_backoff: self.inner.config.reconnect_backoff,
        }
    }

    /// One attempt: `LOCK.ACQUIRE` on every node in parallel, then the
    /// fencing round. On any failure the partial grants are released on
    /// every node before this returns.
    pub async fn try_acquire(&self, resource: &str, ttl: Duration) -> Result<Guard> {
        let ttl = check_ttl(ttl)?;
        check_name("resource", resource)?;
        let token = quorum::token_from_bits(rand::random());
        let (fencing_token, lease) = self.grant(Kind::Plain, resource, &token, ttl).await?;
        Ok(Guard::new(self.clone(), resource.to_string(), token, fencing_token, lease))
    }

    /// [`Redlock::try_acquire`], retried after a random delay while the
    /// failure is retryable (held, no quorum, too slow), within `policy`.
    /// Returns the last attempt's error.
    pub async fn acquire(&self, resource: &str, ttl: Duration, policy: &RetryPolicy) -> Result<Guard> {
        let started = Instant::now();
        let mut attempt = 0u32;
        loop {
            attempt += 1;
            let error = match self.try_acquire(resource, ttl).await {
                Ok(guard) => return Ok(guard),
                Err(e) => e,
            };
            if !error.is_retryable() || attempt >= policy.attempts_max {
                return Err(error);
            }
            let mut delay = quorum::retry_delay(policy.delay_min, policy.delay_max, rand::random::<f64>());
            if let Some(total) = policy.total_max {
                let left = total.saturating_sub(started.elapsed());
                if left.is_zero() {
                    return Err(error);
                }
                delay = delay.min(left);
            }
            tokio::time::sleep(delay).await;
        }
    }

    /// `LOCK.RELEASE` on every node. `Ok` with the counts when a majority
    /// released; `Err(NoQuorum)` otherwise (the lock had expired or been
    /// taken on too many nodes, or they did not answer).
    pub async fn release(&self, resource: &str, token: &str) -> Result<Tally> {
        check_name("token", token)?;
        let tally = self.release_all(resource, token).await;
        if tally.has_quorum() {
            Ok(tally)
        } else {
            Err(Error::NoQuorum { resource: resource.to_string(), phase: Phase::Release, tally })
        }
    }

    /// `LOCK.EXTEND` on every node: held again for `ttl` when a majority
    /// answered 1 within the new validity.
    pub async fn extend(&self, resource: &str, token: &str, ttl: Duration) -> Result<Lease> {
        let ttl = check_ttl(ttl)?;
        check_name("token", token)?;
        let start = Instant::now();
        let cmd = command("LOCK.EXTEND", resource, token, Some(ttl));
        let answers =
            self.round(&cmd, self.inner.config.command_timeout.min(ttl), quorum::classify_flag).await;
        let tally = Tally::of(&answers);
        if !tally.has_quorum() {
            return Err(Error::NoQuorum { resource: resource.to_string(), phase: Phase::Extend, tally });
        }
        let elapsed = start.elapsed();
        if quorum::validity(ttl, elapsed).is_none() {
            return Err(expired(resource, ttl, elapsed));
        }
        Ok(Lease::new(start, ttl))
    }

    /// Reentrant acquire (`LOCK.ENTER` on every node, then the fencing
    /// round): the first entry by `owner` grants a new fencing token, later
    /// ones add a hold on each node and return the same token. On failure,
    /// the hold just added is taken back (`LOCK.EXIT`) on the nodes that
    /// granted it. A node that did not answer may keep that extra hold
    /// until its TTL: the outcome there is unknown, and an EXIT could take
    /// back an earlier hold instead.
    pub async fn enter(&self, resource: &str, owner: &str, ttl: Duration) -> Result<Entered> {
        let ttl = check_ttl(ttl)?;
        check_name("resource", resource)?;
        check_name("owner", owner)?;
        let (fencing_token, lease) = self.grant(Kind::Reentrant, resource, owner, ttl).await?;
        Ok(Entered { fencing_token, lease })
    }

    /// Reentrant release (`LOCK.EXIT` on every node): the holds left (the
    /// largest count among the nodes that answered; 0 = free everywhere
    /// that answered). `Err(NoQuorum)` unless a majority answered.
    pub async fn exit(&self, resource: &str, owner: &str) -> Result<u64> {
        check_name("owner", owner)?;
        let cmd = command("LOCK.EXIT", resource, owner, None);
        let answers = self.round(&cmd, self.inner.config.command_timeout, quorum::classify_exit).await;
        let tally = Tally::of(&answers);
        match quorum::holds_left(&answers) {
            Some(left) if tally.has_quorum() => Ok(left),
            _ => Err(Error::NoQuorum { resource: resource.to_string(), phase: Phase::Exit, tally }),
        }
    }

    /// `LOCK.INFO` on every node, in node order.
    pub async fn info(&self, resource: &str) -> Vec<NodeInfo> {
        let mut cmd = redis::cmd("LOCK.INFO");
        cmd.arg(resource);
        let limits = self.limits();
        let timeout = self.inner.config.command_timeout;
        let replies = join_all(self.inner.nodes.iter().map(|n| n.query(&cmd, limits, timeout))).await;
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

    /// The grant round and the fencing round; undoes partial grants on
    /// failure. Returns the quorum's fencing token and the lease.
    async fn grant(&self, kind: Kind, resource: &str, token: &str, ttl: Duration) -> Result<(u64, Lease)> {
        let (name, phase) = match kind {
            Kind::Plain => ("LOCK.ACQUIRE", Phase::Acquire),
            Kind::Reentrant => ("LOCK.ENTER", Phase::Enter),
        };
        let start = Instant::now();
        let cmd = command(name, resource, token, Some(ttl));
        // Every per-node future finishes (answer or its own timeout) before
        // join_all returns, so the undo below is queued after the acquire
        // on each node's ordered connection.
        let answers =
            self.round(&cmd, self.inner.config.command_timeout.min(ttl), quorum::classify_grant).await;
        let tally = Tally::of(&answers);
        let failure = match quorum::verdict(&tally) {
            Verdict::Quorum => None,
            Verdict::Contended => Some(Error::Contended { resource: resource.to_string(), tally }),
            Verdict::NoQuorum => Some(Error::NoQuorum { resource: resource.to_string(), phase, tally }),
        };
        if let Some(error) = failure {
            self.undo(kind, resource, token, &answers).await;
            return Err(error);
        }
        let floor = match quorum::fence_floor(&answers) {
            Some(floor) => floor,
            None => unreachable!("a quorum of grants has a highest token"),
        };
        let Some(left) = quorum::validity(ttl, start.elapsed()) else {
            let error = expired(resource, ttl, start.elapsed());
            self.undo(kind, resource, token, &answers).await;
            return Err(error);
        };
        // The fencing round: every node that holds our lock raises its
        // counter to the quorum's token, so the next holder's majority (which
        // shares a node with this one) is granted a higher token.
        let mut fence = redis::cmd("LOCK.FENCE");
        fence.arg(resource).arg(token).arg(floor);
        let fenced =
            self.round(&fence, self.inner.config.command_timeout.min(left), quorum::classify_flag).await;
        let fence_tally = Tally::of(&fenced);
        let elapsed = start.elapsed();
        let failure = if !fence_tally.has_quorum() {
            Some(Error::NoQuorum { resource: resource.to_string(), phase: Phase::Fence, tally: fence_tally })
        } else if quorum::validity(ttl, elapsed).is_none() {
            Some(expired(resource, ttl, elapsed))
        } else {
            None
        };
        if let Some(error) = failure {
            self.undo(kind, resource, token, &answers).await;
            return Err(error);
        }
        Ok((floor, Lease::new(start, ttl)))
    }

    /// Takes back a failed grant round.
    async fn undo(&self, kind: Kind, resource: &str, token: &str, answers: &[Answer]) {
        match kind {
            // Release on all N, also where the grant's outcome is unknown: a
            // RELEASE by a token that does not hold the lock changes nothing.
            Kind::Plain => {
                self.release_all(resource, token).await;
            }
            Kind::Reentrant => {
                let cmd = command("LOCK.EXIT", resource, token, None);
                let limits = self.limits();
                let timeout = self.inner.config.command_timeout;
                let exits = self
                    .inner
                    .nodes
                    .iter()
                    .zip(answers)
                    .filter(|(_, answer)| matches!(answer, Answer::Yes(_)))
                    .map(|(node, _)| node.call(&cmd, limits, timeout));
                join_all(exits).await;
            }
        }
    }

    pub(crate) async fn release_all(&self, resource: &str, token: &str) -> Tally {
        let cmd = command("LOCK.RELEASE", resource, token, None);
        let answers = self.round(&cmd, self.inner.config.command_timeout, quorum::classify_flag).await;
        Tally::of(&answers)
    }

    /// Sends `cmd` to every node at once; each node's call has its own
    /// timeout. Answers are in node order.
    async fn round(&self, cmd: &Cmd, timeout: Duration, classify: fn(&Raw) -> Answer) -> Vec<Answer> {
        let limits = self.limits();
        let calls = self
            .inner
            .nodes
            .iter()
            .map(|node| async move { classify(&node.call(cmd, limits, timeout).await) });
        join_all(calls).await
    }
}

fn command(name: &str, resource: &str, token: &str, ttl: Option<Duration>) -> Cmd {
    let mut cmd = redis::cmd(name);
    cmd.arg(resource).arg(token);
    if let Some(ttl) = ttl {
        cmd.arg(u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX));
    }
    cmd
}

fn expired(resource: &str, ttl: Duration, elapsed: Duration) -> Error {
    Error::ExpiredBeforeUse { resource: resource.to_string(), ttl, elapsed, drift: quorum::drift(ttl) }
}

/// Whole milliseconds (the nodes' unit), and long enough to outlast the
/// drift allowance.
fn check_ttl(ttl: Duration) -> Result<Duration> {
    let whole = Duration::from_millis(u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX));
    if quorum::validity(whole, Duration::ZERO).is_none() {
        return Err(Error::InvalidArgument(format!(
            "ttl {} ms is not above the clock-drift allowance ({} ms)",
            whole.as_millis(),
            quorum::drift(whole).as_millis()
        )));
    }
    Ok(whole)
}

fn check_name(what: &str, value: &str) -> Result<()> {
    if value.is_empty() || value.len() > quorum::TOKEN_BYTES_MAX {
        return Err(Error::InvalidArgument(format!(
            "{what} must be 1 to {} bytes, got {}",
            quorum::TOKEN_BYTES_MAX,
            value.len()
        )));
    }
    Ok(())
}

fn describe_raw(raw: &Raw) -> String {
    match raw {
        Raw::ServerError { code, detail } => format!("{code} {detail}"),
        Raw::TimedOut => "timed out".into(),
        Raw::Unreachable(why) => format!("unreachable: {why}"),
        Raw::Int(n) => format!("unexpected reply {n}"),
        Raw::Nil => "unexpected nil".into(),
        Raw::Other(what) => format!("unexpected reply {what}"),
    }
}

fn parse_info(value: Value) -> std::result::Result<Option<LockInfo>, String> {
    let items = match value {
        Value::Nil => return Ok(None),
        Value::Array(items) => items,
        other => return Err(format!("unexpected LOCK.INFO reply {other:?}")),
    };
    let mut info = LockInfo::default();
    for pair in items.chunks(2) {
        let [name, value] = pair else { return Err("LOCK.INFO reply has an odd length".into()) };
        let name: String = redis::from_redis_value(name).map_err(|e| e.to_string())?;
        let text = || redis::from_redis_value::<String>(value).map_err(|e| e.to_string());
        let int = || redis::from_redis_value::<i64>(value).map_err(|e| e.to_string());
        match name.as_str() {
            "kind" => info.kind = text()?,
            "holder" => info.holder = text()?,
            "holds" => info.holds = int()?,
            "fence" => info.fence = int()?,
            "ttl-ms" => info.ttl_ms = int()?,
            "deadline-ms" => info.deadline_ms = int()?,
            "waiters" => info.waiters = int()?,
            _ => {}
        }
    }
    Ok(Some(info))
}
