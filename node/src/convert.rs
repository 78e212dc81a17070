//! Conversions between JavaScript values and the client's types: modes,
//! milliseconds, retry policies, tallies, lock reports, and errors.
//!
//! An operation's error is not thrown from here: it comes back as a
//! [`Failure`], whose plain-object [`FailureInfo`] the package's
//! `errors.js` turns into the error class of its kind (so that the classes,
//! their fields and their documentation live in JavaScript, as they do in
//! Python).

use std::time::Duration;

use napi::bindgen_prelude::{BigInt, Either};
use napi_derive::napi;
use redlock_client::{Error, HolderInfo, LockInfo, Lost, Mode, NodeInfo, RetryPolicy, Tally};

/// What every fallible operation resolves to: its value, or a
/// [`Failure`] (which JavaScript tells apart with `instanceof`).
pub type Outcome<T> = Either<T, Failure>;

pub fn outcome<T>(result: Result<T, Error>) -> Outcome<T> {
    match result {
        Ok(value) => Either::A(value),
        Err(error) => Either::B(Failure::of(&error)),
    }
}

/// An operation that failed; `info` describes it.
#[napi]
pub struct Failure {
    info: FailureInfo,
}

#[napi]
impl Failure {
    #[napi(getter)]
    pub fn info(&self) -> FailureInfo {
        self.info.clone()
    }
}

impl Failure {
    pub fn of(error: &Error) -> Failure {
        let cause = match error {
            Error::Lost { reason: Lost::RenewalFailed(inner), .. } => Some(CauseInfo::of(inner)),
            _ => None,
        };
        let reason = match error {
            Error::Lost { reason, .. } => Some(reason.name().to_string()),
            _ => None,
        };
        let base = CauseInfo::of(error);
        let info = FailureInfo {
            kind: base.kind,
            message: base.message,
            resource: base.resource,
            phase: base.phase,
            tally: base.tally,
            reason,
            cause,
        };
        Failure { info }
    }
}

/// A failure as a plain object: what `errors.js` builds its error from.
#[napi(object)]
#[derive(Clone)]
pub struct FailureInfo {
    /// "held", "no_quorum", "expired_before_use", "lost" or
    /// "invalid_argument".
    pub kind: String,
    /// The client's own message, with the counts.
    pub message: String,
    pub resource: Option<String>,
    /// The round: "acquire", "fence", "extend", "release", "enter", "exit".
    pub phase: Option<String>,
    pub tally: Option<TallyInfo>,
    /// Why a lock is lost: "expired", "watchdog_limit", "renewal_failed".
    pub reason: Option<String>,
    /// The failed renewal behind a "renewal_failed" loss.
    pub cause: Option<CauseInfo>,
}

/// The error behind a lost lock (a renewal round that failed).
#[napi(object)]
#[derive(Clone)]
pub struct CauseInfo {
    pub kind: String,
    pub message: String,
    pub resource: Option<String>,
    pub phase: Option<String>,
    pub tally: Option<TallyInfo>,
}

impl CauseInfo {
    fn of(error: &Error) -> CauseInfo {
        let (kind, resource, phase, tally) = match error {
            Error::Contended { resource, tally } => ("held", Some(resource), None, Some(&**tally)),
            Error::NoQuorum { resource, phase, tally } => {
                ("no_quorum", Some(resource), Some(phase.name()), Some(&**tally))
            }
            Error::ExpiredBeforeUse { resource, .. } => ("expired_before_use", Some(resource), None, None),
            Error::Lost { resource, .. } => ("lost", Some(resource), None, None),
            Error::InvalidArgument(_) => ("invalid_argument", None, None, None),
        };
        CauseInfo {
            kind: kind.to_string(),
            message: error.to_string(),
            resource: resource.cloned(),
            phase: phase.map(str::to_string),
            tally: tally.map(TallyInfo::of),
        }
    }
}

/// A round's answers, counted by kind.
#[napi(object)]
#[derive(Clone)]
pub struct TallyInfo {
    pub nodes: u32,
    /// The yes answers the round needed.
    pub need: u32,
    pub yes: u32,
    pub no: u32,
    pub quarantined: u32,
    /// The longest quarantine left among the quarantined nodes, in ms.
    pub quarantine_left: Option<f64>,
    pub unreachable: u32,
    pub timed_out: u32,
    pub failed: u32,
    pub first_failure: Option<String>,
    /// Nodes still to answer when the round returned (at its quorum).
    pub pending: u32,
    /// Cluster members that could not route the call (CLUSTERDOWN, no
    /// master for the slot, too many redirects, no seed answering), and why
    /// for the first (naming it).
    pub cluster_unavailable: u32,
    pub first_cluster_unavailable: Option<String>,
}

impl TallyInfo {
    pub fn of(tally: &Tally) -> TallyInfo {
        let count = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
        TallyInfo {
            nodes: count(tally.nodes),
            need: count(tally.need()),
            yes: count(tally.yes),
            no: count(tally.no),
            quarantined: count(tally.quarantined),
            quarantine_left: tally.quarantine_left_ms.map(|ms| ms as f64),
            unreachable: count(tally.unreachable),
            timed_out: count(tally.timed_out),
            failed: count(tally.failed),
            first_failure: tally.first_failure.as_deref().map(str::to_string),
            pending: count(tally.pending()),
            cluster_unavailable: count(tally.cluster_unavailable),
            first_cluster_unavailable: tally.first_cluster_unavailable.as_deref().map(str::to_string),
        }
    }
}

/// A mode from its JavaScript spelling (the client's [`Mode::from_name`]).
pub fn mode(name: &str, permits: Option<u32>) -> Result<Mode, Error> {
    Mode::from_name(name, permits).map_err(Error::InvalidArgument)
}

/// The JavaScript spelling of a mode: its name and, for a permit, the count.
pub fn mode_out(mode: Mode) -> (String, Option<u32>) {
    match mode {
        Mode::Permit { permits } => (mode.name().to_string(), Some(permits)),
        other => (other.name().to_string(), None),
    }
}

/// Milliseconds (JavaScript's unit of time) as a duration.
pub fn millis(what: &str, value: f64) -> Result<Duration, Error> {
    Duration::try_from_secs_f64(value / 1000.0).map_err(|_| {
        Error::InvalidArgument(format!(
            "{what} must be a finite number of milliseconds, at least 0; got {value}"
        ))
    })
}

pub fn millis_out(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}

/// The retry options of an acquire, as JavaScript gives them (ms).
#[napi(object)]
pub struct Retry {
    /// Retry within this many ms in all (the client's `RetryPolicy::within`).
    pub wait: Option<f64>,
    pub attempts: Option<u32>,
    pub delay_min: Option<f64>,
    pub delay_max: Option<f64>,
}

/// The client's retry policy for `retry`: its default unless told otherwise.
pub fn policy(retry: &Retry) -> Result<RetryPolicy, Error> {
    let mut policy = match retry.wait {
        Some(wait) => RetryPolicy::within(millis("wait", wait)?),
        None => RetryPolicy::default(),
    };
    if let (Some(min), Some(max)) = (retry.delay_min, retry.delay_max) {
        policy = policy.with_delays(millis("retryDelay", min)?, millis("retryDelay", max)?);
    }
    if let Some(attempts) = retry.attempts {
        if attempts == 0 {
            return Err(Error::InvalidArgument("attempts must be at least 1".into()));
        }
        policy.attempts_max = attempts;
    }
    Ok(policy)
}

/// One member's answer to `info`.
#[napi(object)]
pub struct NodeReport {
    pub node: String,
    /// For a cluster member, the master that answered (`host:port`).
    pub shard: Option<String>,
    /// `null` when no lock is held there.
    pub info: Option<LockReport>,
    /// Why the node gave no answer.
    pub error: Option<String>,
}

/// `LOCK.INFO` of one node (see the client's `LockInfo`).
#[napi(object)]
pub struct LockReport {
    pub kind: String,
    pub holder: String,
    pub holds: i64,
    pub fence: BigInt,
    /// ms left on that node.
    pub ttl: i64,
    /// The node's deadline, epoch ms of its wall clock.
    pub deadline: i64,
    pub waiters: i64,
    pub permits: Option<i64>,
    pub holders: Vec<HolderReport>,
    pub refused: Option<RefusedReport>,
}

#[napi(object)]
pub struct HolderReport {
    pub holder: String,
    pub mode: String,
    pub fence: BigInt,
    pub ttl: i64,
    pub deadline: i64,
}

/// Why a node refuses a new grant of a lock nobody holds.
#[napi(object)]
pub struct RefusedReport {
    pub code: String,
    /// ms, or -1: until a setting changes or the queue moves.
    pub ms: i64,
    pub reason: String,
}

pub fn node_report(node: NodeInfo) -> NodeReport {
    let (info, error) = match node.info {
        Ok(info) => (info.map(lock_report), None),
        Err(error) => (None, Some(error)),
    };
    NodeReport { node: node.node, shard: node.shard, info, error }
}

fn lock_report(info: LockInfo) -> LockReport {
    LockReport {
        kind: info.kind,
        holder: info.holder,
        holds: info.holds,
        fence: BigInt::from(info.fence),
        ttl: info.ttl_ms,
        deadline: info.deadline_ms,
        waiters: info.waiters,
        permits: info.permits,
        holders: info.holders.into_iter().map(holder_report).collect(),
        refused: info.refused.map(|r| RefusedReport { code: r.code, ms: r.ms, reason: r.reason }),
    }
}

fn holder_report(holder: HolderInfo) -> HolderReport {
    HolderReport {
        holder: holder.holder,
        mode: holder.mode,
        fence: BigInt::from(holder.fence),
        ttl: holder.ttl_ms,
        deadline: holder.deadline_ms,
    }
}
