//! The nodes of one run: N masters (with the module, or plain Redis), each
//! behind its own proxy, optionally each under the wall-clock shim, and
//! optionally one master with a replica; and the fault actions on them.
//! Every action on a process (start, kill, signal, admin commands) runs on
//! a blocking thread.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::proxy::{Mode, Proxy};
use lock_testkit::{cmd, lock_info, replicate, start_all, ClockFile, Opts, Server};

#[derive(Clone, Debug)]
pub struct Spec {
    /// Plain Redis (no module) for the classic recipe.
    pub classic: bool,
    pub nodes: usize,
    /// `lock.quarantine-ms` (module nodes; 0 = none).
    pub quarantine_ms: u64,
    pub aof: bool,
    pub clock: bool,
    /// Each master's wall clock offset at start, ms (under the shim); a
    /// node not listed starts at 0.
    pub clock_offsets: Vec<i64>,
    /// Every node's monotonic clock runs this much fast (ppm; under the shim).
    pub rate_ppm: u32,
    /// More `loadmodule` arguments (`expiry-delay-ms`, ...).
    pub module_args: Vec<(&'static str, String)>,
    /// This master gets a replica (for promotions).
    pub replica_of: Option<usize>,
}

impl Spec {
    fn offset(&self, node: usize) -> i64 {
        self.clock_offsets.get(node).copied().unwrap_or(0)
    }
}

pub struct Member {
    pub server: Server,
    pub clock: Option<ClockFile>,
    /// Runs with AOF always (a scenario's `aof`, or a replica).
    pub aof: bool,
}

pub struct Slot {
    pub master: Member,
    pub replica: Option<Member>,
}

pub struct Cluster {
    pub spec: Spec,
    slots: Arc<Mutex<Vec<Slot>>>,
    pub proxies: Vec<Proxy>,
}

fn opts(spec: &Spec, clock: Option<&ClockFile>, replica: bool) -> Opts {
    // Full syncs start at once (for the replica that follows a promotion).
    let mut o = Opts::new().config("repl-diskless-sync-delay", "0");
    if spec.classic {
        o.without_module = true;
    } else {
        if spec.quarantine_ms > 0 {
            o = o.module_arg("quarantine-ms", &spec.quarantine_ms.to_string());
        }
        for (name, value) in &spec.module_args {
            o = o.module_arg(name, value);
        }
    }
    // A replica runs with AOF always: no start-up quarantine (it starts
    // empty), only the promotion quarantine.
    if spec.aof || replica {
        o = o.aof_always();
    }
    if let Some(clock) = clock {
        o = o.clock_file(clock.path());
    }
    o
}

/// Whether process `pid` runs (not gone, not a zombie waiting to be reaped).
fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the command name in parentheses.
        Ok(stat) => stat.rsplit_once(')').is_some_and(|(_, rest)| !rest.trim_start().starts_with(['Z', 'X'])),
        Err(_) => false,
    }
}

fn real_wall_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as i64
}

/// Waits (bounded) until `server`'s TIME is `offset_ms` from real time.
fn wait_for_clock(server: &Server, offset_ms: i64) {
    let mut c = server.conn();
    let until = Instant::now() + Duration::from_secs(3);
    loop {
        let (secs, micros): (i64, i64) = cmd("TIME").query(&mut c).expect("TIME");
        let skew = secs * 1000 + micros / 1000 - real_wall_ms();
        if (skew - offset_ms).abs() < 100 {
            return;
        }
        assert!(Instant::now() < until, "port {} does not show the clock offset {offset_ms}", server.port);
        std::thread::sleep(Duration::from_millis(5));
    }
}

impl Cluster {
    pub async fn start(spec: Spec, seed: u64) -> Cluster {
        let for_start = spec.clone();
        let slots = tokio::task::spawn_blocking(move || {
            let spec = for_start;
            let clocks: Vec<Option<ClockFile>> = (0..spec.nodes)
                .map(|i| spec.clock.then(|| ClockFile::starting_at(spec.offset(i), spec.rate_ppm)))
                .collect();
            let servers = start_all(clocks.iter().map(|c| opts(&spec, c.as_ref(), false)).collect());
            let mut slots: Vec<Slot> = servers
                .into_iter()
                .zip(clocks)
                .map(|(server, clock)| Slot {
                    master: Member { server, clock, aof: spec.aof },
                    replica: None,
                })
                .collect();
            if !spec.classic && spec.quarantine_ms > 0 && !spec.aof {
                // The nodes have never granted anything: end the start-up
                // quarantine (the documented way), keep the setting for
                // restarts.
                for slot in &slots {
                    let mut c = slot.master.server.conn();
                    for value in ["0".to_string(), spec.quarantine_ms.to_string()] {
                        let _: () = cmd("CONFIG")
                            .arg("SET")
                            .arg("lock.quarantine-ms")
                            .arg(value)
                            .query(&mut c)
                            .unwrap();
                    }
                }
            }
            for (i, slot) in slots.iter().enumerate() {
                if let Some(clock) = &slot.master.clock {
                    wait_for_clock(&slot.master.server, clock.offset());
                }
                debug_assert_eq!(slot.master.clock.as_ref().map_or(0, ClockFile::offset), spec.offset(i));
            }
            if let Some(i) = spec.replica_of {
                let replica = Self::new_replica(&spec, i, &slots[i].master.server);
                slots[i].replica = Some(replica);
            }
            slots
        })
        .await
        .expect("start the nodes");
        let mut proxies = Vec::new();
        for (i, slot) in slots.iter().enumerate() {
            proxies.push(Proxy::start(slot.master.server.port, seed.wrapping_add(1000 + i as u64)).await);
        }
        Cluster { spec, slots: Arc::new(Mutex::new(slots)), proxies }
    }

    fn new_replica(spec: &Spec, node: usize, master: &Server) -> Member {
        // The replica runs on its master's clock: after a promotion the
        // clients' node keeps its place in the spread.
        let clock = spec.clock.then(|| ClockFile::starting_at(spec.offset(node), spec.rate_ppm));
        let server = Server::with(opts(spec, clock.as_ref(), true));
        replicate(&server, master);
        Member { server, clock, aof: true }
    }

    /// The proxies' URLs: what the clients connect to.
    pub fn urls(&self) -> Vec<String> {
        self.proxies.iter().map(|p| p.url()).collect()
    }

    pub async fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Spec, &mut Vec<Slot>) -> T + Send + 'static,
    ) -> T {
        let slots = self.slots.clone();
        let spec = self.spec.clone();
        tokio::task::spawn_blocking(move || {
            let mut slots = slots.lock().unwrap_or_else(|p| p.into_inner());
            f(&spec, &mut slots)
        })
        .await
        .expect("blocking cluster action")
    }

    /// kill -9, `down` later start again (same port, directory, options).
    /// Meanwhile the node's proxy refuses connections (what the clients
    /// would see anyway) instead of trying the dead port: an outgoing
    /// connection could otherwise be given that port (a TCP self-connect)
    /// and keep the node from binding it again.
    pub async fn kill_restart(&self, i: usize, down: Duration) {
        self.proxies[i].set_mode(Mode::Down);
        self.blocking(move |_, slots| {
            slots[i].master.server.kill();
            std::thread::sleep(down);
            slots[i].master.server.restart();
        })
        .await;
        self.proxies[i].heal(true);
    }

    pub async fn signal(&self, i: usize, signal: &'static str) {
        self.blocking(move |_, slots| slots[i].master.server.signal(signal)).await
    }

    pub fn clock_offset(&self, i: usize) -> i64 {
        let slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        slots[i].master.clock.as_ref().map_or(0, ClockFile::offset)
    }

    /// Moves node `i`'s wall clock to `offset_ms` from real time and waits
    /// until the server shows it.
    pub async fn set_clock(&self, i: usize, offset_ms: i64) {
        self.blocking(move |_, slots| {
            let member = &slots[i].master;
            let clock = member.clock.as_ref().expect("node runs under the clock shim");
            clock.set(offset_ms);
            wait_for_clock(&member.server, offset_ms);
        })
        .await
    }

    /// Whether node `i` (its master now) restarts from an AOF.
    pub fn has_aof(&self, i: usize) -> bool {
        self.slots.lock().unwrap_or_else(|p| p.into_inner())[i].master.aof
    }

    pub fn has_replica(&self, i: usize) -> bool {
        self.slots.lock().unwrap_or_else(|p| p.into_inner())[i].replica.is_some()
    }

    /// The replica of `i` stops (SIGSTOP) and the master drops its link:
    /// from now on it misses every write the master acknowledges.
    pub async fn isolate_replica(&self, i: usize) {
        self.blocking(move |_, slots| {
            let slot = &slots[i];
            let replica = slot.replica.as_ref().expect("a replica");
            replica.server.signal("STOP");
            let mut m = slot.master.server.conn();
            let _: i64 = cmd("CLIENT").arg("KILL").arg("TYPE").arg("replica").query(&mut m).unwrap();
        })
        .await
    }

    /// kill -9 the master of `i`, resume its replica, `REPLICAOF NO ONE`,
    /// and point the proxy at it: the clients' node `i` is now the replica.
    pub async fn fail_over(&self, i: usize) {
        let port = self
            .blocking(move |_, slots| {
                let slot = &mut slots[i];
                let replica = slot.replica.take().expect("a replica");
                slot.master.server.kill();
                replica.server.signal("CONT");
                let mut r = replica.server.conn();
                let _: () = cmd("REPLICAOF").arg("NO").arg("ONE").query(&mut r).unwrap();
                let port = replica.server.port;
                let old = std::mem::replace(&mut slot.master, replica);
                drop(old);
                port
            })
            .await;
        self.proxies[i].retarget(port);
    }

    /// A new replica for master `i` (after a promotion), synced.
    pub async fn add_replica(&self, i: usize) {
        self.blocking(move |spec, slots| {
            let replica = Self::new_replica(spec, i, &slots[i].master.server);
            slots[i].replica = Some(replica);
        })
        .await
    }

    /// The base clock offset of node `i` (where a fault's clock step returns).
    pub fn base_offset(&self, i: usize) -> i64 {
        self.spec.offset(i)
    }

    /// Servers whose process has died although no fault killed it (a crash:
    /// a panic that aborted redis-server). Faults kill and restart under the
    /// same lock, so a dead process seen here was not killed by one.
    pub async fn dead(&self) -> Vec<String> {
        self.blocking(|_, slots| {
            let mut dead = Vec::new();
            for (i, slot) in slots.iter().enumerate() {
                let members = std::iter::once(("master", &slot.master))
                    .chain(slot.replica.iter().map(|r| ("replica", r)));
                for (role, member) in members {
                    if !alive(member.server.pid()) {
                        dead.push(format!(
                            "node {i}'s {role} (port {}) died; log: {}",
                            member.server.port,
                            member.server.log()
                        ));
                    }
                }
            }
            dead
        })
        .await
    }

    /// The holder of `key` on node `i`'s master now, asked directly (not
    /// through the proxy); `None` when free.
    pub async fn holder(&self, i: usize, key: &str) -> Option<String> {
        let key = key.to_string();
        self.blocking(move |_, slots| {
            let mut c = slots[i].master.server.conn();
            let fields = lock_info(&mut c, &key)?;
            fields
                .iter()
                .find(|(name, _)| name == "holder")
                .and_then(|(_, v)| redis::from_redis_value(v).ok())
        })
        .await
    }

    /// Runs `words` on node `i`'s master directly (an operator's command,
    /// not through the proxy): the reply, or the error's text.
    pub async fn command(&self, i: usize, words: Vec<String>) -> Result<redis::Value, String> {
        self.command_in(i, "0", words).await
    }

    /// [`Cluster::command`] in database `db`.
    pub async fn command_in(&self, i: usize, db: &str, words: Vec<String>) -> Result<redis::Value, String> {
        let db = db.to_string();
        self.blocking(move |_, slots| {
            let mut c = slots[i].master.server.conn();
            cmd("SELECT").arg(&db).query::<()>(&mut c).map_err(|e| e.to_string())?;
            let mut command = cmd(&words[0]);
            for w in &words[1..] {
                command.arg(w);
            }
            command.query::<redis::Value>(&mut c).map_err(|e| e.to_string())
        })
        .await
    }

    pub fn set_mode(&self, nodes: &[usize], mode: Mode) {
        for &i in nodes {
            self.proxies[i].set_mode(mode);
        }
    }

    pub fn heal(&self, nodes: &[usize], reset: bool) {
        for &i in nodes {
            self.proxies[i].heal(reset);
        }
    }

    /// Stops everything (kills every server) on a blocking thread.
    pub async fn shut_down(self) {
        let Cluster { slots, proxies, .. } = self;
        drop(proxies);
        tokio::task::spawn_blocking(move || drop(slots)).await.expect("shut down");
    }
}
