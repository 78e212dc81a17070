//! `redlock_client._native`: the Python bindings of the quorum client.
//!
//! Every decision (majority, validity, the fencing round, the semaphore
//! quorum, ordered release, the watchdog and its loss report) stays in the
//! `redlock_client` crate. This layer only converts: Python arguments into
//! the crate's types (modes, durations, retry policies), its results and
//! errors into Python values, and its futures into either a blocking call
//! (the GIL released while it waits) or an asyncio future.
//!
//! - [`runtime`]: one Tokio runtime per process, shared by every client.
//! - [`run`]: how each operation is driven: blocking on the calling thread
//!   with the GIL released (the sync API), or as a task whose result is
//!   handed to the event loop through a [`Bridge`] (the asyncio API).
//! - `client.rs`: [`client::Client`], a `Redlock`; `held.rs`:
//!   [`held::Held`], a `Guard`, and its loss signal; `convert.rs`: modes,
//!   durations, tallies and errors.
//!
//! Cancellation never leaves a lock behind: an operation that the caller
//! stops waiting for (an asyncio task cancelled, Ctrl-C in a blocking
//! acquire) is either not started yet or runs to its end on the runtime,
//! and a guard that nobody receives is dropped there, which releases it.
//! Only the waits between acquire attempts are cut short.

// The client's `Error` (128 bytes) is passed through as it is, in its own
// `Result`s, as the client crate itself does.
#![allow(clippy::result_large_err)]

mod bridge;
mod client;
mod convert;
mod held;

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pyo3::prelude::*;
use tokio::runtime::Runtime;

use bridge::{Bridge, Done};
use convert::{to_pyerr, usage_error};
use redlock_client::Error;

/// How often a blocking wait that may be interrupted looks for a signal
/// (Ctrl-C) to deliver.
const SIGNAL_CHECK: Duration = Duration::from_millis(50);

/// The process's runtime. A forked child gets a new one (the parent's
/// worker threads do not exist there); clients made before the fork are
/// refused in the child (see [`check_pid`]).
pub(crate) fn runtime() -> &'static Runtime {
    static RUNTIME: Mutex<Option<(u32, &'static Runtime)>> = Mutex::new(None);
    let pid = std::process::id();
    let mut slot = RUNTIME.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    match *slot {
        Some((owner, runtime)) if owner == pid => runtime,
        _ => {
            let threads = std::env::var("REDLOCK_CLIENT_THREADS")
                .ok()
                .and_then(|n| n.parse::<usize>().ok())
                .unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |n| n.get()).min(4))
                .clamp(1, 64);
            let built = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(threads)
                .thread_name("redlock-client")
                .enable_all()
                .build()
                .unwrap_or_else(|e| panic!("cannot start the redlock-client runtime: {e}"));
            // Never dropped: clients and guards may outlive any scope.
            let runtime: &'static Runtime = Box::leak(Box::new(built));
            *slot = Some((pid, runtime));
            runtime
        }
    }
}

/// Refuses objects made in another process (before a fork): their
/// connections and tasks belong to the parent.
pub(crate) fn check_pid(pid: u32) -> PyResult<()> {
    if pid == std::process::id() {
        return Ok(());
    }
    Python::attach(|py| {
        Err(usage_error(
            py,
            "this object was created in another process (before a fork); create the Redlock \
             client in the process that uses it",
        ))
    })
}

/// How a call is driven: see [`run`].
pub(crate) enum How {
    /// The calling thread waits, the GIL released; `interruptible`: a
    /// signal (Ctrl-C) ends the wait and aborts the operation (only for
    /// operations that are safe to stop at any point: the acquire retry
    /// loop, whose attempts run as tasks of their own).
    Block { interruptible: bool },
    /// As a task; its outcome resolves `future` (an asyncio future) in the
    /// event loop of `bridge`. `abortable`: `Task.cancel()` may drop it.
    Async { bridge: Arc<bridge::Inner>, future: Py<PyAny>, abortable: bool },
}

/// How the asyncio API asks for a call: the bridge of its event loop and
/// the asyncio future to resolve there. The sync API passes none.
pub(crate) type Waiter = (Py<Bridge>, Py<PyAny>);

impl How {
    pub(crate) fn new(waiter: Option<Waiter>, interruptible: bool) -> How {
        match waiter {
            None => How::Block { interruptible },
            Some((bridge, future)) => {
                How::Async { bridge: bridge.get().inner(), future, abortable: interruptible }
            }
        }
    }
}

/// A running asyncio operation, for cancellation.
#[pyclass(frozen, module = "redlock_client._native")]
pub struct Task {
    abort: Option<tokio::task::AbortHandle>,
    /// Nobody awaits the outcome any more: drop it on the runtime (a guard
    /// in it is released there) instead of handing it to the loop.
    unwanted: Arc<AtomicBool>,
}

#[pymethods]
impl Task {
    /// The awaiting task was cancelled. Stops the operation if it is one
    /// that may stop anywhere (an acquire between or during its attempts:
    /// an attempt under way still ends, and what it took is released);
    /// other operations run to their end, and what they return is dropped
    /// (a lock taken is released).
    fn cancel(&self) {
        self.unwanted.store(true, Ordering::SeqCst);
        if let Some(abort) = &self.abort {
            abort.abort();
        }
    }
}

/// Runs `future` as `how` says and converts its outcome with `convert`
/// (under the GIL). Sync: returns the converted value. Asyncio: returns a
/// [`Task`] at once; the value (or the exception) goes to the future.
pub(crate) fn run<T, F, C>(py: Python<'_>, how: How, future: F, convert: C) -> PyResult<Py<PyAny>>
where
    T: Send + 'static,
    F: Future<Output = Result<T, Error>> + Send + 'static,
    C: FnOnce(Python<'_>, T) -> PyResult<Py<PyAny>> + Send + 'static,
{
    match how {
        How::Block { interruptible } => match block(py, future, interruptible)? {
            Ok(value) => convert(py, value),
            Err(error) => Err(to_pyerr(py, &error)),
        },
        How::Async { bridge, future: waiter, abortable } => {
            let unwanted = Arc::new(AtomicBool::new(false));
            let flag = unwanted.clone();
            let handle = runtime().spawn(async move {
                let outcome = future.await;
                if flag.load(Ordering::SeqCst) {
                    return;
                }
                let make = Box::new(move |py: Python<'_>| match outcome {
                    Ok(value) => convert(py, value),
                    Err(error) => Err(to_pyerr(py, &error)),
                });
                bridge.push(Done::Resolve { future: waiter, make });
            });
            let abort = abortable.then(|| handle.abort_handle());
            Ok(Py::new(py, Task { abort, unwanted })?.into_any())
        }
    }
}

/// Runs `future` to its end as a task of the runtime while the calling
/// thread waits for it with the GIL released. (A task rather than polling
/// it on the calling thread: the nodes' replies are then read on the
/// runtime's thread, and the caller is woken once, when it is done, not at
/// every reply.) With `interruptible`, a pending signal's exception
/// (KeyboardInterrupt) ends the wait and aborts the task.
pub(crate) fn block<F>(py: Python<'_>, future: F, interruptible: bool) -> PyResult<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    if tokio::runtime::Handle::try_current().is_ok() {
        return Err(usage_error(
            py,
            "a blocking redlock_client call was made on the client's own runtime thread; \
             use the asyncio API (AsyncRedlock) or call it from another thread",
        ));
    }
    let runtime = runtime();
    let mut task = runtime.spawn(future);
    let done = py.detach(move || {
        runtime.block_on(async move {
            if !interruptible {
                return Ok(task.await);
            }
            loop {
                tokio::select! {
                    out = &mut task => return Ok(out),
                    _ = tokio::time::sleep(SIGNAL_CHECK) => {
                        if let Err(signal) = Python::attach(|py| py.check_signals()) {
                            task.abort();
                            return Err(signal);
                        }
                    }
                }
            }
        })
    })?;
    done.map_err(|failed| {
        pyo3::exceptions::PyRuntimeError::new_err(format!("redlock_client task failed: {failed}"))
    })
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<client::Client>()?;
    m.add_class::<held::Held>()?;
    m.add_class::<Bridge>()?;
    m.add_class::<Task>()?;
    m.add_function(wrap_pyfunction!(convert::shutdown, m)?)?;
    m.add_function(wrap_pyfunction!(convert::freed_channel, m)?)?;
    // The workspace's version (Cargo.toml), as redlock_client.__version__.
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
