//! `Client`: one `redlock_client::Redlock` (one connection and one ordered
//! writer per node), shared by every thread and task that uses it.

use std::path::PathBuf;
use std::sync::Arc;

use pyo3::prelude::*;

use redlock_client::bindings::{self, blocker_text, mode, readiness_out, Claims, Unit};
use redlock_client::{Config, Error, Guard, NodeHealth, NodeInfo, NodeStatus, QuorumStatus, Redlock, Tls};

use crate::convert::{policy, py_any, tally_out, to_pyerr};
use crate::held::Held;
use crate::{block, check_pid, run, runtime, How, Waiter};

const SECONDS: Unit = Unit::Seconds;

/// An acquire's retry policy from Python: (wait seconds, attempts,
/// (delay_min, delay_max) seconds), each optional.
type Retry = (Option<f64>, Option<u32>, Option<(f64, f64)>);

#[pyclass(frozen, module = "redlock_client._native")]
pub struct Client {
    redlock: Redlock,
    pid: u32,
}

impl Client {
    fn redlock(&self) -> PyResult<Redlock> {
        check_pid(self.pid)?;
        Ok(self.redlock.clone())
    }
}

/// `Tls(ca_file, ca_dir, cert_file, key_file, server_name,
/// insecure_skip_verify)` as Python passes it.
type TlsArgs = (Option<PathBuf>, Option<PathBuf>, Option<PathBuf>, Option<PathBuf>, Option<String>, bool);

fn tls_settings((ca_file, ca_dir, cert_file, key_file, server_name, insecure_skip_verify): TlsArgs) -> Tls {
    Tls { ca_file, ca_dir, cert_file, key_file, server_name, insecure_skip_verify }
}

fn held(py: Python<'_>, (guard, fenced): (Guard, Option<u64>)) -> PyResult<Py<PyAny>> {
    Ok(Py::new(py, Held::new(guard, fenced))?.into_any())
}

#[pymethods]
impl Client {
    /// Connects to every node (in parallel, at most `connect_timeout`), the
    /// GIL released. Unreachable nodes are tried again by later calls.
    /// `tls`: `redlock_client.Tls`'s fields in order (see `_common.py`).
    #[new]
    #[pyo3(signature = (nodes, connect_timeout, command_timeout, reconnect_backoff, tls=None))]
    fn new(
        py: Python<'_>,
        nodes: Vec<String>,
        connect_timeout: f64,
        command_timeout: f64,
        reconnect_backoff: f64,
        tls: Option<TlsArgs>,
    ) -> PyResult<Client> {
        let config = (|| {
            Ok(Config {
                connect_timeout: SECONDS.duration("connect_timeout", connect_timeout)?,
                command_timeout: SECONDS.duration("command_timeout", command_timeout)?,
                reconnect_backoff: SECONDS.duration("reconnect_backoff", reconnect_backoff)?,
                tls: tls.map(tls_settings).unwrap_or_default(),
            })
        })()
        .map_err(|e: Error| to_pyerr(py, &e))?;
        let redlock = block(py, async move { Redlock::connect(nodes, config).await }, false)?
            .map_err(|e| to_pyerr(py, &e))?;
        Ok(Client { redlock, pid: std::process::id() })
    }

    #[getter]
    fn nodes(&self) -> Vec<String> {
        self.redlock.node_urls()
    }

    #[getter]
    fn majority(&self) -> usize {
        self.redlock.majority()
    }

    /// The grants a lock taken in this mode needs.
    #[pyo3(signature = (mode_name, permits=None))]
    fn quorum(&self, py: Python<'_>, mode_name: &str, permits: Option<u32>) -> PyResult<usize> {
        let mode = mode(mode_name, permits).map_err(|e| to_pyerr(py, &e))?;
        Ok(self.redlock.quorum(mode))
    }

    /// One attempt (`retry` None) or attempts within a retry policy
    /// (`retry` = (wait, attempts, (delay_min, delay_max))), of one
    /// resource or (`many`) a set; `fence`: the fencing round too.
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (claims, many, ttl, fence, retry=None, waiter=None))]
    fn acquire(
        &self,
        py: Python<'_>,
        claims: Vec<(String, String, Option<u32>)>,
        many: bool,
        ttl: f64,
        fence: bool,
        retry: Option<Retry>,
        waiter: Option<Waiter>,
    ) -> PyResult<Py<PyAny>> {
        let redlock = self.redlock()?;
        let claims = Claims::parse(claims, many);
        let ttl = SECONDS.duration("ttl", ttl);
        let Some((wait, attempts, delays)) = retry else {
            // One attempt: a round that is never dropped half-way.
            let work = async move { claims?.attempt(&redlock, ttl?, fence).await };
            return run(py, How::new(waiter, false), work, held);
        };
        let policy = policy(wait, attempts, delays);
        // Each attempt is a task of its own: the caller may stop waiting
        // (Ctrl-C, a cancelled asyncio task) at any point, which drops this
        // loop; an attempt under way still ends, and if it took the lock,
        // its guard is dropped there, which releases it.
        let work = async move {
            let (claims, ttl, policy) = (Arc::new(claims?), ttl?, policy?);
            policy
                .retry(|| {
                    let (redlock, claims) = (redlock.clone(), claims.clone());
                    let task = runtime().spawn(async move { claims.attempt(&redlock, ttl, fence).await });
                    async move {
                        task.await.unwrap_or_else(|e| {
                            Err(Error::InvalidArgument(format!("the acquire attempt failed: {e}")))
                        })
                    }
                })
                .await
        };
        run(py, How::new(waiter, true), work, held)
    }

    /// Releases by token: one resource (`many` false, in `mode`) or a set;
    /// returns the round's tally (every node answered).
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (resources, many, token, mode_name="plain", permits=None, waiter=None))]
    fn release(
        &self,
        py: Python<'_>,
        resources: Vec<String>,
        many: bool,
        token: String,
        mode_name: &str,
        permits: Option<u32>,
        waiter: Option<Waiter>,
    ) -> PyResult<Py<PyAny>> {
        let redlock = self.redlock()?;
        let mode = mode(mode_name, permits);
        let work = async move { bindings::release_by_token(&redlock, &resources, many, &token, mode).await };
        run(py, How::new(waiter, false), work, |py, tally| py_any(py, tally_out(&tally)))
    }

    /// Extends by token for `ttl`; returns the validity left in seconds.
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (resources, many, token, ttl, mode_name="plain", permits=None, waiter=None))]
    fn extend(
        &self,
        py: Python<'_>,
        resources: Vec<String>,
        many: bool,
        token: String,
        ttl: f64,
        mode_name: &str,
        permits: Option<u32>,
        waiter: Option<Waiter>,
    ) -> PyResult<Py<PyAny>> {
        let redlock = self.redlock()?;
        let mode = mode(mode_name, permits);
        let ttl = SECONDS.duration("ttl", ttl);
        let work =
            async move { bindings::extend_by_token(&redlock, &resources, many, &token, mode, ttl?).await };
        run(py, How::new(waiter, false), work, |py, left| py_any(py, SECONDS.of(left)))
    }

    /// Reentrant enter: (fencing token, validity left in seconds).
    #[pyo3(signature = (resource, owner, ttl, waiter=None))]
    fn enter(
        &self,
        py: Python<'_>,
        resource: String,
        owner: String,
        ttl: f64,
        waiter: Option<Waiter>,
    ) -> PyResult<Py<PyAny>> {
        let redlock = self.redlock()?;
        let ttl = SECONDS.duration("ttl", ttl);
        let work = async move { bindings::enter(&redlock, &resource, &owner, ttl?).await };
        run(py, How::new(waiter, false), work, |py, (fencing_token, left)| {
            py_any(py, (fencing_token, SECONDS.of(left)))
        })
    }

    /// Reentrant exit: the holds left.
    #[pyo3(signature = (resource, owner, waiter=None))]
    fn exit(
        &self,
        py: Python<'_>,
        resource: String,
        owner: String,
        waiter: Option<Waiter>,
    ) -> PyResult<Py<PyAny>> {
        let redlock = self.redlock()?;
        let work = async move { redlock.exit(&resource, &owner).await };
        run(py, How::new(waiter, false), work, py_any)
    }

    /// `LOCK.INFO` on every member: [(member, shard or None, info tuple or
    /// None, error or None)].
    #[pyo3(signature = (resource, waiter=None))]
    fn info(&self, py: Python<'_>, resource: String, waiter: Option<Waiter>) -> PyResult<Py<PyAny>> {
        let redlock = self.redlock()?;
        let work = async move { Ok(redlock.info(&resource).await) };
        run(py, How::new(waiter, false), work, |py, nodes: Vec<NodeInfo>| {
            let rows: Vec<_> = nodes.into_iter().map(info_row).collect();
            py_any(py, rows)
        })
    }

    /// `INFO lock` on every node: the quorum's status as nested tuples
    /// (`_types.quorum_status` reads them).
    #[pyo3(signature = (waiter=None))]
    fn status(&self, py: Python<'_>, waiter: Option<Waiter>) -> PyResult<Py<PyAny>> {
        let redlock = self.redlock()?;
        let work = async move { Ok(redlock.status().await) };
        run(py, How::new(waiter, false), work, |py, status: QuorumStatus| py_any(py, status_row(status)))
    }

    /// Waits (bounded) for the calls earlier rounds left in the background.
    #[pyo3(signature = (waiter=None))]
    fn settle(&self, py: Python<'_>, waiter: Option<Waiter>) -> PyResult<Py<PyAny>> {
        let redlock = self.redlock()?;
        let work = async move {
            redlock.settle().await;
            Ok(())
        };
        run(py, How::new(waiter, true), work, |py, ()| Ok(py.None()))
    }
}

type HolderRow = (String, String, i64, i64, i64);
type InfoRow = (String, String, i64, i64, i64, i64, i64, Option<i64>, Vec<HolderRow>);

fn info_row(node: NodeInfo) -> (String, Option<String>, Option<InfoRow>, Option<String>) {
    match node.info {
        Ok(None) => (node.node, node.shard, None, None),
        Err(error) => (node.node, node.shard, None, Some(error)),
        Ok(Some(info)) => {
            let holders = info
                .holders
                .into_iter()
                .map(|h| (h.holder, h.mode, h.fence, h.ttl_ms, h.deadline_ms))
                .collect();
            let row = (
                info.kind,
                info.holder,
                info.holds,
                info.fence,
                info.ttl_ms,
                info.deadline_ms,
                info.waiters,
                info.permits,
                holders,
            );
            (node.node, node.shard, Some(row), None)
        }
    }
}

/// (quarantine (reason, ms left), evicting policy, eviction mode, fencing
/// counter, protections off, quarantined keys, quarantined databases,
/// wall-clock offset ms, settings).
type HealthRow = (
    Option<(String, i64)>,
    Option<String>,
    String,
    u64,
    Vec<String>,
    u64,
    u64,
    i64,
    std::collections::BTreeMap<String, String>,
);
/// (node, health, (blocker name, what it says)).
type NodeRow = (String, Option<HealthRow>, Option<(String, String)>);
type MemberRow = (String, Vec<NodeRow>);
/// (members, need, granting, grants, cause, ready in ms, summary, the
/// settings that differ, the protections off).
type StatusRow = (
    Vec<MemberRow>,
    usize,
    usize,
    bool,
    Option<String>,
    Option<i64>,
    String,
    Vec<(String, Vec<(String, Vec<String>)>)>,
    Vec<(String, Vec<String>)>,
);

fn status_row(status: QuorumStatus) -> StatusRow {
    let (cause, ready_in_ms) = readiness_out(&status.readiness);
    let cause = cause.map(str::to_string);
    let summary = status.summary();
    let protections_off = status.protections_off();
    let grants = status.grants();
    let differences = status.differences.into_iter().map(|d| (d.setting, d.values)).collect();
    let members =
        status.members.into_iter().map(|m| (m.member, m.nodes.into_iter().map(node_row).collect())).collect();
    (members, status.need, status.granting, grants, cause, ready_in_ms, summary, differences, protections_off)
}

fn node_row(node: NodeStatus) -> NodeRow {
    let blocker = node.blocker().map(|b| (b.name().to_string(), blocker_text(&b)));
    let health = node.health.ok().map(|h: NodeHealth| {
        (
            h.quarantine.map(|q| (q.reason, q.ms_left)),
            h.evicting_policy,
            h.eviction_mode,
            h.fencing_counter,
            h.protections_off,
            h.quarantined_keys,
            h.quarantined_dbs,
            h.wall_clock_offset_ms,
            h.settings,
        )
    });
    (node.node, health, blocker)
}
