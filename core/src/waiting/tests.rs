//! The waiting policy against a model: random clients ask for keys (one key
//! in some mode, or a set of plain keys), with or without waiting; holders
//! release; time passes (locks expire); waiters give up. After each event
//! every key that may have freed is served the way the adapter serves it
//! (runs from the head, sets at the head of all their queues, the next
//! heads of a served set's other keys). Checked after every step:
//! - no barging: a newcomer is granted a key only if nobody waits for it;
//! - FIFO per key: a waiter is served only when nobody who arrived before it
//!   still waits on one of its keys (across modes and sets);
//! - sets all or nothing: a set waiter served holds every key of its set,
//!   with one token;
//! - at most one hold per waiter: a waiter is served once, and never while
//!   it already holds one of its keys; a client is never both waiting and
//!   holding;
//! - no starvation: once every holder is gone and time has passed, every
//!   waiter has been served (the queues drain).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use proptest::prelude::*;

use super::*;
use crate::kind::Want;
use crate::memory::Holders;
use crate::queue::WaitSet;

const CLIENTS: u32 = 8;
/// Plain keys (sets are drawn from these), a read-write lock, a semaphore of
/// two permits, and a key asked for as plain or reentrant (a waiter of the
/// other kind is refused when its turn comes).
const PLAIN: [&str; 3] = ["p0", "p1", "p2"];

fn key(name: &str) -> KeyId {
    (0, name.as_bytes().to_vec())
}

fn owner(client: u32) -> Vec<u8> {
    format!("c{client}").into_bytes()
}

#[derive(Clone, Debug)]
enum Ask {
    One(&'static str, Want),
    Set(Vec<&'static str>),
}

#[derive(Clone, Debug)]
enum Op {
    Ask { client: u32, ask: Ask, ttl: i64, wait: bool },
    Release { client: u32 },
    Advance { ms: i64 },
    Leave { client: u32 },
}

fn ask() -> impl Strategy<Value = Ask> {
    let one = prop_oneof![
        (0usize..3).prop_map(|i| Ask::One(PLAIN[i], Want::plain())),
        prop_oneof![Just(Want::read()), Just(Want::write())].prop_map(|want| Ask::One("rw", want)),
        Just(Ask::One("sem", Want::permit(2))),
        prop_oneof![Just(Want::plain()), Just(Want::reentrant())].prop_map(|want| Ask::One("kind", want)),
    ];
    let set = proptest::sample::subsequence(PLAIN.to_vec(), 2..=3).prop_map(Ask::Set);
    prop_oneof![3 => one, 1 => set]
}

fn op() -> impl Strategy<Value = Op> {
    let client = 0u32..CLIENTS;
    prop_oneof![
        4 => (client.clone(), ask(), 5i64..60, proptest::bool::weighted(0.8))
            .prop_map(|(client, ask, ttl, wait)| Op::Ask { client, ask, ttl, wait }),
        2 => client.clone().prop_map(|client| Op::Release { client }),
        2 => (0i64..40).prop_map(|ms| Op::Advance { ms }),
        1 => client.prop_map(|client| Op::Leave { client }),
    ]
}

/// The node as the adapter keeps it: the stored locks, the waiting state,
/// the fencing counter; and what the checks need.
struct Sim {
    now: i64,
    locks: BTreeMap<KeyId, Holders>,
    fencer: Fencer,
    waiting: Waiting<u32, u32>,
    /// Arrival order of the queued waiters (they all enter at the tail).
    arrived: HashMap<u32, u64>,
    arrivals: u64,
    /// Keys each client was granted (its token per key).
    holds: HashMap<u32, BTreeMap<KeyId, u64>>,
}

impl Sim {
    fn new() -> Sim {
        Sim {
            now: 1_000_000,
            locks: BTreeMap::new(),
            fencer: Fencer::new(0),
            waiting: Waiting::default(),
            arrived: HashMap::new(),
            arrivals: 0,
            holds: HashMap::new(),
        }
    }

    fn lock(&self, key: &KeyId) -> Holders {
        self.locks.get(key).cloned().unwrap_or_else(Holders::free)
    }

    /// Runs `f` on a transaction over `key` and stores its changes.
    fn on_key<T>(
        &mut self,
        key: &KeyId,
        f: impl FnOnce(&mut Txn<'_, '_, Holders>, &mut Fencer, &mut Waiting<u32, u32>) -> T,
    ) -> T {
        let stored = self.lock(key);
        let mut txn = Txn::new(&stored, self.now, 0);
        let out = f(&mut txn, &mut self.fencer, &mut self.waiting);
        let after = stored.apply(&txn.finish());
        self.locks.insert(key.clone(), after);
        out
    }

    fn busy(&self, client: u32) -> bool {
        self.arrived.contains_key(&client) || self.holds.get(&client).is_some_and(|h| !h.is_empty())
    }

    fn ask(&mut self, client: u32, ask: Ask, ttl: i64, wait: bool) {
        if self.busy(client) {
            return;
        }
        let who = owner(client);
        let keys: WaitSet = match &ask {
            Ask::One(name, want) => std::iter::once((key(name), *want)).collect(),
            Ask::Set(names) => names.iter().map(|n| (key(n), Want::plain())).collect(),
        };
        // The command: a grant where the policy admits a newcomer.
        let stored: Vec<Holders> = keys.iter().map(|(k, _)| self.lock(k)).collect();
        let mut txns: Vec<Txn<'_, '_, Holders>> = stored.iter().map(|s| Txn::new(s, self.now, 0)).collect();
        let queued: Vec<usize> = keys.iter().map(|(k, _)| self.waiting.queues.len(k)).collect();
        let admissions: Vec<Admission> = queued.iter().map(|&q| admission(false, q)).collect();
        let wants: Vec<Want> = keys.iter().map(|&(_, w)| w).collect();
        let grant = lock::acquire_all(&mut txns, &wants, &who, ttl, &admissions, &mut self.fencer);
        let changes: Vec<_> = txns.into_iter().map(Txn::finish).collect();
        for (((k, _), s), c) in keys.iter().zip(&stored).zip(&changes) {
            self.locks.insert(k.clone(), s.apply(c));
        }
        match grant {
            AllGrant::Granted(fence) => {
                for ((k, _), q) in keys.iter().zip(&queued) {
                    assert_eq!(*q, 0, "no barging: {who:?} granted {k:?} while {q} waited");
                }
                self.granted(client, &keys, fence);
            }
            AllGrant::Renewed(_) => panic!("client {client} renewed a lock it did not hold"),
            AllGrant::Refused { why: Grant::Busy, .. } if wait => {
                let waiter = Waiter {
                    handle: client,
                    keys,
                    owner: owner(client),
                    ttl_ms: ttl,
                    timeout_at_ms: None,
                    since_ms: self.now,
                };
                if self.waiting.push(waiter, 1000).is_ok() {
                    self.arrivals += 1;
                    self.arrived.insert(client, self.arrivals);
                }
            }
            _ => {}
        }
    }

    fn granted(&mut self, client: u32, keys: &WaitSet, fence: u64) {
        let held = self.holds.entry(client).or_default();
        for (k, _) in keys {
            assert!(held.insert(k.clone(), fence).is_none(), "client {client} served twice on {k:?}");
        }
    }

    /// A waiter was served: nobody who arrived before it still waits on one
    /// of its keys, and it holds every key of its set with one token.
    fn served(&mut self, served: Served<u32>) {
        let client = served.waiter.handle;
        let arrived = self.arrived.remove(&client).expect("served a waiter that was queued");
        for (k, _) in &served.waiter.keys {
            for other in self.waiting.queues.waiters(k) {
                let theirs = self.arrived[&other.handle];
                assert!(
                    theirs > arrived,
                    "FIFO: client {client} (#{arrived}) served on {k:?} before #{theirs}"
                );
            }
        }
        let Ok(fence) = served.outcome else { return };
        for (k, _) in &served.waiter.keys {
            let hold = self.lock(k).hold(&served.waiter.owner);
            assert_eq!(hold.map(|h| h.fence), Some(fence), "all or nothing: {k:?} of client {client}'s set");
        }
        self.granted(client, &served.waiter.keys, fence);
    }

    /// What the adapter does for a key that may have freed: serve runs from
    /// its head, a set waiter at its head when it heads all its queues, and
    /// then the other keys of a set served.
    fn serve(&mut self, first: KeyId) {
        let mut todo = vec![first];
        let mut rounds = 0;
        while let Some(key) = todo.pop() {
            loop {
                rounds += 1;
                assert!(rounds < 10_000, "serving does not end");
                let Some(head) = self.waiting.queues.peek(&key).map(|w| (w.handle, w.is_set())) else {
                    break;
                };
                if !head.1 {
                    let (served, end) = self.on_key(&key, |txn, fencer, waiting| {
                        let (served, end) = serve_run(&mut waiting.queues, &key, txn, fencer);
                        for s in &served {
                            waiting.forget_timeout(&s.waiter);
                        }
                        (served, end)
                    });
                    let any = !served.is_empty();
                    for s in served {
                        self.served(s);
                    }
                    match end {
                        RunEnd::AtSet(_) => continue,
                        RunEnd::Empty | RunEnd::RetryAt(_) if any => continue,
                        RunEnd::Empty | RunEnd::RetryAt(_) => break,
                    }
                }
                let Some(waiter) = ready_set(&self.waiting.queues, head.0) else { break };
                let stored: Vec<Holders> = waiter.keys.iter().map(|(k, _)| self.lock(k)).collect();
                let mut txns: Vec<Txn<'_, '_, Holders>> =
                    stored.iter().map(|s| Txn::new(s, self.now, 0)).collect();
                let decision = serve_set(&waiter, &mut txns, &mut self.fencer);
                let changes: Vec<_> = txns.into_iter().map(Txn::finish).collect();
                for (((k, _), s), c) in waiter.keys.iter().zip(&stored).zip(&changes) {
                    self.locks.insert(k.clone(), s.apply(c));
                }
                let outcome = match decision {
                    SetDecision::Wait(_) => break,
                    SetDecision::Granted(fence) => Ok(fence),
                    SetDecision::Refused { why, .. } => Err(why),
                };
                let (waiter, _) = self.waiting.remove(waiter.handle).expect("queued");
                todo.extend(waiter.keys.iter().map(|(k, _)| k.clone()).filter(|k| *k != key));
                self.served(Served { waiter, outcome });
            }
        }
    }

    fn serve_all(&mut self) {
        let keys: BTreeSet<KeyId> = self.waiting.queues.keys_in(-1).into_iter().collect();
        for k in keys {
            self.serve(k);
        }
    }

    fn release(&mut self, client: u32) {
        let who = owner(client);
        let Some(held) = self.holds.remove(&client) else { return };
        for k in held.keys() {
            let stored = self.lock(k);
            let mut txn = Txn::new(&stored, self.now, 0);
            lock::release(&mut txn, &who);
            let after = stored.apply(&txn.finish());
            self.locks.insert(k.clone(), after);
        }
        for k in held.into_keys() {
            self.serve(k);
        }
    }

    fn advance(&mut self, ms: i64) {
        self.now += ms;
        // Locks that ran out are gone for their holders.
        let now = self.now;
        let locks = &self.locks;
        for held in self.holds.values_mut() {
            held.retain(|k, fence| {
                locks
                    .get(k)
                    .is_some_and(|l| l.holders().iter().any(|(_, h)| h.fence == *fence && h.is_live(now)))
            });
        }
        self.serve_all();
    }

    fn leave(&mut self, client: u32) {
        if let Some((_, headed)) = self.waiting.remove(client) {
            self.arrived.remove(&client);
            for k in headed {
                self.serve(k);
            }
        }
    }

    /// Everyone holding releases and time runs past every TTL, until nobody
    /// waits: the queues must drain.
    fn drain(&mut self) {
        for _ in 0..(4 * CLIENTS as usize + 4) {
            let holders: Vec<u32> = self.holds.keys().copied().collect();
            for client in holders {
                self.release(client);
            }
            self.advance(100);
            if self.waiting.queues.is_empty() {
                return;
            }
        }
        panic!("starvation: {} waiters never served", self.waiting.queues.total());
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn waiting_is_fifo_fair_all_or_nothing_and_starves_nobody(ops in proptest::collection::vec(op(), 1..120)) {
        let mut sim = Sim::new();
        for op in ops {
            match op {
                Op::Ask { client, ask, ttl, wait } => sim.ask(client, ask, ttl, wait),
                Op::Release { client } => sim.release(client),
                Op::Advance { ms } => sim.advance(ms),
                Op::Leave { client } => sim.leave(client),
            }
            for client in 0..CLIENTS {
                let waits = sim.arrived.contains_key(&client);
                let holds = sim.holds.get(&client).is_some_and(|h| !h.is_empty());
                prop_assert!(!(waits && holds), "client {} both waits and holds", client);
                prop_assert_eq!(waits, sim.waiting.queues.get(client).is_some());
            }
        }
        sim.drain();
    }
}

#[test]
fn admission_refuses_newcomers_while_anyone_waits_or_the_key_is_refused() {
    assert_eq!(admission(false, 0), Admission::Open);
    assert_eq!(admission(false, 1), Admission::Queued);
    assert_eq!(admission(true, 0), Admission::Quarantined);
    assert_eq!(admission(true, 5), Admission::Quarantined);
}

#[test]
fn a_head_that_cannot_be_granted_is_looked_at_again_when_a_holder_may_leave() {
    let mut sim = Sim::new();
    sim.ask(0, Ask::One("p0", Want::plain()), 30, false);
    sim.ask(1, Ask::One("p0", Want::plain()), 20, true);
    let (served, end) = sim
        .on_key(&key("p0"), |txn, fencer, waiting| serve_run(&mut waiting.queues, &key("p0"), txn, fencer));
    assert!(served.is_empty());
    assert_eq!(end, RunEnd::RetryAt(1_000_030), "the holder's deadline");
    // A writer behind readers: served when the last reader may leave.
    sim.ask(2, Ask::One("rw", Want::read()), 10, false);
    sim.ask(3, Ask::One("rw", Want::read()), 40, false);
    sim.ask(4, Ask::One("rw", Want::write()), 10, true);
    sim.ask(5, Ask::One("rw", Want::read()), 10, true);
    assert!(!sim.holds.contains_key(&5), "no reader overtakes the queued writer");
    sim.advance(15);
    assert!(!sim.holds.contains_key(&4), "a reader still holds");
    sim.advance(30);
    assert!(sim.holds.get(&4).is_some_and(|h| !h.is_empty()), "the writer, once the readers are gone");
    assert!(sim.arrived.contains_key(&5), "the reader behind it waits for the writer");
}

#[test]
fn waiting_bookkeeping_arms_once_and_times_out_in_order() {
    let mut w: Waiting<u32, u32> = Waiting::default();
    let k = key("k");
    assert_eq!(w.arm(&k, 50), Arm::Start { stop: None });
    w.timer_started(k.clone(), 7, 50);
    assert_eq!(w.arm(&k, 60), Arm::Keep, "an earlier timer serves");
    assert_eq!(w.arm(&k, 40), Arm::Start { stop: Some(7) });
    w.timer_fired(&k, 49);
    assert_eq!(w.disarm(&k), Some(7), "a timer not yet due stays");
    assert_eq!(w.disarm(&k), None);
    w.timer_started(k.clone(), 8, 50);
    w.timer_fired(&k, 50);
    assert_eq!(w.arm(&k, 60), Arm::Start { stop: None }, "a timer that fired is gone");
    let waiter = |h: u32, at: i64| Waiter {
        handle: h,
        keys: std::iter::once((key("k"), Want::plain())).collect(),
        owner: vec![b'a' + h as u8],
        ttl_ms: 10,
        timeout_at_ms: Some(at),
        since_ms: 0,
    };
    w.push(waiter(1, 300), 10).unwrap();
    w.push(waiter(2, 100), 10).unwrap();
    w.push(waiter(3, 200), 10).unwrap();
    assert_eq!(w.arm_timeouts(100), Arm::Start { stop: None });
    w.timeout_timer_started(9, 100);
    assert_eq!(w.arm_timeouts(150), Arm::Keep);
    assert_eq!(w.arm_timeouts(50), Arm::Start { stop: Some(9) }, "a timer firing too late is replaced");
    let (first, _) = w.remove(3).unwrap();
    assert_eq!(first.handle, 3);
    assert_eq!(w.timed_out(250), (vec![2], Some(300)), "3 left before its timeout");
    assert_eq!(w.timed_out(300), (vec![1], None));
}
