//! `LOCK.CONTENDED [COUNT count]`: this node's most contended keys lately
//! (grants refused or queued because the key was held or had waiters), the
//! most contended first. Counts halve every minute; `error` bounds how much
//! a count may overstate (see `core/src/hotkeys.rs`). Only keys the caller's
//! ACL user may read are listed (a key longer than 128 bytes is checked
//! by the first 128 bytes it is listed with). Parser:
//! `core::args::list_count`.

use lock_protocol::command as names;
use super::{Command, Cx};
use crate::core::args;
use crate::core::hotkeys::SLOTS;
use crate::core::syntax::common::COUNT;
use crate::ffi::{Field, Keys, Reply};

pub const COMMAND: Command = Command {
    name: names::CONTENDED,
    args: &[COUNT],
    complexity: c"O(1)",
    flags: c"readonly fast",
    acl: c"read fast",
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
    // The key names shown are the ones the caller may read (the command
    // takes no key, so no ACL key pattern guards it otherwise). The list is
    // cut to `count` after filtering: every slot is looked at.
    let reader = cx.call.key_reader();
    let rows = cx
        .node
        .stats
        .most_contended(SLOTS, cx.now_ms)
        .into_iter()
        .filter(|hot| reader.may_read(&hot.key))
        .take(count)
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
