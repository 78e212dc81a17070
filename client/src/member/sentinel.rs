//! One Sentinel-managed member (I/O): a master with replicas that Redis
//! Sentinel fails over, one vote. The member asks its Sentinels for the
//! master's address (`SENTINEL GET-MASTER-ADDR-BY-NAME`), checks that the
//! node there is a master (`ROLE`: a Sentinel may still name an old master
//! that came back as a replica) and sends every call there. A call that
//! fails at that node (no connection, a timeout, `READONLY` from a node
//! that became a replica) makes the next call ask the Sentinels again; a
//! `READONLY` (the command did not run) is sent once more at once, to the
//! master they name then. A master promoted by a failover answers
//! `QUARANTINE` for its quarantine, which counts as this member's "no"
//! with its reason, as for any master.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex as StdMutex};
use std::time::Duration;

use redis::Value;
use tokio::time::Instant;

use super::redirect::Addr;
use super::sentinels::SentinelSpelling;
use super::{describe, NodeAnswers};
use crate::node::{as_raw, as_value, Limits, Node, Request};
use crate::quorum::Raw;
use crate::tls::{TlsClient, TlsTarget};

pub(crate) struct Sentinel {
    shared: Arc<Shared>,
}

struct Shared {
    /// "member N (text)", for messages.
    label: String,
    spelling: SentinelSpelling,
    limits: Limits,
    command_timeout: Duration,
    /// The client's TLS settings, for `rediss+sentinel://`.
    tls: Option<Arc<TlsClient>>,
    /// One connection per Sentinel, in the order written.
    sentinels: Vec<(Addr, Node)>,
    state: StdMutex<State>,
    /// One search for the master at a time; the calls that wait for it
    /// take its result.
    search: tokio::sync::Mutex<()>,
}

#[derive(Default)]
struct State {
    /// The master the Sentinels named and `ROLE` confirmed.
    master: Option<Addr>,
    /// A connection per node ever named master (an old master that comes
    /// back is reached on the same one).
    nodes: HashMap<Addr, Arc<Node>>,
    /// The Sentinels that answered the last search, and why there is no
    /// master when the last search found none.
    reached: Vec<Addr>,
    last_failure: Option<String>,
}

/// What `redlock status` shows of a Sentinel member.
pub(crate) struct SentinelView {
    pub sentinels: usize,
    pub reached: Vec<String>,
}

impl Sentinel {
    pub fn new(
        label: String,
        spelling: SentinelSpelling,
        tls: Option<Arc<TlsClient>>,
        limits: Limits,
        command_timeout: Duration,
    ) -> Result<Sentinel, String> {
        let mut sentinels = Vec::new();
        for addr in &spelling.sentinels {
            let target = target(&tls, spelling.tls, addr)?;
            sentinels
                .push((addr.clone(), Node::with_info(spelling.sentinel_connection(addr), target, limits)?));
        }
        Ok(Sentinel {
            shared: Arc::new(Shared {
                label,
                spelling,
                limits,
                command_timeout,
                tls,
                sentinels,
                state: StdMutex::new(State::default()),
                search: tokio::sync::Mutex::new(()),
            }),
        })
    }

    /// Finds the master now.
    pub async fn warm_up(&self) {
        let deadline = Instant::now() + self.shared.command_timeout + self.shared.limits.connect_timeout;
        let _ = self.shared.master(deadline).await;
    }

    /// `request` sent to the master, by `timeout` (plus the connect timeout
    /// for the search).
    pub fn call(&self, request: &Request, timeout: Duration) -> impl Future<Output = Raw> + Send + 'static {
        let (shared, request) = (self.shared.clone(), request.clone());
        let pipelined = request.is_pipeline();
        async move {
            let deadline = Instant::now() + timeout + shared.limits.connect_timeout;
            let mut raw = Raw::Nil;
            for _ in 0..2 {
                let (addr, node) = match shared.master(deadline).await {
                    Ok(found) => found,
                    Err(why) => return Raw::ClusterUnavailable(why),
                };
                raw = as_raw(
                    node.send(&request, node.deadline(timeout).min(deadline), false, None).await,
                    pipelined,
                );
                match &raw {
                    // Not run: a replica now. Sent again to the master the
                    // Sentinels name now.
                    Raw::ServerError { code, .. } if code == "READONLY" => shared.forget(&addr),
                    Raw::Unreachable(_) | Raw::TimedOut => {
                        shared.forget(&addr);
                        break;
                    }
                    _ => break,
                }
            }
            raw
        }
    }

    /// [`Sentinel::call`], keeping the reply as a [`Value`], with the
    /// master's address.
    pub fn query(
        &self,
        request: &Request,
        timeout: Duration,
    ) -> impl Future<Output = (Result<Value, Raw>, Option<String>)> + Send + 'static {
        let (shared, request) = (self.shared.clone(), request.clone());
        async move {
            let deadline = Instant::now() + timeout + shared.limits.connect_timeout;
            match shared.master(deadline).await {
                Ok((addr, node)) => {
                    let replies =
                        node.send(&request, node.deadline(timeout).min(deadline), false, None).await;
                    (as_value(replies), Some(addr.to_string()))
                }
                Err(why) => (Err(Raw::ClusterUnavailable(why)), None),
            }
        }
    }

    /// `request` (keyless, as `INFO lock`) on the master, labelled with its
    /// address and the Sentinels that named it.
    pub fn query_master(
        &self,
        request: &Request,
        timeout: Duration,
    ) -> impl Future<Output = NodeAnswers> + Send {
        let answer = self.query(request, timeout);
        let shared = self.shared.clone();
        async move {
            let (answer, addr) = answer.await;
            let view = shared.view();
            let label = match addr {
                Some(addr) => format!(
                    "{addr} (master {} by {} of {} Sentinels: {})",
                    shared.spelling.master,
                    view.reached.len(),
                    view.sentinels,
                    view.reached.join(", ")
                ),
                None => shared.label.clone(),
            };
            vec![(label, answer)]
        }
    }
}

impl Shared {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn view(&self) -> SentinelView {
        let state = self.state();
        SentinelView {
            sentinels: self.sentinels.len(),
            reached: state.reached.iter().map(Addr::to_string).collect(),
        }
    }

    /// The master a call goes to: the one found before, or a new search.
    async fn master(&self, deadline: Instant) -> Result<(Addr, Arc<Node>), String> {
        if let Some(found) = self.known() {
            return Ok(found);
        }
        let _one_search = tokio::time::timeout_at(deadline, self.search.lock())
            .await
            .map_err(|_| format!("{}: no master found in time", self.label))?;
        if let Some(found) = self.known() {
            return Ok(found);
        }
        let found = self.search(deadline).await;
        if let Err(why) = &found {
            self.state().last_failure = Some(why.clone());
        }
        found
    }

    fn known(&self) -> Option<(Addr, Arc<Node>)> {
        let state = self.state();
        let addr = state.master.clone()?;
        let node = state.nodes.get(&addr)?.clone();
        Some((addr, node))
    }

    /// Calls stop going to `addr` (it failed them): the next asks again.
    fn forget(&self, addr: &Addr) {
        let mut state = self.state();
        if state.master.as_ref() == Some(addr) {
            state.master = None;
        }
    }

    fn node(&self, addr: &Addr) -> Result<Arc<Node>, String> {
        let mut state = self.state();
        if let Some(node) = state.nodes.get(addr) {
            return Ok(node.clone());
        }
        let target = target(&self.tls, self.spelling.tls, addr)?;
        let node = Arc::new(Node::with_info(self.spelling.master_connection(addr), target, self.limits)?);
        state.nodes.insert(addr.clone(), node.clone());
        Ok(node)
    }

    /// Asks every Sentinel at once; the first address (in the Sentinels'
    /// order) whose node says it is a master is the master.
    async fn search(&self, deadline: Instant) -> Result<(Addr, Arc<Node>), String> {
        let mut ask = redis::cmd("SENTINEL");
        ask.arg("GET-MASTER-ADDR-BY-NAME").arg(&self.spelling.master);
        let wait = self.command_timeout.min(deadline.saturating_duration_since(Instant::now()));
        let answers = futures_util::future::join_all(self.sentinels.iter().map(|(addr, node)| {
            let asked = node.query(&ask, wait);
            async move { (addr.clone(), asked.await) }
        }))
        .await;
        let mut reached = Vec::new();
        let mut named: Vec<Addr> = Vec::new();
        let mut why = Vec::new();
        for (sentinel, answer) in answers {
            match answer {
                Ok(Value::Array(parts)) => {
                    reached.push(sentinel.clone());
                    match master_addr(&parts) {
                        Some(addr) if !named.contains(&addr) => named.push(addr),
                        Some(_) => {}
                        None => why.push(format!("Sentinel {sentinel} answered {parts:?}")),
                    }
                }
                Ok(Value::Nil) => {
                    reached.push(sentinel.clone());
                    why.push(format!(
                        "Sentinel {sentinel} monitors no master named {:?}",
                        self.spelling.master
                    ));
                }
                Ok(other) => why.push(format!("Sentinel {sentinel} answered {other:?}")),
                Err(raw) => why.push(format!("Sentinel {sentinel}: {}", describe(&raw))),
            }
        }
        self.state().reached = reached;
        for addr in named {
            let node = self.node(&addr)?;
            let role = node.query(&redis::cmd("ROLE"), wait).await;
            match role {
                Ok(Value::Array(parts)) if is_master(&parts) => {
                    self.state().master = Some(addr.clone());
                    return Ok((addr, node));
                }
                Ok(_) => why.push(format!("{addr}, which a Sentinel names, is not a master (a replica now)")),
                Err(raw) => why.push(format!("{addr}, which a Sentinel names: {}", describe(&raw))),
            }
        }
        Err(format!("{}: no master: {}", self.label, why.join("; ")))
    }
}

/// The TLS of a connection to `addr`, for a `rediss+sentinel://` member.
fn target(tls: &Option<Arc<TlsClient>>, over_tls: bool, addr: &Addr) -> Result<Option<TlsTarget>, String> {
    match (tls, over_tls) {
        (Some(tls), true) => Ok(Some(tls.target(&addr.host)?)),
        (None, true) => Err("a rediss+sentinel:// member needs the client's TLS settings".into()),
        (_, false) => Ok(None),
    }
}

/// `[ip, port]` from `SENTINEL GET-MASTER-ADDR-BY-NAME`.
fn master_addr(parts: &[Value]) -> Option<Addr> {
    let text = |v: &Value| match v {
        Value::BulkString(bytes) => String::from_utf8(bytes.clone()).ok(),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    };
    let [host, port] = parts else { return None };
    Some(Addr { host: text(host)?, port: text(port)?.parse().ok().filter(|&p| p > 0)? })
}

/// Whether a `ROLE` reply says master.
fn is_master(parts: &[Value]) -> bool {
    matches!(parts.first(), Some(Value::BulkString(role)) if role == b"master")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn sentinel_and_role_replies_are_read() {
        assert_eq!(
            master_addr(&[bulk("10.0.0.5"), bulk("6380")]),
            Some(Addr { host: "10.0.0.5".into(), port: 6380 })
        );
        assert_eq!(master_addr(&[bulk("h"), bulk("0")]), None);
        assert_eq!(master_addr(&[bulk("h")]), None);
        assert!(is_master(&[bulk("master"), Value::Int(0), Value::Array(vec![])]));
        assert!(!is_master(&[bulk("slave"), bulk("h"), Value::Int(6379)]));
        assert!(!is_master(&[]));
    }
}
