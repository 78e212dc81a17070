//! One lock node: its address, and at most one multiplexed connection to it.
//!
//! Why one connection per node, shared by every call: a multiplexed
//! connection sends commands in the order they were issued and matches the
//! replies in order. So a `LOCK.RELEASE` issued after a `LOCK.ACQUIRE` (even
//! one whose reply timed out, or whose round returned without waiting for
//! it) reaches the node after it, and cannot overtake it and leave the late
//! ACQUIRE's lock behind. A second connection for releases would lose that
//! order.
//!
//! What a dropped call does (checked in redis 0.27's
//! `aio/multiplexed_connection.rs`): `req_packed_command` puts the packed
//! command into the connection's channel (a bounded `mpsc`, cancel-safe:
//! a message is queued whole or not at all), and one task per connection
//! takes them in channel order and writes them. If the caller's future is
//! gone by the time that task takes the message (`start_send` checks
//! `output.is_closed()`), the command is skipped, never written; once
//! written it runs on the node, and its reply is discarded. So a call that
//! is dropped or times out is sent in order or never: either way nothing
//! issued later can overtake it. A call that must reach the node (a
//! release) must therefore be kept running, not dropped; the rounds that
//! return at their majority keep their late calls running in the
//! background (`Redlock::detach`).
//!
//! Every call is bounded: waiting for (or opening) the connection by the
//! connect timeout, the command by the caller's timeout. Nothing is retried
//! here: a failed call is reported as such, and the connection is dropped
//! only when it is broken (an I/O error), to be reopened lazily by a later
//! call. A timeout leaves the connection in place, which keeps the order.

use std::sync::Mutex as StdMutex;
use std::time::Duration;

use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::{AsyncConnectionConfig, Client, Cmd, Pipeline, RedisError, RedisResult, Value};
use tokio::sync::Mutex;
use tokio::time::error::Elapsed;
use tokio::time::{timeout, Instant};

use crate::quorum::Raw;

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
    /// The address as given, for messages and `info` tables.
    pub url: String,
    client: Client,
    /// The connection every call uses. Read on every call: a std mutex
    /// held only to clone or replace it, never across an await, so many
    /// tasks calling at once do not queue behind each other here.
    slot: StdMutex<Slot>,
    /// Held while a connection is being opened, so that the calls that find
    /// none wait for that one attempt instead of each opening another.
    opening: Mutex<()>,
}

#[derive(Default)]
struct Slot {
    conn: Option<MultiplexedConnection>,
    /// Bumped on each new connection, so that a call that saw the old one
    /// break does not drop a newer one.
    generation: u64,
    last_failure: Option<(Instant, String)>,
}

impl Node {
    pub fn new(url: &str) -> Result<Node, RedisError> {
        Ok(Node {
            url: url.to_string(),
            client: Client::open(url)?,
            slot: StdMutex::new(Slot::default()),
            opening: Mutex::new(()),
        })
    }

    /// Opens the connection now (used by `Redlock::connect`); failures are
    /// remembered and reported by the next calls.
    pub async fn warm_up(&self, limits: Limits) {
        let _ = self.connection(limits).await;
    }

    fn slot(&self) -> std::sync::MutexGuard<'_, Slot> {
        // Nothing can panic while the slot is held; if it ever were
        // poisoned, its data is still consistent (whole-field writes).
        self.slot.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The open connection, or the reason to fail at once (a connect
    /// failed within the backoff); `Ok(None)`: open one.
    fn current(&self, limits: Limits) -> Result<Option<(MultiplexedConnection, u64)>, Raw> {
        let slot = self.slot();
        if let Some(conn) = &slot.conn {
            return Ok(Some((conn.clone(), slot.generation)));
        }
        match &slot.last_failure {
            Some((at, why)) if at.elapsed() < limits.reconnect_backoff => {
                Err(Raw::Unreachable(format!("{why} ({} ms ago)", at.elapsed().as_millis())))
            }
            _ => Ok(None),
        }
    }

    async fn connection(&self, limits: Limits) -> Result<(MultiplexedConnection, u64), Raw> {
        match self.current(limits)? {
            Some(open) => Ok(open),
            // Boxed: opening a connection is a large future (resolving,
            // connecting, the handshake) and rare; inline, it would make
            // every call's future as large, and a round moves each of them.
            None => Box::pin(self.open(limits)).await,
        }
    }

    /// Opens the connection, or waits for another call that is opening it.
    async fn open(&self, limits: Limits) -> Result<(MultiplexedConnection, u64), Raw> {
        // Bounded wait for another call's connect attempt, then look again.
        let _opening = timeout(limits.connect_timeout, self.opening.lock())
            .await
            .map_err(|_| Raw::Unreachable("timed out waiting for the connection".into()))?;
        if let Some(open) = self.current(limits)? {
            return Ok(open);
        }
        // The redis crate's own timeouts stay unset: ours are explicit here.
        let opened = timeout(
            limits.connect_timeout,
            self.client.get_multiplexed_async_connection_with_config(&AsyncConnectionConfig::new()),
        )
        .await;
        let mut slot = self.slot();
        let why = match opened {
            Ok(Ok(conn)) => {
                slot.generation += 1;
                slot.last_failure = None;
                slot.conn = Some(conn.clone());
                return Ok((conn, slot.generation));
            }
            Ok(Err(e)) => format!("connect failed: {e}"),
            Err(_) => format!("connect timed out after {} ms", limits.connect_timeout.as_millis()),
        };
        slot.last_failure = Some((Instant::now(), why.clone()));
        Err(Raw::Unreachable(why))
    }

    /// Drops the connection of `generation` if it is still the current one.
    fn forget(&self, generation: u64) {
        let mut slot = self.slot();
        if slot.generation == generation {
            slot.conn = None;
        }
    }

    /// Sends `request` and waits at most `command_timeout` for its reply
    /// (a pipeline's: all its replies, as one [`Raw::Array`]). If the future
    /// is dropped (or times out) after the request was queued, it is sent
    /// in order, before any later request, or not at all (when the
    /// connection's task had not taken it yet); never after a later one. A
    /// pipeline is one write: its commands go out together, in order.
    pub async fn call(&self, request: &Request, limits: Limits, command_timeout: Duration) -> Raw {
        let reply = match request {
            Request::One(cmd) => self.query(cmd, limits, command_timeout).await,
            Request::Each { pipeline, commands } => {
                self.query_each(pipeline, *commands, limits, command_timeout).await
            }
        };
        match reply {
            Ok(value) => from_value(value),
            Err(raw) => raw,
        }
    }

    /// One command, keeping a successful reply as a [`Value`]; error
    /// replies, timeouts and connection failures come back as `Err`.
    pub async fn query(&self, cmd: &Cmd, limits: Limits, command_timeout: Duration) -> Result<Value, Raw> {
        let (mut conn, generation) = self.connection(limits).await?;
        let reply = timeout(command_timeout, conn.req_packed_command(cmd)).await;
        self.reply(reply, generation)
    }

    /// The `commands` commands of `pipeline`, their replies as one array.
    async fn query_each(
        &self,
        pipeline: &Pipeline,
        commands: usize,
        limits: Limits,
        command_timeout: Duration,
    ) -> Result<Value, Raw> {
        let (mut conn, generation) = self.connection(limits).await?;
        let reply = timeout(command_timeout, conn.req_packed_commands(pipeline, 0, commands)).await;
        self.reply(reply.map(|values| values.map(Value::Array)), generation)
    }

    /// A reply, or why there is none; a broken connection is dropped.
    fn reply(&self, reply: Result<RedisResult<Value>, Elapsed>, generation: u64) -> Result<Value, Raw> {
        match reply {
            Err(_) => Err(Raw::TimedOut),
            Ok(Ok(value)) => split_error(value),
            Ok(Err(e)) => {
                let raw = from_error(&e);
                if matches!(raw, Raw::Unreachable(_)) {
                    self.forget(generation);
                }
                Err(raw)
            }
        }
    }
}

/// What one call sends to a node: one command, or several written at once
/// (a pipeline: the fencing round's `LOCK.FENCE` on each key of a set).
pub(crate) enum Request {
    One(Cmd),
    Each { pipeline: Pipeline, commands: usize },
}

impl From<Cmd> for Request {
    fn from(cmd: Cmd) -> Request {
        Request::One(cmd)
    }
}

impl Request {
    /// The commands, in one pipeline (one of them: a plain request).
    pub fn each(cmds: impl IntoIterator<Item = Cmd>) -> Request {
        let mut pipeline = Pipeline::new();
        let mut commands = 0;
        for cmd in cmds {
            pipeline.add_command(cmd);
            commands += 1;
        }
        Request::Each { pipeline, commands }
    }

    /// The commands, for tests.
    #[cfg(test)]
    pub fn commands(&self) -> Vec<&Cmd> {
        match self {
            Request::One(cmd) => vec![cmd],
            Request::Each { pipeline, .. } => pipeline.cmd_iter().collect(),
        }
    }
}

fn from_value(value: Value) -> Raw {
    match split_error(value) {
        Err(raw) => raw,
        Ok(Value::Int(n)) => Raw::Int(n),
        Ok(Value::Nil) => Raw::Nil,
        Ok(Value::Array(items)) => Raw::Array(items.into_iter().map(from_value).collect()),
        Ok(other) => Raw::Other(format!("{other:?}")),
    }
}

/// An error reply as a [`Raw::ServerError`]; any other value as it is.
fn split_error(value: Value) -> Result<Value, Raw> {
    match value {
        Value::ServerError(e) => Err(Raw::ServerError {
            code: e.code().to_string(),
            detail: e.details().unwrap_or("").to_string(),
        }),
        value => Ok(value),
    }
}

fn from_error(e: &RedisError) -> Raw {
    if e.is_io_error() || e.is_connection_dropped() || e.is_connection_refusal() || e.is_unrecoverable_error()
    {
        return Raw::Unreachable(format!("connection lost: {e}"));
    }
    match e.code() {
        Some(code) => {
            Raw::ServerError { code: code.to_string(), detail: e.detail().unwrap_or("").to_string() }
        }
        None => Raw::ServerError { code: "ERR".into(), detail: e.to_string() },
    }
}
