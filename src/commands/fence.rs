//! `LOCK.FENCE key token floor`: while `token` holds the key, raises this
//! node's fencing counter to at least `floor` and records `floor` as the
//! holder's token (lower or higher than its own: see `core::lock::fence`
//! for why that keeps fencing). Reply: 1, or 0 if `token` does not hold
//! it. Used by the quorum client's fencing round. Parser:
//! `core::args::fence`.

use lock_protocol::command as names;
use super::key_flags::{ACCESS, RW};
use super::{Command, Cx};
use crate::core::args;
use crate::core::fencing::Fencer;
use crate::core::lock;
use crate::core::syntax::{Arg, common::{KEY, TOKEN}};
use crate::ffi::{Keys, Reply};

pub const COMMAND: Command = Command {
    name: names::FENCE,
    args: &[KEY, TOKEN, Arg::integer(c"floor")],
    complexity: c"O(1)",
    flags: c"write fast",
    acl: c"write fast",
    arity: 4,
    keys: Keys::Range(1, 1),
    key_flags: RW | ACCESS,
    summary: c"Raise this node's fencing counter while holding the lock; reply: 1 or 0",
    run,
};

/// A floor may be at most this far ahead of this node's own clock. The
/// quorum client only raises a node to another node's token, and nodes'
/// clocks are assumed to agree far better than this; a floor beyond it is a
/// bug or an attack that would exhaust the token space.
pub const FENCE_AHEAD_MS_MAX: i64 = 3_600_000;


fn run(cx: &Cx<'_>, argv: &[&[u8]]) -> Reply {
    let floor_max = Fencer::clock_floor(cx.now_ms.saturating_add(FENCE_AHEAD_MS_MAX));
    let request = match args::fence(argv, floor_max) {
        Ok(request) => request,
        Err(e) => return cx.rejected(&e),
    };
    let call = cx.call;
    if call.is_replicated_or_loading() {
        // The master checked the holder when it ran this FENCE; its copy in
        // the replication stream or the AOF only carries the raise (also a
        // grant's counter kept ahead: `Node::keep_counter`), which this
        // node's own AOF then holds too.
        cx.node.with_fencer(|f| f.raise_kept(request.floor));
        // Passed on to this node's own AOF and sub-replicas (ignored while
        // loading).
        call.replicate_verbatim();
        return Reply::Int(1);
    }
    let fenced = match cx.write(|txn| cx.node.with_fencer(|f| lock::fence(txn, request.owner, request.floor, f))) {
        Ok(fenced) => fenced,
        Err(reply) => return reply,
    };
    if fenced {
        // Replicas and the AOF keep the raise, so a promoted replica or a
        // restarted node never issues a token at or below the floor.
        cx.node.with_fencer(|f| f.raise_kept(request.floor));
        call.replicate_verbatim();
    }
    Reply::Int(i64::from(fenced))
}
