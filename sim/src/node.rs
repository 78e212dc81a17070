//! A simulated node: the module's real lock core (`lock-core`: the same
//! `lock::acquire`, `release`, `extend`, `exit` and `fence` the commands
//! call, the same fencing counter, the same quarantine arithmetic) behind a thin
//! dispatcher that stands in for the module's Redis glue. What the glue
//! does that this file re-implements (storing a lock, the node clock, the
//! restart quarantine's start, the persistence a restart finds) is covered
//! by the real-server suites only; docs/safety.md lists it.

use std::collections::{BTreeMap, BTreeSet};

use lock_core::fencing::Fencer;
use lock_core::forgetting;
use lock_core::imports::{self, SlotWaits};
use lock_core::lock::{self, Admission, AllGrant, Exit, Grant};
use lock_core::memory::Holders;
use lock_core::quarantine;
use lock_core::txn::{Changes, Stored, Txn};
use lock_protocol::code::{ERR, QUARANTINE, WRONGTYPE};

use crate::command::{self, Request};
use crate::forget::{Forgotten, Loss};
use crate::resp::Reply;
use crate::stored;
use crate::tokens::Ledger;
use crate::waits::{self, Look, Waits};

/// Where the node's clock starts: a realistic epoch in milliseconds, so
/// that fencing tokens look like the module's (`now_ms * 1000`).
const EPOCH_MS: i64 = 1_700_000_000_000;

/// The nodes' `lock.clock-jump-tolerance-ms` (the module's default is a
/// minute; a second keeps simulated histories short): the restart grace,
/// and how much longer a removal quarantine restored at a start lasts
/// (src/node.rs `restore_written_quarantine`).
pub const CLOCK_TOLERANCE_MS: i64 = 1000;

/// What a restart finds of the locks granted before.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Persistence {
    /// Nothing: the node restarts empty.
    None,
    /// An AOF fsynced every second: the writes of the last second are lost.
    EverySec,
    /// An AOF fsynced at every write: nothing acknowledged is lost.
    Always,
}

/// Which lock service the node is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rules {
    /// The module: quarantine after a start that may have lost grants,
    /// fencing tokens from the clock-backed counter.
    Module,
    /// The classic recipe, `SET key token NX PX ttl`: no quarantine, and
    /// a "token" that is only a counter of this process's grants.
    Classic,
}

pub struct Node {
    pub persistence: Persistence,
    rules: Rules,
    keys: BTreeMap<Vec<u8>, Holders>,
    /// What an `everysec` AOF has on disk, and when it was written.
    on_disk: BTreeMap<Vec<u8>, Holders>,
    /// The fencing counter's kept value that `on_disk` has with it.
    on_disk_counter: u64,
    synced_ms: i64,
    fencer: Fencer,
    /// The classic recipe's grant counter (reset by a restart).
    grants: u64,
    quarantine_since_ms: Option<i64>,
    quarantine_ms: i64,
    ttl_max_ms: i64,
    /// `lock.expiry-delay-ms`: a lock that ran out unreleased keeps its
    /// slot this much longer (the module's only; the classic recipe has
    /// none).
    expiry_delay_ms: i64,
    /// How far the wall clock is from true time (steps add up here).
    wall_offset_ms: i64,
    /// The module clock's offset: the wall clock's when the process
    /// started (the module clock follows it then runs monotonic; a step
    /// while it runs moves no deadline, a restart takes it in).
    anchor_ms: i64,
    /// When a restart kept its locks without a quarantine: the restart
    /// grace runs from there.
    grace_since_ms: Option<i64>,
    /// How fast the node's clocks run, in thousandths off true time (a
    /// clock 0.8% fast: 8); the client budgets 1% of drift.
    pub rate_per_mille: i64,
    /// The AOF is rewritten during every process's life (before its
    /// crash): the previous release's AOF loses its `LOCK.FENCE` raises,
    /// this release's gets the node's ledger in its RDB preamble.
    pub aof_rewritten: bool,
    /// The AOF holds the node's ledger: not after a start from the
    /// previous release's files, until this release rewrites it.
    aof_ledger: bool,
    pub up: bool,
    /// Bumped by every crash: a connection of an older epoch is dead.
    pub epoch: u64,
    /// The clients blocked in a `WAIT` (lost in a crash).
    waits: Waits,
    /// The module's forgetting rules (property 10), this process's; fed
    /// only in a history where keys may be lost (nothing else reads them,
    /// and the deadline sketch costs a 256 KB table per process).
    forgotten: Forgotten,
    pub may_lose_keys: bool,
    /// The checker's record of the tokens this node issued (property 9).
    pub ledger: Ledger,
    /// The next restart runs a new release of the module over the data
    /// the previous one wrote (shared locks and semaphores in its string
    /// form).
    pub upgrade: bool,
    /// This start read the previous release's files (no ledger in them).
    legacy_start: bool,
    /// The keys still in the previous release's string form (`stored.rs`):
    /// their first write converts them.
    legacy: BTreeSet<Vec<u8>>,
    /// Writes whose stored value lost or changed a holder the transaction
    /// meant to keep (property 6), as the checker saw them.
    pub misstored: Vec<String>,
    /// The hash slots this node imports or imported a short while ago
    /// (the module's slot waits, the core's `imports::SlotWaits`: from an
    /// import's start until the node's quarantine after its end, a new
    /// grant in the slot is refused, but for the keys whose lock arrived by
    /// it; a cluster's master only).
    slot_waits: SlotWaits,
    /// A replica that Sentinel promotes in this node's place (a plain
    /// member's failover), if it has one.
    pub replica: Option<Follower>,
}

/// A plain member's replica: what it has of its master (its locks and
/// fencing counter) as of its last catch-up, `lag_ms` behind.
#[derive(Clone, Debug, Default)]
pub struct Follower {
    pub lag_ms: i64,
    pub copy: (BTreeMap<Vec<u8>, Holders>, u64),
    pub synced_ms: i64,
}

impl Node {
    /// A node whose clients use TTLs up to `ttl_max_ms` (its quarantine,
    /// when it has one, covers them and the lock-delay), with the
    /// lock-delay `expiry_delay_ms` (0: none).
    pub fn new(rules: Rules, persistence: Persistence, ttl_max_ms: i64, expiry_delay_ms: i64) -> Node {
        let expiry_delay_ms = if rules == Rules::Module { expiry_delay_ms.max(0) } else { 0 };
        Node {
            persistence,
            rules,
            keys: BTreeMap::new(),
            on_disk: BTreeMap::new(),
            on_disk_counter: 0,
            synced_ms: 0,
            fencer: Fencer::new(0),
            grants: 0,
            quarantine_since_ms: None,
            quarantine_ms: quarantine::length_ms(-1, ttl_max_ms, expiry_delay_ms),
            ttl_max_ms,
            expiry_delay_ms,
            wall_offset_ms: 0,
            anchor_ms: 0,
            grace_since_ms: None,
            rate_per_mille: 0,
            aof_rewritten: false,
            aof_ledger: true,
            up: true,
            epoch: 0,
            waits: Waits::default(),
            forgotten: Forgotten::default(),
            may_lose_keys: false,
            ledger: Ledger::default(),
            upgrade: false,
            legacy_start: false,
            legacy: BTreeSet::new(),
            misstored: Vec::new(),
            slot_waits: SlotWaits::new(),
            replica: None,
        }
    }

    /// The clock the node's locks run on at simulated time `virtual_ms`:
    /// the module clock (monotonic since the start), or for the classic
    /// recipe the wall clock (Redis expires keys on it).
    fn now_ms(&self, virtual_ms: i64) -> i64 {
        let offset = match self.rules {
            Rules::Module => self.anchor_ms,
            Rules::Classic => self.wall_offset_ms,
        };
        EPOCH_MS + virtual_ms + virtual_ms * self.rate_per_mille / 1000 + offset
    }

    /// The node's clocks start `offset_ms` off true time (the nodes' wall
    /// clocks disagree; the module clock starts on the wall clock).
    pub fn set_clock_offset(&mut self, offset_ms: i64) {
        self.wall_offset_ms = offset_ms;
        self.anchor_ms = offset_ms;
    }

    /// The wall clock steps by `step_ms` (NTP, an operator).
    pub fn step_clock(&mut self, step_ms: i64) {
        self.wall_offset_ms += step_ms;
    }

    /// The process dies: what it held in memory and not on disk is lost,
    /// its connections break.
    pub fn crash(&mut self) {
        self.up = false;
        self.epoch += 1;
        self.waits.wake_all();
        self.waits = Waits::default();
    }

    /// The process starts again with what its persistence kept.
    pub fn restart(&mut self, virtual_ms: i64) {
        self.anchor_ms = self.wall_offset_ms;
        let now = self.now_ms(virtual_ms);
        self.keys = match self.persistence {
            Persistence::None => BTreeMap::new(),
            Persistence::EverySec => self.on_disk.clone(),
            Persistence::Always => std::mem::take(&mut self.keys),
        };
        self.legacy_start = std::mem::take(&mut self.upgrade);
        if self.legacy_start {
            self.legacy = stored::as_before_the_upgrade(&mut self.keys);
        }
        let keys = &self.keys;
        self.legacy.retain(|key| keys.contains_key(key));
        // The counter's kept value comes back with the AOF: the ledger in
        // its RDB preamble (a rewrite keeps it) and the `LOCK.FENCE` raises
        // after it (the module's `keep_counter` writes one for every grant
        // above what is kept); an `everysec` AOF has it as of its last
        // fsync, and no persistence nothing. The previous release's AOF
        // (an upgrade) has its `LOCK.FENCE` raises unless it rewrote them
        // away, and no ledger.
        let always = self.persistence == Persistence::Always;
        let loaded = self.persistence != Persistence::None;
        let kept = match self.persistence {
            Persistence::Always if self.legacy_start && self.aof_rewritten => 0,
            Persistence::Always if self.legacy_start => self.fencer.last(),
            Persistence::Always => self.fencer.kept(),
            Persistence::EverySec => self.on_disk_counter,
            Persistence::None => 0,
        };
        self.fencer = Fencer::new(kept);
        self.grants = 0;
        // A start from an `always` AOF skips the quarantine if the AOF
        // holds the node's ledger (src/node.rs `on_loaded_from_disk`): not
        // the previous release's AOF (an upgrade), nor this release's
        // after such a start until a rewrite wrote the ledger; the module
        // quarantines then (`StartCause::NoLedger`). A ledger written
        // during a quarantine carries its end, and the start goes on with
        // it (`restore_ledger`, `continue_quarantine`).
        if always && (self.legacy_start || self.aof_rewritten) {
            self.aof_ledger = !self.legacy_start;
        }
        let no_ledger = always && !self.aof_ledger;
        let in_force_until =
            self.quarantine_since_ms.map(|since_ms| since_ms.saturating_add(self.quarantine_ms));
        self.quarantine_since_ms = match self.rules {
            Rules::Module
                if no_ledger
                    || quarantine::needed_at_start(loaded, if always { "always" } else { "everysec" }) =>
            {
                Some(now)
            }
            Rules::Module => in_force_until
                .filter(|&until_ms| until_ms > now)
                .map(|until_ms| until_ms - self.quarantine_ms),
            Rules::Classic => None,
        };
        let kept = loaded && !self.keys.is_empty();
        // The restart grace covers restored locks unless a quarantine of
        // this start's own does (one carried on by the ledger does not).
        let own_quarantine = self.quarantine_since_ms == Some(now);
        self.grace_since_ms = (self.rules == Rules::Module && kept && !own_quarantine).then_some(now);
        // The removal quarantines come back with the ledger and the
        // `LOCK.FORGOTTEN` records, each the clock-jump tolerance longer
        // (src/node.rs `restore_written_quarantine`: a forward step before
        // the start must not shorten them); the previous release wrote
        // neither.
        self.forgotten = if always && self.rules == Rules::Module && !self.legacy_start {
            self.forgotten.restarted_from_always(now, self.ttl_max_ms, CLOCK_TOLERANCE_MS)
        } else {
            Forgotten::started(loaded, now, self.ttl_max_ms)
        };
        // A slot's wait is kept with the removal quarantines (the ledger
        // and the AOF's records): only an `always` start has it still.
        if !always || self.legacy_start {
            self.slot_waits.clear();
        }
        self.up = true;
    }

    /// Runs one command at `virtual_ms`: its words read with the module's
    /// parser (`command.rs`), then the core on the keys it names.
    pub fn call(&mut self, words: &[Vec<u8>], virtual_ms: i64) -> Reply {
        let now = self.now_ms(virtual_ms);
        // The replica catches up before the call: it misses the writes of
        // its last `lag_ms`.
        if self.replica.as_ref().is_some_and(|r| virtual_ms - r.synced_ms >= r.lag_ms) {
            let copy = self.replica_copy();
            if let Some(replica) = self.replica.as_mut() {
                (replica.copy, replica.synced_ms) = (copy, virtual_ms);
            }
        }
        if self.persistence == Persistence::EverySec && now - self.synced_ms >= 1000 {
            self.on_disk = self.keys.clone();
            self.on_disk_counter = self.fencer.kept();
            self.synced_ms = now;
        }
        let argv: Vec<&[u8]> = words.iter().map(Vec::as_slice).collect();
        let request = match command::parse(&argv, command::limits(self.ttl_max_ms), now) {
            Ok(request) => request,
            Err(refused) => return refused,
        };
        let left_ms = self.quarantine_left_at(now);
        let admission = if left_ms > 0 { Admission::Quarantined } else { Admission::Open };
        let refused = |why: Grant| match why {
            Grant::Busy => Reply::Nil,
            Grant::Quarantined => quarantined(left_ms),
            other => Reply::Error(ERR, format!("{other:?}")),
        };
        let rules = self.rules;
        // A single key's waiters are looked at after every call on it (a
        // release, an expiry found, ...), as the module's hand-off does.
        let single = match &request {
            Request::Grant { key, .. }
            | Request::Release { key, .. }
            | Request::Extend { key, .. }
            | Request::Exit { key, .. }
            | Request::Fence { key, .. } => Some(*key),
            _ => None,
        };
        // The classic recipe's "token" counts this process's grants.
        let token = |fence: u64, grants: &mut u64| match rules {
            Rules::Module => Reply::Int(fence as i64),
            Rules::Classic => {
                *grants += 1;
                Reply::Int(*grants as i64)
            }
        };
        // The keys a holder's release may free: those the caller holds (a
        // lock it held, run out, is found expired, not freed by it).
        let (releasing, releaser): (Vec<&[u8]>, &[u8]) = match &request {
            Request::Release { key, owner } | Request::Exit { key, owner, .. } => (vec![*key], owner),
            Request::ReleaseAll { keys, owner } => (keys.clone(), owner),
            _ => (Vec::new(), b""),
        };
        let held = |key: &&[u8]| {
            self.keys.get(*key).is_some_and(|h| {
                h.records().iter().any(|(o, hold)| o.as_slice() == releaser && hold.deadline_ms > now)
            })
        };
        let releasing: Vec<&[u8]> = releasing.into_iter().filter(held).collect();
        let reply = match request {
            // The simulated node serves no waits for sets: a set with
            // `WAIT` is refused, not answered as without it.
            Request::GrantAll { wait_ms: Some(_), .. } => {
                Reply::Error(ERR, "the simulated node does not serve WAIT for sets".into())
            }
            Request::Grant { key, want, owner, ttl_ms, wait_ms } => {
                // A key or database quarantined for a lock it lost
                // (property 10).
                let forgotten = self.forgotten_refusal(key, left_ms, now);
                // No barging past the key's waiters (`waits.rs`).
                let admission = waits::admission(left_ms > 0 || forgotten.is_some(), self.waits.queued(key));
                self.on_keys(&[key], now, |txns, node| {
                    let [txn] = txns else { return Reply::Nil };
                    match (lock::acquire(txn, want, owner, ttl_ms, admission, &mut node.fencer), wait_ms) {
                        (Grant::Granted(fence), _) => {
                            node.fencer.to_keep(now);
                            node.ledger.issued(fence, virtual_ms, node.epoch);
                            token(fence, &mut node.grants)
                        }
                        (Grant::Renewed(fence), _) => token(fence, &mut node.grants),
                        (Grant::Quarantined | Grant::Busy, _) if forgotten.is_some() => {
                            Reply::Error(QUARANTINE, forgotten.clone().unwrap_or_default())
                        }
                        // While new grants are refused, waiting would only
                        // block the caller: refused at once, as the module.
                        (Grant::Busy, Some(_)) if left_ms > 0 => quarantined(left_ms),
                        (Grant::Busy, Some(wait_ms)) => {
                            node.waits.push(key, want, owner, ttl_ms, wait_ms, now)
                        }
                        (other, _) => refused(other),
                    }
                })
            }
            Request::GrantAll { keys, wants, owner, ttl_ms, wait_ms: None } => {
                let admissions: Vec<Admission> = keys
                    .iter()
                    .map(|key| match self.forgotten_refusal(key, left_ms, now) {
                        Some(_) => Admission::Quarantined,
                        None => admission,
                    })
                    .collect();
                self.on_keys(&keys, now, |txns, node| {
                    match lock::acquire_all(txns, &wants, owner, ttl_ms, &admissions, &mut node.fencer) {
                        AllGrant::Granted(fence) => {
                            node.fencer.to_keep(now);
                            node.ledger.issued(fence, virtual_ms, node.epoch);
                            token(fence, &mut node.grants)
                        }
                        AllGrant::Renewed(fence) => token(fence, &mut node.grants),
                        AllGrant::Refused { why, .. } => refused(why),
                    }
                })
            }
            Request::Extend { key, owner, ttl_ms } => {
                self.on_keys(&[key], now, |txns, _| one(flags(txns, |txn| lock::extend(txn, owner, ttl_ms))))
            }
            Request::Renew { keys, owner, ttl_ms } => self.on_keys(&keys, now, |txns, _| {
                Reply::Ints(flags(txns, |txn| lock::extend(txn, owner, ttl_ms)))
            }),
            Request::Release { key, owner } => {
                self.on_keys(&[key], now, |txns, _| one(flags(txns, |txn| lock::release(txn, owner))))
            }
            Request::ReleaseAll { keys, owner } => {
                self.on_keys(&keys, now, |txns, _| Reply::Ints(flags(txns, |txn| lock::release(txn, owner))))
            }
            Request::Fence { key, owner, floor } => self.on_keys(&[key], now, |txns, node| match rules {
                Rules::Module => {
                    let fenced = flags(txns, |txn| lock::fence(txn, owner, floor, &mut node.fencer));
                    // Replicated as itself: the AOF holds the raise.
                    if fenced.first() == Some(&1) {
                        node.fencer.raise_kept(floor);
                    }
                    one(fenced)
                }
                // No fencing: whatever the client asks, the node says yes.
                Rules::Classic => Reply::Int(1),
            }),
            Request::Exit { key, owner, request_id } => self.on_keys(&[key], now, |txns, _| {
                let [txn] = txns else { return Reply::Nil };
                match lock::exit(txn, owner, request_id) {
                    Exit::Left(holds) => Reply::Int(holds.into()),
                    Exit::NotHeld => Reply::Nil,
                    Exit::WrongKind { found } => Reply::Error(WRONGTYPE, format!("a {} lock", found.name())),
                }
            }),
        };
        // A holder's release that freed its key ends the key's quarantine
        // for a lock's arrival (the module's `lock_released`).
        for key in releasing.into_iter().filter(|key| !self.keys.contains_key(*key)) {
            self.forgotten.released(key);
        }
        if let Some(key) = single.filter(|key| self.waits.queued(key) > 0) {
            self.hand_off(key, now);
        }
        if rules == Rules::Module {
            self.ledger.reached(self.fencer.last(), virtual_ms, self.epoch);
        }
        reply
    }

    /// Why a new grant of `key` is refused for a lock the node lost, or
    /// while its slot's import waits, if it is (and the node is not in
    /// quarantine already).
    fn forgotten_refusal(&mut self, key: &[u8], left_ms: i64, now: i64) -> Option<String> {
        if self.rules != Rules::Module || left_ms > 0 {
            return None;
        }
        self.forgotten.refusal(key, now).or_else(|| self.slot_wait_refusal(key, now))
    }

    /// Why a new grant of `key` is refused while its slot's import waits
    /// (`slot_waits`), if it is.
    fn slot_wait_refusal(&mut self, key: &[u8], now: i64) -> Option<String> {
        if self.slot_waits.is_empty() {
            return None;
        }
        let slot = lock_protocol::slot::key_slot(key);
        let wait = self.slot_waits.refusal(slot, forgetting::key_hash(0, key), now)?;
        Some(match wait.until_ms {
            imports::OPEN => {
                format!("this key's hash slot {slot} is being imported, refusing new locks in it")
            }
            until_ms => {
                format!(
                    "this key's hash slot {slot} was imported, refusing new locks in it for {} ms",
                    until_ms - now
                )
            }
        })
    }

    /// The node loses `key` or its database at `virtual_ms` behind the
    /// module's back (see `forget.rs`); what happened, in words.
    pub fn lose(&mut self, loss: Loss, key: &[u8], virtual_ms: i64) -> String {
        let now = self.now_ms(virtual_ms);
        let cool_down_ms = self.cool_down_ms(now);
        let what = self.forgotten.lose(loss, key, &mut self.keys, now, cool_down_ms);
        let keys = &self.keys;
        self.legacy.retain(|key| keys.contains_key(key));
        what
    }

    /// How long an expired lock keeps its slot at `now` (module clock):
    /// the lock-delay and the restart grace, as the module's key state
    /// computes it.
    fn cool_down_ms(&self, now: i64) -> i64 {
        let grace_ms = quarantine::restart_grace_ms(
            self.grace_since_ms,
            now,
            self.ttl_max_ms,
            self.expiry_delay_ms,
            CLOCK_TOLERANCE_MS,
        );
        self.expiry_delay_ms.saturating_add(grace_ms)
    }

    /// Waiter `handle`'s answer at `virtual_ms`, if it has one (`waits.rs`):
    /// first the hand-off on its key (the module's timer), or its waiters
    /// refused while the node is in quarantine.
    pub fn poll_wait(&mut self, handle: u64, virtual_ms: i64) -> Look {
        let now = self.now_ms(virtual_ms);
        if let Some(key) = self.waits.key_of(handle).filter(|key| self.waits.is_due(key, now)) {
            self.hand_off(&key, now);
        }
        self.waits.answer(handle, now)
    }

    /// The hand-off of `key` to its waiters, or their refusal while the
    /// node is in quarantine.
    fn hand_off(&mut self, key: &[u8], now: i64) {
        let left_ms = self.quarantine_left_at(now);
        if left_ms > 0 {
            self.waits.fail_all(key, &quarantined(left_ms));
            return;
        }
        // The key or its database quarantined for a lock it lost: its
        // waiters are told why, as the module's hand-off does.
        if let Some(why) = self.forgotten_refusal(key, left_ms, now) {
            self.waits.fail_all(key, &Reply::Error(QUARANTINE, why));
            return;
        }
        self.on_keys(&[key], now, |txns, node| {
            if let [txn] = txns {
                node.waits.serve(key, txn, &mut node.fencer);
                node.fencer.to_keep(now);
            }
            Reply::Nil
        });
    }

    /// How long the start-up quarantine still refuses new grants at the
    /// node's clock `now` (0: none).
    fn quarantine_left_at(&self, now: i64) -> i64 {
        quarantine::remaining_ms(
            self.quarantine_since_ms
                .map(|since_ms| quarantine::Quarantine { reason: quarantine::Reason::Startup, since_ms }),
            now,
            self.quarantine_ms,
        )
    }

    /// Runs `run` on a transaction over each of `keys` (their stored locks
    /// as now), then stores what each changed.
    fn on_keys<'o>(
        &mut self,
        keys: &[&'o [u8]],
        now: i64,
        run: impl FnOnce(&mut [Txn<'_, 'o, Holders>], &mut Node) -> Reply,
    ) -> Reply {
        // The lock-delay in force, as the module's key state computes it.
        let cool_down_ms = self.cool_down_ms(now);
        let stored: Vec<Holders> =
            keys.iter().map(|key| self.keys.get(*key).cloned().unwrap_or_else(Holders::free)).collect();
        let mut txns: Vec<Txn<'_, 'o, Holders>> =
            stored.iter().map(|s| Txn::new(s, now, cool_down_ms)).collect();
        let reply = run(&mut txns, self);
        for ((key, before), txn) in keys.iter().zip(&stored).zip(txns) {
            let changes: Changes<'_> = txn.finish();
            if changes.is_empty() {
                continue;
            }
            if self.may_lose_keys {
                self.forgotten.wrote(key, &changes, now, cool_down_ms);
            }
            // A lock still in the previous release's string form is
            // converted to a hash by its first write: the node reads its
            // holders back from that hash.
            let after = if self.legacy.remove(*key) {
                let (after, wrong) = stored::converted(before, &changes);
                if let Some(wrong) = wrong {
                    let key = String::from_utf8_lossy(key);
                    self.misstored.push(format!("{key} at {now} ms (node clock): {wrong}"));
                }
                after
            } else {
                before.apply(&changes)
            };
            if after.records().is_empty() {
                self.keys.remove(*key);
            } else {
                self.keys.insert(key.to_vec(), after);
            }
        }
        reply
    }

    /// Whether `owner` has a record (live or not) on each of `keys`.
    pub fn on_keys_of(&self, owner: &[u8], keys: &[Vec<u8>]) -> Vec<bool> {
        let on =
            |key: &Vec<u8>| self.keys.get(key).is_some_and(|h| h.records().iter().any(|(o, _)| o == owner));
        keys.iter().map(on).collect()
    }

    // What a simulated cluster (`cluster.rs`) needs of its shard masters.

    /// Milliseconds of quarantine left at `virtual_ms` (0: none), as
    /// `INFO lock` reports it.
    pub fn quarantine_left_ms(&self, virtual_ms: i64) -> i64 {
        self.quarantine_left_at(self.now_ms(virtual_ms))
    }

    /// How far the module clock is from true time (besides its rate).
    pub fn clock_offset_ms(&self) -> i64 {
        self.anchor_ms
    }

    /// The fencing counter (`lock_last_fencing_token`).
    pub fn fencing_counter(&self) -> u64 {
        self.fencer.last()
    }

    /// Whether `key` has a lock record here (a migrating slot's node
    /// serves the keys it still has and sends the others on with `ASK`).
    pub fn has_key(&self, key: &[u8]) -> bool {
        self.keys.contains_key(key)
    }

    /// The keys of hash slot `slot` with a lock record here, in order.
    pub fn keys_in_slot(&self, slot: u16) -> Vec<Vec<u8>> {
        self.keys.keys().filter(|key| lock_protocol::slot::key_slot(key) == slot).cloned().collect()
    }

    /// `key`'s record as it is (what a migration copies).
    pub fn key_copy(&self, key: &[u8]) -> Option<Holders> {
        self.keys.get(key).cloned()
    }

    /// `key`'s record taken out (`MIGRATE` deletes it on the source).
    pub fn take_key(&mut self, key: &[u8]) -> Option<Holders> {
        self.keys.remove(key)
    }

    /// `key`'s record stored as it was (`RESTORE` on the target: the same
    /// holders, tokens and deadlines).
    pub fn put_key(&mut self, key: Vec<u8>, holders: Holders) {
        self.keys.insert(key, holders);
    }

    /// `key`'s lock arrives by a slot migration at `virtual_ms` (`RESTORE`,
    /// or the writes of Valkey's import), stored as it was: the module
    /// raises the fencing counter to its top token at once, quarantines the
    /// key against a takeover by expiry for the node's quarantine (cause
    /// `imported`; the holder's release ends it), and exempts it from its
    /// slot's wait. `None` (a copy without a lock): the key is gone.
    pub fn lock_arrived(&mut self, key: &[u8], holders: Option<Holders>, virtual_ms: i64) {
        let Some(holders) = holders.filter(|h| !h.records().is_empty()) else {
            self.keys.remove(key);
            return;
        };
        let now = self.now_ms(virtual_ms);
        if self.rules == Rules::Module {
            // The key's top token: its holders', and a released holder's
            // while others keep the key (a shared lock), as the module's
            // stored header carries it.
            let top = Stored::top_fence(&holders);
            self.fencer.raise_kept(top);
            self.ledger.reached(self.fencer.last(), virtual_ms, self.epoch);
            self.forgotten.arrived(key, now.saturating_add(self.quarantine_ms), now);
            self.slot_waits.arrived(lock_protocol::slot::key_slot(key), forgetting::key_hash(0, key));
        }
        self.keys.insert(key.to_vec(), holders);
    }

    /// An import of `slot` starts on this node (`CLUSTER SETSLOT ...
    /// IMPORTING`, Valkey's `IMPORT_STARTED`): its wait runs until the
    /// import ends. A wait of the slot still running goes on, its exempt
    /// keys with it.
    pub fn import_started(&mut self, slot: u16) {
        if self.rules == Rules::Module {
            self.slot_waits.import_started(slot);
        }
    }

    /// The import of `slot` ends at `virtual_ms` (`CLUSTER SETSLOT ...
    /// NODE`, Valkey's `IMPORT_COMPLETED` or `IMPORT_ABORTED`): its wait
    /// lasts the node's quarantine longer (one starts if none ran: the node
    /// took the slot without an import it knew of, as a promoted replica).
    pub fn import_ended(&mut self, slot: u16, virtual_ms: i64) {
        if self.rules == Rules::Module {
            self.slot_waits.import_ended(slot, self.now_ms(virtual_ms), self.quarantine_ms);
        }
    }

    /// What a replica has of this node now: its locks and its fencing
    /// counter (a grant's writes replicate both; also what a call that
    /// changes nothing leaves as it was).
    pub fn replica_copy(&self) -> (BTreeMap<Vec<u8>, Holders>, u64) {
        (self.keys.clone(), self.fencer.last())
    }

    /// This node's replica, promoted at `virtual_ms` with what it had
    /// replicated (`copy`, maybe some writes behind): the module starts
    /// its failover quarantine (`lock.failover-quarantine yes`). Its clocks
    /// are this node's.
    pub fn promoted(&self, copy: (BTreeMap<Vec<u8>, Holders>, u64), virtual_ms: i64) -> Node {
        let (keys, counter) = copy;
        Node {
            keys,
            fencer: Fencer::new(counter),
            persistence: Persistence::None,
            on_disk: BTreeMap::new(),
            synced_ms: 0,
            grants: 0,
            quarantine_since_ms: (self.rules == Rules::Module).then(|| self.now_ms(virtual_ms)),
            grace_since_ms: None,
            aof_rewritten: false,
            aof_ledger: true,
            up: true,
            epoch: 0,
            waits: Waits::default(),
            // A promotion takes in locks this process did not write (the
            // module's `note_imported_locks`).
            forgotten: Forgotten::started(true, self.now_ms(virtual_ms), self.ttl_max_ms),
            ledger: self.ledger.of_another_process(),
            legacy: BTreeSet::new(),
            misstored: self.misstored.clone(),
            // It quarantines as a whole: it keeps no slot's wait.
            slot_waits: SlotWaits::new(),
            replica: None,
            ..*self
        }
    }
}

/// A yes (1) or no (0) per key: the single-key commands answer the one
/// key's, `LOCK.RENEW` and `LOCK.MRELEASE` one per key.
fn flags<'o>(
    txns: &mut [Txn<'_, 'o, Holders>],
    mut run: impl FnMut(&mut Txn<'_, 'o, Holders>) -> bool,
) -> Vec<i64> {
    txns.iter_mut().map(|txn| i64::from(run(txn))).collect()
}

/// The refusal of a node in quarantine.
fn quarantined(left_ms: i64) -> Reply {
    Reply::Error(QUARANTINE, format!("the node restarted, refusing new locks for {left_ms} ms"))
}

/// The one key's flag.
fn one(flags: Vec<i64>) -> Reply {
    Reply::Int(flags.first().copied().unwrap_or(0))
}
