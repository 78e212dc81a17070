//! The client's real `status()` (`INFO lock` on every node, each master
//! of a cluster member, read into one verdict: can a majority grant now?)
//! checked against the simulated truth. An operator, seeing the quorum as
//! client 0 does (its partitions), asks `status()` at moments when fewer
//! members than a majority can grant: a member can when every node that
//! serves it (a master; each shard master of a cluster) is up, reachable
//! and out of quarantine. Its verdict must not be that a majority can
//! ("status over-counts"). When the truth changed during the call (looked
//! at every millisecond, node by node), the moment is skipped: `status()`
//! asks the nodes one after another, so a member whose reason for refusing
//! moved from one node to another during the call (one shard master's
//! quarantine ended, then another's client was cut off) was seen granting
//! node by node, though never at one moment (seeds 9304252319 and
//! 9304315553 of the `upgrade` scenario). The other way (a verdict of "no" while a majority
//! can) is not a violation: a lost or late `INFO` reply makes a node look
//! unreachable.

use std::time::Duration;

use redlock_client::{Config, QuorumStatus, Redlock};

use crate::net::{self, Shared, World};
use crate::{cluster, cluster_faults};

/// Whose view the operator shares (its partitions).
const AS_CLIENT: usize = 0;
/// How often the truth is looked at, and the most `status()` calls made.
const LOOK_EVERY_MS: u64 = 10;
const CALLS_MAX: usize = 4;
/// Between two calls, at least.
const CALL_GAP_MS: u64 = 150;

/// Each member's serving nodes and whether each can grant now, as the
/// simulated world has it for client [`AS_CLIENT`].
fn node_truth(w: &World, members: usize) -> Vec<Vec<(usize, bool)>> {
    let now = w.now_ms();
    let grants = |n: usize| {
        let reachable = !w.partitioned.get(AS_CLIENT).and_then(|p| p.get(n)).copied().unwrap_or(false);
        w.nodes.get(n).is_some_and(|node| node.up && reachable && node.quarantine_left_ms(now) == 0)
    };
    (0..members)
        .map(|m| cluster::member_masters(&w.clusters, m).into_iter().map(|n| (n, grants(n))).collect())
        .collect()
}

/// How many members can grant: those every serving node of which can.
fn members_granting(truth: &[Vec<(usize, bool)>]) -> usize {
    truth.iter().filter(|nodes| nodes.iter().all(|&(_, grants)| grants)).count()
}

/// Watches until `until_ms`: the violations found.
pub async fn watch(world: Shared, members: usize, until_ms: u64) -> Vec<String> {
    let config = Config {
        connect_timeout: Duration::from_millis(100),
        command_timeout: Duration::from_millis(60),
        reconnect_backoff: Duration::from_millis(50),
        ..Config::default()
    };
    let need = members / 2 + 1;
    let urls = cluster_faults::urls(&world, AS_CLIENT, members);
    let Ok(operator) = Redlock::connect(urls, config).await else { return Vec::new() };
    let started = net::lock(&world).started;
    let mut found = Vec::new();
    let mut calls = 0;
    while calls < CALLS_MAX && started.elapsed() < Duration::from_millis(until_ms) {
        let before = node_truth(&net::lock(&world), members);
        let count = members_granting(&before);
        if count >= need {
            tokio::time::sleep(Duration::from_millis(LOOK_EVERY_MS)).await;
            continue;
        }
        calls += 1;
        let at = net::lock(&world).now_ms();
        // The truth looked at every millisecond while the call runs.
        let call = operator.status();
        tokio::pin!(call);
        let mut steady = true;
        let status = loop {
            tokio::select! {
                biased;
                status = &mut call => break status,
                _ = tokio::time::sleep(Duration::from_millis(1)) => {
                    steady &= node_truth(&net::lock(&world), members) == before;
                }
            }
        };
        found.extend(judge(&world, &before, steady, at, &status));
        tokio::time::sleep(Duration::from_millis(CALL_GAP_MS)).await;
    }
    operator.settle().await;
    found
}

/// The verdict `status` of a call from `at` ms against the truth, which was
/// `before` when it began and stayed so throughout, node by node (`steady`):
/// a violation when it says a majority can grant while fewer can.
fn judge(
    world: &Shared,
    before: &[Vec<(usize, bool)>],
    steady: bool,
    at: i64,
    status: &QuorumStatus,
) -> Option<String> {
    let mut w = net::lock(world);
    let (members, need) = (before.len(), status.need);
    let count = members_granting(before);
    let now = w.now_ms();
    w.history.note(now, format!("operator: status() from {at} ms: {}", status.summary()));
    (status.grants() && steady && node_truth(&w, members) == before).then(|| {
        format!(
            "status over-counts: status() from {at} to {now} ms says a majority can grant ({}), but {count} of {members} members can (need {need})",
            status.summary()
        )
    })
}
