//! The key-state layer: between the FFI and the commands and hand-off. It
//! reads what a lock key holds ([`Loaded`], the state machine's
//! [`Stored`]), runs one transaction on it, and stores and replicates the
//! [`Changes`] in one place.
//!
//! Storage, per kind (layouts in `core/src/codec.rs`):
//! - plain and reentrant locks: one string, written whole (`SET ... PXAT`);
//! - shared locks and semaphores: one hash, a field per holder; a call
//!   writes only its holders' fields (`HSET` / `HDEL`), so its cost and the
//!   bytes it replicates do not grow with the number of holders. The key's
//!   native expiry is a backstop after the latest deadline (see
//!   [`backstop_for`]);
//! - shared locks and semaphores stored by the previous release as one
//!   string are read as they are and converted to the hash on their first
//!   write.

use crate::clock;
use crate::core::codec::{self, StringLock};
use crate::core::hashform::{self, Fields, HashLock};
use crate::core::kind::{Hold, Mode, Shape};
use crate::core::memory::{Free, Holders, Single};
use crate::core::txn::{Changes, Stored, Txn};
use crate::errors;
use crate::ffi::{Call, Key, KeyKind};
use crate::node::{Node, Rules};

/// A hash key's fields, read through the FFI.
pub struct KeyFields<'k, 'c> {
    key: &'k Key<'c>,
}

impl Fields for KeyFields<'_, '_> {
    fn get(&self, field: &[u8]) -> Option<Vec<u8>> {
        self.key.hash_get(field)
    }

    fn field_count(&self) -> usize {
        self.key.len()
    }

    fn all(&self) -> Vec<(Vec<u8>, Vec<u8>)> {
        self.key.hash_all()
    }
}

/// What a lock key holds, read once per call.
pub enum Loaded<'k, 'c> {
    Free(Free),
    Single(Single<'k>),
    /// A shared lock or semaphore in the previous release's string form.
    Legacy(Holders),
    Hash(HashLock<KeyFields<'k, 'c>>),
}

/// Reads the lock stored at `key` at `now_ms`. A value that is not a lock,
/// or a lock whose deadline lies further ahead than any grant of this
/// module could have set (`Rules::deadline_ahead_max_ms`: a value written
/// by something else, such as a `SET` of a forged lock), is refused: it must
/// never hold a key past what a real grant could.
pub fn load<'k, 'c>(key: &'k Key<'c>, rules: &Rules) -> Result<Loaded<'k, 'c>, Failure> {
    let (now_ms, ahead_max_ms) = (rules.now_ms, rules.deadline_ahead_max_ms);
    let deadline_max_ms = now_ms.saturating_add(ahead_max_ms);
    let too_far =
        |deadline_ms: i64| Failure::TooFar { ahead_ms: deadline_ms.saturating_sub(now_ms), ahead_max_ms };
    match key.kind() {
        KeyKind::Empty => Ok(Loaded::Free(Free)),
        KeyKind::String => match key.value().and_then(codec::decode_string) {
            Some(StringLock::Single(single)) if single.hold.deadline_ms > deadline_max_ms => {
                Err(too_far(single.hold.deadline_ms))
            }
            Some(StringLock::Single(single)) => Ok(Loaded::Single(single)),
            Some(StringLock::Legacy(holders)) => {
                match holders.records().iter().map(|(_, h)| h.deadline_ms).max() {
                    Some(latest) if latest > deadline_max_ms => Err(too_far(latest)),
                    _ => Ok(Loaded::Legacy(holders)),
                }
            }
            None => Err(Failure::NotALock),
        },
        KeyKind::Hash => {
            let lock =
                HashLock::open_bounded(KeyFields { key }, deadline_max_ms).map_err(|_| Failure::NotALock)?;
            match lock.too_far() {
                Some(deadline_ms) => Err(too_far(deadline_ms)),
                None => Ok(Loaded::Hash(lock)),
            }
        }
        KeyKind::Other => Err(Failure::NotALock),
    }
}

impl Loaded<'_, '_> {
    /// A hash lock's holders are read on demand: a deadline beyond the
    /// bound found while a transaction or a read used it.
    pub fn too_far(&self, rules: &Rules) -> Option<Failure> {
        match self {
            Loaded::Hash(lock) => lock.too_far().map(|deadline_ms| Failure::TooFar {
                ahead_ms: deadline_ms.saturating_sub(rules.now_ms),
                ahead_max_ms: rules.deadline_ahead_max_ms,
            }),
            _ => None,
        }
    }
}

macro_rules! each {
    ($self:ident, $lock:ident => $e:expr) => {
        match $self {
            Loaded::Free($lock) => $e,
            Loaded::Single($lock) => $e,
            Loaded::Legacy($lock) => $e,
            Loaded::Hash($lock) => $e,
        }
    };
}

impl Stored for Loaded<'_, '_> {
    fn shape(&self) -> Option<Shape> {
        each!(self, lock => lock.shape())
    }
    fn count(&self) -> u32 {
        each!(self, lock => lock.count())
    }
    fn mode(&self) -> Option<Mode> {
        each!(self, lock => lock.mode())
    }
    fn hold(&self, owner: &[u8]) -> Option<Hold> {
        each!(self, lock => lock.hold(owner))
    }
    fn earliest_deadline_ms(&self) -> i64 {
        each!(self, lock => lock.earliest_deadline_ms())
    }
    fn top_fence(&self) -> u64 {
        each!(self, lock => lock.top_fence())
    }
    fn holders(&self) -> Vec<(Vec<u8>, Hold)> {
        each!(self, lock => lock.holders())
    }
    fn owner_of(&self, fence: u64) -> Option<Vec<u8>> {
        each!(self, lock => lock.owner_of(fence))
    }
}

/// Why a transaction did not run or its changes were not stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Failure {
    /// The key holds something that is not a lock.
    NotALock,
    /// The key holds a lock value whose deadline lies `ahead_ms` ahead, more
    /// than the `ahead_max_ms` any grant could have set.
    TooFar { ahead_ms: i64, ahead_max_ms: i64 },
    /// Redis refused a key write (a read-only replica, out of memory).
    WriteFailed,
}

impl Failure {
    /// The error reply for it.
    pub fn line(self) -> String {
        match self {
            Failure::NotALock => errors::not_a_lock(),
            Failure::TooFar { ahead_ms, ahead_max_ms } => errors::deadline_too_far(ahead_ms, ahead_max_ms),
            Failure::WriteFailed => errors::write_failed(),
        }
    }
}

/// What storing a transaction's changes did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Written {
    /// The lock's last holder left: the key was deleted.
    pub freed: bool,
    /// Holders whose time had passed were removed.
    pub found_expired: bool,
}

/// Opens the call's key for writing and [`run`]s `transition` on it.
/// Returns the transition's result and the key, still open (the caller
/// hands a freed lock to its waiters).
pub fn transact<'c, 'o, T>(
    call: &'c Call<'c>,
    node: &Node,
    now_ms: i64,
    transition: impl for<'s, 'k> FnOnce(&mut Txn<'s, 'o, Loaded<'k, 'c>>) -> T,
) -> Result<(T, Written, Key<'c>), Failure> {
    let mut key = call.open_key(true).ok_or(Failure::WriteFailed)?;
    let (answer, written) = run(&mut key, node, now_ms, transition)?;
    Ok((answer, written, key))
}

/// Runs `transition` on a transaction over the lock `key` (open for writing)
/// holds at `now_ms`, then stores and replicates the changes: one read of
/// the key, one write.
pub fn run<'c, 'o, T>(
    key: &mut Key<'c>,
    node: &Node,
    now_ms: i64,
    transition: impl for<'s, 'k> FnOnce(&mut Txn<'s, 'o, Loaded<'k, 'c>>) -> T,
) -> Result<(T, Written), Failure> {
    let rules = node.rules(now_ms);
    let (answer, changes, converted) = {
        let loaded = load(key, &rules)?;
        let mut txn = Txn::new(&loaded, now_ms, rules.cool_down_ms);
        let answer = transition(&mut txn);
        let changes = txn.finish();
        if let Some(failure) = loaded.too_far(&rules) {
            return Err(failure);
        }
        let converted = legacy_converted(&loaded, &changes);
        (answer, changes, converted)
    };
    Ok((answer, store_any(key, node, &rules, converted.as_ref(), &changes)?))
}

/// Opens the keys of `calls` for writing and [`run_all`]s `transition` on
/// them; the keys are closed again on return (a caller that hands freed
/// locks to waiters does so afterwards, per key). `Err` names the key (its
/// index) that could not be opened, was not a lock, or was not written.
pub fn transact_all<'c, 'o, T>(
    calls: &'c [Call<'c>],
    node: &Node,
    now_ms: i64,
    transition: impl for<'s, 'k> FnOnce(&mut [Txn<'s, 'o, Loaded<'k, 'c>>]) -> T,
) -> Result<(T, Vec<Written>), (usize, Failure)> {
    let mut keys = Vec::with_capacity(calls.len());
    for (at, key_call) in calls.iter().enumerate() {
        keys.push(key_call.open_key(true).ok_or((at, Failure::WriteFailed))?);
    }
    run_all(&mut keys, node, now_ms, transition)
}

/// [`run`] over several keys at once (LOCK.MACQUIRE, the hand-off of a set):
/// every key is read first and the transition decides on all of them
/// together; then each key's changes are stored, in order. `Err` names the
/// key (its index) that is not a lock, before anything is stored, or whose
/// write Redis refused.
pub fn run_all<'c, 'o, T>(
    keys: &mut [Key<'c>],
    node: &Node,
    now_ms: i64,
    transition: impl for<'s, 'k> FnOnce(&mut [Txn<'s, 'o, Loaded<'k, 'c>>]) -> T,
) -> Result<(T, Vec<Written>), (usize, Failure)> {
    let rules = node.rules(now_ms);
    let (answer, prepared) = {
        let mut loaded = Vec::with_capacity(keys.len());
        for (at, key) in keys.iter().enumerate() {
            loaded.push(load(key, &rules).map_err(|failure| (at, failure))?);
        }
        let mut txns: Vec<Txn<'_, 'o, Loaded<'_, 'c>>> =
            loaded.iter().map(|l| Txn::new(l, now_ms, rules.cool_down_ms)).collect();
        let answer = transition(&mut txns);
        if let Some((at, failure)) =
            loaded.iter().enumerate().find_map(|(at, l)| Some((at, l.too_far(&rules)?)))
        {
            return Err((at, failure));
        }
        let prepared: Vec<(Changes<'o>, Option<Holders>)> = txns
            .into_iter()
            .zip(&loaded)
            .map(|(txn, stored)| {
                let changes = txn.finish();
                let converted = legacy_converted(stored, &changes);
                (changes, converted)
            })
            .collect();
        (answer, prepared)
    };
    let mut written = Vec::with_capacity(keys.len());
    for (at, (key, (changes, converted))) in keys.iter_mut().zip(prepared).enumerate() {
        written.push(store_any(key, node, &rules, converted.as_ref(), &changes).map_err(|f| (at, f))?);
    }
    Ok((answer, written))
}

/// A lock in the previous string form is rewritten whole, as a hash, by its
/// first write: the holders it will have.
fn legacy_converted(loaded: &Loaded<'_, '_>, changes: &Changes<'_>) -> Option<Holders> {
    match loaded {
        Loaded::Legacy(old) if !changes.is_empty() => Some(old.apply(changes)),
        _ => None,
    }
}

fn store_any(
    key: &mut Key<'_>,
    node: &Node,
    rules: &Rules,
    converted: Option<&Holders>,
    changes: &Changes<'_>,
) -> Result<Written, Failure> {
    let written = match converted {
        Some(after) => store_converted(key, rules, after, changes),
        None => store(key, rules, changes),
    }?;
    // Remember the deadline written, so that a lock later removed behind
    // the module's back (eviction, DEL, a flush, ...) quarantines its key
    // or database until then.
    if let Some(deadline_ms) = changes.last_put_deadline_ms() {
        node.note_lock(key.db(), key.name(), deadline_ms, rules.now_ms, rules.cool_down_ms);
    }
    Ok(written)
}

/// Stores a transaction's changes in `key` (opened for writing, holding the
/// lock the transaction read) and replicates them.
fn store(key: &mut Key<'_>, rules: &Rules, changes: &Changes<'_>) -> Result<Written, Failure> {
    let written = Written { freed: changes.delete, found_expired: changes.found_expired };
    if changes.is_empty() {
        return Ok(written);
    }
    if changes.delete {
        return key.delete().then_some(written).ok_or(Failure::WriteFailed);
    }
    let Some(shape) = changes.shape else { return Ok(written) };
    let stored = if shape.kind.is_single() {
        // One holder: the whole value, with the backstop after its deadline.
        match changes.puts.last() {
            Some(put) => {
                let value = codec::encode_single(shape.kind, &put.owner, &put.hold);
                key.set_string(value.as_bytes(), backstop_for(put.hold.deadline_ms, rules))
            }
            None => true,
        }
    } else {
        let edits = hashform::field_edits(changes);
        let edited = edits.is_empty() || key.hash_edit(edits.deletes(), edits.sets());
        edited && keep_backstop(key, changes.last_put_deadline_ms(), rules)
    };
    stored.then_some(written).ok_or(Failure::WriteFailed)
}

/// The native expiry for a lock whose (latest) deadline is `deadline_ms`:
/// `lock.clock-jump-tolerance-ms` after it, plus any lock-delay, laid onto
/// the later of the wall and module clocks (see `clock::backstop_ms`).
fn backstop_for(deadline_ms: i64, rules: &Rules) -> i64 {
    clock::backstop_ms(deadline_ms, rules.now_ms, clock::wall_ms(), rules.backstop_after_ms)
}

/// Pushes a hash lock's expiry out when a new deadline needs it. It is set
/// `lock.max-ttl-ms` further than needed, so that holders renewing one after
/// another move it (one more replicated `PEXPIREAT`) about once per max-ttl,
/// not on every renewal; the key may then outlive its last holder by that
/// much more (memory only: a lock is free once its holders' deadlines pass).
fn keep_backstop(key: &mut Key<'_>, deadline_ms: Option<i64>, rules: &Rules) -> bool {
    let Some(deadline_ms) = deadline_ms else { return true };
    let needed = backstop_for(deadline_ms, rules);
    match key.expire_at() {
        Some(at) if at >= needed => true,
        _ => key.set_expire_at(needed.saturating_add(rules.backstop_slack_ms)),
    }
}

/// Stores a lock read in the previous release's string form, after its
/// first write, as a hash: every holder, token and deadline, and a native
/// expiry at least the old one, replicated as `DEL`, `HSET`, `PEXPIREAT`.
fn store_converted(
    key: &mut Key<'_>,
    rules: &Rules,
    after: &Holders,
    changes: &Changes<'_>,
) -> Result<Written, Failure> {
    let written = Written { freed: changes.delete, found_expired: changes.found_expired };
    let old_expiry = key.expire_at();
    if !key.delete() {
        return Err(Failure::WriteFailed);
    }
    if changes.delete {
        return Ok(written);
    }
    let fields = hashform::all_fields(after);
    let last_deadline = after.records().iter().map(|(_, h)| h.deadline_ms).max();
    let needed = last_deadline.map_or(0, |d| backstop_for(d, rules));
    let expire_at = old_expiry.unwrap_or(0).max(needed);
    let sets = fields.iter().map(|(f, v)| (f.as_slice(), v.as_slice()));
    let stored = key.hash_edit(std::iter::empty(), sets) && (expire_at <= 0 || key.set_expire_at(expire_at));
    stored.then_some(written).ok_or(Failure::WriteFailed)
}
