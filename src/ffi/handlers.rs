//! The callbacks the upper layers register at load ([`set_handlers`]), so
//! that this folder never imports them.

use std::sync::OnceLock;

use super::api::WaiterHandle;
use super::call::Call;
use crate::core::queue::KeyId;

/// What the upper layers do when Redis calls the module back: they register
/// these at load, so that this folder never imports them.
pub struct Handlers {
    /// A keyspace event on the call's key (deleted, overwritten, expired,
    /// evicted, ...); runs inside the notification: no writes.
    pub key_changed: fn(&Call<'_>),
    /// FLUSHDB / FLUSHALL (`db` -1) or SWAPDB touched a database, or a slot
    /// export ended (-1: Valkey's atomic slot migration).
    pub db_changed: fn(&Call<'_>, i32),
    /// This node became a master.
    pub promoted: fn(),
    /// The start-up load of the AOF or RDB file ended (not a replica's
    /// full sync).
    pub loaded_from_disk: fn(),
    /// A key timer fired (the call works on its key).
    pub key_timer: fn(&Call<'_>, &KeyId),
    /// The waiters' timeout timer fired.
    pub wait_timeout: fn(&Call<'_>),
    /// A waiter was `CLIENT UNBLOCK`ed.
    pub client_unblocked: fn(&Call<'_>, WaiterHandle),
    /// A waiter's client disconnected; true if it was still queued.
    pub disconnected: fn(&Call<'_>, WaiterHandle) -> bool,
}

static HANDLERS: OnceLock<Handlers> = OnceLock::new();

pub fn set_handlers(handlers: Handlers) {
    let _ = HANDLERS.set(handlers);
}

pub(super) fn handlers() -> Option<&'static Handlers> {
    HANDLERS.get()
}
