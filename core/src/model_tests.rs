//! Property tests: random operation sequences on one key, of every kind,
//! against the pure state machine with a fake clock, checked against a
//! small reference model and the safety invariants of docs/safety.md (a writer is
//! alone, at most `limit` permits, only a holder acts, an expired hold is
//! gone, fencing tokens strictly increase).
//!
//! Every step is also stored the way the adapter stores it (a string for one
//! holder, a hash of fields for many) and read back, so the stored forms
//! are checked to carry exactly the state the machine decided.

use std::borrow::Cow;
use std::collections::BTreeMap;

use proptest::prelude::*;

use super::codec;
use super::fencing::Fencer;
use super::hashform::{self, HashLock, MapFields};
use super::kind::{ExitId, Hold, Kind, Mode, Shape, Want};
use super::lock::{self, Admission, Exit, Grant};
use super::memory::{Free, Holders};
use super::txn::{Changes, Stored, Txn};

#[derive(Clone, Debug)]
enum Op {
    Acquire {
        want: u8,
        owner: u8,
        ttl: i64,
    },
    Release {
        owner: u8,
    },
    Extend {
        owner: u8,
        ttl: i64,
    },
    Exit {
        owner: u8,
    },
    /// A floor this far from the counter (below it too: a quorum token
    /// under this node's own).
    Fence {
        owner: u8,
        ahead: i64,
    },
    Advance {
        ms: i64,
    },
}

fn want_of(code: u8, limit: u32) -> Want {
    match code {
        0 => Want::plain(),
        1 => Want::reentrant(),
        2 => Want::read(),
        3 => Want::write(),
        _ => Want::permit(limit),
    }
}

fn op() -> impl Strategy<Value = Op> {
    let owner = 0u8..4;
    let ttl = 1i64..60;
    prop_oneof![
        3 => (0u8..5, owner.clone(), ttl.clone()).prop_map(|(want, owner, ttl)| Op::Acquire { want, owner, ttl }),
        1 => owner.clone().prop_map(|owner| Op::Release { owner }),
        1 => (owner.clone(), ttl).prop_map(|(owner, ttl)| Op::Extend { owner, ttl }),
        1 => owner.clone().prop_map(|owner| Op::Exit { owner }),
        1 => (owner, -5_000i64..5_000).prop_map(|(owner, ahead)| Op::Fence { owner, ahead }),
        2 => (0i64..40).prop_map(|ms| Op::Advance { ms }),
    ]
}

const OWNERS: [&[u8]; 4] = [b"alice", b"bob", b"carol|x", b"\x00dave"];

/// The reference: the lock's kind and its holders (owner -> hold).
#[derive(Clone, Debug, Default)]
struct Model {
    kind: Option<Kind>,
    limit: u32,
    holders: BTreeMap<u8, Hold>,
}

impl Model {
    fn live(&self, owner: u8, now: i64) -> Option<Hold> {
        self.holders.get(&owner).copied().filter(|h| h.is_live(now))
    }

    /// Holders that still count (live or within the lock-delay).
    fn present(&self, now: i64, cool: i64) -> impl Iterator<Item = (&u8, &Hold)> {
        self.holders.iter().filter(move |(_, h)| now < h.deadline_ms + cool)
    }

    fn forget_gone(&mut self, now: i64, cool: i64) {
        self.holders.retain(|_, h| now < h.deadline_ms + cool);
        if self.holders.is_empty() {
            self.kind = None;
        }
    }
}

/// The key as the adapter stores it.
#[derive(Clone, Debug, Default)]
enum Key {
    #[default]
    Empty,
    String(Vec<u8>),
    Hash(MapFields),
}

impl Key {
    /// Runs `f` on a transaction over what this key stores.
    fn with_txn<T>(
        &self,
        now: i64,
        cool: i64,
        f: impl for<'t> FnOnce(&mut Txn<'_, 't, dyn Stored + '_>) -> T,
    ) -> (T, Changes<'static>) {
        let run = |stored: &dyn Stored| {
            let mut txn = Txn::new(stored, now, cool);
            let out = f(&mut txn);
            (out, txn.finish().into_owned())
        };
        match self {
            Key::Empty => run(&Free),
            Key::String(bytes) => run(&codec::decode_single(bytes).expect("stored string decodes")),
            Key::Hash(map) => run(&HashLock::open(map).expect("stored hash opens")),
        }
    }

    fn store(&mut self, changes: &Changes<'_>) {
        if changes.delete {
            *self = Key::Empty;
            return;
        }
        if changes.is_empty() {
            return;
        }
        let Some(shape) = changes.shape else { return };
        if shape.kind.is_single() {
            let put = changes.puts.last().expect("a one-holder lock that changed has a record to store");
            *self = Key::String(codec::encode_single(shape.kind, &put.owner, &put.hold).as_bytes().to_vec());
        } else {
            let mut map = match std::mem::take(self) {
                Key::Hash(map) => map,
                _ => MapFields::default(),
            };
            map.apply(&hashform::field_edits(changes));
            *self = Key::Hash(map);
        }
    }

    fn holders(&self) -> Vec<(Vec<u8>, Hold)> {
        let mut all = match self {
            Key::Empty => Vec::new(),
            Key::String(bytes) => codec::decode_single(bytes).map(|s| s.holders()).unwrap_or_default(),
            Key::Hash(map) => HashLock::open(map).map(|h| h.holders()).unwrap_or_default(),
        };
        all.sort_by(|a, b| a.0.cmp(&b.0));
        all
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn machine_matches_model(limit in 1u32..4, cool in prop_oneof![Just(0i64), 0i64..30], ops in proptest::collection::vec(op(), 1..150)) {
        let mut now = 1_000i64;
        let mut fencer = Fencer::new(0);
        let mut key = Key::Empty;
        let mut memory = Holders::free();
        let mut model = Model::default();
        let mut last_grant = 0u64;

        for op in ops {
            if let Op::Advance { ms } = op {
                now += ms;
                continue;
            }
            let before = model.clone();
            // What the key holds before the call: a lock of another kind
            // stays in the way until a write removes its last holder.
            let stored_kind = key.with_txn(now, cool, |txn| txn.shape().map(|s| s.kind)).0;
            let counter_before = fencer.last();
            let floor = match &op {
                Op::Fence { ahead, .. } => counter_before.saturating_add_signed(*ahead),
                _ => 0,
            };
            let ((reply, grant), changes) = key.with_txn(now, cool, |txn| match &op {
                Op::Acquire { want, owner, ttl } => {
                    let g = lock::acquire(txn, want_of(*want, limit), OWNERS[*owner as usize], *ttl, Admission::Open, &mut fencer);
                    (format!("{g:?}"), Some(g))
                }
                Op::Release { owner } => (format!("{}", lock::release(txn, OWNERS[*owner as usize])), None),
                Op::Extend { owner, ttl } => (format!("{}", lock::extend(txn, OWNERS[*owner as usize], *ttl)), None),
                Op::Exit { owner } => (format!("{:?}", lock::exit(txn, OWNERS[*owner as usize], None)), None),
                Op::Fence { owner, .. } => {
                    (format!("{}", lock::fence(txn, OWNERS[*owner as usize], floor, &mut fencer)), None)
                }
                Op::Advance { .. } => unreachable!(),
            });
            memory = memory.apply(&changes);
            key.store(&changes);

            // The reference model.
            let kind_before = stored_kind;
            model.forget_gone(now, cool);
            match op {
                Op::Acquire { want, owner, ttl } => {
                    let want = want_of(want, limit);
                    let g = grant.unwrap();
                    match kind_before {
                        Some(k) if k != want.kind => { prop_assert_eq!(g, Grant::WrongKind { found: k }); continue; }
                        _ => {}
                    }
                    if want.kind == Kind::Semaphore && !model.holders.is_empty() && model.limit != want.limit {
                        prop_assert_eq!(g, Grant::LimitMismatch { limit: model.limit });
                        continue;
                    }
                    let mine = model.holders.get(&owner).copied();
                    match (mine, g) {
                        (Some(h), Grant::Renewed(t)) if h.is_live(now) => {
                            prop_assert_eq!(t, h.fence, "a renewal keeps the token");
                            prop_assert_eq!(h.mode, want.mode);
                            let holds = if want.kind == Kind::Reentrant { h.holds + 1 } else { h.holds };
                            model.holders.insert(owner, Hold { deadline_ms: now + ttl, holds, ..h });
                        }
                        (Some(h), Grant::ModeMismatch { held }) if h.is_live(now) => prop_assert_eq!(held, h.mode),
                        (Some(h), Grant::Busy) => prop_assert!(!h.is_live(now), "its own cooling grant"),
                        (None, Grant::Granted(t)) => {
                            prop_assert!(t > last_grant, "tokens strictly increase: {} after {}", t, last_grant);
                            last_grant = t;
                            let present: Vec<Hold> = model.present(now, cool).map(|(_, h)| *h).collect();
                            match want.mode {
                                Mode::Write => prop_assert!(present.is_empty(), "a writer joined {:?}", present),
                                Mode::Read => prop_assert!(present.iter().all(|h| h.mode == Mode::Read)),
                                Mode::Permit => prop_assert!((present.len() as u32) < want.limit),
                            }
                            model.kind = Some(want.kind);
                            model.limit = want.limit;
                            model.holders.insert(owner, Hold::new(want.mode, t, now + ttl));
                        }
                        (None, Grant::Busy) => {
                            let present: Vec<Hold> = model.present(now, cool).map(|(_, h)| *h).collect();
                            let full = match want.mode {
                                Mode::Write => !present.is_empty(),
                                Mode::Read => present.iter().any(|h| h.mode == Mode::Write),
                                Mode::Permit => present.len() as u32 >= want.limit,
                            };
                            prop_assert!(full, "refused a grantable {:?}: {:?}", want, present);
                        }
                        other => prop_assert!(false, "unexpected {:?} for {:?} (model {:?})", other, want, before),
                    }
                }
                Op::Release { owner } => {
                    let held = model.live(owner, now).is_some();
                    prop_assert_eq!(&reply, &held.to_string());
                    if held { model.holders.remove(&owner); }
                }
                Op::Extend { owner, ttl } => {
                    let held = model.live(owner, now);
                    prop_assert_eq!(&reply, &held.is_some().to_string());
                    if let Some(h) = held { model.holders.insert(owner, Hold { deadline_ms: now + ttl, ..h }); }
                }
                Op::Exit { owner } => {
                    let expected = match (kind_before, model.live(owner, now)) {
                        (Some(k), _) if k != Kind::Reentrant => Exit::WrongKind { found: k },
                        (_, Some(h)) => Exit::Left(h.holds - 1),
                        _ => Exit::NotHeld,
                    };
                    prop_assert_eq!(&reply, &format!("{expected:?}"));
                    if let Exit::Left(n) = expected {
                        if n == 0 { model.holders.remove(&owner); } else if let Some(h) = model.holders.get_mut(&owner) { h.holds = n; }
                    }
                }
                Op::Fence { owner, .. } => {
                    let held = model.live(owner, now);
                    prop_assert_eq!(&reply, &held.is_some().to_string());
                    if let (Some(h), Some(stored)) = (held, memory.hold(OWNERS[owner as usize])) {
                        // The floor is the holder's token now, lower or
                        // higher, unless another holder carries it already.
                        let carried = memory.owner_of(floor).is_some_and(|o| *o != *OWNERS[owner as usize]);
                        let expected = if carried { h.fence } else { floor };
                        prop_assert_eq!(stored.fence, expected);
                        prop_assert_eq!(fencer.last(), counter_before.max(floor), "the counter only rises");
                        model.holders.insert(owner, Hold { fence: stored.fence, ..h });
                    }
                }
                Op::Advance { .. } => unreachable!(),
            }
            if model.holders.is_empty() { model.kind = None; }

            // The live holders agree: model, in-memory store, stored form.
            let live = |all: Vec<(Vec<u8>, Hold)>| -> Vec<(Vec<u8>, Hold)> {
                let mut l: Vec<_> = all.into_iter().filter(|(_, h)| h.is_live(now)).collect();
                l.sort_by(|a, b| a.0.cmp(&b.0));
                l
            };
            let expected = live(model.holders.iter().map(|(o, h)| (OWNERS[*o as usize].to_vec(), *h)).collect());
            prop_assert_eq!(&live(memory.holders()), &expected);
            prop_assert_eq!(&live(key.holders()), &expected);
            // Safety at every instant: a writer is alone, permits within the limit.
            let present: Vec<Hold> = model.present(now, cool).map(|(_, h)| *h).collect();
            if present.iter().any(|h| h.mode == Mode::Write) {
                prop_assert_eq!(present.len(), 1);
            }
            if model.kind == Some(Kind::Semaphore) {
                prop_assert!(present.len() as u32 <= model.limit);
            }
        }
    }
}

/// One edit of [`txn_matches_a_map`]: grant or re-grant `owner` (a new
/// token), or remove it.
#[derive(Clone, Debug)]
enum Edit {
    Put(u8),
    Remove(u8),
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// A transaction over a stored group answers every question as a plain
    /// map of the same edits would, below and past the number of edits
    /// where it starts looking owners up through its index (16), and what
    /// it writes turns the stored lock into that map.
    #[test]
    fn txn_matches_a_map(stored_count in 0usize..24, edits in proptest::collection::vec(
        prop_oneof![(0u8..40).prop_map(Edit::Put), (0u8..40).prop_map(Edit::Remove)], 1..80)) {
        let now = 1_000i64;
        let owner = |i: u8| format!("reader-{i:02}").into_bytes();
        let hold = |fence: u64| Hold { mode: Mode::Read, fence, deadline_ms: now + 10_000, holds: 1, exit_id: ExitId::NONE };
        let shape = Shape { kind: Kind::Shared, limit: 0 };
        let records: Vec<(Vec<u8>, Hold)> =
            (0..stored_count as u8).map(|i| (owner(i), hold(u64::from(i) + 1))).collect();
        let stored = Holders::from_records(shape, records.clone());
        let mut model: BTreeMap<Vec<u8>, Hold> = records.into_iter().collect();
        let mut next_fence = 100u64;
        let mut txn = Txn::new(&stored, now, 0);
        for edit in edits {
            match edit {
                Edit::Put(i) => {
                    next_fence += 1;
                    txn.put(Cow::Owned(owner(i)), hold(next_fence), shape);
                    model.insert(owner(i), hold(next_fence));
                }
                Edit::Remove(i) => {
                    txn.remove(Cow::Owned(owner(i)));
                    model.remove(&owner(i));
                }
            }
            prop_assert_eq!(txn.count() as usize, model.len());
            for i in 0..40u8 {
                prop_assert_eq!(txn.hold(&owner(i)), model.get(&owner(i)).copied(), "hold of {}", i);
            }
            for (who, h) in &model {
                prop_assert_eq!(txn.owner_of(h.fence).map(|o| o.into_owned()), Some(who.clone()));
            }
        }
        let changes = txn.finish();
        // Each stored record is deleted at most once, each owner put once.
        let mut removed: Vec<&[u8]> = changes.removes.iter().map(|r| r.owner.as_ref()).collect();
        let mut put: Vec<&[u8]> = changes.puts.iter().map(|p| p.owner.as_ref()).collect();
        for list in [&mut removed, &mut put] {
            let all = list.len();
            list.sort();
            list.dedup();
            prop_assert_eq!(list.len(), all);
        }
        // A put says which stored token it replaces (its index entry is
        // deleted with it), unless the stored record itself is deleted.
        for p in &changes.puts {
            let owner = p.owner.as_ref();
            let replaced = if changes.removes.iter().any(|r| r.owner.as_ref() == owner) {
                None
            } else {
                stored.hold(owner).map(|h| h.fence).filter(|&f| f != p.hold.fence)
            };
            prop_assert_eq!(p.replaces_fence, replaced);
        }
        let after = stored.apply(&changes);
        let mut written: Vec<(Vec<u8>, Hold)> = after.records().to_vec();
        written.sort_by(|a, b| a.0.cmp(&b.0));
        prop_assert_eq!(written, model.into_iter().collect::<Vec<_>>());
    }
}
