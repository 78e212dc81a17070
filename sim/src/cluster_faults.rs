//! A cluster member's life in a history (the simulated cluster itself is
//! `cluster.rs`): its URLs, its faults at their times (resharding,
//! failovers, gossip), and the check at the end that each client, as it
//! is, still gets every member to run its release.

use std::time::Duration;

use redlock_client::{Mode, Redlock};

use crate::cluster::{self, host, key_slot, Cluster, Event, Migration, Plan};
use crate::net::{self, Shared, World};

/// The URLs client `client` is given: the plain nodes', and for a member
/// that is a cluster its spelling, seeded with its masters now.
pub fn urls(world: &Shared, client: usize, members: usize) -> Vec<String> {
    let w = net::lock(world);
    (0..members)
        .map(|member| match w.clusters.iter().find(|c| c.member == member) {
            None => net::url(client, member),
            Some(cluster) => {
                let seeds: Vec<String> =
                    cluster.masters().iter().map(|&m| format!("{}:6379", host(client, m))).collect();
                let (first, rest) = seeds.split_first().map_or(("", &[][..]), |(f, r)| (f.as_str(), r));
                let addrs: Vec<String> = rest.iter().map(|a| format!("addr={a}")).collect();
                format!("redis+cluster://{first}?{}", addrs.join("&"))
            }
        })
        .collect()
}

/// Cluster `k`'s faults at their times; ends after its last one, or once
/// an operator finished a stalled migration.
pub async fn inject(world: Shared, k: usize, plan: Plan, resource: &'static str) {
    let started = net::lock(&world).started;
    let slot = key_slot(resource.as_bytes());
    for (at, event) in plan.events {
        tokio::time::sleep_until(started + Duration::from_millis(at)).await;
        match event {
            Event::Migrate { to_offset, keys_after_ms, done_after_ms, atomic: true } => {
                let Some(masters) = atomic_migration(&world, k, plan.shards, to_offset, resource) else {
                    continue;
                };
                tokio::time::sleep(Duration::from_millis(keys_after_ms)).await;
                if let Some(done_after_ms) = done_after_ms {
                    tokio::time::sleep(Duration::from_millis(done_after_ms)).await;
                }
                atomic_handover(&world, k, resource, done_after_ms.is_some(), masters);
            }
            Event::Migrate { to_offset, keys_after_ms, done_after_ms, atomic: false } => {
                // SETSLOT IMPORTING on the target (its slot wait starts),
                // then MIGRATING on the source.
                let migration = change_nodes(&world, k, |c, nodes| {
                    let from = c.truth.owner(slot)?;
                    let to = (from + 1 + to_offset) % plan.shards;
                    c.migration = Some(Migration { slot, from, to, atomic: false });
                    nodes.get_mut(*c.truth.masters.get(to)?)?.import_started(slot);
                    Some(format!("slot {slot} migrating from shard {from} to shard {to}"))
                });
                if migration.is_none() {
                    continue;
                }
                tokio::time::sleep(Duration::from_millis(keys_after_ms)).await;
                migrate_keys(&world, k, false);
                let Some(done_after_ms) = done_after_ms else {
                    change(&world, k, |_| Some(format!("slot {slot} stays open (the reshard stalls)")));
                    continue;
                };
                tokio::time::sleep(Duration::from_millis(done_after_ms)).await;
                hand_over(&world, k, resource, "");
            }
            Event::Partition { client, shard, for_ms } => {
                let node =
                    net::lock(&world).clusters.get(k).and_then(|c| c.truth.masters.get(shard).copied());
                let Some(node) = node else { continue };
                change(&world, k, |_| {
                    Some(format!("c{client} is cut off from shard {shard}'s master n{node}"))
                });
                crate::run::set_partition(&world, client, node, true);
                tokio::time::sleep(Duration::from_millis(for_ms)).await;
                crate::run::set_partition(&world, client, node, false);
            }
            Event::Failover { of_resource, detect_ms } => {
                let Some((shard, old)) = fail(&world, k, slot, of_resource, plan.shards) else { continue };
                tokio::time::sleep(Duration::from_millis(detect_ms)).await;
                promote(&world, k, shard, old);
            }
        }
        tokio::time::sleep(Duration::from_millis(plan.gossip_ms)).await;
        change(&world, k, |c| {
            for view in c.views.values_mut() {
                *view = c.truth.clone();
            }
            Some("every node knows the change (gossip)".to_string())
        });
    }
    // An operator finishes a stalled reshard (`redis-cli --cluster fix`)
    // once the clients are done with it: while it stays open its importer
    // refuses new grants in the slot (the slot's wait), so a member would
    // refuse the resource for good.
    if net::lock(&world).clusters.get(k).is_some_and(|c| c.migration.is_some()) {
        tokio::time::sleep_until(started + Duration::from_millis(STALL_FIXED_AT_MS)).await;
        hand_over(&world, k, resource, " (an operator finishes the stalled reshard)");
    }
}

/// Valkey's atomic import of the resource's slot starts (`CLUSTER
/// MIGRATESLOTS`, `IMPORT_STARTED` on the target: its slot wait starts):
/// the slot's lock keys are copied to the target, where they arrive; the
/// source goes on serving the slot and streams its writes (`cluster.rs`).
/// Returns the source's and the target's masters.
fn atomic_migration(
    world: &Shared,
    k: usize,
    shards: usize,
    to_offset: usize,
    resource: &str,
) -> Option<(usize, usize)> {
    let slot = key_slot(resource.as_bytes());
    let now = net::lock(world).now_ms();
    let mut masters = None;
    change_nodes(world, k, |c, nodes| {
        let from = c.truth.owner(slot)?;
        let to = (from + 1 + to_offset) % shards;
        c.migration = Some(Migration { slot, from, to, atomic: true });
        let (source, target) = (*c.truth.masters.get(from)?, *c.truth.masters.get(to)?);
        masters = Some((source, target));
        let copies: Vec<_> = (nodes.get(source)?.keys_in_slot(slot).into_iter())
            .map(|key| (nodes.get(source).and_then(|n| n.key_copy(&key)), key))
            .collect();
        let target = nodes.get_mut(target)?;
        target.import_started(slot);
        for (copy, key) in copies {
            target.lock_arrived(&key, copy, now);
        }
        Some(format!("slot {slot}: atomic import (CLUSTER MIGRATESLOTS) from shard {from} to shard {to}"))
    });
    masters
}

/// The atomic import ends: completed (`done`: the target owns the slot;
/// the source deletes its keys without keyspace events), or aborted (the
/// target drops what it copied; the source keeps the slot), as it is when
/// either shard's master is not the one it started with (`masters`: a
/// failover cancels it). The target's slot wait lasts a quarantine longer
/// either way (`IMPORT_COMPLETED`, `IMPORT_ABORTED`).
fn atomic_handover(world: &Shared, k: usize, resource: &str, done: bool, masters: (usize, usize)) {
    let slot = key_slot(resource.as_bytes());
    let now = net::lock(world).now_ms();
    change_nodes(world, k, |c, nodes| {
        let m = c.migration.take()?;
        let (source, target) = (*c.truth.masters.get(m.from)?, *c.truth.masters.get(m.to)?);
        let done = done && (source, target) == masters;
        if done {
            let exporter = nodes.get_mut(source)?;
            for key in exporter.keys_in_slot(slot) {
                exporter.take_key(&key);
            }
            c.truth.set(slot, m.to);
            for node in [source, target] {
                c.views.insert(node, c.truth.clone());
            }
        } else {
            let importer = nodes.get_mut(target)?;
            for key in importer.keys_in_slot(slot) {
                importer.take_key(&key);
            }
        }
        nodes.get_mut(target)?.import_ended(slot, now);
        Some(if done {
            format!("slot {slot} now served by shard {} (the atomic import completed)", m.to)
        } else {
            format!("slot {slot}: the atomic import to shard {} is aborted", m.to)
        })
    });
}

/// When an operator finishes a reshard that stalled (ms from the start):
/// after every drawn event and its gossip.
const STALL_FIXED_AT_MS: u64 = 2500;

/// The migrating slot's last keys move, then `SETSLOT NODE` on the target
/// (its slot wait ends a quarantine later), then the source: both know at
/// once, the others by gossip.
fn hand_over(world: &Shared, k: usize, resource: &str, why: &str) {
    migrate_keys(world, k, true);
    let slot = key_slot(resource.as_bytes());
    let now = net::lock(world).now_ms();
    change_nodes(world, k, |c, nodes| {
        let m = c.migration.take()?;
        c.truth.set(slot, m.to);
        if let Some(n) = c.truth.masters.get(m.to).and_then(|&to| nodes.get_mut(to)) {
            n.import_ended(slot, now);
        }
        for shard in [m.from, m.to] {
            let node = *c.truth.masters.get(shard)?;
            c.views.insert(node, c.truth.clone());
        }
        Some(format!("slot {slot} now served by shard {}{why}", m.to))
    });
}

/// The master of the resource's shard (`of_resource`) or of the one after
/// it dies: that shard and its master.
fn fail(world: &Shared, k: usize, slot: u16, of_resource: bool, shards: usize) -> Option<(usize, usize)> {
    let mut w = net::lock(world);
    let (shard, old) = w.clusters.get(k).and_then(|c| {
        let own = c.truth.owner(slot)?;
        let shard = if of_resource { own } else { (own + 1) % shards };
        Some((shard, *c.truth.masters.get(shard)?))
    })?;
    let now = w.now_ms();
    w.history.note(now, format!("cluster {k}: shard {shard}'s master n{old} dies"));
    w.nodes.get_mut(old)?.crash();
    Some((shard, old))
}

/// Shard `shard`'s replica replaces its dead master `old`: promoted with
/// what it had replicated, it starts its failover quarantine.
fn promote(world: &Shared, k: usize, shard: usize, old: usize) {
    let mut w = net::lock(world);
    let now = w.now_ms();
    let Some(copy) = w.clusters.get(k).and_then(|c| c.replicas.get(shard)).map(|r| r.copy.clone()) else {
        return;
    };
    let Some(promoted) = w.nodes.get(old).map(|n| n.promoted(copy, now)) else { return };
    w.nodes.push(promoted);
    let new = w.nodes.len() - 1;
    if let Some(c) = w.clusters.get_mut(k) {
        if let Some(master) = c.truth.masters.get_mut(shard) {
            *master = new;
        }
        c.views.insert(new, c.truth.clone());
    }
    w.history.note(now, format!("cluster {k}: its replica n{new} is promoted (and quarantines)"));
}

/// Applies `what` to cluster `k` and notes what it says happened.
fn change(world: &Shared, k: usize, what: impl FnOnce(&mut Cluster) -> Option<String>) -> Option<String> {
    let mut w = net::lock(world);
    let now = w.now_ms();
    let done = w.clusters.get_mut(k).and_then(what)?;
    w.history.note(now, format!("cluster {k}: {done}"));
    Some(done)
}

/// Applies `what` to cluster `k` and its nodes, and notes what it says
/// happened.
fn change_nodes(
    world: &Shared,
    k: usize,
    what: impl FnOnce(&mut Cluster, &mut [crate::node::Node]) -> Option<String>,
) -> Option<String> {
    let mut w = net::lock(world);
    let now = w.now_ms();
    let World { clusters, nodes, .. } = &mut *w;
    let done = what(clusters.get_mut(k)?, nodes)?;
    w.history.note(now, format!("cluster {k}: {done}"));
    Some(done)
}

/// `MIGRATE` of the migrating slot's lock keys (the first only, unless
/// `all`: a call of several keys meets some moved, `TRYAGAIN`) from the
/// source master to the importing one, as they are (holders, tokens,
/// deadlines); the target takes each as a lock that arrived (its counter
/// raised to the lock's tokens, the key quarantined against a takeover by
/// expiry, exempt from the slot's wait).
fn migrate_keys(world: &Shared, k: usize, all: bool) {
    let mut w = net::lock(world);
    let now = w.now_ms();
    let Some((slot, from, to)) = w.clusters.get(k).and_then(|c| {
        let m = c.migration?;
        Some((m.slot, *c.truth.masters.get(m.from)?, *c.truth.masters.get(m.to)?))
    }) else {
        return;
    };
    let mut keys = w.nodes.get(from).map(|n| n.keys_in_slot(slot)).unwrap_or_default();
    keys.retain(|key| !w.nodes.get(to).is_some_and(|n| n.has_key(key)));
    keys.truncate(if all { keys.len() } else { 1 });
    for key in keys {
        let Some(holders) = w.nodes.get_mut(from).and_then(|n| n.take_key(&key)) else { continue };
        if let Some(n) = w.nodes.get_mut(to) {
            n.lock_arrived(&key, Some(holders), now);
        }
        let text = String::from_utf8_lossy(&key).into_owned();
        w.history.note(now, format!("cluster {k}: MIGRATE {text} from n{from} to n{to}"));
    }
}

/// Each client as it is at the end (its connections, its clusters' slot
/// maps, after whatever they went through), every fault over and every
/// TTL and quarantine run out, takes the lock once more and releases it:
/// every member must run that release, a cluster member too (a stale map
/// is mended by `MOVED`, a migration left open crossed with `ASK`). A
/// connection that broke while the client was idle fails its first call,
/// so a client has three tries. What it finds: a member that never runs
/// it ("stuck member").
pub async fn recovered(
    world: &Shared,
    clients: Vec<(usize, Redlock)>,
    resource: &str,
    mode: Mode,
) -> Vec<String> {
    const TRIES: usize = 3;
    let mut stuck = Vec::new();
    for (c, redlock) in clients {
        let mut why = String::new();
        for _ in 0..TRIES {
            let owner = match redlock.try_acquire(resource, mode, Duration::from_millis(600)).await {
                Err(e) => {
                    why = format!("cannot take the lock: {e}");
                    continue;
                }
                Ok(guard) => {
                    let owner = guard.token().as_bytes().to_vec();
                    let _ = guard.release().await;
                    owner
                }
            };
            redlock.settle().await;
            let missing = not_released(&net::lock(world), &owner);
            if missing.is_empty() {
                why.clear();
                break;
            }
            why = format!("member(s) {missing:?} did not run its release");
        }
        redlock.settle().await;
        let mut w = net::lock(world);
        let now = w.now_ms();
        if why.is_empty() {
            w.history
                .note(now, format!("c{c} takes and releases the lock again: every member runs the release"));
        } else {
            w.history.note(now, format!("c{c} at the end: {why}"));
            stuck.push(format!("stuck member: client c{c}, every fault over, {TRIES} times: {why}"));
        }
    }
    stuck
}

/// The quorum members (from 0) none of whose nodes ran a release of
/// `owner`.
fn not_released(w: &World, owner: &[u8]) -> Vec<usize> {
    let members = w.members;
    (0..members)
        .filter(|&member| {
            let nodes = cluster::member_nodes(&w.clusters, member);
            !nodes.iter().any(|&n| w.history.released.contains(&(n, owner.to_vec())))
        })
        .collect()
}
