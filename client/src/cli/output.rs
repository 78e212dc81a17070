//! What the CLI prints: shell assignments read back by `eval`, and the
//! `info` table.

use redlock_client::{LockInfo, NodeInfo};

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
    let columns = header.len();
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
