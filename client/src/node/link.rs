//! One open connection to a node: its write half (written by the node's
//! writer task only), the reader task that hands each reply to the oldest
//! call waiting for it, and the calls written on it, in order. See
//! `node/mod.rs` for why one connection per node, written in order.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use redis::{Cmd, ConnectionAddr, ConnectionInfo};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio::time::{timeout_at, Instant};

use super::inbox::ReplyTo;
use crate::quorum::Raw;
use crate::resp::{self, Reply};
use crate::sim::{self, ReadHalf, WriteHalf};
use crate::tls::{self, TlsTarget};

/// Calls written on one connection and not yet answered (a node that
/// stopped answering but keeps its connection open); more fail at once.
pub(super) const IN_FLIGHT_MAX: usize = 100_000;

/// Called by the connection's reader with a call's replies as they arrive,
/// before the call's own future sees them (whether or not anybody polls
/// it), or with none when the call failed unwritten (no connection): a
/// cluster member records there whether the command ran. Not called when
/// the connection broke after the write (the command may have run).
pub(crate) type OnReply = Box<dyn FnOnce(&[Reply]) + Send>;

/// One call in the queue.
pub(super) struct Job {
    /// The packed command(s), shared by the calls of one round; empty for
    /// the warm-up (open only).
    pub bytes: Arc<[u8]>,
    /// How many replies the bytes ask for.
    pub replies: usize,
    /// When the caller stops waiting.
    pub deadline: Instant,
    pub done: ReplyTo,
    pub on_reply: Option<OnReply>,
}

/// Answers every job, unwritten, with `failure` (their `on_reply` sees no
/// reply at all: the command was not sent).
pub(super) fn fail(jobs: impl Iterator<Item = Job>, failure: &Raw) {
    for mut job in jobs {
        if let Some(on_reply) = job.on_reply.take() {
            on_reply(&[]);
        }
        job.done.send(Err(failure.clone()));
    }
}

/// One open connection: its write half (used by the writer task only) and
/// the calls written on it that wait for their replies, in order.
pub(super) struct Link {
    write: WriteHalf,
    waiting: Arc<Mutex<Waiting>>,
    reader: JoinHandle<()>,
    /// `host:port`, for errors.
    peer: String,
    /// The write buffer, kept between writes.
    out: Vec<u8>,
}

/// A write buffer larger than this (a batch of big pipelines) is not kept.
const OUT_KEPT_MAX: usize = 64 * 1024;

#[derive(Default)]
struct Waiting {
    calls: VecDeque<Written>,
    /// Why the connection is closed, once it is.
    closed: Option<String>,
    /// A reply came: the node took this client as it speaks (a TLS node
    /// that requires a client certificate may refuse one only after the
    /// client's side of the handshake; a TLS port drops a plain client at
    /// its first command).
    answered: bool,
}

/// A call written on the connection, waiting for its replies.
struct Written {
    expected: usize,
    replies: Vec<Reply>,
    done: ReplyTo,
    on_reply: Option<OnReply>,
}

impl Link {
    /// Connects (over TLS when `tls` says how), starts the reader, and runs
    /// the handshake the URL asks for (AUTH, SELECT), each checked; the
    /// TLS handshake and the AUTH / SELECT replies by `deadline`.
    pub(super) async fn open(
        info: &ConnectionInfo,
        tls: Option<&TlsTarget>,
        deadline: Instant,
    ) -> Result<Link, Raw> {
        let ConnectionAddr::Tcp(host, port) = &info.addr else {
            return Err(Raw::Unreachable("not a TCP address".into()));
        };
        let connecting = sim::connect(host, *port, tls);
        let connected = match tls {
            // A plain Redis port reads a TLS client's hello as the start of
            // an inline command and waits for its end: no answer at all.
            // (The caller's timeout, at the same deadline, is polled after
            // this one.)
            Some(_) => timeout_at(deadline, connecting).await.map_err(|_| {
                Raw::Unreachable(format!(
                    "TLS handshake with {host}:{port} failed: no TLS answer by the connect timeout \
                     (a plain port? use redis://)"
                ))
            })?,
            None => connecting.await,
        };
        let (read, write) = connected.map_err(Raw::Unreachable)?;
        let waiting = Arc::new(Mutex::new(Waiting::default()));
        let peer = format!("{host}:{port}");
        let reader = tokio::spawn(read_replies(read, waiting.clone(), peer.clone()));
        let mut link = Link { write, waiting, reader, peer, out: Vec::new() };
        for (what, cmd) in handshake(info) {
            let (done, answer) = oneshot::channel();
            let job = Job {
                bytes: cmd.get_packed_command().into(),
                replies: 1,
                deadline,
                done: ReplyTo::Caller(done),
                on_reply: None,
            };
            link.send(&mut vec![job]).await.map_err(Raw::Unreachable)?;
            match answer.await {
                Ok(Ok(replies)) => match replies.into_iter().next() {
                    Some(Reply::Status(ok)) if ok == "OK" => {}
                    Some(Reply::Error { code, detail }) => {
                        return Err(Raw::ServerError {
                            code,
                            detail: format!("{detail} (on connect, {what})"),
                        })
                    }
                    other => return Err(Raw::Other(format!("{what} on connect: {other:?}"))),
                },
                Ok(Err(failure)) => return Err(failure),
                Err(_) => return Err(Raw::Unreachable(format!("connection lost during {what}"))),
            }
        }
        Ok(link)
    }

    fn waiting(&self) -> std::sync::MutexGuard<'_, Waiting> {
        lock(&self.waiting)
    }

    pub(super) fn is_closed(&self) -> bool {
        self.waiting().closed.is_some()
    }

    /// Writes the batch's calls in order, as one write; their replies go to
    /// them as they come. Empties the batch. `Err` when the connection
    /// broke (every call waiting on it is failed).
    pub(super) async fn send(&mut self, batch: &mut Vec<Job>) -> Result<(), String> {
        let Some(write_by) = batch.iter().map(|job| job.deadline).max() else { return Ok(()) };
        // The write buffer is kept from one write to the next (one
        // allocation per connection, not per write), unless a large batch
        // grew it past what later writes need.
        let mut bytes = std::mem::take(&mut self.out);
        if bytes.capacity() > OUT_KEPT_MAX {
            bytes = Vec::new();
        }
        bytes.clear();
        {
            let mut waiting = self.waiting();
            if let Some(why) = waiting.closed.clone() {
                fail(batch.drain(..), &Raw::Unreachable(why.clone()));
                return Err(why);
            }
            if waiting.calls.len().saturating_add(batch.len()) > IN_FLIGHT_MAX {
                let why = format!("{} calls are unanswered on this connection", waiting.calls.len());
                fail(batch.drain(..), &Raw::Unreachable(why));
                return Ok(());
            }
            for job in batch.drain(..) {
                if job.replies == 0 {
                    job.done.send(Ok(Vec::new()));
                    continue;
                }
                bytes.extend_from_slice(&job.bytes);
                waiting.calls.push_back(Written {
                    expected: job.replies,
                    replies: Vec::new(),
                    done: job.done,
                    on_reply: job.on_reply,
                });
            }
        }
        if bytes.is_empty() {
            self.out = bytes;
            return Ok(());
        }
        // A TLS stream may keep part of its records back when the socket
        // is full; the flush sends them (a socket's flush does nothing).
        let write = &mut self.write;
        let written = timeout_at(write_by, async {
            write.write_all(&bytes).await?;
            if write.is_tls() {
                write.flush().await?;
            }
            Ok::<(), std::io::Error>(())
        })
        .await;
        self.out = bytes;
        let why = match written {
            Ok(Ok(())) => return Ok(()),
            Ok(Err(e)) if write.is_tls() => {
                let why = format!("connection lost: {}", tls::explain(&e, None));
                if self.waiting().answered || tls::is_alert(&e) {
                    format!("{why} ({})", self.peer)
                } else {
                    tls::refused_after_handshake(&self.peer, &why)
                }
            }
            Ok(Err(e)) => format!("connection lost: {e}"),
            Err(_) => "a write timed out (the node does not read)".to_string(),
        };
        self.close(&why);
        Err(why)
    }

    fn close(&self, why: &str) {
        self.reader.abort();
        close(&self.waiting, why);
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        self.close("the connection was dropped");
    }
}

/// The handshake commands for `info`, each with its name for errors.
fn handshake(info: &ConnectionInfo) -> Vec<(&'static str, Cmd)> {
    let mut commands = Vec::new();
    if let Some(password) = &info.redis.password {
        let mut auth = redis::cmd("AUTH");
        if let Some(user) = &info.redis.username {
            auth.arg(user);
        }
        commands.push(("AUTH", auth.arg(password).clone()));
    }
    if info.redis.db != 0 {
        commands.push(("SELECT", redis::cmd("SELECT").arg(info.redis.db).clone()));
    }
    commands
}

/// The connection's reader task: parses replies as they arrive and hands
/// each to the oldest call waiting for it. On EOF, an I/O error or a
/// malformed reply, the connection is closed and every waiting call fails,
/// with why (a TLS failure explained, naming `peer`, `host:port`).
async fn read_replies(mut read: ReadHalf, waiting: Arc<Mutex<Waiting>>, peer: String) {
    let mut buf: Vec<u8> = Vec::with_capacity(16 * 1024);
    let mut chunk = vec![0u8; 16 * 1024];
    let why = 'read: loop {
        let mut used = 0;
        loop {
            match resp::parse(&buf[used..]) {
                Ok(Some((reply, len))) => {
                    used += len;
                    if let Err(why) = deliver(&waiting, reply) {
                        break 'read why;
                    }
                }
                Ok(None) => break,
                // A TLS record (a handshake or an alert) where a reply was
                // expected.
                Err(_)
                    if !read.is_tls()
                        && matches!(buf.first(), Some(0x15 | 0x16))
                        && !lock(&waiting).answered =>
                {
                    break 'read format!("{peer} answered in TLS: a TLS port, use rediss://");
                }
                Err(why) => break 'read format!("malformed reply: {why}"),
            }
        }
        buf.drain(..used);
        let mut alert = false;
        let why = match read.read(&mut chunk).await {
            Ok(0) => "connection closed by the node".to_string(),
            Ok(n) => {
                buf.extend_from_slice(&chunk[..n]);
                continue;
            }
            Err(e) if read.is_tls() => {
                alert = tls::is_alert(&e);
                format!("connection to {peer} lost: {}", tls::explain(&e, None))
            }
            Err(e) => format!("connection lost: {e}"),
        };
        // Lost before the first reply, with calls waiting: the node may not
        // take this client as it speaks.
        let unanswered = buf.is_empty() && {
            let waiting = lock(&waiting);
            !waiting.answered && !waiting.calls.is_empty()
        };
        if unanswered && read.is_tls() && !alert {
            // A node that requires a client certificate refuses a client
            // without one after the client's side of the TLS handshake:
            // with an alert (explained above), or, when the client's first
            // command crossed the node's close, with a reset or an end of
            // stream alone.
            break tls::refused_after_handshake(&peer, &why);
        }
        if unanswered && !read.is_tls() {
            // A TLS port drops a plain client at its first command.
            break format!("{why} before its first reply (if {peer} is a TLS port, use rediss://)");
        }
        break why;
    };
    close(&waiting, &why);
}

/// Gives `value` to the oldest waiting call (which completes with its last
/// reply; its `on_reply` runs first, outside the lock).
fn deliver(waiting: &Mutex<Waiting>, reply: Reply) -> Result<(), String> {
    let complete = {
        let mut waiting = lock(waiting);
        waiting.answered = true;
        let Some(call) = waiting.calls.front_mut() else {
            return Err("a reply no call asked for".into());
        };
        call.replies.push(reply);
        if call.replies.len() < call.expected {
            return Ok(());
        }
        waiting.calls.pop_front()
    };
    if let Some(mut call) = complete {
        if let Some(on_reply) = call.on_reply.take() {
            on_reply(&call.replies);
        }
        call.done.send(Ok(call.replies));
    }
    Ok(())
}

/// Marks the connection closed (the first reason stays) and fails every
/// call waiting on it.
fn close(waiting: &Mutex<Waiting>, why: &str) {
    let mut waiting = lock(waiting);
    waiting.closed.get_or_insert_with(|| why.to_string());
    for call in waiting.calls.drain(..) {
        call.done.send(Err(Raw::Unreachable(why.to_string())));
    }
}

pub(super) fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Nothing can panic while it is held; if it ever were poisoned, the
    // data is still consistent (whole-field writes).
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}
