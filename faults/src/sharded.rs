//! The members of a run whose quorum has cluster or Sentinel members:
//! real Redis / Valkey Clusters (the test kit's [`RedisCluster`], every
//! node with the module, `appendfsync always`, a failover quarantine),
//! masters with a replica under Redis Sentinel (the kit's
//! [`SentinelGroup`]: one set of three Sentinels watches every such
//! member's master, as one Sentinel deployment watches many; the same
//! node settings), and plain masters beside them; and the faults done
//! inside a member: a slot migrated under load (`MIGRATE`, or Valkey's
//! atomic `CLUSTER MIGRATESLOTS`), a shard's master killed and its replica
//! promoted (the old master then restarts and rejoins as a replica), a
//! shard's master paused (a partition of that shard from everyone), the
//! connections to a migrating slot's two masters cut (the replies to
//! redirected calls lost), and a Sentinel member's master killed, its
//! replica promoted by the Sentinels (the old master restarted: the
//! Sentinels turn it into a replica). Every action on a process runs on a
//! blocking thread.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use lock_testkit::{
    cmd, role, server_version, ClusterSpec, Opts, RedisCluster, SentinelGroup, SentinelSpec, Server,
};

/// How to start the members.
#[derive(Clone, Debug)]
pub struct Spec {
    /// Cluster members, each of this many shards (a master and a replica).
    pub clusters: usize,
    pub shards: usize,
    /// Sentinel members (a master and a replica each), after the clusters.
    pub sentinels: usize,
    /// Plain masters beside them.
    pub masters: usize,
    /// `lock.quarantine-ms` (every node runs with `appendfsync always`: no
    /// start-up quarantine; a promoted replica quarantines this long).
    pub quarantine_ms: u64,
    /// `cluster-node-timeout`.
    pub node_timeout_ms: u64,
    /// The Sentinels' `down-after-milliseconds`.
    pub down_after_ms: u64,
    /// The lock module on every node (not for the classic recipe's run:
    /// plain Redis, as its users run it).
    pub module: bool,
}

pub struct Sharded {
    pub spec: Spec,
    clusters: Vec<Arc<Mutex<RedisCluster>>>,
    /// The Sentinel members' data nodes and the Sentinels watching them.
    sentinels: Option<Arc<Mutex<SentinelGroup>>>,
    masters: Vec<Server>,
    members: Vec<String>,
}

/// What a member that is not a plain master is.
#[derive(Clone, Copy)]
enum Kind {
    /// A cluster member.
    Cluster,
    /// The Sentinel group's master `m`.
    Sentinel(usize),
}

/// Sentinel's timers in the Sentinel members (`SentinelSpec::periods_ms`):
/// a failover in 1.3-1.9 s, an old master back as a replica about 1.3 s
/// after its restart (measured on a loaded 2-core machine), where the
/// defaults take 2-2.6 s and 10 s or more.
const SENTINEL_PERIODS_MS: u64 = 250;
/// How long a Sentinel failover may take before the harness gives up.
const FAILOVER_DEADLINE: Duration = Duration::from_secs(15);

fn opts(spec: &Spec) -> Opts {
    let mut opts = Opts::new().aof_always().config("cluster-require-full-coverage", "no");
    if spec.module {
        opts = opts.module_arg("quarantine-ms", &spec.quarantine_ms.to_string());
    } else {
        opts.without_module = true;
    }
    opts
}

fn lock<T>(held: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    held.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The index in `nodes` of the node at `port` (one the harness started).
fn index_of(nodes: &[Server], port: u16) -> usize {
    nodes.iter().position(|n| n.port == port).unwrap_or_else(|| panic!("no node at port {port}"))
}

/// Master `m` of the Sentinel group as the Sentinels name it now, and its
/// replicas (the other nodes of that member that say they replicate it).
fn sentinel_master(group: &SentinelGroup, m: usize) -> Result<(usize, Vec<usize>), String> {
    let master = group.master_index_of(m).ok_or_else(|| format!("no Sentinel names master {m}"))?;
    let port = group.nodes[master].port;
    let replicas = group
        .nodes_of(m)
        .filter(|&i| i != master && group.nodes[i].is_running())
        .filter(|&i| {
            let info: String =
                cmd("INFO").arg("replication").query(&mut group.nodes[i].conn()).unwrap_or_default();
            info.contains("role:slave")
                && info.contains(&format!("master_port:{port}"))
                && info.contains("master_link_status:up")
        })
        .collect();
    Ok((master, replicas))
}

/// A slot migration inside one cluster: `key`'s slot, from the master
/// that serves it to another master (by port).
#[derive(Clone, Copy)]
struct Migration {
    slot: u16,
    from: u16,
    to: u16,
}

impl Migration {
    /// Where `key`'s slot would move; `Err`: what to report when the
    /// cluster has no other master.
    fn plan(cluster: &RedisCluster, key: &str) -> Result<Migration, String> {
        let slot = cluster.slot(key);
        let from = cluster.master_of_slot(slot).port;
        match cluster.masters().iter().map(|m| m.port).find(|&p| p != from) {
            Some(to) => Ok(Migration { slot, from, to }),
            None => Err(format!("slot {slot}: no other master")),
        }
    }

    /// Begins the classic migration (`IMPORTING` on the target,
    /// `MIGRATING` on the source) and returns the keys the source holds
    /// in the slot (at most 1000), which the caller moves.
    fn begin(self, cluster: &RedisCluster) -> Vec<String> {
        let (source, target) = (cluster.node(self.from), cluster.node(self.to));
        cluster.begin_migration(self.slot, source, target);
        cmd("CLUSTER")
            .arg("GETKEYSINSLOT")
            .arg(self.slot)
            .arg(1000)
            .query(&mut source.conn())
            .unwrap_or_default()
    }
}

impl Sharded {
    /// Starts every member (the clusters one after the other: each waits
    /// for its own agreement).
    pub async fn start(spec: Spec) -> Sharded {
        let for_start = spec.clone();
        let (clusters, sentinels, masters) = tokio::task::spawn_blocking(move || {
            let spec = for_start;
            let clusters: Vec<RedisCluster> = (0..spec.clusters)
                .map(|_| {
                    RedisCluster::start(
                        ClusterSpec::new(spec.shards, 1)
                            .opts(opts(&spec))
                            .node_timeout_ms(spec.node_timeout_ms),
                    )
                })
                .collect();
            // Three Sentinels, a majority of them to call a master down;
            // a failover timeout short enough that an election that failed
            // (a split vote) is tried again within the run.
            let sentinels = (spec.sentinels > 0).then(|| {
                SentinelGroup::with(
                    SentinelSpec::new(opts(&spec), 1, 3)
                        .masters(spec.sentinels)
                        .down_after_ms(spec.down_after_ms)
                        .failover_timeout_ms(3_000)
                        .periods_ms(SENTINEL_PERIODS_MS),
                )
            });
            let masters: Vec<Server> = (0..spec.masters).map(|_| Server::with(opts(&spec))).collect();
            (clusters, sentinels, masters)
        })
        .await
        .expect("start the members");
        let mut members: Vec<String> = clusters.iter().map(RedisCluster::member).collect();
        if let Some(group) = &sentinels {
            members.extend((0..spec.sentinels).map(|m| group.url_of(m)));
        }
        members.extend(masters.iter().map(Server::url));
        let clusters = clusters.into_iter().map(|c| Arc::new(Mutex::new(c))).collect();
        let sentinels = sentinels.map(|group| Arc::new(Mutex::new(group)));
        Sharded { spec, clusters, sentinels, masters, members }
    }

    /// The member strings the clients connect with: the clusters first,
    /// then the Sentinel members, then the masters.
    pub fn urls(&self) -> Vec<String> {
        self.members.clone()
    }

    fn kind(&self, member: usize) -> Kind {
        if member < self.clusters.len() {
            Kind::Cluster
        } else if member < self.clusters.len() + self.spec.sentinels {
            Kind::Sentinel(member - self.clusters.len())
        } else {
            panic!("member {member} is a plain master")
        }
    }

    /// Runs `f` on the Sentinel group on a blocking thread.
    async fn sentinel_blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut SentinelGroup) -> T + Send + 'static,
    ) -> T {
        let group = self.sentinels.clone().expect("Sentinel members");
        tokio::task::spawn_blocking(move || f(&mut lock(&group))).await.expect("a Sentinel action")
    }

    /// Runs `f` on a blocking thread with the node that serves `key` in
    /// member `member` now: the master of its slot in a cluster, the
    /// master the Sentinels name in a Sentinel member (`None`: none is).
    async fn on_master<T: Send + 'static>(
        &self,
        member: usize,
        key: String,
        f: impl FnOnce(Option<&Server>) -> T + Send + 'static,
    ) -> T {
        match self.kind(member) {
            Kind::Cluster => self.blocking(member, move |cluster| f(Some(cluster.master_of(&key)))).await,
            Kind::Sentinel(m) => {
                self.sentinel_blocking(move |group| f(group.master_index_of(m).map(|i| &group.nodes[i])))
                    .await
            }
        }
    }

    /// Runs `f` on cluster member `member` on a blocking thread.
    async fn blocking<T: Send + 'static>(
        &self,
        member: usize,
        f: impl FnOnce(&mut RedisCluster) -> T + Send + 'static,
    ) -> T {
        let cluster = self.clusters[member % self.clusters.len()].clone();
        tokio::task::spawn_blocking(move || f(&mut lock(&cluster))).await.expect("a cluster action")
    }

    /// Moves the slot of `key` in cluster `member` to another master: the
    /// classic way (`IMPORTING` / `MIGRATING`, each key with `MIGRATE`,
    /// `pause` between them so that calls meet `ASK`, then `SETSLOT NODE`),
    /// or on Valkey 9 with `atomic` Valkey's `CLUSTER MIGRATESLOTS`.
    /// Returns what it did.
    pub async fn migrate(&self, member: usize, key: String, pause: Duration, atomic: bool) -> String {
        self.blocking(member, move |cluster| {
            let migration = match Migration::plan(cluster, &key) {
                Ok(migration) => migration,
                Err(why) => return why,
            };
            let Migration { slot, from, to } = migration;
            let (product, (major, _)) = server_version();
            if atomic && product == "Valkey" && major >= 9 {
                cluster.migrate_slot_atomically(slot, cluster.node(to));
                return format!("slot {slot} of '{key}' {from} -> {to} (MIGRATESLOTS)");
            }
            let keys = migration.begin(cluster);
            let (source, target) = (cluster.node(from), cluster.node(to));
            for moving in &keys {
                cluster.migrate_keys(source, target, std::slice::from_ref(moving));
                std::thread::sleep(pause);
            }
            std::thread::sleep(pause);
            cluster.end_migration(slot, target);
            format!("slot {slot} of '{key}' {from} -> {to} ({} keys, MIGRATE)", keys.len())
        })
        .await
    }

    /// kill -9 of the master that serves `key` in cluster `member`; waits
    /// for its replica's promotion, then restarts the killed node (it
    /// rejoins as the new master's replica) and waits until it is in sync.
    pub async fn fail_over(&self, member: usize, key: String) -> String {
        self.blocking(member, move |cluster| {
            let port = cluster.master_of(&key).port;
            let index = index_of(&cluster.nodes, port);
            if cluster.replicas_of(cluster.node(port)).is_empty() {
                return format!("{port}: no replica in sync yet");
            }
            let (promoted, _) = cluster.kill_master_and_wait_promotion(index);
            let promoted = cluster.nodes[promoted].port;
            cluster.nodes[index].restart();
            cluster.wait_ok();
            format!("master {port} of '{key}' killed, {promoted} promoted, {port} back as its replica")
        })
        .await
    }

    /// SIGSTOP of the master that serves `key` in cluster `member` for
    /// `hold` (below the node timeout: no failover), then SIGCONT.
    pub async fn pause(&self, member: usize, key: String, hold: Duration) -> String {
        self.blocking(member, move |cluster| {
            let master = cluster.master_of(&key);
            master.signal("STOP");
            std::thread::sleep(hold);
            master.signal("CONT");
            format!("master {} of '{key}' paused {} ms", master.port, hold.as_millis())
        })
        .await
    }

    /// Starts a classic migration of `key`'s slot in cluster `member`,
    /// moves half its keys, cuts every client connection of both masters
    /// (the replies to calls redirected between them are lost), then
    /// finishes the migration.
    pub async fn cut_redirects(&self, member: usize, key: String, pause: Duration) -> String {
        self.blocking(member, move |cluster| {
            let migration = match Migration::plan(cluster, &key) {
                Ok(migration) => migration,
                Err(why) => return why,
            };
            let Migration { slot, from, to } = migration;
            let keys = migration.begin(cluster);
            let (source, target) = (cluster.node(from), cluster.node(to));
            let (first, rest) = keys.split_at(keys.len() / 2);
            cluster.migrate_keys(source, target, first);
            std::thread::sleep(pause);
            for node in [source, target] {
                let _: redis::RedisResult<i64> = cmd("CLIENT")
                    .arg("KILL")
                    .arg("TYPE")
                    .arg("normal")
                    .arg("SKIPME")
                    .arg("yes")
                    .query(&mut node.conn());
            }
            std::thread::sleep(pause);
            cluster.migrate_keys(source, target, rest);
            cluster.end_migration(slot, target);
            format!("slot {slot} of '{key}' {from} -> {to}, connections cut halfway ({} keys)", keys.len())
        })
        .await
    }

    /// kill -9 of the master that Sentinel member `member`'s Sentinels
    /// name; waits (bounded) until they have promoted its replica, then
    /// restarts the killed node (from its AOF, a master again until the
    /// Sentinels turn it into the new master's replica, about a second
    /// later: the next failover of this member waits for that). Returns
    /// what it did.
    pub async fn sentinel_failover(&self, member: usize) -> String {
        let Kind::Sentinel(m) = self.kind(member) else { panic!("member {member} is not a Sentinel member") };
        self.sentinel_blocking(move |group| {
            let (master, replicas) = match sentinel_master(group, m) {
                Ok(found) => found,
                Err(why) => return why,
            };
            let port = group.nodes[master].port;
            if replicas.is_empty() {
                return format!("master {port}: no replica in sync yet");
            }
            let killed = std::time::Instant::now();
            group.nodes[master].kill();
            let promoted = group.wait_failover(m, master, FAILOVER_DEADLINE);
            let took = killed.elapsed();
            group.nodes[master].restart();
            match promoted {
                Ok(i) => format!(
                    "master {port} killed, {} promoted by the Sentinels after {} ms, {port} restarted",
                    group.nodes[i].port,
                    took.as_millis()
                ),
                Err(why) => format!("master {port} killed: {why}; {port} restarted"),
            }
        })
        .await
    }

    /// A rival holds `key` on its master in member `member` (a cluster or
    /// a Sentinel member) for `ttl_ms` (`LOCK.ACQUIRE` with the module,
    /// `SET NX PX` without): that member refuses the key meanwhile.
    /// Whether it was set.
    pub async fn block(&self, member: usize, key: String, token: &'static str, ttl_ms: u64) -> bool {
        let module = self.spec.module;
        self.on_master(member, key.clone(), move |master| {
            let Some(mut c) = master.map(Server::conn) else { return false };
            if module {
                cmd("LOCK.ACQUIRE")
                    .arg(&key)
                    .arg(token)
                    .arg(ttl_ms)
                    .query::<Option<i64>>(&mut c)
                    .ok()
                    .flatten()
                    .is_some()
            } else {
                cmd("SET")
                    .arg(&key)
                    .arg(token)
                    .arg("NX")
                    .arg("PX")
                    .arg(ttl_ms)
                    .query::<Option<String>>(&mut c)
                    .ok()
                    .flatten()
                    .is_some()
            }
        })
        .await
    }

    /// The rival of [`Sharded::block`] lets go of `key`.
    pub async fn unblock(&self, member: usize, key: String, token: &'static str) {
        let module = self.spec.module;
        self.on_master(member, key.clone(), move |master| {
            let Some(mut c) = master.map(Server::conn) else { return };
            let _: redis::RedisResult<i64> = if module {
                cmd("LOCK.RELEASE").arg(&key).arg(token).query(&mut c)
            } else {
                cmd("EVAL")
                    .arg("if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end")
                    .arg(1)
                    .arg(&key)
                    .arg(token)
                    .query(&mut c)
            };
        })
        .await
    }

    /// The replica of the master that serves `key` in member `member`
    /// stops (SIGSTOP) and the master drops its link: from now on the
    /// replica misses every write the master acknowledges. The ports of
    /// the master and the replica.
    pub async fn cut_replica(&self, member: usize, key: String) -> Result<(u16, u16), String> {
        let cut = |master: &Server, replica: &Server| {
            replica.signal("STOP");
            let _: redis::RedisResult<i64> =
                cmd("CLIENT").arg("KILL").arg("TYPE").arg("replica").query(&mut master.conn());
            (master.port, replica.port)
        };
        match self.kind(member) {
            Kind::Cluster => {
                self.blocking(member, move |cluster| {
                    let master = cluster.master_of(&key);
                    let Some(replica) = cluster.replicas_of(master).first().copied() else {
                        return Err(format!("master {} of '{key}' has no replica in sync", master.port));
                    };
                    Ok(cut(master, replica))
                })
                .await
            }
            Kind::Sentinel(m) => {
                self.sentinel_blocking(move |group| {
                    let (master, replicas) = sentinel_master(group, m)?;
                    let Some(&replica) = replicas.first() else {
                        return Err(format!("master {} has no replica in sync", group.nodes[master].port));
                    };
                    Ok(cut(&group.nodes[master], &group.nodes[replica]))
                })
                .await
            }
        }
    }

    /// The replica cut off by [`Sharded::cut_replica`] resumes; waits
    /// (bounded) until the cluster agrees and every replica is in sync (a
    /// Sentinel member: until the replica's link is up again).
    pub async fn resume_replica(&self, member: usize, replica: u16) {
        match self.kind(member) {
            Kind::Cluster => {
                self.blocking(member, move |cluster| {
                    cluster.node(replica).signal("CONT");
                    cluster.wait_ok();
                })
                .await
            }
            Kind::Sentinel(m) => {
                self.sentinel_blocking(move |group| {
                    let index = index_of(&group.nodes, replica);
                    group.nodes[index].signal("CONT");
                    lock_testkit::wait_until(FAILOVER_DEADLINE, "the replica back in sync", || {
                        sentinel_master(group, m).is_ok_and(|(_, replicas)| replicas.contains(&index))
                    });
                })
                .await
            }
        }
    }

    /// kill -9 of `master` in member `member`, its replica (cut off by
    /// [`Sharded::cut_replica`]) resumed and promoted: in a cluster at once
    /// by `CLUSTER FAILOVER TAKEOVER`, waiting (bounded) until it is a
    /// master and every running node of the cluster sends `key` to it
    /// (before that, a client refreshing its slot map may still be sent to
    /// the dead master, and a refusal would prove nothing); in a Sentinel
    /// member by the Sentinels, once they find the master down, waiting
    /// (bounded) until every Sentinel names the replica and it says it is
    /// a master.
    pub async fn take_over(
        &self,
        member: usize,
        key: String,
        master: u16,
        replica: u16,
    ) -> Result<(), String> {
        if let Kind::Sentinel(m) = self.kind(member) {
            return self
                .sentinel_blocking(move |group| {
                    let old = index_of(&group.nodes, master);
                    group.nodes[old].kill();
                    let index = index_of(&group.nodes, replica);
                    group.nodes[index].signal("CONT");
                    match group.wait_failover(m, old, FAILOVER_DEADLINE)? {
                        promoted if promoted == index => Ok(()),
                        other => {
                            Err(format!("the Sentinels promoted {}, not {replica}", group.nodes[other].port))
                        }
                    }
                })
                .await;
        }
        self.blocking(member, move |cluster| {
            let index = index_of(&cluster.nodes, master);
            cluster.nodes[index].kill();
            let node = cluster.node(replica);
            node.signal("CONT");
            let _: redis::RedisResult<()> =
                cmd("CLUSTER").arg("FAILOVER").arg("TAKEOVER").query(&mut node.conn());
            let deadline = std::time::Instant::now() + Duration::from_secs(10);
            let routed_to_replica = |n: &lock_testkit::Server| {
                let answer: redis::RedisResult<Option<String>> = cmd("GET").arg(&key).query(&mut n.conn());
                match answer {
                    Ok(_) => n.port == replica,
                    Err(e) => {
                        e.redirect_node().is_some_and(|(addr, _)| addr.ends_with(&format!(":{replica}")))
                    }
                }
            };
            while role(node) != "master" || !cluster.running().into_iter().all(routed_to_replica) {
                if std::time::Instant::now() > deadline {
                    return Err(format!(
                        "replica {replica} not promoted, or not known as the master of '{key}', within 10 s"
                    ));
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            Ok(())
        })
        .await
    }

    /// The node at `port` in member `member` (killed) starts again: it
    /// rejoins a cluster, and the wait (bounded) is until the cluster
    /// agrees again; in a Sentinel member the Sentinels turn it into the
    /// new master's replica a little later.
    pub async fn rejoin(&self, member: usize, port: u16) {
        if let Kind::Sentinel(_) = self.kind(member) {
            return self
                .sentinel_blocking(move |group| {
                    let index = index_of(&group.nodes, port);
                    group.nodes[index].restart();
                })
                .await;
        }
        self.blocking(member, move |cluster| {
            let index = index_of(&cluster.nodes, port);
            cluster.nodes[index].restart();
            cluster.wait_ok();
        })
        .await
    }

    /// Nodes that died by themselves (not killed by a fault), as
    /// "PORT died" lines.
    pub async fn dead(&self) -> Vec<String> {
        let (clusters, sentinels) = (self.clusters.clone(), self.sentinels.clone());
        tokio::task::spawn_blocking(move || {
            let mut dead = Vec::new();
            let mut look = |nodes: &mut Vec<Server>| {
                for node in nodes {
                    if node.is_running() && node.wait_exit(Duration::from_millis(1)).is_some() {
                        dead.push(format!("{} died", node.port));
                    }
                }
            };
            for cluster in &clusters {
                look(&mut lock(cluster).nodes);
            }
            if let Some(group) = &sentinels {
                look(&mut lock(group).nodes);
            }
            dead
        })
        .await
        .unwrap_or_default()
    }

    /// Stops every node (by PID).
    pub async fn shut_down(self) {
        let Sharded { clusters, sentinels, masters, .. } = self;
        let _ = tokio::task::spawn_blocking(move || {
            drop(clusters);
            drop(sentinels);
            drop(masters);
        })
        .await;
    }
}
