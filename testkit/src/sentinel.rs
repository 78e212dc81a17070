//! Masters with replicas under Redis Sentinel, as production runs them:
//! each master and its replicas with the module, and Sentinel processes
//! (the server binary in `--sentinel` mode, each with its own config file,
//! which Sentinel rewrites) watching them. One set of Sentinels may watch
//! several masters (each under its own name, [`master_name`]), as one
//! Sentinel deployment watches many: the fault suite's Sentinel members
//! share theirs, which keeps its process count down. Optionally every
//! process also opens a TLS port, and the Sentinels speak TLS to the data
//! nodes and to each other (`tls-replication yes`). Every process on free
//! loopback ports in its own directory, killed by PID when dropped.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

use redis::{cmd, Connection, Value};

use crate::ports::give_back;
use crate::{fast_sync, free_port, fresh_dir, replicate_to, server_bin, wait_until, Opts, Server, TlsPort};

/// The first master's name the Sentinels monitor (the others':
/// [`master_name`]).
pub const SENTINEL_MASTER: &str = "locks";

/// How long a Sentinel waits before it calls a master down, by default;
/// the tests' failovers take about this plus an election.
pub const DOWN_AFTER_MS: u64 = 1000;

/// The name the Sentinels monitor master `m` under: `locks`, `locks-1`,
/// `locks-2`, ...
pub fn master_name(m: usize) -> String {
    if m == 0 {
        SENTINEL_MASTER.to_string()
    } else {
        format!("{SENTINEL_MASTER}-{m}")
    }
}

/// How to start a [`SentinelGroup`].
#[derive(Clone, Debug)]
pub struct SentinelSpec {
    /// Every data node's options (the module and its settings).
    pub opts: Opts,
    /// Masters the Sentinels watch, each with `replicas` replicas.
    pub masters: usize,
    pub replicas: usize,
    pub sentinels: usize,
    /// `sentinel down-after-milliseconds`.
    pub down_after_ms: u64,
    /// `sentinel failover-timeout`: how long an election may take before
    /// the Sentinels give that attempt up, and half the wait before they
    /// try the same master again after an attempt that failed.
    pub failover_timeout_ms: u64,
    /// A TLS port on every data node and Sentinel, showing this
    /// certificate; the Sentinels and the replicas reach the data nodes
    /// over it, so the addresses the Sentinels give are TLS ports.
    pub tls: Option<TlsPort>,
    /// Sentinel's own timers (`SENTINEL DEBUG` `info-period`,
    /// `ping-period`, `ask-period`, `publish-period`), all set to this
    /// many ms; `None`: its defaults (10 s, 1 s, 1 s, 2 s). A failover
    /// waits for a replica's `INFO` and an election's asks, and an old
    /// master that comes back is turned into a replica 4 publish periods
    /// after it is seen: shorter periods fit both into a test of seconds.
    pub periods_ms: Option<u64>,
}

impl SentinelSpec {
    /// One master with `replicas` replicas, `sentinels` Sentinels, the
    /// default timings, no TLS.
    pub fn new(opts: Opts, replicas: usize, sentinels: usize) -> SentinelSpec {
        SentinelSpec {
            opts,
            masters: 1,
            replicas,
            sentinels,
            down_after_ms: DOWN_AFTER_MS,
            failover_timeout_ms: 10_000,
            tls: None,
            periods_ms: None,
        }
    }

    pub fn masters(mut self, masters: usize) -> SentinelSpec {
        self.masters = masters;
        self
    }

    pub fn down_after_ms(mut self, ms: u64) -> SentinelSpec {
        self.down_after_ms = ms;
        self
    }

    pub fn failover_timeout_ms(mut self, ms: u64) -> SentinelSpec {
        self.failover_timeout_ms = ms;
        self
    }

    pub fn tls(mut self, port: TlsPort) -> SentinelSpec {
        self.tls = Some(port);
        self
    }

    pub fn periods_ms(mut self, ms: u64) -> SentinelSpec {
        self.periods_ms = Some(ms);
        self
    }
}

/// One Sentinel process.
pub struct SentinelProcess {
    pub port: u16,
    /// Its TLS port, when the group runs over TLS.
    pub tls_port: Option<u16>,
    pub dir: PathBuf,
    child: Option<Child>,
}

impl SentinelProcess {
    /// A Sentinel watching `masters` (name, address port), `quorum` of the
    /// Sentinels needed to call one down.
    fn start(spec: &SentinelSpec, masters: &[(String, u16)], quorum: usize) -> SentinelProcess {
        let dir = fresh_dir("sentinel");
        let port = free_port();
        let tls_port = spec.tls.as_ref().map(|_| free_port());
        let conf = dir.join("sentinel.conf");
        let mut text = format!(
            "port {port}\nbind 127.0.0.1\nprotected-mode no\ndaemonize no\ndir {dir}\nlogfile {log}\n",
            dir = dir.display(),
            log = dir.join("sentinel.log").display()
        );
        if spec.tls.is_some() {
            // Outgoing connections (to the data nodes, to the other
            // Sentinels) over TLS too; the kit's own stay on the plain port.
            text.push_str("tls-replication yes\n");
        }
        for (name, master_port) in masters {
            text.push_str(&format!(
                "sentinel monitor {name} 127.0.0.1 {master_port} {quorum}\n\
                 sentinel down-after-milliseconds {name} {}\n\
                 sentinel failover-timeout {name} {}\n\
                 sentinel parallel-syncs {name} 1\n",
                spec.down_after_ms, spec.failover_timeout_ms
            ));
        }
        std::fs::write(&conf, text).unwrap_or_else(|e| panic!("write {}: {e}", conf.display()));
        let mut command = Command::new(server_bin());
        command.arg(&conf).arg("--sentinel");
        if let (Some(tls), Some(tls_port)) = (&spec.tls, tls_port) {
            command.args(tls.args(tls_port));
        }
        let child = command
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("spawn a Sentinel: {e}"));
        let mut sentinel = SentinelProcess { port, tls_port, dir, child: Some(child) };
        wait_until(Duration::from_secs(10), "the Sentinel to answer", || sentinel.try_conn().is_ok());
        sentinel.assert_running();
        if let Some(period) = spec.periods_ms {
            let mut debug = cmd("SENTINEL");
            debug.arg("DEBUG");
            for name in ["info-period", "ping-period", "ask-period", "publish-period"] {
                debug.arg(name).arg(period);
            }
            let _: () = debug.query(&mut sentinel.conn()).unwrap_or_else(|e| panic!("SENTINEL DEBUG: {e}"));
        }
        sentinel
    }

    fn assert_running(&mut self) {
        if let Some(child) = self.child.as_mut() {
            if let Ok(Some(status)) = child.try_wait() {
                let log = std::fs::read_to_string(self.dir.join("sentinel.log")).unwrap_or_default();
                panic!("the Sentinel on {} exited ({status}): {log}", self.port);
            }
        }
    }

    fn try_conn(&self) -> redis::RedisResult<Connection> {
        let client = redis::Client::open(format!("redis://127.0.0.1:{}/", self.port))?;
        let c = client.get_connection_with_timeout(Duration::from_secs(2))?;
        c.set_read_timeout(Some(Duration::from_secs(5)))?;
        Ok(c)
    }

    pub fn conn(&self) -> Connection {
        self.try_conn().unwrap_or_else(|e| panic!("connect to the Sentinel on {}: {e}", self.port))
    }

    /// The first master's port this Sentinel names now.
    pub fn master_port(&self) -> Option<u16> {
        self.master_port_of(SENTINEL_MASTER)
    }

    /// The port this Sentinel names now for the master called `name`.
    pub fn master_port_of(&self, name: &str) -> Option<u16> {
        let reply: Value = cmd("SENTINEL")
            .arg("GET-MASTER-ADDR-BY-NAME")
            .arg(name)
            .query(&mut self.try_conn().ok()?)
            .ok()?;
        match reply {
            Value::Array(parts) => match parts.get(1) {
                Some(Value::BulkString(port)) => std::str::from_utf8(port).ok()?.parse().ok(),
                _ => None,
            },
            _ => None,
        }
    }

    /// How many of master `name`'s replicas, and of the other Sentinels,
    /// this one knows.
    fn known(&self, name: &str) -> (usize, usize) {
        let Ok(mut c) = self.try_conn() else { return (0, 0) };
        let count = |what: &str, c: &mut Connection| {
            cmd("SENTINEL").arg(what).arg(name).query::<Vec<Value>>(c).map_or(0, |v| v.len())
        };
        (count("REPLICAS", &mut c), count("SENTINELS", &mut c))
    }
}

impl Drop for SentinelProcess {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        } else {
            eprintln!("Sentinel {} kept its dir for inspection: {}", self.port, self.dir.display());
        }
        give_back(self.port);
        if let Some(port) = self.tls_port {
            give_back(port);
        }
    }
}

/// Masters, their replicas and the Sentinels watching them.
pub struct SentinelGroup {
    /// Every data node, master by master: master `m`'s are
    /// `nodes_of(m)`, the first of them started as its master.
    pub nodes: Vec<Server>,
    pub sentinels: Vec<SentinelProcess>,
    pub spec: SentinelSpec,
}

impl SentinelGroup {
    /// One master, `replicas` replicas and `sentinels` Sentinels (a
    /// majority of them must agree that the master is down), every data
    /// node with `opts` (the module loaded): [`SentinelGroup::with`].
    pub fn start(opts: Opts, replicas: usize, sentinels: usize) -> SentinelGroup {
        SentinelGroup::with(SentinelSpec::new(opts, replicas, sentinels))
    }

    /// The masters, each replica linked, and the Sentinels; returns once
    /// every Sentinel knows every replica and every other Sentinel (else a
    /// failover cannot be authorized).
    pub fn with(spec: SentinelSpec) -> SentinelGroup {
        let started = Instant::now();
        let mut opts = spec.opts.clone();
        opts.config.extend(fast_sync().config);
        if let Some(tls) = &spec.tls {
            // Replicas reach their master over TLS, and announce their TLS
            // port to it (what the Sentinels then give out).
            opts = opts.tls(tls.clone()).config("tls-replication", "yes");
        }
        let mut nodes = Vec::new();
        for _ in 0..spec.masters {
            let master = Server::with(opts.clone());
            let replicas: Vec<Server> = (0..spec.replicas)
                .map(|_| {
                    let replica = Server::with(opts.clone());
                    replicate_to(&replica, announced(&master));
                    replica
                })
                .collect();
            nodes.push(master);
            nodes.extend(replicas);
        }
        let watched: Vec<(String, u16)> =
            (0..spec.masters).map(|m| (master_name(m), announced(&nodes[m * (1 + spec.replicas)]))).collect();
        let quorum = spec.sentinels / 2 + 1;
        let sentinels: Vec<SentinelProcess> =
            (0..spec.sentinels).map(|_| SentinelProcess::start(&spec, &watched, quorum)).collect();
        let others = sentinels.len() - 1;
        wait_until(Duration::from_secs(30), "every Sentinel to know every replica and Sentinel", || {
            sentinels.iter().all(|s| watched.iter().all(|(name, _)| s.known(name) == (spec.replicas, others)))
        });
        eprintln!(
            "sentinel group: masters {:?}, data nodes {:?}, Sentinels {:?}, ready after {:?}",
            watched,
            nodes.iter().map(|n| n.port).collect::<Vec<_>>(),
            sentinels.iter().map(|s| s.port).collect::<Vec<_>>(),
            started.elapsed()
        );
        SentinelGroup { nodes, sentinels, spec }
    }

    /// Master `m`'s data nodes (the master it started with first).
    pub fn nodes_of(&self, m: usize) -> std::ops::Range<usize> {
        let size = 1 + self.spec.replicas;
        m * size..(m + 1) * size
    }

    /// The first master's member URL: every Sentinel, the master's name.
    pub fn url(&self) -> String {
        self.url_of(0)
    }

    /// Master `m`'s member URL (`redis+sentinel://`, the Sentinels' plain
    /// ports).
    pub fn url_of(&self, m: usize) -> String {
        self.member("redis+sentinel", "127.0.0.1", m, |s| s.port)
    }

    /// Master `m`'s member URL over TLS (`rediss+sentinel://`, the
    /// Sentinels' TLS ports at `host`).
    pub fn tls_url_of(&self, m: usize, host: &str) -> String {
        self.member("rediss+sentinel", host, m, |s| s.tls_port.expect("a group started with TLS"))
    }

    fn member(&self, scheme: &str, host: &str, m: usize, port: impl Fn(&SentinelProcess) -> u16) -> String {
        let first = &self.sentinels[0];
        let rest: Vec<String> =
            self.sentinels[1..].iter().map(|s| format!("addr={host}:{}", port(s))).collect();
        format!("{scheme}://{host}:{}/{}?{}", port(first), master_name(m), rest.join("&"))
    }

    /// The index in `nodes` of the first master the Sentinels name now.
    pub fn master_index(&self) -> Option<usize> {
        self.master_index_of(0)
    }

    /// The index in `nodes` of master `m` as the Sentinels name it now
    /// (the first Sentinel that answers).
    pub fn master_index_of(&self, m: usize) -> Option<usize> {
        let name = master_name(m);
        let port = self.sentinels.iter().find_map(|s| s.master_port_of(&name))?;
        self.index_at(port)
    }

    /// The node whose address (as the Sentinels give it) is `port`.
    fn index_at(&self, port: u16) -> Option<usize> {
        self.nodes.iter().position(|n| announced(n) == port)
    }

    /// SIGKILL of the first master, then [`SentinelGroup::wait_failover`].
    pub fn kill_master_and_wait_failover(&mut self) -> (usize, Duration) {
        self.kill_master_and_wait_failover_of(0)
    }

    /// SIGKILL of master `m`, then the wait (bounded: 60 s) for its
    /// failover. Returns the new master's index and how long the failover
    /// took.
    pub fn kill_master_and_wait_failover_of(&mut self, m: usize) -> (usize, Duration) {
        let old = self.master_index_of(m).expect("a master");
        let killed_at = Instant::now();
        self.nodes[old].kill();
        match self.wait_failover(m, old, Duration::from_secs(60)) {
            Ok(promoted) => (promoted, killed_at.elapsed()),
            Err(why) => panic!("{why}"),
        }
    }

    /// Waits (at most `within`) until every Sentinel names another node
    /// than `old` for master `m` and that node says it is a master: the
    /// new master's index, or why not.
    pub fn wait_failover(&self, m: usize, old: usize, within: Duration) -> Result<usize, String> {
        let name = master_name(m);
        let old_port = announced(&self.nodes[old]);
        let deadline = Instant::now() + within;
        loop {
            let named: Vec<Option<u16>> = self.sentinels.iter().map(|s| s.master_port_of(&name)).collect();
            if let Some(Some(port)) = named.first() {
                if *port != old_port && named.iter().all(|n| *n == Some(*port)) {
                    if let Some(i) = self.index_at(*port) {
                        if self.nodes[i].is_running() && crate::role(&self.nodes[i]) == "master" {
                            return Ok(i);
                        }
                    }
                }
            }
            if Instant::now() >= deadline {
                return Err(format!("{name}: no failover within {within:?}: Sentinels name {named:?}"));
            }
            sleep(Duration::from_millis(20));
        }
    }
}

/// The port a data node is reached at: its TLS port when it has one (the
/// group's replication and Sentinels then use it).
fn announced(node: &Server) -> u16 {
    node.tls_port.unwrap_or(node.port)
}
