//! What a scenario is: the nodes and their settings, the workload, the
//! faults a seeded nemesis picks from, and the probes (deterministic
//! arrangements of a known failure) it runs first.

use std::time::Duration;

use super::worker::{Impl, Kind, Work};

/// The node the probes fault, and the one with a replica.
pub const VICTIM: usize = 2;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// A worker pauses (GC) inside its critical section 100-800 ms past its
    /// validity, then writes without checking.
    HolderPause,
    /// A worker crashes while holding: it never releases.
    ClientCrash,
    /// kill -9 a node, restart it at once (0-200 ms down) on the same data
    /// directory: empty without persistence, intact with AOF always.
    KillRestart,
    /// SIGSTOP a node for 0.2-1.5 s, then SIGCONT.
    NodePause,
    /// Half the replies of one node are lost (connection cut after the node
    /// acted), for 0.3-1.5 s.
    LostReplies,
    /// Two nodes unreachable for 0.3-1.5 s: refused, or held and delivered
    /// late, or held and reset.
    Partition,
    /// A node's requests arrive 100-400 ms late (in order) for 0.3-1.5 s.
    SlowNode,
    /// A node's wall clock jumps 2-20 s forward, back 0.3-1.5 s later.
    ClockForward,
    /// A node's wall clock jumps 2-10 s backward (and stays).
    ClockBackward,
    /// A node's wall clock moves to its start offset +-200 ms (the spread
    /// stays within the quarantine: the documented assumption).
    ClockSmall,
    /// The master with a replica: the replica is cut off, the master grants
    /// for 0.1-0.6 s, dies, the replica is promoted and takes its place.
    Promotion,
    /// An operator's memory limit: an evicting `maxmemory-policy` and a
    /// `maxmemory` below the node's use (some keys evicted, or every one) for
    /// 0.3-1.5 s, under `lock.eviction-mode` refuse or quarantine.
    Evict,
    /// An operator's FLUSHALL or FLUSHDB, sync or ASYNC, on a node.
    Flush,
    /// An operator's SWAPDB 0 1 on a node.
    SwapDb,
    /// An operator's DEL of a workload resource's key on a node.
    StrayDelete,
    /// An operator's RENAME of a workload resource's key on a node.
    StrayRename,
    /// An operator's MOVE of a workload resource's key on a node to
    /// another database.
    StrayMove,
    /// Cluster members: a workload resource's slot migrated to another
    /// master under load (`MIGRATE` key by key, so that calls meet `ASK`;
    /// or Valkey's `CLUSTER MIGRATESLOTS`).
    SlotMigration,
    /// Cluster members: kill -9 of the master of a resource's slot, its
    /// replica promoted, the old master back as its replica.
    ShardFailover,
    /// Cluster members: the master of a resource's slot paused for 0.2-1 s
    /// (cut off from clients and from its cluster, below the node timeout).
    ShardPause,
    /// Cluster members: a migration under way, and every client connection
    /// of both masters cut (the replies to redirected calls lost).
    RedirectCut,
    /// Sentinel members: kill -9 of the master the Sentinels name, its
    /// replica promoted by them once they find it down, the old master
    /// restarted (the Sentinels turn it into a replica).
    SentinelFailover,
}

impl Fault {
    pub fn name(self) -> &'static str {
        match self {
            Fault::HolderPause => "holder pause",
            Fault::ClientCrash => "client crash",
            Fault::KillRestart => "kill -9 + restart",
            Fault::NodePause => "node pause",
            Fault::LostReplies => "lost replies",
            Fault::Partition => "partition",
            Fault::SlowNode => "slow node",
            Fault::ClockForward => "clock forward",
            Fault::ClockBackward => "clock backward",
            Fault::ClockSmall => "clock step",
            Fault::Promotion => "promotion",
            Fault::Evict => "eviction",
            Fault::Flush => "flush",
            Fault::SwapDb => "swapdb",
            Fault::StrayDelete => "stray DEL",
            Fault::StrayRename => "stray RENAME",
            Fault::StrayMove => "stray MOVE",
            Fault::SlotMigration => "slot migration",
            Fault::ShardFailover => "shard failover",
            Fault::ShardPause => "shard pause",
            Fault::RedirectCut => "redirects cut",
            Fault::SentinelFailover => "Sentinel failover",
        }
    }
}

/// The deterministic arrangements (see `nemesis.rs` for each).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Probe {
    /// P1 holds, reads, pauses past its validity; P2 acquires, increments;
    /// P1 writes its stale increment.
    HolderPause,
    /// P1 holds on nodes 0-2 only; node 2 restarts (forgetting, unless its
    /// AOF has the lock); P2 keeps trying until P1's validity ends.
    Restart,
    /// The same over a read-write lock: P1 and P2 take its write lock, which
    /// the module stores as a hash (one field per holder), so the AOF must
    /// hold the hash's fields.
    RestartShared,
    /// The same, node 2's wall clock jumping forward instead.
    ClockForward,
    /// The same, node 2's master replaced by a replica that missed the grant.
    Promotion,
    /// Over node clocks seconds apart: P1 on nodes 2-4 (the fastest clock
    /// gives its token), runs out; node 2 restarts from its AOF; P2 on nodes
    /// 0-2 must get a higher token, from node 2's raised counter alone.
    Fencing,
    /// Over nodes whose clocks run fast: P1 holds to the end of its
    /// validity, P2 keeps trying through its last milliseconds.
    Drift,
    /// Three nodes' replies come 150 ms late, so P1's acquire round is
    /// long; P2 keeps trying through the end of P1's validity.
    SlowReply,
    /// Node 4's requests are held in the proxy; P1 acquires (the round
    /// returns without node 4) and releases at once; node 4 must end free.
    Ordering,
    /// One node: P enters twice, its first exit's reply is lost, the exit is
    /// sent again with the same id; Q tries to enter while P still holds.
    RetriedExit,
    /// One node: P's lock is abandoned; Q waits for it (lock-delay applies).
    Abandon,
    /// One node: kill -9 and restart without persistence while the workers
    /// go on (their tokens after the quarantine must be above those before).
    NodeRestart,
    /// Three clients each take a permit of a 2-permit semaphore on a
    /// different 3 of the 5 nodes (no node above 2 holders).
    Semaphore,
    /// P1 holds on nodes 0-2; node 2's policy turns evicting with a tiny
    /// `maxmemory`, which evicts P1's key there (while it evicts, a new
    /// grant on node 2 must be refused), then the limit is lifted; P2 keeps
    /// trying until P1's validity ends.
    Evict,
    /// The same, node 2 flushed (FLUSHALL, FLUSHDB or FLUSHDB ASYNC).
    Flush,
    /// The same, node 2's databases 0 and 1 swapped (SWAPDB 0 1).
    SwapDb,
    /// As Restart, over a read lock that P1 takes with a short first lease
    /// and extends before node 2 restarts: a holder of a hash, whose
    /// extended deadline node 2's AOF must hold (P2 asks to write).
    RestartRead,
    /// The same over the one permit of a semaphore (P2 asks for it too).
    RestartPermit,
    /// P1 holds on nodes 0-2 with a short first lease and extends it; once
    /// the first lease has ended, node 2's copy of the key is renamed; P2
    /// keeps trying until P1's validity ends.
    Rename,
    /// The same, node 2's key moved to another database.
    Move,
    /// Through cluster members (members 0 and 1 clusters, member 2 a
    /// master): P1 holds on member 0 and the master only (a rival holds
    /// the key on member 1 meanwhile), the replica of member 0's shard for
    /// the key cut off first so that it misses the grant; that shard's
    /// master is killed and the replica promoted at once (`CLUSTER FAILOVER
    /// TAKEOVER`); the rival lets go; P2 keeps trying until P1's validity
    /// ends (`sharded.rs`, run by the suite's `run_sharded`).
    ShardPromotion,
    /// The same through Sentinel members (members 0-2, each a master and a
    /// replica under one set of Sentinels): member 0's master, whose
    /// replica missed P1's grant, killed; the Sentinels find it down and
    /// promote the replica (a second or two: P1's TTL is longer).
    SentinelPromotion,
    /// Readers P1 and P3 take a read lock with a short TTL and walk away
    /// (crashed); once both ran out, P2 takes the write lock over their
    /// expired holds, still stored, and P1 keeps trying to read until P2's
    /// validity ends.
    ExpiredReaders,
}

/// What the workers do.
#[derive(Clone, Copy, Debug)]
pub enum Workload {
    /// Quorum-client workers over these resources.
    Quorum(&'static [(&'static str, Kind)]),
    /// One node: WAIT hand-off, reentrant, semaphore and read-write workers
    /// (`onenode.rs`).
    OneNode,
}

#[derive(Clone, Copy, Debug)]
pub struct Scenario {
    pub name: &'static str,
    pub faults: &'static [Fault],
    pub probes: &'static [Probe],
    /// The implementations of the CI run (the long run can add the classic
    /// recipe everywhere).
    pub impls: &'static [Impl],
    /// The contrast must show a violation (its probe arranges one).
    pub contrast_must_fail: bool,
    pub nodes: usize,
    pub workload: Workload,
    /// This project's workers' critical sections (the contrast's are short).
    pub work: Work,
    pub ttl_ms: u64,
    /// `lock.quarantine-ms` where nodes restart or are promoted; 0: none.
    pub quarantine_ms: u64,
    pub aof: bool,
    /// Nodes under the clock shim.
    pub clock: bool,
    /// Node i's wall clock starts i * this far ahead (ms).
    pub clock_step_ms: i64,
    /// Every node's monotonic clock runs this much fast (ppm).
    pub rate_ppm: u32,
    /// `lock.expiry-delay-ms` (0: none).
    pub lock_delay_ms: u64,
    /// `lock.clock-jump-tolerance-ms`, when not the default.
    pub tolerance_ms: Option<u64>,
    pub replica: bool,
    /// A misuse client runs alongside the workers.
    pub misuse: bool,
    /// Members that are Redis Clusters (`sharded.rs`; `nodes` is then the
    /// plain masters beside them): the cluster faults act on these.
    pub clusters: usize,
    /// Members that are masters with a replica under Sentinel, after the
    /// clusters (`sharded.rs`): the Sentinel faults act on these.
    pub sentinels: usize,
}

impl Scenario {
    pub fn ttl(&self) -> Duration {
        Duration::from_millis(self.ttl_ms)
    }

    pub fn lock_delay(&self) -> Option<Duration> {
        (self.lock_delay_ms > 0).then(|| Duration::from_millis(self.lock_delay_ms))
    }

    /// The longest a worker may hold without a fault (a long critical
    /// section renews; see `Work::Long`).
    /// How much later than its deadline a lock that expires by itself may be
    /// taken over after a node restarted from its AOF (the module's restart
    /// grace, `lock.clock-jump-tolerance-ms`): added to the liveness bound
    /// where nodes restart from an AOF (a scenario's `aof`, or a promoted
    /// replica).
    pub fn restart_grace(&self) -> Duration {
        if self.aof || self.replica {
            Duration::from_millis(self.tolerance_ms.unwrap_or(60_000))
        } else {
            Duration::ZERO
        }
    }

    pub fn hold_max(&self) -> Duration {
        match self.work {
            Work::Short => Duration::ZERO,
            Work::Long => self.ttl().mul_f64(2.5),
        }
    }

    pub fn has_contrast(&self) -> bool {
        self.impls.iter().any(|&i| i != Impl::Module)
    }
}
