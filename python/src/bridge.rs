//! Hands results from the runtime's threads to one asyncio event loop
//! without taking the GIL on those threads.
//!
//! A task that finishes puts its outcome in the bridge's queue and, when
//! the queue was empty, writes one byte to a socket pair. The event loop
//! watches the other end (`loop.add_reader(bridge.fileno(),
//! bridge.drain)`); `drain`, in the loop's thread, turns each outcome into
//! a Python value and resolves its future (or calls its callback). So a
//! burst of completions costs one wake-up of the loop, and the runtime's
//! threads never wait for the GIL.

use std::io::{ErrorKind, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Mutex};

use pyo3::intern;
use pyo3::prelude::*;

/// Builds the Python value of an outcome, under the GIL, in the loop.
pub(crate) type Make = Box<dyn FnOnce(Python<'_>) -> PyResult<Py<PyAny>> + Send>;

pub(crate) enum Done {
    /// Resolve an asyncio future with the value, or fail it with the error.
    /// A future cancelled meanwhile gets nothing, and `make` is dropped
    /// unused (a guard in it is released).
    Resolve { future: Py<PyAny>, make: Make },
    /// Call `callback(value)`.
    Call { callback: Py<PyAny>, make: Make },
}

pub(crate) struct Inner {
    queue: Mutex<Vec<Done>>,
    wake: UnixStream,
    woken: UnixStream,
}

impl Inner {
    /// Queues `done` for the loop and wakes it (once per batch).
    pub(crate) fn push(&self, done: Done) {
        let was_empty = {
            let mut queue = self.queue.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            let was_empty = queue.is_empty();
            queue.push(done);
            was_empty
        };
        if was_empty {
            // Non-blocking: a full socket buffer already holds a wake-up.
            let _ = (&self.wake).write(&[1]);
        }
    }
}

impl Drop for Inner {
    /// Outcomes never handed to the loop (it closed first): a guard among
    /// them is released, which needs the runtime.
    fn drop(&mut self) {
        let left = std::mem::take(self.queue.get_mut().unwrap_or_else(|poisoned| poisoned.into_inner()));
        if !left.is_empty() {
            let _runtime = crate::runtime().enter();
            drop(left);
        }
    }
}

/// The link between the runtime and one asyncio event loop.
#[pyclass(frozen, module = "redlock_client._native")]
pub struct Bridge {
    inner: Arc<Inner>,
}

impl Bridge {
    pub(crate) fn inner(&self) -> Arc<Inner> {
        self.inner.clone()
    }
}

#[pymethods]
impl Bridge {
    #[new]
    fn new() -> PyResult<Bridge> {
        let (wake, woken) = UnixStream::pair()?;
        wake.set_nonblocking(true)?;
        woken.set_nonblocking(true)?;
        Ok(Bridge { inner: Arc::new(Inner { queue: Mutex::new(Vec::new()), wake, woken }) })
    }

    /// The descriptor the event loop watches for reading.
    fn fileno(&self) -> i32 {
        self.inner.woken.as_raw_fd()
    }

    /// Resolves every future whose outcome has arrived (the loop's reader
    /// callback). The wake-up bytes are read before the queue is taken, so
    /// an outcome queued meanwhile either is in this batch or wakes the
    /// loop again.
    fn drain(&self, py: Python<'_>) {
        let mut buf = [0u8; 64];
        loop {
            match (&self.inner.woken).read(&mut buf) {
                Ok(0) => break,
                Ok(_) => continue,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(_) => break,
            }
        }
        let batch =
            std::mem::take(&mut *self.inner.queue.lock().unwrap_or_else(|poisoned| poisoned.into_inner()));
        // A guard dropped here (its future was cancelled) releases its lock
        // in the background, which needs the runtime.
        let _runtime = crate::runtime().enter();
        for done in batch {
            match done {
                Done::Resolve { future, make } => resolve(py, future.bind(py), make),
                Done::Call { callback, make } => {
                    let callback = callback.bind(py);
                    if let Err(error) = make(py).and_then(|value| callback.call1((value,))) {
                        error.write_unraisable(py, Some(callback));
                    }
                }
            }
        }
    }
}

fn resolve(py: Python<'_>, future: &Bound<'_, PyAny>, make: Make) {
    let done = future.call_method0(intern!(py, "done")).and_then(|done| done.is_truthy());
    if !matches!(done, Ok(false)) {
        // Cancelled (or not a future): nobody wants the value.
        drop(make);
        return;
    }
    let set = match make(py) {
        Ok(value) => future.call_method1(intern!(py, "set_result"), (value,)),
        Err(error) => future.call_method1(intern!(py, "set_exception"), (error.into_value(py),)),
    };
    if let Err(error) = set {
        error.write_unraisable(py, Some(future));
    }
}
