//! The Promises of the client's calls: each call's future runs on the
//! runtime, and what it returns settles its Promise on the JavaScript
//! thread, many at a time.
//!
//! napi-rs's own `async fn` makes a thread-safe function per call (a libuv
//! handle opened and closed, a cleanup hook added and removed) and wakes
//! the JavaScript thread once per call. Here one thread-safe function per
//! JavaScript thread serves every call: a finished call joins a queue, and
//! only the call that finds the queue empty wakes the JavaScript thread,
//! which then settles every call the queue holds. With many calls under
//! way, one wake-up settles a batch of them.
//!
//! The thread-safe function keeps the process alive only while a call is
//! under way (it is referenced then, unreferenced when none is), as a
//! pending Promise of napi-rs's does. When the environment goes away, Node
//! finalizes it; calls that end later are dropped with their values.
//!
//! Where the JavaScript thread drives the runtime itself (`jsloop.rs`), a
//! call that ends while it does joins the same queue without a wake-up:
//! the driver settles the queue when its turn ends ([`settle_here`]).

use std::cell::{Cell, RefCell};
use std::ffi::c_void;
use std::ptr;
use std::rc::Rc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use napi::bindgen_prelude::{PromiseRaw, ToNapiValue};
use napi::{sys, Env, Error, JsError, Result, Status};

/// Makes the settled value on the JavaScript thread.
type Make = Box<dyn FnOnce(sys::napi_env) -> Result<sys::napi_value> + Send>;

/// A finished call: its Promise's deferred (a pointer of the JavaScript
/// thread, carried as a number) and its value.
struct Finished {
    deferred: usize,
    value: Make,
}

/// What the runtime's thread and the JavaScript thread share.
struct Shared {
    /// Finished calls the JavaScript thread has not settled yet.
    queue: Mutex<Vec<Finished>>,
    /// The thread-safe function, until Node finalizes it.
    wake: Mutex<Option<Tsfn>>,
    /// Calls under way (started and not settled); the JavaScript thread's
    /// alone.
    pending: AtomicUsize,
}

struct Tsfn(sys::napi_threadsafe_function);

// SAFETY: a thread-safe function is made to be called from any thread;
// `Shared::wake`'s mutex keeps a call from racing Node's finalizer.
unsafe impl Send for Tsfn {}

thread_local! {
    /// The JavaScript thread's queue (each of Node's worker threads has its own).
    static LOCAL: RefCell<Option<Rc<Local>>> = const { RefCell::new(None) };
    /// Set while this thread drives its runtime (`jsloop.rs`): a call that
    /// ends then is settled after the turn, with no wake-up.
    static DRIVING: Cell<bool> = const { Cell::new(false) };
}

/// This thread drives its runtime (`on`) or stops.
pub(crate) fn driving(on: bool) {
    DRIVING.with(|d| d.set(on));
}

struct Local {
    shared: Arc<Shared>,
    tsfn: sys::napi_threadsafe_function,
}

fn check(status: sys::napi_status, what: &str) -> Result<()> {
    if status == sys::Status::napi_ok {
        Ok(())
    } else {
        Err(Error::new(Status::from(status), format!("{what} failed")))
    }
}

impl Local {
    /// This thread's, made with its thread-safe function at the first call.
    fn get(env: sys::napi_env) -> Result<Rc<Local>> {
        if let Some(local) = LOCAL.with(|l| l.borrow().clone()) {
            return Ok(local);
        }
        let shared = Arc::new(Shared {
            queue: Mutex::new(Vec::new()),
            wake: Mutex::new(None),
            pending: AtomicUsize::new(0),
        });
        let mut name = ptr::null_mut();
        let label = "redlock-client settle";
        // SAFETY: a valid env and a UTF-8 string of the given length.
        check(
            unsafe {
                sys::napi_create_string_utf8(env, label.as_ptr().cast(), label.len() as isize, &mut name)
            },
            "napi_create_string_utf8",
        )?;
        let context = Arc::into_raw(shared.clone()) as *mut c_void;
        let mut tsfn = ptr::null_mut();
        // SAFETY: no JavaScript function (call_js settles), unlimited queue,
        // one thread using it for ever; `context` is an Arc that the
        // finalizer takes back.
        let made = unsafe {
            sys::napi_create_threadsafe_function(
                env,
                ptr::null_mut(),
                ptr::null_mut(),
                name,
                0,
                1,
                context,
                Some(finalize),
                context,
                Some(call_js),
                &mut tsfn,
            )
        };
        if let Err(e) = check(made, "napi_create_threadsafe_function") {
            // SAFETY: not handed to Node: ours to take back.
            drop(unsafe { Arc::from_raw(context as *const Shared) });
            return Err(e);
        }
        // Idle until a call is under way.
        // SAFETY: made above, on this thread.
        check(unsafe { sys::napi_unref_threadsafe_function(env, tsfn) }, "napi_unref_threadsafe_function")?;
        *shared.wake.lock().unwrap_or_else(PoisonError::into_inner) = Some(Tsfn(tsfn));
        let local = Rc::new(Local { shared, tsfn });
        LOCAL.with(|l| *l.borrow_mut() = Some(local.clone()));
        Ok(local)
    }
}

/// A Promise for a call about to start, and what settles it.
pub(crate) fn begin<T>(env: &Env) -> Result<(PromiseRaw<'static, T>, Done)> {
    let env = env.raw();
    let local = Local::get(env)?;
    let mut deferred = ptr::null_mut();
    let mut promise = ptr::null_mut();
    // SAFETY: a valid env, on its thread.
    check(unsafe { sys::napi_create_promise(env, &mut deferred, &mut promise) }, "napi_create_promise")?;
    if local.shared.pending.fetch_add(1, Ordering::Relaxed) == 0 {
        // SAFETY: this thread's thread-safe function, alive while `LOCAL` has it.
        check(unsafe { sys::napi_ref_threadsafe_function(env, local.tsfn) }, "napi_ref_threadsafe_function")?;
    }
    let done = Done { shared: local.shared.clone(), deferred: deferred as usize };
    Ok((PromiseRaw::new(env, promise), done))
}

/// A call under way: settles its Promise once, with the call's value or,
/// if the task is dropped before (a panic, the runtime shutting down),
/// with an error.
pub(crate) struct Done {
    shared: Arc<Shared>,
    /// 0 once handed to the queue.
    deferred: usize,
}

impl Done {
    /// Settles the Promise with `value` (made into a JavaScript value on
    /// the JavaScript thread).
    pub(crate) fn with<T: ToNapiValue + Send + 'static>(mut self, value: T) {
        // SAFETY: run on the JavaScript thread, with its env.
        self.finish(Box::new(move |env| unsafe { T::to_napi_value(env, value) }));
    }

    fn finish(&mut self, value: Make) {
        let deferred = std::mem::take(&mut self.deferred);
        let was_empty = {
            let mut queue = self.shared.queue.lock().unwrap_or_else(PoisonError::into_inner);
            let was_empty = queue.is_empty();
            queue.push(Finished { deferred, value });
            was_empty
        };
        // A queue that was not empty has a wake-up on its way already: the
        // JavaScript thread takes the whole queue when it comes. One that
        // drives the runtime itself settles the queue after its turn.
        if was_empty && !DRIVING.with(Cell::get) {
            if let Some(tsfn) = &*self.shared.wake.lock().unwrap_or_else(PoisonError::into_inner) {
                // SAFETY: alive while `wake` has it (the finalizer clears it
                // under the same lock). Fails only once Node is closing it.
                unsafe {
                    sys::napi_call_threadsafe_function(
                        tsfn.0,
                        ptr::null_mut(),
                        sys::ThreadsafeFunctionCallMode::nonblocking,
                    )
                };
            }
        }
    }
}

impl Drop for Done {
    fn drop(&mut self) {
        if self.deferred != 0 {
            self.finish(Box::new(|_| {
                Err(Error::new(Status::GenericFailure, "the call ended before its result"))
            }));
        }
    }
}

/// On the JavaScript thread: settles every finished call.
unsafe extern "C" fn call_js(
    env: sys::napi_env,
    _js: sys::napi_value,
    context: *mut c_void,
    _data: *mut c_void,
) {
    // SAFETY: the Arc given at creation, alive until the finalizer.
    let shared = unsafe { &*(context as *const Shared) };
    // Closing (no env): the values are dropped unsettled.
    if !env.is_null() {
        settle(env, shared, usize::MAX);
    }
}

/// On the JavaScript thread of `env`, inside a handle scope: settles the
/// calls its runtime finished (the driver's, after a drive), at most
/// `most`, in the order they finished. Returns what it did: how many it
/// settled, how many calls are still under way, and whether finished ones
/// are left for the next round.
pub fn settle_here(env: sys::napi_env, most: usize) -> Settled {
    let Some(local) = LOCAL.with(|l| l.borrow().clone()) else { return Settled::default() };
    let (settled, more) = settle(env, &local.shared, most);
    Settled { under_way: local.shared.pending.load(Ordering::Relaxed), settled, more }
}

/// What [`settle_here`] did.
#[derive(Default)]
pub struct Settled {
    /// Calls still under way.
    pub under_way: usize,
    /// Calls settled now.
    pub settled: usize,
    /// Finished calls left for the next round.
    pub more: bool,
}

/// Settles the first `most` finished calls of `shared`; returns how many,
/// and whether more are left.
fn settle(env: sys::napi_env, shared: &Shared, most: usize) -> (usize, bool) {
    let (finished, more) = {
        let mut queue = shared.queue.lock().unwrap_or_else(PoisonError::into_inner);
        if queue.len() <= most {
            (std::mem::take(&mut *queue), false)
        } else {
            (queue.drain(..most).collect::<Vec<_>>(), true)
        }
    };
    if finished.is_empty() {
        return (0, more);
    }
    let settled = finished.len();
    for Finished { deferred, value } in finished {
        let deferred = deferred as sys::napi_deferred;
        // SAFETY: each deferred is settled once, on its env's thread.
        unsafe {
            match value(env) {
                Ok(value) => sys::napi_resolve_deferred(env, deferred, value),
                Err(error) => sys::napi_reject_deferred(env, deferred, JsError::from(error).into_value(env)),
            };
        }
    }
    if shared.pending.fetch_sub(settled, Ordering::Relaxed) == settled {
        // Through this thread's own handle, not `wake`: the runtime's thread
        // holds that lock while it wakes this one, which then often runs
        // first and would wait for it (a futex, two context switches).
        if let Some(local) = LOCAL.with(|l| l.borrow().clone()) {
            // SAFETY: on its JavaScript thread, alive while `LOCAL` has it.
            unsafe { sys::napi_unref_threadsafe_function(env, local.tsfn) };
        }
    }
    (settled, more)
}

/// Node finalizes the thread-safe function (the environment goes away):
/// no call wakes it any more, and this thread makes a new one if it runs
/// JavaScript again.
unsafe extern "C" fn finalize(_env: sys::napi_env, data: *mut c_void, _hint: *mut c_void) {
    // SAFETY: the Arc given at creation, taken back once.
    let shared = unsafe { Arc::from_raw(data as *const Shared) };
    shared.wake.lock().unwrap_or_else(PoisonError::into_inner).take();
    let _ = LOCAL.try_with(|l| l.borrow_mut().take());
}
