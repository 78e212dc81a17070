//! Property tests: random operation sequences against the pure state machine
//! with a fake clock, checked against a small reference model and the safety
//! invariants of SPEC.md (one holder, only the holder acts, expired = free,
//! fencing tokens strictly increase).

use proptest::prelude::*;

use super::codec;
use super::fencing::Fencer;
use super::lock::{self, Grant, Kind, Lock, Step};

#[derive(Clone, Debug)]
enum Op {
    Acquire { owner: u8, ttl: i64 },
    Enter { owner: u8, ttl: i64 },
    Release { owner: u8 },
    Exit { owner: u8 },
    Extend { owner: u8, ttl: i64 },
    Advance { ms: i64 },
}

fn op() -> impl Strategy<Value = Op> {
    let owner = 0u8..3;
    let ttl = 1i64..50;
    prop_oneof![
        (owner.clone(), ttl.clone()).prop_map(|(owner, ttl)| Op::Acquire { owner, ttl }),
        (owner.clone(), ttl.clone()).prop_map(|(owner, ttl)| Op::Enter { owner, ttl }),
        owner.clone().prop_map(|owner| Op::Release { owner }),
        owner.clone().prop_map(|owner| Op::Exit { owner }),
        (owner, ttl).prop_map(|(owner, ttl)| Op::Extend { owner, ttl }),
        (0i64..40).prop_map(|ms| Op::Advance { ms }),
    ]
}

/// The reference: who holds, until when, how many holds, which token.
#[derive(Clone, Debug, Default)]
struct Model {
    holder: Option<(Kind, u8, i64, u32, u64)>,
}

impl Model {
    fn live(&self, now: i64) -> Option<(Kind, u8, i64, u32, u64)> {
        self.holder.filter(|h| now < h.2)
    }
}

/// The stored bytes, as the adapter keeps them (round-tripped through the
/// codec on every step, like the real key).
struct Store {
    bytes: Option<Vec<u8>>,
}

impl Store {
    fn current(&self) -> Option<Lock<'_>> {
        self.bytes.as_deref().map(|b| codec::decode(b).expect("stored bytes decode"))
    }

    fn apply(&mut self, change: Change) {
        if let Some(bytes) = change {
            self.bytes = bytes;
        }
    }
}

/// A step with its value encoded, so it no longer borrows the store:
/// `None` keeps, `Some(None)` deletes, `Some(Some(v))` writes.
type Change = Option<Option<Vec<u8>>>;

fn owned(step: Step<'_>) -> Change {
    match step {
        Step::Keep => None,
        Step::Delete => Some(None),
        Step::Write(l) => Some(Some(codec::encode(&l))),
    }
}

const OWNERS: [&[u8]; 3] = [b"alice", b"bob", b"carol"];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn machine_matches_model(ops in proptest::collection::vec(op(), 1..120)) {
        let mut now = 1_000i64;
        let mut fencer = Fencer::new(0);
        let mut store = Store { bytes: None };
        let mut model = Model::default();
        let mut last_grant_token = 0u64;

        for op in ops {
            let live = model.live(now);
            match op {
                Op::Advance { ms } => now += ms,
                Op::Acquire { owner, ttl } | Op::Enter { owner, ttl } => {
                    let kind = if matches!(op, Op::Acquire { .. }) { Kind::Plain } else { Kind::Reentrant };
                    // The adapter answers WRONGTYPE for a live lock of the
                    // other kind before calling the machine; an expired one
                    // of the other kind is just free.
                    let stored_kind = store.current().map(|l| l.kind);
                    if stored_kind.is_some_and(|k| k != kind) && live.is_some() {
                        continue;
                    }
                    let current = store.current().filter(|l| l.kind == kind || !l.is_live(now));
                    let out = lock::acquire(current, kind, OWNERS[owner as usize], ttl, now, lock::Admission::Open, &mut fencer);
                    let (reply, change) = (out.reply, owned(out.step));
                    match (live, reply) {
                        (None, Grant::Granted(t)) => {
                            prop_assert!(t > last_grant_token, "tokens must strictly increase");
                            last_grant_token = t;
                            model.holder = Some((kind, owner, now + ttl, 1, t));
                        }
                        (Some((_, h, _, holds, t0)), Grant::Renewed(t)) if h == owner => {
                            prop_assert_eq!(t, t0, "renewal keeps the token");
                            let holds = if kind == Kind::Reentrant { holds + 1 } else { 1 };
                            model.holder = Some((kind, owner, now + ttl, holds, t));
                        }
                        (Some((_, h, ..)), Grant::Busy) => prop_assert_ne!(h, owner),
                        other => prop_assert!(false, "unexpected {:?}", other),
                    }
                    store.apply(change);
                }
                Op::Release { owner } => {
                    let out = lock::release(store.current(), OWNERS[owner as usize], now);
                    let (reply, change) = (out.reply, owned(out.step));
                    let holds_it = live.is_some_and(|h| h.1 == owner);
                    prop_assert_eq!(reply, holds_it);
                    if holds_it { model.holder = None; }
                    store.apply(change);
                }
                Op::Exit { owner } => {
                    if store.current().is_some_and(|l| l.kind != Kind::Reentrant) && live.is_some() {
                        continue;
                    }
                    let out = lock::exit(store.current(), OWNERS[owner as usize], None, now);
                    let (reply, change) = (out.reply, owned(out.step));
                    match live {
                        Some((_, h, d, holds, t)) if h == owner => {
                            prop_assert_eq!(reply, Some(holds - 1));
                            model.holder = if holds == 1 { None } else { Some((Kind::Reentrant, h, d, holds - 1, t)) };
                        }
                        _ => prop_assert_eq!(reply, None),
                    }
                    store.apply(change);
                }
                Op::Extend { owner, ttl } => {
                    let out = lock::extend(store.current(), OWNERS[owner as usize], ttl, now);
                    let (reply, change) = (out.reply, owned(out.step));
                    match live {
                        Some((k, h, _, holds, t)) if h == owner => {
                            prop_assert!(reply);
                            model.holder = Some((k, h, now + ttl, holds, t));
                        }
                        _ => prop_assert!(!reply, "only the live holder extends"),
                    }
                    store.apply(change);
                }
            }
            // Invariant: the store and the model agree on the live holder.
            let seen = lock::inspect(store.current(), now).map(|l| (l.kind, l.owner.to_vec(), l.deadline_ms, l.holds, l.fence));
            let want = model.live(now).map(|(k, o, d, h, t)| (k, OWNERS[o as usize].to_vec(), d, h, t));
            prop_assert_eq!(seen, want);
        }
    }
}
