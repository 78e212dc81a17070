//! `LOCK.UNQUARANTINE <STARTUP | PROMOTION>`: an operator ends the node's
//! start-up or promotion quarantine in force now, once (a brand-new node
//! forgot nothing). It must name the quarantine it means, so that a step
//! meant for a new node cannot end a failover's. Nothing else changes: the
//! settings stay as they are, so the next start or promotion is
//! quarantined again (where `CONFIG SET lock.quarantine-ms 0` would turn
//! the protection off for good). Counted (`lock_quarantines_ended`) and
//! logged at warning level with the client that asked. Not replicated: a
//! quarantine is the node's own. Reply: the milliseconds the quarantine
//! had left. Parser: `core::args::quarantine_reason`.

use lock_protocol::command as names;

use super::{Command, Cx};
use crate::core::args;
use crate::core::quarantine::Reason;
use crate::core::syntax::Arg;
use crate::errors;
use crate::ffi::{Keys, Reply};
use crate::node::NotEnded;

const REASONS: &[Arg] = &[Arg::word(c"STARTUP"), Arg::word(c"PROMOTION")];

pub const COMMAND: Command = Command {
    name: names::UNQUARANTINE,
    args: &[Arg::one_of(c"reason", REASONS)],
    complexity: c"O(1)",
    flags: c"admin deny-script fast",
    acl: c"admin dangerous fast",
    arity: 2,
    keys: Keys::None,
    key_flags: 0,
    summary: c"End the node's start-up or promotion quarantine in force now, once (an operator's act on a node that forgot nothing); reply: the ms it had left",
    run,
};

fn run(cx: &Cx<'_>, argv: &[&[u8]]) -> Reply {
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
            Reply::Int(left)
        }
        Err(NotEnded::NoneInForce) => cx.refused(errors::no_quarantine()),
        Err(NotEnded::OtherReason(in_force, left)) => {
            cx.refused(errors::other_quarantine(in_force, reason, left))
        }
    }
}
