//! FIFO queues of waiters, one per lock key, with bounds. Pure: a waiter's
//! handle is an opaque `Copy` value (the adapter uses the blocked client's
//! address), so the queue logic is tested without a server.

use std::collections::{HashMap, VecDeque};
use std::hash::Hash;

use super::group::Want;
use super::lock::Kind;

/// A lock key: database number and key bytes.
pub type KeyId = (i32, Vec<u8>);

/// What a grant asks for: a single-holder lock of a kind, or a place in a
/// group (shared/exclusive lock, semaphore).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Request {
    Single(Kind),
    Group(Want),
}

/// What a waiter asked for; granted as-is when its turn comes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Waiter<H> {
    pub handle: H,
    pub request: Request,
    pub owner: Vec<u8>,
    pub ttl_ms: i64,
    /// The adapter's timeout timer for this waiter, if it has a timeout.
    pub timer: Option<u64>,
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

#[derive(Debug)]
pub struct Queues<H> {
    by_key: HashMap<KeyId, VecDeque<Waiter<H>>>,
    key_of: HashMap<H, KeyId>,
}

impl<H: Copy + Eq + Hash> Default for Queues<H> {
    fn default() -> Self {
        Queues { by_key: HashMap::new(), key_of: HashMap::new() }
    }
}

impl<H: Copy + Eq + Hash> Queues<H> {
    pub fn is_empty(&self) -> bool {
        self.key_of.is_empty()
    }

    pub fn total(&self) -> usize {
        self.key_of.len()
    }

    pub fn len(&self, key: &KeyId) -> usize {
        self.by_key.get(key).map_or(0, VecDeque::len)
    }

    /// Appends a waiter at the tail of its key's queue.
    pub fn push(&mut self, key: KeyId, waiter: Waiter<H>, per_key_max: usize) -> Result<(), Full> {
        if self.total() >= TOTAL_MAX {
            return Err(Full::Node);
        }
        if self.len(&key) >= per_key_max {
            return Err(Full::Key);
        }
        self.key_of.insert(waiter.handle, key.clone());
        self.by_key.entry(key).or_default().push_back(waiter);
        Ok(())
    }

    /// The head waiter of a key (the one to serve next), left in place.
    pub fn peek(&self, key: &KeyId) -> Option<&Waiter<H>> {
        self.by_key.get(key).and_then(VecDeque::front)
    }

    /// Takes the head waiter of a key (the one to serve next).
    pub fn pop(&mut self, key: &KeyId) -> Option<Waiter<H>> {
        let queue = self.by_key.get_mut(key)?;
        let waiter = queue.pop_front();
        if queue.is_empty() {
            self.by_key.remove(key);
        }
        if let Some(w) = &waiter {
            self.key_of.remove(&w.handle);
        }
        waiter
    }

    /// Removes a waiter wherever it is (timeout, disconnect); returns its
    /// key and what it asked for.
    pub fn remove(&mut self, handle: H) -> Option<(KeyId, Waiter<H>)> {
        let key = self.key_of.remove(&handle)?;
        let queue = self.by_key.get_mut(&key)?;
        let at = queue.iter().position(|w| w.handle == handle)?;
        let waiter = queue.remove(at)?;
        if queue.is_empty() {
            self.by_key.remove(&key);
        }
        Some((key, waiter))
    }

    /// Removes every waiter of a key (the key no longer holds a lock).
    pub fn drain(&mut self, key: &KeyId) -> Vec<Waiter<H>> {
        let waiters: Vec<Waiter<H>> = self.by_key.remove(key).map(Vec::from).unwrap_or_default();
        for w in &waiters {
            self.key_of.remove(&w.handle);
        }
        waiters
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
            request: Request::Single(Kind::Plain),
            owner: handle.to_be_bytes().to_vec(),
            ttl_ms: 10,
            timer: None,
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

    proptest! {
        /// Whatever is removed on the way, the rest come out in arrival order
        /// and the indexes stay consistent.
        #[test]
        fn order_is_arrival_order(ops in proptest::collection::vec((0u8..3, 0u32..40), 1..200)) {
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
            }
        }
    }
}
