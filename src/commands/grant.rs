//! The grant path shared by the single-key grant commands (LOCK.ACQUIRE,
//! LOCK.ENTER, LOCK.SHARED, LOCK.EXCLUSIVE, LOCK.SEMAPHORE): one
//! transaction, then the outcome as a reply, or a wait.

use super::Cx;
use crate::core::args::{Acquire, ArgError};
use crate::core::kind::Want;
use crate::core::lock;
use crate::core::queue::{WaitSet, Waiter};
use crate::ffi::Reply;
use crate::grants::{self, Outcome};
use crate::waiting as wait;

/// Grants `want` to the parsed request, or answers the parse error.
pub fn parsed(cx: &Cx<'_>, parsed: Result<Acquire<'_>, ArgError>, want: Want) -> Reply {
    match parsed {
        Ok(request) => grant(cx, request, want),
        Err(e) => cx.rejected(&e),
    }
}

/// One grant of the call's key: a token, nil (held), a wait (`WAIT`), or
/// the reason it is refused.
pub fn grant(cx: &Cx<'_>, request: Acquire<'_>, want: Want) -> Reply {
    // WAIT blocks only where a client may block (not in MULTI or a script).
    let wait_ms = request.wait_ms.filter(|_| !cx.call.cannot_block());
    // Asked once the key is open: opening it may have expired it (Redis'
    // lazy expiry), which may have quarantined it.
    let mut refusal = None;
    let result = crate::keystate::transact(cx.call, cx.node, cx.now_ms, |txn| {
        refusal = cx.refusal();
        let admission = cx.admission(refusal.is_some());
        let grant =
            cx.node.with_fencer(|f| lock::acquire(txn, want, request.owner, request.ttl_ms, admission, f));
        (grant, txn.next_free_at_ms())
    });
    let ((grant, next_free_ms), written, key) = match result {
        Ok(done) => done,
        Err(failure) => return cx.failed(failure),
    };
    drop(key);
    cx.after_write(written);
    match (grants::outcome(grant, want), refusal, wait_ms) {
        (Outcome::Token { fence, renewed }, ..) => {
            if !renewed {
                cx.node.keep_counter(cx.call, request.owner, cx.now_ms);
                super::watch_for_removal(cx.call, cx.node);
            }
            Reply::Int(grants::counted_token(&cx.node.stats, fence, renewed))
        }
        // While new grants are refused, waiting would only block the caller
        // for the whole period: refuse at once.
        (Outcome::NotNow { refused: true }, Some(refusal), _)
        | (Outcome::NotNow { refused: false }, Some(refusal), Some(_)) => {
            Reply::Error(grants::counted_refusal(&cx.node.stats, &refusal))
        }
        (Outcome::NotNow { refused: true }, None, _) => Reply::Error(crate::errors::internal()),
        (Outcome::NotNow { refused: false }, None, Some(timeout_ms)) => {
            cx.contended();
            let keys: WaitSet = std::iter::once((cx.call.key_id(), want)).collect();
            // The hand-off timer must fire when a holder may leave.
            wait::wait(
                cx.call,
                cx.node,
                cx.now_ms,
                new_waiter(keys, request.owner, request.ttl_ms),
                timeout_ms,
                &[next_free_ms],
            )
        }
        (Outcome::NotNow { refused: false }, _, None) => {
            cx.contended();
            Reply::Nil
        }
        (Outcome::Refused(line), ..) => cx.refused(line),
    }
}

/// What a client about to wait asked for (the hand-off fills in the rest).
pub fn new_waiter(keys: WaitSet, owner: &[u8], ttl_ms: i64) -> Waiter<()> {
    Waiter { handle: (), keys, owner: owner.to_vec(), ttl_ms, timeout_at_ms: None, since_ms: 0 }
}
