//! `LOCK.ENTER key owner ttl-ms [WAIT timeout-ms]`: a reentrant lock. The
//! first entry grants a new fencing token; each entry by the same owner adds
//! one hold, resets the TTL and returns the same token. Nil if another owner
//! holds it. Parser: `core::args::acquire`.

use lock_protocol::command as names;
use super::key_flags::{RW, UPDATE};
use super::{grant, Command, Cx};
use crate::core::args;
use crate::core::kind::Want;
use crate::core::syntax::common::{KEY, OWNER, TTL_MS, WAIT};
use crate::ffi::{Keys, Reply};

pub const COMMAND: Command = Command {
    name: names::ENTER,
    args: &[KEY, OWNER, TTL_MS, WAIT],
    complexity: c"O(1)",
    flags: c"write deny-oom",
    acl: c"write slow blocking",
    arity: -4,
    keys: Keys::Range(1, 1),
    key_flags: RW | UPDATE,
    summary: c"Enter a reentrant lock; reply: fencing token or nil",
    run,
};

fn run(cx: &Cx<'_>, argv: &[&[u8]]) -> Reply {
    grant::parsed(cx, args::acquire(argv, cx.node.settings.limits()), Want::reentrant())
}
