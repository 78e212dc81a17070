//! `LOCK.INFO key`: the lock's state: kind, holders (holder, holds, token,
//! TTL left, deadline), waiters. Nil only when a new grant would be made
//! now; a free key that a newcomer would still be refused says why and for
//! how long. Parser: `core::args::key_only`.

use lock_protocol::command as names;
use super::key_flags::{ACCESS, RO};
use super::{Command, Cx};
use crate::core::args;
use crate::core::fencing;
use crate::core::kind::Kind;
use crate::core::lock;
use crate::core::quarantine::Refusal;
use crate::core::txn::Stored;
use crate::core::syntax::common::KEY;
use crate::errors;
use crate::ffi::{Field, Keys, Reply};
use crate::keystate::Loaded;

pub const COMMAND: Command = Command {
    name: names::INFO,
    args: &[KEY],
    complexity: c"O(N) where N is the number of holders",
    flags: c"readonly fast",
    acl: c"read fast",
    arity: 2,
    keys: Keys::Range(1, 1),
    key_flags: RO | ACCESS,
    summary: c"Describe the lock at key; reply: field/value array or nil",
    run,
};

fn run(cx: &Cx<'_>, argv: &[&[u8]]) -> Reply {
    if let Err(e) = args::key_only(argv) {
        return cx.rejected(&e);
    }
    cx.read(|lock| held(cx, lock)).unwrap_or_else(|reply| reply)
}

/// A held lock: one holder's fields, or every holder of a group.
fn held(cx: &Cx<'_>, lock: &Loaded<'_, '_>) -> Reply {
    let now = cx.now_ms;
    let live = lock::live_holders(lock, now);
    let Some(shape) = lock.shape().filter(|_| !live.is_empty()) else { return not_held(cx, lock) };
    let waiters = Field::Int(cx.waiters());
    if let (true, Some((owner, hold))) = (shape.kind.is_single(), live.first()) {
        return Reply::Fields(vec![
            ("kind", Field::Text(shape.kind.name())),
            ("holder", Field::Bytes(owner.clone())),
            ("holds", Field::Int(i64::from(hold.holds))),
            ("fence", Field::Int(fencing::to_reply(hold.fence))),
            ("ttl-ms", Field::Int(hold.remaining_ms(now))),
            ("deadline-ms", Field::Int(hold.deadline_ms)),
            ("waiters", waiters),
        ]);
    }
    let count = Field::Int(i64::try_from(live.len()).unwrap_or(i64::MAX));
    let holders = live
        .into_iter()
        .map(|(owner, hold)| {
            vec![
                ("holder", Field::Bytes(owner)),
                ("mode", Field::Text(hold.mode.name())),
                ("fence", Field::Int(fencing::to_reply(hold.fence))),
                ("ttl-ms", Field::Int(hold.remaining_ms(now))),
                ("deadline-ms", Field::Int(hold.deadline_ms)),
            ]
        })
        .collect();
    let mut fields = vec![("kind", Field::Text(shape.kind.name()))];
    if shape.kind == Kind::Semaphore {
        fields.push(("permits", Field::Int(i64::from(shape.limit))));
    }
    fields.extend([("holds", count), ("waiters", waiters), ("holders", Field::List(holders))]);
    Reply::Fields(fields)
}

/// A key with no live holder: nil when a new grant would be made now; else
/// why not and for how long (`refused-ms` -1: until a setting changes or
/// the queue moves): a quarantine, the eviction guard, an expired holder
/// kept through its lock-delay or the restart grace, or clients queued for
/// the key.
fn not_held(cx: &Cx<'_>, lock: &Loaded<'_, '_>) -> Reply {
    let now = cx.now_ms;
    let waiters = cx.waiters();
    let (code, left_ms, reason) = if let Some(refusal) = cx.refusal() {
        let left_ms = match &refusal {
            Refusal::Node(_, left) | Refusal::Forgotten(_, left) | Refusal::Importing(_, left) => *left,
            Refusal::Evictable(_) => -1,
        };
        (refusal_code(&refusal), left_ms, errors::refused(&refusal))
    } else if let Some(until) = lock::kept_until(lock, now, cx.node.cool_down_ms(now)) {
        match lock::kept_until(lock, now, cx.node.settings.expiry_delay_ms.get()) {
            Some(delay_until) => (
                "lock-delay",
                delay_until.saturating_sub(now),
                "the lock expired without a release; lock.expiry-delay-ms keeps newcomers out until it ends".into(),
            ),
            None => (
                "restart-grace",
                until.saturating_sub(now),
                "the lock was restored from disk at a restart and expired by itself: it is taken over \
                 lock.clock-jump-tolerance-ms after its deadline for a while (the restart grace)"
                    .into(),
            ),
        }
    } else if waiters > 0 {
        ("queued", -1, "clients wait for this key: it goes to the head of the queue, not to a newcomer".into())
    } else {
        return Reply::Nil;
    };
    Reply::Fields(vec![
        ("kind", Field::Text(lock.shape().map_or("none", |shape| shape.kind.name()))),
        ("holds", Field::Int(0)),
        ("waiters", Field::Int(waiters)),
        ("refused", Field::Text(code)),
        ("refused-ms", Field::Int(left_ms)),
        ("reason", Field::Bytes(reason.into_bytes())),
    ])
}

/// The code LOCK.INFO gives a refusal.
fn refusal_code(refusal: &Refusal) -> &'static str {
    match refusal {
        Refusal::Node(reason, _) => reason.name(),
        Refusal::Forgotten(q, _) => q.cause.code(),
        Refusal::Evictable(_) => "evictable",
        Refusal::Importing(..) => "importing",
    }
}
