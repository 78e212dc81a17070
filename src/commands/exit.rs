//! `LOCK.EXIT key owner [ID request-id]`: drops one hold of a reentrant
//! lock. Reply: holds left (0: the lock is now free), nil if `owner` does
//! not hold it. With `ID`, a retry with the same id (its reply was lost)
//! changes nothing and answers the same count. Parser: `core::args::exit`.

use lock_protocol::command as names;
use super::key_flags::{RW, UPDATE};
use super::{Command, Cx};
use crate::core::args;
use crate::core::fencing;
use crate::core::kind::Kind;
use crate::core::lock::{self, Exit};
use crate::core::syntax::{Arg, common::{KEY, OWNER}};
use crate::errors;
use crate::ffi::{Keys, Reply};

pub const COMMAND: Command = Command {
    name: names::EXIT,
    args: &[KEY, OWNER, Arg::option(c"ID", Arg::string(c"request-id"))],
    complexity: c"O(1)",
    flags: c"write fast",
    acl: c"write fast",
    arity: -3,
    keys: Keys::Range(1, 1),
    key_flags: RW | UPDATE,
    summary: c"Drop one hold of a reentrant lock; reply: holds left or nil",
    run,
};

fn run(cx: &Cx<'_>, argv: &[&[u8]]) -> Reply {
    let request = match args::exit(argv) {
        Ok(request) => request,
        Err(e) => return cx.rejected(&e),
    };
    let stats = &cx.node.stats;
    let exit = cx.write(|txn| {
        let fence = txn.hold(request.owner).map(|h| h.fence);
        let exit = lock::exit(txn, request.owner, request.request_id);
        // The last exit counts as a release, with the hold's duration.
        if let (Exit::Left(0), Some(fence)) = (exit, fence) {
            stats.releases.bump();
            stats.record_hold(txn.now_ms().saturating_sub(fencing::granted_at_ms(fence)));
        }
        exit
    });
    match exit {
        Ok(Exit::Left(holds)) => Reply::Int(i64::from(holds)),
        Ok(Exit::NotHeld) => Reply::Nil,
        Ok(Exit::WrongKind { found }) => cx.refused(errors::wrong_kind(found.name(), Kind::Reentrant.name())),
        Err(reply) => reply,
    }
}
