//! A held lock: the client's shared [`HeldLock`] as a Python object, and
//! its loss signal, told to Python listeners on a thread of their own (the
//! sync API) or in an event loop (the asyncio API). Only tasks and
//! blocking calls with the GIL released wait for the guard; what Python
//! reads without I/O (status, validity) never does.

use std::sync::{Arc, Mutex};

use pyo3::prelude::*;

use redlock_client::bindings::{mode_out, wait_for_loss, HeldLock, Unit};
use redlock_client::{Lost, Watchdog};

use crate::bridge::{Bridge, Done, Inner as BridgeInner};
use crate::convert::{self, lost_exception, py_any, tally_out};
use crate::{check_pid, run, runtime, How, Waiter};

const SECONDS: Unit = Unit::Seconds;

pub(crate) struct State {
    held: HeldLock,
    lost: Mutex<LostWatch>,
}

/// Who is told when the lock is lost, and whether it was.
#[derive(Default)]
struct LostWatch {
    /// The reason, once the guard reported the loss.
    fired: Option<Lost>,
    listeners: Vec<Listener>,
    /// Whether the task that waits for the guard's `lost()` was started
    /// (by the first listener; the held lock aborts it when it is
    /// released, detached or dropped).
    watching: bool,
}

enum Listener {
    /// Called on a thread of its own (the sync API).
    Thread(Py<PyAny>),
    /// Called in an event loop's thread (the asyncio API).
    Loop(Arc<BridgeInner>, Py<PyAny>),
}

impl State {
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
            tell(listener, self.held.resource(), reason.clone());
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

/// A lock held on a quorum of nodes (the crate's `Guard`).
#[pyclass(frozen, module = "redlock_client._native")]
pub struct Held {
    state: Arc<State>,
}

impl Held {
    pub(crate) fn new(guard: redlock_client::Guard, fenced: Option<u64>) -> Held {
        let held = HeldLock::new(guard, fenced, runtime().handle().clone());
        Held { state: Arc::new(State { held, lost: Mutex::new(LostWatch::default()) }) }
    }

    fn state(&self) -> PyResult<Arc<State>> {
        check_pid(self.state.held.pid())?;
        Ok(self.state.clone())
    }
}

#[pymethods]
impl Held {
    #[getter]
    fn resource(&self) -> &str {
        self.state.held.resource()
    }

    #[getter]
    fn token(&self) -> &str {
        self.state.held.token()
    }

    /// Every resource with its mode and permit count, in the order given.
    #[getter]
    fn resources(&self) -> Vec<(String, &'static str, Option<u32>)> {
        let row = |(name, mode): &(String, _)| {
            let (mode, permits) = mode_out(*mode);
            (name.clone(), mode, permits)
        };
        self.state.held.resources().iter().map(row).collect()
    }

    /// The quorum fencing token if a fencing round confirmed it already.
    #[getter]
    fn fencing_token(&self) -> Option<u64> {
        self.state.held.fenced()
    }

    /// ("held" | "lost" | "released" | "detached", validity left in
    /// seconds, "off" | "running" | "stopped"). A lock past its deadline
    /// counts as lost, as the guard itself says at its next use.
    fn status(&self) -> (&'static str, f64, &'static str) {
        let status = self.state.held.status();
        (status.state, SECONDS.of(status.validity), status.watchdog)
    }

    /// The fencing round (the first call; later ones return the same
    /// token without a round).
    #[pyo3(signature = (waiter=None))]
    fn fence(&self, py: Python<'_>, waiter: Option<Waiter>) -> PyResult<Py<PyAny>> {
        let state = self.state()?;
        let work = async move { state.held.fence().await };
        run(py, How::new(waiter, false), work, py_any)
    }

    /// Extends the lock for `ttl` seconds (default: the TTL it was taken
    /// with); returns the validity left.
    #[pyo3(signature = (ttl=None, waiter=None))]
    fn extend(&self, py: Python<'_>, ttl: Option<f64>, waiter: Option<Waiter>) -> PyResult<Py<PyAny>> {
        let state = self.state()?;
        let ttl = ttl.map(|ttl| SECONDS.duration("ttl", ttl)).transpose();
        let work = async move { state.held.extend(ttl?).await };
        run(py, How::new(waiter, false), work, |py, left| py_any(py, SECONDS.of(left)))
    }

    /// Releases on every node; returns the release round's tally.
    #[pyo3(signature = (waiter=None))]
    fn release(&self, py: Python<'_>, waiter: Option<Waiter>) -> PyResult<Py<PyAny>> {
        let state = self.state()?;
        let work = async move { state.held.release().await };
        run(py, How::new(waiter, false), work, |py, tally| py_any(py, tally_out(&tally)))
    }

    /// Gives the guard up without releasing (the lock stays until its TTL
    /// or a release by token): (token, fencing token or None, validity).
    #[pyo3(signature = (waiter=None))]
    fn detach(&self, py: Python<'_>, waiter: Option<Waiter>) -> PyResult<Py<PyAny>> {
        let state = self.state()?;
        let work = async move { state.held.detach().await };
        run(py, How::new(waiter, false), work, |py, detached| {
            py_any(py, (detached.token, detached.fencing_token, SECONDS.of(detached.validity)))
        })
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
        let duration_max = SECONDS.duration("duration_max", duration_max);
        let work = async move {
            state.held.start_watchdog(Watchdog { renewals_max, duration_max: duration_max? }).await
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
            tell(listener, state.held.resource(), reason);
            return Ok(());
        }
        watch.listeners.push(listener);
        if !watch.watching {
            watch.watching = true;
            let weak = Arc::downgrade(&state);
            let task = runtime().spawn(async move {
                if let Some((state, reason)) = wait_for_loss(weak, |state: &State| &state.held).await {
                    state.fire(reason);
                }
            });
            state.held.watch(task.abort_handle());
        }
        Ok(())
    }
}
