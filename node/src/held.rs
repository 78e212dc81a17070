//! `Held`: a lock held on a quorum of nodes, the client's shared
//! [`HeldLock`] as a JavaScript object, and its loss report.

use std::sync::Arc;

use napi::bindgen_prelude::{BigInt, PromiseRaw};
use napi::threadsafe_function::{ThreadsafeFunction, ThreadsafeFunctionCallMode};
use napi::{Env, Result, Status as NapiStatus};
use napi_derive::napi;
use redlock_client::bindings::{mode_out, wait_for_loss, HeldLock, Unit};
use redlock_client::{Error, Watchdog};

use crate::call;
use crate::convert::{outcome, Failure, FailureInfo, Outcome, TallyInfo, TallyRow};

/// Called once, on the JavaScript thread, with the failure that says why
/// the lock is lost. Weak: waiting for a loss does not keep the process
/// alive.
pub type LossCallback = ThreadsafeFunction<FailureInfo, (), FailureInfo, NapiStatus, false, true>;

/// Every resource of a lock with its mode.
#[napi(object)]
pub struct ResourceInfo {
    pub resource: String,
    pub mode: String,
    pub permits: Option<u32>,
}

/// Where a lock stands, read without I/O.
#[napi(object)]
pub struct StatusInfo {
    /// "held", "lost", "released" or "detached". A lock past its deadline
    /// is "lost", as the guard itself says at its next use.
    pub state: String,
    /// ms of validity left (0 unless held).
    pub validity: f64,
    /// "off", "running" or "stopped".
    pub watchdog: String,
}

/// What is left of a lock after `detach()`.
#[napi(object)]
pub struct DetachedInfo {
    pub token: String,
    pub fencing_token: Option<BigInt>,
    /// ms of validity left when it was detached.
    pub validity: f64,
}

#[napi]
pub struct Held {
    held: Arc<HeldLock>,
}

impl Held {
    pub fn new(held: HeldLock) -> Held {
        Held { held: Arc::new(held) }
    }
}

#[napi]
impl Held {
    #[napi(getter)]
    pub fn token(&self) -> String {
        self.held.token().to_string()
    }

    /// Every resource with its mode, in the order given.
    #[napi(getter)]
    pub fn resources(&self) -> Vec<ResourceInfo> {
        let info = |(resource, mode): &(String, _)| {
            let (mode, permits) = mode_out(*mode);
            ResourceInfo { resource: resource.clone(), mode: mode.to_string(), permits }
        };
        self.held.resources().iter().map(info).collect()
    }

    /// The quorum fencing token if a fencing round confirmed it already.
    #[napi(getter)]
    pub fn fenced(&self) -> Option<BigInt> {
        self.held.fenced().map(BigInt::from)
    }

    #[napi]
    pub fn status(&self) -> StatusInfo {
        let status = self.held.status();
        StatusInfo {
            state: status.state.to_string(),
            validity: Unit::Milliseconds.of(status.validity),
            watchdog: status.watchdog.to_string(),
        }
    }

    /// The fencing round (the first call; later ones return the same
    /// token without a round).
    #[napi(ts_return_type = "Promise<bigint | Failure>")]
    pub fn fence(&self, env: Env) -> Result<PromiseRaw<'static, Outcome<BigInt>>> {
        let held = self.held.clone();
        call::promise(&env, async move { outcome(held.fence().await.map(BigInt::from)) })
    }

    /// Extends the lock for `ttl` ms (default: the TTL it was taken with);
    /// the validity left, in ms.
    #[napi(ts_return_type = "Promise<number | Failure>")]
    pub fn extend(&self, env: Env, ttl: Option<f64>) -> Result<PromiseRaw<'static, Outcome<f64>>> {
        let held = self.held.clone();
        call::promise(&env, async move {
            let extended = async move {
                let ttl = ttl.map(|ttl| Unit::Milliseconds.duration("ttl", ttl)).transpose()?;
                held.extend(ttl).await
            };
            outcome(extended.await.map(|left| Unit::Milliseconds.of(left)))
        })
    }

    /// Releases on every node; the release round's counts.
    #[napi(ts_return_type = "Promise<TallyRow | Failure>")]
    pub fn release(&self, env: Env) -> Result<PromiseRaw<'static, Outcome<TallyRow>>> {
        let held = self.held.clone();
        call::promise(&env, async move {
            outcome(held.release().await.map(|tally| TallyRow(TallyInfo::of(&tally))))
        })
    }

    /// Gives the guard up without releasing: the lock stays until its TTL
    /// or a release by token.
    #[napi(ts_return_type = "Promise<DetachedInfo | Failure>")]
    pub fn detach(&self, env: Env) -> Result<PromiseRaw<'static, Outcome<DetachedInfo>>> {
        let held = self.held.clone();
        call::promise(&env, async move {
            outcome(held.detach().await.map(|detached| DetachedInfo {
                token: detached.token,
                fencing_token: detached.fencing_token.map(BigInt::from),
                validity: Unit::Milliseconds.of(detached.validity),
            }))
        })
    }

    /// Starts (or restarts) the watchdog: renews every ttl/3 within the
    /// bounds (`duration_max` in ms).
    #[napi(ts_return_type = "Promise<undefined | Failure>")]
    pub fn start_watchdog(
        &self,
        env: Env,
        renewals_max: u32,
        duration_max: f64,
    ) -> Result<PromiseRaw<'static, Outcome<()>>> {
        let held = self.held.clone();
        call::promise(&env, async move {
            let started = async move {
                let duration_max = Unit::Milliseconds.duration("durationMax", duration_max)?;
                held.start_watchdog(Watchdog { renewals_max, duration_max }).await
            };
            outcome(started.await)
        })
    }

    /// Calls `callback(failure)` once, on the JavaScript thread, when the
    /// lock is lost (at once if it is already); never after a release or
    /// detach. A later call replaces the callback.
    #[napi]
    pub fn on_lost(&self, callback: LossCallback) {
        let weak = Arc::downgrade(&self.held);
        let task = self.held.runtime().spawn(async move {
            if let Some((held, reason)) = wait_for_loss(weak, |held| held).await {
                let error = Error::Lost { resource: held.resource().to_string(), reason };
                callback.call(Failure::of(&error).info(), ThreadsafeFunctionCallMode::NonBlocking);
            }
        });
        self.held.watch(task.abort_handle());
    }
}
