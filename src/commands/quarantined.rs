//! `LOCK.QUARANTINED NODE until-ms` and `LOCK.QUARANTINED SLOT until-ms
//! slot`: a quarantine as the node started it, written by the module into
//! its AOF and replication stream (from a timer: what starts one, a load, a
//! promotion, a command filter, cannot write). The node's ledger carries
//! the quarantines in force at each rewrite; these records carry the ones
//! that start between rewrites, so that a start from that AOF without a
//! rewrite in between (an `appendfsync` raised to `always` during a
//! quarantine, an importer restarted during its slot's wait) still knows
//! them. A slot record's until-ms is `i64::MAX` while the import runs, and
//! 0 when it did not start. Not for clients: a client's call is refused.
//! Parser: `core::args::quarantined`.

use lock_protocol::command as names;

use super::{Command, Cx};
use crate::core::args::{self, Quarantined};
use crate::core::syntax::Arg;
use crate::errors;
use crate::ffi::{Call, Keys, Reply};
use crate::node::{Node, Record};

const SCOPES: &[Arg] = &[Arg::word(c"NODE"), Arg::word(c"SLOT")];

pub const COMMAND: Command = Command {
    name: names::QUARANTINED,
    args: &[Arg::one_of(c"scope", SCOPES), Arg::integer(c"until-ms"), Arg { optional: true, ..Arg::integer(c"slot") }],
    complexity: c"O(1)",
    flags: c"write fast",
    acl: c"write fast",
    arity: -3,
    keys: Keys::None,
    key_flags: 0,
    summary: c"A quarantine of the node or a slot's wait, as the node started it (written by the module into its AOF and replication stream only)",
    run,
};

fn run(cx: &Cx<'_>, argv: &[&[u8]]) -> Reply {
    let call = cx.call;
    if !call.is_replicated_or_loading() {
        return cx.refused(errors::replication_only());
    }
    let record = match args::quarantined(argv) {
        Ok(record) => record,
        Err(e) => return cx.rejected(&e),
    };
    // Replayed from the AOF at a start, it was written on another process's
    // module clock; received from a master, on the master's.
    let loading = call.is_loading();
    match record {
        // A replica grants nothing, and a promotion quarantines it anyway:
        // only a start from this AOF goes on with the node's quarantine.
        Quarantined::Node { until_ms } if loading => cx.node.written_quarantine(until_ms),
        Quarantined::Node { .. } => {}
        // A replica's promotion quarantines it whole, and a start that may
        // have lost writes does: only a start without one keeps the waits.
        Quarantined::Slot { until_ms, slot } if loading && cx.node.durable_start() => {
            cx.node.restore_slot_wait(slot, until_ms, cx.now_ms)
        }
        Quarantined::Slot { .. } => {}
    }
    // Passed on to this node's own AOF and sub-replicas.
    call.replicate_verbatim();
    Reply::Int(1)
}

/// The records timer: checks that the imports a command filter saw start
/// did start (`CLUSTER NODES`), then writes every quarantine started since
/// the last time into the AOF and the replication stream.
pub fn write_records(call: &Call<'_>, node: &Node) {
    let to_check = node.imports_to_check();
    if !to_check.is_empty() {
        let importing = crate::ffi::importing_slots(call);
        let not_started: Vec<u16> = to_check.into_iter().filter(|s| !importing.contains(s)).collect();
        node.import_not_started(&not_started);
    }
    for record in node.take_records() {
        let mut until = itoa::Buffer::new();
        let mut slot_digits = itoa::Buffer::new();
        match record {
            Record::Node { until_ms } => call.replicate_keyless(c"LOCK.QUARANTINED", &[b"NODE", until.format(until_ms).as_bytes()]),
            Record::Slot { slot, until_ms } => call.replicate_keyless(
                c"LOCK.QUARANTINED",
                &[b"SLOT", until.format(until_ms).as_bytes(), slot_digits.format(slot).as_bytes()],
            ),
        }
    }
}
