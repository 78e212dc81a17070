//! `LOCK.SEMAPHORE key token permits ttl-ms [WAIT timeout-ms]`: one of
//! `permits` permits, each with its own token and TTL. Nil when all are
//! held. Parser: `core::args::semaphore`.

use lock_protocol::command as names;
use super::key_flags::{RW, UPDATE};
use super::{grant, Command, Cx};
use crate::core::args;
use crate::core::kind::Want;
use crate::core::syntax::{Arg, common::{KEY, TOKEN, TTL_MS, WAIT}};
use crate::ffi::{Keys, Reply};

pub const COMMAND: Command = Command {
    name: names::SEMAPHORE,
    args: &[KEY, TOKEN, Arg::integer(c"permits"), TTL_MS, WAIT],
    complexity: c"O(1)",
    flags: c"write deny-oom",
    acl: c"write slow blocking",
    arity: -5,
    keys: Keys::Range(1, 1),
    key_flags: RW | UPDATE,
    summary: c"Take one of a semaphore's permits; reply: fencing token or nil",
    run,
};

fn run(cx: &Cx<'_>, argv: &[&[u8]]) -> Reply {
    match args::semaphore(argv, cx.node.settings.limits()) {
        Ok((permits, request)) => grant::grant(cx, request, Want::permit(permits)),
        Err(e) => cx.rejected(&e),
    }
}
