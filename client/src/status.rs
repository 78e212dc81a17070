//! `INFO lock` on every node, read into a [`QuorumStatus`]: for each quorum
//! member, whether it can grant now and if not why (unreachable, module not
//! loaded, quarantined and for how long, an evicting `maxmemory-policy`),
//! its fencing counter and the protections its settings turn off; then the
//! settings that differ between nodes, and one verdict: can a majority grant
//! right now, and if not, why.
//!
//! A member that is one master has one node. A member that is a cluster
//! has one node per shard master (and a row for slots no master serves),
//! and counts as granting only when every shard does: a resource lives on
//! one shard, and any resource may be asked for. A cluster some of whose
//! shards grant still gives its vote to the keys of those shards' slots:
//! it "grants some slots", said apart in the verdict (it is not counted
//! among the members that grant). The reading of `INFO lock` and the
//! verdict are pure functions ([`NodeHealth::parse`], [`QuorumStatus::of`]),
//! unit-tested; [`status`] only asks the nodes.

use std::collections::BTreeMap;

use futures_util::future::join_all;

use crate::node::Request;
use crate::quorum::{majority, Raw};
use crate::rounds::fanout::Members;

/// The settings `INFO lock` reports (`lock_<name>`), compared between
/// nodes: a quorum whose nodes disagree on them behaves unevenly (a TTL one
/// node refuses, a quarantine that ends at different times).
pub const SETTINGS: [&str; 11] = [
    "max_ttl_ms",
    "clock_jump_tolerance_ms",
    "max_waiters",
    "expiry_delay_ms",
    "max_renew_keys",
    "max_multi_keys",
    "quarantine_ms",
    "failover_quarantine",
    "publish_freed",
    "removal_quarantine",
    "eviction_mode",
];

/// The start-up or promotion quarantine of a node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeQuarantine {
    /// `startup` or `promotion`.
    pub reason: String,
    pub ms_left: i64,
}

/// What a reachable node with the module says of itself (`INFO lock`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeHealth {
    /// The quarantine in force, if any: the node refuses new grants.
    pub quarantine: Option<NodeQuarantine>,
    /// The `maxmemory-policy` that can evict lock keys, if any.
    pub evicting_policy: Option<String>,
    /// `lock.eviction-mode`: `refuse` (no new grants while the policy can
    /// evict) or `quarantine`.
    pub eviction_mode: String,
    /// The node's fencing counter (`lock_last_fencing_token`).
    pub fencing_counter: u64,
    /// Protections a setting turns off (`lock_protections_off`), e.g.
    /// `startup-quarantine`; empty when all are on.
    pub protections_off: Vec<String>,
    /// Keys and databases quarantined because their locks were removed by
    /// another command (they refuse those keys only).
    pub quarantined_keys: u64,
    pub quarantined_dbs: u64,
    /// Wall clock minus the module clock: non-zero after a wall-clock jump.
    pub wall_clock_offset_ms: i64,
    /// The settings in force, by name ([`SETTINGS`]).
    pub settings: BTreeMap<String, String>,
}

/// Why a node cannot grant now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Blocker {
    /// No connection, or no answer in time.
    Unreachable(String),
    /// The server answers but has no lock module (`INFO lock` is empty).
    NoModule,
    /// In its start-up or promotion quarantine.
    Quarantined(NodeQuarantine),
    /// `maxmemory-policy` can evict lock keys and `lock.eviction-mode` is
    /// `refuse`: the policy's name.
    Evicting(String),
    /// Any other error reply to `INFO lock` (`NOPERM`, ...).
    Failed(String),
}

impl Blocker {
    /// Its name, for other languages' bindings: `unreachable`,
    /// `no-module`, `quarantined`, `evicting` or `error`.
    pub fn name(&self) -> &'static str {
        match self {
            Blocker::Unreachable(_) => "unreachable",
            Blocker::NoModule => "no-module",
            Blocker::Quarantined(_) => "quarantined",
            Blocker::Evicting(_) => "evicting",
            Blocker::Failed(_) => "error",
        }
    }

    /// What it is called in the verdict's counts.
    fn kind(&self) -> &'static str {
        match self {
            Blocker::Unreachable(_) => "unreachable",
            Blocker::NoModule => "without the lock module",
            Blocker::Quarantined(_) => "quarantined",
            Blocker::Evicting(_) => "refusing for an evicting maxmemory-policy",
            Blocker::Failed(_) => "answering an error",
        }
    }
}

/// One node of a member: its URL, and its health or why it has none.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeStatus {
    pub node: String,
    pub health: Result<NodeHealth, Blocker>,
}

impl NodeStatus {
    /// Why this node cannot grant now; `None` when it can.
    pub fn blocker(&self) -> Option<Blocker> {
        match &self.health {
            Err(blocker) => Some(blocker.clone()),
            Ok(health) => health.blocker(),
        }
    }
}

/// One quorum member (one vote): one master, or one cluster with a node
/// per shard master.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberStatus {
    /// The member as configured (its URL).
    pub member: String,
    pub nodes: Vec<NodeStatus>,
}

impl MemberStatus {
    /// Why this member cannot grant now; `None` when every node can. Of a
    /// cluster's shards, a blocker that does not end by itself comes
    /// first; else the quarantine that ends last (the member grants every
    /// slot when it ends).
    pub fn blocker(&self) -> Option<Blocker> {
        let blockers = self.nodes.iter().filter_map(NodeStatus::blocker);
        let (quarantines, others): (Vec<Blocker>, Vec<Blocker>) =
            blockers.partition(|b| matches!(b, Blocker::Quarantined(_)));
        others.into_iter().next().or_else(|| {
            quarantines.into_iter().max_by_key(|b| match b {
                Blocker::Quarantined(q) => q.ms_left,
                _ => 0,
            })
        })
    }

    /// Whether the member is a cluster (its nodes are its shard masters).
    pub fn is_cluster(&self) -> bool {
        crate::member::is_cluster(&self.member)
    }

    /// How many of its nodes can grant now, of how many.
    pub fn nodes_granting(&self) -> (usize, usize) {
        (self.nodes.iter().filter(|n| n.blocker().is_none()).count(), self.nodes.len())
    }

    /// A cluster some but not all of whose shards grant: the keys of the
    /// granting shards' slots still get its vote, the others' do not.
    pub fn grants_some_slots(&self) -> bool {
        let (granting, of) = self.nodes_granting();
        granting > 0 && granting < of
    }
}

/// A setting whose value differs between the nodes that answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Difference {
    /// The setting, as `lock.max-ttl-ms`.
    pub setting: String,
    /// Each value with the nodes that have it.
    pub values: Vec<(String, Vec<String>)>,
}

/// Whether a majority can grant right now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Readiness {
    /// At least the quorum's members can grant.
    Grants,
    /// Fewer can; `cause` is the kind of blocker that alone rules the
    /// quorum out (had every other member granted, still too few would),
    /// or `None` when the causes are mixed.
    Blocked {
        cause: Option<Blocker>,
        /// When the cause is quarantine: in how many ms enough quarantines
        /// end for a majority to grant (if nothing else changes).
        ready_in_ms: Option<i64>,
    },
}

/// The quorum as `INFO lock` shows it, member by member.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QuorumStatus {
    pub members: Vec<MemberStatus>,
    /// The members that must grant (a majority).
    pub need: usize,
    /// The members that can grant now.
    pub granting: usize,
    /// Settings that differ between nodes.
    pub differences: Vec<Difference>,
    pub readiness: Readiness,
}

impl NodeHealth {
    /// Reads `INFO lock`'s text; `Err(NoModule)` when it has no lock
    /// field (the server has no lock module).
    pub fn parse(text: &str) -> Result<NodeHealth, Blocker> {
        let fields: BTreeMap<&str, &str> =
            text.lines().filter_map(|line| line.trim_end().strip_prefix("lock_")?.split_once(':')).collect();
        if fields.is_empty() {
            return Err(Blocker::NoModule);
        }
        let int = |name: &str| fields.get(name).and_then(|v| v.parse::<i64>().ok()).unwrap_or(0);
        let text = |name: &str| fields.get(name).map(|v| v.to_string()).unwrap_or_default();
        let quarantine = (int("quarantine") == 1).then(|| NodeQuarantine {
            reason: text("quarantine_reason"),
            ms_left: int("quarantine_ms_left"),
        });
        let policy = text("maxmemory_policy_evicting");
        let protections_off = match text("protections_off").as_str() {
            "" | "none" => Vec::new(),
            list => list.split(',').map(str::to_string).collect(),
        };
        Ok(NodeHealth {
            quarantine,
            evicting_policy: (int("evictable") == 1).then_some(policy),
            eviction_mode: text("eviction_mode"),
            fencing_counter: fields.get("last_fencing_token").and_then(|v| v.parse().ok()).unwrap_or(0),
            protections_off,
            quarantined_keys: u64::try_from(int("quarantined_keys")).unwrap_or(0),
            quarantined_dbs: u64::try_from(int("quarantined_dbs")).unwrap_or(0),
            wall_clock_offset_ms: int("wall_clock_offset_ms"),
            settings: SETTINGS
                .iter()
                .filter_map(|name| fields.get(name).map(|v| (name.to_string(), v.to_string())))
                .collect(),
        })
    }

    /// Why this node refuses new grants now; `None` when it grants.
    pub fn blocker(&self) -> Option<Blocker> {
        if let Some(quarantine) = &self.quarantine {
            return Some(Blocker::Quarantined(quarantine.clone()));
        }
        match &self.evicting_policy {
            Some(policy) if self.eviction_mode != "quarantine" => Some(Blocker::Evicting(policy.clone())),
            _ => None,
        }
    }
}

impl QuorumStatus {
    /// The verdict over `members`, with the settings compared across every
    /// node that answered.
    pub fn of(members: Vec<MemberStatus>) -> QuorumStatus {
        let need = majority(members.len());
        let blockers: Vec<Option<Blocker>> = members.iter().map(MemberStatus::blocker).collect();
        let granting = blockers.iter().filter(|b| b.is_none()).count();
        let readiness = if granting >= need { Readiness::Grants } else { blocked(&blockers, need) };
        let differences = differences(&members);
        QuorumStatus { members, need, granting, differences, readiness }
    }

    /// Whether a majority can grant now.
    pub fn grants(&self) -> bool {
        self.readiness == Readiness::Grants
    }

    /// Every protection some node has off, with those nodes.
    pub fn protections_off(&self) -> Vec<(String, Vec<String>)> {
        let mut off: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for node in self.members.iter().flat_map(|m| &m.nodes) {
            if let Ok(health) = &node.health {
                for protection in &health.protections_off {
                    off.entry(protection.clone()).or_default().push(node.node.clone());
                }
            }
        }
        off.into_iter().collect()
    }

    /// The members (clusters) that grant the keys of some slots only.
    pub fn granting_some_slots(&self) -> usize {
        self.members.iter().filter(|m| m.grants_some_slots()).count()
    }

    /// The verdict in one line: can a majority grant now, and if not why.
    /// Clusters that grant some slots only are counted apart: they are not
    /// among the members that grant, and when they would make the majority
    /// the line says that keys of some slots may still be granted.
    pub fn summary(&self) -> String {
        let mut counts =
            format!("{} of {} members grant (need {})", self.granting, self.members.len(), self.need);
        let partly = self.granting_some_slots();
        if partly > 0 {
            let verb = if partly == 1 { "grants" } else { "grant" };
            counts.push_str(&format!(", {partly} more {verb} the keys of some shards only"));
        }
        match &self.readiness {
            Readiness::Grants => format!("a majority can grant now: {counts}"),
            Readiness::Blocked { cause, ready_in_ms } => {
                let mut kinds: BTreeMap<&str, usize> = BTreeMap::new();
                for blocker in self.members.iter().filter_map(MemberStatus::blocker) {
                    *kinds.entry(blocker.kind()).or_default() += 1;
                }
                let why: Vec<String> = kinds.iter().map(|(kind, n)| format!("{n} {kind}")).collect();
                let mut line = format!("no majority can grant now: {counts}; {}", why.join(", "));
                match (cause, ready_in_ms) {
                    (Some(Blocker::Quarantined(_)), Some(ms)) => {
                        line.push_str(&format!("; a majority can grant in {ms} ms, when enough quarantines end"))
                    }
                    (Some(Blocker::NoModule), _) => line.push_str(
                        "; load the module on every node (loadmodule .../libredis_lock.so in redis.conf)",
                    ),
                    (Some(Blocker::Unreachable(_)), _) => {
                        line.push_str("; are the nodes up, and are their URLs right?")
                    }
                    (Some(Blocker::Evicting(_)), _) => line.push_str(
                        "; set maxmemory-policy noeviction (or lock.eviction-mode quarantine on a shared instance)",
                    ),
                    _ => {}
                }
                if partly > 0 && self.granting + partly >= self.need {
                    line.push_str("; keys of the granting shards' slots may still be granted");
                }
                line
            }
        }
    }
}

/// The verdict when fewer than `need` members grant: the one kind of
/// blocker that alone rules the quorum out, if any.
fn blocked(blockers: &[Option<Blocker>], need: usize) -> Readiness {
    let spare = blockers.len().saturating_sub(need);
    let of_kind = |kind: &str| blockers.iter().flatten().filter(|b| b.kind() == kind).count();
    let cause = blockers.iter().flatten().find(|b| of_kind(b.kind()) > spare).cloned();
    let ready_in_ms = match cause {
        Some(Blocker::Quarantined(_)) => {
            // The quarantines that must end first, soonest first: the
            // majority grants when the last of those ends.
            let granting = blockers.iter().filter(|b| b.is_none()).count();
            let mut left: Vec<i64> = blockers
                .iter()
                .flatten()
                .filter_map(|b| match b {
                    Blocker::Quarantined(q) => Some(q.ms_left),
                    _ => None,
                })
                .collect();
            left.sort_unstable();
            left.get(need.saturating_sub(granting).saturating_sub(1)).copied()
        }
        _ => None,
    };
    Readiness::Blocked { cause, ready_in_ms }
}

/// The settings whose values differ between the nodes that answered.
fn differences(members: &[MemberStatus]) -> Vec<Difference> {
    let healthy: Vec<(&str, &NodeHealth)> = members
        .iter()
        .flat_map(|m| &m.nodes)
        .filter_map(|n| n.health.as_ref().ok().map(|h| (n.node.as_str(), h)))
        .collect();
    SETTINGS
        .iter()
        .filter_map(|name| {
            let mut values: BTreeMap<&str, Vec<String>> = BTreeMap::new();
            for (node, health) in &healthy {
                let value = health.settings.get(*name).map_or("(unknown)", String::as_str);
                values.entry(value).or_default().push(node.to_string());
            }
            (values.len() > 1).then(|| Difference {
                setting: format!("lock.{}", name.replace('_', "-")),
                values: values.into_iter().map(|(v, nodes)| (v.to_string(), nodes)).collect(),
            })
        })
        .collect()
}

/// `INFO lock` on every node (each master of a cluster member), waiting
/// for every answer (or its timeout); a cluster member's masters are also
/// asked `CLUSTER INFO`: a master whose `cluster_state` is `fail` answers
/// `CLUSTERDOWN` to every key however its `INFO lock` reads.
pub(crate) async fn status(members: &Members) -> QuorumStatus {
    let mut cmd = redis::cmd("INFO");
    cmd.arg("lock");
    // Keyless: the key only routes a cluster's keyed calls.
    let request = Request::one(cmd, "");
    let mut cmd = redis::cmd("CLUSTER");
    cmd.arg("INFO");
    let cluster_info = Request::one(cmd, "");
    let timeout = members.config().command_timeout;
    let queries: Vec<_> = members.list().iter().map(|m| m.query_every_node(&request, timeout)).collect();
    let states: Vec<_> = members
        .list()
        .iter()
        .map(|m| {
            let query = m.is_cluster().then(|| m.query_every_node(&cluster_info, timeout));
            async move {
                match query {
                    Some(query) => query.await,
                    None => Vec::new(),
                }
            }
        })
        .collect();
    let (replies, states) = futures_util::future::join(join_all(queries), join_all(states)).await;
    let members = members
        .list()
        .iter()
        .zip(replies.into_iter().zip(states))
        .map(|(member, (nodes, states))| MemberStatus {
            member: member.text.clone(),
            nodes: nodes
                .into_iter()
                .map(|(node, reply)| {
                    let down =
                        states.iter().find(|(n, _)| *n == node).and_then(|(_, state)| cluster_down(state));
                    let health = match down {
                        Some(why) => Err(Blocker::Unreachable(why)),
                        None => health(reply),
                    };
                    NodeStatus { node, health }
                })
                .collect(),
        })
        .collect();
    QuorumStatus::of(members)
}

/// Why a cluster master refuses every key, from its `CLUSTER INFO`
/// answer: `cluster_state:fail` (a slot with no master while
/// `cluster-require-full-coverage` is `yes`, or the node cut off from the
/// majority of masters). `None` otherwise, or when it did not answer
/// (`INFO lock` says that).
fn cluster_down(answer: &Result<redis::Value, Raw>) -> Option<String> {
    let text: String = redis::from_redis_value(answer.as_ref().ok()?).ok()?;
    let state = text.lines().find_map(|line| line.trim_end().strip_prefix("cluster_state:"))?;
    (state != "ok").then(|| {
        format!("CLUSTERDOWN: cluster_state:{state} (it refuses every key while its cluster lacks a slot's master or a majority)")
    })
}

fn health(reply: Result<redis::Value, Raw>) -> Result<NodeHealth, Blocker> {
    match reply {
        Ok(value) => match redis::from_redis_value::<String>(&value) {
            Ok(text) => NodeHealth::parse(&text),
            Err(e) => Err(Blocker::Failed(format!("unexpected INFO reply: {e}"))),
        },
        Err(Raw::TimedOut) => Err(Blocker::Unreachable("timed out".into())),
        Err(Raw::Unreachable(why)) => Err(Blocker::Unreachable(why)),
        Err(Raw::ServerError { code, detail }) => Err(Blocker::Failed(format!("{code} {detail}"))),
        Err(Raw::ClusterUnavailable(why)) => Err(Blocker::Unreachable(why)),
        Err(other) => Err(Blocker::Failed(format!("unexpected INFO reply {other:?}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cluster_master_whose_state_is_fail_refuses_every_key() {
        let answer = |text: &str| Ok(redis::Value::BulkString(text.as_bytes().to_vec()));
        let ok = "cluster_enabled:1\r\ncluster_state:ok\r\ncluster_slots_assigned:16384\r\n";
        assert_eq!(cluster_down(&answer(ok)), None);
        let why = cluster_down(&answer(&ok.replace("state:ok", "state:fail"))).expect("down");
        assert!(why.starts_with("CLUSTERDOWN: cluster_state:fail"), "{why}");
        assert_eq!(cluster_down(&Err(Raw::TimedOut)), None);
        assert_eq!(cluster_down(&answer("cluster_enabled:0\r\n")), None);
    }

    const INFO: &str = "# lock\r\nlock_grants:3\r\nlock_quarantine:0\r\nlock_quarantine_ms_left:0\r\n\
        lock_quarantine_reason:none\r\nlock_evictable:0\r\nlock_maxmemory_policy_evicting:none\r\n\
        lock_last_fencing_token:1764160000000001\r\nlock_max_ttl_ms:30000\r\nlock_quarantine_ms:-1\r\n\
        lock_eviction_mode:refuse\r\nlock_wall_clock_offset_ms:0\r\nlock_protections_off:none\r\n";

    fn node(name: &str, health: Result<NodeHealth, Blocker>) -> MemberStatus {
        MemberStatus { member: name.into(), nodes: vec![NodeStatus { node: name.into(), health }] }
    }

    fn up() -> Result<NodeHealth, Blocker> {
        NodeHealth::parse(INFO)
    }

    fn quarantined(ms_left: i64) -> Result<NodeHealth, Blocker> {
        let mut health = NodeHealth::parse(INFO).unwrap();
        health.quarantine = Some(NodeQuarantine { reason: "startup".into(), ms_left });
        Ok(health)
    }

    fn down() -> Result<NodeHealth, Blocker> {
        Err(Blocker::Unreachable("connection refused".into()))
    }

    #[test]
    fn info_lock_is_read_field_by_field() {
        let health = NodeHealth::parse(INFO).unwrap();
        assert_eq!(health.quarantine, None);
        assert_eq!(health.evicting_policy, None);
        assert_eq!(health.fencing_counter, 1_764_160_000_000_001);
        assert_eq!(health.settings.get("max_ttl_ms").map(String::as_str), Some("30000"));
        assert!(health.protections_off.is_empty());
        assert_eq!(health.blocker(), None);
        let text = INFO.replace("lock_quarantine:0", "lock_quarantine:1").replace(
            "lock_quarantine_ms_left:0\r\nlock_quarantine_reason:none",
            "lock_quarantine_ms_left:2500\r\nlock_quarantine_reason:promotion",
        );
        let health = NodeHealth::parse(&text).unwrap();
        let q = NodeQuarantine { reason: "promotion".into(), ms_left: 2500 };
        assert_eq!(health.blocker(), Some(Blocker::Quarantined(q)));
        let text = INFO
            .replace("lock_evictable:0", "lock_evictable:1")
            .replace("evicting:none", "evicting:allkeys-lru")
            .replace("protections_off:none", "protections_off:startup-quarantine,failover-quarantine");
        let health = NodeHealth::parse(&text).unwrap();
        assert_eq!(health.blocker(), Some(Blocker::Evicting("allkeys-lru".into())));
        assert_eq!(health.protections_off, ["startup-quarantine", "failover-quarantine"]);
        let shared = NodeHealth { eviction_mode: "quarantine".into(), ..health };
        assert_eq!(shared.blocker(), None, "lock.eviction-mode quarantine grants");
        assert_eq!(NodeHealth::parse("# lock\r\n"), Err(Blocker::NoModule), "Redis without the module");
        assert_eq!(NodeHealth::parse(""), Err(Blocker::NoModule));
    }

    #[test]
    fn a_majority_grants_with_one_node_down() {
        let status = QuorumStatus::of(vec![node("a", up()), node("b", down()), node("c", up())]);
        assert_eq!((status.granting, status.need, status.grants()), (2, 2, true));
        assert_eq!(status.summary(), "a majority can grant now: 2 of 3 members grant (need 2)");
    }

    #[test]
    fn the_cause_is_the_kind_that_alone_rules_the_quorum_out() {
        let status = QuorumStatus::of(vec![node("a", up()), node("b", down()), node("c", down())]);
        assert_eq!(
            status.readiness,
            Readiness::Blocked {
                cause: Some(Blocker::Unreachable("connection refused".into())),
                ready_in_ms: None
            }
        );
        assert_eq!(
            status.summary(),
            "no majority can grant now: 1 of 3 members grant (need 2); 2 unreachable; are the nodes up, and are their URLs right?"
        );
        // 5 members, 3 needed, 1 grants: quarantines ending in 900 and 4000
        // ms; the second to end lets 3 grant.
        let status = QuorumStatus::of(vec![
            node("a", up()),
            node("b", quarantined(4_000)),
            node("c", quarantined(900)),
            node("d", quarantined(30_000)),
            node("e", down()),
        ]);
        assert!(
            matches!(
                status.readiness,
                Readiness::Blocked { cause: Some(Blocker::Quarantined(_)), ready_in_ms: Some(4_000) }
            ),
            "{:?}",
            status.readiness
        );
        assert!(
            status.summary().ends_with(
                "3 quarantined, 1 unreachable; a majority can grant in 4000 ms, when enough quarantines end"
            ),
            "{}",
            status.summary()
        );
        // Mixed: neither kind alone rules it out.
        let status = QuorumStatus::of(vec![node("a", up()), node("b", quarantined(10)), node("c", down())]);
        assert_eq!(status.readiness, Readiness::Blocked { cause: None, ready_in_ms: None });
        let status = QuorumStatus::of(vec![
            node("a", Err(Blocker::NoModule)),
            node("b", Err(Blocker::NoModule)),
            node("c", up()),
        ]);
        assert!(
            status.summary().contains("2 without the lock module; load the module"),
            "{}",
            status.summary()
        );
    }

    fn cluster(name: &str, shards: Vec<Result<NodeHealth, Blocker>>) -> MemberStatus {
        let nodes = shards
            .into_iter()
            .enumerate()
            .map(|(i, health)| NodeStatus { node: format!("127.0.0.1:{}", 7000 + i), health })
            .collect();
        MemberStatus { member: format!("redis+cluster://{name}:7000"), nodes }
    }

    #[test]
    fn a_cluster_grants_when_every_shard_does_and_some_slots_when_some_do() {
        let whole = cluster("a", vec![up(), up(), up()]);
        assert!(whole.is_cluster() && whole.blocker().is_none() && !whole.grants_some_slots());
        let partly = cluster("b", vec![up(), quarantined(300), up()]);
        assert_eq!((partly.nodes_granting(), partly.grants_some_slots()), ((2, 3), true));
        // Not counted as granting: a key of the quarantined shard lacks its vote.
        let status = QuorumStatus::of(vec![whole.clone(), partly.clone(), node("redis://c:1", down())]);
        assert_eq!((status.granting, status.granting_some_slots()), (1, 1));
        assert_eq!(
            status.summary(),
            "no majority can grant now: 1 of 3 members grant (need 2), 1 more grants the keys of some shards \
             only; 1 quarantined, 1 unreachable; keys of the granting shards' slots may still be granted"
        );
        let status = QuorumStatus::of(vec![whole.clone(), partly.clone(), whole]);
        assert_eq!(
            status.summary(),
            "a majority can grant now: 2 of 3 members grant (need 2), 1 more grants the keys of some shards only"
        );
        // The member's blocker: one that does not end by itself first,
        // else the quarantine that ends last.
        let mixed = cluster("d", vec![quarantined(300), down(), quarantined(900)]);
        assert!(matches!(mixed.blocker(), Some(Blocker::Unreachable(_))));
        let waiting = cluster("e", vec![quarantined(300), up(), quarantined(900)]);
        let status = QuorumStatus::of(vec![waiting]);
        assert_eq!(
            status.readiness,
            Readiness::Blocked {
                cause: Some(Blocker::Quarantined(NodeQuarantine { reason: "startup".into(), ms_left: 900 })),
                ready_in_ms: Some(900)
            }
        );
        // No shard grants: not "some slots".
        let none = cluster("f", vec![down(), quarantined(5)]);
        assert!(!none.grants_some_slots());
        assert!(!QuorumStatus::of(vec![none]).summary().contains("some shards"));
    }

    #[test]
    fn settings_that_differ_are_listed_with_their_nodes() {
        let mut other = NodeHealth::parse(INFO).unwrap();
        other.settings.insert("max_ttl_ms".into(), "60000".into());
        other.protections_off = vec!["removal-quarantine".into()];
        let status =
            QuorumStatus::of(vec![node("a", up()), node("b", Ok(other)), node("c", up()), node("d", down())]);
        assert_eq!(
            status.differences,
            [Difference {
                setting: "lock.max-ttl-ms".into(),
                values: vec![
                    ("30000".into(), vec!["a".into(), "c".into()]),
                    ("60000".into(), vec!["b".into()])
                ],
            }]
        );
        assert_eq!(status.protections_off(), [("removal-quarantine".to_string(), vec!["b".to_string()])]);
    }
}
