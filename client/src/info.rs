//! `LOCK.INFO` on every node, read into [`LockInfo`]: what an operator (or
//! the CLI's `info` table) sees of one lock, node by node.

use futures_util::future::join_all;
use lock_protocol::command as names;
use redis::Value;

use crate::node::Request;
use crate::quorum::Raw;
use crate::rounds::fanout::Members;

/// One node's view of a lock, from `LOCK.INFO`.
///
/// A plain or reentrant lock fills `holder`, `fence`, `ttl_ms` and
/// `deadline_ms` with its one holder's. A read-write lock (`kind`
/// "shared") or a semaphore has one entry per live holder in `holders`
/// (`holds` is their count) and leaves those four empty; a semaphore also
/// gives its `permits`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LockInfo {
    pub kind: String,
    pub holder: String,
    pub holds: i64,
    pub fence: i64,
    pub ttl_ms: i64,
    pub deadline_ms: i64,
    pub waiters: i64,
    /// A semaphore's permit count.
    pub permits: Option<i64>,
    /// The holders of a read-write lock or semaphore.
    pub holders: Vec<HolderInfo>,
    /// Nobody holds the lock, yet a new grant would be refused now: why
    /// (`startup`, `promotion`, `flushed`, `swapped`, `evicted`, `changed`,
    /// `overflow`, `evictable`, `lock-delay`, `restart-grace`, `queued`),
    /// for how many ms (-1: until a setting changes or the queue moves), and
    /// the node's explanation.
    pub refused: Option<Refused>,
}

/// Why a node refuses a new grant of a lock nobody holds (`LOCK.INFO`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Refused {
    pub code: String,
    pub ms: i64,
    pub reason: String,
}

/// One holder of a read-write lock or semaphore, from `LOCK.INFO`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HolderInfo {
    pub holder: String,
    /// "read", "write" or "permit".
    pub mode: String,
    pub fence: i64,
    pub ttl_ms: i64,
    pub deadline_ms: i64,
}

/// `LOCK.INFO` on one member: `Ok(None)` when no lock is held there.
#[derive(Clone, Debug)]
pub struct NodeInfo {
    /// The member as given (`redis://...` or `redis+cluster://...`).
    pub node: String,
    /// For a cluster member, the address of the shard's master that gave
    /// the answer (`host:port`).
    pub shard: Option<String>,
    pub info: std::result::Result<Option<LockInfo>, String>,
}

/// `LOCK.INFO` on every member, in member order (waiting for every answer).
pub(crate) async fn info(members: &Members, resource: &str) -> Vec<NodeInfo> {
    let mut cmd = redis::cmd(names::text(names::INFO));
    cmd.arg(resource);
    let request = Request::one(cmd, resource);
    let timeout = members.config().command_timeout;
    let queries: Vec<_> = members.list().iter().map(|m| m.query(&request, timeout)).collect();
    let replies = join_all(queries).await;
    members
        .list()
        .iter()
        .zip(replies)
        .map(|(member, (reply, shard))| NodeInfo {
            node: member.text.clone(),
            shard,
            info: match reply {
                Ok(value) => parse_info(value),
                Err(raw) => Err(describe_raw(&raw)),
            },
        })
        .collect()
}

fn describe_raw(raw: &Raw) -> String {
    match raw {
        Raw::ServerError { code, detail } => crate::quorum::error_text(code, detail),
        Raw::TimedOut => "timed out".into(),
        Raw::Unreachable(why) => format!("unreachable: {why}"),
        Raw::ClusterUnavailable(why) => format!("cluster unavailable: {why}"),
        Raw::Int(n) => format!("unexpected reply {n}"),
        Raw::Nil => "unexpected nil".into(),
        Raw::Other(what) => format!("unexpected reply {what}"),
        Raw::Array(items) => format!("unexpected array of {} replies", items.len()),
    }
}

fn parse_info(value: Value) -> std::result::Result<Option<LockInfo>, String> {
    let items = match value {
        Value::Nil => return Ok(None),
        Value::Array(items) => items,
        other => return Err(format!("unexpected LOCK.INFO reply {other:?}")),
    };
    let mut info = LockInfo::default();
    for_each_field(&items, "reply", |name, value| {
        match name {
            "kind" => info.kind = text(value)?,
            "holder" => info.holder = text(value)?,
            "holds" => info.holds = int(value)?,
            "fence" => info.fence = int(value)?,
            "ttl-ms" => info.ttl_ms = int(value)?,
            "deadline-ms" => info.deadline_ms = int(value)?,
            "waiters" => info.waiters = int(value)?,
            "permits" => info.permits = Some(int(value)?),
            "holders" => info.holders = parse_holders(value)?,
            "refused" => info.refused.get_or_insert_with(Refused::default).code = text(value)?,
            "refused-ms" => info.refused.get_or_insert_with(Refused::default).ms = int(value)?,
            "reason" => info.refused.get_or_insert_with(Refused::default).reason = text(value)?,
            _ => {}
        }
        Ok(())
    })?;
    Ok(Some(info))
}

/// The `holders` field of a shared lock's or semaphore's `LOCK.INFO`: an
/// array of field/value arrays.
fn parse_holders(value: &Value) -> std::result::Result<Vec<HolderInfo>, String> {
    let Value::Array(entries) = value else {
        return Err(format!("unexpected LOCK.INFO holders {value:?}"));
    };
    let mut holders = Vec::with_capacity(entries.len());
    for entry in entries {
        let Value::Array(items) = entry else {
            return Err(format!("unexpected LOCK.INFO holder {entry:?}"));
        };
        let mut holder = HolderInfo::default();
        for_each_field(items, "holder", |name, value| {
            match name {
                "holder" => holder.holder = text(value)?,
                "mode" => holder.mode = text(value)?,
                "fence" => holder.fence = int(value)?,
                "ttl-ms" => holder.ttl_ms = int(value)?,
                "deadline-ms" => holder.deadline_ms = int(value)?,
                _ => {}
            }
            Ok(())
        })?;
        holders.push(holder);
    }
    Ok(holders)
}

/// Calls `each` with every (field name, value) of a flat field/value array;
/// unknown fields are the caller's to skip (newer modules may add some).
fn for_each_field(
    items: &[Value],
    what: &str,
    mut each: impl FnMut(&str, &Value) -> std::result::Result<(), String>,
) -> std::result::Result<(), String> {
    for pair in items.chunks(2) {
        let [name, value] = pair else { return Err(format!("LOCK.INFO {what} has an odd length")) };
        let name: String = redis::from_redis_value(name).map_err(|e| e.to_string())?;
        each(&name, value)?;
    }
    Ok(())
}

fn text(value: &Value) -> std::result::Result<String, String> {
    redis::from_redis_value(value).map_err(|e| e.to_string())
}

fn int(value: &Value) -> std::result::Result<i64, String> {
    redis::from_redis_value(value).map_err(|e| e.to_string())
}
