//! FIFO queues of waiters, one per lock key, with bounds. Pure: a waiter's
//! handle is an opaque `Copy` value (the adapter uses the blocked client's
//! address), so the queue logic is tested without a server.
//!
//! A waiter waits for one key, or for a set of keys (LOCK.MACQUIRE): it then
//! stands in the queue of every key of its set, entered into all of them at
//! the same instant. Queues only grow at the tail, so every queue lists its
//! waiters in the one order they arrived in on the node; the waiter that
//! arrived first is therefore at the head of every queue it stands in. That
//! is why waiting for sets cannot deadlock: the hand-off grants a set only
//! to a waiter at the head of all its queues, and the oldest waiter always
//! is (see `handoff.rs`).
//!
//! Every operation costs O(k) amortized for a waiter of k keys (O(1) for
//! one key), whatever the queues' lengths: a waiter that leaves from the
//! middle (timeout, disconnect, served through another key) leaves a hole
//! that is skipped when it reaches the head, and a queue with more holes
//! than waiters is compacted.

use std::collections::{HashMap, VecDeque};
use std::hash::Hash;

use smallvec::SmallVec;

use super::kind::Want;

/// A lock key: database number and key bytes.
pub type KeyId = (i32, Vec<u8>);

/// The keys a waiter waits for, with the mode it asked on each.
pub type WaitSet = SmallVec<[(KeyId, Want); 1]>;

/// What a waiter asked for; granted as-is when its turn comes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Waiter<H> {
    pub handle: H,
    /// One key, or the set of a LOCK.MACQUIRE (never empty).
    pub keys: WaitSet,
    pub owner: Vec<u8>,
    pub ttl_ms: i64,
    /// When the waiter gives up (module clock, ms), if it has a timeout.
    pub timeout_at_ms: Option<i64>,
    /// When it started waiting (module clock, ms).
    pub since_ms: i64,
}

impl<H> Waiter<H> {
    /// What it asked for on `key`.
    pub fn want_on(&self, key: &KeyId) -> Option<Want> {
        self.keys.iter().find(|(k, _)| k == key).map(|&(_, want)| want)
    }

    /// Waits for a set of keys rather than one.
    pub fn is_set(&self) -> bool {
        self.keys.len() > 1
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Full {
    /// A key of the waiter already has `per_key_max` waiters.
    Key,
    /// The whole node already has `TOTAL_MAX` waiters.
    Node,
}

/// Waiters on the whole node, whatever the per-key setting: a bound on the
/// module's memory (each waiter is a blocked client plus its token).
pub const TOTAL_MAX: usize = 100_000;

/// Holes tolerated in a queue before it is compacted (beyond one per
/// waiter).
const HOLES_SLACK: usize = 32;

#[derive(Debug)]
struct Queue<H> {
    /// Sequence number of the first slot.
    head_seq: u64,
    /// Waiters in arrival order; `None` where one left. Never starts with
    /// `None`.
    slots: VecDeque<Option<H>>,
    waiting: usize,
}

impl<H> Queue<H> {
    fn trim_front(&mut self) {
        while let Some(None) = self.slots.front() {
            self.slots.pop_front();
            self.head_seq += 1;
        }
    }
}

/// A queued waiter and its place in each of its keys' queues.
#[derive(Debug)]
struct Entry<H> {
    waiter: Waiter<H>,
    /// `seqs[i]`: its slot's sequence number in the queue of `waiter.keys[i]`.
    seqs: SmallVec<[u64; 1]>,
}

#[derive(Debug)]
pub struct Queues<H> {
    by_key: HashMap<KeyId, Queue<H>>,
    entries: HashMap<H, Entry<H>>,
}

impl<H: Copy + Eq + Hash> Default for Queues<H> {
    fn default() -> Self {
        Queues { by_key: HashMap::new(), entries: HashMap::new() }
    }
}

impl<H: Copy + Eq + Hash> Queues<H> {
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Waiters on the node (a waiter for a set counts once).
    pub fn total(&self) -> usize {
        self.entries.len()
    }

    pub fn len(&self, key: &KeyId) -> usize {
        self.by_key.get(key).map_or(0, |q| q.waiting)
    }

    /// Appends a waiter at the tail of the queue of each of its keys.
    pub fn push(&mut self, waiter: Waiter<H>, per_key_max: usize) -> Result<(), Full> {
        if self.total() >= TOTAL_MAX {
            return Err(Full::Node);
        }
        if waiter.keys.iter().any(|(key, _)| self.len(key) >= per_key_max) {
            return Err(Full::Key);
        }
        let handle = waiter.handle;
        let mut seqs = SmallVec::new();
        for (key, _) in &waiter.keys {
            let queue = self.by_key.entry(key.clone()).or_insert_with(|| Queue {
                head_seq: 0,
                slots: VecDeque::new(),
                waiting: 0,
            });
            seqs.push(queue.head_seq + queue.slots.len() as u64);
            queue.slots.push_back(Some(handle));
            queue.waiting += 1;
        }
        self.entries.insert(handle, Entry { waiter, seqs });
        Ok(())
    }

    fn head_handle(&self, key: &KeyId) -> Option<H> {
        self.by_key.get(key).and_then(|q| q.slots.front().copied().flatten())
    }

    /// The head waiter of a key (the one to serve next), left in place.
    pub fn peek(&self, key: &KeyId) -> Option<&Waiter<H>> {
        self.head_handle(key).and_then(|h| self.entries.get(&h)).map(|e| &e.waiter)
    }

    /// A queued waiter, by handle.
    pub fn get(&self, handle: H) -> Option<&Waiter<H>> {
        self.entries.get(&handle).map(|e| &e.waiter)
    }

    /// Each key the waiter waits for, and whether it heads that key's queue
    /// (a queue never starts with a hole, so its head is at `head_seq`).
    fn places<'q>(&'q self, entry: &'q Entry<H>) -> impl Iterator<Item = (&'q KeyId, bool)> + 'q {
        entry
            .waiter
            .keys
            .iter()
            .zip(&entry.seqs)
            .map(|((key, _), &seq)| (key, self.by_key.get(key).is_some_and(|q| q.head_seq == seq)))
    }

    /// The keys whose queue the waiter heads.
    pub fn heads_of(&self, handle: H) -> Vec<KeyId> {
        let Some(entry) = self.entries.get(&handle) else { return Vec::new() };
        self.places(entry).filter(|&(_, head)| head).map(|(key, _)| key.clone()).collect()
    }

    /// Whether the waiter stands at the head of the queue of every key it
    /// waits for (only then may it be served).
    pub fn at_every_head(&self, handle: H) -> bool {
        let Some(entry) = self.entries.get(&handle) else { return false };
        self.places(entry).all(|(_, head)| head)
    }

    /// Takes waiters from the head of a key's queue for as long as `take`
    /// says so (it decides on the head, left in place until then): the
    /// hand-off of a run of waiters. A waiter taken leaves every queue it
    /// stands in.
    pub fn serve(&mut self, key: &KeyId, mut take: impl FnMut(&Waiter<H>) -> bool) -> Vec<Waiter<H>> {
        let mut taken = Vec::new();
        while let Some(handle) = self.head_handle(key) {
            let Some(entry) = self.entries.get(&handle) else { break };
            if !take(&entry.waiter) {
                break;
            }
            match self.remove(handle) {
                Some(waiter) => taken.push(waiter),
                None => break,
            }
        }
        taken
    }

    /// Removes a waiter from every queue it stands in (served, timed out,
    /// disconnected); returns what it asked for.
    pub fn remove(&mut self, handle: H) -> Option<Waiter<H>> {
        let entry = self.entries.remove(&handle)?;
        for ((key, _), &seq) in entry.waiter.keys.iter().zip(&entry.seqs) {
            self.leave(key, seq);
        }
        Some(entry.waiter)
    }

    /// Empties the slot `seq` of `key`'s queue.
    fn leave(&mut self, key: &KeyId, seq: u64) {
        let Some(queue) = self.by_key.get_mut(key) else { return };
        let Some(slot) = seq.checked_sub(queue.head_seq).and_then(|at| usize::try_from(at).ok()) else {
            return;
        };
        if queue.slots.get_mut(slot).and_then(Option::take).is_none() {
            return;
        }
        queue.waiting -= 1;
        queue.trim_front();
        if queue.waiting == 0 {
            self.by_key.remove(key);
        } else if queue.slots.len() > 2 * queue.waiting + HOLES_SLACK {
            self.compact(key);
        }
    }

    /// Drops the holes of a key's queue and renumbers its waiters: O(n k),
    /// once per n departures.
    fn compact(&mut self, key: &KeyId) {
        let Some(queue) = self.by_key.get_mut(key) else { return };
        let head_seq = queue.head_seq;
        queue.slots.retain(Option::is_some);
        for (at, handle) in queue.slots.iter().flatten().enumerate() {
            let Some(entry) = self.entries.get_mut(handle) else { continue };
            let which = entry.waiter.keys.iter().position(|(k, _)| k == key);
            if let Some(seq) = which.and_then(|i| entry.seqs.get_mut(i)) {
                *seq = head_seq + at as u64;
            }
        }
    }

    /// Removes every waiter of a key (the key no longer holds a lock), from
    /// every queue it stands in.
    pub fn drain(&mut self, key: &KeyId) -> Vec<Waiter<H>> {
        let handles: Vec<H> =
            self.by_key.get(key).map(|q| q.slots.iter().flatten().copied().collect()).unwrap_or_default();
        handles.into_iter().filter_map(|h| self.remove(h)).collect()
    }

    /// The waiters of a key, head first.
    pub fn waiters(&self, key: &KeyId) -> impl Iterator<Item = &Waiter<H>> {
        self.by_key
            .get(key)
            .into_iter()
            .flat_map(|q| q.slots.iter().flatten())
            .filter_map(|h| self.entries.get(h).map(|e| &e.waiter))
    }

    /// Keys with waiters in database `db` (every database if `db` is -1).
    pub fn keys_in(&self, db: i32) -> Vec<KeyId> {
        self.by_key.keys().filter(|(d, _)| db == -1 || *d == db).cloned().collect()
    }

    pub fn contains_key(&self, key: &KeyId) -> bool {
        self.by_key.contains_key(key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn key(k: &str) -> KeyId {
        (0, k.as_bytes().to_vec())
    }

    fn on(handle: u32, keys: &[&str]) -> Waiter<u32> {
        Waiter {
            handle,
            keys: keys.iter().map(|k| (key(k), Want::plain())).collect(),
            owner: handle.to_be_bytes().to_vec(),
            ttl_ms: 10,
            timeout_at_ms: None,
            since_ms: 0,
        }
    }

    fn w(handle: u32) -> Waiter<u32> {
        on(handle, &["k"])
    }

    /// Takes the head waiter of `k` (one, whatever it waits for).
    fn pop(q: &mut Queues<u32>, k: &str) -> Option<u32> {
        let mut first = true;
        q.serve(&key(k), |_| std::mem::replace(&mut first, false)).first().map(|w| w.handle)
    }

    fn listed(q: &Queues<u32>, k: &str) -> Vec<u32> {
        q.waiters(&key(k)).map(|w| w.handle).collect()
    }

    /// The accessors the hand-off reads: whether a waiter waits for a set,
    /// a waiter by handle, the keys whose queue it heads.
    #[test]
    fn a_set_waiter_is_found_by_handle_and_knows_which_queues_it_heads() {
        let mut q = Queues::default();
        assert!(!on(1, &["a"]).is_set() && on(2, &["a", "b"]).is_set());
        q.push(on(1, &["a"]), 10).unwrap();
        assert!(!q.is_empty());
        q.push(on(2, &["a", "b"]), 10).unwrap();
        let set = q.get(2).expect("queued");
        assert_eq!((set.handle, set.keys.len()), (2, 2));
        assert!(q.get(3).is_none());
        // It heads b's queue, not a's (1 is ahead of it there).
        assert_eq!(q.heads_of(2), vec![key("b")]);
        assert!(!q.at_every_head(2));
        assert_eq!(q.heads_of(1), vec![key("a")]);
        q.remove(1);
        assert_eq!(q.heads_of(2), vec![key("a"), key("b")]);
        assert!(q.at_every_head(2));
        q.remove(2);
        assert!(q.get(2).is_none() && q.heads_of(2).is_empty() && q.is_empty());
    }

    /// Compaction renumbers the waiters of the compacted queue only, in
    /// that key's place of a set waiter's keys, counting from the queue's
    /// current head (here not 0): afterwards the set waiter still knows
    /// where it stands in both its queues.
    #[test]
    fn compaction_keeps_a_set_waiters_places() {
        let mut q = Queues::default();
        for h in 0..5 {
            q.push(on(1_000 + h, &["a"]), 1_000).unwrap();
            assert_eq!(pop(&mut q, "a"), Some(1_000 + h));
        }
        q.push(on(0, &["a", "b"]), 1_000).unwrap();
        for h in 1..=100 {
            q.push(on(h, &["a"]), 1_000).unwrap();
        }
        q.push(on(200, &["b", "a"]), 1_000).unwrap();
        for h in 1..=100 {
            q.remove(h);
        }
        assert!(q.by_key[&key("a")].slots.len() <= 2 * 2 + HOLES_SLACK, "compacted");
        assert_eq!(listed(&q, "a"), [0, 200]);
        assert!(q.heads_of(200).is_empty());
        q.remove(0);
        assert_eq!(q.heads_of(200), [key("b"), key("a")]);
        assert!(q.at_every_head(200));
        assert_eq!(q.remove(200).map(|w| w.handle), Some(200));
        assert!(q.is_empty() && !q.contains_key(&key("a")) && !q.contains_key(&key("b")));
    }

    /// The keys with waiters in one database, or in all (-1): what a
    /// FLUSHDB / SWAPDB of that database must look at.
    #[test]
    fn keys_with_waiters_by_database() {
        let mut q = Queues::default();
        let in_db = |db: i32, k: &str| -> KeyId { (db, k.as_bytes().to_vec()) };
        for (handle, db) in [(1, 0), (2, 3), (3, 3)] {
            let mut waiter = w(handle);
            waiter.keys = [(in_db(db, &format!("k{handle}")), Want::plain())].into_iter().collect();
            q.push(waiter, 10).unwrap();
        }
        let sorted = |mut keys: Vec<KeyId>| {
            keys.sort();
            keys
        };
        assert_eq!(q.keys_in(0), [in_db(0, "k1")]);
        assert_eq!(sorted(q.keys_in(3)), [in_db(3, "k2"), in_db(3, "k3")]);
        assert!(q.keys_in(1).is_empty());
        assert_eq!(q.keys_in(-1).len(), 3);
        assert!(q.contains_key(&in_db(3, "k2")) && !q.contains_key(&in_db(0, "k2")));
    }

    #[test]
    fn fifo_per_key_with_bound() {
        let mut q = Queues::default();
        for h in 0..3 {
            q.push(on(h, &["a"]), 3).unwrap();
        }
        assert_eq!(q.push(on(9, &["a"]), 3), Err(Full::Key));
        assert_eq!(q.push(on(9, &["b", "a"]), 3), Err(Full::Key), "a set is refused if any key is full");
        assert!(!q.contains_key(&key("b")), "and stands in no queue");
        q.push(on(5, &["b"]), 3).unwrap();
        assert_eq!(pop(&mut q, "a"), Some(0));
        assert_eq!(q.remove(1).map(|w| w.handle), Some(1));
        assert_eq!(pop(&mut q, "a"), Some(2));
        assert_eq!(pop(&mut q, "a"), None);
        assert_eq!(q.total(), 1);
        assert_eq!(q.keys_in(0), vec![key("b")]);
        assert_eq!(q.drain(&key("b")).len(), 1);
        assert!(q.is_empty());
    }

    #[test]
    fn holes_behind_a_waiting_head_are_compacted() {
        let mut q = Queues::default();
        q.push(w(0), 10_000).unwrap();
        for h in 1..5_000 {
            q.push(w(h), 10_000).unwrap();
            q.remove(h).unwrap();
        }
        let queue = q.by_key.get(&key("k")).unwrap();
        assert!(queue.slots.len() <= 2 + HOLES_SLACK, "{} slots for one waiter", queue.slots.len());
        q.push(w(9_999), 10_000).unwrap();
        assert_eq!(listed(&q, "k"), vec![0, 9_999]);
        assert_eq!(q.remove(9_999).map(|w| w.handle), Some(9_999));
        assert_eq!(pop(&mut q, "k"), Some(0));
        assert!(q.is_empty());
    }

    /// The memory bound of a queue: at most one hole per waiter plus
    /// `HOLES_SLACK`, after every operation, never a hole at the head, and
    /// `waiting` counts the slots that are not holes.
    fn assert_holes_bounded(q: &Queues<u32>) {
        for (key, queue) in &q.by_key {
            let waiting = queue.slots.iter().flatten().count();
            assert_eq!(queue.waiting, waiting, "{key:?}");
            assert!(
                queue.slots.len() <= 2 * waiting + HOLES_SLACK,
                "{key:?}: {} slots for {waiting} waiters",
                queue.slots.len()
            );
            assert!(matches!(queue.slots.front(), Some(Some(_))), "{key:?} starts with a hole");
        }
    }

    /// Departures from behind a waiting head and from the tail, in queues
    /// whose length the compaction threshold (twice the waiters plus
    /// `HOLES_SLACK`, always even) can step over without meeting it: the
    /// holes stay bounded at every step.
    #[test]
    fn a_queue_keeps_at_most_one_hole_per_waiter_plus_the_slack() {
        // 101 waiters (an odd length), all but the head leaving in order.
        let mut q = Queues::default();
        for h in 0..=100 {
            q.push(w(h), 1_000).unwrap();
        }
        for h in 1..=100 {
            q.remove(h).unwrap();
            assert_holes_bounded(&q);
        }
        assert_eq!(listed(&q, "k"), [0]);
        // A head and 34 behind it leaving from the tail: one waiter is left
        // with 34 slots at most.
        let mut q = Queues::default();
        for h in 0..=34 {
            q.push(w(h), 1_000).unwrap();
        }
        for h in (1..=34).rev() {
            q.remove(h).unwrap();
            assert_holes_bounded(&q);
        }
        assert_eq!(listed(&q, "k"), [0]);
    }

    #[test]
    fn serve_takes_a_run_from_the_head() {
        let mut q = Queues::default();
        for h in 0..6 {
            q.push(w(h), 10).unwrap();
        }
        q.remove(2).unwrap();
        let taken: Vec<u32> = q.serve(&key("k"), |w| w.handle != 4).into_iter().map(|w| w.handle).collect();
        assert_eq!(taken, vec![0, 1, 3], "in order, skipping the one that left, up to the first refused");
        assert_eq!(q.peek(&key("k")).map(|w| w.handle), Some(4));
        assert_eq!(q.len(&key("k")), 2);
        assert_eq!(q.remove(5).map(|w| w.handle), Some(5), "the index still finds the rest");
        assert_eq!(q.serve(&key("k"), |_| true).len(), 1);
        assert!(q.is_empty() && !q.contains_key(&key("k")));
    }

    #[test]
    fn a_set_waits_in_every_queue_and_leaves_them_all() {
        let mut q = Queues::default();
        q.push(on(1, &["a"]), 10).unwrap();
        q.push(on(2, &["a", "b"]), 10).unwrap();
        q.push(on(3, &["b"]), 10).unwrap();
        assert_eq!(q.total(), 3, "a set counts once on the node");
        assert_eq!((q.len(&key("a")), q.len(&key("b"))), (2, 2));
        assert!(q.at_every_head(1));
        assert!(!q.at_every_head(2), "behind 1 on a, though first on b");
        assert!(!q.at_every_head(3));
        assert_eq!(q.peek(&key("b")).map(|w| w.handle), Some(2));
        assert_eq!(pop(&mut q, "a"), Some(1));
        assert!(q.at_every_head(2));
        // Served through b, it leaves a too.
        assert_eq!(pop(&mut q, "b"), Some(2));
        assert!(!q.contains_key(&key("a")));
        assert_eq!(listed(&q, "b"), vec![3]);
        assert!(q.at_every_head(3));
        // Drained through one key, a set leaves the other queues.
        q.push(on(4, &["a", "b"]), 10).unwrap();
        assert_eq!(q.drain(&key("a")).iter().map(|w| w.handle).collect::<Vec<_>>(), vec![4]);
        assert_eq!(listed(&q, "b"), vec![3]);
        assert_eq!(q.want_of_test(3, "b"), Some(Want::plain()));
    }

    impl Queues<u32> {
        fn want_of_test(&self, handle: u32, k: &str) -> Option<Want> {
            self.entries.get(&handle).and_then(|e| e.waiter.want_on(&key(k)))
        }
    }

    proptest! {
        /// Whatever is removed on the way, the rest come out in arrival order
        /// and the indexes stay consistent.
        #[test]
        fn order_is_arrival_order(ops in proptest::collection::vec((0u8..3, 0u32..80), 1..400)) {
            let mut q = Queues::default();
            let mut model: Vec<u32> = Vec::new();
            let mut next = 0u32;
            for (op, pick) in ops {
                match op {
                    0 => { q.push(w(next), 1000).unwrap(); model.push(next); next += 1; }
                    1 => { let got = pop(&mut q, "k"); let want = if model.is_empty() { None } else { Some(model.remove(0)) }; prop_assert_eq!(got, want); }
                    _ => { let removed = q.remove(pick).is_some(); let pos = model.iter().position(|&h| h == pick); prop_assert_eq!(removed, pos.is_some()); if let Some(p) = pos { model.remove(p); } }
                }
                prop_assert_eq!(q.total(), model.len());
                prop_assert_eq!(q.len(&key("k")), model.len());
                prop_assert_eq!(&listed(&q, "k"), &model);
                prop_assert_eq!(q.peek(&key("k")).map(|w| w.handle), model.first().copied());
                assert_holes_bounded(&q);
            }
        }

        /// Waiters for sets over three keys, arriving, leaving and served in
        /// any order: every queue lists its waiters in arrival order, and the
        /// oldest waiter is at the head of every queue it stands in (what
        /// makes waiting for sets deadlock-free).
        #[test]
        fn the_oldest_waiter_heads_all_its_queues(ops in proptest::collection::vec((0u8..3, 1u8..8, 0u32..60), 1..300)) {
            let names = ["a", "b", "c"];
            let mut q = Queues::default();
            let mut model: Vec<(u32, Vec<&str>)> = Vec::new();
            let mut next = 0u32;
            for (op, mask, pick) in ops {
                match op {
                    0 => {
                        let keys: Vec<&str> = names.iter().enumerate().filter(|(i, _)| mask & (1 << i) != 0).map(|(_, k)| *k).collect();
                        q.push(on(next, &keys), 1000).unwrap();
                        model.push((next, keys));
                        next += 1;
                    }
                    1 => {
                        let k = names[pick as usize % 3];
                        let got = pop(&mut q, k);
                        let at = model.iter().position(|(_, keys)| keys.contains(&k));
                        prop_assert_eq!(got, at.map(|i| model[i].0));
                        if let Some(i) = at { model.remove(i); }
                    }
                    _ => {
                        let removed = q.remove(pick).is_some();
                        let at = model.iter().position(|(h, _)| *h == pick);
                        prop_assert_eq!(removed, at.is_some());
                        if let Some(i) = at { model.remove(i); }
                    }
                }
                prop_assert_eq!(q.total(), model.len());
                for k in names {
                    let want: Vec<u32> = model.iter().filter(|(_, keys)| keys.contains(&k)).map(|(h, _)| *h).collect();
                    prop_assert_eq!(listed(&q, k), want);
                }
                if let Some((oldest, _)) = model.first() {
                    prop_assert!(q.at_every_head(*oldest));
                }
                assert_holes_bounded(&q);
            }
        }
    }
}
