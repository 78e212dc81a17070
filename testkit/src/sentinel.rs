//! A master with replicas under Redis Sentinel, as production runs it: a
//! master and its replicas with the module, and Sentinel processes (the
//! server binary in `--sentinel` mode, each with its own config file, which
//! Sentinel rewrites) watching it. Every process on a free loopback port in
//! its own directory, killed by PID when dropped.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

use redis::{cmd, Connection, Value};

use crate::{fast_sync, free_port, fresh_dir, replicate, server_bin, wait_until, Opts, Server};

/// The master's name the Sentinels monitor.
pub const SENTINEL_MASTER: &str = "locks";

/// How long a Sentinel waits before it calls the master down; the tests'
/// failovers take about this plus an election.
pub const DOWN_AFTER_MS: u64 = 1000;

/// One Sentinel process.
pub struct SentinelProcess {
    pub port: u16,
    pub dir: PathBuf,
    child: Option<Child>,
}

impl SentinelProcess {
    fn start(master_port: u16, quorum: usize) -> SentinelProcess {
        let dir = fresh_dir("sentinel");
        let port = free_port();
        let conf = dir.join("sentinel.conf");
        let text = format!(
            "port {port}\nbind 127.0.0.1\nprotected-mode no\ndaemonize no\ndir {dir}\nlogfile {log}\n\
             sentinel monitor {SENTINEL_MASTER} 127.0.0.1 {master_port} {quorum}\n\
             sentinel down-after-milliseconds {SENTINEL_MASTER} {DOWN_AFTER_MS}\n\
             sentinel failover-timeout {SENTINEL_MASTER} 10000\n\
             sentinel parallel-syncs {SENTINEL_MASTER} 1\n",
            dir = dir.display(),
            log = dir.join("sentinel.log").display()
        );
        std::fs::write(&conf, text).unwrap_or_else(|e| panic!("write {}: {e}", conf.display()));
        let child = Command::new(server_bin())
            .arg(&conf)
            .arg("--sentinel")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("spawn a Sentinel: {e}"));
        let mut sentinel = SentinelProcess { port, dir, child: Some(child) };
        wait_until(Duration::from_secs(10), "the Sentinel to answer", || sentinel.try_conn().is_ok());
        sentinel.assert_running();
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

    /// The master's port this Sentinel names now.
    pub fn master_port(&self) -> Option<u16> {
        let reply: Value = cmd("SENTINEL")
            .arg("GET-MASTER-ADDR-BY-NAME")
            .arg(SENTINEL_MASTER)
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

    /// How many of the master's replicas, and of the other Sentinels, this
    /// one knows.
    fn known(&self) -> (usize, usize) {
        let Ok(mut c) = self.try_conn() else { return (0, 0) };
        let count = |what: &str, c: &mut Connection| {
            cmd("SENTINEL").arg(what).arg(SENTINEL_MASTER).query::<Vec<Value>>(c).map_or(0, |v| v.len())
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
    }
}

/// A master, its replicas and the Sentinels watching them.
pub struct SentinelGroup {
    /// Every data node: the first started as the master.
    pub nodes: Vec<Server>,
    pub sentinels: Vec<SentinelProcess>,
}

impl SentinelGroup {
    /// `replicas` replicas and `sentinels` Sentinels (a majority of them
    /// must agree that the master is down), every data node with `opts`
    /// (the module loaded), each replica linked, every Sentinel knowing
    /// every replica and every other Sentinel (else a failover cannot be
    /// authorized).
    pub fn start(opts: Opts, replicas: usize, sentinels: usize) -> SentinelGroup {
        let started = Instant::now();
        let mut opts = opts;
        opts.config.extend(fast_sync().config);
        let master = Server::with(opts.clone());
        let mut nodes = vec![master];
        for _ in 0..replicas {
            let replica = Server::with(opts.clone());
            replicate(&replica, &nodes[0]);
            nodes.push(replica);
        }
        let quorum = sentinels / 2 + 1;
        let sentinels: Vec<SentinelProcess> =
            (0..sentinels).map(|_| SentinelProcess::start(nodes[0].port, quorum)).collect();
        let others = sentinels.len() - 1;
        wait_until(Duration::from_secs(30), "every Sentinel to know every replica and Sentinel", || {
            sentinels.iter().all(|s| s.known() == (replicas, others))
        });
        eprintln!(
            "sentinel group: master {}, replicas {:?}, Sentinels {:?}, ready after {:?}",
            nodes[0].port,
            nodes[1..].iter().map(|n| n.port).collect::<Vec<_>>(),
            sentinels.iter().map(|s| s.port).collect::<Vec<_>>(),
            started.elapsed()
        );
        SentinelGroup { nodes, sentinels }
    }

    /// The member's URL: every Sentinel, the master's name.
    pub fn url(&self) -> String {
        let first = &self.sentinels[0];
        let rest: Vec<String> =
            self.sentinels[1..].iter().map(|s| format!("addr=127.0.0.1:{}", s.port)).collect();
        format!("redis+sentinel://127.0.0.1:{}/{SENTINEL_MASTER}?{}", first.port, rest.join("&"))
    }

    /// The index in `nodes` of the master the Sentinels name now (the
    /// first Sentinel that answers).
    pub fn master_index(&self) -> Option<usize> {
        let port = self.sentinels.iter().find_map(SentinelProcess::master_port)?;
        self.nodes.iter().position(|n| n.port == port)
    }

    /// SIGKILL of the master, then the wait (bounded) until every Sentinel
    /// names another node and that node says it is a master. Returns the
    /// new master's index and how long the failover took.
    pub fn kill_master_and_wait_failover(&mut self) -> (usize, Duration) {
        let old = self.master_index().expect("a master");
        let killed_at = Instant::now();
        self.nodes[old].kill();
        let old_port = self.nodes[old].port;
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let named: Vec<Option<u16>> = self.sentinels.iter().map(SentinelProcess::master_port).collect();
            if let Some(Some(port)) = named.first() {
                if *port != old_port && named.iter().all(|n| *n == Some(*port)) {
                    if let Some(i) = self.nodes.iter().position(|n| n.port == *port) {
                        if crate::role(&self.nodes[i]) == "master" {
                            return (i, killed_at.elapsed());
                        }
                    }
                }
            }
            assert!(Instant::now() < deadline, "no failover within 60 s: Sentinels name {named:?}");
            sleep(Duration::from_millis(50));
        }
    }
}
