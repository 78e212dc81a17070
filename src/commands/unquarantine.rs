//! `LOCK.UNQUARANTINE <STARTUP | PROMOTION | IMPORTS>`: an operator ends the node's
//! start-up or promotion quarantine in force now, once (a brand-new node
//! forgot nothing). It must name the quarantine it means, so that a step
//! meant for a new node cannot end a failover's. Nothing else changes: the
//! settings stay as they are, so the next start or promotion is
//! quarantined again (where `CONFIG SET lock.quarantine-ms 0` would turn
//! the protection off for good). Counted (`lock_quarantines_ended`) and
//! logged at warning level with the client that asked. Not replicated as
//! itself (a quarantine is the node's own); its end is written into the
//! AOF as `LOCK.QUARANTINED NODE 0`, so that a start from that AOF does
//! not go on with it. Reply: the milliseconds the quarantine
//! had left. Parser: `core::args::quarantine_reason`.

use lock_protocol::command as names;

use super::{Command, Cx};
use crate::core::args;
use crate::core::quarantine::Reason;
use crate::core::syntax::Arg;
use crate::errors;
use crate::ffi::{Keys, Reply};
use crate::node::NotEnded;

const REASONS: &[Arg] = &[Arg::word(c"STARTUP"), Arg::word(c"PROMOTION"), Arg::word(c"IMPORTS")];

pub const COMMAND: Command = Command {
    name: names::UNQUARANTINE,
    args: &[Arg::one_of(c"reason", REASONS)],
    complexity: c"O(1)",
    flags: c"admin deny-script fast",
    acl: c"admin dangerous fast",
    arity: 2,
    keys: Keys::None,
    key_flags: 0,
    summary: c"End the node's start-up or promotion quarantine in force now, once (an operator's act on a node that forgot nothing); reply: the ms it had left. IMPORTS: end the waits of the slots this node took (a brand-new cluster); reply: how many",
    run,
};

fn run(cx: &Cx<'_>, argv: &[&[u8]]) -> Reply {
    if let [_, word] = argv {
        if word.eq_ignore_ascii_case(b"IMPORTS") {
            return end_slot_waits(cx);
        }
    }
    let reason = match args::quarantine_reason(argv) {
        Ok(reason) => reason,
        Err(e) => return cx.rejected(&e),
    };
    match cx.node.end_quarantine(reason, cx.now_ms) {
        Ok(left) => {
            redis_module::logging::log_warning(format!(
                "lock: LOCK.UNQUARANTINE {} by {}: the {} quarantine ended with {left} ms left; new grants \
                 are allowed now. Nothing else changed: a later {} is quarantined again ({} ms, \
                 lock.quarantine-ms {})",
                reason.name().to_ascii_uppercase(),
                cx.call.client_label(),
                reason.name(),
                match reason {
                    Reason::Startup => "start",
                    Reason::Promotion => "promotion",
                },
                cx.node.quarantine_length_ms(),
                cx.node.settings.quarantine_ms.get(),
            ));
            // The AOF's record of the quarantine says it ended.
            crate::ffi::schedule_records();
            Reply::Int(left)
        }
        Err(NotEnded::NoneInForce) => cx.refused(errors::no_quarantine()),
        Err(NotEnded::OtherReason(in_force, left)) => {
            cx.refused(errors::other_quarantine(in_force, reason, left))
        }
    }
}

/// `LOCK.UNQUARANTINE IMPORTS`: the slots' waits after `CLUSTER ADDSLOTS`
/// on a brand-new cluster (or an import) end; a slot a node took from
/// another that issued tokens may then grant below them. Logged, counted
/// with the other ends, and written into the AOF.
fn end_slot_waits(cx: &Cx<'_>) -> Reply {
    let ended = cx.node.end_slot_waits(cx.now_ms);
    if ended > 0 {
        redis_module::logging::log_warning(format!(
            "lock: LOCK.UNQUARANTINE IMPORTS by {}: the waits of {ended} slots taken by this node ended; \
             new locks there are granted at once",
            cx.call.client_label()
        ));
        cx.node.stats.quarantines_ended.bump();
        crate::ffi::schedule_records();
    }
    Reply::Int(i64::try_from(ended).unwrap_or(i64::MAX))
}
