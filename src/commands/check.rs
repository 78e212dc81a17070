//! `LOCK.CHECK key fencing-token`: 1 if that token is a current, live grant
//! of the key, else 0 (a resource server's check before acting, Chubby's
//! CheckSequencer). Parser: `core::args::check`.

use lock_protocol::command as names;
use super::key_flags::{ACCESS, RO};
use super::{Command, Cx};
use crate::core::args;
use crate::core::lock;
use crate::core::syntax::{Arg, common::KEY};
use crate::ffi::{Keys, Reply};

pub const COMMAND: Command = Command {
    name: names::CHECK,
    args: &[KEY, Arg::integer(c"fencing-token")],
    complexity: c"O(1)",
    flags: c"readonly fast",
    acl: c"read fast",
    arity: 3,
    keys: Keys::Range(1, 1),
    key_flags: RO | ACCESS,
    summary: c"Is this fencing token the current grant of key? reply: 1 or 0",
    run,
};

fn run(cx: &Cx<'_>, argv: &[&[u8]]) -> Reply {
    let fence = match args::check(argv) {
        Ok(fence) => fence,
        Err(e) => return cx.rejected(&e),
    };
    cx.read(|lock| Reply::Int(i64::from(lock::is_current(lock, fence, cx.now_ms)))).unwrap_or_else(|reply| reply)
}
