//! The classic Redlock, for the contrast runs against plain Redis: `SET key
//! token NX PX ttl` on every node in parallel, a majority, validity = ttl -
//! elapsed - drift (the same drift and deadline arithmetic as the quorum
//! client, `redlock_client::quorum`), and a Lua compare-and-delete on every
//! node to release or to undo a failed attempt. No fencing tokens: that is
//! what the recipe does not have.
//!
//! The plumbing matches the quorum client's, so that the comparison is about
//! the protocol and the servers only: one multiplexed (ordered) connection
//! per node, per-command and connect timeouts, a short reconnect backoff.
//! A member spelled `redis+cluster://host:port?addr=host:port` is a whole
//! cluster reached through the redis crate's cluster client (slots,
//! `MOVED`, `ASK`), as users of the recipe do through their cluster
//! clients: one vote, like a master. A member spelled
//! `redis+sentinel://host:port/master-name?addr=host:port` is a master
//! under Sentinel, found as Sentinel-aware clients find it: the Sentinels
//! are asked for the master's address (`SENTINEL GET-MASTER-ADDR-BY-NAME`,
//! the first that answers), the connection goes there, and a failed call
//! makes the next one ask again (so it follows a failover).
//!
//! The same plumbing also runs the second contrast, the semaphore a plain
//! majority cannot bound: `LOCK.SEMAPHORE` on every module node, counted as
//! held at a majority (not at floor(L*N/(L+1))+1 as the quorum client
//! does), released with `LOCK.RELEASE`.

use std::time::{Duration, Instant};

use futures_util::future::join_all;
use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::{AsyncConnectionConfig, Client, Cmd, RedisResult, Value};
use redlock_client::{quorum, Config};
use tokio::sync::Mutex;
use tokio::time::timeout;

const UNLOCK: &str =
    "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end";

enum Reply {
    Value(Value),
    TimedOut,
    Unreachable,
    Error,
}

#[derive(Default)]
struct Slot {
    conn: Option<Conn>,
    generation: u64,
    failed_at: Option<Instant>,
}

/// How a member is reached: one master, a cluster through its seeds, or
/// the master the Sentinels name.
enum Target {
    Master(Client),
    Cluster(ClusterClient),
    Sentinel { sentinels: Vec<Client>, name: String },
}

#[derive(Clone)]
enum Conn {
    Master(MultiplexedConnection),
    Cluster(ClusterConnection),
}

impl Conn {
    async fn request(&mut self, cmd: &Cmd) -> RedisResult<Value> {
        match self {
            Conn::Master(conn) => conn.req_packed_command(cmd).await,
            Conn::Cluster(conn) => conn.req_packed_command(cmd).await,
        }
    }
}

impl Target {
    /// A member as the quorum client spells it (`redis://...` or
    /// `redis+cluster://host:port?addr=host:port...`).
    fn parse(url: &str, config: &Config) -> Target {
        if let Some(rest) = url.strip_prefix("redis+sentinel://") {
            let (first, query) = rest.split_once('?').unwrap_or((rest, ""));
            let (first, name) = first.split_once('/').expect("redis+sentinel://host:port/master-name");
            let sentinels = addresses(first, query)
                .iter()
                .map(|addr| Client::open(addr.as_str()).expect("Sentinel address"))
                .collect();
            return Target::Sentinel { sentinels, name: name.to_string() };
        }
        let Some(rest) = url.strip_prefix("redis+cluster://") else {
            return Target::Master(Client::open(url).expect("node url"));
        };
        let (first, query) = rest.split_once('?').unwrap_or((rest, ""));
        let seeds = addresses(first.trim_end_matches('/'), query);
        let client = ClusterClient::builder(seeds)
            .connection_timeout(config.connect_timeout)
            .response_timeout(config.command_timeout)
            .retries(2)
            .build()
            .expect("cluster seeds");
        Target::Cluster(client)
    }

    async fn open(&self) -> RedisResult<Conn> {
        match self {
            Target::Master(client) => client
                .get_multiplexed_async_connection_with_config(&AsyncConnectionConfig::new())
                .await
                .map(Conn::Master),
            Target::Cluster(client) => client.get_async_connection().await.map(Conn::Cluster),
            Target::Sentinel { sentinels, name } => {
                let mut ask = redis::cmd("SENTINEL");
                ask.arg("GET-MASTER-ADDR-BY-NAME").arg(name);
                let mut failure = None;
                for sentinel in sentinels {
                    let named: RedisResult<(String, u16)> = async {
                        let mut conn = sentinel.get_multiplexed_async_connection().await?;
                        ask.query_async(&mut conn).await
                    }
                    .await;
                    match named {
                        Ok((host, port)) => {
                            let master = Client::open(format!("redis://{host}:{port}/"))?;
                            return master
                                .get_multiplexed_async_connection_with_config(&AsyncConnectionConfig::new())
                                .await
                                .map(Conn::Master);
                        }
                        Err(e) => failure = Some(e),
                    }
                }
                Err(failure.unwrap_or_else(|| (redis::ErrorKind::IoError, "no Sentinel").into()))
            }
        }
    }
}

/// `redis://` addresses of `first` and of every `addr=` in `query`.
fn addresses(first: &str, query: &str) -> Vec<String> {
    let mut all = vec![format!("redis://{first}")];
    all.extend(
        query.split('&').filter_map(|pair| pair.strip_prefix("addr=")).map(|a| format!("redis://{a}")),
    );
    all
}

struct Node {
    target: Target,
    slot: Mutex<Slot>,
}

/// What the contrast client sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Recipe {
    /// `SET key token NX PX ttl` over plain Redis, Lua compare-and-delete.
    SetNx,
    /// `LOCK.SEMAPHORE key token permits ttl` over module nodes, held at a
    /// majority.
    MajoritySemaphore { permits: u32 },
}

pub struct Classic {
    nodes: Vec<Node>,
    config: Config,
    recipe: Recipe,
}

/// A lock held by the classic recipe: no fencing token.
pub struct ClassicLock {
    pub token: String,
    pub deadline: Instant,
}

impl Node {
    async fn connection(&self, config: &Config) -> Option<(Conn, u64)> {
        let mut slot = timeout(config.connect_timeout, self.slot.lock()).await.ok()?;
        if let Some(conn) = &slot.conn {
            return Some((conn.clone(), slot.generation));
        }
        if slot.failed_at.is_some_and(|at| at.elapsed() < config.reconnect_backoff) {
            return None;
        }
        let opened = timeout(config.connect_timeout, self.target.open()).await;
        match opened {
            Ok(Ok(conn)) => {
                slot.generation += 1;
                slot.failed_at = None;
                slot.conn = Some(conn.clone());
                Some((conn, slot.generation))
            }
            _ => {
                slot.failed_at = Some(Instant::now());
                None
            }
        }
    }

    async fn call(&self, cmd: &Cmd, config: &Config, command_timeout: Duration) -> Reply {
        let Some((mut conn, generation)) = self.connection(config).await else { return Reply::Unreachable };
        // A cluster client that failed is opened again: it reads the slots
        // afresh (as cluster clients refresh their topology on errors); a
        // Sentinel member's asks the Sentinels again.
        let reopen = !matches!(self.target, Target::Master(_));
        match timeout(command_timeout, conn.request(cmd)).await {
            Err(_) => {
                if reopen {
                    self.forget(generation).await;
                }
                Reply::TimedOut
            }
            Ok(Ok(Value::ServerError(_))) => Reply::Error,
            Ok(Ok(value)) => Reply::Value(value),
            Ok(Err(e)) => {
                if reopen
                    || e.is_io_error()
                    || e.is_connection_dropped()
                    || e.is_connection_refusal()
                    || e.is_unrecoverable_error()
                {
                    self.forget(generation).await;
                    Reply::Unreachable
                } else {
                    Reply::Error
                }
            }
        }
    }

    /// Drops connection `generation` (if still the current one): the next
    /// call opens a new one.
    async fn forget(&self, generation: u64) {
        let mut slot = self.slot.lock().await;
        if slot.generation == generation {
            slot.conn = None;
        }
    }
}

impl Classic {
    pub async fn connect(urls: &[String], config: Config, recipe: Recipe) -> Classic {
        let nodes: Vec<Node> = urls
            .iter()
            .map(|url| Node { target: Target::parse(url, &config), slot: Mutex::default() })
            .collect();
        join_all(nodes.iter().map(|n| n.connection(&config))).await;
        Classic { nodes, config, recipe }
    }

    /// One attempt. `Err((definite, why))`: `definite` when every node
    /// answered (the attempt certainly left nothing held).
    pub async fn try_acquire(&self, resource: &str, ttl: Duration) -> Result<ClassicLock, (bool, String)> {
        let token = quorum::token_from_bits(rand::random());
        let ttl_ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX);
        let cmd = match self.recipe {
            Recipe::SetNx => {
                let mut cmd = redis::cmd("SET");
                cmd.arg(resource).arg(&token).arg("NX").arg("PX").arg(ttl_ms);
                cmd
            }
            Recipe::MajoritySemaphore { permits } => {
                let mut cmd = redis::cmd("LOCK.SEMAPHORE");
                cmd.arg(resource).arg(&token).arg(permits).arg(ttl_ms);
                cmd
            }
        };
        let start = Instant::now();
        let per_node = self.config.command_timeout.min(ttl);
        let replies = join_all(self.nodes.iter().map(|n| n.call(&cmd, &self.config, per_node))).await;
        let elapsed = start.elapsed();
        let granted = replies
            .iter()
            .filter(|r| {
                matches!(r, Reply::Value(Value::Okay)) || matches!(r, Reply::Value(Value::Int(t)) if *t > 0)
            })
            .count();
        let answered = replies.iter().filter(|r| matches!(r, Reply::Value(_))).count();
        let timed_out = replies.iter().filter(|r| matches!(r, Reply::TimedOut)).count();
        let unreachable = replies.iter().filter(|r| matches!(r, Reply::Unreachable)).count();
        let errors = replies.iter().filter(|r| matches!(r, Reply::Error)).count();
        let majority = quorum::majority(self.nodes.len());
        if granted >= majority && quorum::validity(ttl, elapsed).is_some() {
            return Ok(ClassicLock { token, deadline: quorum::deadline(start.into(), ttl).into_std() });
        }
        self.release_all(resource, &token).await;
        let why = format!(
            "{granted} of {} granted (need {majority}); {} held; {unreachable} unreachable; \
             {timed_out} timed out; {errors} errors; {} ms elapsed",
            self.nodes.len(),
            answered - granted,
            elapsed.as_millis()
        );
        Err((answered == self.nodes.len(), why))
    }

    /// PING on every node: how many answered.
    pub async fn ping_all(&self) -> usize {
        let cmd = redis::cmd("PING");
        let replies =
            join_all(self.nodes.iter().map(|n| n.call(&cmd, &self.config, self.config.command_timeout)))
                .await;
        replies.iter().filter(|r| matches!(r, Reply::Value(_))).count()
    }

    pub fn nodes(&self) -> usize {
        self.nodes.len()
    }

    /// The compare-and-delete (or `LOCK.RELEASE`) on every node; the number
    /// that deleted.
    pub async fn release_all(&self, resource: &str, token: &str) -> usize {
        let cmd = match self.recipe {
            Recipe::SetNx => {
                let mut cmd = redis::cmd("EVAL");
                cmd.arg(UNLOCK).arg(1).arg(resource).arg(token);
                cmd
            }
            Recipe::MajoritySemaphore { .. } => {
                let mut cmd = redis::cmd("LOCK.RELEASE");
                cmd.arg(resource).arg(token);
                cmd
            }
        };
        let replies =
            join_all(self.nodes.iter().map(|n| n.call(&cmd, &self.config, self.config.command_timeout)))
                .await;
        replies.iter().filter(|r| matches!(r, Reply::Value(Value::Int(1)))).count()
    }
}
