//! A simulated Redis Cluster as one quorum member: a few shard masters,
//! each a simulated node over the real lock core (`node.rs`), a slot map,
//! and the answers a real cluster gives, which the client's real cluster
//! member code (`client/src/member/`) reads: `CLUSTER SHARDS` from the
//! asked node's own view of the map, `MOVED` for a slot that node does not
//! serve, and during a slot's migration `ASK` from the source for a key it
//! no longer has, served by the importing node only after `ASKING` (the
//! flag lasts one command), `TRYAGAIN` for a call of several keys of which
//! some have moved, `CROSSSLOT`, and `CLUSTERDOWN` while a shard has no
//! master, as Redis does. Its faults, drawn from the seed:
//! - resharding: the resource's slot migrates to another shard mid-history
//!   (`IMPORTING`/`MIGRATING`, then `MIGRATE` of the slot's lock keys, as
//!   they are, then `SETSLOT ... NODE`), or stays open (a stalled reshard:
//!   clients must still work, through `ASK`) until an operator finishes
//!   it; or Valkey's atomic slot migration (`CLUSTER MIGRATESLOTS`: the
//!   source serves the slot and streams its writes until the handover);
//!   the importing node models the module's import handling (`Node`'s
//!   `import_started`, `lock_arrived`, `import_ended`: the raise at a
//!   lock's arrival, its `imported` quarantine, the slot wait);
//! - a shard's failover: its master dies (`CLUSTERDOWN` meanwhile), and
//!   after a detection delay its replica, some writes behind, is promoted
//!   and quarantines (the module's failover quarantine);
//! - a client cut off from one of its masters for a while;
//! - stale maps: the nodes a change involves know it at once, the others
//!   by gossip, later; a node asked for the topology meanwhile gives its
//!   old view, and a client's map is stale until a `MOVED` or a fetch.
//!
//! The nodes' clocks are as far apart as the plain nodes' (within
//! docs/safety.md's assumption 2): a migrated lock's deadlines are covered
//! by its `imported` quarantine, a released lock's tokens by the slot wait.
//!
//! A node's name for a client is the plain nodes' (`c{client}n{node}`, see
//! `net.rs`): a real cluster names its nodes alike to every client, the
//! simulator's network tells which client connects to which node by it.

use std::collections::BTreeMap;

use lock_core::memory::Holders;
use lock_protocol::code::ERR;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::command::Request;
use crate::node::{Node, Persistence, Rules};
use crate::resp::Reply;

/// How many hash slots a cluster has.
pub const SLOTS: u16 = 16_384;

/// The hash slot of `key` (CRC16-XMODEM of its hash tag, or of the whole
/// key, modulo 16384).
pub fn key_slot(key: &[u8]) -> u16 {
    lock_protocol::slot::key_slot(key)
}

/// The keys a lock command names (`LOCK.MACQUIRE`, `RENEW` and `MRELEASE`
/// name several; the others one, after the command's name).
fn call_keys(words: &[Vec<u8>]) -> Vec<&[u8]> {
    let multi = words.first().is_some_and(|name| {
        [&b"LOCK.MACQUIRE"[..], b"LOCK.RENEW", b"LOCK.MRELEASE"].iter().any(|m| name.eq_ignore_ascii_case(m))
    });
    let argv: Vec<&[u8]> = words.iter().map(Vec::as_slice).collect();
    let parsed =
        multi.then(|| crate::command::parse(&argv, crate::command::limits(i64::MAX), 0).ok()).flatten();
    match parsed {
        Some(
            Request::GrantAll { keys, .. } | Request::Renew { keys, .. } | Request::ReleaseAll { keys, .. },
        ) => keys,
        _ => words.get(1).map(Vec::as_slice).into_iter().collect(),
    }
}

/// The host a client's URLs give node `node` (see `net::url`).
pub fn host(client: usize, node: usize) -> String {
    format!("c{client}n{node}")
}

/// Who serves what, as one node believes it (or as it is).
#[derive(Clone, Debug)]
pub(crate) struct View {
    /// Slot ranges (first, last) with their shard, in slot order, covering
    /// every slot (cheap to copy and to answer `CLUSTER SHARDS` from).
    pub(crate) ranges: Vec<(u16, u16, usize)>,
    /// Each shard's master (an index into the world's nodes).
    pub(crate) masters: Vec<usize>,
}

impl View {
    /// The shard that serves `slot`.
    pub(crate) fn owner(&self, slot: u16) -> Option<usize> {
        self.ranges.iter().find(|(first, last, _)| (*first..=*last).contains(&slot)).map(|r| r.2)
    }

    /// `slot` is served by `shard` from now on.
    pub(crate) fn set(&mut self, slot: u16, shard: usize) {
        let Some(i) = self.ranges.iter().position(|(first, last, _)| (*first..=*last).contains(&slot)) else {
            return;
        };
        let (first, last, was) = self.ranges.remove(i);
        let parts =
            [(first, slot.wrapping_sub(1), was), (slot, slot, shard), (slot.wrapping_add(1), last, was)];
        let kept = parts.into_iter().filter(|(f, l, _)| f <= l && *f >= first && *l <= last);
        for (at, part) in kept.enumerate() {
            self.ranges.insert(i + at, part);
        }
    }
}

/// A slot on its way from one shard to another.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Migration {
    pub(crate) slot: u16,
    pub(crate) from: usize,
    pub(crate) to: usize,
    /// Valkey's atomic slot migration (`CLUSTER MIGRATESLOTS`): the source
    /// serves the whole slot until the handover (no `ASK`), and its writes
    /// are streamed to the target.
    pub(crate) atomic: bool,
}

/// What a shard's replica has: its master's locks and fencing counter
/// when it last caught up, and when that was.
#[derive(Clone, Debug, Default)]
pub(crate) struct Replica {
    pub(crate) copy: (BTreeMap<Vec<u8>, Holders>, u64),
    pub(crate) synced_ms: i64,
}

/// One simulated cluster, standing for one quorum member.
#[derive(Debug)]
pub struct Cluster {
    /// The quorum member it is (from 0).
    pub member: usize,
    /// Who serves what now.
    pub(crate) truth: View,
    /// What each of its nodes believes (by node index).
    pub(crate) views: BTreeMap<usize, View>,
    pub(crate) migration: Option<Migration>,
    pub(crate) replicas: Vec<Replica>,
    /// How far a replica lags behind its master.
    lag_ms: i64,
}

impl Cluster {
    /// The nodes that serve its shards now.
    pub fn masters(&self) -> &[usize] {
        &self.truth.masters
    }
}

/// What one cluster does in a history, drawn from the seed.
#[derive(Clone, Debug)]
pub struct Plan {
    pub member: usize,
    pub shards: usize,
    /// Its faults at their times (ms from the start), in order.
    pub events: Vec<(u64, Event)>,
    /// How long the nodes a change does not involve take to learn it.
    pub gossip_ms: u64,
    pub lag_ms: i64,
    /// Seeds the draws added since the first cluster members (its nodes'
    /// clocks): the earlier draws stay as they were.
    pub later_draws: u64,
}

/// A fault of a cluster.
#[derive(Clone, Debug)]
pub enum Event {
    /// The resource's slot migrates to the shard `1 + to_offset` after
    /// its own: its keys move after `keys_after_ms`, and the slot is
    /// handed over `done_after_ms` later, or never (`None`: the reshard
    /// stalls with the slot open). When `atomic` (Valkey's `CLUSTER
    /// MIGRATESLOTS`), the keys are copied at once and the source's writes
    /// streamed; the handover comes after both delays, and a stall is an
    /// abort (`IMPORT_ABORTED`).
    Migrate { to_offset: usize, keys_after_ms: u64, done_after_ms: Option<u64>, atomic: bool },
    /// A shard's master dies (the resource's shard when `of_resource`,
    /// else the one after it); its replica is promoted `detect_ms` later.
    Failover { of_resource: bool, detect_ms: u64 },
    /// Client `client` is cut off from shard `shard`'s master for `for_ms`.
    Partition { client: usize, shard: usize, for_ms: u64 },
}

/// The clusters of the history of `seed`: none in most histories; in
/// `per_mille` of them one or two of the `members` quorum members are
/// clusters of 2 or 3 shards. From a generator of their own: the other
/// histories' draws stay as they were.
pub fn draw(seed: u64, per_mille: u32, members: usize, clients: usize) -> Vec<Plan> {
    let mut rng = StdRng::seed_from_u64(seed ^ 0xc1a5_7e25);
    if members == 0 || rng.gen_range(0..1000) >= per_mille {
        return Vec::new();
    }
    let count = if rng.gen_range(0..3) == 0 { 2.min(members) } else { 1 };
    let mut chosen: Vec<usize> = Vec::new();
    while chosen.len() < count {
        let member = rng.gen_range(0..members);
        if !chosen.contains(&member) {
            chosen.push(member);
        }
    }
    chosen
        .into_iter()
        .map(|member| {
            let shards = rng.gen_range(2..=3);
            let mut events = Vec::new();
            for _ in 0..rng.gen_range(1..=2) {
                let migrate = Event::Migrate {
                    to_offset: rng.gen_range(0..shards - 1),
                    keys_after_ms: rng.gen_range(0..200),
                    done_after_ms: Some(rng.gen_range(0..300)),
                    atomic: false,
                };
                events.push((rng.gen_range(0..1500), migrate));
            }
            if rng.gen_bool(0.5) {
                let failover = Event::Failover {
                    of_resource: rng.gen_range(0..3) > 0,
                    detect_ms: rng.gen_range(20..200),
                };
                events.push((rng.gen_range(0..1500), failover));
            }
            events.sort_by_key(|(at, _)| *at);
            // A third of the last migrations stall, the slot open.
            if let Some((_, Event::Migrate { done_after_ms, .. })) = events.last_mut() {
                if rng.gen_range(0..3) == 0 {
                    *done_after_ms = None;
                }
            }
            let later_draws = seed ^ 0x1a7e_d4a5 ^ (member as u64) << 40;
            // A third of the migrations are Valkey's atomic ones.
            let mut later = StdRng::seed_from_u64(later_draws ^ 0xa70);
            for (_, event) in &mut events {
                if let Event::Migrate { atomic, .. } = event {
                    *atomic = later.gen_range(0..3) == 0;
                }
            }
            // In half of them a client is cut off from one of its masters.
            if clients > 0 && later.gen_bool(0.5) {
                let partition = Event::Partition {
                    client: later.gen_range(0..clients),
                    shard: later.gen_range(0..shards),
                    for_ms: later.gen_range(1..500),
                };
                events.push((later.gen_range(0..1500), partition));
                events.sort_by_key(|(at, _)| *at);
            }
            Plan {
                member,
                shards,
                events,
                gossip_ms: rng.gen_range(0..300),
                lag_ms: rng.gen_range(0..300),
                later_draws,
            }
        })
        .collect()
}

/// The clusters of `plans`, their nodes appended to `nodes` (after the
/// plain ones, which the schedule's faults hit; the plain node a cluster
/// stands in for stays, unused by the clients). Each cluster's slots are
/// split evenly between its shards.
pub fn build(
    plans: &[Plan],
    nodes: &mut Vec<Node>,
    rules: Rules,
    ttl_max_ms: i64,
    lock_delay_ms: i64,
) -> Vec<Cluster> {
    // Each cluster node's clocks as far from the others as the plain
    // nodes' are (see the module's comment).
    let rates = nodes.iter().map(|n| n.rate_per_mille);
    let (rate_min, rate_max) = (rates.clone().min().unwrap_or(0), rates.max().unwrap_or(0));
    let offsets = nodes.iter().map(|n| n.clock_offset_ms());
    let (offset_min, offset_max) = (offsets.clone().min().unwrap_or(0), offsets.max().unwrap_or(0));
    plans
        .iter()
        .map(|plan| {
            let mut clocks = StdRng::seed_from_u64(plan.later_draws);
            let masters: Vec<usize> = (0..plan.shards)
                .map(|_| {
                    let mut node = Node::new(rules, Persistence::None, ttl_max_ms, lock_delay_ms);
                    node.rate_per_mille = clocks.gen_range(rate_min..=rate_max);
                    node.set_clock_offset(clocks.gen_range(offset_min..=offset_max));
                    nodes.push(node);
                    nodes.len() - 1
                })
                .collect();
            let ranges = (0..plan.shards)
                .map(|shard| {
                    let bound =
                        |k: usize| u16::try_from(k * usize::from(SLOTS) / plan.shards).unwrap_or(SLOTS);
                    (bound(shard), bound(shard + 1) - 1, shard)
                })
                .collect();
            let truth = View { ranges, masters: masters.clone() };
            Cluster {
                member: plan.member,
                views: masters.iter().map(|&m| (m, truth.clone())).collect(),
                truth,
                migration: None,
                replicas: vec![Replica::default(); plan.shards],
                lag_ms: plan.lag_ms,
            }
        })
        .collect()
}

/// Node `node` serves `words` from client `client` at `at`: the reply, and
/// whether the lock command ran there (not redirected, not a query).
/// `INFO lock` and, on a cluster's node, `ASKING`, `CLUSTER SHARDS` and
/// `CLUSTER INFO` are answered here; a lock command on a cluster's node is
/// served when the node serves its key's slot, else redirected. `None`
/// when there is no such node.
pub fn serve(
    nodes: &mut [Node],
    clusters: &mut [Cluster],
    client: usize,
    node: usize,
    words: &[Vec<u8>],
    at: i64,
    asking: &mut bool,
) -> Option<(Reply, bool)> {
    let was_asking = std::mem::take(asking);
    let word = |i: usize| words.get(i).map(|w| String::from_utf8_lossy(w).to_ascii_uppercase());
    let cluster = clusters.iter().position(|c| c.views.contains_key(&node));
    match (word(0).as_deref(), cluster) {
        (Some("INFO"), _) => return Some((info(nodes.get(node)?, at), false)),
        (Some("ASKING"), Some(_)) => {
            *asking = true;
            return Some((Reply::Status("OK"), false));
        }
        (Some("CLUSTER"), Some(k)) => {
            let c = clusters.get(k)?;
            let reply = match word(1).as_deref() {
                Some("SHARDS") => shards(c.views.get(&node)?, client),
                Some("INFO") if masterless(c, nodes) => {
                    Reply::Bulk(b"cluster_enabled:1\r\ncluster_state:fail\r\n".to_vec())
                }
                Some("INFO") => Reply::Bulk(b"cluster_enabled:1\r\ncluster_state:ok\r\n".to_vec()),
                _ => Reply::Error(ERR, "unknown subcommand".into()),
            };
            return Some((reply, false));
        }
        (Some("CLUSTER"), None) => {
            return Some((Reply::Error(ERR, "This instance has cluster support disabled".into()), false))
        }
        _ => {}
    }
    let keys = call_keys(words);
    let (Some(k), Some(&key)) = (cluster, keys.first()) else {
        return Some((nodes.get_mut(node)?.call(words, at), true));
    };
    let c = clusters.get_mut(k)?;
    // A shard without a master (its master dead, its replica not yet
    // promoted): with `cluster-require-full-coverage yes` every node
    // refuses every key.
    if masterless(c, nodes) {
        return Some((Reply::Error("CLUSTERDOWN", "The cluster is down".into()), false));
    }
    let slot = key_slot(key);
    if keys.iter().any(|k| key_slot(k) != slot) {
        return Some((
            Reply::Error("CROSSSLOT", "Keys in request don't hash to the same slot".into()),
            false,
        ));
    }
    let view = c.views.get(&node)?;
    let owner = *view.masters.get(view.owner(slot)?)?;
    let migration = c.migration.filter(|m| m.slot == slot);
    let importer = migration.filter(|m| !m.atomic).and_then(|m| c.truth.masters.get(m.to).copied());
    let here = keys.iter().filter(|k| nodes.get(node).is_some_and(|n| n.has_key(k))).count();
    let redirect = if owner == node {
        // The source of a migration serves the keys it still has, sends
        // the others on, and a call of several keys, some of them moved,
        // is sent again later.
        match importer {
            Some(_) if here > 0 && here < keys.len() => Some(("TRYAGAIN", None)),
            Some(to) if here == 0 => Some(("ASK", Some(to))),
            _ => None,
        }
    } else if was_asking && importer == Some(node) {
        // The target serves a call of several keys once all have moved.
        (keys.len() > 1 && here < keys.len()).then_some(("TRYAGAIN", None))
    } else {
        Some(("MOVED", Some(owner)))
    };
    match redirect {
        Some(("TRYAGAIN", _)) => {
            return Some((
                Reply::Error("TRYAGAIN", "Multiple keys request during rehashing of slot".into()),
                false,
            ))
        }
        Some((code, Some(to))) => {
            return Some((Reply::Error(code, format!("{slot} {}:6379", host(client, to))), false))
        }
        _ => {}
    }
    // The shard's replica catches up before the write: it misses the
    // writes of its last `lag_ms`.
    if let Some(shard) = c.truth.masters.iter().position(|&m| m == node) {
        let (lag_ms, n) = (c.lag_ms, nodes.get(node)?);
        if let Some(replica) = c.replicas.get_mut(shard).filter(|r| at - r.synced_ms >= lag_ms) {
            *replica = Replica { copy: n.replica_copy(), synced_ms: at };
        }
    }
    let reply = nodes.get_mut(node)?.call(words, at);
    // Valkey's atomic migration streams the source's writes of the slot to
    // the target, where each lock arrives (or goes).
    if let Some(m) = migration.filter(|m| m.atomic && c.truth.masters.get(m.from) == Some(&node)) {
        let to = *c.truth.masters.get(m.to)?;
        for key in keys {
            let copy = nodes.get(node)?.key_copy(key);
            let target = nodes.get_mut(to)?;
            if target.key_copy(key) != copy {
                target.lock_arrived(key, copy, at);
            }
        }
    }
    Some((reply, true))
}

/// Whether a shard of `c` has no master now (its master down).
fn masterless(c: &Cluster, nodes: &[Node]) -> bool {
    c.truth.masters.iter().any(|&m| nodes.get(m).is_none_or(|n| !n.up))
}

/// `INFO lock` as the module writes the fields `status()` reads.
fn info(node: &Node, at: i64) -> Reply {
    let left_ms = node.quarantine_left_ms(at);
    let text = format!(
        "# lock\r\nlock_quarantine:{}\r\nlock_quarantine_ms_left:{left_ms}\r\nlock_quarantine_reason:{}\r\n\
         lock_evictable:0\r\nlock_maxmemory_policy_evicting:none\r\nlock_eviction_mode:refuse\r\n\
         lock_last_fencing_token:{}\r\nlock_protections_off:none\r\n",
        u8::from(left_ms > 0),
        if left_ms > 0 { "startup" } else { "none" },
        node.fencing_counter(),
    );
    Reply::Bulk(text.into_bytes())
}

/// `CLUSTER SHARDS` from `view`, naming the nodes as `client` knows them:
/// per shard its slot ranges and its master.
fn shards(view: &View, client: usize) -> Reply {
    let bulk = |s: &str| Reply::Bulk(s.as_bytes().to_vec());
    let shards = view
        .masters
        .iter()
        .enumerate()
        .map(|(shard, &master)| {
            let ranges = (view.ranges.iter().filter(|r| r.2 == shard))
                .flat_map(|&(first, last, _)| [Reply::Int(i64::from(first)), Reply::Int(i64::from(last))])
                .collect();
            let name = host(client, master);
            let node = Reply::Array(vec![
                bulk("id"),
                bulk(&format!("{master:040}")),
                bulk("port"),
                Reply::Int(6379),
                bulk("ip"),
                bulk(&name),
                bulk("endpoint"),
                bulk(&name),
                bulk("role"),
                bulk("master"),
                bulk("replication-offset"),
                Reply::Int(0),
                bulk("health"),
                bulk("online"),
            ]);
            Reply::Array(vec![bulk("slots"), Reply::Array(ranges), bulk("nodes"), Reply::Array(vec![node])])
        })
        .collect();
    Reply::Array(shards)
}

/// Every node that served member `member` (its master; each node that
/// was a master of its cluster).
pub fn member_nodes(clusters: &[Cluster], member: usize) -> Vec<usize> {
    match clusters.iter().find(|c| c.member == member) {
        Some(cluster) => cluster.views.keys().copied().collect(),
        None => vec![member],
    }
}

/// The nodes that serve member `member` now: its master, or each shard
/// master of its cluster.
pub fn member_masters(clusters: &[Cluster], member: usize) -> Vec<usize> {
    match clusters.iter().find(|c| c.member == member) {
        Some(cluster) => cluster.truth.masters.clone(),
        None => vec![member],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(parts: &[&str]) -> Vec<Vec<u8>> {
        parts.iter().map(|p| p.as_bytes().to_vec()).collect()
    }

    /// A world of one plain node and one cluster of 2 shards (nodes 1, 2).
    struct World {
        nodes: Vec<Node>,
        clusters: Vec<Cluster>,
    }

    fn world() -> World {
        let mut nodes = vec![Node::new(Rules::Module, Persistence::None, 600, 0)];
        let plan = Plan { member: 0, shards: 2, events: Vec::new(), gossip_ms: 0, lag_ms: 0, later_draws: 0 };
        let clusters = build(&[plan], &mut nodes, Rules::Module, 600, 0);
        World { nodes, clusters }
    }

    fn call(w: &mut World, node: usize, parts: &[&str], asking: &mut bool) -> (Reply, bool) {
        serve(&mut w.nodes, &mut w.clusters, 0, node, &words(parts), 0, asking).expect("a node")
    }

    #[test]
    fn slot_ranges_split_and_answer_for_every_slot() {
        let mut view = View { ranges: vec![(0, 8191, 0), (8192, 16383, 1)], masters: vec![1, 2] };
        view.set(0, 1);
        view.set(16383, 0);
        view.set(100, 1);
        assert_eq!(
            view.ranges,
            [(0, 0, 1), (1, 99, 0), (100, 100, 1), (101, 8191, 0), (8192, 16382, 1), (16383, 16383, 0)]
        );
        assert_eq!(
            (view.owner(0), view.owner(50), view.owner(100), view.owner(9000)),
            (Some(1), Some(0), Some(1), Some(1))
        );
        assert_eq!(key_slot(b"foo"), 12_182, "as CLUSTER KEYSLOT gives it");
    }

    /// MOVED from a node that does not serve the slot; during a migration
    /// the source serves the keys it has and sends the others on with ASK,
    /// and the target serves them only right after ASKING.
    #[test]
    fn a_cluster_node_redirects_as_redis_does() {
        let mut w = world();
        let slot = key_slot(b"res");
        assert!(slot < 8192, "res lives on shard 0 (node 1)");
        let mut asking = false;
        let (moved, ran) = call(&mut w, 2, &["LOCK.ACQUIRE", "res", "a", "300"], &mut asking);
        assert_eq!((moved, ran), (Reply::Error("MOVED", format!("{slot} c0n1:6379")), false));
        assert!(matches!(
            call(&mut w, 1, &["LOCK.ACQUIRE", "res", "a", "300"], &mut asking),
            (Reply::Int(_), true)
        ));
        w.clusters[0].migration = Some(Migration { slot, from: 0, to: 1, atomic: false });
        // The source still has the key: it serves it.
        assert_eq!(call(&mut w, 1, &["LOCK.EXTEND", "res", "a", "300"], &mut asking), (Reply::Int(1), true));
        // Moved: the source asks, the target refuses without ASKING.
        let holders = w.nodes[1].take_key(b"res").expect("the lock");
        w.nodes[2].put_key(b"res".to_vec(), holders);
        let ask = Reply::Error("ASK", format!("{slot} c0n2:6379"));
        assert_eq!(call(&mut w, 1, &["LOCK.EXTEND", "res", "a", "300"], &mut asking), (ask, false));
        let back = Reply::Error("MOVED", format!("{slot} c0n1:6379"));
        assert_eq!(call(&mut w, 2, &["LOCK.EXTEND", "res", "a", "300"], &mut asking), (back.clone(), false));
        assert_eq!(call(&mut w, 2, &["ASKING"], &mut asking), (Reply::Status("OK"), false));
        assert_eq!(call(&mut w, 2, &["LOCK.EXTEND", "res", "a", "300"], &mut asking), (Reply::Int(1), true));
        // The flag lasts one command.
        assert_eq!(call(&mut w, 2, &["LOCK.EXTEND", "res", "a", "300"], &mut asking), (back, false));
        // A plain node serves every key, and no cluster command.
        assert!(matches!(
            call(&mut w, 0, &["LOCK.ACQUIRE", "res", "b", "300"], &mut asking),
            (Reply::Int(_), true)
        ));
        assert!(matches!(
            call(&mut w, 0, &["CLUSTER", "SHARDS"], &mut asking),
            (Reply::Error(ERR, _), false)
        ));
    }

    /// `CLUSTER SHARDS` names each shard's ranges and master as the asked
    /// node sees them; `INFO lock` says whether the node is quarantined.
    #[test]
    fn the_topology_and_the_health_are_the_asked_nodes() {
        let mut w = world();
        w.clusters[0].views.get_mut(&2).expect("node 2").set(5, 1);
        let mut asking = false;
        let shard_slots = |reply: Reply| -> Vec<Vec<Reply>> {
            let Reply::Array(shards) = reply else { panic!("{reply:?}") };
            shards
                .into_iter()
                .map(|s| match s {
                    Reply::Array(fields) => match &fields[1] {
                        Reply::Array(slots) => slots.clone(),
                        other => panic!("{other:?}"),
                    },
                    other => panic!("{other:?}"),
                })
                .collect()
        };
        let int = Reply::Int;
        let seen_by_1 = shard_slots(call(&mut w, 1, &["CLUSTER", "SHARDS"], &mut asking).0);
        assert_eq!(seen_by_1, [vec![int(0), int(8191)], vec![int(8192), int(16383)]]);
        let seen_by_2 = shard_slots(call(&mut w, 2, &["CLUSTER", "SHARDS"], &mut asking).0);
        assert_eq!(
            seen_by_2,
            [vec![int(0), int(4), int(6), int(8191)], vec![int(5), int(5), int(8192), int(16383)]]
        );
        let promoted = w.nodes[1].promoted(w.nodes[1].replica_copy(), 0);
        w.nodes.push(promoted);
        let Reply::Bulk(info) = call(&mut w, 3, &["INFO", "lock"], &mut asking).0 else { panic!() };
        assert!(String::from_utf8_lossy(&info).contains("lock_quarantine:1\r\n"));
        let Reply::Bulk(info) = call(&mut w, 1, &["INFO", "lock"], &mut asking).0 else { panic!() };
        assert!(String::from_utf8_lossy(&info).contains("lock_quarantine:0\r\n"));
    }
}
