//! A call from JavaScript: its Promise, and where its future runs (the
//! JavaScript thread's own runtime where it has one, `jsloop.rs`; else the
//! runtime thread, `runtime.rs`).

use std::future::Future;

use napi::bindgen_prelude::{PromiseRaw, ToNapiValue};
use napi::{Env, Result};

use crate::runtime::Call;
use crate::{jsloop, runtime, settle};

/// Runs `call`; returns its Promise, which `call`'s value (made into a
/// JavaScript value on the JavaScript thread) settles.
pub fn promise<T, F>(env: &Env, call: F) -> Result<PromiseRaw<'static, T>>
where
    T: ToNapiValue + Send + 'static,
    F: Future<Output = T> + Send + 'static,
{
    let (promise, done) = settle::begin(env)?;
    let call: Call = Box::pin(async move { done.with(call.await) });
    match jsloop::here(env.raw()) {
        Some(driver) => driver.submit(call),
        None => runtime::get()?.submit(call),
    }
    Ok(promise)
}
