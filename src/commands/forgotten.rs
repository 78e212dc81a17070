//! `LOCK.FORGOTTEN key until-ms event`: a removal quarantine of the key as
//! the node started it (a `DEL`, an eviction, an overwrite of a lock that
//! may still be in force: property 10), written by the module into its AOF
//! and replication stream in the same step as the command that removed the
//! lock. An AOF replayed at a start without quarantine (`appendfsync
//! always`) and a replica get the quarantine back with its instant and its
//! cause; a `DEL` alone could not tell a forgotten lock from a release.
//! Before the AOF's next rewrite the ledger in its RDB preamble carries the
//! quarantines in force instead. Not for clients: a client's call is
//! refused. Parser: `core::args::forgotten`.

use lock_protocol::command as names;

use super::key_flags::{RW, UPDATE};
use super::{Command, Cx};
use crate::core::args;
use crate::core::forgetting::{Cause, Entry};
use crate::core::syntax::{common::KEY, Arg};
use crate::errors;
use crate::ffi::{Keys, Reply};

pub const COMMAND: Command = Command {
    name: names::FORGOTTEN,
    args: &[KEY, Arg::integer(c"until-ms"), Arg::string(c"event")],
    complexity: c"O(1)",
    flags: c"write fast",
    acl: c"write fast",
    arity: 4,
    keys: Keys::Range(1, 1),
    key_flags: RW | UPDATE,
    summary: c"A removal quarantine of the key, as the node started it (written by the module into its AOF and replication stream only)",
    run,
};

fn run(cx: &Cx<'_>, argv: &[&[u8]]) -> Reply {
    let call = cx.call;
    if !call.is_replicated_or_loading() {
        return cx.refused(errors::replication_only());
    }
    let request = match args::forgotten(argv) {
        Ok(request) => request,
        Err(e) => return cx.rejected(&e),
    };
    let entry = Entry {
        db: call.db(),
        key: Some(call.key_name().to_vec()),
        until_ms: request.until_ms,
        cause: Cause::of_event(request.event),
    };
    if call.is_loading() {
        // Replayed from the AOF at a start: written on another process's
        // module clock.
        cx.node.restore_written_quarantine(entry, cx.now_ms);
    } else {
        let _ = cx.node.restore_quarantine(entry, cx.now_ms);
    }
    // Passed on to this node's own AOF and sub-replicas.
    call.replicate_verbatim();
    Reply::Int(1)
}
