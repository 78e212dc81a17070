//! A held lock: the crate's `Guard`, shared by the Python object and the
//! tasks that act on it, and its loss signal.
//!
//! The guard sits in an async read-write lock: the fencing round and
//! extensions read it (they may run together), release, detach and the
//! watchdog's start take it. Only tasks and blocking calls with the GIL
//! released wait for it; what Python reads without I/O (status, validity)
//! comes from the guard's status channel, so no Python thread holding the
//! GIL ever waits for a round.

use std::sync::{Arc, Mutex, OnceLock, Weak};

use pyo3::prelude::*;
use tokio::sync::{watch, RwLock};
use tokio::task::AbortHandle;
use tokio::time::Instant;

use redlock_client::{Error, Guard, Lost, Mode, Renewal, Status, Watchdog};

use crate::bridge::{Bridge, Done, Inner as BridgeInner};
use crate::convert::{self, lost_exception, mode_out, py_any, seconds, secs_out, tally_out};
use crate::{check_pid, run, runtime, How, Waiter};

pub(crate) struct State {
    pid: u32,
    resource: String,
    token: String,
    resources: Vec<(String, Mode)>,
    guard: RwLock<Option<Guard>>,
    status: watch::Receiver<Status>,
    /// The quorum fencing token, once a fencing round confirmed it.
    fenced: OnceLock<u64>,
    /// "released" or "detached" once the guard was given up.
    ended: OnceLock<&'static str>,
    lost: Mutex<LostWatch>,
}

/// Who is told when the lock is lost, and whether it was.
#[derive(Default)]
struct LostWatch {
    /// The reason, once the guard reported the loss.
    fired: Option<Lost>,
    listeners: Vec<Listener>,
    /// The task that waits for the guard's `lost()`, started by the first
    /// listener; aborted when the lock is released, detached or dropped.
    task: Option<AbortHandle>,
}

enum Listener {
    /// Called on a thread of its own (the sync API).
    Thread(Py<PyAny>),
    /// Called in an event loop's thread (the asyncio API).
    Loop(Arc<BridgeInner>, Py<PyAny>),
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

    /// Stops waiting for a loss.
    fn stop_watching(&self) {
        let task = self.lost.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).task.take();
        if let Some(task) = task {
            task.abort();
        }
    }

    /// The loss was reported: tell every listener, once.
    fn fire(&self, reason: Lost) {
        let listeners = {
            let mut watch = self.lost.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            if watch.fired.is_some() {
                return;
            }
            watch.fired = Some(reason.clone());
            std::mem::take(&mut watch.listeners)
        };
        for listener in listeners {
            tell(listener, &self.resource, reason.clone());
        }
    }
}

/// Calls a listener with the `LockLostError` for `reason`.
fn tell(listener: Listener, resource: &str, reason: Lost) {
    let resource = resource.to_string();
    match listener {
        Listener::Loop(bridge, callback) => {
            let make =
                Box::new(move |py: Python<'_>| lost_exception(py, &resource, reason).map(Bound::unbind));
            bridge.push(Done::Call { callback, make });
        }
        Listener::Thread(callback) => {
            // Not a runtime thread: the callback may make blocking calls.
            let spawned = std::thread::Builder::new().name("redlock-lost".into()).spawn(move || {
                if convert::shut_down() {
                    return;
                }
                Python::try_attach(|py| {
                    let callback = callback.bind(py);
                    let called =
                        lost_exception(py, &resource, reason).and_then(|error| callback.call1((error,)));
                    if let Err(error) = called {
                        error.write_unraisable(py, Some(callback));
                    }
                });
            });
            if let Err(error) = spawned {
                eprintln!("redlock_client: cannot start a thread for a lost-lock callback: {error}");
            }
        }
    }
}

impl Drop for State {
    fn drop(&mut self) {
        self.stop_watching();
        // Dropping a guard that was neither released nor detached releases
        // it in the background, on the runtime.
        if let Some(guard) = self.guard.get_mut().take() {
            if self.pid == std::process::id() {
                let _runtime = runtime().enter();
                drop(guard);
            }
        }
    }
}

/// A lock held on a quorum of nodes (the crate's `Guard`).
#[pyclass(frozen, module = "redlock_client._native")]
pub struct Held {
    state: Arc<State>,
}

impl Held {
    pub(crate) fn new(guard: Guard, fenced: Option<u64>) -> Held {
        let fencing = OnceLock::new();
        if let Some(token) = fenced {
            let _ = fencing.set(token);
        }
        let state = State {
            pid: std::process::id(),
            resource: guard.resource().to_string(),
            token: guard.token().to_string(),
            resources: guard.resources().to_vec(),
            status: guard.subscribe(),
            guard: RwLock::new(Some(guard)),
            fenced: fencing,
            ended: OnceLock::new(),
            lost: Mutex::new(LostWatch::default()),
        };
        Held { state: Arc::new(state) }
    }

    fn state(&self) -> PyResult<Arc<State>> {
        check_pid(self.state.pid)?;
        Ok(self.state.clone())
    }
}

#[pymethods]
impl Held {
    #[getter]
    fn resource(&self) -> &str {
        &self.state.resource
    }

    #[getter]
    fn token(&self) -> &str {
        &self.state.token
    }

    /// Every resource with its mode and permit count, in the order given.
    #[getter]
    fn resources(&self) -> Vec<(String, &'static str, Option<u32>)> {
        self.state
            .resources
            .iter()
            .map(|(name, mode)| {
                let (mode, permits) = mode_out(*mode);
                (name.clone(), mode, permits)
            })
            .collect()
    }

    /// The quorum fencing token if a fencing round confirmed it already.
    #[getter]
    fn fencing_token(&self) -> Option<u64> {
        self.state.fenced.get().copied()
    }

    /// ("held" | "lost" | "released" | "detached", validity left in seconds, "off" |
    /// "running" | "stopped", the lease's TTL in seconds). A lock past its
    /// deadline counts as lost, as the guard itself says at its next use.
    fn status(&self) -> (&'static str, f64, &'static str) {
        if let Some(ended) = self.state.ended.get() {
            return (ended, 0.0, "off");
        }
        match &*self.state.status.borrow() {
            Status::Held { deadline, renewal } => {
                let left = deadline.saturating_duration_since(Instant::now());
                let renewal = match renewal {
                    Renewal::Off => "off",
                    Renewal::Running => "running",
                    Renewal::Stopped { .. } => "stopped",
                };
                (if left.is_zero() { "lost" } else { "held" }, secs_out(left), renewal)
            }
            Status::Lost(_) => ("lost", 0.0, "off"),
            Status::Released => ("released", 0.0, "off"),
        }
    }

    /// The fencing round (the first call; later ones return the same
    /// token without a round).
    #[pyo3(signature = (waiter=None))]
    fn fence(&self, py: Python<'_>, waiter: Option<Waiter>) -> PyResult<Py<PyAny>> {
        let state = self.state()?;
        let work = async move {
            let held = state.guard.read().await;
            let guard = held.as_ref().ok_or_else(|| state.released())?;
            let token = guard.fencing_token().await?;
            let _ = state.fenced.set(token);
            Ok(token)
        };
        run(py, How::new(waiter, false), work, py_any)
    }

    /// Extends the lock for `ttl` seconds (default: the TTL it was taken
    /// with); returns the validity left.
    #[pyo3(signature = (ttl=None, waiter=None))]
    fn extend(&self, py: Python<'_>, ttl: Option<f64>, waiter: Option<Waiter>) -> PyResult<Py<PyAny>> {
        let state = self.state()?;
        let ttl = ttl.map(|ttl| seconds("ttl", ttl)).transpose();
        let work = async move {
            let ttl = ttl?;
            let held = state.guard.read().await;
            let guard = held.as_ref().ok_or_else(|| state.released())?;
            guard.extend(ttl.unwrap_or(guard.lease().ttl)).await
        };
        run(py, How::new(waiter, false), work, |py, left| py_any(py, secs_out(left)))
    }

    /// Releases on every node; returns the release round's tally.
    #[pyo3(signature = (waiter=None))]
    fn release(&self, py: Python<'_>, waiter: Option<Waiter>) -> PyResult<Py<PyAny>> {
        let state = self.state()?;
        let work = async move { state.give_up("released").await?.release().await };
        run(py, How::new(waiter, false), work, |py, tally| py_any(py, tally_out(&tally)))
    }

    /// Gives the guard up without releasing (the lock stays until its TTL
    /// or a release by token): (token, fencing token or None, validity).
    #[pyo3(signature = (waiter=None))]
    fn detach(&self, py: Python<'_>, waiter: Option<Waiter>) -> PyResult<Py<PyAny>> {
        let state = self.state()?;
        let work = async move {
            let detached = state.give_up("detached").await?.detach();
            let left = detached.deadline.saturating_duration_since(Instant::now());
            Ok((detached.token, detached.fencing_token, secs_out(left)))
        };
        run(py, How::new(waiter, false), work, py_any)
    }

    /// Starts (or restarts) the watchdog: renews every ttl/3 within the
    /// bounds.
    #[pyo3(signature = (renewals_max, duration_max, waiter=None))]
    fn start_watchdog(
        &self,
        py: Python<'_>,
        renewals_max: u32,
        duration_max: f64,
        waiter: Option<Waiter>,
    ) -> PyResult<Py<PyAny>> {
        let state = self.state()?;
        let duration_max = seconds("duration_max", duration_max);
        let work = async move {
            let limits = Watchdog { renewals_max, duration_max: duration_max? };
            let mut held = state.guard.write().await;
            held.as_mut().ok_or_else(|| state.released())?.start_watchdog(limits);
            Ok(())
        };
        run(py, How::new(waiter, false), work, |py, ()| Ok(py.None()))
    }

    /// Calls `callback(LockLostError)` once when the lock is lost (at once
    /// if it is already): in the event loop of `bridge`, or without one on
    /// a thread of its own. Never after a release or detach.
    #[pyo3(signature = (callback, bridge=None))]
    fn on_lost(&self, callback: Py<PyAny>, bridge: Option<Py<Bridge>>) -> PyResult<()> {
        let state = self.state()?;
        let listener = match bridge {
            Some(bridge) => Listener::Loop(bridge.get().inner(), callback),
            None => Listener::Thread(callback),
        };
        let mut watch = state.lost.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(reason) = watch.fired.clone() {
            drop(watch);
            tell(listener, &state.resource, reason);
            return Ok(());
        }
        watch.listeners.push(listener);
        if watch.task.is_none() {
            let weak = Arc::downgrade(&state);
            watch.task = Some(runtime().spawn(wait_for_loss(weak)).abort_handle());
        }
        Ok(())
    }
}

/// Waits for the guard's loss report and fires the listeners. Holds no
/// strong reference while it waits, so that a guard nobody holds any more
/// is still dropped (and released).
async fn wait_for_loss(state: Weak<State>) {
    let lost = {
        let Some(strong) = state.upgrade() else { return };
        let held = strong.guard.read().await;
        match held.as_ref() {
            Some(guard) => guard.lost(),
            None => return,
        }
    };
    let reason = lost.await;
    if let Some(state) = state.upgrade() {
        state.fire(reason);
    }
}
