//! One lock node: its address, and the one connection every call to it
//! shares.
//!
//! Why one connection per node, written in the order the calls were made:
//! a `LOCK.RELEASE` issued after a `LOCK.ACQUIRE` (even one whose reply
//! timed out, or whose round returned at its majority without waiting for
//! it) must reach the node after it; otherwise the late ACQUIRE grants
//! after the RELEASE and leaves the lock behind until its TTL.
//!
//! How that order is kept, by construction: a call ([`Node::call_into`], a
//! round's, or [`Node::send`]) puts the request into the node's queue when
//! it is made, before it returns (a round's call has no future of its own:
//! its reply goes to its round's inbox, see `inbox.rs`; a call alone returns
//! its wait, which is queued even if it is never polled, or polled later by
//! another task); one task per node takes the queue in order and is the
//! only writer of the connection; one reader per connection hands the
//! replies, in order, to the calls waiting for them.
//! (An earlier version wrote through the `redis` crate's multiplexed
//! connection: a call enqueued there when its future was first polled, and
//! waited for room in that connection's 50-entry channel. A round that
//! returned at its majority left a call that was still waiting for room to
//! a background task; the caller's next command could be polled first and
//! overtake it. Seen as a lock left behind in CI under load.)
//!
//! A call whose caller has given up (it timed out, or its future or its
//! round was dropped: see `inbox.rs`) before the writer reached it is not
//! written at all; a written call runs on the node even if nobody waits for
//! its reply. Either way nothing issued later can overtake it.
//!
//! Every wait is bounded: a call waits at most its timeout (plus the
//! connect timeout when no connection is open as it is issued); opening a
//! connection (TCP and the AUTH / SELECT handshake) by the connect timeout;
//! a write by the latest deadline of the calls in it. Nothing is retried: a
//! failed call is reported as such, and a broken connection is dropped and
//! reopened by the next call (not within `reconnect_backoff` of a failed
//! connect). The queue and the calls in flight are bounded too
//! ([`QUEUED_MAX`], [`link::IN_FLIGHT_MAX`]): beyond them a call fails at once.

mod address;
mod inbox;
mod link;
#[cfg(test)]
pub(crate) mod recorder;

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use redis::{Cmd, ConnectionInfo, Pipeline, Value};
use tokio::sync::{mpsc, oneshot};
use tokio::time::{timeout_at, Instant};

use crate::quorum::Raw;
use crate::resp::Reply;
use crate::tls::{TlsClient, TlsTarget};
use address::parse_url;
use inbox::ReplyTo;
pub(crate) use inbox::{Inbox, Replies};
pub(crate) use link::OnReply;
use link::{fail, Job, Link};

/// Calls queued for one node and not yet written; more fail at once.
pub(crate) const QUEUED_MAX: usize = 100_000;
/// The most calls the writer puts into one write.
const BATCH_MAX: usize = 256;

/// Timeouts every call to a node obeys.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Limits {
    pub connect_timeout: Duration,
    /// After a failed connect, calls within this time fail at once instead
    /// of trying again (so a dead host does not cost a connect timeout on
    /// every round).
    pub reconnect_backoff: Duration,
}

pub(crate) struct Node {
    limits: Limits,
    /// The node's queue; its writer task ends when the node is dropped.
    queue: mpsc::UnboundedSender<Job>,
    state: Arc<State>,
}

/// What the callers and the writer task share.
#[derive(Default)]
struct State {
    /// Calls in the queue (bounded by [`QUEUED_MAX`]).
    queued: AtomicUsize,
    /// Whether a connection is open (a call issued while none is waits for
    /// the connect too).
    connected: AtomicBool,
}

impl Node {
    /// Parses `url` (`redis[s]://[[user]:password@]host:port[/db]`) and
    /// starts the node's writer task (so: inside a Tokio runtime). Connects
    /// on the first call; a `rediss://` node over TLS as `tls` says.
    pub fn new(url: &str, limits: Limits, tls: Option<&TlsClient>) -> Result<Node, String> {
        let (info, over_tls) = parse_url(url)?;
        let target = match (over_tls, tls) {
            (false, _) => None,
            (true, Some(tls)) => match &info.addr {
                redis::ConnectionAddr::Tcp(host, _) => Some(tls.target(host)?),
                _ => return Err("not a TCP address".into()),
            },
            (true, None) => return Err("a rediss:// node needs the client's TLS settings".into()),
        };
        Node::with_info(info, target, limits)
    }

    /// A node at an address already parsed (a cluster's node), over TLS
    /// when `tls` says how.
    pub fn with_info(info: ConnectionInfo, tls: Option<TlsTarget>, limits: Limits) -> Result<Node, String> {
        let runtime = tokio::runtime::Handle::try_current()
            .map_err(|_| "a node must be created inside a Tokio runtime".to_string())?;
        let (queue, jobs) = mpsc::unbounded_channel();
        let state = Arc::new(State::default());
        runtime.spawn(write_in_order(info, tls, limits, jobs, state.clone()));
        Ok(Node { limits, queue, state })
    }

    /// Whether a connection is open now (a call then waits for no connect).
    pub fn connected(&self) -> bool {
        self.state.connected.load(Ordering::Acquire)
    }

    /// Opens the connection now (used by `Redlock::connect`); a failure is
    /// remembered and reported by the next calls.
    pub fn warm_up(&self) -> impl Future<Output = ()> + Send + 'static {
        let opened = self.issue(Arc::from([]), 0, self.deadline(Duration::ZERO), None);
        async move {
            let _ = opened.await;
        }
    }

    /// Queues `request` now, and returns the wait for its reply (a
    /// pipeline's: all its replies, as one [`Raw::Array`]), at most
    /// `command_timeout`. (The rounds use [`Node::call_into`]; this is the
    /// same call, waited for alone.)
    #[cfg(test)]
    pub fn call(
        &self,
        request: &Request,
        command_timeout: Duration,
    ) -> impl Future<Output = Raw> + Send + 'static {
        let deadline = self.deadline(command_timeout);
        let replies = self.send(request, deadline, false, None);
        let pipelined = request.is_pipeline();
        async move { as_raw(replies.await, pipelined) }
    }

    /// Queues `request` now, preceded by `ASKING` in the same write when
    /// `asking` (a cluster's `ASK` redirect), and returns the wait for its
    /// replies until `deadline` (`ASKING`'s taken off: refused, it is the
    /// call's answer). `on_reply` sees the replies as they arrive.
    pub fn send(
        &self,
        request: &Request,
        deadline: Instant,
        asking: bool,
        on_reply: Option<OnReply>,
    ) -> impl Future<Output = Replies> + Send + 'static {
        let (mut bytes, mut replies) = (request.packed.clone(), request.replies);
        if asking {
            let mut asked = redis::cmd("ASKING").get_packed_command();
            asked.extend_from_slice(&bytes);
            (bytes, replies) = (asked.into(), replies + 1);
        }
        let reply = self.issue(bytes, replies, deadline, on_reply);
        async move {
            let mut replies = reply.await?;
            if asking && !replies.is_empty() {
                match replies.remove(0) {
                    Reply::Status(ok) if ok == "OK" => {}
                    Reply::Error { code, detail } => {
                        return Err(Raw::ServerError { code, detail: format!("{detail} (to ASKING)") })
                    }
                    other => return Err(Raw::Other(format!("ASKING answered {other:?}"))),
                }
            }
            Ok(replies)
        }
    }

    /// When a call issued now with `command_timeout` stops waiting: plus
    /// the connect timeout while no connection is open.
    pub fn deadline(&self, command_timeout: Duration) -> Instant {
        let mut wait = command_timeout;
        if !self.connected() {
            wait = wait.saturating_add(self.limits.connect_timeout);
        }
        Instant::now() + wait
    }

    /// One command, queued now, keeping a successful reply as a [`Value`];
    /// error replies, timeouts and connection failures come back as `Err`.
    pub fn query(
        &self,
        cmd: &Cmd,
        command_timeout: Duration,
    ) -> impl Future<Output = Result<Value, Raw>> + Send + 'static {
        let reply = self.issue(cmd.get_packed_command().into(), 1, self.deadline(command_timeout), None);
        async move { as_value(reply.await) }
    }

    /// Queues `request` now as call `slot` of the round that reads `inbox`,
    /// where its replies go (see `inbox.rs`); returns the call's deadline,
    /// `command_timeout` from now (plus the connect timeout while no
    /// connection is open), after which the round gives it up.
    pub fn call_into(
        &self,
        request: &Request,
        command_timeout: Duration,
        inbox: &Arc<Inbox>,
        slot: usize,
    ) -> Instant {
        let deadline = self.deadline(command_timeout);
        let job = Job {
            bytes: request.packed.clone(),
            replies: request.replies,
            deadline,
            done: inbox.slot(slot),
            on_reply: None,
        };
        self.enqueue(job);
        deadline
    }

    /// Puts one job into the queue, or answers it at once with why not.
    fn enqueue(&self, job: Job) {
        let refused = if self.state.queued.fetch_add(1, Ordering::AcqRel) >= QUEUED_MAX {
            self.state.queued.fetch_sub(1, Ordering::AcqRel);
            Some((job, format!("{QUEUED_MAX} calls are already queued for this node")))
        } else if let Err(unsent) = self.queue.send(job) {
            self.state.queued.fetch_sub(1, Ordering::AcqRel);
            Some((unsent.0, "the node's connection task has ended".to_string()))
        } else {
            None
        };
        if let Some((job, why)) = refused {
            job.done.send(Err(Raw::Unreachable(why)));
        }
    }

    /// Puts one job into the queue (or refuses it at once), and returns the
    /// bounded wait for its answer.
    fn issue(
        &self,
        bytes: Arc<[u8]>,
        replies: usize,
        deadline: Instant,
        on_reply: Option<OnReply>,
    ) -> impl Future<Output = Replies> + Send + 'static {
        let (done, answer) = oneshot::channel();
        self.enqueue(Job { bytes, replies, deadline, done: ReplyTo::Caller(done), on_reply });
        async move {
            match timeout_at(deadline, answer).await {
                Err(_) => Err(Raw::TimedOut),
                Ok(Ok(replies)) => replies,
                // Dropped unanswered: the writer task ended.
                Ok(Err(_)) => Err(Raw::Unreachable("the node's connection task has ended".into())),
            }
        }
    }
}

/// The node's writer task: takes the queue in order, opens the connection
/// when there is none, writes each call (several at once when they are
/// queued together). Ends when the node is dropped.
async fn write_in_order(
    info: ConnectionInfo,
    tls: Option<TlsTarget>,
    limits: Limits,
    mut jobs: mpsc::UnboundedReceiver<Job>,
    state: Arc<State>,
) {
    let mut link: Option<Link> = None;
    let mut last_failure: Option<(Instant, Raw)> = None;
    let mut batch = Vec::new();
    while let Some(job) = jobs.recv().await {
        batch.push(job);
        while batch.len() < BATCH_MAX {
            match jobs.try_recv() {
                Ok(job) => batch.push(job),
                Err(_) => break,
            }
        }
        state.queued.fetch_sub(batch.len(), Ordering::AcqRel);
        // Nobody waits for these any more: not written (see the module's
        // comment: skipping a call never reorders the others).
        batch.retain(|job| !job.done.is_closed());
        if batch.is_empty() {
            continue;
        }
        if link.as_ref().is_some_and(Link::is_closed) {
            link = None;
            state.connected.store(false, Ordering::Release);
        }
        let open = match link.as_mut() {
            Some(open) => open,
            None => match connect(&info, tls.as_ref(), limits, &mut last_failure).await {
                Ok(opened) => {
                    state.connected.store(true, Ordering::Release);
                    link.insert(opened)
                }
                Err(refused) => {
                    fail(batch.drain(..), &refused);
                    continue;
                }
            },
        };
        if open.send(&mut batch).await.is_err() {
            link = None;
            state.connected.store(false, Ordering::Release);
        }
    }
}

/// A new connection, unless the last connect failed within the backoff.
/// A node that cannot be reached is [`Raw::Unreachable`]; one that refuses
/// the handshake (a wrong password, a database it does not have) answers
/// that refusal to every call, as the error reply it is.
async fn connect(
    info: &ConnectionInfo,
    tls: Option<&TlsTarget>,
    limits: Limits,
    last_failure: &mut Option<(Instant, Raw)>,
) -> Result<Link, Raw> {
    if let Some((at, failure)) = last_failure {
        if at.elapsed() < limits.reconnect_backoff {
            return Err(match failure {
                Raw::Unreachable(why) => {
                    Raw::Unreachable(format!("{why} ({} ms ago)", at.elapsed().as_millis()))
                }
                refused => refused.clone(),
            });
        }
    }
    let deadline = Instant::now() + limits.connect_timeout;
    let failure = match timeout_at(deadline, Link::open(info, tls, deadline)).await {
        Ok(Ok(link)) => {
            *last_failure = None;
            return Ok(link);
        }
        Ok(Err(failure)) => failure,
        Err(_) => {
            Raw::Unreachable(format!("connect timed out after {} ms", limits.connect_timeout.as_millis()))
        }
    };
    *last_failure = Some((Instant::now(), failure.clone()));
    Err(failure)
}

/// What one call sends: one command, or several written at once (a
/// pipeline: the fencing round's `LOCK.FENCE` on each key of a set), and
/// the key that routes it in a cluster (every key of a request shares
/// its slot there: see `member/`).
///
/// Packed once, when made: a round sends the same bytes to every node
/// (shared, not copied), where packing them per node cost about a tenth
/// of the client's instructions per cycle (measured).
#[derive(Clone)]
pub(crate) struct Request {
    key: String,
    packed: Arc<[u8]>,
    /// How many replies `packed` asks for.
    replies: usize,
    pipelined: bool,
    /// The commands, for tests.
    #[cfg(test)]
    cmds: Vec<Cmd>,
}

impl Request {
    /// One command, routed by `key`.
    pub fn one(cmd: Cmd, key: &str) -> Request {
        Request {
            key: key.to_string(),
            packed: cmd.get_packed_command().into(),
            replies: 1,
            pipelined: false,
            #[cfg(test)]
            cmds: vec![cmd],
        }
    }

    /// The commands, in one pipeline, routed by `key`.
    pub fn each(cmds: impl IntoIterator<Item = Cmd>, key: &str) -> Request {
        let mut pipeline = Pipeline::new();
        let mut commands = 0;
        for cmd in cmds {
            pipeline.add_command(cmd);
            commands += 1;
        }
        Request {
            key: key.to_string(),
            packed: pipeline.get_packed_pipeline().into(),
            replies: commands,
            pipelined: true,
            #[cfg(test)]
            cmds: pipeline.cmd_iter().cloned().collect(),
        }
    }

    pub fn is_pipeline(&self) -> bool {
        self.pipelined
    }

    /// The key whose slot a cluster member sends it to.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The commands, for tests.
    #[cfg(test)]
    pub fn commands(&self) -> Vec<&Cmd> {
        self.cmds.iter().collect()
    }
}

/// A request's replies as the quorum code reads them: one reply, or a
/// pipeline's replies as one [`Raw::Array`].
pub(crate) fn as_raw(replies: Replies, pipelined: bool) -> Raw {
    match replies {
        Ok(replies) if pipelined => Raw::Array(replies.into_iter().map(raw).collect()),
        Ok(replies) => replies.into_iter().next().map_or(Raw::Nil, raw),
        Err(raw) => raw,
    }
}

/// A one-command request's reply kept as a [`Value`]; error replies,
/// timeouts and connection failures as `Err`.
pub(crate) fn as_value(replies: Replies) -> Result<Value, Raw> {
    value(replies?.into_iter().next().unwrap_or(Reply::Nil))
}

/// A reply as the quorum code reads it.
fn raw(reply: Reply) -> Raw {
    match reply {
        Reply::Int(n) => Raw::Int(n),
        Reply::Nil => Raw::Nil,
        Reply::Array(items) => Raw::Array(items.into_iter().map(raw).collect()),
        Reply::Error { code, detail } => Raw::ServerError { code, detail },
        Reply::Bulk(bytes) => Raw::Other(format!("{:?}", String::from_utf8_lossy(&bytes))),
        Reply::Status(text) => Raw::Other(text),
    }
}

/// A reply as a [`Value`] (for `LOCK.INFO`); an error reply, even inside
/// an array, as a [`Raw::ServerError`].
fn value(reply: Reply) -> Result<Value, Raw> {
    Ok(match reply {
        Reply::Int(n) => Value::Int(n),
        Reply::Nil => Value::Nil,
        Reply::Array(items) => Value::Array(items.into_iter().map(value).collect::<Result<_, _>>()?),
        Reply::Error { code, detail } => return Err(Raw::ServerError { code, detail }),
        Reply::Bulk(bytes) => Value::BulkString(bytes),
        Reply::Status(text) => Value::SimpleString(text),
    })
}
#[cfg(test)]
mod tests {
    use tokio::net::TcpListener;

    use super::link::lock;
    use super::recorder::recorder;
    use super::*;

    const LONG: Duration = Duration::from_secs(5);

    fn limits() -> Limits {
        Limits { connect_timeout: LONG, reconnect_backoff: Duration::from_millis(10) }
    }

    fn request(name: &str) -> Request {
        Request::one(redis::cmd(name), "k")
    }

    /// The property the release relies on: a call is queued when it is
    /// made, so a call made earlier is written earlier even when its future
    /// is polled later (or by another task) than a later call's.
    #[tokio::test]
    async fn calls_are_written_in_the_order_they_are_made_even_if_polled_later() {
        let (url, seen) = recorder().await;
        let node = Node::new(&url, limits(), None).unwrap();
        let acquire = node.call(&request("ACQUIRE"), LONG);
        let release = node.call(&request("RELEASE"), LONG);
        assert_eq!(release.await, Raw::Int(2), "the release is the second command the node read");
        assert_eq!(tokio::spawn(acquire).await.unwrap(), Raw::Int(1));
        assert_eq!(*lock(&seen), ["ACQUIRE", "RELEASE"]);
    }

    /// A pipeline's replies come back together, in order; an error reply
    /// is an error, in a pipeline or alone.
    #[tokio::test]
    async fn pipelines_and_error_replies() {
        let (url, _) = recorder().await;
        let node = Node::new(&url, limits(), None).unwrap();
        let fences = Request::each([redis::cmd("FENCE"), redis::cmd("FAIL"), redis::cmd("FENCE")], "k");
        let error = || Raw::ServerError { code: "WRONGTYPE".into(), detail: "not a lock".into() };
        assert_eq!(node.call(&fences, LONG).await, Raw::Array(vec![Raw::Int(1), error(), Raw::Int(3)]));
        assert_eq!(node.call(&request("FAIL"), LONG).await, error());
        assert_eq!(node.query(&redis::cmd("FAIL"), LONG).await, Err(error()));
        assert_eq!(node.query(&redis::cmd("INFO"), LONG).await, Ok(Value::Int(6)));
    }

    /// When the node drops the connection, every call waiting on it fails
    /// as unreachable (it may have run), and the next call opens a new one.
    #[tokio::test]
    async fn a_dropped_connection_fails_its_calls_and_the_next_call_reconnects() {
        let (url, seen) = recorder().await;
        let node = Node::new(&url, limits(), None).unwrap();
        let closing = node.call(&request("CLOSE"), LONG);
        assert!(matches!(closing.await, Raw::Unreachable(why) if why.contains("closed")));
        // The writer notices the closed connection at the next call.
        assert_eq!(node.call(&request("AGAIN"), LONG).await, Raw::Int(2));
        assert_eq!(*lock(&seen), ["CLOSE", "AGAIN"]);
    }

    /// A call whose future was dropped before the writer reached it is not
    /// written; the calls around it are, in order.
    #[tokio::test(flavor = "current_thread")]
    async fn a_call_given_up_before_it_was_written_is_not_written() {
        let (url, seen) = recorder().await;
        let node = Node::new(&url, limits(), None).unwrap();
        node.warm_up().await;
        // On one thread the writer cannot run between these three calls.
        let first = node.call(&request("FIRST"), LONG);
        drop(node.call(&request("DROPPED"), LONG));
        let last = node.call(&request("LAST"), LONG);
        assert_eq!((first.await, last.await), (Raw::Int(1), Raw::Int(2)));
        assert_eq!(*lock(&seen), ["FIRST", "LAST"]);
    }

    /// A node that does not listen: unreachable, with the reason, and no
    /// second connect within the backoff.
    #[tokio::test]
    async fn an_unreachable_node_says_why() {
        let port = TcpListener::bind("127.0.0.1:0").await.unwrap().local_addr().unwrap().port();
        let limits = Limits { reconnect_backoff: LONG, ..limits() };
        let node = Node::new(&format!("redis://127.0.0.1:{port}/"), limits, None).unwrap();
        assert!(
            matches!(node.call(&request("PING"), LONG).await, Raw::Unreachable(why) if why.starts_with("connect failed: "))
        );
        assert!(
            matches!(node.call(&request("PING"), LONG).await, Raw::Unreachable(why) if why.ends_with(" ms ago)"))
        );
    }
}
