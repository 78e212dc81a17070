//! The simulated network: each client's connection to each node is an
//! in-memory duplex stream served by a task of the node, in order (one
//! ordered connection, as TCP). Faults within what such a connection
//! allows: a delay, a request lost with the connection reset before the
//! node acted, a reply lost with the connection reset after it acted, a
//! partition (nothing passes; connects hang) and a node that is down
//! (connects refused, its connections reset).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::Rng;
use redlock_client::sim::{Connect, Connector};
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};
use tokio::time::Instant;

use crate::bad_input;
use crate::history::History;
use crate::node::Node;
use crate::resp::{self, Reply};
use crate::sets;
use crate::waits::{self, Look};

/// How often each message fault strikes, per request (per mille).
#[derive(Clone, Copy, Debug)]
pub struct MessageFaults {
    pub delay_per_mille: u32,
    pub delay_max_ms: u64,
    pub request_lost_per_mille: u32,
    pub reply_lost_per_mille: u32,
}

/// Everything the tasks of one run share. One thread runs them all: the
/// mutex is never contended, it only makes the state `Send` for the
/// client's spawned tasks.
pub struct World {
    pub nodes: Vec<Node>,
    /// Client x node pairs cut off from each other.
    /// The quorum's members (the plain nodes; a cluster stands in for one).
    pub members: usize,
    pub partitioned: Vec<Vec<bool>>,
    pub rng: StdRng,
    pub faults: MessageFaults,
    pub history: History,
    pub started: Instant,
    /// The cluster members' clusters (`cluster.rs`), none in most histories.
    pub clusters: Vec<crate::cluster::Cluster>,
}

impl World {
    pub fn now_ms(&self) -> i64 {
        i64::try_from(self.started.elapsed().as_millis()).unwrap_or(i64::MAX)
    }

    fn chance(&mut self, per_mille: u32) -> bool {
        per_mille > 0 && self.rng.gen_range(0..1000) < per_mille
    }
}

pub type Shared = Arc<Mutex<World>>;

pub fn lock(world: &Shared) -> std::sync::MutexGuard<'_, World> {
    world.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The URL a client uses for a node: its host names both.
pub fn url(client: usize, node: usize) -> String {
    format!("redis://c{client}n{node}:6379/")
}

fn parse_host(host: &str) -> Option<(usize, usize)> {
    let (client, node) = host.strip_prefix('c')?.split_once('n')?;
    Some((client.parse().ok()?, node.parse().ok()?))
}

/// The connector the client's seam calls: an in-memory connection served
/// by the node, or refused while it is down; hangs while partitioned.
pub fn connector(world: Shared) -> Connector {
    Arc::new(move |host: &str, _port: u16| -> Connect {
        let world = world.clone();
        let pair = parse_host(host);
        Box::pin(async move {
            let Some((client, node)) = pair else {
                return Err(std::io::Error::new(std::io::ErrorKind::NotFound, "no such simulated node"));
            };
            wait_while_partitioned(&world, client, node).await;
            let epoch = {
                let w = lock(&world);
                match w.nodes.get(node) {
                    Some(n) if n.up => n.epoch,
                    _ => return Err(std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "node down")),
                }
            };
            let (client_end, node_end) = tokio::io::duplex(64 * 1024);
            tokio::spawn(serve(world, client, node, epoch, node_end));
            Ok(client_end)
        })
    })
}

async fn wait_while_partitioned(world: &Shared, client: usize, node: usize) {
    while lock(world).partitioned.get(client).and_then(|p| p.get(node)).copied().unwrap_or(false) {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Serves one connection: each request in order, with its faults.
async fn serve(world: Shared, client: usize, node: usize, epoch: u64, mut stream: DuplexStream) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    // `ASKING` was the connection's last command (a cluster's node).
    let mut asking = false;
    loop {
        let n = match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        buf.extend_from_slice(&chunk[..n]);
        loop {
            let (words, used) = match resp::parse_request(&buf) {
                Ok(Some(request)) => request,
                Ok(None) => break,
                Err(_) => return,
            };
            buf.drain(..used);
            let delay_ms = {
                let mut w = lock(&world);
                let (p, max) = (w.faults.delay_per_mille, w.faults.delay_max_ms);
                if w.chance(p) {
                    w.rng.gen_range(1..=max)
                } else {
                    0
                }
            };
            if delay_ms > 0 {
                tokio::time::sleep(Duration::from_millis(delay_ms)).await;
            }
            wait_while_partitioned(&world, client, node).await;
            let reply = {
                let mut w = lock(&world);
                let alive = w.nodes.get(node).is_some_and(|n| n.up && n.epoch == epoch);
                let request_lost = {
                    let p = w.faults.request_lost_per_mille;
                    w.chance(p)
                };
                let at = w.now_ms();
                let text = if w.history.unrecorded { String::new() } else { bad_input::text(&words) };
                if !alive {
                    w.history.note(at, format!("c{client} -> n{node} {text}: connection reset (node down)"));
                    return;
                }
                if request_lost {
                    w.history.note(at, format!("c{client} -> n{node} {text}: lost, connection reset"));
                    return;
                }
                let set = sets::macquire(&words);
                let before = match (&set, w.nodes.get(node)) {
                    (Some((owner, keys)), Some(n)) => n.on_keys_of(owner, keys),
                    _ => Vec::new(),
                };
                // A cluster's node may redirect the call instead (then it
                // did not run there). A panic of the core is a violation.
                let World { nodes, clusters, .. } = &mut *w;
                let served = bad_input::guarded(|| {
                    crate::cluster::serve(nodes, clusters, client, node, &words, at, &mut asking)
                });
                let served = match served {
                    Ok(served) => served,
                    Err(why) => {
                        if let Some(n) = w.nodes.get_mut(node) {
                            n.crash();
                        }
                        w.history.seen.push(bad_input::panicked(node, at, &bad_input::text(&words), &why));
                        return;
                    }
                };
                let Some((reply, ran)) = served else {
                    return;
                };
                if let (Some((owner, keys)), Some(n)) = (&set, w.nodes.get(node)) {
                    let after = n.on_keys_of(owner, keys);
                    let text = bad_input::text(&words);
                    if let Some(v) = sets::all_or_nothing(node, at, &text, &reply, &before, &after) {
                        w.history.seen.push(v);
                    }
                }
                let granted = matches!(reply, Reply::Int(_))
                    && words.first().is_some_and(|name| name.eq_ignore_ascii_case(b"LOCK.ACQUIRE"));
                if ran {
                    w.history.served(node, at, &words, granted);
                }
                let reply_lost = {
                    let p = w.faults.reply_lost_per_mille;
                    w.chance(p)
                };
                if reply_lost {
                    w.history.note(
                        at,
                        format!("c{client} -> n{node} {text} = {reply:?}, reply lost, connection reset"),
                    );
                    return;
                }
                if !w.history.unrecorded {
                    w.history.note(at, format!("c{client} -> n{node} {text} = {reply:?}"));
                }
                reply
            };
            // A call that waits (`WAIT`) gets its answer later, as the
            // node's hand-off serves it or its timeout passes.
            let reply = match reply {
                Reply::Blocked(handle) => {
                    let answer = waits::blocked(|| {
                        let mut w = lock(&world);
                        let now = w.now_ms();
                        let look = match w.nodes.get_mut(node) {
                            Some(n) if n.up && n.epoch == epoch => n.poll_wait(handle, now),
                            _ => Look::Answered(None),
                        };
                        if let Look::Answered(Some(reply)) = &look {
                            w.history.note(now, format!("c{client} <- n{node} after a wait: {reply:?}"));
                        }
                        look
                    });
                    match answer.await {
                        Some(reply) => reply,
                        None => return,
                    }
                }
                reply => reply,
            };
            let mut out = Vec::new();
            Reply::encode(&reply, &mut out);
            if stream.write_all(&out).await.is_err() {
                return;
            }
        }
    }
}
