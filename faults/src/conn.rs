//! One plain connection to one node (through its proxy), for the clients
//! that speak the module's commands directly instead of through the quorum
//! client: the one-node workloads and the misuse client. Every call has a
//! timeout; a call that times out or fails on the connection drops it, and
//! the next call opens a new one.

use std::time::Duration;

use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::{AsyncConnectionConfig, Client, Cmd, Value};
use tokio::time::timeout;

const CONNECT_TIMEOUT: Duration = Duration::from_millis(300);

/// A node's answer, or that none came.
#[derive(Clone, Debug, PartialEq)]
pub enum Reply {
    Int(i64),
    Nil,
    /// An error reply: its code (`ERR`, `WRONGTYPE`, `QUARANTINE`, ...) and
    /// the rest.
    Error(String, String),
    Other(Value),
    /// No answer: timed out, or the connection broke or could not be made
    /// (the command may or may not have run).
    Lost,
}

pub struct Conn {
    client: Client,
    conn: Option<MultiplexedConnection>,
}

impl Conn {
    pub fn new(url: &str) -> Conn {
        Conn { client: Client::open(url).expect("node url"), conn: None }
    }

    pub async fn call(&mut self, cmd: &Cmd, limit: Duration) -> Reply {
        if self.conn.is_none() {
            let opened = timeout(
                CONNECT_TIMEOUT,
                self.client.get_multiplexed_async_connection_with_config(&AsyncConnectionConfig::new()),
            )
            .await;
            match opened {
                Ok(Ok(conn)) => self.conn = Some(conn),
                _ => return Reply::Lost,
            }
        }
        let Some(conn) = self.conn.as_mut() else { return Reply::Lost };
        match timeout(limit, conn.req_packed_command(cmd)).await {
            Ok(Ok(Value::Int(n))) => Reply::Int(n),
            Ok(Ok(Value::Nil)) => Reply::Nil,
            Ok(Ok(Value::ServerError(e))) => {
                Reply::Error(e.code().to_string(), e.details().unwrap_or("").to_string())
            }
            Ok(Ok(other)) => Reply::Other(other),
            Ok(Err(e)) if e.code().is_some() && !e.is_io_error() && !e.is_connection_dropped() => {
                Reply::Error(e.code().unwrap_or("ERR").to_string(), e.detail().unwrap_or("").to_string())
            }
            _ => {
                self.conn = None;
                Reply::Lost
            }
        }
    }

    /// `call`, sent again (the same command, so the same request id) while
    /// no answer comes, at most `attempts` times.
    pub async fn call_until_answered(&mut self, cmd: &Cmd, limit: Duration, attempts: usize) -> Reply {
        for _ in 0..attempts {
            let reply = self.call(cmd, limit).await;
            if reply != Reply::Lost {
                return reply;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Reply::Lost
    }
}

/// A command from words.
pub fn command(words: &[&str]) -> Cmd {
    let mut cmd = redis::cmd(words[0]);
    for w in &words[1..] {
        cmd.arg(*w);
    }
    cmd
}
