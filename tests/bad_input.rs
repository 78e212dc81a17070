//! Safety property 7 (docs/safety.md): bad input never crashes or corrupts the server.
//!
//! A server is given a few plain and reentrant locks and some keys that are
//! not locks; then thousands of malformed LOCK.* calls (seeded, replayable
//! with `LOCK_FUZZ_SEED=<n>`) are thrown at it. Every call must get an error
//! reply of the right class (`ERR` for a malformed call, `WRONGTYPE` for a
//! well-formed call on a key of the wrong kind), never the module's
//! "internal error" (a caught panic), and afterwards every key, expiry, lock
//! and counter must be exactly as before, with no crash report in the log.
//!
//! Only calls that are malformed by construction are generated: a call that
//! is valid but refused (RELEASE with another token answers 0) is not one.

use lock_testkit::*;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

/// The default `lock.max-ttl-ms`; the locks are set up with it.
const MAX_TTL: i64 = 30_000;
/// The longest error line a malformed call may get: an argument is shown
/// at most 64 bytes long (each byte at most 4 characters escaped).
const ERROR_LINE_MAX: usize = 600;
/// How many random malformed calls, on top of the fixed table.
const RANDOM_CALLS: usize = 6_000;

// ---------------------------------------------------------------------------
// The server's state before and after.

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum KeyClass {
    /// A plain lock, held.
    Plain,
    /// A reentrant lock, held.
    Reentrant,
    /// A shared (read-write) lock with two readers.
    Shared,
    /// A semaphore with two of its three permits taken.
    Semaphore,
    /// A key that holds something that is not a lock.
    NotLock,
    /// No such key.
    Missing,
}

struct World {
    /// (key, holder token) of held plain locks.
    plain: Vec<(Vec<u8>, Vec<u8>)>,
    /// (key, owner) of held reentrant locks.
    reentrant: Vec<(Vec<u8>, Vec<u8>)>,
    /// (key, one of its readers) of shared locks.
    shared: Vec<(Vec<u8>, Vec<u8>)>,
    /// (key, one of its permit holders) of semaphores.
    semaphores: Vec<(Vec<u8>, Vec<u8>)>,
    /// Keys that exist but are not locks.
    not_locks: Vec<Vec<u8>>,
}

impl World {
    fn class(&self, key: &[u8]) -> KeyClass {
        if self.plain.iter().any(|(k, _)| k == key) {
            KeyClass::Plain
        } else if self.reentrant.iter().any(|(k, _)| k == key) {
            KeyClass::Reentrant
        } else if self.shared.iter().any(|(k, _)| k == key) {
            KeyClass::Shared
        } else if self.semaphores.iter().any(|(k, _)| k == key) {
            KeyClass::Semaphore
        } else if self.not_locks.iter().any(|k| k == key) {
            KeyClass::NotLock
        } else {
            KeyClass::Missing
        }
    }

    fn holder(&self, key: &[u8]) -> Option<&[u8]> {
        self.plain
            .iter()
            .chain(&self.reentrant)
            .chain(&self.shared)
            .chain(&self.semaphores)
            .find(|(k, _)| k == key)
            .map(|(_, t)| t.as_slice())
    }
}

fn q<T: redis::FromRedisValue>(c: &mut Connection, words: &[&[u8]]) -> T {
    let v = run(c, words).unwrap_or_else(|e| panic!("setup {:?}: {e}", show(words)));
    redis::from_redis_value(&v).unwrap_or_else(|e| panic!("setup {:?}: {v:?}: {e}", show(words)))
}

fn set_up(c: &mut Connection) -> World {
    let long_token = vec![b'L'; 256];
    let plain: Vec<(Vec<u8>, Vec<u8>)> = vec![
        (b"p:1".to_vec(), b"plain-token-1".to_vec()),
        (b"p:2".to_vec(), b"bin\x00\r\n|tok\xff".to_vec()),
        (b"p:3\x00\r\nkey".to_vec(), long_token),
    ];
    let reentrant: Vec<(Vec<u8>, Vec<u8>)> =
        vec![(b"r:1".to_vec(), b"owner-1".to_vec()), (b"r:2".to_vec(), b"o\x00\r\n|".to_vec())];
    let ttl = MAX_TTL.to_string();
    for (key, token) in &plain {
        let fence: i64 = q(c, &[b"LOCK.ACQUIRE", key, token, ttl.as_bytes()]);
        assert!(fence > 0);
    }
    for (i, (key, owner)) in reentrant.iter().enumerate() {
        for _ in 0..=(2 * i + 2) {
            let fence: i64 = q(c, &[b"LOCK.ENTER", key, owner, ttl.as_bytes()]);
            assert!(fence > 0);
        }
    }
    let shared = vec![(b"s:1".to_vec(), b"reader\x00|1".to_vec())];
    for reader in [&b"reader\x00|1"[..], b"reader-2"] {
        let fence: i64 = q(c, &[b"LOCK.SHARED", b"s:1", reader, ttl.as_bytes()]);
        assert!(fence > 0);
    }
    let semaphores = vec![(b"m:1".to_vec(), b"permit|1".to_vec())];
    for holder in [&b"permit|1"[..], b"permit-2"] {
        let fence: i64 = q(c, &[b"LOCK.SEMAPHORE", b"m:1", holder, b"3", ttl.as_bytes()]);
        assert!(fence > 0);
    }
    let _: String = q(c, &[b"SET", b"str", b"just a string"]);
    // Group values that break their kind's rules are not locks.
    let _: String = q(c, &[b"SET", b"fake:group", b"LK1|S|0|2|w|1|2|1|a|r|1|2|1|b|"]);
    // Strings that look almost like a stored lock must not be taken for one.
    let _: String = q(c, &[b"SET", b"fake:holds0", b"LK1|P|12|34|0|x"]);
    let _: String = q(c, &[b"SET", b"fake:kind", b"LK1|X|12|34|1|x"]);
    let _: String = q(c, &[b"SET", b"fake:short", b"LK1|P|12"]);
    let _: String = q(c, &[b"SET", b"str:ttl", b"expiring", b"PX", b"600000"]);
    let _: i64 = q(c, &[b"RPUSH", b"list", b"a", b"b", b"c"]);
    let _: i64 = q(c, &[b"HSET", b"hash", b"f1", b"v1", b"f2", b"v2"]);
    let _: i64 = q(c, &[b"SADD", b"set", b"m1", b"m2"]);
    let _: i64 = q(c, &[b"ZADD", b"zset", b"1", b"z1"]);
    let not_locks = [
        "str",
        "fake:holds0",
        "fake:kind",
        "fake:short",
        "fake:group",
        "str:ttl",
        "list",
        "hash",
        "set",
        "zset",
    ]
    .iter()
    .map(|k| k.as_bytes().to_vec())
    .collect();
    World { plain, reentrant, shared, semaphores, not_locks }
}

#[derive(Debug, PartialEq)]
struct KeySnap {
    key: Vec<u8>,
    kind: String,
    content: Value,
    pexpiretime: i64,
    /// LOCK.INFO without the time-relative `ttl-ms`, or its error class.
    lock: Result<Option<Vec<(String, Value)>>, String>,
}

#[derive(Debug, PartialEq)]
struct Snapshot {
    dbsize: i64,
    keys: Vec<KeySnap>,
    /// `INFO lock` counters that a refused call must not move.
    stats: BTreeMap<String, String>,
}

const STABLE_STATS: [&str; 7] = [
    "lock_grants",
    "lock_renewals",
    "lock_contended",
    "lock_releases",
    "lock_extensions",
    "lock_expiries",
    "lock_last_fencing_token",
];

fn snapshot(c: &mut Connection) -> Snapshot {
    let dbsize: i64 = q(c, &[b"DBSIZE"]);
    let mut names: Vec<Vec<u8>> = q(c, &[b"KEYS", b"*"]);
    names.sort();
    let keys = names
        .into_iter()
        .map(|key| {
            let kind: String = q(c, &[b"TYPE", &key]);
            let content: Value = match kind.as_str() {
                "string" => q(c, &[b"GET", &key]),
                "list" => q(c, &[b"LRANGE", &key, b"0", b"-1"]),
                "hash" => q(c, &[b"HGETALL", &key]),
                "set" => q(c, &[b"SMEMBERS", &key]),
                "zset" => q(c, &[b"ZRANGE", &key, b"0", b"-1", b"WITHSCORES"]),
                other => panic!("unexpected key type {other}"),
            };
            let pexpiretime: i64 = q(c, &[b"PEXPIRETIME", &key]);
            let lock = match run(c, &[b"LOCK.INFO", &key]) {
                Ok(Value::Nil) => Ok(None),
                Ok(Value::Array(items)) => Ok(Some(
                    items
                        .chunks(2)
                        .map(|p| (redis::from_redis_value::<String>(&p[0]).unwrap(), p[1].clone()))
                        .filter(|(name, _)| name != "ttl-ms")
                        .map(|(name, value)| (name, without_ttl(value)))
                        .collect(),
                )),
                Ok(other) => panic!("LOCK.INFO reply {other:?}"),
                Err(e) => Err(e.code().unwrap_or("?").to_string()),
            };
            KeySnap { key, kind, content, pexpiretime, lock }
        })
        .collect();
    let info: String = q(c, &[b"INFO", b"lock"]);
    let stats = info
        .lines()
        .filter_map(|l| l.split_once(':'))
        .filter(|(k, _)| STABLE_STATS.contains(k))
        .map(|(k, v)| (k.to_string(), v.trim().to_string()))
        .collect::<BTreeMap<_, _>>();
    assert_eq!(stats.len(), STABLE_STATS.len(), "INFO lock: {info}");
    Snapshot { dbsize, keys, stats }
}

/// A group's holder list without the time-relative `ttl-ms` of each holder.
fn without_ttl(value: Value) -> Value {
    match value {
        Value::Array(items) => Value::Array(
            items
                .into_iter()
                .map(|item| match item {
                    Value::Array(pairs) => Value::Array(
                        pairs
                            .chunks(2)
                            .filter(|p| p[0] != Value::BulkString(b"ttl-ms".to_vec()))
                            .flatten()
                            .cloned()
                            .collect(),
                    ),
                    other => other,
                })
                .collect(),
        ),
        other => other,
    }
}

// ---------------------------------------------------------------------------
// Generating malformed calls.

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Cmd {
    Acquire,
    Enter,
    Release,
    Extend,
    Exit,
    Fence,
    Info,
    Shared,
    Exclusive,
}

const CMDS: [Cmd; 9] = [
    Cmd::Acquire,
    Cmd::Enter,
    Cmd::Release,
    Cmd::Extend,
    Cmd::Exit,
    Cmd::Fence,
    Cmd::Info,
    Cmd::Shared,
    Cmd::Exclusive,
];

impl Cmd {
    fn name(self) -> &'static str {
        match self {
            Cmd::Acquire => "LOCK.ACQUIRE",
            Cmd::Enter => "LOCK.ENTER",
            Cmd::Release => "LOCK.RELEASE",
            Cmd::Extend => "LOCK.EXTEND",
            Cmd::Exit => "LOCK.EXIT",
            Cmd::Fence => "LOCK.FENCE",
            Cmd::Info => "LOCK.INFO",
            Cmd::Shared => "LOCK.SHARED",
            Cmd::Exclusive => "LOCK.EXCLUSIVE",
        }
    }

    /// Numbers of arguments after the name that can be well-formed.
    fn valid_arg_counts(self) -> &'static [usize] {
        match self {
            Cmd::Acquire | Cmd::Enter | Cmd::Shared | Cmd::Exclusive => &[3, 5],
            Cmd::Release | Cmd::Exit => &[2],
            Cmd::Extend | Cmd::Fence => &[3],
            Cmd::Info => &[1],
        }
    }

    /// Whether a key of this class is the wrong kind for the command.
    fn wrong_type(self, class: KeyClass) -> bool {
        match class {
            KeyClass::NotLock => true,
            KeyClass::Reentrant => matches!(self, Cmd::Acquire | Cmd::Shared | Cmd::Exclusive),
            KeyClass::Plain => matches!(self, Cmd::Enter | Cmd::Exit | Cmd::Shared | Cmd::Exclusive),
            KeyClass::Shared => matches!(self, Cmd::Acquire | Cmd::Enter | Cmd::Exit),
            KeyClass::Semaphore => {
                matches!(self, Cmd::Acquire | Cmd::Enter | Cmd::Exit | Cmd::Shared | Cmd::Exclusive)
            }
            KeyClass::Missing => false,
        }
    }
}

/// A malformed call and the error classes it may get.
struct Case {
    category: &'static str,
    words: Vec<Vec<u8>>,
    allowed: &'static [&'static str],
}

const ERR: &[&str] = &["ERR"];
const WRONGTYPE: &[&str] = &["WRONGTYPE"];
/// Malformed and on a key of the wrong kind: either check may come first.
const ERR_OR_WRONGTYPE: &[&str] = &["ERR", "WRONGTYPE"];

/// Redis' integer syntax (`string2ll`), as the test's own oracle: only used
/// to make sure a randomly made "bad" number really is bad.
fn strict_int(bytes: &[u8]) -> Option<i64> {
    let s = std::str::from_utf8(bytes).ok()?;
    let digits = s.strip_prefix('-').unwrap_or(s);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) || s == "-0" {
        return None;
    }
    if digits.len() > 1 && digits.starts_with('0') {
        return None;
    }
    s.parse().ok()
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Slot {
    Ttl,
    Wait,
    Floor,
}

fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as i64
}

/// Numbers that are not integers in Redis' syntax, or overflow i64.
fn not_integers() -> Vec<Vec<u8>> {
    [
        "+5",
        "07",
        "00",
        " 5",
        "5 ",
        "\t5",
        "5\n",
        "5\r\n",
        "5\0",
        "\x005",
        "1.5",
        "1.0",
        "5.",
        ".5",
        "",
        " ",
        "-",
        "+",
        "-0",
        "--5",
        "+-5",
        "1e3",
        "1E3",
        "0x10",
        "0b1",
        "1_000",
        "1,000",
        "5ms",
        "abc",
        "nan",
        "inf",
        "-inf",
        "\u{0665}",
        "\u{2212}5",
        "\u{ff15}",
        "123456789012345678901",
        "000000000000000000001",
        "99999999999999999999999999999999999999",
        "9223372036854775808",
        "-9223372036854775809",
        "18446744073709551615",
        "18446744073709551616",
    ]
    .iter()
    .map(|s| s.as_bytes().to_vec())
    .collect()
}

/// Integers outside the slot's range.
fn out_of_range(slot: Slot) -> Vec<Vec<u8>> {
    let mut values: Vec<String> =
        ["-1", "-5", "-9223372036854775808"].iter().map(|s| s.to_string()).collect();
    match slot {
        Slot::Ttl => values.extend([
            "0".to_string(),
            (MAX_TTL + 1).to_string(),
            "86400001".to_string(),
            i64::MAX.to_string(),
        ]),
        // The module documents WAIT at most one day (`WAIT 0` = no bound).
        Slot::Wait => values.extend(["86400001".to_string(), i64::MAX.to_string()]),
        // Absurdly far ahead of any fencing token this node could issue
        // (tokens are about epoch-ms * 1000).
        Slot::Floor => values.extend([
            i64::MAX.to_string(),
            "9000000000000000000".to_string(),
            "100000000000000000".to_string(),
            ((now_ms() + 30 * 86_400_000) * 1000).to_string(),
        ]),
    }
    values.into_iter().map(String::into_bytes).collect()
}

fn valid_range(slot: Slot) -> (i64, i64) {
    match slot {
        Slot::Ttl => (1, MAX_TTL),
        Slot::Wait => (0, 1000),
        Slot::Floor => (0, 1_000_000),
    }
}

fn is_valid_for(slot: Slot, bytes: &[u8]) -> bool {
    match strict_int(bytes) {
        // Conservative: any non-negative integer might be a valid wait or
        // floor, any positive one up to the max a valid TTL.
        Some(n) => match slot {
            Slot::Ttl => (1..=MAX_TTL).contains(&n),
            Slot::Wait => (0..=86_400_000).contains(&n),
            Slot::Floor => (0..=(now_ms() + 3_600_000) * 1000).contains(&n),
        },
        None => false,
    }
}

struct Gen {
    rng: StdRng,
    world: World,
}

impl Gen {
    fn bytes(&mut self, len: usize) -> Vec<u8> {
        const SPICY: &[u8] = b"\0\r\n|\xff 0-+.9";
        (0..len)
            .map(
                |_| {
                    if self.rng.gen_bool(0.3) {
                        *SPICY.choose(&mut self.rng).unwrap()
                    } else {
                        self.rng.gen()
                    }
                },
            )
            .collect()
    }

    fn cmd_name(&mut self, cmd: Cmd) -> Vec<u8> {
        let name = cmd.name();
        match self.rng.gen_range(0..4) {
            0 => name.to_lowercase().into_bytes(),
            1 => name
                .chars()
                .map(|ch| if self.rng.gen_bool(0.5) { ch.to_ascii_lowercase() } else { ch })
                .collect::<String>()
                .into_bytes(),
            _ => name.as_bytes().to_vec(),
        }
    }

    /// A key and its class; missing keys may be binary.
    fn key(&mut self) -> (Vec<u8>, KeyClass) {
        let key = match self.rng.gen_range(0..24) {
            0..=7 => self.world.plain.choose(&mut self.rng).unwrap().0.clone(),
            8..=12 => self.world.reentrant.choose(&mut self.rng).unwrap().0.clone(),
            13..=15 => self.world.not_locks.choose(&mut self.rng).unwrap().clone(),
            16..=17 => format!("missing:{}", self.rng.gen::<u32>()).into_bytes(),
            18..=19 => self.world.shared.choose(&mut self.rng).unwrap().0.clone(),
            20..=21 => self.world.semaphores.choose(&mut self.rng).unwrap().0.clone(),
            _ => {
                let len = self.rng.gen_range(0..40);
                self.bytes(len)
            }
        };
        let class = self.world.class(&key);
        (key, class)
    }

    /// A well-formed token: often the holder's, so that a wrongly accepted
    /// call would change the lock.
    fn token(&mut self, key: &[u8]) -> Vec<u8> {
        if let Some(holder) = self.world.holder(key) {
            if self.rng.gen_bool(0.6) {
                return holder.to_vec();
            }
        }
        match self.rng.gen_range(0..3) {
            0 => format!("tok-{}", self.rng.gen::<u16>()).into_bytes(),
            1 => {
                let len = self.rng.gen_range(1..=256);
                self.bytes(len)
            }
            _ => vec![b'T'; 256],
        }
    }

    fn bad_token(&mut self) -> Vec<u8> {
        match self.rng.gen_range(0..10) {
            0..=3 => Vec::new(),
            4..=5 => vec![b'x'; 257],
            6..=8 => {
                let len = self.rng.gen_range(257..1200);
                self.bytes(len)
            }
            _ => {
                if self.rng.gen_bool(0.05) {
                    vec![b'M'; 1 << 20]
                } else {
                    vec![b'\0'; 4096]
                }
            }
        }
    }

    fn valid_number(&mut self, slot: Slot) -> Vec<u8> {
        let (lo, hi) = valid_range(slot);
        let n = match self.rng.gen_range(0..4) {
            0 => lo,
            1 => hi,
            _ => self.rng.gen_range(lo..=hi),
        };
        n.to_string().into_bytes()
    }

    fn bad_number(&mut self, slot: Slot) -> Vec<u8> {
        loop {
            let candidate = match self.rng.gen_range(0..10) {
                0..=3 => not_integers().choose(&mut self.rng).unwrap().clone(),
                4..=5 => out_of_range(slot).choose(&mut self.rng).unwrap().clone(),
                6..=7 => {
                    // A valid number with junk spliced in.
                    let mut v = self.valid_number(slot);
                    let at = self.rng.gen_range(0..=v.len());
                    let junk = *b" +.e\0\r\n-x0".choose(&mut self.rng).unwrap();
                    v.insert(at, junk);
                    v
                }
                _ => {
                    let len = self.rng.gen_range(0..24);
                    self.bytes(len)
                }
            };
            if !is_valid_for(slot, &candidate) {
                return candidate;
            }
        }
    }

    fn wait_word(&mut self) -> Vec<u8> {
        [&b"WAIT"[..], b"wait", b"Wait", b"wAiT"].choose(&mut self.rng).unwrap().to_vec()
    }

    fn unknown_option(&mut self) -> Vec<u8> {
        loop {
            let name = match self.rng.gen_range(0..3) {
                0 => [
                    &b"NX"[..],
                    b"PX",
                    b"XX",
                    b"EX",
                    b"KEEPTTL",
                    b"WAITS",
                    b"WAI",
                    b"W",
                    b"",
                    b"TIMEOUT",
                    b"WAIT\0",
                    b"WAIT ",
                    b" WAIT",
                    b"WA\nIT",
                    b"-WAIT",
                    b"100",
                ]
                .choose(&mut self.rng)
                .unwrap()
                .to_vec(),
                _ => {
                    let len = self.rng.gen_range(0..30);
                    self.bytes(len)
                }
            };
            if !name.eq_ignore_ascii_case(b"WAIT") {
                return name;
            }
        }
    }

    /// Well-formed arguments for `cmd` on `key` (no WAIT option).
    fn valid_args(&mut self, cmd: Cmd, key: &[u8]) -> Vec<Vec<u8>> {
        let token = self.token(key);
        match cmd {
            Cmd::Acquire | Cmd::Enter | Cmd::Extend | Cmd::Shared | Cmd::Exclusive => {
                vec![key.to_vec(), token, self.valid_number(Slot::Ttl)]
            }
            Cmd::Release | Cmd::Exit => vec![key.to_vec(), token],
            Cmd::Fence => vec![key.to_vec(), token, self.valid_number(Slot::Floor)],
            Cmd::Info => vec![key.to_vec()],
        }
    }

    fn case(
        &mut self,
        category: &'static str,
        cmd: Cmd,
        args: Vec<Vec<u8>>,
        class: Option<KeyClass>,
    ) -> Case {
        let mut words = vec![self.cmd_name(cmd)];
        words.extend(args);
        let allowed = match class {
            Some(class) if cmd.wrong_type(class) => ERR_OR_WRONGTYPE,
            _ => ERR,
        };
        Case { category, words, allowed }
    }

    /// A random argument for arity cases.
    fn any_arg(&mut self, key: &[u8]) -> Vec<u8> {
        match self.rng.gen_range(0..6) {
            0 => self.token(key),
            1 => self.valid_number(Slot::Ttl),
            2 => self.wait_word(),
            3 => key.to_vec(),
            4 => b"0".to_vec(),
            _ => {
                let len = self.rng.gen_range(0..20);
                self.bytes(len)
            }
        }
    }

    fn random_case(&mut self) -> Case {
        // The category is drawn first, then a command and key it applies
        // to, so that arity (which applies to all) does not dominate.
        let category = match self.rng.gen_range(0..100) {
            0..=14 => 0,
            15..=39 => 1,
            40..=54 => 2,
            55..=74 => 3,
            75..=89 => 4,
            _ => 5,
        };
        loop {
            let cmd = *CMDS.choose(&mut self.rng).unwrap();
            let (key, class) = self.key();
            let takes_ttl =
                matches!(cmd, Cmd::Acquire | Cmd::Enter | Cmd::Extend | Cmd::Shared | Cmd::Exclusive);
            let takes_options = matches!(cmd, Cmd::Acquire | Cmd::Enter | Cmd::Shared | Cmd::Exclusive);
            match category {
                // Wrong number of arguments.
                0 => {
                    let n = loop {
                        let n = self.rng.gen_range(0..=9);
                        if !cmd.valid_arg_counts().contains(&n) {
                            break n;
                        }
                    };
                    let mut args = Vec::new();
                    if n > 0 {
                        args.push(key.clone());
                    }
                    while args.len() < n {
                        let arg = self.any_arg(&key);
                        args.push(arg);
                    }
                    let class = (n > 0).then_some(class);
                    return self.case("arity", cmd, args, class);
                }
                // A bad number where an integer belongs.
                1 if takes_ttl || cmd == Cmd::Fence => {
                    let mut args = self.valid_args(cmd, &key);
                    let slot = if takes_ttl { Slot::Ttl } else { Slot::Floor };
                    if takes_options && self.rng.gen_bool(0.4) {
                        args.push(self.wait_word());
                        args.push(self.bad_number(Slot::Wait));
                    } else {
                        args[2] = self.bad_number(slot);
                    }
                    return self.case("bad integer", cmd, args, Some(class));
                }
                // An empty or over-long token.
                2 if cmd != Cmd::Info => {
                    let mut args = self.valid_args(cmd, &key);
                    args[1] = self.bad_token();
                    if takes_options && self.rng.gen_bool(0.3) {
                        args.push(self.wait_word());
                        args.push(self.valid_number(Slot::Wait));
                    }
                    return self.case("bad token", cmd, args, Some(class));
                }
                // Bad options.
                3 if takes_options => {
                    let mut args = self.valid_args(cmd, &key);
                    match self.rng.gen_range(0..5) {
                        0 => {
                            args.push(self.unknown_option());
                            if self.rng.gen_bool(0.5) {
                                args.push(self.valid_number(Slot::Wait));
                            }
                        }
                        1 => args.push(self.wait_word()),
                        2 => {
                            args.push(self.wait_word());
                            args.push(self.valid_number(Slot::Wait));
                            args.push(self.wait_word());
                            args.push(self.valid_number(Slot::Wait));
                        }
                        3 => {
                            args.push(self.wait_word());
                            args.push(self.valid_number(Slot::Wait));
                            args.push(self.wait_word());
                        }
                        _ => {
                            args.push(self.wait_word());
                            args.push(self.valid_number(Slot::Wait));
                            args.push(self.unknown_option());
                        }
                    }
                    return self.case("bad option", cmd, args, Some(class));
                }
                // Well-formed, on a key of the wrong kind.
                4 if cmd.wrong_type(class) => {
                    let args = self.valid_args(cmd, &key);
                    let mut case = self.case("wrong type", cmd, args, Some(class));
                    case.allowed = WRONGTYPE;
                    return case;
                }
                // FENCE by the holder with a floor absurdly far ahead.
                5 if cmd == Cmd::Fence && class != KeyClass::NotLock && class != KeyClass::Missing => {
                    let holder = self.world.holder(&key).unwrap().to_vec();
                    let floor = out_of_range(Slot::Floor)
                        .into_iter()
                        .filter(|f| strict_int(f).is_some_and(|n| n > 0))
                        .collect::<Vec<_>>()
                        .choose(&mut self.rng)
                        .unwrap()
                        .clone();
                    return self.case("absurd floor", cmd, vec![key.clone(), holder, floor], Some(class));
                }
                _ => continue,
            }
        }
    }

    /// Every listed bad number in every numeric position, on a held lock
    /// with its holder's token and on a missing key.
    fn fixed_cases(&mut self) -> Vec<Case> {
        let mut cases = Vec::new();
        let (pkey, ptok) = self.world.plain[0].clone();
        let (rkey, rown) = self.world.reentrant[0].clone();
        let ok_ttl = MAX_TTL.to_string().into_bytes();
        for (cmd, key, token) in [
            (Cmd::Acquire, pkey.clone(), ptok.clone()),
            (Cmd::Acquire, b"missing:fixed".to_vec(), b"t".to_vec()),
            (Cmd::Enter, rkey.clone(), rown.clone()),
            (Cmd::Enter, b"missing:fixed".to_vec(), b"t".to_vec()),
            (Cmd::Extend, pkey.clone(), ptok.clone()),
            (Cmd::Extend, rkey.clone(), rown.clone()),
            (Cmd::Fence, pkey.clone(), ptok.clone()),
            (Cmd::Fence, rkey.clone(), rown.clone()),
        ] {
            let class = self.world.class(&key);
            let slot = if cmd == Cmd::Fence { Slot::Floor } else { Slot::Ttl };
            let mut bad = not_integers();
            bad.extend(out_of_range(slot));
            for value in &bad {
                let args = vec![key.clone(), token.clone(), value.clone()];
                cases.push(self.case("fixed bad integer", cmd, args, Some(class)));
            }
            if matches!(cmd, Cmd::Acquire | Cmd::Enter) {
                let mut bad = not_integers();
                bad.extend(out_of_range(Slot::Wait));
                for value in bad {
                    let args = vec![key.clone(), token.clone(), ok_ttl.clone(), b"WAIT".to_vec(), value];
                    cases.push(self.case("fixed bad wait", cmd, args, Some(class)));
                }
            }
        }
        for cmd in CMDS {
            for n in 0..=9 {
                if cmd.valid_arg_counts().contains(&n) {
                    continue;
                }
                let mut args: Vec<Vec<u8>> = vec![pkey.clone(), ptok.clone(), ok_ttl.clone()];
                args.resize(n.max(3), b"1".to_vec());
                args.truncate(n);
                let class = (n > 0).then(|| self.world.class(&pkey));
                cases.push(self.case("fixed arity", cmd, args, class));
            }
        }
        cases
    }
}

// ---------------------------------------------------------------------------

fn show(words: &[&[u8]]) -> Vec<String> {
    words
        .iter()
        .map(|w| {
            if w.len() > 80 {
                format!("<{} bytes: {:?}...>", w.len(), String::from_utf8_lossy(&w[..40]))
            } else {
                format!("{:?}", String::from_utf8_lossy(w))
            }
        })
        .collect()
}

fn seed() -> u64 {
    match std::env::var("LOCK_FUZZ_SEED") {
        Ok(text) => text.trim().parse().expect("LOCK_FUZZ_SEED must be a u64"),
        Err(_) => {
            let nanos = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos() as u64;
            nanos ^ (u64::from(std::process::id()) << 32)
        }
    }
}

/// Checks the whole server log (not just its tail) for a crash or a panic.
fn assert_log_clean(server: &Server) {
    let log = std::fs::read_to_string(server.dir.join("redis.log")).expect("read redis.log");
    for marker in
        ["PANIC", "panicked", "REDIS BUG REPORT", "crashed by signal", "ASSERTION FAILED", "Guru Meditation"]
    {
        assert!(!log.contains(marker), "server log contains {marker:?}:\n{}", server.log());
    }
}

#[test]
fn malformed_calls_get_errors_and_change_nothing() {
    let seed = seed();
    eprintln!("LOCK_FUZZ_SEED={seed} (set it to replay this run)");
    let server = Server::start();
    let mut c = server.conn();
    let world = set_up(&mut c);
    let set_up_at = Instant::now();
    let before = snapshot(&mut c);
    let rejected_before = info_stat(&mut c, "rejected");
    let mut gen = Gen { rng: StdRng::seed_from_u64(seed), world };

    let mut cases = gen.fixed_cases();
    let fixed = cases.len();
    cases.extend((0..RANDOM_CALLS).map(|_| gen.random_case()));

    let mut failures: Vec<String> = Vec::new();
    let mut per_category: BTreeMap<&str, usize> = BTreeMap::new();
    let mut messages: BTreeMap<String, usize> = BTreeMap::new();
    let started = Instant::now();
    for (i, case) in cases.iter().enumerate() {
        *per_category.entry(case.category).or_default() += 1;
        let words: Vec<&[u8]> = case.words.iter().map(Vec::as_slice).collect();
        match run(&mut c, &words) {
            Ok(v) => failures.push(format!(
                "#{i} {} {:?}: expected an error, got {v:?}",
                case.category,
                show(&words)
            )),
            Err(e) if e.is_io_error() || e.is_connection_dropped() || e.is_timeout() => {
                panic!(
                    "#{i} {} {:?}: connection failed: {e}\nlog:\n{}",
                    case.category,
                    show(&words),
                    server.log()
                )
            }
            Err(e) => {
                let code = e.code().unwrap_or("").to_string();
                let detail = e.detail().unwrap_or("").to_string();
                if !case.allowed.contains(&code.as_str()) || detail.contains("internal error") {
                    failures.push(format!(
                        "#{i} {} {:?}: expected {:?}, got {code} {detail}",
                        case.category,
                        show(&words),
                        case.allowed
                    ));
                }
                // Every ERR names the command (Redis' arity text its own
                // way), and no line echoes a long argument whole.
                let name = String::from_utf8_lossy(words[0]).to_lowercase();
                let named = detail.starts_with(&format!("{name}: "))
                    || detail == format!("wrong number of arguments for '{name}' command");
                if (code == "ERR" && !named) || detail.len() > ERROR_LINE_MAX {
                    failures.push(format!(
                        "#{i} {} {:?}: the error does not name {name} or is {} bytes long: {code} {}",
                        case.category,
                        show(&words),
                        detail.len(),
                        detail.chars().take(300).collect::<String>()
                    ));
                }
                // A coarse histogram of the messages (numbers and quoted
                // parts dropped), for the report.
                let head: String = format!("{code} {detail}")
                    .split('\'')
                    .step_by(2)
                    .collect::<Vec<_>>()
                    .join("'…'")
                    .chars()
                    .map(|ch| if ch.is_ascii_digit() { '#' } else { ch })
                    .take(70)
                    .collect();
                *messages.entry(head).or_default() += 1;
            }
        }
    }
    let elapsed = started.elapsed();
    eprintln!(
        "{} malformed calls ({fixed} fixed + {RANDOM_CALLS} random) in {elapsed:?}; by category: {per_category:?}",
        cases.len()
    );
    let mut common_messages: Vec<_> = messages.into_iter().collect();
    common_messages.sort_by_key(|m| std::cmp::Reverse(m.1));
    for (message, count) in common_messages.iter().take(12) {
        eprintln!("  {count:5}  {message}");
    }

    let pong: String = cmd("PING").query(&mut c).expect("PING after the run");
    assert_eq!(pong, "PONG");
    assert!(
        failures.is_empty(),
        "{} of {} malformed calls were not refused properly (seed {seed}):\n{}",
        failures.len(),
        cases.len(),
        failures.iter().take(30).cloned().collect::<Vec<_>>().join("\n")
    );
    assert!(cases.len() >= 5000);

    let after = snapshot(&mut c);
    assert!(
        set_up_at.elapsed() < Duration::from_millis(MAX_TTL as u64 - 2_000),
        "the run outlived the locks' TTL; the comparison below would be void"
    );
    assert_eq!(before, after, "state changed (seed {seed})");
    let rejected = info_stat(&mut c, "rejected") - rejected_before;
    eprintln!("lock_rejected grew by {rejected}");
    assert!(rejected > 0);
    assert_log_clean(&server);
}

// ---------------------------------------------------------------------------
// Inside MULTI/EXEC and Lua, where errors are collected rather than sent one
// by one. A minimal RESP reader on a raw socket keeps every reply of EXEC.

// The payloads are only read through Debug, in failure messages.
#[allow(dead_code)]
#[derive(Debug)]
enum Resp {
    Simple(String),
    Error(String),
    Int(i64),
    Bulk(Option<Vec<u8>>),
    Array(Option<Vec<Resp>>),
}

fn read_resp(r: &mut BufReader<TcpStream>) -> Resp {
    let mut line = Vec::new();
    r.read_until(b'\n', &mut line).expect("read reply");
    assert!(line.ends_with(b"\r\n"), "torn reply line {line:?}");
    let body = String::from_utf8_lossy(&line[1..line.len() - 2]).into_owned();
    match line[0] {
        b'+' => Resp::Simple(body),
        b'-' => Resp::Error(body),
        b':' => Resp::Int(body.parse().unwrap()),
        b'$' => {
            let len: i64 = body.parse().unwrap();
            if len < 0 {
                return Resp::Bulk(None);
            }
            let mut data = vec![0; len as usize + 2];
            r.read_exact(&mut data).unwrap();
            data.truncate(len as usize);
            Resp::Bulk(Some(data))
        }
        b'*' => {
            let len: i64 = body.parse().unwrap();
            if len < 0 {
                return Resp::Array(None);
            }
            Resp::Array(Some((0..len).map(|_| read_resp(r)).collect()))
        }
        other => panic!("unexpected RESP type byte {other:?} in {line:?}"),
    }
}

fn encode(words: &[Vec<u8>]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", words.len()).into_bytes();
    for w in words {
        out.extend_from_slice(format!("${}\r\n", w.len()).as_bytes());
        out.extend_from_slice(w);
        out.extend_from_slice(b"\r\n");
    }
    out
}

#[test]
fn malformed_calls_inside_multi_and_lua_change_nothing() {
    let seed = seed();
    eprintln!("LOCK_FUZZ_SEED={seed} (set it to replay this run)");
    let server = Server::start();
    let mut c = server.conn();
    let world = set_up(&mut c);
    let before = snapshot(&mut c);
    let mut gen = Gen { rng: StdRng::seed_from_u64(seed ^ 0x5eed), world };
    // Module-level refusals only: a core arity error would abort the whole
    // transaction at EXEC (EXECABORT), which is also "nothing changed" but
    // checks less.
    let mut cases = Vec::new();
    while cases.len() < 300 {
        let case = gen.random_case();
        if case.category != "arity" && case.words.iter().all(|w| w.len() < 10_000) {
            cases.push(case);
        }
    }

    let stream = TcpStream::connect(("127.0.0.1", server.port)).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut writer = stream.try_clone().unwrap();
    let mut reader = BufReader::new(stream);
    for batch in cases.chunks(50) {
        let mut out = encode(&[b"MULTI".to_vec()]);
        for case in batch {
            out.extend(encode(&case.words));
        }
        out.extend(encode(&[b"EXEC".to_vec()]));
        writer.write_all(&out).unwrap();
        assert!(matches!(read_resp(&mut reader), Resp::Simple(s) if s == "OK"));
        for case in batch {
            match read_resp(&mut reader) {
                Resp::Simple(s) if s == "QUEUED" => {}
                other => panic!(
                    "{:?} not queued: {other:?}",
                    show(&case.words.iter().map(Vec::as_slice).collect::<Vec<_>>())
                ),
            }
        }
        let Resp::Array(Some(replies)) = read_resp(&mut reader) else {
            panic!("EXEC did not answer an array")
        };
        assert_eq!(replies.len(), batch.len());
        for (case, reply) in batch.iter().zip(replies) {
            let words: Vec<&[u8]> = case.words.iter().map(Vec::as_slice).collect();
            match reply {
                Resp::Error(line) => {
                    let code = line.split(' ').next().unwrap_or("");
                    assert!(
                        case.allowed.contains(&code) && !line.contains("internal error"),
                        "in MULTI {:?}: expected {:?}, got {line}",
                        show(&words),
                        case.allowed
                    );
                }
                other => panic!("in MULTI {:?}: expected an error, got {other:?}", show(&words)),
            }
        }
    }

    // From Lua, with redis.pcall: the error comes back as a value.
    let script = b"return redis.pcall(unpack(ARGV))".to_vec();
    for case in cases.iter().take(100) {
        let mut words = vec![b"EVAL".to_vec(), script.clone(), b"0".to_vec()];
        words.extend(case.words.iter().cloned());
        writer.write_all(&encode(&words)).unwrap();
        match read_resp(&mut reader) {
            Resp::Error(line) => {
                let code = line.split(' ').next().unwrap_or("");
                assert!(
                    case.allowed.contains(&code) && !line.contains("internal error"),
                    "in Lua {:?}: expected {:?}, got {line}",
                    show(&case.words.iter().map(Vec::as_slice).collect::<Vec<_>>()),
                    case.allowed
                );
            }
            other => panic!(
                "in Lua {:?}: expected an error, got {other:?}",
                show(&case.words.iter().map(Vec::as_slice).collect::<Vec<_>>())
            ),
        }
    }

    let pong: String = q(&mut c, &[b"PING"]);
    assert_eq!(pong, "PONG");
    assert_eq!(before, snapshot(&mut c), "state changed (seed {seed})");
    assert_log_clean(&server);
}

// ---------------------------------------------------------------------------
// Every error reply of docs/commands.md, word for word.

/// `expected` with `<n>` standing for a run of digits (a time left, a
/// bound that follows the clock).
fn same_text(expected: &str, got: &str) -> bool {
    match expected.split_once("<n>") {
        None => expected == got,
        Some((head, tail)) => {
            let Some(rest) = got.strip_prefix(head) else { return false };
            let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
            digits > 0 && same_text(tail, &rest[digits..])
        }
    }
}

const NOT_A_LOCK: &str = "WRONGTYPE Operation against a key holding the wrong kind of value (not a lock)";

/// WRONGTYPE for a lock of kind `found` where `wanted` is needed.
fn wrong_kind(found: &str, wanted: &str) -> String {
    format!(
        "WRONGTYPE Operation against a key holding the wrong kind of value (a {found} lock, this command needs a \
         {wanted} lock)"
    )
}

fn words(text: &str) -> Vec<Vec<u8>> {
    text.split(' ').map(|w| w.as_bytes().to_vec()).collect()
}

/// A call refused with `expected` (see [`same_text`]).
struct Documented {
    call: Vec<Vec<u8>>,
    expected: String,
}

fn doc(call: Vec<Vec<u8>>, expected: impl Into<String>) -> Documented {
    Documented { call, expected: expected.into() }
}

/// Runs every call; the ones whose error is not the expected text.
fn mismatches(c: &mut Connection, cases: &[Documented]) -> Vec<String> {
    let mut wrong = Vec::new();
    for case in cases {
        let call: Vec<&[u8]> = case.call.iter().map(Vec::as_slice).collect();
        match run(c, &call) {
            Err(e) if e.is_io_error() || e.is_connection_dropped() => panic!("{:?}: {e}", show(&call)),
            result => {
                let got = err_text(result);
                if !same_text(&case.expected, &got) {
                    wrong.push(format!("{:?}\n     got: {got}\n    want: {}", show(&call), case.expected));
                }
            }
        }
    }
    wrong
}

/// The refusals a node gives whatever the call's arguments: on a held key,
/// a key of the wrong kind, a key that is not a lock. Each command of the
/// reference, each error its row lists (QUARANTINE and the waiters' errors
/// are in the next test; CROSSSLOT and TRYAGAIN, Cluster's, in
/// tests/cluster.rs; the hold bound of LOCK.ENTER, a million entries, in
/// the state machine's unit tests).
fn documented_refusals() -> Vec<Documented> {
    let ttl_range = |cmd: &str, value: &str| {
        format!("ERR lock.{cmd}: ttl-ms {value} is out of range, must be 1..30000 (lock.max-ttl-ms)")
    };
    let not_integer = |cmd: &str, what: &str, value: &str| {
        format!("ERR lock.{cmd}: {what} '{value}' is not an integer or out of range")
    };
    let arity = |cmd: &str| format!("ERR wrong number of arguments for 'lock.{cmd}' command");
    let mut long_token = words("LOCK.ACQUIRE k");
    long_token.push(vec![b'x'; 257]);
    long_token.push(b"100".to_vec());
    let mut huge_option = words("LOCK.ACQUIRE k t 100");
    huge_option.push(vec![b'N'; 10 * 1024 * 1024]);
    let mut binary_option = words("LOCK.ACQUIRE k t 100");
    binary_option.push(b"\x00\r\n'\xff".to_vec());
    let mut long_id = words("LOCK.EXIT r:1 owner-1 ID");
    long_id.push(vec![b'r'; 65]);
    let x64 = "x".repeat(64);
    let many =
        |head: &str| words(&format!("{head}{}", (0..101).map(|i| format!(" k{i}")).collect::<String>()));
    vec![
        // LOCK.ACQUIRE
        doc(words("LOCK.ACQUIRE k t"), arity("acquire")),
        doc(words("LOCK.ACQUIRE k t 1e3"), not_integer("acquire", "ttl-ms", "1e3")),
        doc(words("LOCK.ACQUIRE k t 30001"), ttl_range("acquire", "30001")),
        doc(words("LOCK.ACQUIRE k t 0"), ttl_range("acquire", "0")),
        doc(words("LOCK.ACQUIRE k t 100 WAIT soon"), not_integer("acquire", "timeout-ms", "soon")),
        doc(
            words("LOCK.ACQUIRE k t 100 WAIT 86400001"),
            "ERR lock.acquire: timeout-ms 86400001 is out of range, must be 0..86400000",
        ),
        doc(vec![b"LOCK.ACQUIRE".to_vec(), b"k".to_vec(), vec![], b"100".to_vec()], "ERR lock.acquire: token must not be empty"),
        doc(
            long_token,
            format!("ERR lock.acquire: token '{x64}'...(cut, 257 bytes) is longer than the limit of 256 bytes"),
        ),
        doc(words("LOCK.ACQUIRE k t 100 NX"), "ERR lock.acquire: unknown option 'NX'"),
        doc(huge_option, format!("ERR lock.acquire: unknown option '{}'...(cut, 10485760 bytes)", "N".repeat(64))),
        doc(binary_option, "ERR lock.acquire: unknown option '\\x00\\x0d\\x0a\\x27\\xff'"),
        doc(words("LOCK.ACQUIRE k t 100 WAIT 1 WAIT 2"), "ERR lock.acquire: option WAIT given twice"),
        doc(words("LOCK.ACQUIRE k t 100 WAIT"), "ERR lock.acquire: option WAIT needs a value"),
        doc(words("LOCK.ACQUIRE k t 100 WAIT 1 extra"), "ERR lock.acquire: unknown option 'extra'"),
        doc(words("LOCK.ACQUIRE str t 100"), NOT_A_LOCK),
        doc(words("LOCK.ACQUIRE r:1 t 100"), wrong_kind("reentrant", "plain")),
        // LOCK.RELEASE
        doc(words("LOCK.RELEASE p:1"), arity("release")),
        doc(vec![b"LOCK.RELEASE".to_vec(), b"p:1".to_vec(), vec![]], "ERR lock.release: token must not be empty"),
        doc(words("LOCK.RELEASE list t"), NOT_A_LOCK),
        // LOCK.EXTEND
        doc(words("LOCK.EXTEND p:1 plain-token-1 -5"), ttl_range("extend", "-5")),
        doc(words("LOCK.EXTEND p:1 plain-token-1 5.0"), not_integer("extend", "ttl-ms", "5.0")),
        doc(words("LOCK.EXTEND hash t 100"), NOT_A_LOCK),
        // LOCK.ENTER
        doc(words("LOCK.ENTER p:1 o 100"), wrong_kind("plain", "reentrant")),
        doc(words("LOCK.ENTER r:1 owner-1 07"), not_integer("enter", "ttl-ms", "07")),
        // LOCK.EXIT
        doc(words("LOCK.EXIT r:1"), arity("exit")),
        doc(
            words("LOCK.EXIT r:1 owner-1 ID a|b"),
            "ERR lock.exit: request id 'a|b' must be 1 to 64 printable ASCII characters without '|'",
        ),
        doc(
            long_id,
            format!(
                "ERR lock.exit: request id '{}'...(cut, 65 bytes) must be 1 to 64 printable ASCII characters \
                 without '|'",
                "r".repeat(64)
            ),
        ),
        doc(words("LOCK.EXIT r:1 owner-1 ID a ID b"), "ERR lock.exit: option ID given twice"),
        doc(words("LOCK.EXIT r:1 owner-1 ID"), "ERR lock.exit: option ID needs a value"),
        doc(words("LOCK.EXIT r:1 owner-1 NX"), "ERR lock.exit: unknown option 'NX'"),
        doc(words("LOCK.EXIT p:1 plain-token-1"), wrong_kind("plain", "reentrant")),
        doc(words("LOCK.EXIT zset o"), NOT_A_LOCK),
        // LOCK.FENCE
        doc(words("LOCK.FENCE p:1 plain-token-1"), arity("fence")),
        doc(words("LOCK.FENCE p:1 plain-token-1 x"), not_integer("fence", "floor", "x")),
        doc(words("LOCK.FENCE p:1 plain-token-1 -1"), "ERR lock.fence: floor -1 is out of range, must be 0..<n>"),
        doc(
            words("LOCK.FENCE p:1 plain-token-1 9223372036854775807"),
            "ERR lock.fence: floor 9223372036854775807 is out of range, must be 0..<n>",
        ),
        doc(words("LOCK.FENCE set t 1"), NOT_A_LOCK),
        // LOCK.RENEW
        doc(words("LOCK.RENEW t 100"), arity("renew")),
        doc(words("LOCK.RENEW plain-token-1 0 p:1"), ttl_range("renew", "0")),
        doc(many("LOCK.RENEW t 100"), "ERR lock.renew: 101 keys, more than the limit of 100 (lock.max-renew-keys)"),
        doc(words("LOCK.RENEW plain-token-1 100 p:1 str"), format!("{NOT_A_LOCK} (key #2 of the set, 'str')")),
        // LOCK.CHECK
        doc(words("LOCK.CHECK p:1"), arity("check")),
        doc(
            words("LOCK.CHECK p:1 -1"),
            "ERR lock.check: fencing-token -1 is out of range, must be 0..9223372036854775807",
        ),
        doc(words("LOCK.CHECK p:1 abc"), not_integer("check", "fencing-token", "abc")),
        doc(words("LOCK.CHECK set 1"), NOT_A_LOCK),
        // LOCK.SHARED, LOCK.EXCLUSIVE
        doc(words("LOCK.SHARED p:1 t 100"), wrong_kind("plain", "shared")),
        doc(words("LOCK.SHARED m:1 t 100"), wrong_kind("semaphore", "shared")),
        doc(words("LOCK.SHARED s:1 t 100 WAIT"), "ERR lock.shared: option WAIT needs a value"),
        doc(
            words("LOCK.SHARED w:1 writer 100"),
            "ERR lock.shared: this token already holds the lock in write mode; release it first",
        ),
        doc(
            words("LOCK.EXCLUSIVE s:1 reader-2 100"),
            "ERR lock.exclusive: this token already holds the lock in read mode; release it first",
        ),
        doc(words("LOCK.EXCLUSIVE r:1 t 100"), wrong_kind("reentrant", "shared")),
        doc(words("LOCK.EXCLUSIVE s:1 t +5"), not_integer("exclusive", "ttl-ms", "+5")),
        // LOCK.SEMAPHORE
        doc(
            words("LOCK.SEMAPHORE m:1 t 2 100"),
            "ERR lock.semaphore: this semaphore has 3 permits, not 2 (the count is fixed while it has holders)",
        ),
        doc(words("LOCK.SEMAPHORE m:1 t 3x 100"), not_integer("semaphore", "permits", "3x")),
        doc(words("LOCK.SEMAPHORE m:1 t 1001 100"), "ERR lock.semaphore: permits 1001 is out of range, must be 1..1000"),
        doc(words("LOCK.SEMAPHORE m:1 t 0 100"), "ERR lock.semaphore: permits 0 is out of range, must be 1..1000"),
        doc(words("LOCK.SEMAPHORE s:1 t 3 100"), wrong_kind("shared", "semaphore")),
        // LOCK.MACQUIRE
        doc(words("LOCK.MACQUIRE t 100 x a"), not_integer("macquire", "numkeys", "x")),
        doc(
            words("LOCK.MACQUIRE t 100 101 a"),
            "ERR lock.macquire: numkeys 101 is out of range, must be 1..100 (lock.max-multi-keys)",
        ),
        doc(words("LOCK.MACQUIRE t 100 3 a b"), arity("macquire")),
        doc(words("LOCK.MACQUIRE t 0 1 a"), ttl_range("macquire", "0")),
        doc(words("LOCK.MACQUIRE t 100 2 a a"), "ERR lock.macquire: key #2 'a' appears twice in the set"),
        doc(
            words("LOCK.MACQUIRE t 100 1 a MODES READ"),
            "ERR lock.macquire: unknown mode 'READ' (PLAIN, SHARED or EXCLUSIVE)",
        ),
        doc(
            words("LOCK.MACQUIRE t 100 3 a b c MODES PLAIN SHARED"),
            "ERR lock.macquire: MODES takes one mode for every key or one per key: 2 modes for 3 keys",
        ),
        doc(words("LOCK.MACQUIRE t 100 1 a MODES"), "ERR lock.macquire: option MODES needs a value"),
        doc(words("LOCK.MACQUIRE t 100 1 a WAIT 1 WAIT 1"), "ERR lock.macquire: option WAIT given twice"),
        doc(words("LOCK.MACQUIRE t 100 2 a str"), format!("{NOT_A_LOCK} (key #2 of the set, 'str')")),
        doc(
            words("LOCK.MACQUIRE t 100 2 a r:1"),
            format!("{} (key #2 of the set, 'r:1')", wrong_kind("reentrant", "plain")),
        ),
        doc(
            words("LOCK.MACQUIRE t 100 1 m:1"),
            format!("{} (key #1 of the set, 'm:1')", wrong_kind("semaphore", "plain")),
        ),
        doc(
            words("LOCK.MACQUIRE reader-2 100 1 s:1 MODES EXCLUSIVE"),
            "ERR lock.macquire: this token already holds the lock in read mode; release it first (key #1 of the \
             set, 's:1')",
        ),
        // LOCK.MRELEASE
        doc(words("LOCK.MRELEASE t"), arity("mrelease")),
        doc(vec![b"LOCK.MRELEASE".to_vec(), vec![], b"p:1".to_vec()], "ERR lock.mrelease: token must not be empty"),
        doc(many("LOCK.MRELEASE t"), "ERR lock.mrelease: 101 keys, more than the limit of 100 (lock.max-multi-keys)"),
        doc(words("LOCK.MRELEASE plain-token-1 p:1 list"), format!("{NOT_A_LOCK} (key #2 of the set, 'list')")),
        // LOCK.WAITERS
        doc(words("LOCK.WAITERS"), arity("waiters")),
        doc(words("LOCK.WAITERS p:1 COUNT 0"), "ERR lock.waiters: count 0 is out of range, must be 1..1000"),
        doc(words("LOCK.WAITERS p:1 COUNT ten"), not_integer("waiters", "count", "ten")),
        doc(words("LOCK.WAITERS p:1 COUNT 1 COUNT 2"), "ERR lock.waiters: option COUNT given twice"),
        doc(words("LOCK.WAITERS p:1 COUNT"), "ERR lock.waiters: option COUNT needs a value"),
        doc(words("LOCK.WAITERS p:1 TOP 1"), "ERR lock.waiters: unknown option 'TOP'"),
        doc(words("LOCK.WAITERS str"), NOT_A_LOCK),
        // LOCK.CONTENDED
        doc(words("LOCK.CONTENDED COUNT 17"), "ERR lock.contended: count 17 is out of range, must be 1..16"),
        doc(words("LOCK.CONTENDED COUNT 1 COUNT 2"), "ERR lock.contended: option COUNT given twice"),
        doc(words("LOCK.CONTENDED LIMIT"), "ERR lock.contended: unknown option 'LIMIT'"),
        // LOCK.INFO
        doc(words("LOCK.INFO"), arity("info")),
        doc(words("LOCK.INFO p:1 x"), arity("info")),
        doc(words("LOCK.INFO str"), NOT_A_LOCK),
        doc(
            words("LOCK.INFO far"),
            "WRONGTYPE Operation against a key holding the wrong kind of value (a lock value this module could not \
             have written: its deadline is <n> ms ahead, more than lock.max-ttl-ms + lock.clock-jump-tolerance-ms \
             = 90000 ms; LOCK.REVOKE removes it)",
        ),
        // LOCK.REVOKE
        doc(words("LOCK.REVOKE"), arity("revoke")),
        doc(words("LOCK.REVOKE str"), NOT_A_LOCK),
    ]
}

#[test]
fn every_documented_error_reads_as_documented_and_changes_nothing() {
    let server = Server::start();
    let mut c = server.conn();
    set_up(&mut c);
    // A write hold, and a lock value no grant could have written (its
    // deadline a day ahead).
    let _: i64 = q(&mut c, &[b"LOCK.EXCLUSIVE", b"w:1", b"writer", b"30000"]);
    let far = format!("LK1|P|12|{}|1|x", now_ms() + 86_400_000);
    let _: String = q(&mut c, &[b"SET", b"far", far.as_bytes()]);
    let before = snapshot(&mut c);
    let rejected = info_stat(&mut c, "rejected");

    let cases = documented_refusals();
    let wrong = mismatches(&mut c, &cases);
    assert!(wrong.is_empty(), "{} of {} errors differ:\n{}", wrong.len(), cases.len(), wrong.join("\n"));

    // Refusals of the node's settings: too many waiters, evictable keys.
    let config = |c: &mut Connection, name: &str, value: &str| {
        let _: String = q(c, &[b"CONFIG", b"SET", name.as_bytes(), value.as_bytes()]);
    };
    // From here the calls meet a held key: a refusal there also counts as
    // contention (`lock_contended`, by design), so the state is compared
    // before them, and after them without that counter.
    assert_eq!(before, snapshot(&mut c), "a refused call changed something");
    config(&mut c, "lock.max-waiters", "0");
    let waiters = [
        doc(
            words("LOCK.ACQUIRE p:1 other 100 WAIT 100"),
            "MAXWAITERS too many clients waiting for this lock (lock.max-waiters is 0)",
        ),
        doc(
            words("LOCK.MACQUIRE other 100 2 a p:1 WAIT 100"),
            "MAXWAITERS too many clients waiting for this lock (lock.max-waiters is 0)",
        ),
    ];
    let wrong = mismatches(&mut c, &waiters);
    config(&mut c, "lock.max-waiters", "1000");
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    config(&mut c, "maxmemory", "1gb");
    config(&mut c, "maxmemory-policy", "allkeys-lru");
    let evictable = "EVICTION maxmemory-policy allkeys-lru with maxmemory set can evict lock keys, so new locks are \
                     refused: set maxmemory-policy noeviction (or maxmemory 0), or lock.eviction-mode quarantine on \
                     an instance shared with a cache";
    let evicting = [
        doc(words("LOCK.ACQUIRE new t 100"), evictable),
        doc(words("LOCK.MACQUIRE t 100 2 new other"), format!("{evictable} (key #1 of the set, 'new')")),
    ];
    let wrong = mismatches(&mut c, &evicting);
    config(&mut c, "maxmemory-policy", "noeviction");
    config(&mut c, "maxmemory", "0");
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));

    let mut after = snapshot(&mut c);
    let mut before = before;
    after.stats.remove("lock_contended");
    before.stats.remove("lock_contended");
    assert_eq!(before, after, "a refused call changed something");
    let counted = info_stat(&mut c, "rejected") - rejected;
    assert!(counted >= cases.len() as i64 - 40, "refusals are counted: {counted}");
    assert_log_clean(&server);
}

/// The QUARANTINE refusals (the node's, a key's), and the errors a waiter
/// gets when it is answered later: named after the command it waits in,
/// and, for a set, the key.
#[test]
fn quarantine_and_waiter_errors_read_as_documented() {
    let server = Server::start();
    let mut c = server.conn();
    let _: i64 = q(&mut c, &[b"LOCK.ACQUIRE", b"held", b"t", b"30000"]);
    // A lock removed behind the module's back quarantines its key.
    let _: i64 = q(&mut c, &[b"DEL", b"held"]);
    let key =
        "QUARANTINE this key's lock was removed or changed by another command (del) while it may have been \
               held; free a lock on purpose with LOCK.REVOKE, refusing new locks on this key for <n> ms";
    let wrong = mismatches(
        &mut c,
        &[
            doc(words("LOCK.ACQUIRE held t2 100"), key),
            doc(words("LOCK.MACQUIRE t2 100 2 free held"), format!("{key} (key #2 of the set, 'held')")),
        ],
    );
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));

    // A waiter for a set whose held key is overwritten by another command:
    // the key now holds something that is not a lock, so the waiter is
    // answered WRONGTYPE naming the key, as a new call would be, whichever
    // of its keys' timers fires first (the free key's +1 ms one, or the
    // overwritten key's); the key is quarantined too (the lock may have
    // been forgotten), which shows once the value is gone.
    let _: i64 = q(&mut c, &[b"LOCK.ACQUIRE", b"b", b"holder", b"30000"]);
    let mut waiter = server.conn();
    let mut waits = cmd("LOCK.MACQUIRE");
    waits.arg("w").arg(1000).arg(2).arg("a").arg("b").arg("WAIT").arg(5000);
    waiter.send_packed_command(&waits.get_packed_command()).unwrap();
    wait_until(Duration::from_secs(5), "the waiter queued", || info_stat(&mut c, "waiters") == 1);
    let _: String = q(&mut c, &[b"SET", b"b", b"not a lock any more"]);
    let answer = err_text(waiter.recv_response().and_then(Value::extract_error));
    let not_a_lock =
        "WRONGTYPE Operation against a key holding the wrong kind of value (not a lock) (key #2 of \
                      the set, 'b')";
    assert!(same_text(not_a_lock, &answer), "{answer:?} is not {not_a_lock:?}");
    let _: i64 = q(&mut c, &[b"DEL", b"b"]);
    let overwritten = key.replace("(del)", "(set)");
    let wrong = mismatches(&mut c, &[doc(words("LOCK.ACQUIRE b t2 100"), overwritten)]);
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));

    // The node's quarantine after a promotion (a master made a replica of
    // nothing and back).
    let _: String = q(&mut c, &[b"CONFIG", b"SET", b"lock.quarantine-ms", b"60000"]);
    let _: String = q(&mut c, &[b"REPLICAOF", b"127.0.0.1", b"1"]);
    let _: String = q(&mut c, &[b"REPLICAOF", b"NO", b"ONE"]);
    wait_until(Duration::from_secs(5), "quarantine", || info_stat(&mut c, "quarantine") == 1);
    let promoted = "QUARANTINE replica promoted to master, refusing new locks for <n> ms";
    let wrong = mismatches(
        &mut c,
        &[
            doc(words("LOCK.ACQUIRE fresh t 100"), promoted),
            doc(words("LOCK.SEMAPHORE fresh t 2 100 WAIT 100"), promoted),
            doc(words("LOCK.MACQUIRE t 100 1 fresh"), format!("{promoted} (key #1 of the set, 'fresh')")),
        ],
    );
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    assert_log_clean(&server);
}
