//! `LOCK.RELEASE key token`: frees the lock, or the token's own hold of a
//! shared lock or semaphore. Reply: 1, or 0 if `token` does not hold it.
//! Parser: `core::args::owner`.

use lock_protocol::command as names;
use super::key_flags::{DELETE, RW};
use super::{Command, Cx};
use crate::core::args;
use crate::core::fencing;
use crate::core::lock;
use crate::core::txn::{Stored, Txn};
use crate::core::syntax::common::{KEY, TOKEN};
use crate::ffi::{Keys, Reply};
use crate::stats::Stats;

pub const COMMAND: Command = Command {
    name: names::RELEASE,
    args: &[KEY, TOKEN],
    complexity: c"O(1)",
    flags: c"write fast",
    acl: c"write fast",
    arity: 3,
    keys: Keys::Range(1, 1),
    key_flags: RW | DELETE,
    summary: c"Free a lock held by token; reply: 1 or 0",
    run,
};

fn run(cx: &Cx<'_>, argv: &[&[u8]]) -> Reply {
    let request = match args::owner(argv) {
        Ok(request) => request,
        Err(e) => return cx.rejected(&e),
    };
    match cx.write(|txn| release_one(txn, request.owner, &cx.node.stats)) {
        Ok(released) => Reply::Int(i64::from(released)),
        Err(reply) => reply,
    }
}

/// RELEASE of one key, counted, with the hold's duration recorded (also
/// LOCK.MRELEASE's, per key).
pub fn release_one<'o, S: Stored + ?Sized>(txn: &mut Txn<'_, 'o, S>, owner: &'o [u8], stats: &Stats) -> bool {
    let Some(freed) = lock::release_hold(txn, owner) else { return false };
    stats.releases.bump();
    stats.record_hold(txn.now_ms().saturating_sub(fencing::granted_at_ms(freed.fence)));
    true
}
