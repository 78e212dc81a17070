//! Blocked clients (the waiters of `WAIT`) and timers.
//!
//! Clients are blocked without a Redis timeout: on 7.0 a blocked-client
//! timeout that races with an unblock loses the reply, and Redis' timeouts
//! only fire at `hz` granularity. Timeouts are module timers instead.

use std::ffi::{c_char, c_int, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr;

use redis_module::raw;

use super::api::{api, string_bytes, RawArgv, RawCtx, TimerId, WaiterHandle};
use super::call::Call;
use super::handlers::handlers;
use super::reply::Reply;
use crate::core::queue::KeyId;

/// What a blocked waiter is told when it is unblocked.
#[derive(Debug)]
pub enum WaitResult {
    Granted(i64),
    TimedOut,
    Failed(String),
}

impl Call<'_> {
    /// Blocks the calling client until [`unblock`]. `None` if Redis refused
    /// to block it.
    pub fn block(&self) -> Option<WaiterHandle> {
        // SAFETY: ctx is the live context of a command call; the callbacks
        // are extern "C" functions of this module that live forever.
        unsafe {
            let bc = api(raw::RedisModule_BlockClient)(
                self.ctx,
                Some(wait_reply_callback),
                Some(wait_timeout_callback),
                Some(wait_free_callback),
                0,
            );
            if bc.is_null() {
                return None;
            }
            api(raw::RedisModule_SetDisconnectCallback)(bc, Some(wait_disconnect_callback));
            Some(bc as WaiterHandle)
        }
    }

    /// Calls the `key_timer` handler for `key` after `delay_ms`, on Redis'
    /// main thread. Returns the timer id for [`Call::stop_timer`].
    pub fn start_timer(&self, delay_ms: i64, key: KeyId) -> TimerId {
        let data = Box::into_raw(Box::new(key)).cast::<c_void>();
        // SAFETY: ctx is live; `data` is a leaked Box<KeyId> that the
        // callback or `stop_timer` turns back into a Box exactly once.
        unsafe {
            api(raw::RedisModule_CreateTimer)(self.ctx, delay_ms.max(0), Some(key_timer_callback), data)
        }
    }

    /// Stops a key timer that has not fired and frees its data.
    pub fn stop_timer(&self, id: TimerId) {
        let mut data: *mut c_void = ptr::null_mut();
        // SAFETY: ctx is live; on success Redis hands back the data pointer
        // we gave to CreateTimer, a Box<KeyId> not yet freed.
        unsafe {
            if api(raw::RedisModule_StopTimer)(self.ctx, id, &mut data) == raw::REDISMODULE_OK as c_int
                && !data.is_null()
            {
                drop(Box::from_raw(data.cast::<KeyId>()));
            }
        }
    }

    /// Calls the `wait_timeout` handler after `delay_ms` (one timer serves
    /// every waiter's timeout: see `handoff.rs`).
    pub fn start_timeout_timer(&self, delay_ms: i64) -> TimerId {
        // SAFETY: ctx is live; the timer carries no data.
        unsafe {
            api(raw::RedisModule_CreateTimer)(
                self.ctx,
                delay_ms.max(0),
                Some(timeout_timer_callback),
                ptr::null_mut(),
            )
        }
    }

    /// Stops the timeout timer (its data owns nothing).
    pub fn stop_timeout_timer(&self, id: TimerId) {
        let mut data: *mut c_void = ptr::null_mut();
        // SAFETY: ctx is live; the timer's data is null.
        unsafe {
            api(raw::RedisModule_StopTimer)(self.ctx, id, &mut data);
        }
    }
}

/// Unblocks a waiter; its client is then sent `result`.
pub fn unblock(handle: WaiterHandle, result: WaitResult) {
    let data = Box::into_raw(Box::new(result)).cast::<c_void>();
    // SAFETY: `handle` is a blocked client this module blocked and has not
    // unblocked yet (the waiter was removed from its queue exactly once);
    // Redis hands `data` to the reply and free callbacks.
    unsafe {
        api(raw::RedisModule_UnblockClient)(handle as *mut raw::RedisModuleBlockedClient, data);
    }
}

/// Runs `f` with a context for `key` in a callback (timer, event): selects
/// the key's database and wraps the key name in a Redis string.
pub(super) fn with_key_context(ctx: RawCtx, key: &KeyId, f: impl FnOnce(&Call<'_>)) {
    let (db, name) = key;
    // SAFETY: ctx is the live callback context; the string is created with
    // a NULL context (so automatic memory does not free it) and freed here.
    unsafe {
        if api(raw::RedisModule_SelectDb)(ctx, *db) != raw::REDISMODULE_OK as c_int {
            return;
        }
        let key =
            api(raw::RedisModule_CreateString)(ptr::null_mut(), name.as_ptr().cast::<c_char>(), name.len());
        let call = Call::on_key(ctx, key);
        let _ = catch_unwind(AssertUnwindSafe(|| f(&call)));
        api(raw::RedisModule_FreeString)(ptr::null_mut(), key);
    }
}

extern "C" fn wait_reply_callback(ctx: RawCtx, argv: RawArgv, argc: c_int) -> c_int {
    // SAFETY: Redis calls this for a client we unblocked with a
    // Box<WaitResult> as private data; Redis still owns it (it is freed in
    // wait_free_callback), so it is only borrowed here.
    let result =
        unsafe { api(raw::RedisModule_GetBlockedClientPrivateData)(ctx).cast::<WaitResult>().as_ref() };
    let reply = match result {
        Some(WaitResult::Granted(fence)) => Reply::Int(*fence),
        // Named after the command the client blocked in (its argv[0]).
        Some(WaitResult::Failed(line)) => Reply::Error(line.clone()).for_command(command_name(argv, argc)),
        Some(WaitResult::TimedOut) | None => Reply::Nil,
    };
    reply.send(ctx);
    raw::REDISMODULE_OK as c_int
}

/// The name of the command a blocked client called (its argv[0]), empty
/// when Redis gives none.
fn command_name<'a>(argv: RawArgv, argc: c_int) -> &'a [u8] {
    if argv.is_null() || argc < 1 {
        return &[];
    }
    // SAFETY: Redis passes the blocked client's `argc` arguments, valid for
    // the duration of the reply callback.
    string_bytes(unsafe { *argv })
}

/// Clients are blocked without a Redis timeout, so Redis calls this only
/// for `CLIENT UNBLOCK` (timeout mode): the waiter leaves its queue and gets
/// nil, as on a timeout.
extern "C" fn wait_timeout_callback(ctx: RawCtx, _argv: RawArgv, _argc: c_int) -> c_int {
    // SAFETY: ctx is the timeout context of a client this module blocked.
    let bc = unsafe { api(raw::RedisModule_GetBlockedClientHandle)(ctx) };
    let call = Call::bare(ctx);
    if let Some(h) = handlers() {
        let _ = catch_unwind(AssertUnwindSafe(|| (h.client_unblocked)(&call, bc as WaiterHandle)));
    }
    Reply::Nil.send(ctx);
    raw::REDISMODULE_OK as c_int
}

extern "C" fn timeout_timer_callback(ctx: RawCtx, _data: *mut c_void) {
    let call = Call::bare(ctx);
    if let Some(h) = handlers() {
        let _ = catch_unwind(AssertUnwindSafe(|| (h.wait_timeout)(&call)));
    }
}

extern "C" fn wait_disconnect_callback(ctx: RawCtx, bc: *mut raw::RedisModuleBlockedClient) {
    let call = Call::bare(ctx);
    let removed = match handlers() {
        Some(h) => {
            catch_unwind(AssertUnwindSafe(|| (h.disconnected)(&call, bc as WaiterHandle))).unwrap_or(false)
        }
        None => false,
    };
    if removed {
        // SAFETY: the waiter was still queued, so nobody unblocked it yet;
        // unblocking frees the handle (no reply is sent: the client is gone).
        unsafe {
            api(raw::RedisModule_UnblockClient)(bc, ptr::null_mut());
        }
    }
}

extern "C" fn wait_free_callback(_ctx: RawCtx, data: *mut c_void) {
    if !data.is_null() {
        // SAFETY: `data` is the Box<WaitResult> given to UnblockClient.
        drop(unsafe { Box::from_raw(data.cast::<WaitResult>()) });
    }
}

extern "C" fn key_timer_callback(ctx: RawCtx, data: *mut c_void) {
    if data.is_null() {
        return;
    }
    // SAFETY: `data` is the Box<KeyId> leaked by start_timer; a timer fires
    // at most once and is not stopped after firing, so it is freed once.
    let key = unsafe { Box::from_raw(data.cast::<KeyId>()) };
    if let Some(h) = handlers() {
        with_key_context(ctx, &key, |call| (h.key_timer)(call, &key));
    }
}
