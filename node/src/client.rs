//! `Client`: one `redlock_client::Redlock` (one connection and one ordered
//! writer per node), shared by every async task of the process that uses
//! it. Each method converts its arguments, runs the client's call on the
//! runtime and converts what it returns.

use std::sync::Arc;
use std::time::Duration;

use napi::bindgen_prelude::BigInt;
use napi_derive::napi;
use redlock_client::{Config, Error, Guard, Mode, Redlock, Result};
use tokio::runtime::Handle;

use crate::convert::{
    millis, millis_out, mode, node_report, outcome, policy, NodeReport, Outcome, Retry, TallyInfo,
};
use crate::held::Held;

/// One resource of an acquire, as JavaScript gives it.
#[napi(object)]
pub struct ClaimArg {
    pub resource: String,
    pub mode: String,
    pub permits: Option<u32>,
}

/// What an acquire takes: one resource (any mode) or a set (the client's
/// `try_acquire_many`, all or nothing).
enum Claims {
    One(String, Mode),
    Many(Vec<(String, Mode)>),
}

fn claims(list: Vec<ClaimArg>, many: bool) -> Result<Claims> {
    let set = list.into_iter().map(|c| Ok((c.resource, mode(&c.mode, c.permits)?)));
    let set = set.collect::<Result<Vec<_>>>()?;
    if many {
        return Ok(Claims::Many(set));
    }
    match <[(String, Mode); 1]>::try_from(set) {
        Ok([(name, mode)]) => Ok(Claims::One(name, mode)),
        Err(_) => Err(Error::InvalidArgument("one resource expected".into())),
    }
}

/// One acquire attempt, and with `fence` the fencing round right after it
/// (a failed round drops the guard, which releases it).
async fn attempt(redlock: Redlock, claims: Arc<Claims>, ttl: Duration, fence: bool) -> Result<Held> {
    let guard: Guard = match &*claims {
        Claims::One(resource, mode) => redlock.try_acquire(resource, *mode, ttl).await?,
        Claims::Many(set) => redlock.try_acquire_many(set, ttl).await?,
    };
    let fenced = if fence { Some(guard.fencing_token().await?) } else { None };
    // Always there: this runs as a task of the runtime.
    let runtime = Handle::try_current().map_err(|e| Error::InvalidArgument(format!("no runtime: {e}")))?;
    Ok(Held::new(guard, fenced, runtime))
}

/// Connects to every node, in parallel, each within `connect_timeout` ms.
/// Unreachable nodes are no error: later calls try them again.
#[napi]
pub async fn connect(
    nodes: Vec<String>,
    connect_timeout: f64,
    command_timeout: f64,
    reconnect_backoff: f64,
) -> Outcome<Client> {
    let connected = async {
        let config = Config {
            connect_timeout: millis("connectTimeout", connect_timeout)?,
            command_timeout: millis("commandTimeout", command_timeout)?,
            reconnect_backoff: millis("reconnectBackoff", reconnect_backoff)?,
        };
        Ok(Client { redlock: Redlock::connect(nodes, config).await? })
    };
    outcome(connected.await)
}

/// The result of a reentrant enter.
#[napi(object)]
pub struct EnteredInfo {
    pub fencing_token: BigInt,
    /// ms of validity left when it was granted.
    pub validity: f64,
}

#[napi]
pub struct Client {
    redlock: Redlock,
}

#[napi]
impl Client {
    #[napi(getter)]
    pub fn nodes(&self) -> Vec<String> {
        self.redlock.node_urls()
    }

    #[napi(getter)]
    pub fn majority(&self) -> u32 {
        u32::try_from(self.redlock.majority()).unwrap_or(u32::MAX)
    }

    /// The grants a lock taken in this mode needs.
    #[napi]
    pub fn quorum(&self, mode_name: String, permits: Option<u32>) -> Outcome<u32> {
        outcome(mode(&mode_name, permits).map(|m| u32::try_from(self.redlock.quorum(m)).unwrap_or(u32::MAX)))
    }

    /// One attempt (`retry` absent) or attempts within a retry policy, of
    /// one resource or (`many`) a set; `fence`: the fencing round too.
    #[napi]
    pub async fn acquire(
        &self,
        claims: Vec<ClaimArg>,
        many: bool,
        ttl: f64,
        fence: bool,
        retry: Option<Retry>,
    ) -> Outcome<Held> {
        let redlock = self.redlock.clone();
        let taken = async move {
            let claims = Arc::new(self::claims(claims, many)?);
            let ttl = millis("ttl", ttl)?;
            match retry {
                None => attempt(redlock, claims, ttl, fence).await,
                Some(retry) => {
                    let policy = policy(&retry)?;
                    policy.retry(|| attempt(redlock.clone(), claims.clone(), ttl, fence)).await
                }
            }
        };
        outcome(taken.await)
    }

    /// Releases by token: one resource (`many` false, in `mode`) or a set;
    /// the round's counts (every node answered).
    #[napi]
    pub async fn release(
        &self,
        resources: Vec<String>,
        many: bool,
        token: String,
        mode_name: String,
        permits: Option<u32>,
    ) -> Outcome<TallyInfo> {
        let redlock = self.redlock.clone();
        let released = async move {
            match (many, resources.as_slice()) {
                (true, set) => redlock.release_many(set, &token).await,
                (false, [one]) => redlock.release(one, &token, mode(&mode_name, permits)?).await,
                (false, _) => Err(Error::InvalidArgument("one resource expected".into())),
            }
        };
        outcome(released.await.map(|tally| TallyInfo::of(&tally)))
    }

    /// Extends by token for `ttl` ms; the validity left, in ms.
    #[napi]
    pub async fn extend(
        &self,
        resources: Vec<String>,
        many: bool,
        token: String,
        ttl: f64,
        mode_name: String,
        permits: Option<u32>,
    ) -> Outcome<f64> {
        let redlock = self.redlock.clone();
        let extended = async move {
            let ttl = millis("ttl", ttl)?;
            let lease = match (many, resources.as_slice()) {
                (true, set) => redlock.extend_many(set, &token, ttl).await?,
                (false, [one]) => redlock.extend(one, &token, mode(&mode_name, permits)?, ttl).await?,
                (false, _) => return Err(Error::InvalidArgument("one resource expected".into())),
            };
            Ok(millis_out(lease.deadline.saturating_duration_since(tokio::time::Instant::now())))
        };
        outcome(extended.await)
    }

    /// Reentrant enter: the fencing token and the validity left.
    #[napi]
    pub async fn enter(&self, resource: String, owner: String, ttl: f64) -> Outcome<EnteredInfo> {
        let redlock = self.redlock.clone();
        let entered = async move {
            let entered = redlock.enter(&resource, &owner, millis("ttl", ttl)?).await?;
            let left = entered.lease.deadline.saturating_duration_since(tokio::time::Instant::now());
            Ok(EnteredInfo { fencing_token: BigInt::from(entered.fencing_token), validity: millis_out(left) })
        };
        outcome(entered.await)
    }

    /// Reentrant exit: the holds left.
    #[napi]
    pub async fn exit(&self, resource: String, owner: String) -> Outcome<f64> {
        let redlock = self.redlock.clone();
        // Hold counts are small; a double carries them exactly.
        outcome(redlock.exit(&resource, &owner).await.map(|left| left as f64))
    }

    /// `LOCK.INFO` on every node, in node order.
    #[napi]
    pub async fn info(&self, resource: String) -> Vec<NodeReport> {
        let redlock = self.redlock.clone();
        redlock.info(&resource).await.into_iter().map(node_report).collect()
    }

    /// Waits (bounded) for the calls earlier rounds left in the background.
    #[napi]
    pub async fn settle(&self) {
        self.redlock.clone().settle().await;
    }
}
