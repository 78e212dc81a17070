//! The runtime thread: where calls run when the JavaScript thread cannot
//! drive a runtime itself (`jsloop.rs`: not on Linux, or with
//! `REDLOCK_NODE_RUNTIME=thread`). One current-thread Tokio runtime,
//! driven by a thread of its own, for the whole process, and the queue
//! through which the JavaScript thread hands it calls.
//!
//! napi-rs's runtime is a multi-thread one (a worker per CPU, work
//! stealing): every call from JavaScript went through the scheduler's
//! shared queues, and its workers parked and woke each other on futexes.
//! The client's work is one connection and one ordered writer per node,
//! which one thread serves, as in the Rust client's own benchmark (a
//! current-thread runtime): here the JavaScript thread hands calls to that
//! thread and is handed their results back (`settle.rs`), and nothing else
//! crosses threads.
//!
//! A call handed from outside the runtime wakes its thread (a write to an
//! eventfd) each time; calls made in one go (64 tasks that each start one
//! when a batch of Promises settles) join a queue instead, and only the
//! call that finds it empty wakes the thread, which starts every call the
//! queue holds then.
//!
//! The thread is never stopped: tasks (a watchdog, a release in the
//! background) may outlive every JavaScript environment, and the process
//! ends it when it exits. Node never unloads an addon, so its code stays.

use std::future::{pending, Future};
use std::mem::take;
use std::pin::Pin;
use std::sync::{Mutex, OnceLock, PoisonError};
use std::thread;

use napi::{Error, Result, Status};
use tokio::runtime::{Builder, Handle};

/// A call: its future, which settles its Promise.
pub type Call = Pin<Box<dyn Future<Output = ()> + Send>>;

pub struct Runtime {
    handle: Handle,
    /// Calls handed over and not started yet.
    submitted: Mutex<Vec<Call>>,
}

static RUNTIME: OnceLock<std::result::Result<Runtime, String>> = OnceLock::new();

/// The runtime, started at the first call.
pub fn get() -> Result<&'static Runtime> {
    RUNTIME.get_or_init(start).as_ref().map_err(|why| Error::new(Status::GenericFailure, why.clone()))
}

fn start() -> std::result::Result<Runtime, String> {
    // I/O and time only, as jsloop.rs's.
    let runtime = Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()
        .map_err(|e| format!("redlock-client: the runtime could not start: {e}"))?;
    let handle = runtime.handle().clone();
    thread::Builder::new()
        .name("redlock-client".into())
        .spawn(move || runtime.block_on(pending::<()>()))
        .map_err(|e| format!("redlock-client: the runtime's thread could not start: {e}"))?;
    Ok(Runtime { handle, submitted: Mutex::new(Vec::new()) })
}

impl Runtime {
    /// Starts `call` on the runtime.
    pub fn submit(&'static self, call: Call) {
        let was_empty = {
            let mut submitted = self.submitted.lock().unwrap_or_else(PoisonError::into_inner);
            submitted.push(call);
            submitted.len() == 1
        };
        // A queue that was not empty has its start on the way: it takes the
        // whole queue when it runs.
        if was_empty {
            self.handle.spawn(async move {
                let calls = take(&mut *self.submitted.lock().unwrap_or_else(PoisonError::into_inner));
                for call in calls {
                    // On the runtime's own thread: no wake-up.
                    tokio::spawn(call);
                }
            });
        }
    }
}
