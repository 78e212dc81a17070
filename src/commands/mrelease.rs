//! `LOCK.MRELEASE token key [key ...]`: LOCK.RELEASE on every key for one
//! token (a set taken with LOCK.MACQUIRE). Reply: 1 or 0 per key. A key
//! that is not a lock fails the whole call before anything is released;
//! waiters are served once every key is released (a waiter for the same set
//! is then served at once, not after a look at a half-released set).
//! Parser: `core::args::release_all`.

use lock_protocol::command as names;
use super::key_flags::{DELETE, RW};
use super::release::release_one;
use super::{Command, Cx};
use crate::core::args;
use crate::core::syntax::common::{TOKEN, KEYS};
use crate::ffi::{Keys, Reply};
use crate::keystate;

pub const COMMAND: Command = Command {
    name: names::MRELEASE,
    args: &[TOKEN, KEYS],
    complexity: c"O(N) where N is the number of keys",
    flags: c"write",
    acl: c"write slow",
    arity: -3,
    keys: Keys::Range(FIRST_KEY as i32, -1),
    key_flags: RW | DELETE,
    summary: c"Free the locks of a set held by token; reply: 1 or 0 per key",
    run,
};

const FIRST_KEY: usize = 2;

fn run(cx: &Cx<'_>, argv: &[&[u8]]) -> Reply {
    let request = match args::release_all(argv, cx.node.settings.limits()) {
        Ok(request) => request,
        Err(e) => return cx.rejected(&e),
    };
    let calls = match cx.all_locks(FIRST_KEY, argv.len().saturating_sub(FIRST_KEY)) {
        Ok(calls) => calls,
        Err(reply) => return reply,
    };
    let mut released = Vec::with_capacity(calls.len());
    let mut writes = Vec::with_capacity(calls.len());
    for key_call in &calls {
        match keystate::transact(key_call, cx.node, cx.now_ms, |txn| release_one(txn, request.owner, &cx.node.stats)) {
            Ok((done, written, key)) => {
                drop(key);
                released.push(i64::from(done));
                writes.push(written);
            }
            Err(failure) => {
                released.push(0);
                writes.push(Default::default());
                redis_module::logging::log_warning(format!("lock: LOCK.MRELEASE: {}", failure.line()));
            }
        }
    }
    for (key_call, written) in calls.iter().zip(writes) {
        cx.on(key_call).after_write(written);
    }
    Reply::Ints(released)
}
