//! `LOCK.REVOKE key`: an operator frees a lock without its token (a holder
//! that died with a long TTL, a stuck semaphore, a value that is not one
//! this module wrote). Every holder's grant ends at once, the key is
//! deleted (replicated as `DEL`), waiters are served, and any quarantine of
//! the key ends: the operator declares its locks gone. Counted, and logged
//! with the holders and the time each had left. The fencing counter is
//! untouched: the next grant's token is above the revoked ones, so a
//! resource that checks tokens refuses a revoked holder that goes on.
//! Reply: 1 if the key held a lock (of any kind, or a lock value this
//! module did not write) and it is gone, 0 if it held none. Use it instead
//! of `DEL`, which the module treats as a lock forgotten (the key is
//! quarantined until the lock's deadline). Parser: `core::args::key_only`.

use lock_protocol::command as names;
use super::key_flags::{DELETE, RW};
use super::{Command, Cx};
use crate::core::args;
use crate::core::txn::Stored;
use crate::core::syntax::common::KEY;
use crate::errors;
use crate::ffi::{Keys, Reply};
use crate::keystate::{self, Failure, Loaded, Written};
use crate::waiting as wait;

pub const COMMAND: Command = Command {
    name: names::REVOKE,
    args: &[KEY],
    complexity: c"O(N) where N is the number of holders",
    flags: c"write",
    acl: c"write slow dangerous admin",
    arity: 2,
    keys: Keys::Range(1, 1),
    key_flags: RW | DELETE,
    summary: c"Free a lock without its token (an operator's deliberate release); reply: 1 or 0",
    run,
};

fn run(cx: &Cx<'_>, argv: &[&[u8]]) -> Reply {
    if let Err(e) = args::key_only(argv) {
        return cx.rejected(&e);
    }
    let Some(mut key) = cx.call.open_key(true) else { return Reply::Error(errors::write_failed()) };
    let now = cx.now_ms;
    let (holders, what) = match keystate::load(&key, &cx.node.rules(now)) {
        Ok(Loaded::Free(_)) => (0, String::new()),
        Ok(lock) => {
            let holders = Stored::holders(&lock);
            let what = holders
                .iter()
                .map(|(owner, h)| {
                    format!(
                        "{} (token {}, {} ms left)",
                        String::from_utf8_lossy(owner),
                        h.fence,
                        h.deadline_ms.saturating_sub(now).max(0)
                    )
                })
                .collect::<Vec<_>>()
                .join(", ");
            (holders.len(), what)
        }
        Err(Failure::TooFar { ahead_ms, .. }) => {
            (0, format!("a lock value this module did not write (deadline {ahead_ms} ms ahead)"))
        }
        Err(failure) => return cx.failed(failure),
    };
    let removed = !what.is_empty() || holders > 0;
    if removed && !key.delete() {
        return Reply::Error(errors::write_failed());
    }
    drop(key);
    let ended = cx.node.end_key_quarantine(cx.call.db(), cx.call.key_name());
    if removed || ended {
        if removed {
            cx.node.stats.revoked.bump();
        }
        redis_module::logging::log_notice(format!(
            "lock: LOCK.REVOKE of '{}' (db {}): {}{}",
            String::from_utf8_lossy(cx.call.key_name()),
            cx.call.db(),
            if removed { format!("removed {what}") } else { "no lock held".into() },
            if ended { "; its quarantine ended" } else { "" }
        ));
    }
    if removed {
        cx.after_write(Written { freed: true, found_expired: false });
    } else if ended {
        let _ = wait::serve_key(cx.call, cx.node, now);
    }
    Reply::Int(i64::from(removed))
}
