//! A real Redis Cluster (or Valkey Cluster) with the module on every node:
//! S shards, each a master with R replicas, on free loopback ports; every
//! wait bounded; every process killed by PID when the cluster is dropped
//! (each is a [`Server`]), also when a test panics. And the faults the
//! tests need: moving a slot (classic `SETSLOT` + `MIGRATE`, or Valkey's
//! `CLUSTER MIGRATESLOTS`), `CLUSTER FAILOVER`, kill -9 of a master and the
//! promotion of its replica, a cluster that fails (`CLUSTERDOWN`).
//!
//! Cluster node timeouts are 5 s by default ([`ClusterSpec::node_timeout_ms`]:
//! a loaded machine does not fail a slow node over); tests of failovers set
//! a shorter one, so that a failover takes seconds.

use std::collections::HashMap;
use std::thread::sleep;
use std::time::{Duration, Instant};

use redis::{cmd, Connection, Value};

use crate::binary::server_name;
use crate::nodes::start_all;
use crate::server::{Opts, Server};
use crate::wait::wait_until;

/// How long a cluster may take to agree after a change.
/// (Generous: on a loaded 2-core machine a cluster of six nodes was seen
/// to take 25 s to agree.)
pub const CLUSTER_DEADLINE: Duration = Duration::from_secs(60);

/// How to start a cluster.
#[derive(Clone, Debug)]
pub struct ClusterSpec {
    pub shards: usize,
    pub replicas: usize,
    /// Every node's options (`cluster-*` settings are added).
    pub opts: Opts,
    /// `cluster-node-timeout`: how long before a silent node is failed.
    pub node_timeout_ms: u64,
}

impl ClusterSpec {
    pub fn new(shards: usize, replicas: usize) -> ClusterSpec {
        ClusterSpec { shards, replicas, opts: Opts::new(), node_timeout_ms: 5_000 }
    }

    pub fn opts(mut self, opts: Opts) -> ClusterSpec {
        self.opts = opts;
        self
    }

    pub fn node_timeout_ms(mut self, ms: u64) -> ClusterSpec {
        self.node_timeout_ms = ms;
        self
    }
}

/// A running cluster. `nodes` are in start order: shard i's master first
/// (`nodes[i * (1 + replicas)]`), then its replicas; roles change with
/// failovers, so ask [`RedisCluster::master_of_slot`] and friends.
pub struct RedisCluster {
    pub spec: ClusterSpec,
    pub nodes: Vec<Server>,
    /// Each node's cluster id, by port.
    ids: HashMap<u16, String>,
}

/// `CLUSTER INFO` as (field, value) pairs.
pub fn cluster_info(c: &mut Connection) -> Vec<(String, String)> {
    let text: String = cmd("CLUSTER").arg("INFO").query(c).unwrap_or_default();
    text.lines()
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect()
}

fn field<'a>(info: &'a [(String, String)], name: &str) -> Option<&'a str> {
    info.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
}

/// `CLUSTER KEYSLOT key` on `c`.
pub fn keyslot(c: &mut Connection, key: &str) -> u16 {
    cmd("CLUSTER").arg("KEYSLOT").arg(key).query(c).expect("CLUSTER KEYSLOT")
}

fn ok(reply: redis::RedisResult<String>, what: &str) {
    match reply {
        Ok(text) if text == "OK" => {}
        other => panic!("{what}: {other:?} ({})", server_name()),
    }
}

impl RedisCluster {
    /// Starts the nodes, assigns the slots in equal ranges to the
    /// masters, meets them, attaches the replicas, and waits (bounded)
    /// until every node says `cluster_state:ok`, knows every node, and
    /// every replica's link is up.
    pub fn start(spec: ClusterSpec) -> RedisCluster {
        let started = Instant::now();
        let per_shard = 1 + spec.replicas;
        let timeout = spec.node_timeout_ms.to_string();
        let mut opts = spec.opts.clone();
        if opts.tls.is_some() {
            // Nodes with a TLS port (Opts::tls): the bus and the replication
            // over TLS too, and CLUSTER SHARDS announces each tls-port.
            opts = opts.config("tls-cluster", "yes").config("tls-replication", "yes");
        }
        let opts = opts
            .config("cluster-enabled", "yes")
            .config("cluster-config-file", "nodes.conf")
            .config("cluster-node-timeout", &timeout)
            // Any replica may take over, however long its link was down.
            .config("cluster-replica-validity-factor", "0")
            .config("repl-diskless-sync-delay", "0");
        let nodes = start_all(vec![opts; spec.shards * per_shard]);
        let mut cluster = RedisCluster { spec, nodes, ids: HashMap::new() };
        for node in &cluster.nodes {
            let id: String = cmd("CLUSTER").arg("MYID").query(&mut node.conn()).expect("CLUSTER MYID");
            cluster.ids.insert(node.port, id);
        }
        // Each node its own config epoch before they meet (as redis-cli
        // --cluster create does): nodes that all start at 0 resolve the
        // collision by bumping their epochs one by one after the cluster is
        // ok, and a slot moved meanwhile could be claimed back by its old
        // owner's new, higher epoch (the new owner then sends the slot's
        // keys to the old one, which sends them back: a redirect loop).
        for (epoch, node) in (1..).zip(&cluster.nodes) {
            ok(
                cmd("CLUSTER").arg("SET-CONFIG-EPOCH").arg(epoch).query(&mut node.conn()),
                "CLUSTER SET-CONFIG-EPOCH",
            );
        }
        let shards = cluster.spec.shards;
        for shard in 0..shards {
            let first = shard * 16_384 / shards;
            let last = (shard + 1) * 16_384 / shards - 1;
            let master = &cluster.nodes[shard * per_shard];
            ok(
                cmd("CLUSTER").arg("ADDSLOTSRANGE").arg(first).arg(last).query(&mut master.conn()),
                "CLUSTER ADDSLOTSRANGE",
            );
        }
        let mut first = cluster.nodes[0].conn();
        for other in &cluster.nodes[1..] {
            ok(cmd("CLUSTER").arg("MEET").arg("127.0.0.1").arg(other.port).query(&mut first), "CLUSTER MEET");
        }
        cluster.wait_known();
        for shard in 0..shards {
            let master_id = cluster.ids[&cluster.nodes[shard * per_shard].port].clone();
            for replica in &cluster.nodes[shard * per_shard + 1..(shard + 1) * per_shard] {
                ok(
                    cmd("CLUSTER").arg("REPLICATE").arg(&master_id).query(&mut replica.conn()),
                    "CLUSTER REPLICATE",
                );
            }
        }
        cluster.wait_ok();
        // A brand-new cluster: the slots its masters took with ADDSLOTSRANGE
        // were nobody's before, so their waits end (an operator's step).
        for shard in 0..shards {
            let master = &cluster.nodes[shard * per_shard];
            let _: i64 = cmd("LOCK.UNQUARANTINE").arg("IMPORTS").query(&mut master.conn()).unwrap_or(0);
        }
        eprintln!(
            "cluster of {shards} shards x {} nodes (ports {:?}) ok after {:?}",
            per_shard,
            cluster.nodes.iter().map(|n| n.port).collect::<Vec<_>>(),
            started.elapsed()
        );
        cluster
    }

    /// Every node has met every other.
    fn wait_known(&self) {
        let total = self.nodes.len().to_string();
        self.wait_for("every node knows every other", |c| {
            field(&cluster_info(c), "cluster_known_nodes") == Some(total.as_str())
        });
    }

    /// Waits (bounded) until every running node says the cluster is ok,
    /// serves all 16384 slots, knows every node, and every replica's link
    /// to its master is up.
    pub fn wait_ok(&self) {
        self.wait_known();
        self.wait_for("cluster_state:ok with every slot served and every replica in sync", |c| {
            let info = cluster_info(c);
            let replication: String = cmd("INFO").arg("replication").query(c).unwrap_or_default();
            field(&info, "cluster_state") == Some("ok")
                && field(&info, "cluster_slots_ok") == Some("16384")
                && (replication.contains("role:master") || replication.contains("master_link_status:up"))
        });
    }

    /// Polls `check` on every running node until all pass, bounded by
    /// [`CLUSTER_DEADLINE`]; the failure names what was waited for and
    /// shows the nodes' `CLUSTER INFO`.
    pub fn wait_for(&self, what: &str, mut check: impl FnMut(&mut Connection) -> bool) {
        let deadline = Instant::now() + CLUSTER_DEADLINE;
        loop {
            let mut conns: Vec<Connection> = self.running().iter().map(|n| n.conn()).collect();
            if conns.iter_mut().all(&mut check) {
                return;
            }
            if Instant::now() > deadline {
                let infos: Vec<_> = conns.iter_mut().map(cluster_info).collect();
                panic!("timed out after {CLUSTER_DEADLINE:?} waiting for {what}: {infos:?}\n{}", self.logs());
            }
            sleep(Duration::from_millis(50));
        }
    }

    /// The nodes whose process runs.
    pub fn running(&self) -> Vec<&Server> {
        self.nodes.iter().filter(|n| n.is_running()).collect()
    }

    /// The TLS member string of a cluster started with TLS ports
    /// (`rediss+cluster://`, the first two running nodes' TLS ports as
    /// seeds, by `host`).
    pub fn tls_member(&self, host: &str) -> String {
        let ports: Vec<u16> = self.running().iter().filter_map(|n| n.tls_port).take(2).collect();
        match ports[..] {
            [first, second] => format!("rediss+cluster://{host}:{first}?addr={host}:{second}"),
            [first] => format!("rediss+cluster://{host}:{first}"),
            _ => panic!("no running node with a TLS port"),
        }
    }

    /// The member string of this cluster: the first two running nodes as
    /// seeds.
    pub fn member(&self) -> String {
        let mut running = self.running().into_iter();
        let first = running.next().expect("a running node");
        match running.next() {
            Some(second) => {
                format!("redis+cluster://127.0.0.1:{}?addr=127.0.0.1:{}", first.port, second.port)
            }
            None => format!("redis+cluster://127.0.0.1:{}", first.port),
        }
    }

    /// The node on `port`.
    pub fn node(&self, port: u16) -> &Server {
        self.nodes.iter().find(|n| n.port == port).unwrap_or_else(|| panic!("no node on port {port}"))
    }

    /// A node's cluster id.
    pub fn id(&self, node: &Server) -> &str {
        &self.ids[&node.port]
    }

    /// The slot of `key`.
    pub fn slot(&self, key: &str) -> u16 {
        keyslot(&mut self.running()[0].conn(), key)
    }

    /// The master that serves `slot` now, as the first running node's
    /// `CLUSTER SLOTS` says.
    pub fn master_of_slot(&self, slot: u16) -> &Server {
        let reply: Value =
            cmd("CLUSTER").arg("SLOTS").query(&mut self.running()[0].conn()).expect("CLUSTER SLOTS");
        let Value::Array(ranges) = reply else { panic!("CLUSTER SLOTS: {reply:?}") };
        for range in ranges {
            let Value::Array(items) = range else { continue };
            let first: u16 = redis::from_redis_value(&items[0]).unwrap();
            let last: u16 = redis::from_redis_value(&items[1]).unwrap();
            if (first..=last).contains(&slot) {
                let Value::Array(master) = &items[2] else { panic!("CLUSTER SLOTS master {:?}", items[2]) };
                let port: u16 = redis::from_redis_value(&master[1]).unwrap();
                return self.node(port);
            }
        }
        panic!("no master serves slot {slot}")
    }

    /// The master that serves `key` now.
    pub fn master_of(&self, key: &str) -> &Server {
        self.master_of_slot(self.slot(key))
    }

    /// The running masters, in start order.
    pub fn masters(&self) -> Vec<&Server> {
        self.running().into_iter().filter(|n| role(n) == "master").collect()
    }

    /// The running replicas of `master`.
    pub fn replicas_of(&self, master: &Server) -> Vec<&Server> {
        let id = self.id(master).to_string();
        self.running()
            .into_iter()
            .filter(|n| {
                let info: String = cmd("INFO").arg("replication").query(&mut n.conn()).unwrap_or_default();
                info.contains("role:slave") && info.contains(&format!("master_port:{}", master.port))
            })
            .filter(|n| self.id(n) != id)
            .collect()
    }

    /// `count` keys named `prefix:N` for each running master (in
    /// [`RedisCluster::masters`] order), so that a test spreads over every
    /// shard.
    pub fn keys_per_master(&self, prefix: &str, count: usize) -> Vec<Vec<String>> {
        let masters: Vec<u16> = self.masters().iter().map(|m| m.port).collect();
        let mut per: Vec<Vec<String>> = vec![Vec::new(); masters.len()];
        let mut c = self.running()[0].conn();
        for i in 0..100_000 {
            if per.iter().all(|keys| keys.len() >= count) {
                return per;
            }
            let key = format!("{prefix}:{i}");
            let owner = self.master_of_slot(keyslot(&mut c, &key)).port;
            if let Some(at) = masters.iter().position(|&p| p == owner) {
                if per[at].len() < count {
                    per[at].push(key);
                }
            }
        }
        panic!("could not find {count} keys per master");
    }

    /// The first half of a classic slot migration from `from` to `to`:
    /// `to` IMPORTING, `from` MIGRATING. Keys of the slot then answer
    /// `ASK` on `from` once moved.
    pub fn begin_migration(&self, slot: u16, from: &Server, to: &Server) {
        let (from_id, to_id) = (self.id(from).to_string(), self.id(to).to_string());
        ok(
            cmd("CLUSTER").arg("SETSLOT").arg(slot).arg("IMPORTING").arg(&from_id).query(&mut to.conn()),
            "IMPORTING",
        );
        ok(
            cmd("CLUSTER").arg("SETSLOT").arg(slot).arg("MIGRATING").arg(&to_id).query(&mut from.conn()),
            "MIGRATING",
        );
    }

    /// `MIGRATE` of `keys` from `from` to `to` (each deleted on `from`).
    pub fn migrate_keys(&self, from: &Server, to: &Server, keys: &[String]) {
        if keys.is_empty() {
            return;
        }
        let mut migrate = cmd("MIGRATE");
        migrate.arg("127.0.0.1").arg(to.port).arg("").arg(0).arg(5_000).arg("KEYS").arg(keys);
        let reply: String = migrate.query(&mut from.conn()).unwrap_or_else(|e| panic!("MIGRATE: {e}"));
        assert!(reply == "OK" || reply == "NOKEY", "MIGRATE: {reply}");
    }

    /// The second half: every master learns that `to` serves the slot.
    pub fn end_migration(&self, slot: u16, to: &Server) {
        let to_id = self.id(to).to_string();
        // The new owner first, then the old one, then the rest (the order
        // redis-cli uses).
        let mut order: Vec<&Server> = vec![to];
        order.extend(self.masters().into_iter().filter(|m| m.port != to.port));
        for node in order {
            ok(
                cmd("CLUSTER").arg("SETSLOT").arg(slot).arg("NODE").arg(&to_id).query(&mut node.conn()),
                "SETSLOT NODE",
            );
        }
    }

    /// A whole classic migration of `slot` to `to`: every key in it moved.
    pub fn move_slot(&self, slot: u16, to: &Server) {
        let from = self.master_of_slot(slot);
        assert_ne!(from.port, to.port, "slot {slot} is already on {}", to.port);
        self.begin_migration(slot, from, to);
        let keys: Vec<String> = cmd("CLUSTER")
            .arg("GETKEYSINSLOT")
            .arg(slot)
            .arg(10_000)
            .query(&mut from.conn())
            .expect("GETKEYSINSLOT");
        self.migrate_keys(from, to, &keys);
        self.end_migration(slot, to);
        self.wait_for(&format!("every node to agree that {} serves slot {slot}", to.port), |c| {
            slot_owner_port(c, slot) == Some(to.port)
        });
    }

    /// Valkey 9's atomic slot migration of `slot` to `to`, waited for.
    pub fn migrate_slot_atomically(&self, slot: u16, to: &Server) {
        let from = self.master_of_slot(slot);
        let to_id = self.id(to).to_string();
        let mut source = from.conn();
        ok(
            cmd("CLUSTER")
                .arg("MIGRATESLOTS")
                .arg("SLOTSRANGE")
                .arg(slot)
                .arg(slot)
                .arg("NODE")
                .arg(&to_id)
                .query(&mut source),
            "CLUSTER MIGRATESLOTS",
        );
        wait_until(CLUSTER_DEADLINE, "the atomic slot migration", || {
            let reply: Value =
                cmd("CLUSTER").arg("GETSLOTMIGRATIONS").query(&mut source).unwrap_or(Value::Nil);
            let text = format!("{reply:?}");
            assert!(!text.contains("failed") && !text.contains("cancelled"), "slot migration: {text}");
            text.contains("success")
        });
        self.wait_for(&format!("every node to agree that {} serves slot {slot}", to.port), |c| {
            slot_owner_port(c, slot) == Some(to.port)
        });
    }

    /// `CLUSTER FAILOVER` on `replica`, waited for: it is a master and the
    /// cluster is ok again.
    ///
    /// A manual failover that does not complete in time (the master must
    /// pause its clients and the replica catch up; on a loaded machine it
    /// can time out, and is then dropped silently) is asked for again, at
    /// most three times.
    pub fn failover(&self, replica: &Server) {
        for _ in 0..3 {
            ok(cmd("CLUSTER").arg("FAILOVER").query(&mut replica.conn()), "CLUSTER FAILOVER");
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline {
                if role(replica) == "master" {
                    self.wait_ok();
                    return;
                }
                sleep(Duration::from_millis(20));
            }
            eprintln!("CLUSTER FAILOVER on {} did not complete in 10 s; asking again", replica.port);
        }
        panic!("CLUSTER FAILOVER on {} never completed\n{}", replica.port, self.logs());
    }

    /// kill -9 of `master` (by index in `nodes`), and the wait until one of
    /// its replicas was promoted and every running node agrees. Returns the
    /// promoted node's index and when the master was killed.
    pub fn kill_master_and_wait_promotion(&mut self, index: usize) -> (usize, Instant) {
        let port = self.nodes[index].port;
        let replicas: Vec<u16> = self.replicas_of(&self.nodes[index]).iter().map(|r| r.port).collect();
        assert!(!replicas.is_empty(), "master {port} has no replica to promote");
        self.nodes[index].kill();
        let started = Instant::now();
        let promoted = loop {
            if let Some(&p) = replicas.iter().find(|&&p| role(self.node(p)) == "master") {
                break p;
            }
            assert!(started.elapsed() < CLUSTER_DEADLINE, "no replica of {port} promoted\n{}", self.logs());
            sleep(Duration::from_millis(50));
        };
        self.wait_for("the cluster ok after the promotion", |c| {
            field(&cluster_info(c), "cluster_state") == Some("ok")
        });
        eprintln!("master {port} killed; {promoted} promoted after {:?}", started.elapsed());
        (self.nodes.iter().position(|n| n.port == promoted).expect("promoted node"), started)
    }

    /// kill -9 of `master` (which has no replica), and the wait until every
    /// other node says `cluster_state:fail` (its slots are not served:
    /// `CLUSTERDOWN`).
    pub fn kill_and_wait_down(&mut self, index: usize) {
        self.nodes[index].kill();
        self.wait_for("cluster_state:fail", |c| field(&cluster_info(c), "cluster_state") == Some("fail"));
    }

    /// The last lines of every node's log, for failure messages.
    pub fn logs(&self) -> String {
        self.nodes.iter().map(|n| format!("[port {}] {}", n.port, n.log())).collect::<Vec<_>>().join("\n")
    }
}

/// `role:master` or `role:slave` of a running node.
pub fn role(node: &Server) -> String {
    let info: String = cmd("INFO").arg("replication").query(&mut node.conn()).unwrap_or_default();
    info.lines().find_map(|l| l.strip_prefix("role:")).unwrap_or("").trim().to_string()
}

/// The port of the master that serves `slot` according to the node at
/// the other end of `c`.
fn slot_owner_port(c: &mut Connection, slot: u16) -> Option<u16> {
    let reply: Value = cmd("CLUSTER").arg("SLOTS").query(c).ok()?;
    let Value::Array(ranges) = reply else { return None };
    ranges.into_iter().find_map(|range| {
        let Value::Array(items) = range else { return None };
        let first: u16 = redis::from_redis_value(items.first()?).ok()?;
        let last: u16 = redis::from_redis_value(items.get(1)?).ok()?;
        if !(first..=last).contains(&slot) {
            return None;
        }
        let Value::Array(master) = items.get(2)? else { return None };
        redis::from_redis_value(master.get(1)?).ok()
    })
}
