//! Quorum members, below the rounds and above the nodes: a member is one
//! master (one [`Node`]) or one cluster (its seeds, slot map, one node per
//! master, the ordering gate: `cluster.rs`). A member gets one call per
//! round and gives one answer, so the rounds (`rounds/`), `info` and
//! `check` work unchanged for either kind: a cluster is one vote.
//!
//! - `spelling`: how a member is written (`redis://...` or
//!   `redis+cluster://host:port?addr=host:port...`, each `rediss` for TLS).
//! - a key's hash slot: `lock_protocol::slot` (shared with the freed
//!   channel's rule). `topology`: the slot map, read from
//!   `CLUSTER SHARDS` / `CLUSTER SLOTS`. `redirect`: `MOVED`, `ASK`,
//!   `TRYAGAIN`, `CLUSTERDOWN` read from error replies. `throttle`: how
//!   often the topology is fetched. `gate`: the ordering gate and why a
//!   call never overtakes an earlier one of its slot. All pure and
//!   unit-tested.
//! - `cluster`: the routing of one cluster member (I/O).
//! - `sentinels`: how a Sentinel-managed member is written
//!   (`redis+sentinel://host:port/master-name?addr=host:port`), pure;
//!   `sentinel`: finding its master through the Sentinels (I/O).

mod cluster;
mod gate;
mod redirect;
mod sentinel;
mod sentinels;
mod spelling;
mod throttle;
mod topology;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::Either;
use redis::Value;
use tokio::time::Instant;

use crate::node::{as_value, Inbox, Limits, Node, Request};
use crate::quorum::Raw;
use crate::tls::TlsClient;
use cluster::Cluster;
pub(crate) use lock_protocol::slot::key_slot;
use sentinel::Sentinel;
pub(crate) use spelling::is_cluster;
use spelling::MemberKind;

/// Whether the member written `text` speaks TLS (`rediss://`,
/// `rediss+cluster://`).
pub(crate) fn uses_tls(text: &str) -> bool {
    spelling::scheme(text).is_some_and(|(_, tls)| tls)
}

/// A failed call to one node of a member, in words, for the member's
/// "no" (a cluster's topology fetch, a Sentinel's search for the master).
fn describe(raw: &Raw) -> String {
    match raw {
        Raw::ServerError { code, detail } => format!("{code} {detail}"),
        Raw::TimedOut => "timed out".into(),
        Raw::Unreachable(why) | Raw::ClusterUnavailable(why) => why.clone(),
        other => format!("unexpected reply {other:?}"),
    }
}

/// Each node's address with its answer (see [`Member::query_every_node`]).
pub(crate) type NodeAnswers = Vec<(String, Result<Value, Raw>)>;

/// One member of the quorum.
pub(crate) struct Member {
    /// As given (`redis://...` or `redis+cluster://...`).
    pub text: String,
    kind: Kind,
}

enum Kind {
    Master(Node),
    Cluster(Cluster),
    Sentinel(Sentinel),
}

/// How a member answers a call of a round ([`Member::issue`]).
pub(crate) enum Issued {
    /// A master: in the round's inbox, at the call's slot, or not by this
    /// deadline (the round gives it up then).
    Inbox(Instant),
    /// A cluster: by this future, which routes the call (the member's
    /// redirects and ordering gate run in it) and ends by its timeout.
    Wait(Pin<Box<dyn Future<Output = Raw> + Send>>),
}

impl Member {
    /// Member number `number` (from 1, for messages) as written in `text`;
    /// starts its connection tasks (so: inside a Tokio runtime), connects on
    /// first use; a TLS member (`rediss://`, `rediss+cluster://`) as `tls`
    /// says.
    pub fn new(
        number: usize,
        text: &str,
        limits: Limits,
        command_timeout: Duration,
        tls: Option<&Arc<TlsClient>>,
    ) -> Result<Member, String> {
        let kind = match spelling::scheme(text) {
            Some((MemberKind::Cluster, _)) => Kind::Cluster(Cluster::new(
                format!("member {number} ({text})"),
                spelling::parse_cluster(text)?,
                tls.cloned(),
                limits,
                command_timeout,
            )),
            Some((MemberKind::Sentinel, _)) => Kind::Sentinel(Sentinel::new(
                format!("member {number} ({text})"),
                sentinels::parse_sentinel(text)?,
                tls.cloned(),
                limits,
                command_timeout,
            )?),
            // A master, or a scheme nobody knows: refused in words there.
            Some((MemberKind::Master, _)) | None => Kind::Master(Node::new(text, limits, tls.map(|t| &**t))?),
        };
        Ok(Member { text: text.to_string(), kind })
    }

    pub fn is_cluster(&self) -> bool {
        matches!(self.kind, Kind::Cluster(_))
    }

    /// Opens the connections now (a cluster: fetches its topology first).
    pub async fn warm_up(&self) {
        match &self.kind {
            Kind::Master(node) => node.warm_up().await,
            Kind::Cluster(cluster) => cluster.warm_up().await,
            Kind::Sentinel(sentinel) => sentinel.warm_up().await,
        }
    }

    /// `request` as call `slot` of a round, issued now (see `node/mod.rs`
    /// and `member/gate.rs`: calls issued in order run in order), answered
    /// as [`Issued`] says.
    pub fn issue(&self, request: &Request, timeout: Duration, inbox: &Arc<Inbox>, slot: usize) -> Issued {
        match &self.kind {
            Kind::Master(node) => Issued::Inbox(node.call_into(request, timeout, inbox, slot)),
            // Boxed: a cluster call's future is many times the size of
            // what a round keeps per master's call.
            Kind::Cluster(cluster) => Issued::Wait(Box::pin(cluster.call(request, timeout))),
            Kind::Sentinel(sentinel) => Issued::Wait(Box::pin(sentinel.call(request, timeout))),
        }
    }

    /// [`Member::issue`] of a one-command request, waited for alone, keeping the reply as a
    /// [`Value`]; with the address of the node that answered, for a cluster.
    pub fn query(
        &self,
        request: &Request,
        timeout: Duration,
    ) -> impl Future<Output = (Result<Value, Raw>, Option<String>)> + Send + 'static {
        match &self.kind {
            Kind::Master(node) => {
                let replies = node.send(request, node.deadline(timeout), false, None);
                Either::Left(async move { (as_value(replies.await), None) })
            }
            Kind::Cluster(cluster) => Either::Right(Either::Left(Box::pin(cluster.query(request, timeout)))),
            Kind::Sentinel(sentinel) => {
                Either::Right(Either::Right(Box::pin(sentinel.query(request, timeout))))
            }
        }
    }

    /// `request` (keyless, as `INFO lock`) on every node that speaks for
    /// the member: the master, or each master of a cluster (or, when a
    /// cluster has no slot map, the member itself with why). Each with its
    /// address (the member's text for a master) and answer.
    pub fn query_every_node(
        &self,
        request: &Request,
        timeout: Duration,
    ) -> impl Future<Output = NodeAnswers> + Send + 'static {
        let text = self.text.clone();
        match &self.kind {
            Kind::Master(node) => {
                let replies = node.send(request, node.deadline(timeout), false, None);
                Either::Left(async move { vec![(text, as_value(replies.await))] })
            }
            Kind::Cluster(cluster) => {
                let masters = cluster.query_masters(request, timeout);
                Either::Right(Either::Left(async move {
                    masters.await.unwrap_or_else(|why| vec![(text, Err(Raw::ClusterUnavailable(why)))])
                }))
            }
            Kind::Sentinel(sentinel) => {
                Either::Right(Either::Right(Box::pin(sentinel.query_master(request, timeout))))
            }
        }
    }
}
