//! Every `unsafe` of the module lives under this folder: the raw Redis
//! module API, behind safe types. It is a leaf: it imports nothing of the
//! module but the pure `core` types it carries and the error lines; the
//! upper layers hand it their callbacks ([`set_handlers`]) instead of it
//! calling up into them.
//!
//! - `call.rs`: a command or callback context ([`Call`]): the command entry,
//!   the key name, flags, replication, pub/sub;
//! - `key.rs`: an open key ([`Key`]): strings, hashes, expiry;
//! - `reply.rs`: replies ([`Reply`]);
//! - `block.rs`: blocked clients and timers;
//! - `events.rs`: keyspace and server events, post-notification jobs;
//! - `register.rs`: commands, INFO, the API check at load;
//! - `ledger.rs`: the node's ledger as aux data of every RDB;
//! - `slots.rs`: slot imports (a command filter, Valkey's events) and the
//!   timer that writes quarantine records;
//! - `handlers.rs`: the callbacks the upper layers register;
//! - `api.rs`: the API table, string helpers and handle types all of these use.
//!
//! The crate's higher-level wrappers are bypassed on the hot path on
//! purpose: they copy every argument into a retained `RedisString` and
//! allocate per replicated argument, which costs more than the lock logic.

mod api;
mod block;
mod call;
mod events;
mod handlers;
mod key;
mod ledger;
mod register;
mod reply;
mod slots;

pub use api::{server_wall_ms, RawArgv, RawCtx, TimerId, WaiterHandle};
pub use block::{unblock, WaitResult};
pub use call::{dispatch, dispatch_counted_keys, Call, Freed, KeyReader};
pub use events::{declare_atomic_slot_migration, subscribe_server_events, watch_keys};
pub use handlers::{set_handlers, Handlers};
pub use key::{Key, KeyKind};
pub use ledger::{set_module_options, LEDGER_TYPE};
pub use register::{
    add_acl_category, has_defrag_callbacks, missing_api, register_command, register_info, CommandDef,
    InfoValue, Keys,
};
pub use reply::{Field, Reply};
pub use slots::{importing_slots, schedule_records, watch_slots};
