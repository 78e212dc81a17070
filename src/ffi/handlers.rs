//! The callbacks the upper layers register at load ([`set_handlers`]), so
//! that this folder never imports them.

use std::sync::OnceLock;

use super::api::WaiterHandle;
use super::call::Call;
use crate::core::queue::KeyId;

/// What the upper layers do when Redis calls the module back: they register
/// these at load, so that this folder never imports them.
pub struct Handlers {
    /// A keyspace event on the call's key, with its name (`del`, `set`,
    /// `expired`, `evicted`, ...); runs inside the notification: no writes.
    pub key_changed: fn(&Call<'_>, &[u8]),
    /// FLUSHDB of a database, or FLUSHALL (-1), ended.
    pub db_flushed: fn(&Call<'_>, i32),
    /// SWAPDB of these two databases.
    pub dbs_swapped: fn(&Call<'_>, i32, i32),
    /// Keys of a database (-1: every one) may have changed all at once
    /// without keyspace events (Valkey's atomic slot export ended).
    pub keys_dropped: fn(&Call<'_>, i32),
    /// Keys arrived without keyspace events (Valkey's atomic slot import
    /// ended).
    pub keys_imported: fn(&Call<'_>),
    /// A command about to run (`verified`: it may still be refused, so
    /// an import it starts is checked after), or a Valkey atomic import
    /// event, changes this node's slots. No context: no calls, no writes.
    pub slots_changed: fn(&crate::core::imports::SlotChange, bool),
    /// The records timer fired (`schedule_records`): quarantines started
    /// since are written into the AOF and replication stream.
    pub records_due: fn(&Call<'_>),
    /// This node became a master.
    pub promoted: fn(&Call<'_>),
    /// The start-up load of the AOF or RDB file ended (not a replica's
    /// full sync).
    pub loaded_from_disk: fn(&Call<'_>),
    /// The node's ledger in its byte form, for an RDB being written (maybe
    /// in a fork child).
    pub ledger_save: fn() -> Vec<u8>,
    /// A ledger read back from an RDB (the node's own, an AOF preamble, a
    /// master's full sync).
    pub ledger_load: fn(&[u8]),
    /// A CONFIG SET changed server settings.
    pub config_changed: fn(&Call<'_>),
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
