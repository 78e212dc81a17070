//! The arithmetic of a quorum: how many nodes must agree (a majority, or a
//! semaphore's larger quorum, with its proof), the clock-drift allowance,
//! validity and deadlines, the watchdog's renewal schedule, and the limits
//! every round obeys. Pure: time comes in as instants and durations.

use std::time::Duration;

use tokio::time::Instant;

/// The fixed part of the clock-drift allowance (docs/safety.md: ttl * 1% + 2 ms).
pub const DRIFT_FIXED: Duration = Duration::from_millis(2);

/// The proportional part of the drift allowance, in percent of the TTL.
pub const DRIFT_PERCENT: u32 = 1;

/// The watchdog renews after this fraction (1/N) of the TTL.
pub const RENEWAL_DIVISOR: u32 = 3;

/// Tokens and owners the module accepts are at most this long (agreed in
/// `lock_protocol`).
pub use lock_protocol::TOKEN_LEN_MAX;

/// The most nodes a client may name: a bound on every per-node loop and on
/// the parallel fan-out (Redlock deployments use 3, 5 or 7).
pub const NODES_MAX: usize = 31;

/// The most resources one set may hold: the nodes' defaults for one
/// `LOCK.MACQUIRE` / `LOCK.MRELEASE` (`lock.max-multi-keys`, 100) and for
/// one `LOCK.RENEW` (`lock.max-renew-keys`, 100), which renews the set; a
/// larger set is refused before any round rather than by every node (or,
/// worse, granted and then never extended).
pub const SET_KEYS_MAX: usize = lock_protocol::MULTI_KEYS_DEFAULT;

const _: () = assert!(RENEWAL_DIVISOR >= 2, "renewing only at the deadline would always be late");
const _: () = assert!(DRIFT_PERCENT < 100);
const _: () = assert!(NODES_MAX % 2 == 1);

/// How many grants make a quorum among `nodes` nodes: a strict majority, so
/// that any two quorums share at least one node.
pub fn majority(nodes: usize) -> usize {
    nodes / 2 + 1
}

/// How many grants a semaphore with `permits` permits needs among `nodes`
/// nodes: `floor(permits * nodes / (permits + 1)) + 1`, the least `q` with
/// `(permits + 1) * q > permits * nodes`. A majority for one permit; all
/// nodes once `permits >= nodes - 1`. `permits` 0 (refused before any
/// round) is treated as 1.
///
/// # Why a majority is not enough
///
/// Each node lets at most L = `permits` tokens hold a permit at once. A
/// client believes it holds a permit when q nodes granted it. Two majorities
/// share a node, so for L = 1 a majority excludes a second holder; for
/// L >= 2 it does not: with N = 3, L = 2, holders A on {1, 2}, B on {2, 3}
/// and C on {1, 3} leave each node with 2 holders (within its limit), yet
/// three clients hold one of two permits.
///
/// # Why this q is enough, and the least that is
///
/// Enough (pigeonhole): suppose L + 1 clients hold a permit at the same
/// time, each granted by q nodes. That is (L + 1) * q (client, node) grants
/// live at once, and each node carries at most L of them, so at most L * N
/// in all. (L + 1) * q > L * N makes that impossible: at most L clients
/// hold a permit at any moment.
///
/// Least: with q' = q - 1, (L + 1) * q' <= L * N, and L + 1 clients can
/// each get q' nodes without any node exceeding L: deal the (L + 1) * q'
/// grants round-robin over the nodes (client i takes nodes i*q', ...,
/// i*q' + q' - 1, mod N). Each node receives at most
/// ceil((L + 1) * q' / N) <= L grants, and a client's q' <= N nodes are
/// distinct. The unit tests check both directions by brute force.
///
/// The same q is needed wherever a permit must still be counted: to extend
/// it (a permit renewed on fewer than q nodes no longer bounds the holders)
/// and to confirm a release. The fencing round stays a majority: its
/// argument (every later grant quorum, at least a majority, meets our FENCE
/// majority in a node that will not grant a token at or below T) does not
/// depend on the permit count.
pub fn semaphore_quorum(nodes: usize, permits: u32) -> usize {
    let l = u64::from(permits.max(1));
    let n = nodes as u64;
    let q = l * n / (l + 1) + 1;
    usize::try_from(q).unwrap_or(nodes).min(nodes.max(1))
}

/// What a grant asks the nodes for: `plain`, `read`, `write` or `permit`
/// by [`Mode::name`] (`write` sends the module's `LOCK.EXCLUSIVE`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Mode {
    /// The plain lock (`LOCK.ACQUIRE`): one holder.
    #[default]
    Plain,
    /// A read hold of a read-write lock (`LOCK.SHARED`): many readers.
    Read,
    /// A write hold of a read-write lock (`LOCK.EXCLUSIVE`): alone, no
    /// readers.
    Write,
    /// One of `permits` permits of a semaphore (`LOCK.SEMAPHORE`).
    Permit { permits: u32 },
}

impl Mode {
    /// What the CLI and the Python package answer to the mode name
    /// "exclusive", which they do not take: it could mean the plain lock
    /// or the write side of a read-write lock (the module's
    /// `LOCK.EXCLUSIVE`).
    pub const EXCLUSIVE_IS_AMBIGUOUS: &'static str =
        "mode 'exclusive' is ambiguous: use 'plain' (LOCK.ACQUIRE, \
         one holder) or 'write' (the write side of a read-write lock)";

    /// The mode a binding's caller names: "plain", "read", "write", or
    /// "permit" with `permits`. "exclusive" is refused as ambiguous (the
    /// plain lock, or the write side of a read-write lock?); so are a
    /// permit without a count and a count without a permit. The error is
    /// the message for the caller.
    pub fn from_name(name: &str, permits: Option<u32>) -> Result<Mode, String> {
        match (name, permits) {
            ("plain", None) => Ok(Mode::Plain),
            ("read", None) => Ok(Mode::Read),
            ("write", None) => Ok(Mode::Write),
            ("permit", Some(permits)) => Ok(Mode::Permit { permits }),
            ("permit", None) => Err("mode 'permit' needs a permit count".into()),
            ("exclusive", _) => Err(Mode::EXCLUSIVE_IS_AMBIGUOUS.into()),
            ("plain" | "read" | "write", Some(_)) => {
                Err(format!("a permit count is only for mode 'permit', not '{name}'"))
            }
            _ => Err(format!("unknown mode {name:?} (one of 'plain', 'read', 'write', 'permit')")),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Mode::Plain => "plain",
            Mode::Read => "read",
            Mode::Write => "write",
            Mode::Permit { .. } => "permit",
        }
    }

    /// The quorum its grants (and extensions, and releases) need.
    ///
    /// Read and write: a majority. A reader's majority and a writer's
    /// majority share a node, and that node does not let a writer hold
    /// together with anyone; two writers' majorities likewise. Readers
    /// among themselves need no exclusion. A semaphore: see
    /// [`semaphore_quorum`].
    pub fn quorum(self) -> Quorum {
        match self {
            Mode::Plain | Mode::Read | Mode::Write => Quorum::Majority,
            Mode::Permit { permits } => Quorum::Permits(permits),
        }
    }
}

/// How many yes answers a round needs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Quorum {
    /// N/2 + 1: plain, reentrant, read and write locks, every fencing round.
    #[default]
    Majority,
    /// A semaphore with this many permits: [`semaphore_quorum`].
    Permits(u32),
}

impl Quorum {
    pub fn need(self, nodes: usize) -> usize {
        match self {
            Quorum::Majority => majority(nodes),
            Quorum::Permits(permits) => semaphore_quorum(nodes, permits),
        }
    }
}

/// The allowance for clock drift between this client and the nodes.
pub fn drift(ttl: Duration) -> Duration {
    ttl * DRIFT_PERCENT / 100 + DRIFT_FIXED
}

/// The instant until which a lock whose acquisition (or extension) round
/// *started* at `start` is valid: `start + ttl - drift`. Measured from the
/// start, not the end, of the round: a node may have granted at any moment
/// of the round, at the earliest just after `start`.
pub fn deadline(start: Instant, ttl: Duration) -> Instant {
    start + ttl.saturating_sub(drift(ttl))
}

/// The validity left after rounds that took `elapsed`: `ttl - elapsed -
/// drift`, or `None` when nothing is left (the lock expired before use).
pub fn validity(ttl: Duration, elapsed: Duration) -> Option<Duration> {
    ttl.checked_sub(elapsed.saturating_add(drift(ttl))).filter(|left| !left.is_zero())
}

/// Time left until `deadline` at `now` (zero once it has passed).
pub fn remaining(deadline: Instant, now: Instant) -> Duration {
    deadline.saturating_duration_since(now)
}

/// When the watchdog renews a lease that started at `lease_start`.
pub fn next_renewal(lease_start: Instant, ttl: Duration) -> Instant {
    lease_start + (ttl / RENEWAL_DIVISOR).max(Duration::from_millis(1))
}

/// Whether a renewal at `at` stays within the watchdog's bounds.
pub fn renewal_allowed(
    renewals_done: u32,
    renewals_max: u32,
    started: Instant,
    at: Instant,
    duration_max: Duration,
) -> bool {
    renewals_done < renewals_max && at.saturating_duration_since(started) <= duration_max
}

/// A lock token: 128 random bits as 32 lowercase hex digits.
pub fn token_from_bits(bits: u128) -> String {
    format!("{bits:032x}")
}
#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn majority_is_strict() {
        assert_eq!(majority(1), 1);
        assert_eq!(majority(2), 2);
        assert_eq!(majority(3), 2);
        assert_eq!(majority(4), 3);
        assert_eq!(majority(5), 3);
        assert_eq!(majority(7), 4);
        // Any two majorities intersect.
        for n in 1..=NODES_MAX {
            assert!(2 * majority(n) > n, "n = {n}");
        }
    }

    #[test]
    fn modes_by_name_round_trip_and_refuse_what_is_not_one() {
        for mode in [Mode::Plain, Mode::Read, Mode::Write, Mode::Permit { permits: 3 }] {
            let permits = match mode {
                Mode::Permit { permits } => Some(permits),
                _ => None,
            };
            assert_eq!(Mode::from_name(mode.name(), permits), Ok(mode));
        }
        assert_eq!(Mode::from_name("exclusive", None), Err(Mode::EXCLUSIVE_IS_AMBIGUOUS.to_string()));
        let refused = |name: &str, permits: Option<u32>, says: &str| {
            let error = Mode::from_name(name, permits).expect_err(name);
            assert!(error.contains(says), "{name}: {error}");
        };
        refused("permit", None, "needs a permit count");
        refused("read", Some(2), "only for mode 'permit', not 'read'");
        refused("Plain", None, "unknown mode \"Plain\"");
        refused("", None, "unknown mode");
    }

    #[test]
    fn semaphore_quorum_table() {
        // The README's table for five nodes.
        let five: Vec<usize> = (1..=6).map(|permits| semaphore_quorum(5, permits)).collect();
        assert_eq!(five, [3, 4, 4, 5, 5, 5]);
        assert_eq!(semaphore_quorum(3, 1), 2);
        assert_eq!(semaphore_quorum(3, 2), 3, "the counterexample's size needs all three");
        assert_eq!(semaphore_quorum(7, 2), 5);
        assert_eq!(semaphore_quorum(7, 3), 6);
        assert_eq!(semaphore_quorum(1, 5), 1);
        assert_eq!(semaphore_quorum(5, 0), 3, "0 permits counts as 1");
        assert_eq!(semaphore_quorum(5, u32::MAX), 5, "no overflow, never above N");
        for n in 1..=NODES_MAX {
            assert_eq!(semaphore_quorum(n, 1), majority(n), "one permit is a plain lock, n = {n}");
            for permits in 1..=40u32 {
                let q = semaphore_quorum(n, permits);
                let l = permits as usize;
                // The least q with (L + 1) * q > L * N, capped at N.
                assert!(q <= n && q >= majority(n), "n = {n}, permits = {permits}");
                assert!((l + 1) * q > l * n, "enough: n = {n}, permits = {permits}");
                assert!((l + 1) * (q - 1) <= l * n, "least: n = {n}, permits = {permits}");
            }
        }
        assert_eq!(Mode::Permit { permits: 2 }.quorum().need(5), 4);
        for mode in [Mode::Plain, Mode::Read, Mode::Write, Mode::Permit { permits: 1 }] {
            assert_eq!(mode.quorum().need(5), 3, "{mode:?}");
        }
    }

    /// Can `holders` clients each be granted by `size` distinct nodes out
    /// of `nodes`, with no node granting more than `limit` of them at once?
    /// Exhaustive search (clients' node sets in non-decreasing order, as
    /// clients are interchangeable).
    fn overbooked(nodes: usize, limit: usize, holders: usize, size: usize) -> bool {
        let sets: Vec<u32> = (0u32..1 << nodes).filter(|s| s.count_ones() as usize == size).collect();
        fn place(sets: &[u32], from: usize, left: usize, load: &mut [usize], limit: usize) -> bool {
            if left == 0 {
                return true;
            }
            for (i, set) in sets.iter().enumerate().skip(from) {
                let nodes: Vec<usize> = (0..load.len()).filter(|b| set & (1 << b) != 0).collect();
                if nodes.iter().all(|&b| load[b] < limit) {
                    nodes.iter().for_each(|&b| load[b] += 1);
                    let found = place(sets, i, left - 1, load, limit);
                    nodes.iter().for_each(|&b| load[b] -= 1);
                    if found {
                        return true;
                    }
                }
            }
            false
        }
        place(&sets, 0, holders, &mut vec![0; nodes], limit)
    }

    #[test]
    fn semaphore_quorum_is_enough_and_the_least_by_brute_force() {
        // The counterexample: three nodes, two permits, majorities of two.
        let (a, b, c) = (0b011u32, 0b110u32, 0b101u32);
        for node in 0..3 {
            let load = [a, b, c].iter().filter(|s| *s & (1 << node) != 0).count();
            assert_eq!(load, 2, "node {node} is within its 2 permits");
        }
        assert!(overbooked(3, 2, 3, majority(3)), "a majority lets 3 clients hold 2 permits");
        assert!(!overbooked(3, 2, 3, semaphore_quorum(3, 2)));

        for nodes in 1..=6 {
            for permits in 1..=5u32 {
                let limit = permits as usize;
                let q = semaphore_quorum(nodes, permits);
                // L + 1 clients holding one permit each at once: impossible
                // with q grants each, possible with q - 1.
                assert!(
                    !overbooked(nodes, limit, limit + 1, q),
                    "q = {q} overbooked: nodes = {nodes}, permits = {permits}"
                );
                if q > 1 {
                    assert!(
                        overbooked(nodes, limit, limit + 1, q - 1),
                        "q - 1 = {} is safe too: nodes = {nodes}, permits = {permits}",
                        q - 1
                    );
                }
            }
        }
    }

    #[test]
    fn modes_have_the_cli_names() {
        // The CLI prints them (REDLOCK_MODE) and reads them back (--mode).
        let names: Vec<&str> =
            [Mode::Plain, Mode::Read, Mode::Write, Mode::Permit { permits: 3 }].map(Mode::name).to_vec();
        assert_eq!(names, ["plain", "read", "write", "permit"]);
        assert_eq!(Mode::default(), Mode::Plain);
    }

    #[test]
    fn drift_is_one_percent_plus_two_ms() {
        assert_eq!(drift(ms(10_000)), ms(102));
        assert_eq!(drift(ms(1_000)), ms(12));
        assert_eq!(drift(ms(100)), ms(3));
        assert_eq!(drift(ms(0)), ms(2));
    }

    #[test]
    fn validity_subtracts_elapsed_and_drift() {
        assert_eq!(validity(ms(10_000), ms(50)), Some(ms(10_000 - 50 - 102)));
        assert_eq!(validity(ms(1_000), ms(988)), None, "exactly zero left is expired");
        assert_eq!(validity(ms(1_000), ms(987)), Some(ms(1)));
        assert_eq!(validity(ms(1_000), ms(5_000)), None);
        assert_eq!(validity(ms(1), ms(0)), None, "a 1 ms ttl is all drift");
    }

    #[test]
    fn deadline_and_remaining_on_a_fake_clock() {
        let t0 = Instant::now();
        let end = deadline(t0, ms(1_000));
        assert_eq!(end, t0 + ms(988));
        assert_eq!(remaining(end, t0 + ms(100)), ms(888));
        assert_eq!(remaining(end, t0 + ms(988)), ms(0));
        assert_eq!(remaining(end, t0 + ms(2_000)), ms(0));
        // The deadline agrees with validity for any elapsed time.
        for elapsed in [0, 1, 500, 987, 988, 1_500] {
            let left = remaining(end, t0 + ms(elapsed));
            assert_eq!(validity(ms(1_000), ms(elapsed)).unwrap_or_default(), left, "elapsed {elapsed}");
        }
    }

    #[test]
    fn renewal_schedule_and_bounds() {
        let t0 = Instant::now();
        assert_eq!(next_renewal(t0, ms(3_000)), t0 + ms(1_000));
        assert_eq!(next_renewal(t0, ms(2)), t0 + ms(1), "never zero");
        assert!(renewal_allowed(0, 3, t0, t0 + ms(10), ms(100)));
        assert!(!renewal_allowed(3, 3, t0, t0 + ms(10), ms(100)), "count bound");
        assert!(!renewal_allowed(0, 3, t0, t0 + ms(101), ms(100)), "duration bound");
        assert!(renewal_allowed(0, 3, t0, t0 + ms(100), ms(100)));
    }

    #[test]
    fn tokens_are_32_hex_digits() {
        assert_eq!(token_from_bits(0), "0".repeat(32));
        assert_eq!(token_from_bits(u128::MAX), "f".repeat(32));
        assert_eq!(token_from_bits(0xabc), format!("{}abc", "0".repeat(29)));
        assert!(token_from_bits(u128::MAX).len() <= TOKEN_LEN_MAX);
    }
}
