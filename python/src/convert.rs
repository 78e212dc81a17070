//! Conversions between Python values and the client's types: modes,
//! durations, retry policies, tallies, and errors (built by
//! `redlock_client.errors._from_native`, so that the exception classes,
//! their attributes and docstrings live in Python).

use std::sync::atomic::{AtomicBool, Ordering};

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::IntoPyObjectExt;
use redlock_client::bindings::{retry_policy, Unit};
use redlock_client::{Error, Lost, RetryPolicy, Tally};

/// `freed_channel(resource, cluster, db)`: the channel a freed lock is
/// announced on and the command that subscribes to it.
#[pyfunction]
pub(crate) fn freed_channel(resource: &str, cluster: bool, db: i32) -> (String, &'static str) {
    redlock_client::bindings::freed_channel(resource, cluster, db)
}

/// Set when the interpreter exits: no thread of the runtime calls into
/// Python after that.
static SHUT_DOWN: AtomicBool = AtomicBool::new(false);

/// Called by the package's `atexit` hook.
#[pyfunction]
pub(crate) fn shutdown() {
    SHUT_DOWN.store(true, Ordering::SeqCst);
}

pub(crate) fn shut_down() -> bool {
    SHUT_DOWN.load(Ordering::SeqCst)
}

/// The retry policy of an acquire: `wait` seconds in all, or the crate's
/// default; other delay bounds (seconds) and an attempt count if given.
pub(crate) fn policy(
    wait: Option<f64>,
    attempts: Option<u32>,
    delays: Option<(f64, f64)>,
) -> Result<RetryPolicy, Error> {
    let wait = wait.map(|wait| Unit::Seconds.duration("wait", wait)).transpose()?;
    let delays = match delays {
        Some((min, max)) => {
            Some((Unit::Seconds.duration("retry delay", min)?, Unit::Seconds.duration("retry delay", max)?))
        }
        None => None,
    };
    retry_policy(wait, attempts, delays)
}

/// A tally as the tuple `redlock_client.Tally` is built from (the
/// unreachable and the cluster counts, each with its first reason, in
/// tuples of their own: pyo3 converts tuples of up to 12).
pub(crate) type TallyTuple = (
    usize,
    usize,
    usize,
    usize,
    usize,
    Option<u64>,
    (usize, Option<String>),
    usize,
    usize,
    Option<String>,
    usize,
    (usize, Option<String>),
);

pub(crate) fn tally_out(tally: &Tally) -> TallyTuple {
    (
        tally.nodes,
        tally.need(),
        tally.yes,
        tally.no,
        tally.quarantined,
        tally.quarantine_left_ms,
        (tally.unreachable, tally.first_unreachable.as_deref().map(str::to_string)),
        tally.timed_out,
        tally.failed,
        tally.first_failure.as_deref().map(str::to_string),
        tally.pending(),
        (tally.cluster_unavailable, tally.first_cluster_unavailable.as_deref().map(str::to_string)),
    )
}

/// The Python exception for `error` (see `redlock_client/errors.py`).
pub(crate) fn to_pyerr(py: Python<'_>, error: &Error) -> PyErr {
    match exception(py, error) {
        Ok(value) => PyErr::from_value(value),
        Err(failed) => failed,
    }
}

/// The Python exception for a lock lost for `reason`.
pub(crate) fn lost_exception<'py>(
    py: Python<'py>,
    resource: &str,
    reason: Lost,
) -> PyResult<Bound<'py, PyAny>> {
    exception(py, &Error::Lost { resource: resource.to_string(), reason })
}

fn factory(py: Python<'_>) -> PyResult<&Bound<'_, PyAny>> {
    static FACTORY: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    FACTORY.import(py, "redlock_client.errors", "_from_native")
}

fn exception<'py>(py: Python<'py>, error: &Error) -> PyResult<Bound<'py, PyAny>> {
    let message = error.to_string();
    let none = || -> Option<&str> { None };
    let (kind, resource, phase, tally, reason, cause) = match error {
        Error::Contended { resource, tally } => {
            ("held", Some(resource.as_ref()), none(), Some(&**tally), none(), None)
        }
        Error::NoQuorum { resource, phase, tally } => {
            ("no_quorum", Some(resource.as_ref()), Some(phase.name()), Some(&**tally), none(), None)
        }
        Error::ExpiredBeforeUse { resource, .. } => {
            ("expired_before_use", Some(resource.as_str()), none(), None, none(), None)
        }
        Error::Lost { resource, reason } => {
            let cause = match reason {
                Lost::RenewalFailed(inner) => Some(exception(py, inner)?),
                Lost::Expired | Lost::WatchdogLimit { .. } => None,
            };
            ("lost", Some(resource.as_str()), none(), None, Some(reason.name()), cause)
        }
        Error::InvalidArgument(_) => ("invalid_argument", None, none(), None, none(), None),
        // The nodes refused the request itself: a caller mistake too, with
        // the round's counts.
        Error::Refused { resource, phase, tally, .. } => {
            ("invalid_argument", Some(resource.as_str()), Some(phase.name()), Some(&**tally), none(), None)
        }
    };
    factory(py)?.call1((kind, message, resource, phase, tally.map(tally_out), reason, cause))
}

/// A `RedlockError` for a misuse the crate cannot see (a client used in a
/// forked child, a blocking call on the runtime's thread).
pub(crate) fn usage_error(py: Python<'_>, message: &str) -> PyErr {
    let made = factory(py).and_then(|factory| {
        let none: Option<&str> = None;
        let tally: Option<TallyTuple> = None;
        let cause: Option<Bound<'_, PyAny>> = None;
        factory.call1(("usage", message, none, none, tally, none, cause))
    });
    match made {
        Ok(value) => PyErr::from_value(value),
        Err(failed) => failed,
    }
}

/// Any value that converts, as a `Py<PyAny>` (the shape [`crate::run`]'s
/// conversions return).
pub(crate) fn py_any<T>(py: Python<'_>, value: T) -> PyResult<Py<PyAny>>
where
    T: for<'py> IntoPyObject<'py>,
{
    value.into_py_any(py)
}
