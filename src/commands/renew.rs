//! `LOCK.RENEW token ttl-ms key [key ...]`: LOCK.EXTEND on every key for one
//! owner (a watchdog holding many locks renews them in one call). Reply: 1
//! or 0 per key. A key that is not a lock fails the whole call before
//! anything is extended. Parser: `core::args::renew`.

use lock_protocol::command as names;
use super::extend::extend_one;
use super::key_flags::{RW, UPDATE};
use super::{Command, Cx};
use crate::core::args;
use crate::core::syntax::common::{TOKEN, TTL_MS, KEYS};
use crate::ffi::{Keys, Reply};

pub const COMMAND: Command = Command {
    name: names::RENEW,
    args: &[TOKEN, TTL_MS, KEYS],
    complexity: c"O(N) where N is the number of keys",
    flags: c"write deny-oom",
    acl: c"write slow",
    arity: -4,
    keys: Keys::Range(FIRST_KEY as i32, -1),
    key_flags: RW | UPDATE,
    summary: c"Extend many locks held by one token; reply: 1 or 0 per key",
    run,
};

const FIRST_KEY: usize = 3;

fn run(cx: &Cx<'_>, argv: &[&[u8]]) -> Reply {
    let request = match args::renew(argv, cx.node.settings.limits()) {
        Ok(request) => request,
        Err(e) => return cx.rejected(&e),
    };
    let calls = match cx.all_locks(FIRST_KEY, argv.len().saturating_sub(FIRST_KEY)) {
        Ok(calls) => calls,
        Err(reply) => return reply,
    };
    let extended = calls
        .iter()
        .map(|key_call| match extend_one(&cx.on(key_call), request.owner, request.ttl_ms) {
            Reply::Int(n) => n,
            _ => 0,
        })
        .collect();
    Reply::Ints(extended)
}
