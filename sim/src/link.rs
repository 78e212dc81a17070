//! What the clients that speak the commands themselves to one node
//! (`reentrant.rs`, `waiters.rs`) share: a connection over the simulated
//! network (one call at a time, a one-line reply, a new connection after
//! a reset or a timeout: a late reply on the old one is never read), a
//! lock cycle's draw, and the hold they record for the checker.

use std::time::Duration;

use rand::rngs::StdRng;
use rand::Rng;
use redlock_client::sim::Connector;
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};

use crate::history::Hold;
use crate::net::{self, Shared};
use crate::resp::Reply;

/// Tries per call (the first and its resends).
const ATTEMPTS_MAX: usize = 4;
/// How long a call (its connect, write and reply) may take.
const CALL_TIMEOUT_MS: u64 = 60;

/// One client's connection to its node, opened again after a reset.
pub struct Link {
    connector: Connector,
    host: String,
    stream: Option<DuplexStream>,
}

impl Link {
    /// Client `c`'s link to node `node` (connected on the first call).
    pub fn new(world: &Shared, c: usize, node: usize) -> Link {
        Link { connector: net::connector(world.clone()), host: format!("c{c}n{node}"), stream: None }
    }

    /// Sends `words` and reads the one-line reply; `None` when the
    /// connection reset or the call timed out (the connection is then
    /// given up: a late reply on it is never read).
    pub async fn call(&mut self, words: &[String]) -> Option<Reply> {
        self.call_within(words, CALL_TIMEOUT_MS).await
    }

    /// [`Link::call`] with a timeout of its own (a call that waits).
    pub async fn call_within(&mut self, words: &[String], timeout_ms: u64) -> Option<Reply> {
        let attempt = async {
            let mut stream = match self.stream.take() {
                Some(stream) => stream,
                None => (self.connector)(&self.host, 6379).await.ok()?,
            };
            let mut out = format!("*{}\r\n", words.len()).into_bytes();
            for w in words {
                out.extend_from_slice(format!("${}\r\n{w}\r\n", w.len()).as_bytes());
            }
            stream.write_all(&out).await.ok()?;
            let mut line = Vec::new();
            while !line.ends_with(b"\r\n") {
                let mut byte = [0u8; 1];
                if stream.read(&mut byte).await.ok()? == 0 {
                    return None;
                }
                line.extend_from_slice(&byte);
            }
            Some((stream, reply_of(&line)))
        };
        let (stream, reply) =
            tokio::time::timeout(Duration::from_millis(timeout_ms), attempt).await.ok()??;
        self.stream = Some(stream);
        Some(reply)
    }

    /// [`Link::call`], sent again until it is answered, up to
    /// [`ATTEMPTS_MAX`] tries.
    pub async fn call_until_answered(&mut self, words: &[String]) -> Option<Reply> {
        for _ in 0..ATTEMPTS_MAX {
            if let Some(reply) = self.call(words).await {
                return Some(reply);
            }
        }
        None
    }
}

/// A one-line reply: an integer, nil, or an error (its code kept when it
/// is one the node gives).
fn reply_of(line: &[u8]) -> Reply {
    let text = String::from_utf8_lossy(line.strip_suffix(b"\r\n").unwrap_or(line)).into_owned();
    if let Some(n) = text.strip_prefix(':').and_then(|n| n.parse().ok()) {
        return Reply::Int(n);
    }
    if text == "$-1" {
        return Reply::Nil;
    }
    Reply::Error("ERR", text)
}

/// Whether a history has a workload of such clients, and on which node:
/// drawn from `rng` (`per_mille` of the histories).
pub fn one_node(rng: &mut StdRng, per_mille: u32, nodes: usize) -> Option<usize> {
    (rng.gen_range(0..1000) < per_mille).then(|| rng.gen_range(0..nodes))
}

/// One lock cycle of such a client.
pub struct Cycle {
    pub ttl_ms: u64,
    /// Its work while it holds the lock (within half its TTL).
    pub work_ms: u64,
    pub think_ms: u64,
}

/// A cycle with a TTL up to `ttl_max_ms`.
pub fn draw_cycle(rng: &mut StdRng, ttl_max_ms: u64) -> Cycle {
    let ttl_ms = rng.gen_range(100..=ttl_max_ms);
    Cycle { ttl_ms, work_ms: rng.gen_range(0..ttl_ms / 2), think_ms: rng.gen_range(0..50) }
}

/// When a hold granted at `from_ms` (or later) for `ttl_ms` stops being
/// valid to its holder: its TTL less the 1% a fast node clock may take
/// and 2 ms, as the quorum client budgets.
pub fn valid_until_ms(from_ms: i64, ttl_ms: u64) -> i64 {
    from_ms + ttl_ms as i64 - ttl_ms as i64 / 100 - 2
}

/// Records, now, client `c`'s hold of `key` with `token`, asked for at
/// `began_ms` and valid until `valid_until_ms`; its index in the history.
pub fn record_hold(
    world: &Shared,
    c: usize,
    key: &str,
    token: i64,
    began_ms: i64,
    valid_until_ms: i64,
) -> usize {
    let mut w = net::lock(world);
    let now = w.now_ms();
    w.history.holds.push(Hold {
        client: c,
        mode: redlock_client::Mode::Plain,
        token: token as u64,
        began_ms,
        granted_ms: now,
        valid_until_ms,
        released_ms: None,
        keys: vec![key.to_string()],
    });
    w.history.holds.len() - 1
}
