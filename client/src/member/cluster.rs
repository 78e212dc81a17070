//! One cluster member: its seeds, its slot map, one [`Node`] (one ordered
//! connection) per master it has talked to, and its ordering gate; how a
//! call is routed to the master of its key's slot and follows `MOVED`,
//! `ASK` and `TRYAGAIN` within its own deadline.
//!
//! Why our own routing, over the client's ordered connections, rather than
//! a cluster client: every one we could reuse (redis-rs' cluster-async,
//! redis-py's `RedisCluster`, Valkey GLIDE) re-sends a redirected command
//! on whatever connection and whenever its task runs again, with no order
//! between a redirected acquire and a later release of the same lock: the
//! lock left behind that `node/mod.rs` rules out for one master. Here
//! every write, first or re-sent, passes the gate (`gate.rs`, with the
//! argument).
//!
//! The rules, with what the well-kept clients taught:
//! - The topology comes from `CLUSTER SHARDS` (only `role master` nodes
//!   with `health online`), or `CLUSTER SLOTS` where a server lacks it,
//!   fetched from the first seed that answers, then from any master
//!   known; each attempt bounded by the connect and command timeouts.
//!   Fetches go through [`Throttle`]: one at a time, not more often than
//!   every [`super::throttle::REFRESH_INTERVAL_MIN`], so that a storm of
//!   `MOVED` costs one fetch (jedis and ioredis users report refresh
//!   storms and loops).
//! - `MOVED slot host:port` updates that slot at once (no waiting for the
//!   fetch, as rueidis learned), asks for a fetch, and the call is sent
//!   there again.
//! - `ASK slot host:port`: `ASKING` and the command in one write on that
//!   node's connection (redis-plus-plus wrote them apart, and another
//!   command could slip between), once, without touching the map; a node
//!   never talked to is connected on demand (redix' bug: ASK to a new,
//!   empty node failed); an `ASKING` refused is the answer (redis-rs
//!   once dropped that error).
//! - `TRYAGAIN` (a multi-key command while its slot migrates): sent again
//!   after [`TRYAGAIN_PAUSE`].
//! - Every redirect and pause stays within the call's own deadline, set
//!   when the call is issued: a round's validity is measured from its
//!   start, redirects included. At most [`REDIRECTS_MAX`] redirects, one
//!   budget for `MOVED` and `ASK` together (redix followed ASK chains
//!   without one).
//! - `CLUSTERDOWN`, a slot no master serves, too many redirects or no
//!   seed answering: the member's answer is [`Raw::ClusterUnavailable`],
//!   naming the member and the cause. A master that cannot be reached is
//!   unreachable, as a single master would be, and asks for a fetch (its
//!   replica may have been promoted).
//!
//! A member's answer is the one final reply after its redirects: one vote
//! per member, never one per shard.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use redis::Value;
use tokio::sync::Notify;
use tokio::time::{sleep_until, timeout_at, Instant};

use super::gate::{Follow, Gate, Outcome, Ticket};
use super::redirect::{Addr, Redirect};
use super::spelling::ClusterSpelling;
use super::throttle::{Start, Throttle};
use super::topology::{self, SlotMap, MASTERS_MAX};
use super::{describe, NodeAnswers};
use crate::node::{as_raw, as_value, Limits, Node, OnReply, Replies, Request};
use crate::quorum::Raw;
use crate::resp::Reply;
use crate::tls::TlsClient;
use lock_protocol::slot::{key_slot, SLOTS};

/// Redirects (`MOVED` and `ASK`) one call follows at most.
pub(crate) const REDIRECTS_MAX: u32 = 5;
/// The pause before a call answered `TRYAGAIN` is sent again.
pub(crate) const TRYAGAIN_PAUSE: Duration = Duration::from_millis(10);

/// One cluster member. Cheap to share: calls hold its state.
pub(crate) struct Cluster {
    shared: Arc<Shared>,
}

struct Shared {
    /// `member 3 (redis+cluster://...)`, for the causes it reports.
    label: String,
    spelling: ClusterSpelling,
    /// How to speak TLS to its nodes (a `rediss+cluster://` member).
    tls: Option<Arc<TlsClient>>,
    limits: Limits,
    /// Each attempt of a topology fetch waits this long for its reply.
    command_timeout: Duration,
    state: Mutex<State>,
    /// Woken at every change a waiting call may wait for: a reply that a
    /// gate recorded, a call settled, a fetch ended.
    changed: Notify,
}

#[derive(Default)]
struct State {
    /// None until the first fetch succeeds.
    map: Option<SlotMap>,
    /// One node per address talked to (seeds and masters); bounded.
    nodes: HashMap<Addr, Node>,
    gate: Gate<Addr>,
    throttle: Throttle,
    /// Why the last fetch failed, if it did.
    last_failure: Option<String>,
    /// Fetches run so far (the tests count them).
    fetches: u64,
}

/// Where a call goes next.
#[derive(Clone, Debug)]
enum Target {
    /// The master the map names for the slot.
    Map,
    /// The node an `ASK` named, with `ASKING`.
    Ask(Addr),
}

/// A call written: where, its write's number in the gate, its replies.
struct Written<F> {
    addr: Addr,
    seq: u64,
    replies: F,
}

/// Settles a call in the gate when dropped: at its answer, or when its
/// caller gives up (its future dropped), whichever comes first.
struct Settle {
    shared: Arc<Shared>,
    ticket: Ticket,
}

impl Drop for Settle {
    fn drop(&mut self) {
        self.shared.state().gate.settle(self.ticket);
        self.shared.changed.notify_waiters();
    }
}

impl Cluster {
    /// A member for `spelling`, named `label` in what it reports; fetches
    /// nothing yet (see [`Cluster::warm_up`]).
    pub fn new(
        label: String,
        spelling: ClusterSpelling,
        tls: Option<Arc<TlsClient>>,
        limits: Limits,
        command_timeout: Duration,
    ) -> Cluster {
        let shared = Shared {
            label,
            spelling,
            tls,
            limits,
            command_timeout,
            state: Mutex::new(State::default()),
            changed: Notify::new(),
        };
        Cluster { shared: Arc::new(shared) }
    }

    /// Fetches the topology now (at connect) and opens a connection to
    /// every master; failures are remembered and reported by the calls.
    pub async fn warm_up(&self) {
        let start = self.shared.state().throttle.ask(Instant::now());
        if start == Start::Now {
            fetch(self.shared.clone()).await;
        }
        let masters: Vec<Addr> = {
            let state = self.shared.state();
            state.map.as_ref().map(|map| map.masters().into_iter().cloned().collect()).unwrap_or_default()
        };
        let warming: Vec<_> = {
            let mut state = self.shared.state();
            masters
                .iter()
                .filter_map(|addr| self.shared.node(&mut state, addr).ok().map(Node::warm_up))
                .collect()
        };
        futures_util::future::join_all(warming).await;
    }

    /// `request` routed to the master of its key's slot, issued now (in
    /// the gate, and written at once when the gate allows); the answer
    /// after redirects, by `timeout` (plus the connect timeout while the
    /// map or the first connection is still to come).
    pub fn call(&self, request: &Request, timeout: Duration) -> impl Future<Output = Raw> + Send + 'static {
        let pipelined = request.is_pipeline();
        let routed = self.route(request, timeout);
        async move { as_raw(routed.await.0, pipelined) }
    }

    /// [`Cluster::call`], keeping the reply as a [`Value`], and the address
    /// of the node that gave the final answer.
    pub fn query(
        &self,
        request: &Request,
        timeout: Duration,
    ) -> impl Future<Output = (Result<Value, Raw>, Option<String>)> + Send + 'static {
        let routed = self.route(request, timeout);
        async move {
            let (replies, answered_by) = routed.await;
            (as_value(replies), answered_by.map(|addr| addr.to_string()))
        }
    }

    /// `request` (keyless, as `INFO lock`) sent to every master of the
    /// map, fetched first when there is none yet: each master's address
    /// with its answer, or why there is no map. Outside the ordering gate:
    /// no lock call waits on its order.
    pub fn query_masters(
        &self,
        request: &Request,
        timeout: Duration,
    ) -> impl Future<Output = Result<NodeAnswers, String>> + Send + 'static {
        let cluster = Cluster { shared: self.shared.clone() };
        let request = request.clone();
        async move {
            cluster.warm_up().await;
            let shared = &cluster.shared;
            let sends: Vec<_> = {
                let mut state = shared.state();
                let Some(map) = state.map.as_ref() else {
                    let why = state.last_failure.clone().unwrap_or_else(|| "no slot map yet".into());
                    return Err(shared.cause(&why));
                };
                let unserved = usize::from(SLOTS).saturating_sub(map.served());
                let masters: Vec<Addr> = map.masters().into_iter().cloned().collect();
                let mut sends: Vec<_> = masters
                    .into_iter()
                    .map(|addr| {
                        let sent = shared
                            .node(&mut state, &addr)
                            .map(|node| node.send(&request, node.deadline(timeout), false, None));
                        (addr.to_string(), sent)
                    })
                    .collect();
                // Slots no master serves (a failed master with no replica
                // to promote): their keys get no grant from this member,
                // and no node would say so.
                if unserved > 0 {
                    let why = format!("no master serves {unserved} of the {SLOTS} slots");
                    sends.push((format!("{unserved} slots"), Err(shared.cause(&why))));
                }
                sends
            };
            let answers = futures_util::future::join_all(sends.into_iter().map(|(addr, sent)| async move {
                match sent {
                    Ok(replies) => (addr, as_value(replies.await)),
                    Err(why) => (addr, Err(Raw::ClusterUnavailable(why))),
                }
            }));
            Ok(answers.await)
        }
    }

    fn route(
        &self,
        request: &Request,
        timeout: Duration,
    ) -> impl Future<Output = (Replies, Option<Addr>)> + Send + 'static {
        let shared = self.shared.clone();
        let slot = key_slot(request.key().as_bytes());
        let mut state = shared.state();
        let ticket = match state.gate.issue(slot) {
            Ok(ticket) => ticket,
            Err(why) => {
                drop(state);
                let failed = Err(Raw::ClusterUnavailable(shared.cause(&why)));
                return futures_util::future::Either::Left(std::future::ready((failed, None)));
            }
        };
        let settle = Settle { shared: shared.clone(), ticket };
        let connected =
            state.map.as_ref().and_then(|map| map.owner(slot)).and_then(|addr| state.nodes.get(addr));
        let mut wait = timeout;
        if !connected.is_some_and(Node::connected) {
            wait = wait.saturating_add(shared.limits.connect_timeout);
        }
        let deadline = Instant::now() + wait;
        // Written now when the gate allows: calls issued in order are then
        // queued in order, as on a single master.
        let first = shared.try_write(&mut state, ticket, &Target::Map, request, deadline);
        drop(state);
        let request = request.clone();
        futures_util::future::Either::Right(async move {
            let routed = shared.run(ticket, request, first, deadline).await;
            drop(settle);
            routed
        })
    }
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        // Nothing panics while it is held; a poisoned lock's data is whole.
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// `member 3 (redis+cluster://...): why`.
    fn cause(&self, why: &str) -> String {
        format!("{}: {why}", self.label)
    }

    /// The node at `addr`, connected on first use (its writer task starts
    /// now); bounded in number.
    fn node<'a>(&self, state: &'a mut State, addr: &Addr) -> Result<&'a Node, String> {
        if !state.nodes.contains_key(addr) {
            if state.nodes.len() >= MASTERS_MAX + super::spelling::SEEDS_MAX {
                return Err(format!("more than {} nodes named by the cluster", state.nodes.len()));
            }
            let tls = match (&self.tls, self.spelling.tls) {
                (Some(tls), true) => Some(tls.target(&addr.host)?),
                (None, true) => {
                    return Err("a rediss+cluster:// member needs the client's TLS settings".into())
                }
                (_, false) => None,
            };
            let node = Node::with_info(self.spelling.connection(addr), tls, self.limits)?;
            state.nodes.insert(addr.clone(), node);
        }
        state.nodes.get(addr).ok_or_else(|| "the node vanished".to_string())
    }

    /// The call's route, after its first write (if it was made at issue).
    async fn run(
        self: &Arc<Shared>,
        ticket: Ticket,
        request: Request,
        first: Result<Option<Written<WriteFuture>>, Raw>,
        deadline: Instant,
    ) -> (Replies, Option<Addr>) {
        let mut target = Target::Map;
        let mut written = first;
        let mut redirects = 0;
        loop {
            let call = match written {
                Ok(Some(call)) => call,
                Ok(None) => match self.write_when_allowed(ticket, &target, &request, deadline).await {
                    Ok(call) => call,
                    Err(raw) => return (Err(raw), None),
                },
                Err(raw) => return (Err(raw), None),
            };
            let replies = call.replies.await;
            let redirect = match &replies {
                Ok(replies) => replies.iter().find_map(|reply| redirect_of(reply, &call.addr.host)),
                Err(Raw::Unreachable(_)) if self.not_sent(ticket, call.seq) => {
                    // The master is gone (its replica may have been
                    // promoted): sent where a fresh map says, if it names
                    // another node in time.
                    let fetched = self.state().fetches;
                    self.refresh();
                    if self.wait_for_fetch(fetched, deadline).await
                        && self.moved_away(ticket.slot, &call.addr)
                    {
                        Some(Redirect::Refetched)
                    } else {
                        None
                    }
                }
                Err(Raw::TimedOut | Raw::Unreachable(_)) => {
                    // Its replica may have been promoted: the next calls
                    // find out.
                    self.refresh();
                    None
                }
                Err(_) => None,
            };
            let Some(redirect) = redirect else { return (replies, Some(call.addr)) };
            target = match redirect {
                Redirect::Refetched => {
                    redirects += 1;
                    Target::Map
                }
                Redirect::Down(why) => {
                    return (Err(Raw::ClusterUnavailable(self.cause(&why))), Some(call.addr))
                }
                Redirect::Moved { slot, to } => {
                    redirects += 1;
                    let mut state = self.state();
                    if let Some(map) = state.map.as_mut() {
                        // A map full of masters refuses it; the fetch follows.
                        let _ = map.set(slot, &to);
                    }
                    drop(state);
                    self.refresh();
                    Target::Map
                }
                Redirect::Ask { to, .. } => {
                    redirects += 1;
                    Target::Ask(to)
                }
                Redirect::TryAgain => {
                    sleep_until((Instant::now() + TRYAGAIN_PAUSE).min(deadline)).await;
                    Target::Map
                }
            };
            if redirects > REDIRECTS_MAX {
                let why = format!("more than {REDIRECTS_MAX} redirects (the last from {})", call.addr);
                return (Err(Raw::ClusterUnavailable(self.cause(&why))), Some(call.addr));
            }
            if let Err(raw) = self.wait_to_follow(ticket, deadline).await {
                return (Err(raw), Some(call.addr));
            }
            written = Ok(None);
        }
    }

    /// Whether write `seq` of `ticket` failed unwritten (no connection).
    fn not_sent(&self, ticket: Ticket, seq: u64) -> bool {
        self.state().gate.outcome(ticket, seq) == Some(Outcome::Redirected)
    }

    /// Whether the map names a master other than `addr` for `slot`.
    fn moved_away(&self, slot: u16, addr: &Addr) -> bool {
        let state = self.state();
        state.map.as_ref().and_then(|map| map.owner(slot)).is_some_and(|owner| owner != addr)
    }

    /// Waits until a fetch after the `seen`-th has ended (true), or until
    /// `deadline` (false).
    async fn wait_for_fetch(&self, seen: u64, deadline: Instant) -> bool {
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if self.state().fetches > seen {
                return true;
            }
            if timeout_at(deadline, changed).await.is_err() {
                return false;
            }
        }
    }

    /// The follow rule of the gate, waited for until `deadline`.
    async fn wait_to_follow(&self, ticket: Ticket, deadline: Instant) -> Result<(), Raw> {
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            match self.state().gate.may_follow(ticket) {
                Follow::Yes => return Ok(()),
                Follow::No => {
                    let why = "redirected after a later call of its slot ran there; not sent again";
                    return Err(Raw::ClusterUnavailable(self.cause(why)));
                }
                Follow::Wait => {}
            }
            if timeout_at(deadline, changed).await.is_err() {
                return Err(Raw::TimedOut);
            }
        }
    }

    /// Writes the call to its target as soon as the gate allows (and the
    /// map names a master), until `deadline`.
    async fn write_when_allowed(
        self: &Arc<Shared>,
        ticket: Ticket,
        target: &Target,
        request: &Request,
        deadline: Instant,
    ) -> Result<Written<WriteFuture>, Raw> {
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            {
                let mut state = self.state();
                if let Some(written) = self.try_write(&mut state, ticket, target, request, deadline)? {
                    return Ok(written);
                }
            }
            if timeout_at(deadline, changed).await.is_err() {
                return Err(Raw::TimedOut);
            }
        }
    }

    /// One attempt to write the call: `Ok(None)` when it must wait (the
    /// gate, or a fetch in flight), `Err` when it cannot go anywhere.
    fn try_write(
        self: &Arc<Shared>,
        state: &mut State,
        ticket: Ticket,
        target: &Target,
        request: &Request,
        deadline: Instant,
    ) -> Result<Option<Written<WriteFuture>>, Raw> {
        let (addr, asking) = match target {
            Target::Ask(addr) => (addr.clone(), true),
            Target::Map => match state.map.as_ref().map(|map| map.owner(ticket.slot).cloned()) {
                Some(Some(addr)) => (addr, false),
                known => {
                    // No map yet, or no master for the slot: a fetch, unless
                    // one just ended without one.
                    if state.throttle.in_flight() || self.start_refresh(state) {
                        return Ok(None);
                    }
                    let why = match (known, &state.last_failure) {
                        (None, Some(failure)) => format!("no seed answered ({failure})"),
                        (None, None) => "no topology yet".to_string(),
                        (Some(_), _) => format!("no master serves slot {} now", ticket.slot),
                    };
                    return Err(Raw::ClusterUnavailable(self.cause(&why)));
                }
            },
        };
        if !state.gate.may_write(ticket, &addr) {
            return Ok(None);
        }
        self.node(state, &addr).map_err(|why| Raw::Unreachable(self.cause(&why)))?;
        // Recorded before it is sent: the node's reader records its reply.
        let seq = state.gate.wrote(ticket, addr.clone());
        let hook = self.hook(ticket, seq, asking);
        let node = state.nodes.get(&addr).ok_or_else(|| Raw::Unreachable(self.cause("the node vanished")))?;
        let replies = node.send(request, deadline, asking, Some(hook));
        Ok(Some(Written { addr, seq, replies: Box::pin(replies) }))
    }

    /// What the node's reader runs as the replies to write `seq` arrive:
    /// records in the gate whether the command ran.
    fn hook(self: &Arc<Shared>, ticket: Ticket, seq: u64, asking: bool) -> OnReply {
        let shared = self.clone();
        Box::new(move |replies: &[Reply]| {
            // None at all: not sent (no connection).
            let own = replies.get(usize::from(asking)..).unwrap_or_default();
            let redirected = own.iter().all(|reply| redirect_of(reply, "").is_some());
            let outcome = if redirected { Outcome::Redirected } else { Outcome::Ran };
            shared.state().gate.answered(ticket, seq, outcome);
            shared.changed.notify_waiters();
        })
    }

    /// Asks for a topology fetch (throttled).
    fn refresh(self: &Arc<Shared>) {
        let mut state = self.state();
        self.start_refresh(&mut state);
    }

    /// Asks the throttle for a fetch, and starts it (now, or when the
    /// throttle's interval ends) in the background. Whether one runs now.
    fn start_refresh(self: &Arc<Shared>, state: &mut State) -> bool {
        let start = state.throttle.ask(Instant::now());
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            if start == Start::Now {
                state.throttle.finish();
            }
            return false;
        };
        match start {
            Start::Now => {
                runtime.spawn(fetch(self.clone()));
                true
            }
            Start::At(when) => {
                let shared = self.clone();
                runtime.spawn(async move {
                    sleep_until(when).await;
                    let due = shared.state().throttle.due(Instant::now());
                    if due == Start::Now {
                        fetch(shared).await;
                    }
                });
                false
            }
            Start::No => false,
        }
    }
}

type WriteFuture = std::pin::Pin<Box<dyn Future<Output = Replies> + Send>>;

/// The redirect a reply stands for, if it is one.
fn redirect_of(reply: &Reply, host: &str) -> Option<Redirect> {
    match reply {
        Reply::Error { code, detail } => Redirect::of(code, detail, host),
        _ => None,
    }
}

/// Fetches the topology: the seeds first, then the masters the map knows,
/// each bounded by the connect and command timeouts; the first map read
/// replaces the member's. Ends the throttle's fetch either way.
async fn fetch(shared: Arc<Shared>) {
    let mut candidates: Vec<Addr> = shared.spelling.seeds.clone();
    if let Some(map) = shared.state().map.as_ref() {
        candidates.extend(map.masters().into_iter().filter(|m| !shared.spelling.seeds.contains(m)).cloned());
    }
    let mut failures = Vec::new();
    let mut found = None;
    for addr in candidates {
        match ask_topology(&shared, &addr).await {
            Ok(map) if map.served() > 0 => {
                found = Some(map);
                break;
            }
            Ok(_) => failures.push(format!("{addr}: no slot is served")),
            Err(why) => failures.push(format!("{addr}: {why}")),
        }
    }
    let mut state = shared.state();
    state.throttle.finish();
    state.fetches += 1;
    match found {
        Some(map) => {
            state.map = Some(map);
            state.last_failure = None;
        }
        None => state.last_failure = Some(failures.join("; ")),
    }
    drop(state);
    shared.changed.notify_waiters();
}

/// `CLUSTER SHARDS` on the node at `addr` (`CLUSTER SLOTS` if the server
/// does not know it), read into a map.
async fn ask_topology(shared: &Arc<Shared>, addr: &Addr) -> Result<SlotMap, String> {
    let query = |sub: &str| {
        let mut state = shared.state();
        let node = shared.node(&mut state, addr)?;
        let mut cmd = redis::cmd("CLUSTER");
        cmd.arg(sub);
        Ok::<_, String>(node.query(&cmd, shared.command_timeout))
    };
    match query("SHARDS")?.await {
        Ok(reply) => topology::from_shards(&reply, &addr.host, shared.spelling.tls),
        Err(Raw::ServerError { code, detail })
            if code == "ERR" && detail.to_lowercase().contains("unknown") =>
        {
            match query("SLOTS")?.await {
                Ok(reply) => topology::from_slots(&reply, &addr.host),
                Err(raw) => Err(describe(&raw)),
            }
        }
        Err(raw) => Err(describe(&raw)),
    }
}

#[cfg(test)]
mod tests {
    //! The two races of `gate.rs`, played against a scripted fake cluster:
    //! loopback peers that serve `CLUSTER SHARDS` from a topology the test
    //! changes, run a lock command when they own its slot (recording it)
    //! and answer `MOVED` otherwise, and hold their replies until told.

    use std::sync::Mutex as StdMutex;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;
    use tokio::sync::watch;

    use super::*;
    use crate::resp;

    const LONG: Duration = Duration::from_secs(5);

    /// The fake cluster: every slot on one node (`owner`), the commands
    /// each node ran, in order.
    #[derive(Default)]
    struct World {
        owner: u16,
        ran: Vec<(u16, String)>,
        /// The next this many lock commands get `TRYAGAIN`.
        try_again: usize,
        /// Every lock command gets `MOVED` to the node itself (a loop).
        looping: bool,
    }

    struct Fake {
        port: u16,
        /// Replies flow while true.
        open: watch::Sender<bool>,
    }

    fn lock<T>(m: &StdMutex<T>) -> std::sync::MutexGuard<'_, T> {
        m.lock().unwrap()
    }

    async fn fake(world: Arc<StdMutex<World>>) -> Fake {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let (open, opened) = watch::channel(true);
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                let (world, mut opened) = (world.clone(), opened.clone());
                tokio::spawn(async move {
                    let (mut buf, mut chunk) = (Vec::new(), [0u8; 4096]);
                    while let Ok(n @ 1..) = socket.read(&mut chunk).await {
                        buf.extend_from_slice(&chunk[..n]);
                        while let Ok(Some((Reply::Array(words), used))) = resp::parse(&buf) {
                            buf.drain(..used);
                            let words: Vec<String> = words
                                .iter()
                                .map(|w| match w {
                                    Reply::Bulk(b) => String::from_utf8_lossy(b).into_owned(),
                                    _ => String::new(),
                                })
                                .collect();
                            let _ = opened.wait_for(|open| *open).await;
                            let answer = answer(&world, port, &words);
                            if socket.write_all(answer.as_bytes()).await.is_err() {
                                return;
                            }
                        }
                    }
                });
            }
        });
        Fake { port, open }
    }

    /// What node `port` answers to `words`, given the world now.
    fn answer(world: &StdMutex<World>, port: u16, words: &[String]) -> String {
        let mut world = lock(world);
        match words.first().map(String::as_str) {
            Some("CLUSTER") => {
                let node = format!(
                    "*14\r\n$2\r\nid\r\n$1\r\nx\r\n$4\r\nport\r\n:{0}\r\n$2\r\nip\r\n$9\r\n127.0.0.1\r\n\
                     $8\r\nendpoint\r\n$9\r\n127.0.0.1\r\n$4\r\nrole\r\n$6\r\nmaster\r\n\
                     $18\r\nreplication-offset\r\n:0\r\n$6\r\nhealth\r\n$6\r\nonline\r\n",
                    world.owner
                );
                format!("*1\r\n*4\r\n$5\r\nslots\r\n*2\r\n:0\r\n:16383\r\n$5\r\nnodes\r\n*1\r\n{node}")
            }
            Some("ASKING") => "+OK\r\n".into(),
            Some(_) if world.try_again > 0 => {
                world.try_again -= 1;
                "-TRYAGAIN Multiple keys request during rehashing of slot\r\n".into()
            }
            Some(_) if world.looping => format!("-MOVED 1 127.0.0.1:{port}\r\n"),
            Some(name) if world.owner == port => {
                world.ran.push((port, name.to_string()));
                ":1\r\n".into()
            }
            Some(_) => {
                let slot = key_slot(words.get(1).map_or(&b""[..], |k| k.as_bytes()));
                format!("-MOVED {slot} 127.0.0.1:{}\r\n", world.owner)
            }
            None => "-ERR empty\r\n".into(),
        }
    }

    fn request(name: &str) -> Request {
        Request::one(redis::cmd(name).arg("k").clone(), "k")
    }

    /// A member over `seeds`, its topology fetched.
    async fn member(seeds: &[u16]) -> Cluster {
        let addr = |port: u16| Addr { host: "127.0.0.1".into(), port };
        let spelling = ClusterSpelling {
            seeds: seeds.iter().map(|&p| addr(p)).collect(),
            username: None,
            password: None,
            tls: false,
        };
        let limits = Limits { connect_timeout: LONG, reconnect_backoff: Duration::from_millis(10) };
        let cluster = Cluster::new("member 1 (test)".into(), spelling, None, limits, LONG);
        cluster.warm_up().await;
        cluster
    }

    /// Waits (bounded) until the member's map names `port` for slot `slot`.
    async fn map_names(cluster: &Cluster, slot: u16, port: u16) {
        let deadline = Instant::now() + LONG;
        while cluster.shared.state().map.as_ref().and_then(|m| m.owner(slot)).map(|a| a.port) != Some(port) {
            assert!(Instant::now() < deadline, "the map never named {port}");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Race 1: an acquire is on A when a fetch moves the slot to B; the
    /// release, issued next, waits until the acquire (answered MOVED by A)
    /// is written to B, and B runs them in that order.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_release_waits_for_an_acquire_redirected_after_the_map_moved() {
        let world = Arc::new(StdMutex::new(World::default()));
        let (a, b) = (fake(world.clone()).await, fake(world.clone()).await);
        lock(&world).owner = a.port;
        // B first: its connection never holds a reply.
        let cluster = member(&[b.port, a.port]).await;
        let slot = key_slot(b"k");
        map_names(&cluster, slot, a.port).await;

        a.open.send_replace(false);
        let acquire = tokio::spawn(cluster.call(&request("ACQUIRE"), LONG));
        lock(&world).owner = b.port;
        cluster.shared.refresh();
        map_names(&cluster, slot, b.port).await;
        let release = tokio::spawn(cluster.call(&request("RELEASE"), LONG));
        // The release is issued, and not written anywhere.
        {
            let state = cluster.shared.state();
            let writes = format!("{:?}", state.gate);
            assert_eq!(writes.matches(", seq:").count(), 1, "only the acquire is written: {writes}");
        }
        a.open.send_replace(true);
        assert_eq!(acquire.await.unwrap(), Raw::Int(1));
        assert_eq!(release.await.unwrap(), Raw::Int(1));
        assert_eq!(lock(&world).ran, [(b.port, "ACQUIRE".into()), (b.port, "RELEASE".into())]);
    }

    /// Race 2: an acquire and a release both on A, both answered MOVED; the
    /// release's task runs first, yet B runs the acquire first.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn two_calls_redirected_together_are_sent_again_in_order() {
        let world = Arc::new(StdMutex::new(World::default()));
        let (a, b) = (fake(world.clone()).await, fake(world.clone()).await);
        lock(&world).owner = a.port;
        let cluster = member(&[b.port, a.port]).await;
        map_names(&cluster, key_slot(b"k"), a.port).await;

        a.open.send_replace(false);
        let acquire = cluster.call(&request("ACQUIRE"), LONG);
        let release = tokio::spawn(cluster.call(&request("RELEASE"), LONG));
        lock(&world).owner = b.port;
        a.open.send_replace(true);
        // Both replies arrived (the node's reader recorded them) while the
        // acquire's future was not polled at all.
        let deadline = Instant::now() + LONG;
        while format!("{:?}", cluster.shared.state().gate).matches("Redirected").count() < 2 {
            assert!(Instant::now() < deadline, "the MOVED replies never came");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(lock(&world).ran.is_empty(), "the release was sent again before the acquire");
        assert_eq!(acquire.await, Raw::Int(1));
        assert_eq!(release.await.unwrap(), Raw::Int(1));
        assert_eq!(lock(&world).ran, [(b.port, "ACQUIRE".into()), (b.port, "RELEASE".into())]);
    }

    /// `TRYAGAIN` is sent again after a pause, within the call's deadline;
    /// a redirect loop ends after [`REDIRECTS_MAX`] redirects with the
    /// member's "no", naming it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn tryagain_is_retried_and_a_redirect_loop_is_bounded() {
        let world = Arc::new(StdMutex::new(World::default()));
        let a = fake(world.clone()).await;
        lock(&world).owner = a.port;
        let cluster = member(&[a.port]).await;
        lock(&world).try_again = 3;
        let started = Instant::now();
        assert_eq!(cluster.call(&request("ACQUIRE"), LONG).await, Raw::Int(1));
        assert!(started.elapsed() >= TRYAGAIN_PAUSE * 3, "paused between tries");
        assert_eq!(lock(&world).ran, [(a.port, "ACQUIRE".into())]);
        // TRYAGAIN until the deadline: the call times out, unsent.
        lock(&world).try_again = usize::MAX;
        assert_eq!(cluster.call(&request("ACQUIRE"), Duration::from_millis(50)).await, Raw::TimedOut);
        lock(&world).try_again = 0;

        lock(&world).looping = true;
        match cluster.call(&request("ACQUIRE"), LONG).await {
            Raw::ClusterUnavailable(why) => assert!(
                why.starts_with("member 1 (test): more than 5 redirects (the last from 127.0.0.1:"),
                "{why}"
            ),
            other => panic!("{other:?}"),
        }
        assert_eq!(lock(&world).ran.len(), 1, "nothing ran in the loop");
    }

    /// No seed answers: the member's "no" says so, with each seed's cause,
    /// at once within the fetch interval and after a new fetch later.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn no_seed_answering_is_the_members_no() {
        let port = TcpListener::bind("127.0.0.1:0").await.unwrap().local_addr().unwrap().port();
        let cluster = member(&[port]).await;
        for pause in [0, 150] {
            tokio::time::sleep(Duration::from_millis(pause)).await;
            match cluster.call(&request("ACQUIRE"), LONG).await {
                Raw::ClusterUnavailable(why) => assert!(
                    why.starts_with(&format!(
                        "member 1 (test): no seed answered (127.0.0.1:{port}: connect failed"
                    )),
                    "{why}"
                ),
                other => panic!("{other:?}"),
            }
        }
    }
}
