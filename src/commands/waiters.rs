//! `LOCK.WAITERS key [COUNT count]`: the clients waiting for the key, head
//! first: position, token, kind, mode, how long each has waited, its timeout
//! left (-1: none), the TTL it asked for, and how many keys it waits for
//! (more than 1: a LOCK.MACQUIRE set). An empty array when nobody waits.
//! Parser: `core::args::list_count`.

use lock_protocol::command as names;
use super::key_flags::{ACCESS, RO};
use super::{Command, Cx};
use crate::core::args;
use crate::core::kind::Want;
use crate::core::syntax::common::{KEY, COUNT};
use crate::ffi::{Field, Keys, Reply};
use crate::waiting as wait;

pub const COMMAND: Command = Command {
    name: names::WAITERS,
    args: &[KEY, COUNT],
    complexity: c"O(N) where N is the number of waiters listed",
    flags: c"readonly",
    acl: c"read slow",
    arity: -2,
    keys: Keys::Range(1, 1),
    key_flags: RO | ACCESS,
    summary: c"List the clients waiting for a lock, head first",
    run,
};

/// Most waiters one call lists (`LOCK.INFO` counts them all).
pub const LIST_MAX: usize = 1000;

fn run(cx: &Cx<'_>, argv: &[&[u8]]) -> Reply {
    let count = match args::list_count(argv, 2, LIST_MAX) {
        Ok(count) => count,
        Err(e) => return cx.rejected(&e),
    };
    if let Err(reply) = cx.read(|_| Reply::Nil) {
        return reply;
    }
    let key = cx.call.key_id();
    let now = cx.now_ms;
    let rows = wait::waiting_for(cx.node, &key, count)
        .into_iter()
        .enumerate()
        .map(|(at, w)| {
            let want = w.want_on(&key).unwrap_or_else(Want::plain);
            vec![
                ("position", Field::Int(i64::try_from(at).unwrap_or(i64::MAX).saturating_add(1))),
                ("token", Field::Bytes(w.owner)),
                ("kind", Field::Text(want.kind.name())),
                ("mode", Field::Text(want.mode.name())),
                ("waited-ms", Field::Int(now.saturating_sub(w.since_ms).max(0))),
                ("timeout-ms", Field::Int(w.timeout_at_ms.map_or(-1, |at| at.saturating_sub(now).max(0)))),
                ("ttl-ms", Field::Int(w.ttl_ms)),
                ("keys", Field::Int(i64::try_from(w.keys.len()).unwrap_or(i64::MAX))),
            ]
        })
        .collect();
    Reply::List(rows)
}
