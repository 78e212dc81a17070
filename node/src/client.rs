//! `Client`: one `redlock_client::Redlock` (one connection and one ordered
//! writer per node), shared by every async task of the process that uses
//! it. Each method converts its arguments, runs the client's call on the
//! runtime and converts what it returns.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use napi::bindgen_prelude::{BigInt, Either, PromiseRaw};
use napi::{Env, Result};
use napi_derive::napi;
use redlock_client::bindings::{self, mode, Claims, HeldLock, Unit};
use redlock_client::{Config, Error, Redlock, Tls};
use tokio::runtime::Handle;
use tokio::sync::Notify;

use crate::call;
use crate::convert::{
    node_report, outcome, policy, quorum_status, Failure, NodeReport, Outcome, QuorumStatusInfo, Retry,
    TallyInfo, TallyRow,
};
use crate::held::Held;

const MS: Unit = Unit::Milliseconds;

/// One resource of an acquire, as JavaScript gives it.
#[napi(object)]
pub struct ClaimArg {
    pub resource: String,
    pub mode: String,
    pub permits: Option<u32>,
}

/// The TLS settings (`ConnectOptions.tls`), checked by index.js: the
/// client's `Tls`, its fields in camelCase.
#[napi(object)]
pub struct TlsArg {
    pub ca_file: Option<String>,
    pub ca_dir: Option<String>,
    pub cert_file: Option<String>,
    pub key_file: Option<String>,
    pub server_name: Option<String>,
    pub insecure_skip_verify: Option<bool>,
}

impl From<TlsArg> for Tls {
    fn from(arg: TlsArg) -> Tls {
        Tls {
            ca_file: arg.ca_file.map(Into::into),
            ca_dir: arg.ca_dir.map(Into::into),
            cert_file: arg.cert_file.map(Into::into),
            key_file: arg.key_file.map(Into::into),
            server_name: arg.server_name,
            insecure_skip_verify: arg.insecure_skip_verify.unwrap_or(false),
        }
    }
}

/// Connects to every node, in parallel, each within `connect_timeout` ms.
/// Unreachable nodes are no error: later calls try them again.
#[napi(ts_return_type = "Promise<Client | Failure>")]
pub fn connect(
    env: Env,
    nodes: Vec<String>,
    connect_timeout: f64,
    command_timeout: f64,
    reconnect_backoff: f64,
    tls: Option<TlsArg>,
) -> Result<PromiseRaw<'static, Outcome<Client>>> {
    let connected = async move {
        let config = Config {
            connect_timeout: MS.duration("connectTimeout", connect_timeout)?,
            command_timeout: MS.duration("commandTimeout", command_timeout)?,
            reconnect_backoff: MS.duration("reconnectBackoff", reconnect_backoff)?,
            tls: tls.map(Tls::from).unwrap_or_default(),
        };
        Ok(Client { redlock: Redlock::connect(nodes, config).await?, aborts: Arc::default() })
    };
    call::promise(&env, async move { outcome(connected.await) })
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
    aborts: Arc<Aborts>,
}

/// The aborts of acquires that wait, by the id JavaScript gave the call
/// (one per `signal`): `Client::abort` fires one, the acquire stops waiting.
/// Either may come first; the acquire forgets its id when it ends.
#[derive(Default)]
struct Aborts(Mutex<HashMap<u32, Arc<Abort>>>);

#[derive(Default)]
struct Abort {
    fired: AtomicBool,
    wake: Notify,
}

impl Aborts {
    fn get(&self, id: u32) -> Arc<Abort> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).entry(id).or_default().clone()
    }

    fn forget(&self, id: u32) {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).remove(&id);
    }
}

impl Abort {
    fn fire(&self) {
        self.fired.store(true, Ordering::SeqCst);
        self.wake.notify_waiters();
    }

    /// Completes once fired (at once if it was already).
    async fn fired(&self) {
        loop {
            // Registered before the flag is read: a fire in between wakes it.
            let woken = self.wake.notified();
            tokio::pin!(woken);
            woken.as_mut().enable();
            if self.fired.load(Ordering::SeqCst) {
                return;
            }
            woken.await;
        }
    }
}

impl Client {
    /// The acquire of `claims` (see [`Client::acquire`]) as a Promise.
    fn take(
        &self,
        env: &Env,
        claims: redlock_client::Result<Claims>,
        ttl: f64,
        fence: bool,
        retry: Option<Retry>,
        abort: Option<u32>,
    ) -> Result<PromiseRaw<'static, Outcome<Held>>> {
        let redlock = self.redlock.clone();
        let taken = async move {
            let claims = Arc::new(claims?);
            let ttl = MS.duration("ttl", ttl)?;
            let (guard, fenced) = match retry {
                None => claims.attempt(&redlock, ttl, fence).await?,
                Some(retry) => {
                    policy(&retry)?
                        .retry(|| {
                            let (redlock, claims) = (redlock.clone(), claims.clone());
                            let task =
                                tokio::spawn(async move { claims.attempt(&redlock, ttl, fence).await });
                            async move {
                                task.await.unwrap_or_else(|e| {
                                    Err(Error::InvalidArgument(format!("the acquire attempt failed: {e}")))
                                })
                            }
                        })
                        .await?
                }
            };
            // Always there: this runs as a task of the runtime.
            let runtime =
                Handle::try_current().map_err(|e| Error::InvalidArgument(format!("no runtime: {e}")))?;
            Ok(Held::new(HeldLock::new(guard, fenced, runtime)))
        };
        let Some(id) = abort else { return call::promise(env, async move { outcome(taken.await) }) };
        let aborts = self.aborts.clone();
        call::promise(env, async move {
            let aborted = aborts.get(id);
            let result = tokio::select! {
                taken = taken => outcome(taken),
                () = aborted.fired() => Either::B(Failure::aborted()),
            };
            aborts.forget(id);
            result
        })
    }
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
    /// one resource in `mode_name`; `fence`: the fencing round too.
    /// `abort`: the id of the caller's signal ([`Client::abort`]), which
    /// stops the retries: the call then fails as "aborted". Each attempt is
    /// a task of its own, so that an attempt under way when the wait stops
    /// still ends, and if it took the lock, its guard is dropped there,
    /// which releases it.
    #[napi(ts_return_type = "Promise<Held | Failure>")]
    #[allow(clippy::too_many_arguments)]
    pub fn acquire(
        &self,
        env: Env,
        resource: String,
        mode_name: String,
        permits: Option<u32>,
        ttl: f64,
        fence: bool,
        retry: Option<Retry>,
        abort: Option<u32>,
    ) -> Result<PromiseRaw<'static, Outcome<Held>>> {
        let claims = mode(&mode_name, permits).map(|mode| Claims::One(resource, mode));
        self.take(&env, claims, ttl, fence, retry, abort)
    }

    /// `acquire` of a set, all or nothing.
    #[napi(ts_return_type = "Promise<Held | Failure>")]
    pub fn acquire_many(
        &self,
        env: Env,
        claims: Vec<ClaimArg>,
        ttl: f64,
        fence: bool,
        retry: Option<Retry>,
        abort: Option<u32>,
    ) -> Result<PromiseRaw<'static, Outcome<Held>>> {
        let claims = Claims::parse(claims.into_iter().map(|c| (c.resource, c.mode, c.permits)), true);
        self.take(&env, claims, ttl, fence, retry, abort)
    }

    /// Stops the wait of the acquire given `id` (its signal fired); one
    /// that has not started yet stops at once.
    #[napi]
    pub fn abort(&self, id: u32) {
        self.aborts.get(id).fire();
    }

    /// Releases by token: one resource (`many` false, in `mode`) or a set;
    /// the round's counts (every node answered).
    #[napi(ts_return_type = "Promise<TallyRow | Failure>")]
    pub fn release(
        &self,
        env: Env,
        resources: Vec<String>,
        many: bool,
        token: String,
        mode_name: String,
        permits: Option<u32>,
    ) -> Result<PromiseRaw<'static, Outcome<TallyRow>>> {
        let redlock = self.redlock.clone();
        let mode = mode(&mode_name, permits);
        call::promise(&env, async move {
            let released = bindings::release_by_token(&redlock, &resources, many, &token, mode).await;
            outcome(released.map(|tally| TallyRow(TallyInfo::of(&tally))))
        })
    }

    /// Extends by token for `ttl` ms; the validity left, in ms.
    #[napi(ts_return_type = "Promise<number | Failure>")]
    #[allow(clippy::too_many_arguments)]
    pub fn extend(
        &self,
        env: Env,
        resources: Vec<String>,
        many: bool,
        token: String,
        ttl: f64,
        mode_name: String,
        permits: Option<u32>,
    ) -> Result<PromiseRaw<'static, Outcome<f64>>> {
        let redlock = self.redlock.clone();
        call::promise(&env, async move {
            let extended = async move {
                let ttl = MS.duration("ttl", ttl)?;
                let mode = mode(&mode_name, permits);
                bindings::extend_by_token(&redlock, &resources, many, &token, mode, ttl).await
            };
            outcome(extended.await.map(|left| MS.of(left)))
        })
    }

    /// Reentrant enter: the fencing token and the validity left.
    #[napi(ts_return_type = "Promise<EnteredInfo | Failure>")]
    pub fn enter(
        &self,
        env: Env,
        resource: String,
        owner: String,
        ttl: f64,
    ) -> Result<PromiseRaw<'static, Outcome<EnteredInfo>>> {
        let redlock = self.redlock.clone();
        call::promise(&env, async move {
            let entered =
                async move { bindings::enter(&redlock, &resource, &owner, MS.duration("ttl", ttl)?).await };
            outcome(entered.await.map(|(fencing_token, left)| EnteredInfo {
                fencing_token: BigInt::from(fencing_token),
                validity: MS.of(left),
            }))
        })
    }

    /// Reentrant exit: the holds left.
    #[napi(ts_return_type = "Promise<number | Failure>")]
    pub fn exit(
        &self,
        env: Env,
        resource: String,
        owner: String,
    ) -> Result<PromiseRaw<'static, Outcome<f64>>> {
        let redlock = self.redlock.clone();
        // Hold counts are small; a double carries them exactly.
        call::promise(
            &env,
            async move { outcome(redlock.exit(&resource, &owner).await.map(|left| left as f64)) },
        )
    }

    /// `LOCK.INFO` on every node, in node order.
    #[napi(ts_return_type = "Promise<NodeReport[]>")]
    pub fn info(&self, env: Env, resource: String) -> Result<PromiseRaw<'static, Vec<NodeReport>>> {
        let redlock = self.redlock.clone();
        call::promise(
            &env,
            async move { redlock.info(&resource).await.into_iter().map(node_report).collect() },
        )
    }

    /// `INFO lock` on every node: can a majority grant now, and if not why
    /// (the client's `Redlock::status`).
    #[napi(ts_return_type = "Promise<QuorumStatusInfo>")]
    pub fn status(&self, env: Env) -> Result<PromiseRaw<'static, QuorumStatusInfo>> {
        let redlock = self.redlock.clone();
        call::promise(&env, async move { quorum_status(redlock.status().await) })
    }

    /// Waits (bounded) for the calls earlier rounds left in the background.
    #[napi(ts_return_type = "Promise<void>")]
    pub fn settle(&self, env: Env) -> Result<PromiseRaw<'static, ()>> {
        let redlock = self.redlock.clone();
        call::promise(&env, async move { redlock.settle().await })
    }
}
