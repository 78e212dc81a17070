//! What the CLI prints: shell assignments read back by `eval`, and the
//! `info` table.

use redlock_client::{Blocker, LockInfo, MemberStatus, NodeInfo, NodeStatus, QuorumStatus};

/// A word the shell reads back as `text`.
pub fn shell_quote(text: &str) -> String {
    let plain =
        !text.is_empty() && text.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_./:@%+=,".contains(&b));
    if plain {
        text.to_string()
    } else {
        format!("'{}'", text.replace('\'', r"'\''"))
    }
}

/// One row per member, or per holder on a member that has several (a
/// read-write lock's readers, a semaphore's permit holders). With a cluster
/// among the members, a `shard` column says which master answered.
pub fn info_table(nodes: &[NodeInfo]) -> String {
    let clusters = nodes.iter().any(|n| n.shard.is_some());
    let mut header = vec!["member", "state", "kind", "mode", "holder", "holds", "fence", "ttl-ms", "waiters"];
    if clusters {
        header.insert(1, "shard");
    }
    let mut rows: Vec<Vec<String>> = vec![header.iter().map(|h| h.to_string()).collect()];
    let dash = || "-".to_string();
    for node in nodes {
        let first = rows.len();
        let url = node.node.clone();
        match &node.info {
            Ok(None) => rows
                .push([url, "free".to_string()].into_iter().chain(std::iter::repeat_n(dash(), 7)).collect()),
            Ok(Some(LockInfo { refused: Some(refused), kind, waiters, .. })) => rows.push(vec![
                url,
                format!("refused: {} ({} ms)", refused.code, refused.ms),
                kind.clone(),
                dash(),
                dash(),
                "0".to_string(),
                dash(),
                dash(),
                waiters.to_string(),
            ]),
            Ok(Some(info)) if info.holders.is_empty() => rows.push(vec![
                url,
                "held".to_string(),
                info.kind.clone(),
                dash(),
                info.holder.clone(),
                info.holds.to_string(),
                info.fence.to_string(),
                info.ttl_ms.to_string(),
                info.waiters.to_string(),
            ]),
            Ok(Some(info)) => {
                let kind = match info.permits {
                    Some(permits) => format!("{}/{permits}", info.kind),
                    None => info.kind.clone(),
                };
                for holder in &info.holders {
                    rows.push(vec![
                        url.clone(),
                        "held".to_string(),
                        kind.clone(),
                        holder.mode.clone(),
                        holder.holder.clone(),
                        info.holds.to_string(),
                        holder.fence.to_string(),
                        holder.ttl_ms.to_string(),
                        info.waiters.to_string(),
                    ]);
                }
            }
            Err(why) => rows.push(vec![url, format!("error: {why}")]),
        }
        if clusters {
            let shard = node.shard.clone().unwrap_or_else(dash);
            for row in rows.iter_mut().skip(first) {
                row.insert(1, shard.clone());
            }
        }
    }
    table(rows)
}

/// Rows in aligned columns (the first row's width); a shorter row (a node
/// that could not answer) is printed as it is.
fn table(rows: Vec<Vec<String>>) -> String {
    let columns = rows.first().map_or(0, Vec::len);
    let widths: Vec<usize> = (0..columns)
        .map(|c| rows.iter().filter(|r| r.len() == columns).map(|r| r[c].len()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for row in rows {
        let cells: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(cell, w)| if row.len() == columns { format!("{cell:<w$}") } else { cell.clone() })
            .collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    out
}

/// `status`: one row per node (a cluster member: a row that says which of
/// its shards grant, then its shard masters' rows, indented), then the
/// settings that differ, the protections that are off, and the verdict.
pub fn status_report(status: &QuorumStatus) -> String {
    let header = ["node", "state", "quarantine", "evicting", "fencing-counter", "protections-off"];
    let mut rows: Vec<Vec<String>> = vec![header.iter().map(|h| h.to_string()).collect()];
    for member in &status.members {
        // A cluster with no slot map has one row: the member with why.
        let shards = member.is_cluster() && member.nodes.iter().all(|n| n.node != member.member);
        if shards {
            rows.push(vec![member.member.clone(), cluster_state(member)]);
        }
        for node in &member.nodes {
            rows.push(node_row(node, if shards { "  " } else { "" }));
        }
    }
    let mut out = table(rows);
    for difference in &status.differences {
        let values: Vec<String> = difference
            .values
            .iter()
            .map(|(value, nodes)| format!("{value} on {}", nodes.join(", ")))
            .collect();
        out.push_str(&format!("setting differs: {}: {}\n", difference.setting, values.join("; ")));
    }
    for (protection, nodes) in status.protections_off() {
        out.push_str(&format!("protection off: {protection} on {}\n", nodes.join(", ")));
    }
    out.push_str(&status.summary());
    out.push('\n');
    out
}

/// A cluster member's state: whether all, some or none of its shards
/// grant (some: the keys of their slots get this member's vote).
fn cluster_state(member: &MemberStatus) -> String {
    match member.nodes_granting() {
        (granting, of) if granting == of => format!("cluster: grants every slot ({of} of {of} shards grant)"),
        (0, of) => format!("cluster: grants no slot (0 of {of} shards grant)"),
        (granting, of) => format!("cluster: grants some slots only ({granting} of {of} shards grant)"),
    }
}

/// One node's row, its name after `indent`.
fn node_row(node: &NodeStatus, indent: &str) -> Vec<String> {
    let name = format!("{indent}{}", node.node);
    let health = match &node.health {
        Ok(health) => health,
        Err(blocker) => return vec![name, blocker_text(blocker)],
    };
    let state = match health.blocker() {
        None => "grants".to_string(),
        Some(Blocker::Quarantined(_)) => "quarantined".to_string(),
        Some(Blocker::Evicting(_)) => "refuses: evicting".to_string(),
        Some(other) => blocker_text(&other),
    };
    let dash = || "-".to_string();
    vec![
        name,
        state,
        health.quarantine.as_ref().map_or_else(dash, |q| format!("{} {} ms left", q.reason, q.ms_left)),
        health.evicting_policy.clone().unwrap_or_else(dash),
        health.fencing_counter.to_string(),
        if health.protections_off.is_empty() { dash() } else { health.protections_off.join(",") },
    ]
}

fn blocker_text(blocker: &Blocker) -> String {
    match blocker {
        Blocker::Unreachable(why) => format!("unreachable: {why}"),
        Blocker::NoModule => "no lock module: INFO lock is empty (load the module on this node)".into(),
        Blocker::Quarantined(q) => format!("quarantined ({}, {} ms left)", q.reason, q.ms_left),
        Blocker::Evicting(policy) => {
            format!("refuses new locks: maxmemory-policy {policy} can evict lock keys")
        }
        Blocker::Failed(why) => format!("error: {why}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shell_quoting() {
        assert_eq!(shell_quote("job-1"), "job-1");
        assert_eq!(shell_quote("a b"), "'a b'");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
        assert_eq!(shell_quote(""), "''");
    }

    #[test]
    fn status_shows_each_node_then_what_differs_then_the_verdict() {
        use redlock_client::{MemberStatus, NodeHealth, NodeQuarantine, NodeStatus};
        let health = |ttl: &str| NodeHealth {
            fencing_counter: 7,
            eviction_mode: "refuse".into(),
            settings: [("max_ttl_ms".to_string(), ttl.to_string())].into(),
            ..NodeHealth::default()
        };
        let member = |url: &str, health| MemberStatus {
            member: url.into(),
            nodes: vec![NodeStatus { node: url.into(), health }],
        };
        let quarantined = NodeHealth {
            quarantine: Some(NodeQuarantine { reason: "startup".into(), ms_left: 2500 }),
            protections_off: vec!["removal-quarantine".into()],
            ..health("30000")
        };
        let status = QuorumStatus::of(vec![
            member("redis://a:1", Ok(health("30000"))),
            member("redis://b:2", Ok(quarantined)),
            member("redis://c:3", Err(Blocker::Unreachable("connection refused".into()))),
            member("redis://d:4", Ok(health("60000"))),
            member("redis://e:5", Ok(health("30000"))),
        ]);
        let report = status_report(&status);
        let lines: Vec<&str> = report.lines().collect();
        assert!(lines[0].starts_with("node") && lines[0].contains("fencing-counter"), "{report}");
        assert!(lines[1].starts_with("redis://a:1  grants"), "{report}");
        assert!(lines[2].contains("quarantined") && lines[2].contains("startup 2500 ms left"), "{report}");
        assert!(lines[2].ends_with("removal-quarantine"), "{report}");
        assert_eq!(lines[3], "redis://c:3  unreachable: connection refused");
        assert_eq!(lines[6], "setting differs: lock.max-ttl-ms: 30000 on redis://a:1, redis://b:2, redis://e:5; 60000 on redis://d:4");
        assert_eq!(lines[7], "protection off: removal-quarantine on redis://b:2");
        assert_eq!(lines[8], "a majority can grant now: 3 of 5 members grant (need 3)");
        assert_eq!(super::super::exit::status_code(&status), super::super::exit::CONFIG);
    }

    #[test]
    fn a_cluster_member_says_which_of_its_shards_grant() {
        use redlock_client::{NodeHealth, NodeQuarantine};
        let health = NodeHealth { eviction_mode: "refuse".into(), ..NodeHealth::default() };
        let quarantined = NodeHealth {
            quarantine: Some(NodeQuarantine { reason: "promotion".into(), ms_left: 900 }),
            ..health.clone()
        };
        let cluster = "redis+cluster://127.0.0.1:7000";
        let node = |name: &str, health| NodeStatus { node: name.into(), health };
        let status = QuorumStatus::of(vec![MemberStatus {
            member: cluster.into(),
            nodes: vec![
                node("127.0.0.1:7000", Ok(health.clone())),
                node("127.0.0.1:7001", Ok(quarantined)),
                node("127.0.0.1:7002", Err(Blocker::Unreachable("connection refused".into()))),
            ],
        }]);
        let report = status_report(&status);
        let lines: Vec<&str> = report.lines().collect();
        assert_eq!(lines[1], format!("{cluster}  cluster: grants some slots only (1 of 3 shards grant)"));
        assert!(lines[2].starts_with("  127.0.0.1:7000  grants"), "{report}");
        assert!(lines[3].starts_with("  127.0.0.1:7001  quarantined"), "{report}");
        assert_eq!(lines[4], "  127.0.0.1:7002  unreachable: connection refused");
        assert_eq!(
            lines[5],
            "no majority can grant now: 0 of 1 members grant (need 1), 1 more grants the keys of some shards \
             only; 1 unreachable; are the nodes up, and are their URLs right?; keys of the granting shards' \
             slots may still be granted"
        );
        // With no slot map, the member is one row that says why.
        let why = format!("member 1 ({cluster}): no seed answers");
        let status = QuorumStatus::of(vec![MemberStatus {
            member: cluster.into(),
            nodes: vec![node(cluster, Err(Blocker::Unreachable(why.clone())))],
        }]);
        assert_eq!(
            status_report(&status).lines().nth(1),
            Some(format!("{cluster}  unreachable: {why}").as_str())
        );
    }

    #[test]
    fn info_lists_every_holder_of_a_semaphore() {
        use redlock_client::HolderInfo;
        let permit = |holder: &str, fence| HolderInfo {
            holder: holder.into(),
            mode: "permit".into(),
            fence,
            ttl_ms: 900,
            deadline_ms: 0,
        };
        let nodes = [
            NodeInfo {
                node: "n1".into(),
                shard: None,
                info: Ok(Some(LockInfo {
                    kind: "semaphore".into(),
                    holds: 2,
                    permits: Some(2),
                    holders: vec![permit("aaa", 7), permit("bbb", 9)],
                    ..LockInfo::default()
                })),
            },
            NodeInfo { node: "n2".into(), shard: None, info: Ok(None) },
        ];
        let table = info_table(&nodes);
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines.len(), 4, "{table}");
        assert!(lines[0].starts_with("member") && lines[0].contains("mode"), "{table}");
        assert!(!lines[0].contains("shard"), "no cluster, no shard column: {table}");
        assert!(lines[1].contains("semaphore/2") && lines[1].contains("aaa") && lines[1].contains("permit"));
        assert!(lines[2].contains("bbb") && lines[2].contains(" 9 "), "{table}");
        assert!(lines[3].starts_with("n2") && lines[3].contains("free"), "{table}");
    }

    /// A cluster member's row says which shard's master answered.
    #[test]
    fn info_names_the_shard_of_a_cluster_member() {
        let nodes = [
            NodeInfo { node: "redis://m1".into(), shard: None, info: Ok(None) },
            NodeInfo {
                node: "redis+cluster://c1:7000".into(),
                shard: Some("10.0.0.2:7001".into()),
                info: Ok(Some(LockInfo {
                    kind: "plain".into(),
                    holder: "t".into(),
                    holds: 1,
                    ..LockInfo::default()
                })),
            },
            NodeInfo {
                node: "redis+cluster://c2:7000".into(),
                shard: None,
                info: Err("cluster unavailable".into()),
            },
        ];
        let table = info_table(&nodes);
        let lines: Vec<Vec<&str>> = table.lines().map(|l| l.split_whitespace().collect()).collect();
        assert_eq!(lines[0][..3], ["member", "shard", "state"], "{table}");
        assert_eq!(lines[1][..3], ["redis://m1", "-", "free"], "{table}");
        assert_eq!(lines[2][..4], ["redis+cluster://c1:7000", "10.0.0.2:7001", "held", "plain"], "{table}");
        assert_eq!(lines[3][..3], ["redis+cluster://c2:7000", "-", "error:"], "{table}");
    }
}
