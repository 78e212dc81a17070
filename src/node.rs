//! The node's state, in one object ([`Node`], the one static [`NODE`]): the
//! settings, the counters, the fencing counter, the quarantines (of the node
//! after a start or a promotion; of keys and databases whose locks were
//! removed behind the module's back), the eviction guard, and the waiting
//! state. Everything else reads it through the call in hand (a command's
//! context, a callback), never through a global of its own.
//!
//! Commands run on Redis' main thread, so the mutexes are never contended;
//! they only make the object `Sync`. None is held across a call into Redis
//! that could call back into the module.

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

use crate::config::{EvictionMode, Protection, Settings};
use crate::core::fencing::Fencer;
use crate::core::forgetting::{self, Cause, Entry, Forgetting, Quarantined};
use crate::core::imports::{SlotChange, SlotWaits, OPEN};
use crate::core::ledger::Ledger;
use crate::core::quarantine::{self, Quarantine, Reason, Refusal};
use crate::core::waiting::Waiting;
use crate::ffi::{TimerId, WaiterHandle};
use crate::stats::Stats;

/// The node's waiting state, with the adapter's handle types.
pub type NodeWaiting = Waiting<WaiterHandle, TimerId>;

/// What a transaction over a lock key needs from the settings and the
/// node's state, read once at the start of a call (`keystate` reads nothing
/// else).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rules {
    /// The call's instant on the module clock.
    pub now_ms: i64,
    /// How long an expired holder keeps its slot: the lock-delay plus the
    /// restart grace in force.
    pub cool_down_ms: i64,
    /// Added to a lock's deadline for its key's native expiry: the
    /// clock-jump tolerance and the lock-delay.
    pub backstop_after_ms: i64,
    /// A hash lock's expiry is set this much further than it needs, so
    /// that holders renewing one after another move it about once per
    /// max-ttl (`lock.max-ttl-ms`).
    pub backstop_slack_ms: i64,
    /// No deadline this module writes lies further ahead of now.
    pub deadline_ahead_max_ms: i64,
}

pub struct Node {
    pub settings: Settings,
    pub stats: Stats,
    fencer: Mutex<Fencer>,
    quarantine: Mutex<Option<Quarantine>>,
    /// Set once a quarantine is found over, so that every later grant checks
    /// one flag instead of the clock (a quarantine, once over, stays over).
    quarantine_over: AtomicBool,
    /// Whether the start-up quarantine keeps every restored lock from being
    /// taken over early (see [`quarantine::covers_restored_locks`]).
    start_quarantine_covers: AtomicBool,
    /// Set at load when the start skipped the quarantine: the load must
    /// bring the node's ledger back ([`Node::on_loaded_from_disk`]).
    durable_start: AtomicBool,
    /// Set when a ledger was read back, until the load from disk ends.
    ledger_seen: AtomicBool,
    /// Databases flushed or swapped by commands replayed while loading.
    flushed_while_loading: Mutex<Vec<i32>>,
    /// When the restart grace started (module clock), or [`NO_GRACE`].
    restart_grace_since: AtomicI64,
    /// When locks were restored from disk under a start-up quarantine that
    /// covers them (module clock), or [`NO_GRACE`]: the restart grace that
    /// quarantine made needless starts from here if an operator ends it
    /// early.
    restored_since: AtomicI64,
    forgetting: Mutex<Option<Forgetting>>,
    /// Set while a key or database quarantine may be in force: a grant
    /// checks this flag, not the mutex, in the common case.
    any_forgotten: AtomicBool,
    /// The slots waiting after an import (`core::imports`).
    slot_waits: Mutex<SlotWaits>,
    /// Set while a slot may wait: a grant checks this flag, not the mutex,
    /// in the common case (a node that imported nothing).
    any_slot_wait: AtomicBool,
    /// The quarantines started since the last write of records: the module
    /// writes each into its AOF and replication stream
    /// (`LOCK.QUARANTINED`) from a timer, since what starts them (a load, a
    /// promotion, a command filter) cannot write.
    records: Mutex<Vec<Record>>,
    /// Imports a command filter saw start, to check once the command ran.
    imports_to_check: Mutex<Vec<u16>>,
    /// The latest end of a start-up or promotion quarantine read back while
    /// loading (the ledger, a replayed `LOCK.QUARANTINED NODE`), or
    /// `i64::MIN`: a start without quarantine goes on with it.
    written_quarantine_until: AtomicI64,
    /// The eviction policy when it may evict lock keys (`maxmemory` set, not
    /// `noeviction`); `None` when it cannot.
    evicting_policy: Mutex<Option<String>>,
    evictable: AtomicBool,
    waiting: Mutex<Option<NodeWaiting>>,
    /// Waiters on the node; read without locking on every keyspace event.
    waiting_now: AtomicUsize,
}

const NO_GRACE: i64 = i64::MIN;

/// A quarantine that the node writes into its AOF and replication stream
/// when it starts (`LOCK.QUARANTINED`), so that a start from that AOF
/// without a rewrite in between, which reads an older ledger, still knows
/// it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Record {
    /// The start-up or promotion quarantine, until this instant.
    Node { until_ms: i64 },
    /// A slot's wait after an import, until this instant (`OPEN` while the
    /// import runs).
    Slot { slot: u16, until_ms: i64 },
}

/// Why a start was quarantined.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StartCause {
    /// Acknowledged grants may be lost: no `appendonly yes` with
    /// `appendfsync always`.
    NotDurable,
    /// `aof-use-rdb-preamble no`: an AOF rewrite cannot keep the node's
    /// ledger.
    NoPreamble,
    /// The AOF held no ledger (its last rewrite was by an older release, or
    /// without the RDB preamble).
    NoLedger,
}

/// Why `LOCK.UNQUARANTINE` ended nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NotEnded {
    /// The node grants: no start-up or promotion quarantine is in force.
    NoneInForce,
    /// The quarantine in force is this other one, with the ms left.
    OtherReason(Reason, i64),
}

/// The node. Its one owner is this module; Redis' callbacks reach it through
/// the call in hand.
pub static NODE: Node = Node::new();

fn locked<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Node {
    const fn new() -> Node {
        Node {
            settings: Settings::new(),
            stats: Stats::new(),
            fencer: Mutex::new(Fencer::new(0)),
            quarantine: Mutex::new(None),
            quarantine_over: AtomicBool::new(true),
            start_quarantine_covers: AtomicBool::new(false),
            durable_start: AtomicBool::new(false),
            ledger_seen: AtomicBool::new(false),
            flushed_while_loading: Mutex::new(Vec::new()),
            restart_grace_since: AtomicI64::new(NO_GRACE),
            restored_since: AtomicI64::new(NO_GRACE),
            forgetting: Mutex::new(None),
            any_forgotten: AtomicBool::new(false),
            slot_waits: Mutex::new(SlotWaits::new()),
            any_slot_wait: AtomicBool::new(false),
            records: Mutex::new(Vec::new()),
            imports_to_check: Mutex::new(Vec::new()),
            written_quarantine_until: AtomicI64::new(i64::MIN),
            evicting_policy: Mutex::new(None),
            evictable: AtomicBool::new(false),
            waiting: Mutex::new(None),
            waiting_now: AtomicUsize::new(0),
        }
    }

    /// What a transaction at `now_ms` needs to know (see [`Rules`]).
    pub fn rules(&self, now_ms: i64) -> Rules {
        let s = &self.settings;
        Rules {
            now_ms,
            cool_down_ms: self.cool_down_ms(now_ms),
            backstop_after_ms: s.clock_jump_tolerance_ms.get().saturating_add(s.expiry_delay_ms.get()),
            backstop_slack_ms: s.max_ttl_ms.get(),
            deadline_ahead_max_ms: s.deadline_ahead_max_ms(),
        }
    }

    // --- the fencing counter ---------------------------------------------

    pub fn with_fencer<T>(&self, f: impl FnOnce(&mut Fencer) -> T) -> T {
        f(&mut locked(&self.fencer))
    }

    pub fn last_fence(&self) -> u64 {
        self.with_fencer(|f| f.last())
    }

    /// A lock arrived by a migration with tokens up to `top`, issued by
    /// another node's counter: none is issued again here, even once it is
    /// released and its key gone. Returns whether the raise must be written
    /// to the AOF and replicas (it is above what they hold).
    pub fn raise_to_arrived(&self, top: u64) -> bool {
        self.with_fencer(|f| {
            let above = top > f.kept();
            f.raise_kept(top);
            above
        })
    }

    /// After a grant to `owner` on the call's key: when the counter is now
    /// above what the AOF and replicas hold, writes it there (a second of
    /// clock ahead: [`Fencer::to_keep`]) as a counter raise, in the grant's
    /// own propagation, so that no restart issues this token again once the
    /// key is gone.
    pub fn keep_counter(&self, call: &crate::ffi::Call<'_>, owner: &[u8], now_ms: i64) {
        if let Some(kept) = self.with_fencer(|f| f.to_keep(now_ms)) {
            call.replicate_raise(owner, kept);
        }
    }

    // --- the start-up and promotion quarantine ----------------------------

    /// Starts (or restarts) the quarantine at `now_ms`.
    pub fn start_quarantine(&self, reason: Reason, now_ms: i64) {
        *locked(&self.quarantine) = Some(Quarantine { reason, since_ms: now_ms });
        let length = self.quarantine_length_ms();
        if length > 0 {
            self.record(Record::Node { until_ms: now_ms.saturating_add(length) });
        }
        // A quarantine of length 0 is over at once: raising the setting
        // later does not start it after the fact.
        self.quarantine_over.store(length == 0, Ordering::Relaxed);
        if length > 0 {
            redis_module::logging::log_warning(format!(
                "lock: quarantine ({}): refusing new locks for {length} ms (lock.quarantine-ms), \
                 because locks granted before may have been lost{}",
                reason.name(),
                match reason {
                    Reason::Startup => {
                        "; on a brand-new node, which granted nothing, end it with LOCK.UNQUARANTINE STARTUP"
                    }
                    Reason::Promotion => "",
                }
            ));
        } else {
            redis_module::logging::log_warning(format!(
                "lock: {}: running WITHOUT quarantine (lock.quarantine-ms is 0): \
                 a lock forgotten by this node can be granted twice",
                reason.name()
            ));
        }
    }

    pub fn quarantine_length_ms(&self) -> i64 {
        let s = &self.settings;
        quarantine::length_ms(s.quarantine_ms.get(), s.max_ttl_ms.get(), s.expiry_delay_ms.get())
    }

    /// The quarantine in force at `now_ms`, with the milliseconds left;
    /// `None` when the node may grant.
    pub fn quarantine(&self, now_ms: i64) -> Option<(Reason, i64)> {
        if self.quarantine_over.load(Ordering::Relaxed) {
            return None;
        }
        let current = *locked(&self.quarantine);
        let left = quarantine::remaining_ms(current, now_ms, self.quarantine_length_ms());
        match current {
            Some(q) if left > 0 => Some((q.reason, left)),
            _ => {
                self.quarantine_over.store(true, Ordering::Relaxed);
                None
            }
        }
    }

    /// At module load: quarantines the node unless its persistence proves
    /// that no acknowledged grant can have been lost (`appendonly yes` with
    /// `appendfsync always`) and that an AOF rewrite keeps the node's ledger
    /// (`aof-use-rdb-preamble yes`: the ledger travels in the RDB
    /// preamble). Such a start is decided once the AOF is loaded: it must
    /// have brought the ledger back ([`Node::on_loaded_from_disk`]).
    /// Returns the quarantine's cause, if it started one.
    pub fn quarantine_at_start(
        &self,
        appendonly: bool,
        appendfsync: &str,
        preamble: bool,
        now_ms: i64,
    ) -> Option<StartCause> {
        let cause = if quarantine::needed_at_start(appendonly, appendfsync) {
            StartCause::NotDurable
        } else if !preamble {
            StartCause::NoPreamble
        } else {
            self.durable_start.store(true, Ordering::Relaxed);
            return None;
        };
        self.quarantine_start(now_ms);
        Some(cause)
    }

    /// Starts a start-up quarantine that ends at `until_ms`, the end of the
    /// one in force when the node's ledger was saved. The restart grace
    /// covers the restored locks, as after any start without a quarantine
    /// of its own.
    fn continue_quarantine(&self, until_ms: i64, now_ms: i64) {
        let length = self.quarantine_length_ms();
        *locked(&self.quarantine) =
            Some(Quarantine { reason: Reason::Startup, since_ms: until_ms.saturating_sub(length) });
        self.quarantine_over.store(length == 0, Ordering::Relaxed);
        redis_module::logging::log_warning(format!(
            "lock: quarantine (startup): the AOF was written during a quarantine that ends in {} ms; \
             refusing new locks until then",
            until_ms.saturating_sub(now_ms)
        ));
    }

    /// Starts the start-up quarantine, and says whether it keeps the locks
    /// restored from disk from being taken over early.
    fn quarantine_start(&self, now_ms: i64) {
        self.start_quarantine(Reason::Startup, now_ms);
        let s = &self.settings;
        let covered = quarantine::covers_restored_locks(
            self.quarantine_length_ms(),
            s.max_ttl_ms.get(),
            s.expiry_delay_ms.get(),
        );
        self.start_quarantine_covers.store(covered, Ordering::Relaxed);
    }

    /// The node's ledger (its counter and removal quarantines in force) for
    /// an RDB, a rewritten AOF's preamble or a full sync.
    pub fn ledger(&self, now_ms: i64) -> Ledger {
        let (kept, issued) = self.with_fencer(|f| (f.kept().max(f.last()), f.last()));
        let quarantines = if self.any_forgotten.load(Ordering::Relaxed) {
            self.with_forgetting(|f| f.quarantines_in_force(now_ms))
        } else {
            Vec::new()
        };
        let quarantine_until_ms = self.quarantine(now_ms).map_or(0, |(_, left)| now_ms.saturating_add(left));
        let slot_waits = if self.any_slot_wait.load(Ordering::Relaxed) {
            locked(&self.slot_waits).in_force(now_ms)
        } else {
            Vec::new()
        };
        Ledger { kept, issued, quarantine_until_ms, quarantines, slot_waits }
    }

    /// The ledger read back from an RDB, an AOF's preamble or a master's
    /// full sync: the counter never goes down, and the quarantines in force
    /// stay in force. A start from the node's own `always` AOF takes the
    /// kept value (tokens issued after the save, without a raise of their
    /// own, are below it); any other load the last token, so that its
    /// tokens stay on its clock (a node that may have lost writes would
    /// otherwise issue tokens up to a second ahead that its next start,
    /// from the same file, could issue again).
    pub fn restore_ledger(&self, ledger: Ledger, now_ms: i64) {
        self.ledger_seen.store(true, Ordering::Relaxed);
        if self.durable_start.load(Ordering::Relaxed) {
            self.with_fencer(|f| f.raise_kept(ledger.kept));
            self.written_quarantine(ledger.quarantine_until_ms);
        } else {
            self.with_fencer(|f| f.raise_to(ledger.issued));
        }
        for entry in ledger.quarantines {
            self.restore_written_quarantine(entry, now_ms);
        }
        // A start that may have lost writes quarantines the whole node, and
        // a replica's promotion does: only a start without one goes on with
        // the slots' waits.
        if self.durable_start.load(Ordering::Relaxed) {
            for (slot, until_ms) in ledger.slot_waits {
                self.restore_slot_wait(slot, until_ms, now_ms);
            }
        }
    }

    /// A start-up or promotion quarantine in force when the node's ledger
    /// was saved, or written into the AOF as it started (`LOCK.QUARANTINED
    /// NODE`), read back while loading: what that quarantine covers (grants
    /// of a process before it, maybe lost) is not in this AOF either, so a
    /// start without a quarantine of its own goes on with it
    /// ([`Node::on_loaded_from_disk`]).
    /// The latest record wins: the AOF is read in the order it was written
    /// (the ledger first), and 0 is a quarantine an operator ended.
    pub fn written_quarantine(&self, until_ms: i64) {
        self.written_quarantine_until.store(until_ms, Ordering::Relaxed);
    }

    /// A removal quarantine read back from a file or a full sync (the
    /// ledger), or replayed from the AOF: its end was written on the module
    /// clock of the process that wrote it, which a wall-clock step before
    /// this start may put behind this one's (the module clock takes the
    /// wall clock at load). As the restart grace does for restored locks,
    /// it lasts `lock.clock-jump-tolerance-ms` longer, so that such a step
    /// (within the tolerance) cannot shorten it.
    pub fn restore_written_quarantine(&self, mut entry: Entry, now_ms: i64) {
        entry.until_ms = entry.until_ms.saturating_add(self.settings.clock_jump_tolerance_ms.get());
        let _ = self.restore_quarantine(entry, now_ms);
    }

    /// A removal quarantine as it started: replicated from a master now, or
    /// decided on this node's own clock. Returns the quarantine in force.
    pub fn restore_quarantine(&self, entry: Entry, now_ms: i64) -> Option<Quarantined> {
        let found = self.with_forgetting(|f| f.restore(entry, now_ms));
        self.quarantined(found.as_slice());
        found
    }

    /// The node's own AOF or RDB file was loaded at start: the locks in it
    /// were granted by the process before, on a module clock this one may
    /// be ahead of. Unless the start-up quarantine already covers them,
    /// start the restart grace. A start that skipped the quarantine
    /// (`appendfsync always`) must have read the node's ledger back: an AOF
    /// whose last rewrite did not write it (an older release, or
    /// `aof-use-rdb-preamble no` then) may have lost counter raises and
    /// removal quarantines, so the node quarantines instead: returns
    /// [`StartCause::NoLedger`] then.
    pub fn on_loaded_from_disk(&self, now_ms: i64) -> Option<StartCause> {
        self.note_imported_locks(now_ms);
        let flushed = std::mem::take(&mut *locked(&self.flushed_while_loading));
        if self.removal_quarantine_on() {
            let until = self.imported_locks_bound(now_ms).saturating_add(self.cool_down_ms(now_ms));
            for db in flushed {
                let _ = self.restore_quarantine(
                    Entry { db, key: None, until_ms: until, cause: Cause::Flushed },
                    now_ms,
                );
            }
        }
        let seen = self.ledger_seen.swap(false, Ordering::Relaxed);
        let durable = self.durable_start.swap(false, Ordering::Relaxed);
        let no_ledger = durable && !seen;
        let written_until = self.written_quarantine_until.swap(i64::MIN, Ordering::Relaxed);
        if no_ledger {
            self.quarantine_start(now_ms);
        } else if durable && written_until > now_ms {
            self.continue_quarantine(written_until, now_ms);
        }
        self.restore_grace(now_ms);
        no_ledger.then_some(StartCause::NoLedger)
    }

    /// Locks restored from disk at `now_ms`: the restart grace, unless the
    /// start-up quarantine covers them.
    fn restore_grace(&self, now_ms: i64) {
        if self.start_quarantine_covers.load(Ordering::Relaxed) {
            self.restored_since.store(now_ms, Ordering::Relaxed);
            return;
        }
        self.start_restart_grace(now_ms);
    }

    /// The start-up quarantine no longer keeps restored locks from being
    /// taken over early (it was ended, or shortened): they get the restart
    /// grace from when they were restored.
    fn uncover_restored_locks(&self) {
        if self.start_quarantine_covers.swap(false, Ordering::Relaxed) {
            let restored = self.restored_since.swap(NO_GRACE, Ordering::Relaxed);
            if restored != NO_GRACE {
                self.start_restart_grace(restored);
            }
        }
    }

    /// Starts the restart grace for locks restored from disk at `since_ms`.
    fn start_restart_grace(&self, since_ms: i64) {
        self.restart_grace_since.store(since_ms, Ordering::Relaxed);
        let s = &self.settings;
        let tolerance = s.clock_jump_tolerance_ms.get();
        let lasts =
            quarantine::restart_grace_lasts_ms(s.max_ttl_ms.get(), s.expiry_delay_ms.get(), tolerance);
        redis_module::logging::log_notice(format!(
            "lock: restart grace: locks were restored from disk without a quarantine covering them; \
             for {lasts} ms a lock that expires by itself is taken over {tolerance} ms \
             (lock.clock-jump-tolerance-ms) after its deadline, so that a wall-clock step before \
             this restart cannot shorten it"
        ));
    }

    /// The restart grace in force at `now_ms` (0 when none): see
    /// [`quarantine::restart_grace_ms`].
    pub fn restart_grace_ms(&self, now_ms: i64) -> i64 {
        let since = self.restart_grace_since.load(Ordering::Relaxed);
        let s = &self.settings;
        quarantine::restart_grace_ms(
            (since != NO_GRACE).then_some(since),
            now_ms,
            s.max_ttl_ms.get(),
            s.expiry_delay_ms.get(),
            s.clock_jump_tolerance_ms.get(),
        )
    }

    /// How long an expired holder keeps its slot at `now_ms`: the
    /// lock-delay (`lock.expiry-delay-ms`) plus the restart grace while it
    /// lasts.
    pub fn cool_down_ms(&self, now_ms: i64) -> i64 {
        self.settings.expiry_delay_ms.get().saturating_add(self.restart_grace_ms(now_ms))
    }

    /// This node was a replica and is now a master: asynchronous
    /// replication may have lost grants its old master acknowledged.
    pub fn on_promoted(&self, now_ms: i64) {
        self.note_imported_locks(now_ms);
        // Its failover quarantine covers every slot's wait its old master
        // had (as long, from later).
        self.clear_slot_waits();
        if self.settings.failover_quarantine.load(Ordering::Relaxed) {
            self.start_quarantine(Reason::Promotion, now_ms);
        } else {
            redis_module::logging::log_warning(
                "lock: promoted to master WITHOUT quarantine (lock.failover-quarantine is no): \
                 a lock the old master granted but did not replicate can be granted twice",
            );
        }
    }

    /// An operator's `LOCK.UNQUARANTINE`: ends the quarantine in force now
    /// if it is the one named (`reason`), and nothing else: the settings
    /// stay, so a later start or promotion is quarantined again, and the
    /// fencing counter stays on the clock (a counter set ahead of it would
    /// put this node's tokens ahead of the other nodes' clocks, which their
    /// own restarts do not wait for). Returns the milliseconds it had left.
    /// Locks restored from disk under the start-up quarantine it ends get
    /// the restart grace they would have had without one (see
    /// [`Node::on_loaded_from_disk`]).
    pub fn end_quarantine(&self, reason: Reason, now_ms: i64) -> Result<i64, NotEnded> {
        let Some((in_force, left)) = self.quarantine(now_ms) else { return Err(NotEnded::NoneInForce) };
        if in_force != reason {
            return Err(NotEnded::OtherReason(in_force, left));
        }
        *locked(&self.quarantine) = None;
        self.quarantine_over.store(true, Ordering::Relaxed);
        self.record(Record::Node { until_ms: 0 });
        if reason == Reason::Startup {
            self.uncover_restored_locks();
        }
        self.stats.quarantines_ended.bump();
        Ok(left)
    }

    /// After `lock.quarantine-ms` changed at run time: the quarantine the
    /// old length still held at `now_ms` if the new one ended it. Locks
    /// restored from disk that a shorter start-up quarantine no longer
    /// covers get their restart grace.
    pub fn quarantine_length_changed(&self, now_ms: i64) -> Option<(Reason, i64)> {
        let s = &self.settings;
        let old_length =
            quarantine::length_ms(s.quarantine_ms.previous(), s.max_ttl_ms.get(), s.expiry_delay_ms.get());
        let current = *locked(&self.quarantine);
        let old_left = quarantine::remaining_ms(current, now_ms, old_length);
        let before = current.filter(|_| old_left > 0).map(|q| (q.reason, old_left));
        let after = self.quarantine(now_ms);
        let covers = quarantine::covers_restored_locks(
            self.quarantine_length_ms(),
            s.max_ttl_ms.get(),
            s.expiry_delay_ms.get(),
        );
        if !covers {
            self.uncover_restored_locks();
        }
        before.filter(|_| after.is_none())
    }

    /// The protections a setting turns off now (see
    /// [`Settings::protections_off`]).
    pub fn protections_off(&self) -> Vec<Protection> {
        self.settings.protections_off(self.quarantine_length_ms())
    }

    // --- refusals of new grants -------------------------------------------

    /// The refusal of a new grant of `key` in `db` at `now_ms`, if any: the
    /// node's quarantine first, then the eviction guard, then the key's or
    /// its database's quarantine.
    pub fn refusal(&self, db: i32, key: &[u8], now_ms: i64) -> Option<Refusal> {
        if let Some((reason, left)) = self.quarantine(now_ms) {
            return Some(Refusal::Node(reason, left));
        }
        if self.evictable.load(Ordering::Relaxed) && self.settings.eviction_mode() == EvictionMode::refuse {
            return Some(Refusal::Evictable(locked(&self.evicting_policy).clone().unwrap_or_default()));
        }
        if self.any_slot_wait.load(Ordering::Relaxed) {
            if let Some(refusal) = self.slot_wait_refusal(db, key, now_ms) {
                return Some(refusal);
            }
        }
        if !self.any_forgotten.load(Ordering::Relaxed) {
            return None;
        }
        let found = self.with_forgetting(|f| {
            let found = f.refusal(db, key, now_ms);
            if found.is_none() && f.in_force_counts(now_ms) == (0, 0, 0) {
                self.any_forgotten.store(false, Ordering::Relaxed);
            }
            found
        });
        found.map(|q| {
            let left = q.left_ms(now_ms);
            Refusal::Forgotten(q, left)
        })
    }

    fn slot_wait_refusal(&self, db: i32, key: &[u8], now_ms: i64) -> Option<Refusal> {
        let slot = lock_protocol::slot::key_slot(key);
        let mut waits = locked(&self.slot_waits);
        let found = waits.refusal(slot, forgetting::key_hash(db, key), now_ms);
        if waits.is_empty() {
            self.any_slot_wait.store(false, Ordering::Relaxed);
        }
        found.map(|wait| {
            let left = if wait.until_ms == OPEN { -1 } else { wait.until_ms.saturating_sub(now_ms) };
            Refusal::Importing(wait, left)
        })
    }

    // --- slot imports ------------------------------------------------------

    /// A change of this node's slots (`core::imports::SlotChange`): from a
    /// command about to run (`check`: an import it starts is checked once it
    /// ran, [`Node::imports_to_check`]) or from Valkey's atomic import.
    pub fn slots_changed(&self, change: &SlotChange, check: bool, now_ms: i64) {
        match change {
            SlotChange::ImportStarted(slots) => {
                self.import_started(slots);
                if check {
                    locked(&self.imports_to_check).extend_from_slice(slots);
                }
            }
            SlotChange::Owned(slots) => self.import_ended(slots, now_ms),
            SlotChange::Stable(slots) => {
                let open: Vec<u16> =
                    slots.iter().copied().filter(|&s| locked(&self.slot_waits).is_open(s)).collect();
                self.import_ended(&open, now_ms);
            }
        }
    }

    /// The imports a command filter saw start, to check against the slots
    /// the node imports now.
    pub fn imports_to_check(&self) -> Vec<u16> {
        std::mem::take(&mut *locked(&self.imports_to_check))
    }

    /// Imports of `slots` started (`CLUSTER SETSLOT <slot> IMPORTING`, an
    /// atomic import): new grants there wait until the import ends and the
    /// quarantine has run since (`core::imports`).
    pub fn import_started(&self, slots: &[u16]) {
        if self.quarantine_length_ms() <= 0 || slots.is_empty() {
            return;
        }
        let mut waits = locked(&self.slot_waits);
        for &slot in slots {
            waits.import_started(slot);
            self.record(Record::Slot { slot, until_ms: OPEN });
        }
        self.any_slot_wait.store(true, Ordering::Relaxed);
    }

    /// Imports of `slots` ended at `now_ms`, or the node took them without
    /// one (`CLUSTER SETSLOT <slot> NODE <self>`, `CLUSTER ADDSLOTS`, an
    /// atomic import's end): their wait lasts the quarantine from now.
    pub fn import_ended(&self, slots: &[u16], now_ms: i64) {
        let length = self.quarantine_length_ms();
        let mut waits = locked(&self.slot_waits);
        for &slot in slots {
            if let Some(until_ms) = waits.import_ended(slot, now_ms, length) {
                self.record(Record::Slot { slot, until_ms });
                self.any_slot_wait.store(true, Ordering::Relaxed);
            }
        }
    }

    /// An import this node thought had started did not (the command was
    /// refused): each slot's wait is what it was before.
    pub fn import_not_started(&self, slots: &[u16]) {
        let mut waits = locked(&self.slot_waits);
        for &slot in slots {
            if waits.cancel_open(slot) {
                self.record(Record::Slot { slot, until_ms: waits.closed_end(slot) });
            }
        }
    }

    /// A slot's wait as a record sets it (`OPEN`, 0 for none, or its end),
    /// read back at a start without quarantine from the ledger or the AOF:
    /// its end was on another process's clock, so it lasts the clock-jump
    /// tolerance longer, as a restored removal quarantine does.
    pub fn restore_slot_wait(&self, slot: u16, until_ms: i64, now_ms: i64) {
        let until_ms = if until_ms != OPEN && until_ms != 0 {
            until_ms.saturating_add(self.settings.clock_jump_tolerance_ms.get())
        } else {
            until_ms
        };
        if locked(&self.slot_waits).set(slot, until_ms, now_ms) {
            self.any_slot_wait.store(true, Ordering::Relaxed);
        }
    }

    /// `LOCK.UNQUARANTINE IMPORTS`: every slot's wait ends (an operator's
    /// act on a brand-new cluster, whose `CLUSTER ADDSLOTS` took slots
    /// nobody served before). Returns how many were in force.
    pub fn end_slot_waits(&self, now_ms: i64) -> usize {
        let ended = locked(&self.slot_waits).in_force(now_ms);
        self.clear_slot_waits();
        for &(slot, _) in &ended {
            self.record(Record::Slot { slot, until_ms: 0 });
        }
        ended.len()
    }

    fn clear_slot_waits(&self) {
        locked(&self.slot_waits).clear();
        self.any_slot_wait.store(false, Ordering::Relaxed);
    }

    /// Whether this load is a start that skipped its quarantine: the slots'
    /// waits it reads back go on.
    pub fn durable_start(&self) -> bool {
        self.durable_start.load(Ordering::Relaxed)
    }

    /// The slots waiting at `now_ms`.
    pub fn slot_waits(&self, now_ms: i64) -> usize {
        if !self.any_slot_wait.load(Ordering::Relaxed) {
            return 0;
        }
        locked(&self.slot_waits).in_force(now_ms).len()
    }

    // --- records of quarantines for the AOF --------------------------------

    fn record(&self, record: Record) {
        locked(&self.records).push(record);
    }

    /// The quarantines started since the last call, to write now.
    pub fn take_records(&self) -> Vec<Record> {
        std::mem::take(&mut *locked(&self.records))
    }

    // --- what the node may have forgotten ---------------------------------

    fn with_forgetting<T>(&self, f: impl FnOnce(&mut Forgetting) -> T) -> T {
        f(locked(&self.forgetting).get_or_insert_with(Forgetting::default))
    }

    /// This node wrote a lock at `key` of `db` that holds until
    /// `deadline_ms` (or found one arriving by a migration).
    pub fn note_lock(&self, db: i32, key: &[u8], deadline_ms: i64, now_ms: i64, cool_down_ms: i64) {
        self.with_forgetting(|f| {
            f.note(db, forgetting::key_hash(db, key), deadline_ms, now_ms, cool_down_ms)
        });
    }

    /// Locks this process did not write may now be on the node (a start
    /// from disk, a promotion, a slot import): until the longest TTL has run
    /// out, every key and database counts as holding one.
    pub fn note_imported_locks(&self, now_ms: i64) {
        let bound = self.imported_locks_bound(now_ms);
        self.with_forgetting(|f| f.raise_floor(bound));
    }

    /// The latest deadline a lock this process did not write may have:
    /// now plus the longest TTL in force since load, and a margin.
    fn imported_locks_bound(&self, now_ms: i64) -> i64 {
        now_ms
            .saturating_add(self.settings.max_ttl_ms.high_water())
            .saturating_add(quarantine::AUTO_MARGIN_MS)
    }

    fn removal_quarantine_on(&self) -> bool {
        self.settings.removal_quarantine.load(Ordering::Relaxed)
    }

    fn quarantined(&self, found: &[Quarantined]) {
        if !found.is_empty() {
            self.any_forgotten.store(true, Ordering::Relaxed);
        }
    }

    /// Another command removed or changed `key` of `db` (a keyspace event):
    /// if a lock there may still be in force, the key is quarantined until
    /// it is not. Returns the quarantine.
    pub fn key_changed(&self, db: i32, key: &[u8], cause: Cause, now_ms: i64) -> Option<Quarantined> {
        if !self.removal_quarantine_on() {
            return None;
        }
        let cool_down = self.cool_down_ms(now_ms);
        let found = self.with_forgetting(|f| f.key_changed(db, key, cause, now_ms, cool_down));
        self.quarantined(found.as_slice());
        found
    }

    /// FLUSHDB of `db` or FLUSHALL (`forgetting::ALL_DBS`).
    pub fn db_flushed(&self, db: i32, now_ms: i64) -> Vec<Quarantined> {
        if !self.removal_quarantine_on() {
            return Vec::new();
        }
        let cool_down = self.cool_down_ms(now_ms);
        let found = self.with_forgetting(|f| f.flushed(db, now_ms, cool_down));
        self.quarantined(&found);
        found
    }

    /// SWAPDB `a` `b`.
    pub fn dbs_swapped(&self, a: i32, b: i32, now_ms: i64) -> Vec<Quarantined> {
        if !self.removal_quarantine_on() {
            return Vec::new();
        }
        let cool_down = self.cool_down_ms(now_ms);
        let found = self.with_forgetting(|f| f.swapped(a, b, now_ms, cool_down));
        self.quarantined(&found);
        found
    }

    /// A `FLUSHDB`, `FLUSHALL` (`forgetting::ALL_DBS`) or `SWAPDB` replayed
    /// from the AOF while loading: the flushed locks' deadlines are not
    /// known, so when the load from disk ends the database is quarantined
    /// as long as a lock this process did not write may last
    /// ([`Node::on_loaded_from_disk`]).
    pub fn flushed_while_loading(&self, db: i32) {
        let mut dbs = locked(&self.flushed_while_loading);
        if !dbs.contains(&db) {
            dbs.push(db);
        }
    }

    /// A lock arrived at `key` of `db` by a slot migration: until this
    /// node's quarantine has run, it is not taken over by expiry (its
    /// record may be behind its holder's lease: [`Cause::Imported`]).
    /// Returns the quarantine, for the AOF and replicas to hold.
    pub fn lock_arrived(&self, db: i32, key: &[u8], now_ms: i64) -> Option<Quarantined> {
        if self.any_slot_wait.load(Ordering::Relaxed) {
            locked(&self.slot_waits)
                .arrived(lock_protocol::slot::key_slot(key), forgetting::key_hash(db, key));
        }
        let length = self.quarantine_length_ms();
        if length <= 0 || !self.removal_quarantine_on() {
            return None;
        }
        let entry = Entry {
            db,
            key: Some(key.to_vec()),
            until_ms: now_ms.saturating_add(length),
            cause: Cause::Imported,
        };
        self.restore_quarantine(entry, now_ms)
    }

    /// The key's lock was released by its holder: its arrival's quarantine
    /// ends (the record was not behind: the holder is done).
    pub fn lock_released(&self, db: i32, key: &[u8]) {
        if self.any_forgotten.load(Ordering::Relaxed) {
            self.with_forgetting(|f| f.end_imported(db, key));
        }
    }

    /// LOCK.REVOKE freed the key on purpose: its quarantine ends.
    pub fn end_key_quarantine(&self, db: i32, key: &[u8]) -> bool {
        self.any_forgotten.load(Ordering::Relaxed) && self.with_forgetting(|f| f.end_key(db, key))
    }

    /// `lock.removal-quarantine no`: every key and database quarantine ends.
    pub fn end_removal_quarantines(&self) {
        self.with_forgetting(Forgetting::clear);
        self.any_forgotten.store(false, Ordering::Relaxed);
    }

    /// (keys, databases) in quarantine at `now_ms`, and the most ms left.
    pub fn removal_quarantines(&self, now_ms: i64) -> (usize, usize, i64) {
        if !self.any_forgotten.load(Ordering::Relaxed) {
            return (0, 0, 0);
        }
        self.with_forgetting(|f| f.in_force_counts(now_ms))
    }

    // --- the eviction guard -----------------------------------------------

    /// The server's `maxmemory` and `maxmemory-policy`, read at load and
    /// after every CONFIG SET: lock keys may be evicted when a limit is set
    /// and the policy is not `noeviction` (lock keys carry an expiry, so
    /// `volatile-*` policies evict them too). Returns whether that changed.
    pub fn set_memory_policy(&self, maxmemory: u64, policy: &str) -> bool {
        let evicting = maxmemory > 0 && !policy.eq_ignore_ascii_case("noeviction");
        let was = self.evictable.swap(evicting, Ordering::Relaxed);
        *locked(&self.evicting_policy) = evicting.then(|| policy.to_ascii_lowercase());
        was != evicting
    }

    /// The eviction policy when it may evict lock keys (INFO).
    pub fn evicting_policy(&self) -> Option<String> {
        if !self.evictable.load(Ordering::Relaxed) {
            return None;
        }
        locked(&self.evicting_policy).clone()
    }

    // --- the waiting state ------------------------------------------------

    /// Runs `f` on the waiting state (the queues, the key timers, the
    /// waiters' timeouts) and keeps the count of waiters current.
    pub fn with_waiting<T>(&self, f: impl FnOnce(&mut NodeWaiting) -> T) -> T {
        let mut guard = locked(&self.waiting);
        let waiting = guard.get_or_insert_with(Waiting::default);
        let out = f(waiting);
        self.waiting_now.store(waiting.queues.total(), Ordering::Relaxed);
        out
    }

    /// Clients waiting on the node now (a waiter for a set counts once).
    pub fn waiting_now(&self) -> usize {
        self.waiting_now.load(Ordering::Relaxed)
    }

    /// True if any client waits on any key (the cheap check for hot paths).
    pub fn any_waiters(&self) -> bool {
        self.waiting_now() > 0
    }
}
