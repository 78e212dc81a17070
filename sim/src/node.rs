//! A simulated node: the module's real lock core (`lock-core`: the same
//! `lock::acquire`, `release`, `extend`, `exit` and `fence` the commands
//! call, the same fencing counter, the same quarantine arithmetic) behind a thin
//! dispatcher that stands in for the module's Redis glue. What the glue
//! does that this file re-implements (storing a lock, the node clock, the
//! restart quarantine's start, the persistence a restart finds) is covered
//! by the real-server suites only; docs/safety.md lists it.

use std::collections::BTreeMap;

use lock_core::fencing::{self, Fencer};
use lock_core::kind::Want;
use lock_core::lock::{self, Admission, Exit, Grant};
use lock_core::memory::Holders;
use lock_core::quarantine;
use lock_core::txn::{Changes, Txn};
use lock_protocol::code::{ERR, QUARANTINE, WRONGTYPE};

use crate::resp::Reply;

/// Where the node's clock starts: a realistic epoch in milliseconds, so
/// that fencing tokens look like the module's (`now_ms * 1000`).
const EPOCH_MS: i64 = 1_700_000_000_000;

/// The nodes' `lock.clock-jump-tolerance-ms` (the module's default is a
/// minute; a second keeps simulated histories short).
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
    /// The AOF was rewritten since the last `LOCK.FENCE` raises: a restart
    /// does not replay them.
    pub aof_rewritten: bool,
    pub up: bool,
    /// Bumped by every crash: a connection of an older epoch is dead.
    pub epoch: u64,
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
            up: true,
            epoch: 0,
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
        // The counter is not stored: an `always` AOF replays the grants and
        // `LOCK.FENCE` raises it holds, unless a rewrite compacted them away
        // (then only the clock floor and the tokens of the stored locks are
        // left, as without an AOF or with `everysec`, whose quarantine
        // covers it).
        let replayed = self.persistence == Persistence::Always && !self.aof_rewritten;
        self.fencer = Fencer::new(if replayed { self.fencer.last() } else { 0 });
        self.grants = 0;
        let always = self.persistence == Persistence::Always;
        self.quarantine_since_ms = match self.rules {
            Rules::Module
                if quarantine::needed_at_start(
                    !matches!(self.persistence, Persistence::None),
                    if always { "always" } else { "everysec" },
                ) =>
            {
                Some(now)
            }
            _ => None,
        };
        // A start that skips the quarantine starts the counter where the
        // quarantine would have ended, as the module does: a quorum token
        // from a node whose clock is ahead (within the quarantine) stays
        // below this node's next one, even with the raises rewritten away.
        if self.rules == Rules::Module && self.quarantine_since_ms.is_none() {
            self.fencer.raise_to(fencing::start_floor(now, self.quarantine_ms));
        }
        let kept = self.persistence != Persistence::None && !self.keys.is_empty();
        self.grace_since_ms =
            (self.rules == Rules::Module && kept && self.quarantine_since_ms.is_none()).then_some(now);
        self.up = true;
    }

    /// Runs one command at `virtual_ms`.
    pub fn call(&mut self, words: &[Vec<u8>], virtual_ms: i64) -> Reply {
        let now = self.now_ms(virtual_ms);
        if self.persistence == Persistence::EverySec && now - self.synced_ms >= 1000 {
            self.on_disk = self.keys.clone();
            self.synced_ms = now;
        }
        let name = words.first().map(|w| String::from_utf8_lossy(w).to_ascii_uppercase()).unwrap_or_default();
        let number = |i: usize| -> Option<i64> { std::str::from_utf8(words.get(i)?).ok()?.parse().ok() };
        let (Some(key), Some(owner)) = (words.get(1), words.get(2)) else {
            return Reply::Error(ERR, format!("wrong number of arguments for '{name}'"));
        };
        let left_ms = quarantine::remaining_ms(
            self.quarantine_since_ms
                .map(|since_ms| quarantine::Quarantine { reason: quarantine::Reason::Startup, since_ms }),
            now,
            self.quarantine_ms,
        );
        let rules = self.rules;
        let (fencer, grants) = (&mut self.fencer, &mut self.grants);
        let stored = self.keys.get(key.as_slice()).cloned().unwrap_or_else(Holders::free);
        let grace_ms = quarantine::restart_grace_ms(
            self.grace_since_ms,
            now,
            self.ttl_max_ms,
            self.expiry_delay_ms,
            CLOCK_TOLERANCE_MS,
        );
        // The lock-delay in force, as the module's key state computes it.
        let mut txn = Txn::new(&stored, now, self.expiry_delay_ms.saturating_add(grace_ms));
        // The grants, each with its kind and mode: `LOCK.ACQUIRE`,
        // `ENTER`, `SHARED` and `EXCLUSIVE key owner ttl`, `LOCK.SEMAPHORE key owner
        // limit ttl`.
        let grant = match name.as_str() {
            "LOCK.ACQUIRE" => Some((Want::plain(), number(3))),
            "LOCK.ENTER" => Some((Want::reentrant(), number(3))),
            "LOCK.SHARED" => Some((Want::read(), number(3))),
            "LOCK.EXCLUSIVE" => Some((Want::write(), number(3))),
            "LOCK.SEMAPHORE" => number(3)
                .and_then(|limit| u32::try_from(limit).ok())
                .map(|limit| (Want::permit(limit), number(4))),
            _ => None,
        };
        let reply = match (name.as_str(), number(3)) {
            _ if grant.is_some() => {
                let Some((want, Some(ttl_ms))) = grant else {
                    return Reply::Error(ERR, format!("{name}: a bad TTL"));
                };
                let admission = if left_ms > 0 { Admission::Quarantined } else { Admission::Open };
                match lock::acquire(&mut txn, want, owner.as_slice(), ttl_ms, admission, fencer) {
                    Grant::Granted(fence) | Grant::Renewed(fence) => match rules {
                        Rules::Module => Reply::Int(fence as i64),
                        Rules::Classic => {
                            *grants += 1;
                            Reply::Int(*grants as i64)
                        }
                    },
                    Grant::Busy => Reply::Nil,
                    Grant::Quarantined => Reply::Error(
                        QUARANTINE,
                        format!("the node restarted, refusing new locks for {left_ms} ms"),
                    ),
                    other => Reply::Error(ERR, format!("{other:?}")),
                }
            }
            ("LOCK.EXTEND", Some(ttl_ms)) => Reply::Int(lock::extend(&mut txn, owner, ttl_ms).into()),
            ("LOCK.FENCE", Some(floor)) => match rules {
                Rules::Module => Reply::Int(lock::fence(&mut txn, owner, floor as u64, fencer).into()),
                // No fencing: whatever the client asks, the node says yes.
                Rules::Classic => Reply::Int(1),
            },
            ("LOCK.RELEASE", None) if words.len() == 3 => Reply::Int(lock::release(&mut txn, owner).into()),
            ("LOCK.EXIT", None) if words.len() == 3 => match lock::exit(&mut txn, owner, None) {
                Exit::Left(holds) => Reply::Int(holds.into()),
                Exit::NotHeld => Reply::Nil,
                Exit::WrongKind { found } => Reply::Error(WRONGTYPE, format!("a {} lock", found.name())),
            },
            _ => Reply::Error(
                ERR,
                format!("the simulated node does not serve {name} with {} words", words.len()),
            ),
        };
        let changes: Changes<'_> = txn.finish();
        if !changes.is_empty() {
            let after = stored.apply(&changes);
            if after.records().is_empty() {
                self.keys.remove(key.as_slice());
            } else {
                self.keys.insert(key.clone(), after);
            }
        }
        reply
    }

    // What a simulated cluster (`cluster.rs`) needs of its shard masters.

    /// Milliseconds of quarantine left at `virtual_ms` (0: none), as
    /// `INFO lock` reports it.
    pub fn quarantine_left_ms(&self, virtual_ms: i64) -> i64 {
        let since = self
            .quarantine_since_ms
            .map(|since_ms| quarantine::Quarantine { reason: quarantine::Reason::Startup, since_ms });
        quarantine::remaining_ms(since, self.now_ms(virtual_ms), self.quarantine_ms)
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

    /// `key`'s record taken out (`MIGRATE` deletes it on the source).
    pub fn take_key(&mut self, key: &[u8]) -> Option<Holders> {
        self.keys.remove(key)
    }

    /// `key`'s record stored as it was (`RESTORE` on the target: the same
    /// holders, tokens and deadlines).
    pub fn put_key(&mut self, key: Vec<u8>, holders: Holders) {
        self.keys.insert(key, holders);
    }

    /// What a replica has of this node now: its locks and its fencing
    /// counter (a grant's writes replicate both).
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
            up: true,
            epoch: 0,
            ..*self
        }
    }
}
