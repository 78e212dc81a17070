//! `LOCK.MACQUIRE token ttl-ms numkeys key [key ...] [WAIT timeout-ms]
//! [MODES mode [mode ...]]`: every key granted to `token` with one fencing
//! token, or none (see `core::lock::acquire_all`); with `WAIT`, waits for
//! the whole set without holding any of it. Parser:
//! `core::args::acquire_all`.

use lock_protocol::command as names;
use super::key_flags::{RW, UPDATE};
use super::{grant, Command, Cx};
use crate::core::args::{self, MULTI_FIRST_KEY};
use crate::core::kind::Want;
use crate::core::lock::{self, Admission, AllGrant, Grant};
use crate::core::quarantine::Refusal;
use crate::core::syntax::{Arg, common::{TOKEN, TTL_MS, WAIT, KEYS}};
use crate::errors;
use crate::ffi::{Call, Keys, Reply};
use crate::grants;
use crate::keystate;
use crate::waiting as wait;

pub const COMMAND: Command = Command {
    name: names::MACQUIRE,
    args: &[TOKEN, TTL_MS, Arg::integer(c"numkeys"), KEYS, WAIT, Arg::option(c"MODES", Arg::string(c"mode").repeated())],
    complexity: c"O(N) where N is the number of keys",
    flags: c"write deny-oom getkeys-api",
    acl: c"write slow blocking",
    arity: -5,
    // The number of keys is argument 3 (declared as a `keynum` key spec and
    // answered through the getkeys API: Redis 7.0's cluster routing reads
    // only the legacy triple, which cannot express a count).
    keys: Keys::Counted { at: (MULTI_FIRST_KEY - 1) as i32 },
    key_flags: RW | UPDATE,
    summary: c"Take every lock of a set or none; reply: one fencing token or nil",
    run,
};

fn run(cx: &Cx<'_>, argv: &[&[u8]]) -> Reply {
    let request = match args::acquire_all(argv, cx.node.settings.limits()) {
        Ok(request) => request,
        Err(e) => return cx.rejected(&e),
    };
    let calls: Vec<Call<'_>> = (0..request.wants.len()).map(|at| cx.call.for_arg(MULTI_FIRST_KEY + at)).collect();
    let wait_ms = request.wait_ms.filter(|_| !cx.call.cannot_block());
    let mut next_free = Vec::new();
    // Asked once the keys are open (see `grant::grant`).
    let mut refusals: Vec<Option<Refusal>> = Vec::new();
    let result = keystate::transact_all(&calls, cx.node, cx.now_ms, |txns| {
        refusals = calls.iter().map(|c| cx.on(c).refusal()).collect();
        let admissions: Vec<Admission> =
            calls.iter().zip(&refusals).map(|(c, r)| cx.on(c).admission(r.is_some())).collect();
        let grant = cx.node.with_fencer(|f| {
            lock::acquire_all(txns, &request.wants, request.owner, request.ttl_ms, &admissions, f)
        });
        next_free = txns.iter().map(|t| t.next_free_at_ms()).collect::<Vec<_>>();
        grant
    });
    let (grant, written) = match result {
        Ok(done) => done,
        Err((at, failure)) => {
            let reply = cx.failed(failure);
            return match calls.get(at) {
                Some(key) => super::at_key(reply, at, key),
                None => reply,
            };
        }
    };
    // A refused set may still have removed expired holders.
    for (key_call, written) in calls.iter().zip(written) {
        cx.on(key_call).after_write(written);
    }
    // The refusal the reply names: the set's first, when a key is refused.
    let first_refusal = refusals.iter().flatten().next().cloned();
    match (grant, first_refusal, wait_ms) {
        (AllGrant::Granted(fence), ..) => {
            if let Some(first) = calls.first() {
                cx.node.keep_counter(first, request.owner, cx.now_ms);
            }
            super::watch_for_removal(cx.call, cx.node);
            Reply::Int(grants::counted_token(&cx.node.stats, fence, false))
        }
        (AllGrant::Renewed(fence), ..) => Reply::Int(grants::counted_token(&cx.node.stats, fence, true)),
        (AllGrant::Refused { why: Grant::Quarantined, at }, ..) => match refusals.get(at).cloned().flatten() {
            Some(refusal) => {
                Reply::Error(errors::in_set(&grants::counted_refusal(&cx.node.stats, &refusal), at, key_at(&calls, at)))
            }
            None => Reply::Error(errors::internal()),
        },
        (AllGrant::Refused { why: Grant::Busy, .. }, Some(refusal), Some(_)) => {
            Reply::Error(grants::counted_refusal(&cx.node.stats, &refusal))
        }
        (AllGrant::Refused { why: Grant::Busy, at }, None, wait) => {
            if let Some(busy) = calls.get(at) {
                cx.on(busy).contended();
            }
            let Some(timeout_ms) = wait else { return Reply::Nil };
            let keys = calls.iter().map(Call::key_id).zip(request.wants.iter().copied()).collect();
            wait::wait(cx.call, cx.node, cx.now_ms, grant::new_waiter(keys, request.owner, request.ttl_ms), timeout_ms, &next_free)
        }
        (AllGrant::Refused { why: Grant::Busy, .. }, Some(_), None) => Reply::Nil,
        (AllGrant::Refused { at, why }, ..) => {
            let want = request.wants.get(at).copied().unwrap_or_else(Want::plain);
            match grants::outcome(why, want) {
                grants::Outcome::Refused(line) => cx.refused(errors::in_set(&line, at, key_at(&calls, at))),
                _ => Reply::Error(errors::internal()),
            }
        }
    }
}

/// The name of the set's key at `at` (for an error line).
fn key_at<'c>(calls: &'c [Call<'_>], at: usize) -> &'c [u8] {
    calls.get(at).map_or(&[], Call::key_name)
}
