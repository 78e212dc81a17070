//! `LOCK.CONTENDED [COUNT count]`: this node's most contended keys lately
//! (grants refused or queued because the key was held or had waiters), the
//! most contended first. Counts halve every minute; `error` bounds how much
//! a count may overstate (see `core/hotkeys.rs`). Parser:
//! `core::args::list_count`.

use lock_protocol::command as names;
use super::{Command, Cx};
use crate::core::args;
use crate::core::hotkeys::SLOTS;
use crate::ffi::{Field, Keys, Reply};

pub const COMMAND: Command = Command {
    name: names::CONTENDED,
    usage: "LOCK.CONTENDED [COUNT count]",
    flags: c"readonly fast",
    arity: -1,
    keys: Keys::None,
    key_flags: 0,
    summary: c"The most contended locks of this node lately",
    run,
};

fn run(cx: &Cx<'_>, argv: &[&[u8]]) -> Reply {
    let count = match args::list_count(argv, 1, SLOTS) {
        Ok(count) => count,
        Err(e) => return cx.rejected(&e),
    };
    let rows = cx
        .node
        .stats
        .most_contended(count, cx.now_ms)
        .into_iter()
        .map(|hot| {
            vec![
                ("db", Field::Int(i64::from(hot.db))),
                ("key", Field::Bytes(hot.key)),
                ("truncated", Field::Int(i64::from(hot.truncated))),
                ("count", Field::Int(i64::try_from(hot.count).unwrap_or(i64::MAX))),
                ("error", Field::Int(i64::try_from(hot.error).unwrap_or(i64::MAX))),
            ]
        })
        .collect();
    Reply::List(rows)
}
