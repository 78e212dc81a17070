//! FIFO queues of waiters, one per lock key, with bounds. Pure: a waiter's
//! handle is an opaque `Copy` value (the adapter uses the blocked client's
//! address), so the queue logic is tested without a server.
//!
//! Every operation is O(1) amortized, whatever the queue's length: a waiter
//! that leaves from the middle (timeout, disconnect) leaves a hole that is
//! skipped when it reaches the head, and a queue with more holes than
//! waiters is compacted.

use std::collections::{HashMap, VecDeque};
use std::hash::Hash;

use super::kind::Want;

/// A lock key: database number and key bytes.
pub type KeyId = (i32, Vec<u8>);

/// What a waiter asked for; granted as-is when its turn comes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Waiter<H> {
    pub handle: H,
    pub want: Want,
    pub owner: Vec<u8>,
    pub ttl_ms: i64,
    /// When the waiter gives up (module clock, ms), if it has a timeout.
    pub timeout_at_ms: Option<i64>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Full {
    /// The key already has `per_key_max` waiters.
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
    slots: VecDeque<Option<Waiter<H>>>,
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

#[derive(Debug)]
pub struct Queues<H> {
    by_key: HashMap<KeyId, Queue<H>>,
    /// Where each waiter is: its key and its slot's sequence number.
    where_is: HashMap<H, (KeyId, u64)>,
}

impl<H: Copy + Eq + Hash> Default for Queues<H> {
    fn default() -> Self {
        Queues { by_key: HashMap::new(), where_is: HashMap::new() }
    }
}

impl<H: Copy + Eq + Hash> Queues<H> {
    pub fn is_empty(&self) -> bool {
        self.where_is.is_empty()
    }

    pub fn total(&self) -> usize {
        self.where_is.len()
    }

    pub fn len(&self, key: &KeyId) -> usize {
        self.by_key.get(key).map_or(0, |q| q.waiting)
    }

    /// Appends a waiter at the tail of its key's queue.
    pub fn push(&mut self, key: KeyId, waiter: Waiter<H>, per_key_max: usize) -> Result<(), Full> {
        if self.total() >= TOTAL_MAX {
            return Err(Full::Node);
        }
        if self.len(&key) >= per_key_max {
            return Err(Full::Key);
        }
        let handle = waiter.handle;
        let queue = self.by_key.entry(key.clone()).or_insert_with(|| Queue {
            head_seq: 0,
            slots: VecDeque::new(),
            waiting: 0,
        });
        let seq = queue.head_seq + queue.slots.len() as u64;
        queue.slots.push_back(Some(waiter));
        queue.waiting += 1;
        self.where_is.insert(handle, (key, seq));
        Ok(())
    }

    /// The head waiter of a key (the one to serve next), left in place.
    pub fn peek(&self, key: &KeyId) -> Option<&Waiter<H>> {
        self.by_key.get(key).and_then(|q| q.slots.front()).and_then(Option::as_ref)
    }

    /// Takes the head waiter of a key (the one to serve next).
    pub fn pop(&mut self, key: &KeyId) -> Option<Waiter<H>> {
        let queue = self.by_key.get_mut(key)?;
        let waiter = queue.slots.pop_front().flatten();
        queue.head_seq += 1;
        queue.trim_front();
        if let Some(w) = &waiter {
            queue.waiting -= 1;
            self.where_is.remove(&w.handle);
        }
        if queue.waiting == 0 {
            self.by_key.remove(key);
        }
        waiter
    }

    /// Takes waiters from the head of a key's queue for as long as `take`
    /// says so (it decides on the head, left in place until then): the
    /// hand-off of a run of waiters, with one lookup of the key's queue.
    pub fn serve(&mut self, key: &KeyId, mut take: impl FnMut(&Waiter<H>) -> bool) -> Vec<Waiter<H>> {
        let mut taken = Vec::new();
        let Some(queue) = self.by_key.get_mut(key) else { return taken };
        while let Some(Some(head)) = queue.slots.front() {
            if !take(head) {
                break;
            }
            if let Some(waiter) = queue.slots.pop_front().flatten() {
                queue.head_seq += 1;
                queue.waiting -= 1;
                self.where_is.remove(&waiter.handle);
                taken.push(waiter);
            }
            queue.trim_front();
        }
        if queue.waiting == 0 {
            self.by_key.remove(key);
        }
        taken
    }

    /// Removes a waiter wherever it is (timeout, disconnect); returns its
    /// key and what it asked for.
    pub fn remove(&mut self, handle: H) -> Option<(KeyId, Waiter<H>)> {
        let (key, seq) = self.where_is.remove(&handle)?;
        let queue = self.by_key.get_mut(&key)?;
        let at = usize::try_from(seq.checked_sub(queue.head_seq)?).ok()?;
        let waiter = queue.slots.get_mut(at)?.take()?;
        queue.waiting -= 1;
        queue.trim_front();
        if queue.waiting == 0 {
            self.by_key.remove(&key);
        } else if queue.slots.len() > 2 * queue.waiting + HOLES_SLACK {
            self.compact(&key);
        }
        Some((key, waiter))
    }

    /// Drops the holes of a key's queue and renumbers its waiters: O(n),
    /// once per n departures.
    fn compact(&mut self, key: &KeyId) {
        let Some(queue) = self.by_key.get_mut(key) else { return };
        let head_seq = queue.head_seq;
        queue.slots.retain(Option::is_some);
        for (at, slot) in queue.slots.iter().enumerate() {
            if let Some(w) = slot {
                if let Some(place) = self.where_is.get_mut(&w.handle) {
                    place.1 = head_seq + at as u64;
                }
            }
        }
    }

    /// Removes every waiter of a key (the key no longer holds a lock).
    pub fn drain(&mut self, key: &KeyId) -> Vec<Waiter<H>> {
        let waiters: Vec<Waiter<H>> =
            self.by_key.remove(key).map(|q| q.slots.into_iter().flatten().collect()).unwrap_or_default();
        for w in &waiters {
            self.where_is.remove(&w.handle);
        }
        waiters
    }

    /// The waiters of a key, head first.
    pub fn waiters(&self, key: &KeyId) -> impl Iterator<Item = &Waiter<H>> {
        self.by_key.get(key).into_iter().flat_map(|q| q.slots.iter().flatten())
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

    fn w(handle: u32) -> Waiter<u32> {
        Waiter {
            handle,
            want: Want::plain(),
            owner: handle.to_be_bytes().to_vec(),
            ttl_ms: 10,
            timeout_at_ms: None,
        }
    }

    fn key(k: &str) -> KeyId {
        (0, k.as_bytes().to_vec())
    }

    #[test]
    fn fifo_per_key_with_bound() {
        let mut q = Queues::default();
        for h in 0..3 {
            q.push(key("a"), w(h), 3).unwrap();
        }
        assert_eq!(q.push(key("a"), w(9), 3), Err(Full::Key));
        q.push(key("b"), w(5), 3).unwrap();
        assert_eq!(q.pop(&key("a")).map(|w| w.handle), Some(0));
        assert_eq!(q.remove(1).map(|(k, w)| (k, w.handle)), Some((key("a"), 1)));
        assert_eq!(q.pop(&key("a")).map(|w| w.handle), Some(2));
        assert_eq!(q.pop(&key("a")), None);
        assert_eq!(q.total(), 1);
        assert_eq!(q.keys_in(0), vec![key("b")]);
        assert_eq!(q.drain(&key("b")).len(), 1);
        assert!(q.is_empty());
    }

    #[test]
    fn holes_behind_a_waiting_head_are_compacted() {
        let mut q = Queues::default();
        q.push(key("k"), w(0), 10_000).unwrap();
        for h in 1..5_000 {
            q.push(key("k"), w(h), 10_000).unwrap();
            q.remove(h).unwrap();
        }
        let queue = q.by_key.get(&key("k")).unwrap();
        assert!(queue.slots.len() <= 2 + HOLES_SLACK, "{} slots for one waiter", queue.slots.len());
        q.push(key("k"), w(9_999), 10_000).unwrap();
        assert_eq!(q.waiters(&key("k")).map(|w| w.handle).collect::<Vec<_>>(), vec![0, 9_999]);
        assert_eq!(q.remove(9_999).map(|(_, w)| w.handle), Some(9_999));
        assert_eq!(q.pop(&key("k")).map(|w| w.handle), Some(0));
        assert!(q.is_empty());
    }

    #[test]
    fn serve_takes_a_run_from_the_head() {
        let mut q = Queues::default();
        for h in 0..6 {
            q.push(key("k"), w(h), 10).unwrap();
        }
        q.remove(2).unwrap();
        let taken: Vec<u32> = q.serve(&key("k"), |w| w.handle != 4).into_iter().map(|w| w.handle).collect();
        assert_eq!(taken, vec![0, 1, 3], "in order, skipping the one that left, up to the first refused");
        assert_eq!(q.peek(&key("k")).map(|w| w.handle), Some(4));
        assert_eq!(q.len(&key("k")), 2);
        assert_eq!(q.remove(5).map(|(_, w)| w.handle), Some(5), "the index still finds the rest");
        assert_eq!(q.serve(&key("k"), |_| true).len(), 1);
        assert!(q.is_empty() && !q.contains_key(&key("k")));
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
                    0 => { q.push(key("k"), w(next), 1000).unwrap(); model.push(next); next += 1; }
                    1 => { let got = q.pop(&key("k")).map(|w| w.handle); let want = if model.is_empty() { None } else { Some(model.remove(0)) }; prop_assert_eq!(got, want); }
                    _ => { let removed = q.remove(pick).is_some(); let pos = model.iter().position(|&h| h == pick); prop_assert_eq!(removed, pos.is_some()); if let Some(p) = pos { model.remove(p); } }
                }
                prop_assert_eq!(q.total(), model.len());
                prop_assert_eq!(q.len(&key("k")), model.len());
                let listed: Vec<u32> = q.waiters(&key("k")).map(|w| w.handle).collect();
                prop_assert_eq!(&listed, &model);
                prop_assert_eq!(q.peek(&key("k")).map(|w| w.handle), model.first().copied());
            }
        }
    }
}
