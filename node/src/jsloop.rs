//! The JavaScript thread's own runtime, driven from its event loop, so that
//! a call crosses no thread: the call's requests are written from inside
//! the JavaScript call that makes it, and its replies are read, and its
//! Promise settled, in one callback of the event loop.
//!
//! With the runtime on a thread of its own (`runtime.rs`), every call went
//! there and back: two wake-ups of another thread per call, which on one
//! CPU are two context switches each (13 per acquire + release against the
//! Rust client's 4.6, and 0.65x its cycles/s with one caller).
//!
//! How the event loop drives a Tokio runtime, which has no public hook for
//! it:
//! - **I/O.** The runtime's I/O driver waits on an epoll descriptor of its
//!   own. An epoll descriptor is readable while it has events, so libuv
//!   polls it (`uv_poll`); Tokio does not say which descriptor it is, so
//!   it is found as the one that building the runtime added to the
//!   process (`/proc/self/fd`). Where that cannot be done (not Linux, or not
//!   exactly one new epoll instance), calls go to the runtime thread as
//!   before.
//! - **A turn.** `block_on` of a future that yields [`YIELDS`] times: each
//!   yield runs every task that is ready (the calls just made, the readers
//!   woken by replies, the calls they complete) and then looks at epoll
//!   without waiting. Then the finished calls are settled, in a callback
//!   scope (Node runs the Promise reactions when it closes); calls those
//!   reactions make are started in the same turn. A round settles at most
//!   [`SETTLE_CHUNK`] calls and drives again: with many calls finishing
//!   together, the first ones' next requests reach the nodes while the
//!   JavaScript thread still runs the others' reactions, instead of the
//!   nodes idling until every reaction has run.
//! - **Stragglers and timers.** The last look at epoll of a turn may wake
//!   tasks that only the next turn runs, with no new event to call for
//!   one; and Tokio does not say when its next timer is due. While calls
//!   are under way a 1 ms timer turns the runtime (a call's timeout, a
//!   retry's delay, such a straggler: 1 ms late at most). When the calls
//!   under way only wait (a lock's queue, a long retry delay: 20 timer
//!   turns with nothing to do), the helper below takes the runtime, so
//!   that a wait of seconds does not wake the JavaScript thread a thousand
//!   times a second. Ending the turn
//!   only once epoll is empty (a park hook that polls it) left fewer
//!   stragglers but cost more than they do: one caller's cycles/s were the
//!   same, 64 tasks' 20% lower (docs/evidence.md).
//! - **Idle.** With no call under way the runtime still has work: a
//!   watchdog renewing a lock every ttl/3, a release in the background, the
//!   late replies of a round. A helper thread then drives it as the runtime
//!   thread did (exact timers, no wake-up of the JavaScript thread), and
//!   gives it back when a call comes: one hand-over per idle period instead
//!   of two hops per call.
//!
//! When the environment goes away (a worker ends), the helper keeps the
//! runtime for good: a background release still runs to its end.

use std::cell::{Cell, RefCell};
use std::ffi::{c_int, c_void};
use std::future::pending;
use std::ptr;
use std::rc::Rc;
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread;

use napi::sys;
use tokio::runtime::{Builder, Runtime};
use tokio::sync::Notify;

use crate::runtime::Call;
use crate::settle;

thread_local! {
    /// This thread's driver, once made (None inside: it could not be).
    static HERE: RefCell<Option<Option<Rc<Driver>>>> = const { RefCell::new(None) };
}

/// The driver of the JavaScript thread of `env`, made at its first call;
/// None where it cannot be made, or where `REDLOCK_NODE_RUNTIME=thread`
/// asks for the runtime thread (the tests run both).
pub(crate) fn here(env: sys::napi_env) -> Option<Rc<Driver>> {
    if let Some(made) = HERE.with(|h| h.borrow().clone()) {
        return made;
    }
    let wanted = std::env::var_os("REDLOCK_NODE_RUNTIME").is_none_or(|v| v != "thread");
    let made = if wanted { Driver::new(env).map(Rc::new) } else { None };
    if let Some(driver) = &made {
        // SAFETY: `env` is this thread's; the hook's argument is a leaked
        // Rc that the hook takes back once.
        unsafe {
            sys::napi_add_env_cleanup_hook(env, Some(env_gone), Rc::into_raw(driver.clone()) as *mut c_void);
        }
    }
    HERE.with(|h| *h.borrow_mut() = Some(made.clone()));
    made
}

/// Who drives the runtime now.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Owner {
    /// The JavaScript thread (calls are under way).
    Js,
    /// The helper thread (idle).
    Helper,
}

pub struct Driver {
    runtime: Arc<Runtime>,
    env: sys::napi_env,
    uv: Uv,
    /// For the callback scope a turn settles in.
    async_context: sys::napi_async_context,
    /// Calls made while a turn is on, started before it ends.
    submitted: RefCell<Vec<Call>>,
    in_turn: Cell<bool>,
    owner: Cell<Owner>,
    /// Timer turns in a row that settled nothing, with no reply between.
    quiet_ticks: Cell<u32>,
    helper: Arc<Helper>,
}

impl Driver {
    fn new(env: sys::napi_env) -> Option<Driver> {
        let before = epoll_descriptors();
        // I/O and time only: the client uses no signal or child process, and
        // their drivers would add work to every park.
        let runtime = Arc::new(Builder::new_current_thread().enable_io().enable_time().build().ok()?);
        let epoll = single_new_epoll(&before, &epoll_descriptors())?;
        let uv = Uv::new(env, epoll)?;
        let mut async_context = ptr::null_mut();
        let label = "redlock-client";
        let mut name = ptr::null_mut();
        // SAFETY: a valid env and a UTF-8 string of the given length.
        unsafe {
            sys::napi_create_string_utf8(env, label.as_ptr().cast(), label.len() as isize, &mut name);
            if sys::napi_async_init(env, ptr::null_mut(), name, &mut async_context) != sys::Status::napi_ok {
                uv.close();
                return None;
            }
        }
        let helper = Helper::start(runtime.clone())?;
        Some(Driver {
            runtime,
            env,
            uv,
            async_context,
            submitted: RefCell::new(Vec::new()),
            in_turn: Cell::new(false),
            owner: Cell::new(Owner::Helper),
            quiet_ticks: Cell::new(0),
            helper,
        })
    }

    /// Starts `call`: its requests are written before this returns, unless
    /// a turn is on (a Promise reaction's call: the turn starts it).
    pub fn submit(&self, call: Call) {
        self.submitted.borrow_mut().push(call);
        if self.in_turn.get() {
            return;
        }
        self.in_turn.set(true);
        self.take();
        self.drive();
        // Inside a JavaScript call: its handle scope holds the values, and
        // the reactions run when it returns.
        let under_way = settle::settle_here(self.env, usize::MAX).under_way;
        self.in_turn.set(false);
        self.quiet_ticks.set(0);
        self.after(under_way);
    }

    /// A turn from the event loop (replies came, or the timer): drives,
    /// settles in a callback scope, and drives again for the calls that
    /// the reactions made.
    fn turn(&self, cause: Cause) {
        if self.in_turn.get() || self.owner.get() != Owner::Js {
            return;
        }
        self.in_turn.set(true);
        let env = self.env;
        let mut under_way = 0;
        let mut settled = 0;
        // SAFETY: on the JavaScript thread of `env`, from its event loop
        // (no JavaScript on the stack); every scope opened is closed.
        unsafe {
            let mut handles = ptr::null_mut();
            sys::napi_open_handle_scope(env, &mut handles);
            // Bounded: a reaction that starts a call every time round
            // gives the event loop back after this many.
            for round in 1..=TURN_ROUNDS {
                self.drive();
                let mut resource = ptr::null_mut();
                sys::napi_create_object(env, &mut resource);
                let mut scope = ptr::null_mut();
                sys::napi_open_callback_scope(env, resource, self.async_context, &mut scope);
                // The last round settles all that is left: nothing else
                // would wake this thread for calls already finished.
                let most = if round == TURN_ROUNDS { usize::MAX } else { SETTLE_CHUNK };
                let now = settle::settle_here(env, most);
                under_way = now.under_way;
                settled += now.settled;
                // Runs the reactions (and so the calls they make).
                sys::napi_close_callback_scope(env, scope);
                if self.submitted.borrow().is_empty() && !now.more {
                    break;
                }
            }
            sys::napi_close_handle_scope(env, handles);
        }
        self.in_turn.set(false);
        let quiet = cause == Cause::Timer && settled == 0 && self.submitted.borrow().is_empty();
        self.quiet_ticks.set(if quiet { self.quiet_ticks.get() + 1 } else { 0 });
        self.after(under_way);
    }

    /// Starts the calls submitted and runs every task that is ready, with
    /// looks at epoll that do not wait.
    fn drive(&self) {
        let calls = std::mem::take(&mut *self.submitted.borrow_mut());
        settle::driving(true);
        self.runtime.block_on(async move {
            for call in calls {
                tokio::spawn(call);
            }
            for _ in 0..YIELDS {
                tokio::task::yield_now().await;
            }
        });
        settle::driving(false);
    }

    /// The JavaScript thread drives from now on (the helper stops).
    fn take(&self) {
        if self.owner.get() == Owner::Js {
            return;
        }
        self.helper.stop();
        self.owner.set(Owner::Js);
        self.uv.start();
    }

    /// After a turn: with no call under way, or with calls that only wait
    /// (a server-side wait, a retry's delay: [`QUIET_TICKS`] timer turns
    /// with nothing to do), the helper drives. The calls under way then end
    /// on the helper, and their Promises are settled through the
    /// thread-safe function, as on the runtime thread.
    fn after(&self, under_way: usize) {
        if self.owner.get() != Owner::Js || !self.submitted.borrow().is_empty() {
            return;
        }
        if under_way == 0 || self.quiet_ticks.get() >= QUIET_TICKS {
            self.quiet_ticks.set(0);
            self.uv.stop();
            self.owner.set(Owner::Helper);
            self.helper.go();
        }
    }
}

/// What started a turn.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Cause {
    /// The runtime's epoll descriptor is readable.
    Readable,
    /// The 1 ms timer.
    Timer,
}

/// Yields per drive: the calls' writes, the replies that came meanwhile,
/// and the calls they complete.
const YIELDS: usize = 3;
/// Drives per event-loop turn at most.
const TURN_ROUNDS: usize = 64;
/// Timer turns in a row with nothing to do before the helper takes the
/// runtime: a call that waits longer (a lock's queue, a retry's delay of
/// 50-200 ms) does not wake the JavaScript thread every ms, and a retry
/// delay of a few ms stays on the JavaScript thread.
const QUIET_TICKS: u32 = 20;
/// Calls settled per round of a turn: the calls their reactions make are
/// written before the next ones settle, so that the nodes work on them
/// while the JavaScript thread runs the rest (64 tasks: +27% cycles/s
/// against settling the whole queue at once; docs/evidence.md).
const SETTLE_CHUNK: usize = 16;

/// The environment goes away: libuv's handles are closed (a worker's loop
/// may not end with them open), and the helper drives the runtime for good.
unsafe extern "C" fn env_gone(data: *mut c_void) {
    // SAFETY: the Rc leaked in `here`, taken back once.
    let driver = unsafe { Rc::from_raw(data as *const Driver) };
    driver.uv.close();
    driver.helper.keep();
    let _ = HERE.try_with(|h| h.borrow_mut().take());
}

// --- The helper thread ------------------------------------------------------

/// The hand-over between the JavaScript thread and the helper.
struct Helper {
    state: Mutex<HelperState>,
    changed: Condvar,
    /// Ends the helper's `block_on` (the JavaScript thread wants the runtime).
    give_back: Notify,
}

#[derive(Default)]
struct HelperState {
    /// The helper should drive (the JavaScript thread is idle).
    asked: bool,
    /// The helper is inside `block_on`.
    driving: bool,
    /// For good: the environment is gone.
    kept: bool,
}

impl Helper {
    fn start(runtime: Arc<Runtime>) -> Option<Arc<Helper>> {
        let helper = Arc::new(Helper {
            state: Mutex::new(HelperState { asked: true, ..HelperState::default() }),
            changed: Condvar::new(),
            give_back: Notify::new(),
        });
        let run = helper.clone();
        thread::Builder::new().name("redlock-client".into()).spawn(move || run.run(&runtime)).ok()?;
        Some(helper)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HelperState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn run(&self, runtime: &Runtime) {
        loop {
            let kept = {
                let mut state = self.lock();
                while !state.asked {
                    state = self.changed.wait(state).unwrap_or_else(PoisonError::into_inner);
                }
                state.driving = true;
                state.kept
            };
            if kept {
                runtime.block_on(pending::<()>());
            }
            runtime.block_on(self.give_back.notified());
            self.lock().driving = false;
            self.changed.notify_all();
        }
    }

    /// Drive (the JavaScript thread is idle).
    fn go(&self) {
        self.lock().asked = true;
        self.changed.notify_all();
    }

    /// Stop driving, and return once the runtime is free.
    fn stop(&self) {
        self.lock().asked = false;
        // A permit if the helper is not waiting yet: its next block_on ends
        // at once.
        self.give_back.notify_one();
        let mut state = self.lock();
        while state.driving {
            state = self.changed.wait(state).unwrap_or_else(PoisonError::into_inner);
        }
    }

    /// Drive for good.
    fn keep(&self) {
        let mut state = self.lock();
        state.kept = true;
        state.asked = true;
        drop(state);
        self.changed.notify_all();
    }
}

// --- Finding the runtime's epoll descriptor ---------------------------------

/// This process's epoll descriptors.
fn epoll_descriptors() -> Vec<(c_int, String)> {
    let Ok(dir) = std::fs::read_dir("/proc/self/fd") else { return Vec::new() };
    dir.filter_map(|entry| {
        let entry = entry.ok()?;
        let fd: c_int = entry.file_name().to_str()?.parse().ok()?;
        let target = std::fs::read_link(entry.path()).ok()?;
        (target.to_str()? == "anon_inode:[eventpoll]").then_some(())?;
        // What it watches: a copy (dup) of a descriptor watches the same.
        let info = std::fs::read_to_string(format!("/proc/self/fdinfo/{fd}")).ok()?;
        let watched = info.lines().filter(|l| l.starts_with("tfd:")).collect::<Vec<_>>().join("\n");
        Some((fd, watched))
    })
    .collect()
}

/// The one epoll instance among `after` that is not in `before` (Tokio keeps
/// a copy of its descriptor: copies watch the same descriptors).
fn single_new_epoll(before: &[(c_int, String)], after: &[(c_int, String)]) -> Option<c_int> {
    let new: Vec<&(c_int, String)> =
        after.iter().filter(|(fd, _)| !before.iter().any(|(b, _)| b == fd)).collect();
    let (fd, watched) = new.first()?;
    new.iter().all(|(_, w)| w == watched).then_some(*fd)
}

// --- libuv ------------------------------------------------------------------

extern "C" {
    fn uv_handle_size(kind: c_int) -> usize;
    fn uv_poll_init(event_loop: *mut c_void, handle: *mut c_void, fd: c_int) -> c_int;
    fn uv_poll_start(
        handle: *mut c_void,
        events: c_int,
        cb: extern "C" fn(*mut c_void, c_int, c_int),
    ) -> c_int;
    fn uv_poll_stop(handle: *mut c_void) -> c_int;
    fn uv_timer_init(event_loop: *mut c_void, handle: *mut c_void) -> c_int;
    fn uv_timer_start(
        handle: *mut c_void,
        cb: extern "C" fn(*mut c_void),
        timeout: u64,
        repeat: u64,
    ) -> c_int;
    fn uv_timer_stop(handle: *mut c_void) -> c_int;
    fn uv_unref(handle: *mut c_void);
    fn uv_close(handle: *mut c_void, cb: extern "C" fn(*mut c_void));
}

/// libuv's `uv_handle_type` values (uv.h, stable since libuv 1.0).
const UV_POLL: c_int = 8;
const UV_TIMER: c_int = 13;
const UV_READABLE: c_int = 1;
/// The timer's period while calls are under way, ms.
const TIMER_MS: u64 = 1;

/// The poll of the runtime's epoll descriptor and the timer, on the event
/// loop of the JavaScript thread. Neither keeps the process alive: the
/// calls' thread-safe function does, while a call is under way.
struct Uv {
    poll: *mut c_void,
    timer: *mut c_void,
    closed: Cell<bool>,
}

impl Uv {
    fn new(env: sys::napi_env, epoll: c_int) -> Option<Uv> {
        let mut event_loop = ptr::null_mut();
        // SAFETY: a valid env; libuv's handles are allocated at the size
        // libuv itself gives, and live until their close callback.
        unsafe {
            if sys::napi_get_uv_event_loop(env, &mut event_loop) != sys::Status::napi_ok {
                return None;
            }
            let event_loop = event_loop as *mut c_void;
            let poll = handle_memory(UV_POLL);
            let timer = handle_memory(UV_TIMER);
            if uv_poll_init(event_loop, poll, epoll) != 0 {
                free_handle(poll);
                free_handle(timer);
                return None;
            }
            // Cannot fail (it only fills in the handle).
            uv_timer_init(event_loop, timer);
            uv_unref(poll);
            uv_unref(timer);
            Some(Uv { poll, timer, closed: Cell::new(false) })
        }
    }

    fn start(&self) {
        if self.closed.get() {
            return;
        }
        // SAFETY: open handles of this thread's loop.
        unsafe {
            uv_poll_start(self.poll, UV_READABLE, on_readable);
            uv_timer_start(self.timer, on_timer, TIMER_MS, TIMER_MS);
        }
    }

    fn stop(&self) {
        if self.closed.get() {
            return;
        }
        // SAFETY: open handles of this thread's loop.
        unsafe {
            uv_poll_stop(self.poll);
            uv_timer_stop(self.timer);
        }
    }

    fn close(&self) {
        if self.closed.replace(true) {
            return;
        }
        // SAFETY: open handles; libuv frees them through the callback.
        unsafe {
            uv_close(self.poll, free_handle_cb);
            uv_close(self.timer, free_handle_cb);
        }
    }
}

/// Zeroed memory for a libuv handle of `kind`; its first field (`data`) is
/// null.
unsafe fn handle_memory(kind: c_int) -> *mut c_void {
    // SAFETY: libuv's own size for the kind.
    let size = unsafe { uv_handle_size(kind) };
    // Its size is kept in front of it, for `free_handle`.
    let memory = vec![0u64; size.div_ceil(8) + 1].into_boxed_slice();
    let raw = Box::into_raw(memory) as *mut u64;
    // SAFETY: the slice has at least two words.
    unsafe {
        *raw = (size.div_ceil(8) + 1) as u64;
        raw.add(1) as *mut c_void
    }
}

unsafe fn free_handle(handle: *mut c_void) {
    // SAFETY: made by `handle_memory`: its length one word before it.
    unsafe {
        let raw = (handle as *mut u64).sub(1);
        let words = *raw as usize;
        drop(Box::from_raw(ptr::slice_from_raw_parts_mut(raw, words)));
    }
}

extern "C" fn free_handle_cb(handle: *mut c_void) {
    // SAFETY: a handle of `handle_memory`, closed: libuv is done with it.
    unsafe { free_handle(handle) };
}

extern "C" fn on_readable(_handle: *mut c_void, _status: c_int, _events: c_int) {
    turn_here(Cause::Readable);
}

extern "C" fn on_timer(_handle: *mut c_void) {
    turn_here(Cause::Timer);
}

fn turn_here(cause: Cause) {
    if let Some(Some(driver)) = HERE.with(|h| h.borrow().clone()) {
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| driver.turn(cause)));
    }
}
