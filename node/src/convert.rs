//! Conversions between JavaScript values and the client's types: modes,
//! milliseconds, retry policies, tallies, lock reports, and errors.
//!
//! An operation's error is not thrown from here: it comes back as a
//! [`Failure`], whose plain-object [`FailureInfo`] the package's
//! `errors.js` turns into the error class of its kind (so that the classes,
//! their fields and their documentation live in JavaScript, as they do in
//! Python).

use napi::bindgen_prelude::{BigInt, Either, ToNapiValue, TypeName, ValueType};
use napi::sys;
use napi_derive::napi;
use redlock_client::bindings::{blocker_text, readiness_out, retry_policy, Unit};
use redlock_client::{
    Error, HolderInfo, LockInfo, Lost, NodeHealth, NodeInfo, NodeStatus, QuorumStatus, RetryPolicy, Tally,
};

const MS: Unit = Unit::Milliseconds;

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
    /// An acquire whose signal fired while it waited (JavaScript rejects
    /// with the signal's reason).
    pub fn aborted() -> Failure {
        let info = FailureInfo {
            kind: "aborted".into(),
            message: "the acquire was aborted".into(),
            resource: None,
            phase: None,
            tally: None,
            reason: None,
            cause: None,
        };
        Failure { info }
    }

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
    /// "held", "no_quorum", "expired_before_use", "lost",
    /// "invalid_argument" or "aborted".
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
            // The nodes refused the request itself: a caller mistake too,
            // with the round's counts.
            Error::Refused { resource, phase, tally, .. } => {
                ("invalid_argument", Some(resource), Some(phase.name()), Some(&**tally))
            }
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
    /// Why, for the first unreachable node (a refused connection, a TLS
    /// failure naming the node and its cause, ...).
    pub first_unreachable: Option<String>,
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
            first_unreachable: tally.first_unreachable.as_deref().map(str::to_string),
        }
    }
}

/// A tally as a release resolves to it. The usual one (every count zero
/// but nodes, need, yes, no and pending, each below 1024, and no text): one
/// number, the five counts [`TALLY_BITS`] bits each in that order from the
/// lowest, which costs no allocation on either side (an object costs a call,
/// a property name and a shape per field; a typed array, a buffer the
/// garbage collector sweeps); `failure.js`'s `tallyOfRow` names them. Any
/// other: the [`TallyInfo`].
pub struct TallyRow(pub TallyInfo);

/// The bits of each count in a packed [`TallyRow`] (five fit a double's
/// 53 exactly).
const TALLY_BITS: u32 = 10;

impl TallyRow {
    fn packed(t: &TallyInfo) -> Option<f64> {
        let texts = t.first_failure.is_some()
            || t.first_cluster_unavailable.is_some()
            || t.first_unreachable.is_some();
        let others = t.quarantined | t.unreachable | t.timed_out | t.failed | t.cluster_unavailable;
        if texts || others != 0 || t.quarantine_left.is_some() {
            return None;
        }
        let mut packed = 0u64;
        for count in [t.pending, t.no, t.yes, t.need, t.nodes] {
            if count >= 1 << TALLY_BITS {
                return None;
            }
            packed = packed << TALLY_BITS | u64::from(count);
        }
        // Below 2^50: exact.
        Some(packed as f64)
    }
}

impl TypeName for TallyRow {
    fn type_name() -> &'static str {
        "number | TallyInfo"
    }

    fn value_type() -> ValueType {
        ValueType::Unknown
    }
}

impl ToNapiValue for TallyRow {
    unsafe fn to_napi_value(env: sys::napi_env, row: Self) -> napi::Result<sys::napi_value> {
        // SAFETY: as napi-rs calls it.
        unsafe {
            match TallyRow::packed(&row.0) {
                Some(packed) => f64::to_napi_value(env, packed),
                None => TallyInfo::to_napi_value(env, row.0),
            }
        }
    }
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
    let ms = |what, value: Option<f64>| value.map(|value| MS.duration(what, value)).transpose();
    let delays = match (ms("retryDelay", retry.delay_min)?, ms("retryDelay", retry.delay_max)?) {
        (Some(min), Some(max)) => Some((min, max)),
        _ => None,
    };
    retry_policy(ms("wait", retry.wait)?, retry.attempts, delays)
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

/// The quorum's status (`Redlock.status()`): every member's nodes, and
/// whether a majority can grant now.
#[napi(object)]
pub struct QuorumStatusInfo {
    pub members: Vec<MemberStatusInfo>,
    /// The members that must grant (a majority).
    pub need: u32,
    /// The members that can grant now.
    pub granting: u32,
    pub grants: bool,
    /// The kind of refusal that alone keeps the majority from granting
    /// ("unreachable", "no-module", "quarantined", "evicting", "error");
    /// `null` when it grants or the causes are mixed.
    pub cause: Option<String>,
    /// ms until enough quarantines end for a majority to grant.
    pub ready_in: Option<f64>,
    /// The verdict in one line, as `redlock status` prints it.
    pub summary: String,
    pub differences: Vec<DifferenceInfo>,
    pub protections_off: Vec<ProtectionInfo>,
}

/// One quorum member (one vote): a master, or a cluster with a node per
/// shard master.
#[napi(object)]
pub struct MemberStatusInfo {
    pub member: String,
    pub nodes: Vec<NodeStatusInfo>,
}

#[napi(object)]
pub struct NodeStatusInfo {
    pub node: String,
    /// `null` when the node gave no `INFO lock` (see `blocked`).
    pub health: Option<NodeHealthInfo>,
    /// Why it cannot grant now ("unreachable", "no-module",
    /// "quarantined", "evicting", "error"), `null` when it can; `why` in
    /// words.
    pub blocked: Option<String>,
    pub why: Option<String>,
}

/// What a reachable node with the module says of itself (`INFO lock`).
#[napi(object)]
pub struct NodeHealthInfo {
    /// "startup" or "promotion", when a quarantine is in force.
    pub quarantine_reason: Option<String>,
    /// ms of quarantine left.
    pub quarantine_left: Option<f64>,
    pub evicting_policy: Option<String>,
    pub eviction_mode: String,
    pub fencing_counter: BigInt,
    pub protections_off: Vec<String>,
    pub quarantined_keys: f64,
    pub quarantined_dbs: f64,
    /// Wall clock minus module clock, ms: non-zero after a clock jump.
    pub wall_clock_offset: f64,
    /// The settings in force, [name, value] (`max_ttl_ms`, ...).
    pub settings: Vec<Vec<String>>,
}

/// A setting that differs between nodes: each value with its nodes.
#[napi(object)]
pub struct DifferenceInfo {
    pub setting: String,
    pub values: Vec<SettingValueInfo>,
}

#[napi(object)]
pub struct SettingValueInfo {
    pub value: String,
    pub nodes: Vec<String>,
}

/// A protection some nodes have off.
#[napi(object)]
pub struct ProtectionInfo {
    pub protection: String,
    pub nodes: Vec<String>,
}

fn count(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

pub fn quorum_status(status: QuorumStatus) -> QuorumStatusInfo {
    let (cause, ready_in_ms) = readiness_out(&status.readiness);
    let summary = status.summary();
    let grants = status.grants();
    let protections_off = status
        .protections_off()
        .into_iter()
        .map(|(protection, nodes)| ProtectionInfo { protection, nodes })
        .collect();
    let differences = status
        .differences
        .into_iter()
        .map(|d| DifferenceInfo {
            setting: d.setting,
            values: d.values.into_iter().map(|(value, nodes)| SettingValueInfo { value, nodes }).collect(),
        })
        .collect();
    let members = status
        .members
        .into_iter()
        .map(|m| MemberStatusInfo { member: m.member, nodes: m.nodes.into_iter().map(node_status).collect() })
        .collect();
    QuorumStatusInfo {
        members,
        need: count(status.need),
        granting: count(status.granting),
        grants,
        cause: cause.map(str::to_string),
        ready_in: ready_in_ms.map(|ms| ms as f64),
        summary,
        differences,
        protections_off,
    }
}

fn node_status(node: NodeStatus) -> NodeStatusInfo {
    let blocker = node.blocker();
    let health = node.health.ok().map(|h: NodeHealth| NodeHealthInfo {
        quarantine_reason: h.quarantine.as_ref().map(|q| q.reason.clone()),
        quarantine_left: h.quarantine.as_ref().map(|q| q.ms_left as f64),
        evicting_policy: h.evicting_policy,
        eviction_mode: h.eviction_mode,
        fencing_counter: BigInt::from(h.fencing_counter),
        protections_off: h.protections_off,
        quarantined_keys: h.quarantined_keys as f64,
        quarantined_dbs: h.quarantined_dbs as f64,
        wall_clock_offset: h.wall_clock_offset_ms as f64,
        settings: h.settings.into_iter().map(|(name, value)| vec![name, value]).collect(),
    });
    NodeStatusInfo {
        node: node.node,
        health,
        blocked: blocker.as_ref().map(|b| b.name().to_string()),
        why: blocker.as_ref().map(blocker_text),
    }
}

/// `freedChannel(resource, cluster, db)`: the channel a freed lock is
/// announced on and the command that subscribes to it, `[channel,
/// command]` (`index.js` checks the arguments).
#[napi]
pub fn freed_channel(resource: String, cluster: bool, db: i32) -> Vec<String> {
    let (channel, command) = redlock_client::bindings::freed_channel(&resource, cluster, db);
    vec![channel, command.to_string()]
}
