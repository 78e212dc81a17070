//! `Held`: a lock held on a quorum of nodes (the client's `Guard`), shared
//! by the JavaScript object and the tasks that act on it, and its loss
//! report.
//!
//! The guard sits in an async read-write lock: the fencing round and
//! extensions read it (they may run together); release, detach and the
//! watchdog's start take it. What JavaScript reads without I/O (status,
//! validity) comes from the guard's status channel, so the JavaScript
//! thread never waits for a round.

use std::sync::{Arc, Mutex, OnceLock, Weak};

use napi::bindgen_prelude::BigInt;
use napi::threadsafe_function::{ThreadsafeFunction, ThreadsafeFunctionCallMode};
use napi::Status as NapiStatus;
use napi_derive::napi;
use tokio::runtime::Handle;
use tokio::sync::{watch, RwLock};
use tokio::task::AbortHandle;
use tokio::time::Instant;

use redlock_client::{Error, Guard, Mode, Renewal, Status, Watchdog};

use crate::convert::{millis, millis_out, mode_out, outcome, Failure, FailureInfo, Outcome, TallyInfo};

/// Called once, on the JavaScript thread, with the failure that says why
/// the lock is lost. Weak: waiting for a loss does not keep the process
/// alive.
pub type LossCallback = ThreadsafeFunction<FailureInfo, (), FailureInfo, NapiStatus, false, true>;

struct State {
    resource: String,
    guard: RwLock<Option<Guard>>,
    status: watch::Receiver<Status>,
    /// The quorum fencing token, once a fencing round confirmed it.
    fenced: OnceLock<u64>,
    /// "released" or "detached" once the guard was given up.
    ended: OnceLock<&'static str>,
    /// The task waiting for a loss, aborted when the guard is given up.
    watcher: Mutex<Option<AbortHandle>>,
    /// The runtime the guard's rounds run on: a guard dropped with the
    /// JavaScript object (on the JavaScript thread, outside it) releases
    /// the lock there.
    runtime: Handle,
}

impl State {
    fn released(&self) -> Error {
        Error::InvalidArgument(format!("the lock on '{}' was released or detached", self.resource))
    }

    /// Takes the guard out to give it up (`how`: "released" or
    /// "detached"): no loss can come any more.
    async fn give_up(&self, how: &'static str) -> Result<Guard, Error> {
        let guard = self.guard.write().await.take().ok_or_else(|| self.released())?;
        let _ = self.ended.set(how);
        self.stop_watching();
        Ok(guard)
    }

    fn stop_watching(&self) {
        let watcher = self.watcher.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).take();
        if let Some(watcher) = watcher {
            watcher.abort();
        }
    }
}

impl Drop for State {
    fn drop(&mut self) {
        self.stop_watching();
        // A guard neither released nor detached is released in the
        // background, on the runtime (the guard's own drop does it).
        if let Some(guard) = self.guard.get_mut().take() {
            let _runtime = self.runtime.enter();
            drop(guard);
        }
    }
}

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
    state: Arc<State>,
    token: String,
    resources: Vec<(String, Mode)>,
}

impl Held {
    /// `runtime`: the one the guard's rounds run on (an acquire's).
    pub fn new(guard: Guard, fenced: Option<u64>, runtime: Handle) -> Held {
        let fencing = OnceLock::new();
        if let Some(token) = fenced {
            let _ = fencing.set(token);
        }
        let token = guard.token().to_string();
        let resources = guard.resources().to_vec();
        let state = State {
            resource: guard.resource().to_string(),
            status: guard.subscribe(),
            guard: RwLock::new(Some(guard)),
            fenced: fencing,
            ended: OnceLock::new(),
            watcher: Mutex::new(None),
            runtime,
        };
        Held { state: Arc::new(state), token, resources }
    }
}

#[napi]
impl Held {
    #[napi(getter)]
    pub fn token(&self) -> String {
        self.token.clone()
    }

    /// Every resource with its mode, in the order given.
    #[napi(getter)]
    pub fn resources(&self) -> Vec<ResourceInfo> {
        let info = |(resource, mode): &(String, Mode)| {
            let (mode, permits) = mode_out(*mode);
            ResourceInfo { resource: resource.clone(), mode, permits }
        };
        self.resources.iter().map(info).collect()
    }

    /// The quorum fencing token if a fencing round confirmed it already.
    #[napi(getter)]
    pub fn fenced(&self) -> Option<BigInt> {
        self.state.fenced.get().map(|token| BigInt::from(*token))
    }

    #[napi]
    pub fn status(&self) -> StatusInfo {
        let info = |state: &str, validity: f64, watchdog: &str| StatusInfo {
            state: state.to_string(),
            validity,
            watchdog: watchdog.to_string(),
        };
        if let Some(ended) = self.state.ended.get() {
            return info(ended, 0.0, "off");
        }
        match &*self.state.status.borrow() {
            Status::Held { deadline, renewal } => {
                let left = deadline.saturating_duration_since(Instant::now());
                let watchdog = match renewal {
                    Renewal::Off => "off",
                    Renewal::Running => "running",
                    Renewal::Stopped { .. } => "stopped",
                };
                info(if left.is_zero() { "lost" } else { "held" }, millis_out(left), watchdog)
            }
            Status::Lost(_) => info("lost", 0.0, "off"),
            Status::Released => info("released", 0.0, "off"),
        }
    }

    /// The fencing round (the first call; later ones return the same
    /// token without a round).
    #[napi]
    pub async fn fence(&self) -> Outcome<BigInt> {
        let state = self.state.clone();
        let fenced = async move {
            let held = state.guard.read().await;
            let guard = held.as_ref().ok_or_else(|| state.released())?;
            let token = guard.fencing_token().await?;
            let _ = state.fenced.set(token);
            Ok(BigInt::from(token))
        };
        outcome(fenced.await)
    }

    /// Extends the lock for `ttl` ms (default: the TTL it was taken with);
    /// the validity left, in ms.
    #[napi]
    pub async fn extend(&self, ttl: Option<f64>) -> Outcome<f64> {
        let state = self.state.clone();
        let extended = async move {
            let ttl = ttl.map(|ttl| millis("ttl", ttl)).transpose()?;
            let held = state.guard.read().await;
            let guard = held.as_ref().ok_or_else(|| state.released())?;
            guard.extend(ttl.unwrap_or(guard.lease().ttl)).await.map(millis_out)
        };
        outcome(extended.await)
    }

    /// Releases on every node; the release round's counts.
    #[napi]
    pub async fn release(&self) -> Outcome<TallyInfo> {
        let state = self.state.clone();
        let released = async move { state.give_up("released").await?.release().await };
        outcome(released.await.map(|tally| TallyInfo::of(&tally)))
    }

    /// Gives the guard up without releasing: the lock stays until its TTL
    /// or a release by token.
    #[napi]
    pub async fn detach(&self) -> Outcome<DetachedInfo> {
        let state = self.state.clone();
        let detached = async move {
            let detached = state.give_up("detached").await?.detach();
            let left = detached.deadline.saturating_duration_since(Instant::now());
            Ok(DetachedInfo {
                token: detached.token,
                fencing_token: detached.fencing_token.map(BigInt::from),
                validity: millis_out(left),
            })
        };
        outcome(detached.await)
    }

    /// Starts (or restarts) the watchdog: renews every ttl/3 within the
    /// bounds (`duration_max` in ms).
    #[napi]
    pub async fn start_watchdog(&self, renewals_max: u32, duration_max: f64) -> Outcome<()> {
        let state = self.state.clone();
        let started = async move {
            let limits = Watchdog { renewals_max, duration_max: millis("durationMax", duration_max)? };
            let mut held = state.guard.write().await;
            held.as_mut().ok_or_else(|| state.released())?.start_watchdog(limits);
            Ok(())
        };
        outcome(started.await)
    }

    /// Calls `callback(failure)` once, on the JavaScript thread, when the
    /// lock is lost (at once if it is already); never after a release or
    /// detach. A later call replaces the callback.
    #[napi]
    pub fn on_lost(&self, callback: LossCallback) {
        let weak = Arc::downgrade(&self.state);
        let task = self.state.runtime.spawn(wait_for_loss(weak, callback));
        let old = self
            .state
            .watcher
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .replace(task.abort_handle());
        if let Some(old) = old {
            old.abort();
        }
    }
}

/// Waits for the guard's loss report and calls back. Holds no strong
/// reference while it waits, so that a lock nobody holds any more is still
/// dropped (and released).
async fn wait_for_loss(state: Weak<State>, callback: LossCallback) {
    let lost = {
        let Some(strong) = state.upgrade() else { return };
        let held = strong.guard.read().await;
        match held.as_ref() {
            Some(guard) => guard.lost(),
            None => return,
        }
    };
    let reason = lost.await;
    let Some(state) = state.upgrade() else { return };
    let error = Error::Lost { resource: state.resource.clone(), reason };
    callback.call(Failure::of(&error).info(), ThreadsafeFunctionCallMode::NonBlocking);
}
