//! Benchmark: the module's native lock commands against the classic client-side
//! recipes, side by side on one running redis-server:
//!
//! - plain locks: `SET key token NX PX ttl` + Lua compare-and-delete / compare-
//!   and-pexpire via EVALSHA;
//! - reentrant locks: `LOCK.ENTER` / `LOCK.EXIT` against Redisson-style hash-
//!   counter lock / unlock Lua scripts (EVALSHA);
//! - read locks: `LOCK.SHARED` / `LOCK.RELEASE` against Lua modelled on
//!   Redisson's RedissonReadLock (a hash `mode` + reader counters, and one
//!   timeout key per reader hold);
//! - semaphores with expiring permits: `LOCK.SEMAPHORE` / `LOCK.RELEASE`
//!   against Lua modelled on Redisson's RedissonPermitExpirableSemaphore (a
//!   counter of free permits + a zset of permit ids scored by expiry);
//! - hand-off latency (release sent -> waiter granted): `LOCK.ACQUIRE ... WAIT`
//!   against a Redisson-style pub/sub wake-up and against polling every 50 ms;
//! - on servers that have them (Valkey 9: `DELIFEQ`, `SET ... IFEQ`), the plain
//!   lock done with the server's own commands and no Lua: `SET NX PX`,
//!   `SET key token IFEQ token PX ttl` (extend), `DELIFEQ key token` (release).
//!
//! Normally started by `scripts/bench`, which builds the module, starts a
//! private server with it loaded (pinned to its own CPU) and passes
//! `--port`. By hand, without `--port` it starts one itself, through the test
//! kit (`testkit/`: `LOCK_SERVER_BIN`, `LOCK_MODULE_SO` as for the tests):
//!
//! ```text
//! cargo run --release --example bench -- [--port 6390] [--runs 5] [--threads 4]
//!     [--depth 64] [--ops 256000] [--ops-single 32000] [--handoffs 200] [--host 127.0.0.1]
//!     [--phases acquire,release,extend,cycle,reentrant,read,semaphore] [--reenter yes]
//! ```
//!
//! `--phases` picks the throughput phases (`all` = every one, with
//! `reenter`); `--handoffs 0` skips the hand-off phase.
//!
//! Every throughput phase uses fixed op counts and distinct keys (so every timed
//! call is a real grant / release / extension; the replies are checked),
//! `CONFIG RESETSTAT` before the timed part and `INFO commandstats` after it.
//! Each variant runs pipelined (`--depth` ops per batch) and unpipelined (one
//! request per round trip) on `--threads` connections, each with its own key
//! range; the figures printed are medians over `--runs` runs. The hand-off
//! phase runs `--handoffs` hand-offs per method in all (split over the runs),
//! one at a time, with the waiter on its own thread and connection; its
//! percentiles are over all of them.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::process::ExitCode;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::Barrier;
use std::time::{Duration, Instant, SystemTime};

use redis::{Cmd, Connection, ConnectionLike, Value};

const TTL_MS: &str = "30000";
const TOKEN: &str = "tok";
/// The classic Lua compare-and-delete (release).
const DEL_SCRIPT: &str =
    r#"if redis.call("get",KEYS[1]) == ARGV[1] then return redis.call("del",KEYS[1]) else return 0 end"#;
/// The classic Lua compare-and-pexpire (extend).
const PEXPIRE_SCRIPT: &str = r#"if redis.call("get",KEYS[1]) == ARGV[1] then return redis.call("pexpire",KEYS[1],ARGV[2]) else return 0 end"#;
/// Redisson-style reentrant lock (hash `owner -> holds`): granted (nil) if the
/// key is absent or `owner` already holds it, else the lock's PTTL.
/// KEYS[1] lock; ARGV[1] lease ms, ARGV[2] owner.
const HASH_LOCK_SCRIPT: &str = r#"local held = redis.call("exists", KEYS[1]) == 1
if held and redis.call("hexists", KEYS[1], ARGV[2]) == 0 then
  return redis.call("pttl", KEYS[1])
end
redis.call("hincrby", KEYS[1], ARGV[2], 1)
redis.call("pexpire", KEYS[1], ARGV[1])
return nil"#;
/// Redisson-style reentrant unlock: nil if `owner` holds nothing; else one
/// hold less: 0 (still held, lease renewed) or 1 (freed and announced).
/// KEYS[1] lock, KEYS[2] channel; ARGV[1] message, ARGV[2] lease ms, ARGV[3] owner.
const HASH_UNLOCK_SCRIPT: &str = r#"if redis.call("hexists", KEYS[1], ARGV[3]) == 0 then
  return nil
end
local left = redis.call("hincrby", KEYS[1], ARGV[3], -1)
if left > 0 then
  redis.call("pexpire", KEYS[1], ARGV[2])
  return 0
end
redis.call("del", KEYS[1])
redis.call("publish", KEYS[2], ARGV[1])
return 1"#;
/// Compare-and-delete that also announces the release on the lock's channel
/// (the holder's side of a pub/sub wait). KEYS[1] lock, KEYS[2] channel;
/// ARGV[1] token, ARGV[2] message.
const DEL_PUBLISH_SCRIPT: &str = r#"if redis.call("get",KEYS[1]) == ARGV[1] then redis.call("del",KEYS[1]); redis.call("publish",KEYS[2],ARGV[2]); return 1 else return 0 end"#;
/// Owner of the reentrant locks: Redisson's `<client uuid>:<thread id>` form.
const REENTRANT_OWNER: &str = "3f2b8c1e-9d4a-4e7b-a6c5-0b1d2e3f4a5b:1";
/// The reader of the read-lock phase (both sides): the same Redisson form.
const READER: &str = REENTRANT_OWNER;
/// Redisson's name for the same thread's write hold (the read lock script's
/// test for a writer that may also read).
const READER_AS_WRITER: &str = "3f2b8c1e-9d4a-4e7b-a6c5-0b1d2e3f4a5b:1:write";
/// Permit id / token of the semaphore phase (both sides): 16 bytes, as
/// Redisson's permit ids (16 random bytes).
const PERMIT_ID: &str = "c5a1e09f7b3d2468";
/// Size of the semaphores in the semaphore phase.
const PERMITS: usize = 3;
/// The score Redisson's expirable semaphore gives a permit without a lease.
const NO_EXPIRY_SCORE: &str = "922337203685477";

/// Read lock modelled on Redisson's RedissonReadLock acquire: the same work
/// (calls, keys and data structures), written for this benchmark; it is not
/// Redisson's code. The lock is a hash: field `mode` (`read` / `write`) and
/// one field per reader with its hold count; every read hold also has its
/// own timeout key `<prefix>:<n>` (`{lock}:<reader>:rwlock_timeout:<n>`)
/// with the lease as PEXPIRE, and the lock's PEXPIRE is the longest lease.
/// Granted: nil; refused (a writer holds it): the lock's PTTL.
/// KEYS[1] lock, KEYS[2] the reader's timeout-key prefix;
/// ARGV[1] lease ms, ARGV[2] reader, ARGV[3] the reader's write-hold field.
const READ_LOCK_SCRIPT: &str = r#"-- models Redisson's read lock (not its code)
local mode = redis.call("hget", KEYS[1], "mode")
local n
if not mode then
  redis.call("hset", KEYS[1], "mode", "read")
  redis.call("hset", KEYS[1], ARGV[2], 1)
  n = 1
elseif mode == "read" or redis.call("hexists", KEYS[1], ARGV[3]) == 1 then
  n = redis.call("hincrby", KEYS[1], ARGV[2], 1)
else
  return redis.call("pttl", KEYS[1])
end
local hold = KEYS[2] .. ":" .. n
redis.call("set", hold, 1)
redis.call("pexpire", hold, ARGV[1])
local lease = tonumber(ARGV[1])
if mode then
  lease = math.max(lease, redis.call("pttl", KEYS[1]))
end
redis.call("pexpire", KEYS[1], lease)
return nil"#;
/// Read unlock modelled on Redisson's RedissonReadLock unlock (same work,
/// not Redisson's code): one hold of the reader less and its timeout key
/// deleted; if other holds remain, the lock's PEXPIRE becomes the longest
/// PTTL among their timeout keys (0 = still held); else the lock is deleted
/// and the release published (1). Nil if the reader holds nothing. (Recent
/// Redisson versions also keep an "unlock latch" key per request id for
/// retries: a GET and a SET PX more per unlock, left out here as in the
/// reentrant model.)
/// KEYS[1] lock, KEYS[2] channel, KEYS[3] the reader's timeout-key prefix,
/// KEYS[4] `{lock}` (the prefix of every reader's timeout keys);
/// ARGV[1] message, ARGV[2] reader.
const READ_UNLOCK_SCRIPT: &str = r#"-- models Redisson's read unlock (not its code)
local mode = redis.call("hget", KEYS[1], "mode")
if not mode then
  redis.call("publish", KEYS[2], ARGV[1])
  return 1
end
if redis.call("hexists", KEYS[1], ARGV[2]) == 0 then
  return nil
end
local left = redis.call("hincrby", KEYS[1], ARGV[2], -1)
if left == 0 then
  redis.call("hdel", KEYS[1], ARGV[2])
end
redis.call("del", KEYS[3] .. ":" .. (left + 1))
if redis.call("hlen", KEYS[1]) > 1 then
  local longest = -3
  for _, field in ipairs(redis.call("hkeys", KEYS[1])) do
    local holds = tonumber(redis.call("hget", KEYS[1], field))
    if holds then
      for i = holds, 1, -1 do
        local ttl = redis.call("pttl", KEYS[4] .. ":" .. field .. ":rwlock_timeout:" .. i)
        longest = math.max(longest, ttl)
      end
    end
  end
  if longest > 0 then
    redis.call("pexpire", KEYS[1], longest)
    return 0
  end
  if mode == "write" then
    return 0
  end
end
redis.call("del", KEYS[1])
redis.call("publish", KEYS[2], ARGV[1])
return 1"#;
/// Semaphore with expiring permits modelled on Redisson's
/// RedissonPermitExpirableSemaphore acquire (same work, not Redisson's code):
/// a string counter of free permits (set once by `trySetPermits`) and a zset
/// permit id -> expiry (epoch ms, from the client's clock). Expired permits
/// are removed and given back (and announced) first; then, if enough are
/// free, the counter goes down and the ids are added. Granted: OK; else the
/// earliest expiry as ":<ms>" (or nil if no permit expires).
/// KEYS[1] counter, KEYS[2] expiry zset, KEYS[3] channel; ARGV[1] permits
/// wanted, ARGV[2] expiry of the new permits, ARGV[3] now (ms), ARGV[4] the
/// no-expiry score, ARGV[5..] permit ids.
const SEM_ACQUIRE_SCRIPT: &str = r#"-- models Redisson's expirable-permit semaphore (not its code)
local want = tonumber(ARGV[1])
local expired = redis.call("zrangebyscore", KEYS[2], 0, ARGV[3], "limit", 0, want)
if #expired > 0 then
  redis.call("zrem", KEYS[2], unpack(expired))
  local back = redis.call("incrby", KEYS[1], #expired)
  if back > 0 then
    redis.call("publish", KEYS[3], back)
  end
end
local free = redis.call("get", KEYS[1])
if free and tonumber(free) >= want then
  redis.call("decrby", KEYS[1], want)
  for i = 5, #ARGV do
    redis.call("zadd", KEYS[2], ARGV[2], ARGV[i])
  end
  local ttl = redis.call("pttl", KEYS[1])
  if ttl > 0 then
    redis.call("pexpire", KEYS[2], ttl)
  end
  return redis.status_reply("OK")
end
local first = redis.call("zrange", KEYS[2], 0, 0, "withscores")
if first[1] and first[2] ~= ARGV[4] then
  return ":" .. first[2]
end
return nil"#;
/// Permit release modelled on Redisson's RedissonPermitExpirableSemaphore
/// tryRelease (same work, not Redisson's code): 1 if the permit was removed
/// before its expiry, 0 if it was not held or had expired; a removed permit
/// goes back to the counter and the new count is published.
/// KEYS[1] counter, KEYS[2] channel, KEYS[3] expiry zset; ARGV[1] permit id,
/// ARGV[2] permits (1), ARGV[3] now (ms).
const SEM_RELEASE_SCRIPT: &str = r#"-- models Redisson's expirable-permit release (not its code)
local expiry = redis.call("zscore", KEYS[3], ARGV[1])
if redis.call("zrem", KEYS[3], ARGV[1]) ~= 1 then
  return 0
end
local free = redis.call("incrby", KEYS[1], ARGV[2])
redis.call("publish", KEYS[2], free)
if tonumber(expiry) <= tonumber(ARGV[3]) then
  return 0
end
return 1"#;
/// Unlock message published by the reentrant unlock and the pub/sub release.
const UNLOCK_MESSAGE: &str = "0";
/// Untimed setup (holding locks before a release/extend/re-enter phase) batch size.
const SETUP_BATCH: usize = 512;
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
const IO_TIMEOUT: Duration = Duration::from_secs(20);
/// Bound on waiting for a node that refuses grants right after start.
const QUARANTINE_WAIT: Duration = Duration::from_secs(90);

type Res<T> = Result<T, String>;

const USAGE: &str =
    "usage: bench [--port P (default: a private server of its own)] [--host 127.0.0.1] [--runs 5 (<= 50)] \
[--threads 4 (<= 64)] [--depth 64 (2..=10000)] [--ops 256000 (pipelined ops per phase, <= 1e7)] \
[--ops-single 32000 (unpipelined ops per phase, <= 1e6)] \
[--handoffs 200 (hand-offs per method in all runs together, <= 10000; 0 = no hand-off phase)] \
[--phases acquire,release,extend,cycle,reentrant,read,semaphore (throughput phases, comma-separated; \
also reenter; all = every one)] \
[--reenter no|yes (also the re-enter+exit phase on a held reentrant lock; ~50 s more)]";

// ---------------------------------------------------------------- options

struct Opts {
    host: String,
    port: u16,
    runs: usize,
    threads: usize,
    depth: usize,
    /// Ops per pipelined phase, all threads together.
    ops: usize,
    /// Ops per unpipelined phase, all threads together.
    ops_single: usize,
    /// Hand-offs per method, all runs together (0: no hand-off phase).
    handoffs: usize,
    /// The throughput phases chosen (`--phases`), before `--reenter`.
    phases: Vec<Phase>,
    /// Whether to run the re-enter+exit phase too.
    reenter: bool,
}

impl Opts {
    fn parse() -> Res<Opts> {
        let mut o = Opts {
            host: "127.0.0.1".into(),
            port: 0,
            runs: 5,
            threads: 4,
            depth: 64,
            ops: 256_000,
            ops_single: 32_000,
            handoffs: 200,
            phases: PHASES.into_iter().filter(|&p| p != Phase::Reenter).collect(),
            reenter: false,
        };
        let mut args = std::env::args().skip(1);
        while let Some(flag) = args.next() {
            if flag == "-h" || flag == "--help" {
                return Err(USAGE.into());
            }
            let value = args.next().ok_or_else(|| format!("{flag} needs a value\n{USAGE}"))?;
            let num = || -> Res<usize> {
                match value.parse::<usize>() {
                    Ok(n) if n > 0 => Ok(n),
                    _ => Err(format!("{flag}: expected a positive integer, got {value:?}")),
                }
            };
            match flag.as_str() {
                "--host" => o.host = value.clone(),
                "--port" => o.port = u16::try_from(num()?).map_err(|_| format!("--port {value}"))?,
                "--runs" => o.runs = num()?,
                "--threads" => o.threads = num()?,
                "--depth" => o.depth = num()?,
                "--ops" => o.ops = num()?,
                "--ops-single" => o.ops_single = num()?,
                "--handoffs" => {
                    o.handoffs = if value == "0" { 0 } else { num()? };
                }
                "--phases" => o.phases = Phase::parse_list(&value)?,
                "--reenter" => {
                    o.reenter = match value.as_str() {
                        "yes" => true,
                        "no" => false,
                        _ => return Err(format!("--reenter: expected yes or no, got {value:?}")),
                    }
                }
                _ => return Err(format!("unknown option {flag}\n{USAGE}")),
            }
        }
        if o.runs > 50
            || o.threads > 64
            || !(2..=10_000).contains(&o.depth)
            || o.ops > 10_000_000
            || o.ops_single > 1_000_000
            || o.handoffs > 10_000
        {
            return Err(format!("an option is out of range\n{USAGE}"));
        }
        Ok(o)
    }

    /// Ops each thread runs in a phase of `depth` (rounded to whole batches).
    fn ops_per_thread(&self, depth: usize) -> usize {
        let total = if depth == 1 { self.ops_single } else { self.ops };
        let per = total.div_ceil(self.threads);
        per.div_ceil(depth) * depth
    }

    /// The throughput phases to run, in the table's order.
    fn phases(&self) -> Vec<Phase> {
        PHASES
            .into_iter()
            .filter(|p| self.phases.contains(p) || (self.reenter && *p == Phase::Reenter))
            .collect()
    }

    /// Hand-offs per method in one run (0: no hand-off phase).
    fn handoffs_per_run(&self) -> usize {
        self.handoffs.div_ceil(self.runs)
    }

    /// Hand-offs per method in all runs (`--handoffs`, rounded up to whole runs).
    fn handoff_total(&self) -> usize {
        self.handoffs_per_run() * self.runs
    }
}

// ---------------------------------------------------------------- variants

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
enum Phase {
    Acquire,
    Release,
    Extend,
    /// Acquire then release of the same key.
    Cycle,
    /// Reentrant lock: first entry then exit of a free key (grant, then free).
    Reentrant,
    /// Reentrant lock already held once by the owner: one more entry, then
    /// one exit (the hold count goes 1 -> 2 -> 1; the lock stays held).
    Reenter,
    /// Read lock: one reader takes a free key and releases it.
    Read,
    /// Semaphore of PERMITS with expiring permits: one permit taken on a key
    /// with none held, then released.
    Semaphore,
}

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
enum Side {
    /// The module's LOCK.* commands.
    Ours,
    /// SET NX PX + Lua via EVALSHA (plain), hash-counter Lua via EVALSHA
    /// (reentrant), Redisson-modelled read-lock and semaphore Lua via EVALSHA.
    Baseline,
    /// The server's own compare commands (Valkey 9+): SET NX PX, SET IFEQ PX,
    /// DELIFEQ. Only for the phases [`Phase::has_native`] names; elsewhere
    /// the command builders treat it as the baseline, and it is never run.
    Native,
}

const PHASES: [Phase; 8] = [
    Phase::Acquire,
    Phase::Release,
    Phase::Extend,
    Phase::Cycle,
    Phase::Reentrant,
    Phase::Reenter,
    Phase::Read,
    Phase::Semaphore,
];

struct Shas {
    del: String,
    pexpire: String,
    hash_lock: String,
    hash_unlock: String,
    del_publish: String,
    read_lock: String,
    read_unlock: String,
    sem_acquire: String,
    sem_release: String,
}

/// The reply a command must give to count as done.
#[derive(Clone, Copy, Debug)]
enum Expect {
    /// A grant (fencing token or OK), a release or an extension (1).
    Success,
    /// Nil (the hash lock script's "granted").
    Nil,
    /// Exactly this integer.
    Int(i64),
}

impl Expect {
    fn met_by(self, reply: &Value) -> bool {
        match self {
            Expect::Success => is_success(reply),
            Expect::Nil => matches!(reply, Value::Nil),
            Expect::Int(n) => matches!(reply, Value::Int(m) if *m == n),
        }
    }
}

impl Phase {
    /// The phase's name in `--phases`.
    fn key(self) -> &'static str {
        match self {
            Phase::Acquire => "acquire",
            Phase::Release => "release",
            Phase::Extend => "extend",
            Phase::Cycle => "cycle",
            Phase::Reentrant => "reentrant",
            Phase::Reenter => "reenter",
            Phase::Read => "read",
            Phase::Semaphore => "semaphore",
        }
    }

    /// `--phases`: comma-separated keys, or `all`.
    fn parse_list(list: &str) -> Res<Vec<Phase>> {
        if list == "all" {
            return Ok(PHASES.to_vec());
        }
        let mut out = Vec::new();
        for word in list.split(',').map(str::trim) {
            let phase = PHASES.into_iter().find(|p| p.key() == word).ok_or_else(|| {
                let known: Vec<&str> = PHASES.iter().map(|p| p.key()).collect();
                format!("--phases: unknown phase {word:?} (known: {}, or all)", known.join(","))
            })?;
            if !out.contains(&phase) {
                out.push(phase);
            }
        }
        Ok(out)
    }

    fn name(self) -> &'static str {
        match self {
            Phase::Acquire => "acquire",
            Phase::Release => "release",
            Phase::Extend => "extend",
            Phase::Cycle => "acquire+release",
            Phase::Reentrant => "enter+exit",
            Phase::Reenter => "re-enter+exit (held)",
            Phase::Read => "read acquire+release",
            Phase::Semaphore => "permit acquire+release (3 permits)",
        }
    }

    /// The plain-lock phases the server's own commands can do without Lua.
    /// (Acquire is `SET NX PX` on both the baseline and the native side.)
    fn has_native(self) -> bool {
        matches!(self, Phase::Release | Phase::Extend | Phase::Cycle)
    }

    /// The sides to run: ours and the baseline, and the native commands
    /// where the server has them and the phase has a native form.
    fn sides(self, native: bool) -> Vec<Side> {
        let mut sides = vec![Side::Ours, Side::Baseline];
        if native && self.has_native() {
            sides.push(Side::Native);
        }
        sides
    }

    /// Target for the pipelined comparison (ours vs baseline, >1 = better).
    fn target(self) -> Option<f64> {
        match self {
            Phase::Acquire => Some(0.9),
            Phase::Release | Phase::Extend | Phase::Reentrant => Some(1.5),
            Phase::Cycle | Phase::Reenter | Phase::Read | Phase::Semaphore => None,
        }
    }

    /// What the timed part runs per op, as shown in the table.
    fn label(self, side: Side) -> &'static str {
        match (self, side) {
            (Phase::Acquire, Side::Ours) => "LOCK.ACQUIRE",
            (Phase::Acquire, Side::Baseline) => "SET NX PX",
            (Phase::Release, Side::Ours) => "LOCK.RELEASE",
            (Phase::Release, Side::Baseline) => "EVALSHA get+del",
            (Phase::Extend, Side::Ours) => "LOCK.EXTEND",
            (Phase::Extend, Side::Baseline) => "EVALSHA get+pexpire",
            (Phase::Cycle, Side::Ours) => "LOCK.ACQUIRE + LOCK.RELEASE",
            (Phase::Cycle, Side::Baseline) => "SET NX PX + EVALSHA get+del",
            (Phase::Reentrant | Phase::Reenter, Side::Ours) => "LOCK.ENTER + LOCK.EXIT",
            (Phase::Reentrant | Phase::Reenter, Side::Baseline) => "EVALSHA hash lock + unlock",
            (Phase::Read, Side::Ours) => "LOCK.SHARED + LOCK.RELEASE",
            (Phase::Read, Side::Baseline) => "EVALSHA read lock + unlock",
            (Phase::Semaphore, Side::Ours) => "LOCK.SEMAPHORE + LOCK.RELEASE",
            (Phase::Semaphore, Side::Baseline) => "EVALSHA permit acquire + release",
            (Phase::Release, Side::Native) => "DELIFEQ",
            (Phase::Extend, Side::Native) => "SET IFEQ PX",
            (Phase::Cycle, Side::Native) => "SET NX PX + DELIFEQ",
            (_, Side::Native) => "(no native form)",
        }
    }

    /// `INFO commandstats` entries (cmdstat_<name>) that the timed part calls,
    /// with how many calls each op makes. (Commands run inside a script are
    /// part of its EVALSHA's usec and are not counted again.)
    fn measured(self, side: Side) -> &'static [(&'static str, usize)] {
        match (self, side) {
            (Phase::Acquire, Side::Ours) => &[("lock.acquire", 1)],
            (Phase::Acquire, Side::Baseline) => &[("set", 1)],
            (Phase::Release, Side::Ours) => &[("lock.release", 1)],
            (Phase::Extend, Side::Ours) => &[("lock.extend", 1)],
            (Phase::Release | Phase::Extend, Side::Baseline) => &[("evalsha", 1)],
            (Phase::Cycle, Side::Ours) => &[("lock.acquire", 1), ("lock.release", 1)],
            (Phase::Cycle, Side::Baseline) => &[("set", 1), ("evalsha", 1)],
            (Phase::Reentrant | Phase::Reenter, Side::Ours) => &[("lock.enter", 1), ("lock.exit", 1)],
            (Phase::Reentrant | Phase::Reenter | Phase::Read | Phase::Semaphore, Side::Baseline) => {
                &[("evalsha", 2)]
            }
            (Phase::Read, Side::Ours) => &[("lock.shared", 1), ("lock.release", 1)],
            (Phase::Semaphore, Side::Ours) => &[("lock.semaphore", 1), ("lock.release", 1)],
            (Phase::Acquire | Phase::Extend, Side::Native) => &[("set", 1)],
            (Phase::Release, Side::Native) => &[("delifeq", 1)],
            (Phase::Cycle, Side::Native) => &[("set", 1), ("delifeq", 1)],
            (_, Side::Native) => &[],
        }
    }

    /// Commands per op.
    fn commands_per_op(self) -> usize {
        match self {
            Phase::Acquire | Phase::Release | Phase::Extend => 1,
            Phase::Cycle | Phase::Reentrant | Phase::Reenter | Phase::Read | Phase::Semaphore => 2,
        }
    }

    /// Untimed commands that make `key` ready for the timed part (a lock held
    /// by the op's owner; the Lua semaphore's counter of free permits, which
    /// Redisson sets once with `trySetPermits`), with their expected replies.
    fn setup_cmds(self, side: Side, key: &str, shas: &Shas) -> Vec<(Cmd, Expect)> {
        match (self, side) {
            (Phase::Release | Phase::Extend, _) => vec![(acquire_cmd(side, key), Expect::Success)],
            (Phase::Reenter, _) => vec![enter_cmd(side, key, shas)],
            (Phase::Semaphore, Side::Baseline | Side::Native) => {
                let mut c = Cmd::new();
                c.arg("SET").arg(key).arg(PERMITS);
                vec![(c, Expect::Success)]
            }
            (Phase::Acquire | Phase::Cycle | Phase::Reentrant | Phase::Read | Phase::Semaphore, _) => {
                Vec::new()
            }
        }
    }

    /// The commands of one timed op on `key`, with their expected replies.
    fn timed_cmds(self, side: Side, key: &str, shas: &Shas) -> Vec<(Cmd, Expect)> {
        match self {
            Phase::Acquire => vec![(acquire_cmd(side, key), Expect::Success)],
            Phase::Release => vec![(release_cmd(side, key, shas), Expect::Success)],
            Phase::Extend => vec![(extend_cmd(side, key, shas), Expect::Success)],
            Phase::Cycle => vec![
                (acquire_cmd(side, key), Expect::Success),
                (release_cmd(side, key, shas), Expect::Success),
            ],
            // Ours: EXIT answers the holds left (0 = freed); the unlock script
            // answers 1 when it freed the lock, 0 when holds remain.
            Phase::Reentrant => {
                let exit = if side == Side::Ours { Expect::Int(0) } else { Expect::Int(1) };
                vec![enter_cmd(side, key, shas), (exit_cmd(side, key, shas), exit)]
            }
            Phase::Reenter => {
                let exit = if side == Side::Ours { Expect::Int(1) } else { Expect::Int(0) };
                vec![enter_cmd(side, key, shas), (exit_cmd(side, key, shas), exit)]
            }
            // Ours: a fencing token, then 1. Lua: nil (granted), then 1
            // (freed: the reader was the only holder).
            Phase::Read => read_cycle_cmds(side, key, shas),
            // Ours: a fencing token, then 1. Lua: OK, then 1 (released
            // before its expiry).
            Phase::Semaphore => permit_cycle_cmds(side, key, shas),
        }
    }
}

fn acquire_cmd(side: Side, key: &str) -> Cmd {
    let mut c = Cmd::new();
    match side {
        Side::Ours => c.arg("LOCK.ACQUIRE").arg(key).arg(TOKEN).arg(TTL_MS),
        Side::Baseline | Side::Native => c.arg("SET").arg(key).arg(TOKEN).arg("NX").arg("PX").arg(TTL_MS),
    };
    c
}

fn release_cmd(side: Side, key: &str, shas: &Shas) -> Cmd {
    let mut c = Cmd::new();
    match side {
        Side::Ours => c.arg("LOCK.RELEASE").arg(key).arg(TOKEN),
        Side::Baseline => c.arg("EVALSHA").arg(&shas.del).arg(1).arg(key).arg(TOKEN),
        Side::Native => c.arg("DELIFEQ").arg(key).arg(TOKEN),
    };
    c
}

fn extend_cmd(side: Side, key: &str, shas: &Shas) -> Cmd {
    let mut c = Cmd::new();
    match side {
        Side::Ours => c.arg("LOCK.EXTEND").arg(key).arg(TOKEN).arg(TTL_MS),
        Side::Baseline => c.arg("EVALSHA").arg(&shas.pexpire).arg(1).arg(key).arg(TOKEN).arg(TTL_MS),
        Side::Native => c.arg("SET").arg(key).arg(TOKEN).arg("IFEQ").arg(TOKEN).arg("PX").arg(TTL_MS),
    };
    c
}

/// A reentrant entry by REENTRANT_OWNER, with the reply that means granted.
fn enter_cmd(side: Side, key: &str, shas: &Shas) -> (Cmd, Expect) {
    let mut c = Cmd::new();
    match side {
        Side::Ours => {
            c.arg("LOCK.ENTER").arg(key).arg(REENTRANT_OWNER).arg(TTL_MS);
            (c, Expect::Success)
        }
        Side::Baseline | Side::Native => {
            c.arg("EVALSHA").arg(&shas.hash_lock).arg(1).arg(key).arg(TTL_MS).arg(REENTRANT_OWNER);
            (c, Expect::Nil)
        }
    }
}

/// A reentrant exit by REENTRANT_OWNER (the unlock script also gets the
/// lock's channel, as Redisson passes it).
fn exit_cmd(side: Side, key: &str, shas: &Shas) -> Cmd {
    let mut c = Cmd::new();
    match side {
        Side::Ours => c.arg("LOCK.EXIT").arg(key).arg(REENTRANT_OWNER),
        Side::Baseline | Side::Native => c
            .arg("EVALSHA")
            .arg(&shas.hash_unlock)
            .arg(2)
            .arg(key)
            .arg(channel(key))
            .arg(UNLOCK_MESSAGE)
            .arg(TTL_MS)
            .arg(REENTRANT_OWNER),
    };
    c
}

/// A read lock taken and released by READER.
fn read_cycle_cmds(side: Side, key: &str, shas: &Shas) -> Vec<(Cmd, Expect)> {
    let (mut lock, mut unlock) = (Cmd::new(), Cmd::new());
    match side {
        Side::Ours => {
            lock.arg("LOCK.SHARED").arg(key).arg(READER).arg(TTL_MS);
            unlock.arg("LOCK.RELEASE").arg(key).arg(READER);
            vec![(lock, Expect::Success), (unlock, Expect::Int(1))]
        }
        Side::Baseline | Side::Native => {
            // Redisson's names: the lock's name in braces, so that all its
            // keys share a cluster slot.
            let prefix = format!("{{{key}}}");
            let timeouts = format!("{prefix}:{READER}:rwlock_timeout");
            lock.arg("EVALSHA")
                .arg(&shas.read_lock)
                .arg(2)
                .arg(key)
                .arg(&timeouts)
                .arg(TTL_MS)
                .arg(READER)
                .arg(READER_AS_WRITER);
            unlock
                .arg("EVALSHA")
                .arg(&shas.read_unlock)
                .arg(4)
                .arg(key)
                .arg(format!("redisson_rwlock:{prefix}"))
                .arg(&timeouts)
                .arg(&prefix)
                .arg(UNLOCK_MESSAGE)
                .arg(READER);
            vec![(lock, Expect::Nil), (unlock, Expect::Int(1))]
        }
    }
}

/// One permit of a PERMITS semaphore taken and released as PERMIT_ID.
fn permit_cycle_cmds(side: Side, key: &str, shas: &Shas) -> Vec<(Cmd, Expect)> {
    let (mut take, mut give) = (Cmd::new(), Cmd::new());
    match side {
        Side::Ours => {
            take.arg("LOCK.SEMAPHORE").arg(key).arg(PERMIT_ID).arg(PERMITS).arg(TTL_MS);
            give.arg("LOCK.RELEASE").arg(key).arg(PERMIT_ID);
            vec![(take, Expect::Success), (give, Expect::Int(1))]
        }
        Side::Baseline | Side::Native => {
            // Redisson passes the client's clock: the permit's expiry and
            // "now". The commands are built before the timed part starts,
            // seconds at most before they run, well within the lease.
            let now = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_millis());
            let lease: u128 = TTL_MS.parse().unwrap_or(30_000);
            let (zset, chan) = (format!("{{{key}}}:timeout"), format!("redisson_sc:{{{key}}}"));
            take.arg("EVALSHA")
                .arg(&shas.sem_acquire)
                .arg(3)
                .arg(key)
                .arg(&zset)
                .arg(&chan)
                .arg(1)
                .arg((now + lease).to_string())
                .arg(now.to_string())
                .arg(NO_EXPIRY_SCORE)
                .arg(PERMIT_ID);
            give.arg("EVALSHA")
                .arg(&shas.sem_release)
                .arg(3)
                .arg(key)
                .arg(&chan)
                .arg(&zset)
                .arg(PERMIT_ID)
                .arg(1)
                .arg(now.to_string());
            vec![(take, Expect::Success), (give, Expect::Int(1))]
        }
    }
}

/// The pub/sub channel of a lock key for the client-side recipes (a hash tag,
/// so that it would live in the key's slot, as Redisson names it).
fn channel(key: &str) -> String {
    format!("lock_channel:{{{key}}}")
}

/// A timed call did what it was for: a grant (fencing token or OK), a release
/// or an extension (1). Nil, 0 and errors are failures.
fn is_success(reply: &Value) -> bool {
    matches!(reply, Value::Okay) || matches!(reply, Value::Int(n) if *n >= 1)
}

// ---------------------------------------------------------------- one phase

/// Commands packed into one request (one round trip), with the replies they
/// must give.
struct Batch {
    bytes: Vec<u8>,
    expect: Vec<Expect>,
}

/// Packs ops into batches of `depth` ops; with depth 1 every command is its
/// own request (so a two-command op is two round trips).
fn pack(ops: Vec<Vec<(Cmd, Expect)>>, depth: usize) -> Vec<Batch> {
    let mut batches = Vec::new();
    if depth == 1 {
        for (cmd, expect) in ops.into_iter().flatten() {
            batches.push(Batch { bytes: cmd.get_packed_command(), expect: vec![expect] });
        }
        return batches;
    }
    for chunk in ops.chunks(depth) {
        let mut p = redis::pipe();
        let mut expect = Vec::new();
        for (cmd, e) in chunk.iter().flatten() {
            p.add_command(cmd.clone());
            expect.push(*e);
        }
        batches.push(Batch { bytes: p.get_packed_pipeline(), expect });
    }
    batches
}

/// Sends one batch; returns how many replies were as expected.
fn send(con: &mut Connection, batch: &Batch) -> Res<usize> {
    let replies = if batch.expect.len() == 1 {
        vec![con.req_packed_command(&batch.bytes).map_err(|e| e.to_string())?]
    } else {
        con.req_packed_commands(&batch.bytes, 0, batch.expect.len()).map_err(|e| e.to_string())?
    };
    Ok(replies.iter().zip(&batch.expect).filter(|(r, e)| e.met_by(r)).count())
}

struct ThreadResult {
    start: Instant,
    end: Instant,
    latencies_ns: Vec<u64>,
    successes: usize,
}

#[derive(Clone, Copy, Debug)]
struct Sample {
    ops_per_sec: f64,
    p50_us: f64,
    p99_us: f64,
    usec_per_op: f64,
}

fn key(thread: usize, i: usize) -> String {
    format!("bench:{thread}:{i}")
}

/// Setup (untimed) + timed part of one client thread. Always reaches both
/// barriers, so that one failing thread cannot hang the others.
fn client_thread(
    con: &mut Connection,
    setup: Vec<Batch>,
    timed: Vec<Batch>,
    ready: &Barrier,
    go: &Barrier,
) -> Res<ThreadResult> {
    let mut setup_result = Ok(());
    for batch in &setup {
        match send(con, batch) {
            Ok(n) if n == batch.expect.len() => {}
            Ok(n) => {
                setup_result = Err(format!("setup: {n} of {} locks granted", batch.expect.len()));
                break;
            }
            Err(e) => {
                setup_result = Err(format!("setup: {e}"));
                break;
            }
        }
    }
    ready.wait(); // main thread runs CONFIG RESETSTAT now
    go.wait();
    setup_result?;
    let mut latencies_ns = Vec::with_capacity(timed.len());
    let mut successes = 0;
    let start = Instant::now();
    for batch in &timed {
        let t = Instant::now();
        successes += send(con, batch)?;
        latencies_ns.push(t.elapsed().as_nanos() as u64);
    }
    let end = Instant::now();
    Ok(ThreadResult { start, end, latencies_ns, successes })
}

/// Runs one variant once: fresh keyspace, optional held locks, timed ops.
fn run_phase(
    ctl: &mut Connection,
    conns: &mut [Connection],
    shas: &Shas,
    opts: &Opts,
    phase: Phase,
    side: Side,
    depth: usize,
) -> Res<Sample> {
    redis::cmd("FLUSHALL").arg("SYNC").query::<()>(ctl).map_err(|e| format!("FLUSHALL: {e}"))?;
    let per_thread = opts.ops_per_thread(depth);
    let threads = conns.len();
    let ready = Barrier::new(threads + 1);
    let go = Barrier::new(threads + 1);

    let results: Vec<Res<ThreadResult>> = std::thread::scope(|s| {
        let handles: Vec<_> = conns
            .iter_mut()
            .enumerate()
            .map(|(t, con)| {
                let (ready, go) = (&ready, &go);
                // Packing happens here, before the clock starts.
                let keys: Vec<String> = (0..per_thread).map(|i| key(t, i)).collect();
                let setup = pack(keys.iter().map(|k| phase.setup_cmds(side, k, shas)).collect(), SETUP_BATCH);
                let timed = pack(keys.iter().map(|k| phase.timed_cmds(side, k, shas)).collect(), depth);
                s.spawn(move || client_thread(con, setup, timed, ready, go))
            })
            .collect();
        ready.wait();
        let reset = redis::cmd("CONFIG").arg("RESETSTAT").query::<()>(ctl);
        go.wait();
        let mut out: Vec<Res<ThreadResult>> = handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err("client thread panicked".into())))
            .collect();
        if let Err(e) = reset {
            out.push(Err(format!("CONFIG RESETSTAT: {e}")));
        }
        out
    });
    let results: Vec<ThreadResult> = results.into_iter().collect::<Res<_>>()?;

    let ops = per_thread * threads;
    let commands_per_op = phase.commands_per_op();
    let successes: usize = results.iter().map(|r| r.successes).sum();
    if successes != ops * commands_per_op {
        return Err(format!(
            "{} {:?} depth {depth}: only {successes} of {} calls succeeded",
            phase.name(),
            side,
            ops * commands_per_op
        ));
    }
    let start = results.iter().map(|r| r.start).min().ok_or("no threads")?;
    let end = results.iter().map(|r| r.end).max().ok_or("no threads")?;
    let mut lat: Vec<u64> = results.into_iter().flat_map(|r| r.latencies_ns).collect();
    lat.sort_unstable();

    let stats = command_stats(ctl)?;
    let mut usec = 0.0;
    for &(name, per_op) in phase.measured(side) {
        let (calls, u) =
            stats.get(name).copied().ok_or_else(|| format!("INFO commandstats has no cmdstat_{name}"))?;
        if calls != (ops * per_op) as u64 {
            return Err(format!("cmdstat_{name}: {calls} calls, expected {}", ops * per_op));
        }
        usec += u;
    }
    Ok(Sample {
        ops_per_sec: ops as f64 / (end - start).as_secs_f64(),
        p50_us: percentile(&lat, 50.0) / 1000.0,
        p99_us: percentile(&lat, 99.0) / 1000.0,
        usec_per_op: usec / ops as f64,
    })
}

/// `INFO commandstats` as name -> (calls, total usec).
fn command_stats(ctl: &mut Connection) -> Res<HashMap<String, (u64, f64)>> {
    let text: String =
        redis::cmd("INFO").arg("commandstats").query(ctl).map_err(|e| format!("INFO commandstats: {e}"))?;
    let mut out = HashMap::new();
    for line in text.lines() {
        let Some((name, fields)) = line.trim().strip_prefix("cmdstat_").and_then(|l| l.split_once(':'))
        else {
            continue;
        };
        let field = |f: &str| {
            fields.split(',').find_map(|kv| kv.strip_prefix(f)?.strip_prefix('=')?.parse::<f64>().ok())
        };
        if let (Some(calls), Some(usec)) = (field("calls"), field("usec")) {
            out.insert(name.to_string(), (calls as u64, usec));
        }
    }
    Ok(out)
}

/// Nearest-rank percentile of sorted samples.
fn percentile(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1] as f64
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    match n {
        0 => f64::NAN,
        _ if n % 2 == 1 => v[n / 2],
        _ => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

// ---------------------------------------------------------------- server

fn connect(opts: &Opts) -> Res<Connection> {
    let url = format!("redis://{}:{}/", opts.host, opts.port);
    let client = redis::Client::open(url.as_str()).map_err(|e| e.to_string())?;
    let con =
        client.get_connection_with_timeout(CONNECT_TIMEOUT).map_err(|e| format!("connect to {url}: {e}"))?;
    con.set_read_timeout(Some(IO_TIMEOUT)).map_err(|e| e.to_string())?;
    con.set_write_timeout(Some(IO_TIMEOUT)).map_err(|e| e.to_string())?;
    Ok(con)
}

fn info_field(ctl: &mut Connection, section: &str, field: &str) -> Res<String> {
    let text: String = redis::cmd("INFO").arg(section).query(ctl).map_err(|e| e.to_string())?;
    text.lines()
        .find_map(|l| l.trim().strip_prefix(field)?.strip_prefix(':').map(str::to_string))
        .ok_or_else(|| format!("INFO {section} has no {field}"))
}

/// Whether the server knows `name` (`COMMAND INFO` answers nil for an
/// unknown command).
fn has_command(ctl: &mut Connection, name: &str) -> Res<bool> {
    let reply: Value = query(ctl, redis::cmd("COMMAND").arg("INFO").arg(name))?;
    Ok(matches!(reply, Value::Array(items) if items.first().is_some_and(|v| !matches!(v, Value::Nil))))
}

/// The module's version from MODULE LIST, if it says.
fn module_version(ctl: &mut Connection) -> Res<String> {
    let list: Vec<HashMap<String, Value>> =
        redis::cmd("MODULE").arg("LIST").query(ctl).map_err(|e| format!("MODULE LIST: {e}"))?;
    let lock = list
        .iter()
        .find(|m| matches!(m.get("name"), Some(Value::BulkString(n)) if n == b"lock"))
        .ok_or("the lock module is not loaded on this server")?;
    Ok(match lock.get("ver") {
        Some(Value::Int(v)) => v.to_string(),
        _ => "?".into(),
    })
}

/// A node may refuse grants for a while after start (restart quarantine):
/// turn that off if the config exists, else wait for it, bounded.
fn wait_until_granting(ctl: &mut Connection) -> Res<()> {
    // Only on this private server; an unknown config (older module) is fine.
    let off = query::<()>(ctl, redis::cmd("CONFIG").arg("SET").arg("lock.quarantine-ms").arg(0));
    if off.is_ok() {
        eprintln!("bench: lock.quarantine-ms set to 0 on the benchmark server");
    }
    // Phases start from a FLUSHALL of held locks: no quarantine of the
    // flushed database on this throwaway server.
    let _ = query::<()>(ctl, redis::cmd("CONFIG").arg("SET").arg("lock.removal-quarantine").arg("no"));
    let deadline = Instant::now() + QUARANTINE_WAIT;
    let mut said = false;
    loop {
        let r: redis::RedisResult<Value> = acquire_cmd(Side::Ours, "bench:probe").query(ctl);
        match r {
            Ok(v) if is_success(&v) => break,
            Err(e) if e.code() == Some("QUARANTINE") && Instant::now() < deadline => {
                if !said {
                    eprintln!("bench: node in quarantine ({e}); waiting");
                    said = true;
                }
                std::thread::sleep(Duration::from_millis(500));
            }
            other => return Err(format!("probe LOCK.ACQUIRE failed: {other:?}")),
        }
    }
    redis::cmd("DEL").arg("bench:probe").query::<()>(ctl).map_err(|e| e.to_string())
}

/// Runs one command on the control connection.
fn query<T: redis::FromRedisValue>(ctl: &mut Connection, cmd: &Cmd) -> Res<T> {
    cmd.query(ctl).map_err(|e| e.to_string())
}

/// MEMORY USAGE of one held lock with a 36-byte UUID-like token, taken with
/// LOCK.ACQUIRE and with SET NX PX (keys of equal length).
fn memory_usage(ctl: &mut Connection) -> Res<String> {
    let token = "3f2b8c1e-9d4a-4e7b-a6c5-0b1d2e3f4a5b";
    let (ours, base) = ("lock:mem:ours", "lock:mem:base");
    query::<()>(ctl, redis::cmd("FLUSHALL").arg("SYNC"))?;
    let granted: Value = query(ctl, redis::cmd("LOCK.ACQUIRE").arg(ours).arg(token).arg(TTL_MS))?;
    let set: Value = query(ctl, redis::cmd("SET").arg(base).arg(token).arg("NX").arg("PX").arg(TTL_MS))?;
    if !is_success(&granted) || !is_success(&set) {
        return Err(format!("memory probe not granted: {granted:?} / {set:?}"));
    }
    let mut rows = String::new();
    let mut usage = [0i64; 2];
    for (slot, (what, k)) in usage
        .iter_mut()
        .zip([("`LOCK.ACQUIRE k <token> 30000`", ours), ("`SET k <token> NX PX 30000`", base)])
    {
        *slot = query(ctl, redis::cmd("MEMORY").arg("USAGE").arg(k).arg("SAMPLES").arg(0))?;
        let len: i64 = query(ctl, redis::cmd("STRLEN").arg(k))?;
        let enc: String = query(ctl, redis::cmd("OBJECT").arg("ENCODING").arg(k))?;
        let _ = writeln!(rows, "| {what} | {} | {len} | {enc} |", *slot);
    }
    query::<()>(ctl, redis::cmd("FLUSHALL").arg("SYNC"))?;
    let [m_ours, m_base] = usage;
    Ok(format!(
        "| one held lock ({}-byte key, {}-byte token) | MEMORY USAGE bytes | value bytes | encoding |\n\
         |---|---:|---:|---|\n{rows}\n\
         A held lock costs {} bytes more than SET NX PX ({:.2}x).\n",
        ours.len(),
        token.len(),
        m_ours - m_base,
        m_ours as f64 / m_base as f64
    ))
}

// ---------------------------------------------------------------- hand-off

/// The holder's and the waiter's tokens in the hand-off phase.
const HOLDER: &str = "holder";
const WAITER: &str = "waiter";
/// The waiter's `WAIT` timeout (ms); it is released long before.
const WAIT_TIMEOUT_MS: &str = "5000";
/// The polling waiter's retry interval.
const POLL_INTERVAL: Duration = Duration::from_millis(50);
/// Bound on the waiter getting the lock after a release (pub/sub message
/// wait, polling), and on the main thread hearing from the waiter.
const HANDOFF_BOUND: Duration = Duration::from_secs(5);
/// Bound on the waiter being seen waiting before the release.
const READY_BOUND: Duration = Duration::from_secs(5);

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
enum Handoff {
    /// `LOCK.ACQUIRE ... WAIT`: blocked in the server, granted by the release.
    Wait,
    /// Redisson-style: SUBSCRIBE to the lock's channel, retry SET NX PX on
    /// every message; the holder's release publishes.
    PubSub,
    /// Retry SET NX PX every POLL_INTERVAL.
    Poll,
}

const HANDOFFS: [Handoff; 3] = [Handoff::Wait, Handoff::PubSub, Handoff::Poll];

impl Handoff {
    fn name(self) -> &'static str {
        match self {
            Handoff::Wait => "module WAIT",
            Handoff::PubSub => "pub/sub wake-up",
            Handoff::Poll => "polling 50 ms",
        }
    }

    fn waiter_label(self) -> &'static str {
        match self {
            Handoff::Wait => "LOCK.ACQUIRE k w 30000 WAIT 5000",
            Handoff::PubSub => "SUBSCRIBE ch; SET k w NX PX 30000, again on each message",
            Handoff::Poll => "SET k w NX PX 30000 every 50 ms",
        }
    }

    fn release_label(self) -> &'static str {
        match self {
            Handoff::Wait => "LOCK.RELEASE k h",
            Handoff::PubSub => "EVALSHA get+del+publish",
            Handoff::Poll => "EVALSHA get+del",
        }
    }

    /// The lock protocol's commands in `INFO commandstats` (not the
    /// benchmark's own LOCK.INFO polls; redis-rs' PUNSUBSCRIBE on leaving
    /// pub/sub mode is not counted either).
    fn measured(self) -> &'static [&'static str] {
        match self {
            Handoff::Wait => &["lock.acquire", "lock.release"],
            Handoff::PubSub => &["set", "evalsha", "subscribe", "unsubscribe"],
            Handoff::Poll => &["set", "evalsha"],
        }
    }
}

/// What the waiter thread reports for one hand-off.
#[derive(Debug)]
enum Event {
    /// It tried, found the lock held and is now waiting (pub/sub, polling).
    Ready,
    /// It got the lock; the instant its successful reply arrived.
    Granted(Instant),
}

/// One method's hand-offs in one run.
struct HandoffSample {
    latencies_ns: Vec<u64>,
    calls_per_handoff: f64,
    usec_per_handoff: f64,
}

/// `SET key WAITER NX PX ttl`: true if granted, false if held.
fn try_set(con: &mut Connection, key: &str) -> Res<bool> {
    let reply: Value = redis::cmd("SET")
        .arg(key)
        .arg(WAITER)
        .arg("NX")
        .arg("PX")
        .arg(TTL_MS)
        .query(con)
        .map_err(|e| format!("waiter SET: {e}"))?;
    match reply {
        Value::Okay => Ok(true),
        Value::Nil => Ok(false),
        other => Err(format!("waiter SET answered {other:?}")),
    }
}

fn take_wait(con: &mut Connection, key: &str) -> Res<Instant> {
    let reply: Value = redis::cmd("LOCK.ACQUIRE")
        .arg(key)
        .arg(WAITER)
        .arg(TTL_MS)
        .arg("WAIT")
        .arg(WAIT_TIMEOUT_MS)
        .query(con)
        .map_err(|e| format!("waiter LOCK.ACQUIRE WAIT: {e}"))?;
    let at = Instant::now();
    match reply {
        Value::Int(n) if n >= 1 => Ok(at),
        other => Err(format!("waiter LOCK.ACQUIRE WAIT answered {other:?}")),
    }
}

/// Redisson's loop: try; subscribe; try again; wait for a message, try again.
fn take_pubsub(
    con: &mut Connection,
    sub: &mut Connection,
    key: &str,
    events: &Sender<Res<Event>>,
) -> Res<Instant> {
    if try_set(con, key)? {
        return Err("waiter: the lock was free before the release".into());
    }
    let chan = channel(key);
    let mut ps = sub.as_pubsub();
    ps.set_read_timeout(Some(HANDOFF_BOUND)).map_err(|e| e.to_string())?;
    ps.subscribe(&chan).map_err(|e| format!("waiter SUBSCRIBE: {e}"))?;
    if try_set(con, key)? {
        return Err("waiter: the lock was free before the release".into());
    }
    events.send(Ok(Event::Ready)).map_err(|_| "waiter: main thread gone")?;
    let deadline = Instant::now() + HANDOFF_BOUND;
    loop {
        let msg = ps.get_message().map_err(|e| format!("waiter: no release message: {e}"))?;
        if msg.get_channel_name() == chan && try_set(con, key)? {
            // Leaving pub/sub mode (UNSUBSCRIBE) happens after the instant.
            return Ok(Instant::now());
        }
        if Instant::now() >= deadline {
            return Err("waiter: messages, but no grant".into());
        }
    }
}

fn take_poll(con: &mut Connection, key: &str, events: &Sender<Res<Event>>) -> Res<Instant> {
    if try_set(con, key)? {
        return Err("waiter: the lock was free before the release".into());
    }
    events.send(Ok(Event::Ready)).map_err(|_| "waiter: main thread gone")?;
    let deadline = Instant::now() + HANDOFF_BOUND;
    loop {
        std::thread::sleep(POLL_INTERVAL);
        if try_set(con, key)? {
            return Ok(Instant::now());
        }
        if Instant::now() >= deadline {
            return Err("waiter: polled without a grant".into());
        }
    }
}

/// The waiter thread: one job (method, key) at a time until the job channel
/// closes or a job fails.
fn waiter_loop(
    con: &mut Connection,
    sub: &mut Connection,
    jobs: Receiver<(Handoff, String)>,
    events: Sender<Res<Event>>,
) {
    while let Ok((method, key)) = jobs.recv() {
        let result = match method {
            Handoff::Wait => take_wait(con, &key),
            Handoff::PubSub => take_pubsub(con, sub, &key, &events),
            Handoff::Poll => take_poll(con, &key, &events),
        };
        let failed = result.is_err();
        if events.send(result.map(Event::Granted)).is_err() || failed {
            return;
        }
    }
}

/// The next report of the waiter thread, bounded.
fn next_event(events: &Receiver<Res<Event>>, bound: Duration, what: &str) -> Res<Event> {
    match events.recv_timeout(bound) {
        Ok(r) => r,
        Err(RecvTimeoutError::Timeout) => Err(format!("the waiter did not report {what} within {bound:?}")),
        Err(RecvTimeoutError::Disconnected) => Err("the waiter thread is gone".into()),
    }
}

/// The `waiters` field of a LOCK.INFO reply (0 if the lock is free).
fn info_waiters(reply: &Value) -> Res<i64> {
    match reply {
        Value::Nil => Ok(0),
        Value::Array(items) => items
            .chunks(2)
            .find_map(|pair| match pair {
                [Value::BulkString(name), Value::Int(n)] if name == b"waiters" => Some(*n),
                _ => None,
            })
            .ok_or_else(|| format!("LOCK.INFO has no waiters field: {reply:?}")),
        other => Err(format!("LOCK.INFO answered {other:?}")),
    }
}

/// Polls LOCK.INFO until the waiter is queued on `key` (blocked in the
/// server), bounded; fails if the waiter answered already.
fn wait_until_queued(ctl: &mut Connection, key: &str, events: &Receiver<Res<Event>>) -> Res<()> {
    let deadline = Instant::now() + READY_BOUND;
    loop {
        let info: Value = query(ctl, redis::cmd("LOCK.INFO").arg(key))?;
        if info_waiters(&info)? >= 1 {
            return Ok(());
        }
        if let Ok(early) = events.try_recv() {
            return Err(format!("the waiter answered before the release: {early:?}"));
        }
        if Instant::now() >= deadline {
            return Err(format!("the waiter was not queued on {key} within {READY_BOUND:?}"));
        }
        std::thread::sleep(Duration::from_micros(100));
    }
}

/// A small PRNG (splitmix64) for the polling waiter's release phase.
struct Rng(u64);

impl Rng {
    fn seeded() -> Rng {
        let t = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map_or(1, |d| d.as_nanos() as u64);
        Rng(t)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        (z ^ (z >> 31)) % n.max(1)
    }
}

/// The main thread's ends of the channels to and from the waiter thread.
struct Link {
    jobs: Sender<(Handoff, String)>,
    events: Receiver<Res<Event>>,
}

/// `n` hand-offs of one method, one at a time: the holder (this thread, on
/// `ctl`) takes the lock, the waiter thread tries and waits, the holder
/// releases; latency = the waiter's grant instant - the instant before the
/// release was sent.
fn run_handoffs(
    ctl: &mut Connection,
    link: &Link,
    shas: &Shas,
    method: Handoff,
    n: usize,
    run: usize,
    rng: &mut Rng,
) -> Res<HandoffSample> {
    let (jobs, events) = (&link.jobs, &link.events);
    query::<()>(ctl, redis::cmd("FLUSHALL").arg("SYNC"))?;
    query::<()>(ctl, redis::cmd("CONFIG").arg("RESETSTAT"))?;
    let mut latencies_ns = Vec::with_capacity(n);
    for i in 0..n {
        let key = format!("handoff:{method:?}:{run}:{i}");
        let held: Value = match method {
            Handoff::Wait => query(ctl, redis::cmd("LOCK.ACQUIRE").arg(&key).arg(HOLDER).arg(TTL_MS))?,
            Handoff::PubSub | Handoff::Poll => {
                query(ctl, redis::cmd("SET").arg(&key).arg(HOLDER).arg("NX").arg("PX").arg(TTL_MS))?
            }
        };
        if !is_success(&held) {
            return Err(format!("holder not granted {key}: {held:?}"));
        }
        jobs.send((method, key.clone())).map_err(|_| "the waiter thread is gone")?;
        match method {
            Handoff::Wait => wait_until_queued(ctl, &key, events)?,
            Handoff::PubSub | Handoff::Poll => match next_event(events, READY_BOUND, "waiting")? {
                Event::Ready => {}
                other => return Err(format!("the waiter reported {other:?} before the release")),
            },
        }
        if method == Handoff::Poll {
            // Release at a uniformly random point of the waiter's poll period.
            let period_us = POLL_INTERVAL.as_micros() as u64;
            std::thread::sleep(Duration::from_micros(rng.below(period_us)));
        }
        let sent = Instant::now();
        let released: Value = match method {
            Handoff::Wait => query(ctl, redis::cmd("LOCK.RELEASE").arg(&key).arg(HOLDER))?,
            Handoff::PubSub => query(
                ctl,
                redis::cmd("EVALSHA")
                    .arg(&shas.del_publish)
                    .arg(2)
                    .arg(&key)
                    .arg(channel(&key))
                    .arg(HOLDER)
                    .arg(UNLOCK_MESSAGE),
            )?,
            Handoff::Poll => query(ctl, redis::cmd("EVALSHA").arg(&shas.del).arg(1).arg(&key).arg(HOLDER))?,
        };
        if !matches!(released, Value::Int(1)) {
            return Err(format!("holder's release of {key} answered {released:?}"));
        }
        let granted = match next_event(events, HANDOFF_BOUND * 2, "a grant")? {
            Event::Granted(at) => at,
            other => return Err(format!("the waiter reported {other:?} after the release")),
        };
        latencies_ns.push(granted.saturating_duration_since(sent).as_nanos() as u64);
    }

    let stats = command_stats(ctl)?;
    let (mut calls, mut usec) = (0u64, 0.0);
    for name in method.measured() {
        let (c, u) = stats.get(*name).copied().unwrap_or((0, 0.0));
        calls += c;
        usec += u;
    }
    if method == Handoff::Wait {
        // Exact: the holder's and the waiter's acquire, one release.
        let acquires = stats.get("lock.acquire").map_or(0, |s| s.0);
        let releases = stats.get("lock.release").map_or(0, |s| s.0);
        if acquires != 2 * n as u64 || releases != n as u64 {
            return Err(format!(
                "WAIT hand-offs: {acquires} LOCK.ACQUIRE / {releases} LOCK.RELEASE calls, expected {} / {n}",
                2 * n
            ));
        }
    }
    Ok(HandoffSample {
        latencies_ns,
        calls_per_handoff: calls as f64 / n as f64,
        usec_per_handoff: usec / n as f64,
    })
}

/// One run's hand-off phase: a waiter thread with its own two connections,
/// every method in `order`.
fn handoff_round(
    ctl: &mut Connection,
    waiter: &mut (Connection, Connection),
    shas: &Shas,
    order: &[Handoff],
    n: usize,
    run: usize,
    rng: &mut Rng,
) -> Res<Vec<(Handoff, HandoffSample)>> {
    let (con, sub) = (&mut waiter.0, &mut waiter.1);
    std::thread::scope(|s| {
        let (job_tx, job_rx) = mpsc::channel();
        let (event_tx, event_rx) = mpsc::channel();
        s.spawn(move || waiter_loop(con, sub, job_rx, event_tx));
        let link = Link { jobs: job_tx, events: event_rx };
        let out =
            order.iter().map(|&m| run_handoffs(ctl, &link, shas, m, n, run, rng).map(|r| (m, r))).collect();
        // Closing the job channel ends the waiter thread (after its current
        // job, which is bounded) before the scope returns.
        drop(link);
        out
    })
}

// ---------------------------------------------------------------- report

type Variant = (Phase, Side, usize);

fn fmt_ops(v: f64) -> String {
    if v >= 10_000.0 {
        format!("{:.0}k", v / 1000.0)
    } else {
        format!("{v:.0}")
    }
}

fn spread(samples: &[Sample], f: fn(&Sample) -> f64) -> (f64, f64, f64) {
    let v: Vec<f64> = samples.iter().map(f).collect();
    let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    (median(v), lo, hi)
}

fn report(opts: &Opts, depths: &[usize], results: &HashMap<Variant, Vec<Sample>>, native: bool) -> String {
    let phases = opts.phases();
    let mut s = String::new();
    let _ = writeln!(
        s,
        "| op | depth | commands | ops/s (median, min-max) | p50 us | p99 us | server us/op (median, min-max) |"
    );
    let _ = writeln!(s, "|---|---:|---|---:|---:|---:|---:|");
    for &phase in &phases {
        for &depth in depths {
            for side in phase.sides(native) {
                let v = &results[&(phase, side, depth)];
                let (ops, ops_lo, ops_hi) = spread(v, |x| x.ops_per_sec);
                let (us, us_lo, us_hi) = spread(v, |x| x.usec_per_op);
                let _ = writeln!(
                    s,
                    "| {} | {} | {} | {} ({}-{}) | {:.0} | {:.0} | {:.2} ({:.2}-{:.2}) |",
                    phase.name(),
                    depth,
                    phase.label(side),
                    fmt_ops(ops),
                    fmt_ops(ops_lo),
                    fmt_ops(ops_hi),
                    median(v.iter().map(|x| x.p50_us).collect()),
                    median(v.iter().map(|x| x.p99_us).collect()),
                    us,
                    us_lo,
                    us_hi
                );
            }
        }
    }
    let _ = writeln!(
        s,
        "\nLatency: depth 1 = per request (a two-command op is 2 requests); depth {} = per pipeline batch \
         of {} ops ({} commands for a two-command op). Server us/op = INFO commandstats usec / ops \
         (for a two-command op: both commands together). Reentrant: enter+exit takes a free key and frees \
         it (hold count 0 -> 1 -> 0); re-enter+exit (`--reenter yes`) runs on a key the owner already \
         holds once (1 -> 2 -> 1). The hash lock / unlock scripts are Redisson's reentrant-lock logic (a hash \
         owner -> holds with PEXPIRE; the unlock publishes on the lock's channel when it frees, as the \
         module publishes on `__lock@0__:<key>`), written for this benchmark and called via EVALSHA.\n",
        opts.depth,
        opts.depth,
        2 * opts.depth
    );
    if phases.contains(&Phase::Read) || phases.contains(&Phase::Semaphore) {
        let _ = writeln!(
            s,
            "Read lock and semaphore: one holder takes a key no one holds, then releases it. The Lua side \
             models Redisson's scripts (same calls, keys and data structures; written for this benchmark, \
             not Redisson's code): the read lock is RedissonReadLock's hash (`mode` + a hold counter per \
             reader) plus a timeout key `{{lock}}:<reader>:rwlock_timeout:<n>` per hold, and the unlock \
             recomputes the lock's PEXPIRE from the remaining holds' timeout keys (none remain here, so it \
             deletes the lock and publishes); the semaphore is RedissonPermitExpirableSemaphore's counter \
             of free permits plus a zset permit id -> expiry (acquire: drop expired ids, check the counter, \
             DECRBY, ZADD; release: ZSCORE, ZREM, INCRBY, PUBLISH), {PERMITS} permits, the counter set \
             before the timed part (Redisson's `trySetPermits`, untimed) while the module creates the \
             semaphore on its first grant and deletes it on its last release, inside the timed calls.\n"
        );
    }

    let _ = writeln!(
        s,
        "| op | depth | ours vs baseline | ops/s ours/base | server cost base/ours | target (pipelined) |"
    );
    let _ = writeln!(s, "|---|---:|---|---:|---:|---|");
    for &phase in &phases {
        for &depth in depths {
            let med =
                |side, f: fn(&Sample) -> f64| median(results[&(phase, side, depth)].iter().map(f).collect());
            let ops_ratio = med(Side::Ours, |x| x.ops_per_sec) / med(Side::Baseline, |x| x.ops_per_sec);
            let cost_ratio = med(Side::Baseline, |x| x.usec_per_op) / med(Side::Ours, |x| x.usec_per_op);
            let verdict = match phase.target() {
                Some(t) if depth > 1 => {
                    let word = match (cost_ratio >= t, ops_ratio >= t) {
                        (true, true) => "met",
                        (true, false) => "met on server cost, not on ops/s",
                        (false, true) => "met on ops/s, NOT on server cost",
                        (false, false) => "NOT met",
                    };
                    format!(">= {t}x: {word}")
                }
                _ => "-".into(),
            };
            let _ = writeln!(
                s,
                "| {} | {} | {} vs {} | {:.2}x | {:.2}x | {} |",
                phase.name(),
                depth,
                phase.label(Side::Ours),
                phase.label(Side::Baseline),
                ops_ratio,
                cost_ratio,
                verdict
            );
            // Against what the server already has without Lua: what the
            // module's fencing, waiting and quarantine cost on top.
            if native && phase.has_native() {
                let _ = writeln!(
                    s,
                    "| {} | {} | {} vs {} (native) | {:.2}x | {:.2}x | - |",
                    phase.name(),
                    depth,
                    phase.label(Side::Ours),
                    phase.label(Side::Native),
                    med(Side::Ours, |x| x.ops_per_sec) / med(Side::Native, |x| x.ops_per_sec),
                    med(Side::Native, |x| x.usec_per_op) / med(Side::Ours, |x| x.usec_per_op),
                );
            }
        }
    }
    let _ = writeln!(s, "\nRatios > 1 mean the module is better.");
    s
}

/// Nanoseconds as microseconds: whole from 100 us, else one decimal.
fn fmt_us(ns: f64) -> String {
    let us = ns / 1000.0;
    if us >= 100.0 {
        format!("{us:.0}")
    } else {
        format!("{us:.1}")
    }
}

fn handoff_report(opts: &Opts, results: &HashMap<Handoff, Vec<HandoffSample>>) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "| method | waiter | holder frees with | hand-offs | p50 us | p99 us | max us | mean us | \
         p50 per run (min-max) | server calls / hand-off | server us / hand-off (median, min-max) |"
    );
    let _ = writeln!(s, "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    // Pooled latencies per method: (p50, p99, max, mean).
    // Per method: pooled p50, p99, max, mean; median calls and usec per hand-off.
    let mut pooled: HashMap<Handoff, [f64; 6]> = HashMap::new();
    for m in HANDOFFS {
        let runs = &results[&m];
        let mut lat: Vec<u64> = runs.iter().flat_map(|r| r.latencies_ns.iter().copied()).collect();
        lat.sort_unstable();
        let mean = lat.iter().map(|&x| x as f64).sum::<f64>() / lat.len().max(1) as f64;
        let (p50, p99, max) =
            (percentile(&lat, 50.0), percentile(&lat, 99.0), lat.last().map_or(f64::NAN, |&x| x as f64));
        let run_p50: Vec<f64> = runs
            .iter()
            .map(|r| {
                let mut v = r.latencies_ns.clone();
                v.sort_unstable();
                percentile(&v, 50.0)
            })
            .collect();
        let lo = run_p50.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = run_p50.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let calls = median(runs.iter().map(|r| r.calls_per_handoff).collect());
        let us: Vec<f64> = runs.iter().map(|r| r.usec_per_handoff).collect();
        let us_lo = us.iter().copied().fold(f64::INFINITY, f64::min);
        let us_hi = us.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let us = median(us);
        pooled.insert(m, [p50, p99, max, mean, calls, us]);
        let _ = writeln!(
            s,
            "| {} | `{}` | `{}` | {} | {} | {} | {} | {} | {}-{} | {:.1} | {:.2} ({:.2}-{:.2}) |",
            m.name(),
            m.waiter_label(),
            m.release_label(),
            lat.len(),
            fmt_us(p50),
            fmt_us(p99),
            fmt_us(max),
            fmt_us(mean),
            fmt_us(lo),
            fmt_us(hi),
            calls,
            us,
            us_lo,
            us_hi
        );
    }
    let _ = writeln!(
        s,
        "\nLatency = the instant the waiter's successful reply arrived - the instant before the holder's \
         release was sent (one monotonic clock; the waiter on its own thread and connection). The WAIT \
         waiter is released only once `LOCK.INFO` shows it queued; the pub/sub and polling waiters once \
         they have tried and found the lock held; the polling release comes at a uniformly random point \
         of its {} ms period. {} hand-offs per method in all ({} per run, methods in alternating order). \
         Server calls and us per hand-off = INFO commandstats over the lock protocol's commands ({}) / \
         hand-offs, median over runs (polling makes one more SET per 50 ms the lock stays held). These \
         calls arrive one at a time after idle gaps, so each runs with cold caches and costs several \
         times its figure in the loops above: compare the us column between methods only roughly.\n",
        POLL_INTERVAL.as_millis(),
        opts.handoff_total(),
        opts.handoffs_per_run(),
        HANDOFFS
            .iter()
            .map(|m| format!("{}: {}", m.name(), m.measured().join(", ")))
            .collect::<Vec<_>>()
            .join("; ")
    );
    let _ = writeln!(
        s,
        "| ours vs | p50 base/ours | p99 base/ours | max base/ours | mean base/ours | \
         server calls base/ours | server us base/ours |"
    );
    let _ = writeln!(s, "|---|---:|---:|---:|---:|---:|---:|");
    let ours = pooled[&Handoff::Wait];
    for m in [Handoff::PubSub, Handoff::Poll] {
        let base = pooled[&m];
        let r: Vec<f64> = base.iter().zip(&ours).map(|(b, o)| b / o).collect();
        let _ = writeln!(
            s,
            "| {} vs {} | {:.1}x | {:.1}x | {:.1}x | {:.1}x | {:.2}x | {:.2}x |",
            Handoff::Wait.name(),
            m.name(),
            r[0],
            r[1],
            r[2],
            r[3],
            r[4],
            r[5]
        );
    }
    let verdict = if ours[0] < 1_000_000.0 { "met" } else { "NOT met" };
    let _ = writeln!(
        s,
        "\nTarget: WAIT hand-off p50 < 1 ms on loopback: {verdict} (p50 {} us, p99 {} us, max {} us).",
        fmt_us(ours[0]),
        fmt_us(ours[1]),
        fmt_us(ours[2])
    );
    s
}

// ---------------------------------------------------------------- main

fn run() -> Res<()> {
    let mut opts = Opts::parse()?;
    // Without --port: a private server with the module, the tests' own
    // (free port, own directory, killed by PID when the run ends).
    let _own = (opts.port == 0).then(|| {
        let server = lock_testkit::Server::start();
        opts.port = server.port;
        server
    });
    let mut ctl = connect(&opts)?;
    let version = info_field(&mut ctl, "server", "redis_version")?;
    // Valkey answers redis_version 7.2.4 (for compatibility) and its own
    // version in valkey_version.
    let server = match info_field(&mut ctl, "server", "valkey_version") {
        Ok(valkey) => format!("Valkey {valkey} (redis_version {version})"),
        Err(_) => format!("Redis {version}"),
    };
    let native = has_command(&mut ctl, "DELIFEQ")?;
    let module_ver = module_version(&mut ctl)?;
    wait_until_granting(&mut ctl)?;
    let load = |ctl: &mut Connection, script: &str| -> Res<String> {
        redis::cmd("SCRIPT").arg("LOAD").arg(script).query(ctl).map_err(|e| format!("SCRIPT LOAD: {e}"))
    };
    let shas = Shas {
        del: load(&mut ctl, DEL_SCRIPT)?,
        pexpire: load(&mut ctl, PEXPIRE_SCRIPT)?,
        hash_lock: load(&mut ctl, HASH_LOCK_SCRIPT)?,
        hash_unlock: load(&mut ctl, HASH_UNLOCK_SCRIPT)?,
        del_publish: load(&mut ctl, DEL_PUBLISH_SCRIPT)?,
        read_lock: load(&mut ctl, READ_LOCK_SCRIPT)?,
        read_unlock: load(&mut ctl, READ_UNLOCK_SCRIPT)?,
        sem_acquire: load(&mut ctl, SEM_ACQUIRE_SCRIPT)?,
        sem_release: load(&mut ctl, SEM_RELEASE_SCRIPT)?,
    };
    let mut conns = (0..opts.threads).map(|_| connect(&opts)).collect::<Res<Vec<_>>>()?;
    let mut waiter = (connect(&opts)?, connect(&opts)?);
    let mut rng = Rng::seeded();

    let depths = [opts.depth, 1];
    let mut results: HashMap<Variant, Vec<Sample>> = HashMap::new();
    let mut handoffs: HashMap<Handoff, Vec<HandoffSample>> = HashMap::new();
    let started = Instant::now();
    for run in 0..opts.runs {
        for &phase in &opts.phases() {
            // Alternate which side goes first, so drift within a run evens out.
            let mut sides = phase.sides(native);
            if run % 2 == 1 {
                sides.reverse();
            }
            for &depth in &depths {
                for &side in &sides {
                    let sample = run_phase(&mut ctl, &mut conns, &shas, &opts, phase, side, depth)?;
                    eprintln!(
                        "run {}/{} {:<22} depth {:<3} {:<32} {:>6} ops/s  {:>5.2} us/op",
                        run + 1,
                        opts.runs,
                        phase.name(),
                        depth,
                        phase.label(side),
                        fmt_ops(sample.ops_per_sec),
                        sample.usec_per_op
                    );
                    results.entry((phase, side, depth)).or_default().push(sample);
                }
            }
        }
        if opts.handoffs == 0 {
            continue;
        }
        let mut order = HANDOFFS;
        if run % 2 == 1 {
            order.reverse();
        }
        for (method, sample) in
            handoff_round(&mut ctl, &mut waiter, &shas, &order, opts.handoffs_per_run(), run, &mut rng)?
        {
            let mut sorted = sample.latencies_ns.clone();
            sorted.sort_unstable();
            eprintln!(
                "run {}/{} hand-off        {:<32} {:>4} hand-offs  p50 {:>8} us  max {:>8} us  {:>5.2} us/hand-off",
                run + 1,
                opts.runs,
                method.name(),
                sample.latencies_ns.len(),
                fmt_us(percentile(&sorted, 50.0)),
                fmt_us(sorted.last().map_or(f64::NAN, |&x| x as f64)),
                sample.usec_per_handoff
            );
            handoffs.entry(method).or_default().push(sample);
        }
    }
    let elapsed = started.elapsed();
    let memory = memory_usage(&mut ctl)?;

    let cmdline =
        std::env::var("BENCH_CMDLINE").unwrap_or_else(|_| std::env::args().collect::<Vec<_>>().join(" "));
    println!(
        "## Benchmark on {server}: native LOCK.* vs SET NX PX + Lua (EVALSHA), Redisson-style Lua \
         (reentrant, read lock, expirable semaphore), pub/sub and polling{}\n",
        if native { ", and the server's own SET IFEQ / DELIFEQ" } else { "" }
    );
    println!("- command: `{cmdline}`");
    println!(
        "- {server} (module lock ver {module_ver}), one server, {} client connections \
         (own key ranges); {}",
        opts.threads,
        // scripts/bench says how it pinned server and client (under taskset
        // this process alone would see one CPU).
        std::env::var("BENCH_PINNING").unwrap_or_else(|_| format!(
            "{} CPUs available to the client",
            std::thread::available_parallelism().map_or(0, |n| n.get())
        ))
    );
    println!(
        "- {} runs, medians shown; per phase {} ops pipelined (depth {}), {} ops unpipelined; \
         distinct keys, every call checked to succeed; {} hand-offs per method; {:.0} s of runs\n",
        opts.runs,
        opts.ops_per_thread(opts.depth) * opts.threads,
        opts.depth,
        opts.ops_per_thread(1) * opts.threads,
        opts.handoff_total(),
        elapsed.as_secs_f64()
    );
    print!("{}", report(&opts, &depths, &results, native));
    if opts.handoffs > 0 {
        println!("\n### Hand-off latency: holder's release sent -> waiter granted\n");
        print!("{}", handoff_report(&opts, &handoffs));
    }
    println!("\n### Memory\n\n{memory}");
    Ok(())
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bench: {e}");
            ExitCode::FAILURE
        }
    }
}
