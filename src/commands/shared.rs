//! `LOCK.SHARED key token ttl-ms [WAIT timeout-ms]`: a read hold of a
//! read-write lock (any number of readers together, each with its own token
//! and TTL). Nil while a writer holds it or anyone waits. Parser:
//! `core::args::acquire`.

use lock_protocol::command as names;
use super::key_flags::{RW, UPDATE};
use super::{grant, Command, Cx};
use crate::core::args;
use crate::core::kind::Want;
use crate::core::syntax::common::{KEY, TOKEN, TTL_MS, WAIT};
use crate::ffi::{Keys, Reply};

pub const COMMAND: Command = Command {
    name: names::SHARED,
    args: &[KEY, TOKEN, TTL_MS, WAIT],
    complexity: c"O(1)",
    flags: c"write deny-oom",
    acl: c"write slow blocking",
    arity: -4,
    keys: Keys::Range(1, 1),
    key_flags: RW | UPDATE,
    summary: c"Take a read (shared) hold of a read-write lock; reply: fencing token or nil",
    run,
};

fn run(cx: &Cx<'_>, argv: &[&[u8]]) -> Reply {
    grant::parsed(cx, args::acquire(argv, cx.node.settings.limits()), Want::read())
}
