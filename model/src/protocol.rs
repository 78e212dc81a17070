//! The quorum lock protocol as a state machine small enough to explore
//! whole: 3 nodes, 2 clients, each taking the lock once (or twice), in true
//! time counted in ticks. It follows docs/design.md ("The quorum client",
//! "Fencing tokens", "Quarantine", "Time"); each transition says which rule
//! it stands for.
//!
//! - A client's attempt: the grant round on all nodes (majority, validity =
//!   TTL minus elapsed minus drift), the fence round (T = the highest token
//!   of the deciding grants, `LOCK.FENCE` on all nodes, held with T once a
//!   majority answered 1 within the validity), the check of the lease, one
//!   write to the protected resource, the release on all nodes. A failed
//!   round releases on all nodes too.
//! - Each client has one ordered connection per node. A round's request to
//!   each node has a fate, chosen when it is sent (`Fate`): served at once
//!   with its reply read, served at once with its reply after the round's
//!   deadline (never counted), delayed (served at a later step, and every
//!   later request on that connection behind it), or lost. Serving at once
//!   is no loss of generality within a tick but for the order of nodes'
//!   steps against other clients' rounds, which delays give back (one per
//!   path); a reply read later within its round is, for safety, one read at
//!   once: the validity runs from the round's start either way.
//! - A node: one lock key, its fencing counter (a token is `max(last + 1,
//!   module clock * TOKENS_PER_TICK)`) and the value of it its AOF keeps
//!   (every `LOCK.FENCE` raise, and a grant above it writes the counter
//!   `KEEP_AHEAD` of clock ahead), its quarantine, its module clock (the
//!   wall clock at load plus monotonic time) and its wall clock.
//! - Faults, at any step: node restarts (`Faults::restarts` per path: its
//!   locks and counter lost, with the quarantine; or kept by an `always`
//!   AOF, rewritten or not, with the kept counter, the restart grace and
//!   a quarantine in force),
//!   one wall-clock step on a node by the tolerance (with the module:
//!   before a restart, the only moment a running node's module clock takes
//!   a step in), one lost request; and at will: late replies, a client
//!   pause between its check of the lease and its write.
//! - Nodes alike (the same clock offset) and clients alike (the same
//!   attempts) are interchangeable: the checker knows a state by the
//!   least of its relabellings (`LockModel::relabel`), so it visits one
//!   state of each class.
//! - Properties: mutual exclusion, fencing at the resource, each hold's
//!   token above the earlier holds', each node's token above every token
//!   it issued or was raised to (property 9), nothing left behind; the
//!   token ones within assumption 2 (`Config::clocks_within_assumption`).
//!
//! The plain Redlock protocol is the same machine with `SET NX PX` nodes:
//! the lease on the wall clock, no quarantine, no fencing token, and a
//! resource that takes every write.

use std::fmt::Write as _;

pub const NODES: usize = 3;
pub const CLIENTS: usize = 2;
/// Grants (and fence answers) a client needs.
const MAJORITY: usize = NODES / 2 + 1;
/// Grants a node can make in one tick without its counter leaving its
/// clock (the module's 1000 per millisecond); the model makes fewer.
const TOKENS_PER_TICK: i16 = 8;
/// How far ahead of its clock a grant writes the counter its AOF keeps
/// (the module's `KEEP_AHEAD_MS`, 1 s): half a tick. The module's
/// quarantine is the TTL plus a margin of that same second, so its lead
/// stays within the margin and clocks may disagree by up to the TTL; the
/// model's quarantine is the bare TTL (2 ticks), so a lead under a tick
/// leaves room for the model's one tick of disagreement (assumption 2:
/// `clocks_within_assumption`).
const KEEP_AHEAD: Token = TOKENS_PER_TICK / 2;
/// Requests one connection can have on its way: every request of every
/// attempt of one client (grant, fence, release; two attempts).
const REQUESTS_MAX: usize = 6;

pub type Tick = i8;
pub type Token = i16;

/// The token a node's clock reads: the module's `now_ms * 1000`.
fn clock_token(clock: Tick) -> Token {
    Token::from(clock) * TOKENS_PER_TICK
}

/// Which protocol the nodes, clients and resource run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Protocol {
    /// This project's: module clock, quarantine, fencing round, a resource
    /// that refuses a token below the highest it has taken.
    Module,
    /// The classic recipe: `SET NX PX` on each node (its lease on the wall
    /// clock, lost by a restart without fsync, no quarantine), no token.
    Plain,
}

/// A bug planted in the module's protocol: the checker must find each.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Bug {
    /// `lock.quarantine-ms` shorter than `lock.max-ttl-ms` (mutant
    /// `quarantine-tenth`).
    QuarantineShort,
    /// The client takes the highest grant's token and skips `LOCK.FENCE`
    /// (mutant `fence-round-skipped`).
    FenceRoundSkipped,
    /// A grant above the kept counter writes nothing to the AOF: an
    /// `always` restart starts below a token it issued (mutant
    /// `grant-token-not-kept`).
    CounterNotKept,
    /// An `always` restart does not take the kept counter back (the
    /// ledger, the raises): it starts from its stored lock's token alone,
    /// as after a rewrite without the ledger (mutant
    /// `ledger-counter-not-restored`).
    LedgerNotRestored,
    /// The rule before the ledger: an `always` restart starts its counter
    /// where the quarantine it skips would have ended, a quarantine ahead
    /// of its clock, and a raise to such a token outruns a node without
    /// persistence whose clock is behind (issue 41).
    StartFloorLead,
    /// The counter is kept a quarantine ahead of the clock, not
    /// `KEEP_AHEAD`: the same lead reached through the kept value (mutant
    /// `keep-ahead-a-quarantine`).
    KeepAheadAQuarantine,
    /// An `always` restart during a quarantine skips the rest of it (the
    /// rule before the ledger carried the quarantine's end: mutant
    /// `quarantine-not-continued`): after a restart that lost its counter,
    /// it starts from the counter kept since, below tokens issued before.
    QuarantineNotContinued,
    /// The client's validity leaves out the drift (mutant `drift-zero`).
    NoDrift,
    /// A lock restored at a start gets no restart grace (mutant
    /// `no-restart-grace`).
    NoRestartGrace,
    /// A release may overtake its grant on the way to a node, as on
    /// connections without order (mutant `release-overtakes-acquire`).
    UnorderedConnection,
}

/// Which faults a run may inject. Each happens at most once in a path,
/// except restarts (`restarts`) and pauses.
#[derive(Clone, Copy, Debug)]
pub struct Faults {
    /// A node restarts having lost its locks and counter (no `appendfsync
    /// always`, or `everysec`): it quarantines.
    pub restart_lost: bool,
    /// A node restarts from an `always` AOF (rewritten or not: the
    /// rewrite's RDB preamble carries the ledger): it keeps its locks, the
    /// kept counter and the end of a quarantine in force. It may come
    /// while the node is still in the quarantine of a restart that lost
    /// its counter (its persistence changed in between: `everysec` then
    /// `always`, or an AOF without the ledger then one with it).
    pub restart_kept: bool,
    /// Restarts per path, of either kind, on any nodes.
    pub restarts: u8,
    /// Whether one node may restart twice (else two restarts are two
    /// nodes').
    pub same_node_twice: bool,
    /// A node's wall clock steps by the tolerance, forward or back, once.
    pub clock_step: bool,
    /// A request is lost (its connection resets). (A lost reply is a
    /// late one: `Fate::Late`.)
    pub message_loss: bool,
    /// A holder pauses between its check of the lease and its write, past
    /// its validity (a GC pause).
    pub pause: bool,
}

impl Faults {
    pub const ALL: Faults = Faults {
        restart_lost: true,
        restart_kept: true,
        restarts: 1,
        same_node_twice: true,
        clock_step: true,
        message_loss: true,
        pause: true,
    };
    pub const NONE: Faults = Faults {
        restart_lost: false,
        restart_kept: false,
        restarts: 1,
        same_node_twice: true,
        clock_step: false,
        message_loss: false,
        pause: false,
    };
}

/// One run's setting. Times in ticks.
#[derive(Clone, Copy, Debug)]
pub struct Config {
    pub protocol: Protocol,
    pub bug: Option<Bug>,
    pub faults: Faults,
    /// Attempts each client makes.
    pub attempts: [u8; CLIENTS],
    /// The lease every grant asks for, which is also `lock.max-ttl-ms`.
    pub ttl: Tick,
    /// How much earlier than the client a node may end a lease (its clock
    /// runs fast); the client's drift allowance.
    pub drift: Tick,
    /// How long a grant round waits for replies.
    pub round_timeout: Tick,
    /// `lock.clock-jump-tolerance-ms`: the size of the one clock step, and
    /// the restart grace.
    pub tolerance: Tick,
    /// Each node's clock minus true time at the start: apart, within the
    /// quarantine (assumption 2).
    pub clock_offsets: [Tick; NODES],
    /// True time stops here (steps within the last tick still run).
    pub horizon: Tick,
    /// Requests a path may delay (served after other steps): the rest are
    /// served when sent. Replies after their round's deadline are not
    /// counted here.
    pub delays: u8,
    /// The token properties are checked only where the clocks keep
    /// assumption 2 (`clocks_within_assumption`); off, everywhere (to show
    /// the assumption is needed).
    pub clock_assumption: bool,
}

impl Config {
    /// The model's standard setting for `protocol`, all faults on.
    pub fn new(protocol: Protocol) -> Config {
        Config {
            protocol,
            bug: None,
            faults: Faults::ALL,
            attempts: [1, 1],
            ttl: 2,
            drift: 1,
            round_timeout: 1,
            tolerance: 1,
            clock_offsets: [1, 0, 0],
            horizon: 3,
            delays: 1,
            clock_assumption: true,
        }
    }

    /// `lock.quarantine-ms`: the longest lease a forgotten lock could have
    /// had (lock-delay 0; the margin left out); the planted bug's is
    /// shorter than the TTL.
    fn quarantine(&self) -> Tick {
        if self.bug == Some(Bug::QuarantineShort) {
            self.ttl - 1
        } else {
            self.ttl
        }
    }

    fn bug(&self, bug: Bug) -> bool {
        self.bug == Some(bug)
    }

    /// Assumption 2 for tokens: a token is at most `KEEP_AHEAD` ahead of
    /// the clock of the node that issued it, and a node that lost its
    /// counter issues nothing until its clock has moved a quarantine past
    /// its restart; so a raise to another node's token stays below what it
    /// issues next only if no clock reading of any node, at any time, is a
    /// quarantine minus `KEEP_AHEAD` or more ahead of a later one of any
    /// node (the same node too: a step back across its restart). With one
    /// step per path, the readings are the initial offsets and the walls
    /// now.
    fn clocks_within_assumption(&self, nodes: &[Node; NODES]) -> bool {
        let offsets = self.clock_offsets.iter().chain(nodes.iter().map(|n| &n.wall));
        let (lo, hi) = offsets.fold((Tick::MAX, Tick::MIN), |(lo, hi), &o| (lo.min(o), hi.max(o)));
        // The quarantine as designed (the TTL): a planted bug's shorter
        // one breaks the property, not the assumption.
        clock_token(hi - lo) + KEEP_AHEAD < clock_token(self.ttl)
    }
}

/// A request on a client's connection to a node; `attempt` names the
/// client's attempt it belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Request {
    /// `LOCK.ACQUIRE key owner ttl` (plain: `SET key owner NX PX ttl`).
    Grant { attempt: u8 },
    /// `LOCK.FENCE key owner token`, with the token the client chose for
    /// that attempt (`Client::tokens`).
    Fence { attempt: u8 },
    /// `LOCK.RELEASE key owner`; its reply is not waited for.
    Release { attempt: u8 },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Reply {
    Granted {
        attempt: u8,
        token: Token,
    },
    /// Held by another owner, or the node is in quarantine.
    Refused {
        attempt: u8,
    },
    Fenced {
        attempt: u8,
        ok: bool,
    },
}

/// A bounded first-in first-out queue, stored inline.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Queue<T: Copy, const C: usize> {
    items: [Option<T>; C],
}

impl<T: Copy, const C: usize> Queue<T, C> {
    const EMPTY: Queue<T, C> = Queue { items: [None; C] };

    fn push(&mut self, item: T) {
        let free = self.items.iter_mut().find(|slot| slot.is_none());
        // The bound is every message of every attempt: it cannot fill.
        let slot = free.unwrap_or_else(|| unreachable!("more than {C} on one connection"));
        *slot = Some(item);
    }

    fn contains(&self, item: T) -> bool
    where
        T: PartialEq,
    {
        self.items.contains(&Some(item))
    }

    fn is_empty(&self) -> bool {
        self.items[0].is_none()
    }

    fn len(&self) -> usize {
        self.items.iter().take_while(|slot| slot.is_some()).count()
    }

    fn get(&self, i: usize) -> Option<T> {
        self.items.get(i).copied().flatten()
    }

    /// Takes out item `i`, closing the gap.
    fn remove(&mut self, i: usize) -> Option<T> {
        let item = self.get(i)?;
        self.items.copy_within(i + 1.., i);
        self.items[C - 1] = None;
        Some(item)
    }
}

/// One client's ordered connection to one node: the requests on their
/// way.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Link {
    pub requests: Queue<Request, REQUESTS_MAX>,
}

/// The lock a node holds on the key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Lock {
    pub client: u8,
    pub attempt: u8,
    /// The holder's stored token (its quorum token once fenced).
    pub token: Token,
    /// When the lease ends: on the module clock (plain: the wall clock).
    pub deadline: Tick,
    /// Read back from the AOF at a start: the restart grace applies.
    pub restored: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Node {
    pub lock: Option<Lock>,
    /// The last token issued or raised to; 0 after a start that lost it.
    pub counter: Token,
    /// The counter's value the node's AOF holds (a `LOCK.FENCE` raise, a
    /// grant's write of the counter `KEEP_AHEAD` ahead, the ledger of the
    /// last rewrite): where an `always` restart starts it.
    pub kept: Token,
    /// The highest token this node issued or was raised to, across its
    /// restarts: what property 9 compares with (no node reads it).
    pub issued_top: Token,
    /// It restarted in this path (for `Faults::same_node_twice`).
    pub restarted: bool,
    /// On the module clock: no grant before it.
    pub quarantine_until: Tick,
    /// Wall clock minus true time.
    pub wall: Tick,
    /// Module clock minus true time: the wall clock's at load, moved by no
    /// step while the node runs.
    pub module: Tick,
    /// Per client, a bit per attempt whose release this node served (to
    /// see a lock left behind).
    pub released: [u8; CLIENTS],
}

/// A node's answer as the client's round records it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Answer {
    Pending,
    Yes(Token),
    No,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Phase {
    /// Between attempts (or done, when none is left).
    Idle,
    /// The grant round, begun at `began`.
    Granting { began: Tick, answers: [Answer; NODES] },
    /// The grant round won with `token` the highest deciding grant: the
    /// fence round is next.
    Won { valid_until: Tick, token: Token },
    /// The fence round with the quorum token.
    Fencing { valid_until: Tick, token: Token, answers: [Answer; NODES] },
    /// Holds the lock (the client believes so until `valid_until`); `rank`
    /// numbers the holds in the order they were taken.
    Holding { valid_until: Tick, token: Token, rank: u8 },
    /// Checked the lease, then paused before its write (a GC pause): the
    /// write lands after the validity ran out. (A write within the
    /// validity is made at the check.)
    Paused { valid_until: Tick, token: Token, rank: u8 },
    /// Done with this attempt (lost, failed or written): the release on
    /// all nodes is next.
    Releasing,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Client {
    /// Attempts begun; the current one is this number.
    pub attempt: u8,
    pub phase: Phase,
    /// The quorum token chosen in each attempt, for its `LOCK.FENCE`.
    pub tokens: [Token; 2],
}

/// The protected resource: a fencing one remembers the highest token it
/// took and refuses lower ones; a plain one takes every write.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Resource {
    pub top_token: Token,
    /// The latest-taken hold's rank that wrote, plus one (0: none yet).
    pub last_rank: u8,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct State {
    /// True time.
    pub now: Tick,
    pub nodes: [Node; NODES],
    pub clients: [Client; CLIENTS],
    /// `links[client][node]`.
    pub links: [[Link; NODES]; CLIENTS],
    pub resource: Resource,
    /// The faults this path has used: `Faults::restarts` restarts, one
    /// clock step, one lost request, `Config::delays` delayed requests.
    pub restarts: u8,
    /// A restart lost a node's counter (one with the quarantine).
    pub counter_lost: bool,
    pub stepped: bool,
    pub lost: bool,
    pub delayed: u8,
    /// Holds taken so far, and the highest token among them (what the
    /// checker needs; no node or client reads them).
    pub holds: u8,
    pub top_hold_token: Token,
    /// A property a transition saw break.
    pub broken: Option<&'static str>,
}

/// What becomes of one request of a round, chosen when it is sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Fate {
    /// Served at once, its reply read at once.
    Now,
    /// Served at once, its reply after the round's deadline (never read).
    Late,
    /// On its way: served later (`Action::Serve`). A request behind one
    /// still on its way on the same connection waits too.
    Delayed,
    /// Lost with its connection.
    Lost,
}

/// One step of the system.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// True time advances by one tick.
    Tick,
    /// A client begins an attempt: the grant round, `LOCK.ACQUIRE` on all
    /// N at once, each request with its fate.
    Begin { client: u8, fates: [Fate; NODES] },
    /// The fence round: `LOCK.FENCE` with the quorum token on all N.
    Fence { client: u8, fates: [Fate; NODES] },
    /// The release on all N (a failed round's too); then the next attempt.
    Release { client: u8, fates: [Fate; NODES] },
    /// A delayed request reaches its node (the oldest on the connection,
    /// except with the unordered-connection bug: `index`); its reply is
    /// read, or is `late`.
    Serve { client: u8, node: u8, index: u8, late: bool },
    /// A client's round gives up: the grant round at its timeout, the
    /// fence round at the end of the validity.
    GiveUp { client: u8 },
    /// A holder checks its lease; valid, it writes to the resource, or
    /// (`pause`) pauses before its write.
    Check { client: u8, pause: bool },
    /// A paused holder's write reaches the resource after its validity.
    Write { client: u8 },
    /// A node restarts, having lost its locks or kept them; with the
    /// module, after its wall clock stepped by `step` while it ran (no
    /// running node's lease or token sees a step: only the restart does).
    Restart { node: u8, kept: bool, step: Tick },
    /// A node's wall clock steps by the tolerance (`SET PX` leases see it
    /// at once).
    Step { node: u8, forward: bool },
}

pub const MUTUAL_EXCLUSION: &str =
    "mutual exclusion: two clients hold the lock with overlapping validity (property 1)";
pub const WRITE_ORDER: &str =
    "fencing: the resource took a write from a holder older than one whose write it took (property 4)";
pub const TOKEN_ORDER: &str =
    "token order: a hold's fencing token is not above every earlier hold's (properties 4 and 9)";
pub const NODE_TOKEN_ORDER: &str =
    "node token order: a node issued a token at or below one it issued or was raised to before (property 9)";
pub const LEFT_BEHIND: &str =
    "nothing left behind: a node granted an attempt whose release it had already served (property 3)";

/// The model: a setting, with the checker's interface.
pub struct LockModel {
    pub config: Config,
    /// The relabellings that map the system onto itself, but the identity:
    /// a permutation of the nodes (`to[n]`: node n's new number) that
    /// keeps every node's clock offset, and whether the two clients swap.
    symmetries: Vec<([usize; NODES], bool)>,
}

impl Node {
    fn module_now(&self, now: Tick) -> Tick {
        now + self.module
    }

    fn wall_now(&self, now: Tick) -> Tick {
        now + self.wall
    }

    /// Whether the lock still holds at true time `now`: the module ends a
    /// lease on its module clock (a restored one a tolerance later while
    /// the restart grace runs); `SET PX` on the wall clock.
    fn holds(&self, config: &Config, lock: &Lock, now: Tick) -> bool {
        match config.protocol {
            Protocol::Plain => self.wall_now(now) < lock.deadline,
            Protocol::Module => {
                let grace =
                    if lock.restored && !config.bug(Bug::NoRestartGrace) { config.tolerance } else { 0 };
                self.module_now(now) < lock.deadline + grace
            }
        }
    }

    /// `LOCK.ACQUIRE` (plain: `SET NX PX`). A node whose clock runs fast
    /// ends the lease up to the drift early in true time: the model takes
    /// the fastest.
    fn grant(&mut self, config: &Config, now: Tick, client: u8, attempt: u8) -> Reply {
        if let Some(lock) = self.lock {
            let own = lock.client == client && lock.attempt == attempt;
            if !own && self.holds(config, &lock, now) {
                return Reply::Refused { attempt };
            }
        }
        let lease = config.ttl - config.drift;
        match config.protocol {
            Protocol::Plain => {
                let deadline = self.wall_now(now) + lease;
                self.lock = Some(Lock { client, attempt, token: 0, deadline, restored: false });
                Reply::Granted { attempt, token: 0 }
            }
            Protocol::Module => {
                let clock = self.module_now(now);
                // Quarantine: no grant until every lock the node may have
                // forgotten has expired.
                if clock < self.quarantine_until {
                    return Reply::Refused { attempt };
                }
                // Fencing tokens: max(last + 1, now * 1000).
                let token = (self.counter + 1).max(clock_token(clock));
                self.counter = token;
                // A token above what the AOF holds: the counter goes there
                // `KEEP_AHEAD` ahead in the grant's own write, so that no
                // restart from it issues this token again.
                if token > self.kept && !config.bug(Bug::CounterNotKept) {
                    let ahead = if config.bug(Bug::KeepAheadAQuarantine) {
                        clock_token(config.ttl)
                    } else {
                        KEEP_AHEAD
                    };
                    self.kept = token.max(clock_token(clock) + ahead);
                }
                self.lock = Some(Lock { client, attempt, token, deadline: clock + lease, restored: false });
                Reply::Granted { attempt, token }
            }
        }
    }

    /// `LOCK.FENCE key owner T`: for the holder, raises the counter to T
    /// and stores T as the holder's token; works in quarantine.
    fn fence(&mut self, config: &Config, now: Tick, client: u8, attempt: u8, token: Token) -> Reply {
        let Some(lock) = self.lock.as_mut() else { return Reply::Fenced { attempt, ok: false } };
        let held = lock.client == client && lock.attempt == attempt;
        let lock = *lock;
        if !held || !self.holds(config, &lock, now) {
            return Reply::Fenced { attempt, ok: false };
        }
        // The raise is written to the AOF as itself: kept.
        self.counter = self.counter.max(token);
        self.kept = self.kept.max(token);
        self.issued_top = self.issued_top.max(token);
        self.lock = Some(Lock { token, ..lock });
        Reply::Fenced { attempt, ok: true }
    }

    /// `LOCK.RELEASE key owner`: only the holder's own frees the lock.
    fn release(&mut self, client: u8, attempt: u8) {
        self.released[client as usize] |= 1 << attempt;
        if self.lock.is_some_and(|lock| lock.client == client && lock.attempt == attempt) {
            self.lock = None;
        }
    }

    /// A start. Without `appendfsync always` the node may have lost grants:
    /// its locks and counter are gone (the worst `everysec` can lose), and
    /// it quarantines for `lock.quarantine-ms` on its new module clock, so
    /// that its clock passes every token it may have issued or been raised
    /// to. From an `always` AOF, rewritten or not, it keeps its locks and
    /// the kept counter (the ledger in the rewrite's RDB preamble, the
    /// raises after it), at or above every token it issued: no floor ahead
    /// of its clock; a quarantine in force goes on to its end (the ledger
    /// carries it). Restored locks get the restart grace. Either way the
    /// module clock re-anchors to the wall clock: a step taken while the
    /// old process ran lands now.
    fn restart(&mut self, config: &Config, now: Tick, kept: bool) {
        let old_clock = self.module_now(now);
        self.module = self.wall;
        match (config.protocol, kept) {
            (Protocol::Plain, false) => self.lock = None,
            (Protocol::Plain, true) => {}
            (Protocol::Module, false) => {
                self.lock = None;
                self.counter = 0;
                self.kept = 0;
                self.quarantine_until = self.module_now(now) + config.quarantine();
            }
            (Protocol::Module, true) => {
                let stored = self.lock.map_or(0, |lock| lock.token);
                if config.bug(Bug::LedgerNotRestored) {
                    self.kept = 0;
                }
                self.counter = self.kept.max(stored);
                // A start that needs no quarantine of its own, but goes on
                // with one in force when its ledger was written: what that
                // quarantine covers (grants before a restart that lost
                // them) is not in the AOF either. The ledger is written at
                // a rewrite; the model reads the kept state as one written
                // at the restart (a quarantine over by then is not
                // carried). An AOF with no rewrite in the quarantine (its
                // ledger older) carries no end: the planted bug's path.
                // The end is on the old module clock, read on the new one
                // (a step before the restart moves it).
                let in_force = old_clock < self.quarantine_until;
                if !in_force || config.bug(Bug::QuarantineNotContinued) {
                    self.quarantine_until = Tick::MIN;
                }
                if config.bug(Bug::StartFloorLead) {
                    self.counter = self.counter.max(clock_token(self.module_now(now) + config.quarantine()));
                }
                self.lock = self.lock.map(|lock| Lock { restored: true, ..lock });
            }
        }
    }
}

impl State {
    /// A node serves a request; its reply, if any.
    fn serve(&mut self, config: &Config, client: u8, n: usize, request: Request) -> Option<Reply> {
        let now = self.now;
        let c = client as usize;
        match request {
            Request::Grant { attempt } => {
                let reply = self.nodes[n].grant(config, now, client, attempt);
                // Granted after its own release was served: nobody will
                // release it, it stays until its lease ends.
                let granted = matches!(reply, Reply::Granted { .. });
                if granted && self.nodes[n].released[c] & (1 << attempt) != 0 {
                    self.broken.get_or_insert(LEFT_BEHIND);
                }
                // Property 9: above every token this node issued or was
                // raised to, whatever restarts came between.
                if let (Reply::Granted { token, .. }, Protocol::Module) = (reply, config.protocol) {
                    let top = self.nodes[n].issued_top;
                    if token <= top && self.tokens_promised(config) {
                        self.broken.get_or_insert(NODE_TOKEN_ORDER);
                    }
                    self.nodes[n].issued_top = top.max(token);
                }
                Some(reply)
            }
            Request::Fence { attempt } => {
                let token = self.clients[c].tokens[attempt as usize - 1];
                Some(self.nodes[n].fence(config, now, client, attempt, token))
            }
            Request::Release { attempt } => {
                self.nodes[n].release(client, attempt);
                None
            }
        }
    }

    /// Sends `request` to every node, each with its fate; the replies read
    /// at once go to the client's round.
    fn send_all(&mut self, config: &Config, client: u8, request: Request, fates: [Fate; NODES]) {
        let c = client as usize;
        let mut replies = [None; NODES];
        for (n, fate) in fates.into_iter().enumerate() {
            match fate {
                Fate::Now | Fate::Late => {
                    let reply = self.serve(config, client, n, request);
                    if fate == Fate::Now {
                        replies[n] = reply;
                    }
                }
                Fate::Delayed => {
                    if !self.links[c][n].requests.is_empty() {
                        // Behind another request on the same connection:
                        // in order, not one more fault.
                    } else {
                        self.delayed += 1;
                    }
                    self.links[c][n].requests.push(request);
                }
                Fate::Lost => self.lost = true,
            }
        }
        for (n, reply) in replies.into_iter().enumerate() {
            if let Some(reply) = reply {
                self.receive(client, n, reply);
            }
        }
        self.decide(config, client);
    }

    /// The client holds the lock with `token`, valid until `valid_until`.
    fn take_hold(&mut self, config: &Config, client: u8, valid_until: Tick, token: Token) {
        let rank = self.holds;
        // Each holder's token above every earlier holder's: what fencing
        // promises across holders (the plain recipe has no token).
        if config.protocol == Protocol::Module
            && rank > 0
            && token <= self.top_hold_token
            && self.tokens_promised(config)
        {
            self.broken.get_or_insert(TOKEN_ORDER);
        }
        self.holds += 1;
        self.top_hold_token = self.top_hold_token.max(token);
        self.clients[client as usize].phase = Phase::Holding { valid_until, token, rank };
    }

    /// A round's decision, once its answers allow one: the grant round
    /// succeeds at a majority of grants while validity remains, fails once
    /// a majority can no longer be reached; the fence round holds at a
    /// majority of 1s within the validity.
    fn decide(&mut self, config: &Config, client: u8) {
        let c = client as usize;
        let count = |answers: &[Answer; NODES], yes: bool| {
            answers
                .iter()
                .filter(|a| if yes { matches!(a, Answer::Yes(_)) } else { **a == Answer::No })
                .count()
        };
        match self.clients[c].phase {
            Phase::Granting { began, answers } => {
                if count(&answers, true) >= MAJORITY {
                    // Validity = ttl - elapsed - drift, elapsed measured from
                    // before the first request.
                    let drift = if config.bug(Bug::NoDrift) { 0 } else { config.drift };
                    let valid_until = began + config.ttl - drift;
                    let token =
                        answers.iter().filter_map(|a| if let Answer::Yes(t) = a { Some(*t) } else { None });
                    let token = token.max().unwrap_or(0);
                    if self.now >= valid_until {
                        self.clients[c].phase = Phase::Releasing;
                    } else if config.protocol == Protocol::Plain || config.bug(Bug::FenceRoundSkipped) {
                        self.take_hold(config, client, valid_until, token);
                    } else {
                        // The fence round is next, with T = the highest
                        // token among the deciding grants.
                        self.clients[c].phase = Phase::Won { valid_until, token };
                    }
                } else if count(&answers, false) > NODES - MAJORITY {
                    self.clients[c].phase = Phase::Releasing;
                }
            }
            Phase::Fencing { valid_until, token, answers } => {
                if count(&answers, true) >= MAJORITY && self.now < valid_until {
                    self.take_hold(config, client, valid_until, token);
                } else if count(&answers, false) > NODES - MAJORITY {
                    self.clients[c].phase = Phase::Releasing;
                }
            }
            _ => {}
        }
    }

    /// The client records a node's reply in its round; one for an attempt
    /// or a round that is over is dropped.
    fn receive(&mut self, client: u8, node: usize, reply: Reply) {
        let c = client as usize;
        let current = self.clients[c].attempt;
        match (&mut self.clients[c].phase, reply) {
            (Phase::Granting { answers, .. }, Reply::Granted { attempt, token }) if attempt == current => {
                answers[node] = Answer::Yes(token);
            }
            (Phase::Granting { answers, .. }, Reply::Refused { attempt }) if attempt == current => {
                answers[node] = Answer::No;
            }
            (Phase::Fencing { answers, .. }, Reply::Fenced { attempt, ok }) if attempt == current => {
                answers[node] = if ok { Answer::Yes(0) } else { Answer::No };
            }
            _ => {}
        }
    }

    /// A holder's write reaches the resource, then it releases. A fencing
    /// resource refuses a token below the highest it took; the plain
    /// recipe's takes every write.
    fn write(&mut self, config: &Config, client: u8, token: Token, rank: u8) {
        let fencing = config.protocol == Protocol::Module;
        if !fencing || token >= self.resource.top_token {
            if rank + 1 < self.resource.last_rank && (!fencing || self.tokens_promised(config)) {
                self.broken.get_or_insert(WRITE_ORDER);
            }
            self.resource.top_token = self.resource.top_token.max(token);
            self.resource.last_rank = self.resource.last_rank.max(rank + 1);
        }
        self.clients[client as usize].phase = Phase::Releasing;
    }

    /// Clears what no later step can read, so that states that differ
    /// only there are one: a client's token of an attempt whose fence
    /// requests are all served, a node's note of a release when no grant
    /// of that attempt is still on its way there.
    fn forget_what_no_step_reads(&mut self) {
        for (c, client) in self.clients.iter_mut().enumerate() {
            for (a, token) in client.tokens.iter_mut().enumerate() {
                let attempt = a as u8 + 1;
                let fence = Request::Fence { attempt };
                if !self.links[c].iter().any(|link| link.requests.contains(fence)) {
                    *token = 0;
                }
            }
            for (link, node) in self.links[c].iter().zip(&mut self.nodes) {
                for attempt in 1..=2u8 {
                    if !link.requests.contains(Request::Grant { attempt }) {
                        node.released[c] &= !(1 << attempt);
                    }
                }
            }
        }
    }

    /// Whether this path is one in which the module promises its token
    /// properties (4 and 9): every path but one in which a node lost its
    /// counter (a restart with the quarantine) while the clocks were
    /// further apart than assumption 2 allows. Mutual exclusion and
    /// nothing left behind rest on no clock agreement: always checked.
    fn tokens_promised(&self, config: &Config) -> bool {
        !config.clock_assumption || !self.counter_lost || config.clocks_within_assumption(&self.nodes)
    }

    /// Clients that believe they hold the lock now.
    fn holders(&self) -> usize {
        let valid = |c: &Client| match c.phase {
            Phase::Holding { valid_until, .. } | Phase::Paused { valid_until, .. } => self.now < valid_until,
            _ => false,
        };
        self.clients.iter().filter(|c| valid(c)).count()
    }
}

impl LockModel {
    pub fn new(config: Config) -> LockModel {
        // Nodes with the same clock offset start alike and every rule
        // treats them alike (no rule reads a node's number); the clients
        // too when they make the same number of attempts (no rule reads a
        // client's number but to find its own lock and connections, which
        // the relabelling renumbers with it).
        let mut node_perms = Vec::new();
        for a in 0..NODES {
            for b in 0..NODES {
                for c in 0..NODES {
                    let to = [a, b, c];
                    let bijective = a != b && b != c && a != c;
                    let keeps_offsets =
                        (0..NODES).all(|n| config.clock_offsets[to[n]] == config.clock_offsets[n]);
                    if bijective && keeps_offsets {
                        node_perms.push(to);
                    }
                }
            }
        }
        let client_swaps: &[bool] =
            if config.attempts[0] == config.attempts[1] { &[false, true] } else { &[false] };
        let identity = ([0, 1, 2], false);
        let symmetries = node_perms
            .iter()
            .flat_map(|&to| client_swaps.iter().map(move |&swap| (to, swap)))
            .filter(|&s| s != identity)
            .collect();
        LockModel { config, symmetries }
    }

    /// The same model, every labelling of a state its own state (to
    /// measure what the symmetry reduction saves, and to see that it finds
    /// the same).
    pub fn without_symmetry(config: Config) -> LockModel {
        LockModel { config, symmetries: Vec::new() }
    }

    /// `s` with its nodes renumbered by `to` and, with `swap`, its clients
    /// swapped: everything that names a node (the connections, a round's
    /// answers) or a client (a lock's holder, a node's notes of releases,
    /// the connections) renamed alike.
    fn relabel(s: &State, to: [usize; NODES], swap: bool) -> State {
        let mut r = *s;
        for (n, &m) in to.iter().enumerate() {
            r.nodes[m] = s.nodes[n];
            for (new, old) in r.links.iter_mut().zip(&s.links) {
                new[m] = old[n];
            }
        }
        for client in &mut r.clients {
            if let Phase::Granting { answers, .. } | Phase::Fencing { answers, .. } = &mut client.phase {
                let old = *answers;
                for (n, &m) in to.iter().enumerate() {
                    answers[m] = old[n];
                }
            }
        }
        if swap {
            r.clients.swap(0, 1);
            r.links.swap(0, 1);
            for node in &mut r.nodes {
                node.released.swap(0, 1);
                if let Some(lock) = &mut node.lock {
                    lock.client = 1 - lock.client;
                }
            }
        }
        r
    }

    fn done(&self, state: &State) -> bool {
        let idle = |(i, c): (usize, &Client)| c.phase == Phase::Idle && c.attempt >= self.config.attempts[i];
        state.clients.iter().enumerate().all(idle)
    }

    /// Every choice of fates for a round of `client`'s: at once (read or
    /// late), delayed while the budget lasts, lost once. A connection with
    /// a request still on its way takes the new one behind it (unless the
    /// connection keeps no order: the planted bug). A release is read by
    /// nobody and its loss frees nothing: at once or delayed.
    fn fates(&self, s: &State, client: usize, release: bool, out: &mut Vec<[Fate; NODES]>) {
        let config = &self.config;
        let mut choices: [Vec<Fate>; NODES] = Default::default();
        for (n, choice) in choices.iter_mut().enumerate() {
            let busy = !s.links[client][n].requests.is_empty();
            if busy && !config.bug(Bug::UnorderedConnection) {
                choice.push(Fate::Delayed);
                continue;
            }
            choice.push(Fate::Now);
            if !release {
                choice.push(Fate::Late);
            }
            if busy || s.delayed < config.delays {
                choice.push(Fate::Delayed);
            }
            if !release && config.faults.message_loss && !s.lost {
                choice.push(Fate::Lost);
            }
        }
        for a in &choices[0] {
            for b in &choices[1] {
                for c in &choices[2] {
                    let fates = [*a, *b, *c];
                    // One loss per path, and no more delays than the budget.
                    let lost = fates.iter().filter(|f| **f == Fate::Lost).count();
                    let delayed = (0..NODES)
                        .filter(|&n| fates[n] == Fate::Delayed && s.links[client][n].requests.is_empty())
                        .count();
                    if lost <= 1 && usize::from(s.delayed) + delayed <= usize::from(config.delays) {
                        out.push(fates);
                    }
                }
            }
        }
    }
}

impl crate::check::Model for LockModel {
    type State = State;
    type Action = Action;

    /// The smallest labelling in the order `State` derives (any fixed
    /// order picks one labelling per class; this one is cheap to compare).
    fn canonical(&self, s: &State) -> Option<State> {
        let mut least: Option<State> = None;
        for &(to, swap) in &self.symmetries {
            let r = LockModel::relabel(s, to, swap);
            if r < *least.as_ref().unwrap_or(s) {
                least = Some(r);
            }
        }
        least
    }

    fn init(&self) -> State {
        let node = |offset: Tick| Node {
            lock: None,
            counter: 0,
            kept: 0,
            issued_top: 0,
            restarted: false,
            quarantine_until: Tick::MIN,
            wall: offset,
            module: offset,
            released: [0; CLIENTS],
        };
        let link = Link { requests: Queue::EMPTY };
        State {
            now: 0,
            nodes: self.config.clock_offsets.map(node),
            clients: [Client { attempt: 0, phase: Phase::Idle, tokens: [0; 2] }; CLIENTS],
            links: [[link; NODES]; CLIENTS],
            resource: Resource { top_token: 0, last_rank: 0 },
            restarts: 0,
            counter_lost: false,
            stepped: false,
            lost: false,
            delayed: 0,
            holds: 0,
            top_hold_token: 0,
            broken: None,
        }
    }

    fn actions(&self, s: &State, out: &mut Vec<Action>) {
        let config = &self.config;
        // Once every client is done, nothing that follows can matter.
        if self.done(s) {
            return;
        }
        if s.now < config.horizon {
            out.push(Action::Tick);
        }
        let mut fates = Vec::new();
        for (i, client) in s.clients.iter().enumerate() {
            let c = i as u8;
            fates.clear();
            match client.phase {
                Phase::Idle if client.attempt < config.attempts[i] => {
                    self.fates(s, i, false, &mut fates);
                    out.extend(fates.iter().map(|&fates| Action::Begin { client: c, fates }));
                }
                Phase::Granting { began, .. } if s.now >= began + config.round_timeout => {
                    out.push(Action::GiveUp { client: c })
                }
                Phase::Won { .. } => {
                    self.fates(s, i, false, &mut fates);
                    out.extend(fates.iter().map(|&fates| Action::Fence { client: c, fates }));
                }
                Phase::Fencing { valid_until, .. } if s.now >= valid_until => {
                    out.push(Action::GiveUp { client: c })
                }
                Phase::Holding { .. } => {
                    out.push(Action::Check { client: c, pause: false });
                    if config.faults.pause {
                        out.push(Action::Check { client: c, pause: true });
                    }
                }
                Phase::Paused { valid_until, .. } if s.now >= valid_until => {
                    out.push(Action::Write { client: c })
                }
                Phase::Releasing => {
                    self.fates(s, i, true, &mut fates);
                    out.extend(fates.iter().map(|&fates| Action::Release { client: c, fates }));
                }
                _ => {}
            }
            for (n, link) in s.links[i].iter().enumerate() {
                let node = n as u8;
                let servable = if config.bug(Bug::UnorderedConnection) { link.requests.len() } else { 1 };
                for index in 0..servable.min(link.requests.len()) {
                    out.push(Action::Serve { client: c, node, index: index as u8, late: false });
                    let release = matches!(link.requests.get(index), Some(Request::Release { .. }));
                    if !release {
                        out.push(Action::Serve { client: c, node, index: index as u8, late: true });
                    }
                }
            }
        }
        // Every node: a fault on one of two alike nodes is one on the other
        // relabelled, which the checker's symmetry reduction merges.
        for n in 0..NODES as u8 {
            let module = config.protocol == Protocol::Module;
            let steps: &[Tick] = if module && config.faults.clock_step && !s.stepped {
                &[0, config.tolerance, -config.tolerance]
            } else {
                &[0]
            };
            let node = &s.nodes[n as usize];
            let may_restart =
                s.restarts < config.faults.restarts && (config.faults.same_node_twice || !node.restarted);
            for &step in steps.iter().filter(|_| may_restart) {
                if config.faults.restart_lost {
                    out.push(Action::Restart { node: n, kept: false, step });
                }
                if config.faults.restart_kept {
                    out.push(Action::Restart { node: n, kept: true, step });
                }
            }
            if config.faults.clock_step && !s.stepped && !module {
                out.push(Action::Step { node: n, forward: true });
                out.push(Action::Step { node: n, forward: false });
            }
        }
    }

    fn next(&self, s: &State, action: Action) -> State {
        let config = &self.config;
        let mut s = *s;
        match action {
            Action::Tick => s.now += 1,
            Action::Begin { client, fates } => {
                // The grant round: LOCK.ACQUIRE on all N at once.
                let c = &mut s.clients[client as usize];
                c.attempt += 1;
                let attempt = c.attempt;
                c.phase = Phase::Granting { began: s.now, answers: [Answer::Pending; NODES] };
                s.send_all(config, client, Request::Grant { attempt }, fates);
            }
            Action::Fence { client, fates } => {
                // The fence round: T = the highest token among the deciding
                // grants, LOCK.FENCE on all N; held with T once a majority
                // answered 1 within the validity.
                let c = &mut s.clients[client as usize];
                if let Phase::Won { valid_until, token } = c.phase {
                    let attempt = c.attempt;
                    c.tokens[attempt as usize - 1] = token;
                    c.phase = Phase::Fencing { valid_until, token, answers: [Answer::Pending; NODES] };
                    s.send_all(config, client, Request::Fence { attempt }, fates);
                }
            }
            Action::Release { client, fates } => {
                // Release on all N, nodes that did not answer too, each on
                // its ordered connection: never ahead of the grant.
                let attempt = s.clients[client as usize].attempt;
                s.send_all(config, client, Request::Release { attempt }, fates);
                s.clients[client as usize].phase = Phase::Idle;
            }
            Action::Serve { client, node, index, late } => {
                let (c, n) = (client as usize, node as usize);
                if let Some(request) = s.links[c][n].requests.remove(index as usize) {
                    if let Some(reply) = s.serve(config, client, n, request).filter(|_| !late) {
                        s.receive(client, n, reply);
                        s.decide(config, client);
                    }
                }
            }
            Action::GiveUp { client } => s.clients[client as usize].phase = Phase::Releasing,
            Action::Check { client, pause } => {
                // The holder checks its lease before it acts: a lease run
                // out means the lock is lost.
                if let Phase::Holding { valid_until, token, rank } = s.clients[client as usize].phase {
                    if s.now >= valid_until {
                        s.clients[client as usize].phase = Phase::Releasing;
                    } else if pause {
                        s.clients[client as usize].phase = Phase::Paused { valid_until, token, rank };
                    } else {
                        s.write(config, client, token, rank);
                    }
                }
            }
            Action::Write { client } => {
                if let Phase::Paused { token, rank, .. } = s.clients[client as usize].phase {
                    s.write(config, client, token, rank);
                }
            }
            Action::Restart { node, kept, step } => {
                s.restarts += 1;
                s.counter_lost |= !kept;
                s.stepped |= step != 0;
                let now = s.now;
                s.nodes[node as usize].wall += step;
                s.nodes[node as usize].restarted = true;
                s.nodes[node as usize].restart(config, now, kept);
            }
            Action::Step { node, forward } => {
                // A wall-clock step: the module clock does not follow it
                // while the node runs; SET PX leases do.
                s.stepped = true;
                let step = if forward { config.tolerance } else { -config.tolerance };
                s.nodes[node as usize].wall += step;
            }
        }
        s.forget_what_no_step_reads();
        s
    }

    fn violation(&self, s: &State) -> Option<&'static str> {
        if s.holders() > 1 {
            return Some(MUTUAL_EXCLUSION);
        }
        s.broken
    }
}

/// A counterexample as lines a person can follow: each step, at its true
/// time, with what it did.
pub fn narrate(model: &LockModel, steps: &[(Action, State)]) -> String {
    use crate::check::Model as _;
    let mut out = String::new();
    let mut before = model.init();
    for (action, after) in steps {
        if *action != Action::Tick {
            let _ = writeln!(out, "  t={}  {}", before.now, describe(&model.config, &before, *action, after));
        }
        before = *after;
    }
    out
}

fn describe(config: &Config, before: &State, action: Action, after: &State) -> String {
    let nodes = || {
        let lock = |node: &Node| match node.lock {
            Some(l) => format!("client {} token {} until {}", l.client, l.token, l.deadline),
            None => "free".to_string(),
        };
        let all: Vec<String> =
            after.nodes.iter().enumerate().map(|(n, node)| format!("{n}: {}", lock(node))).collect();
        let counters: Vec<String> = after.nodes.iter().map(|n| format!("{}/{}", n.counter, n.kept)).collect();
        match config.protocol {
            Protocol::Module => format!("[nodes {}; counters/kept {}]", all.join("; "), counters.join(" ")),
            Protocol::Plain => format!("[nodes {}]", all.join("; ")),
        }
    };
    let phase = |client: u8| format!("{:?}", after.clients[client as usize].phase);
    match action {
        Action::Tick => String::new(),
        Action::Begin { client, fates } => {
            format!("client {client} grant round {fates:?} -> {} {}", phase(client), nodes())
        }
        Action::Fence { client, fates } => {
            format!("client {client} fence round {fates:?} -> {} {}", phase(client), nodes())
        }
        Action::Release { client, fates } => format!("client {client} releases {fates:?} {}", nodes()),
        Action::Serve { client, node, index, late } => {
            let request = before.links[client as usize][node as usize].requests.get(index as usize);
            let late = if late { ", its reply late" } else { "" };
            format!(
                "node {node} serves client {client}'s delayed {request:?}{late} -> {} {}",
                phase(client),
                nodes()
            )
        }
        Action::GiveUp { client } => format!("client {client}'s round gives up"),
        Action::Check { client, pause } => {
            let what = match (before.clients[client as usize].phase, pause) {
                (Phase::Holding { valid_until, .. }, _) if before.now >= valid_until => "run out",
                (_, true) => "valid; pauses before its write",
                (_, false) => "valid; writes",
            };
            format!("client {client} checks its lease: {what} (resource {:?})", after.resource)
        }
        Action::Write { client } => {
            format!("paused client {client}'s write reaches the resource (resource {:?})", after.resource)
        }
        Action::Restart { node, kept, step } => {
            let how = if kept { "from an always AOF (locks kept)" } else { "without fsync (locks lost)" };
            let stepped =
                if step != 0 { format!(", its wall clock stepped {step:+} before") } else { String::new() };
            format!("node {node} restarts {how}{stepped} {}", nodes())
        }
        Action::Step { node, forward } => {
            format!("node {node}'s wall clock steps {}", if forward { "forward" } else { "back" })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::Model;
    use std::collections::HashSet;

    /// The symmetry reduction is sound only if relabelling commutes with
    /// every rule: a relabelled state's successors are its successors
    /// relabelled, and it breaks the same properties. Checked along random
    /// paths with every fault, on both protocols.
    #[test]
    fn relabelling_commutes_with_every_step() {
        for protocol in [Protocol::Module, Protocol::Plain] {
            let faults = Faults { restarts: 2, ..Faults::ALL };
            let model = LockModel::new(Config { faults, ..Config::new(protocol) });
            assert_eq!(model.symmetries.len(), 3, "nodes 1 and 2 swapped, the clients swapped, both");
            let successors = |s: &State| {
                let mut actions = Vec::new();
                model.actions(s, &mut actions);
                actions.iter().map(|&a| model.next(s, a)).collect::<Vec<State>>()
            };
            let mut seed: u64 = 0x9E37_79B9_7F4A_7C15;
            let mut checked = 0;
            for _ in 0..300 {
                let mut s = model.init();
                loop {
                    let next = successors(&s);
                    for &(to, swap) in &model.symmetries {
                        let r = LockModel::relabel(&s, to, swap);
                        let of_relabelled: HashSet<State> = successors(&r).into_iter().collect();
                        let relabelled: HashSet<State> =
                            next.iter().map(|n| LockModel::relabel(n, to, swap)).collect();
                        assert_eq!(of_relabelled, relabelled, "{protocol:?} {to:?} {swap}: {s:?}");
                        assert_eq!(model.violation(&r), model.violation(&s));
                        checked += 1;
                    }
                    if next.is_empty() {
                        break;
                    }
                    seed =
                        seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
                    s = next[(seed >> 33) as usize % next.len()];
                }
            }
            assert!(checked > 10_000, "{checked} states checked");
        }
    }
}
