//! `LOCK.EXTEND key token ttl-ms`: the TTL is now `ttl-ms` from now (it may
//! shorten). Reply: 1, or 0 if `token` does not hold it; never re-creates a
//! missing lock. Parser: `core::args::extend`.

use lock_protocol::command as names;
use super::key_flags::{RW, UPDATE};
use super::{Command, Cx};
use crate::core::args;
use crate::core::lock;
use crate::core::syntax::common::{KEY, TOKEN, TTL_MS};
use crate::ffi::{Keys, Reply};

pub const COMMAND: Command = Command {
    name: names::EXTEND,
    args: &[KEY, TOKEN, TTL_MS],
    complexity: c"O(1)",
    flags: c"write deny-oom fast",
    acl: c"write fast",
    arity: 4,
    keys: Keys::Range(1, 1),
    key_flags: RW | UPDATE,
    summary: c"Reset the TTL of a lock held by token; reply: 1 or 0",
    run,
};

fn run(cx: &Cx<'_>, argv: &[&[u8]]) -> Reply {
    match args::extend(argv, cx.node.settings.limits()) {
        Ok(request) => extend_one(cx, request.owner, request.ttl_ms),
        Err(e) => cx.rejected(&e),
    }
}

/// EXTEND of the call's key (also LOCK.RENEW's, per key).
pub fn extend_one(cx: &Cx<'_>, owner: &[u8], ttl_ms: i64) -> Reply {
    match cx.write(|txn| lock::extend(txn, owner, ttl_ms)) {
        Ok(extended) => {
            if extended {
                cx.node.stats.extensions.bump();
            }
            Reply::Int(i64::from(extended))
        }
        Err(reply) => reply,
    }
}
