//! The history of one run, on ONE monotonic clock (`Instant`s as offsets
//! from the run's start), and the fenced registers the clients write under
//! the lock.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Mutex;
use std::time::{Duration, Instant};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Granted by a majority with validity left: the client holds the lock.
    Ok,
    /// Refused, and every node answered: nothing is held anywhere.
    Fail,
    /// Not granted, but some nodes did not answer: a partial grant may stay
    /// on them until its TTL (never used by the client).
    Unknown,
}

impl Outcome {
    pub fn name(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::Fail => "fail",
            Outcome::Unknown => "unknown",
        }
    }
}

/// What the register answered to one read or write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    Accepted,
    Rejected,
}

/// What a grant asked for (which holders it must exclude).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Want {
    /// The plain lock (`try_acquire`, `LOCK.ACQUIRE`): alone.
    Plain,
    /// `LOCK.ENTER` (one op is one owner's whole session, from its first
    /// entry to its last exit): alone between owners.
    Reentrant,
    /// A read hold of a read-write lock: shared with readers.
    Read,
    /// A write hold of a read-write lock: alone.
    Write,
    /// One of this many permits of a semaphore.
    Permit(u32),
}

impl Want {
    /// Holds the resource alone (no other holder of any mode at once).
    pub fn alone(self) -> bool {
        matches!(self, Want::Plain | Want::Reentrant | Want::Write)
    }

    /// Increments the resource's register (readers and permit holders,
    /// which share, do not).
    pub fn writes(self) -> bool {
        self.alone()
    }

    pub fn name(self) -> String {
        match self {
            Want::Plain => "plain".into(),
            Want::Reentrant => "reentrant".into(),
            Want::Read => "read".into(),
            Want::Write => "write".into(),
            Want::Permit(permits) => format!("permit/{permits}"),
        }
    }
}

/// One acquisition attempt and, when it succeeded, what the client did
/// under the lock.
#[derive(Clone, Debug)]
pub struct Op {
    pub client: usize,
    pub resource: String,
    pub want: Want,
    pub invoke: Duration,
    pub complete: Duration,
    pub outcome: Outcome,
    /// The random lock token (the lock's value on the nodes).
    pub token: Option<String>,
    /// The fencing token (this project only).
    pub fence: Option<u64>,
    /// The end of the lease: the last of `leases`.
    pub validity_end: Option<Duration>,
    /// Every lease the holder knew of, in order: (when it learned of it,
    /// until when the lock is valid). The grant's first, then extensions.
    pub leases: Vec<(Duration, Duration)>,
    /// When the last call that set the lock's TTL (the grant, an extension,
    /// a re-entry) was sent: every node that granted it keeps the lock until
    /// at least this + TTL.
    pub renewed_invoke: Duration,
    pub cs_start: Option<Duration>,
    pub cs_end: Option<Duration>,
    pub read: Option<(Access, u64)>,
    pub write: Option<Access>,
    /// When the write was made (accepted or not).
    pub write_at: Option<Duration>,
    /// The write was skipped: too little validity left before it.
    pub aborted: bool,
    /// The holder was paused (a GC pause) past its validity before writing.
    pub paused: bool,
    /// The holder crashed: it never released (its lock runs out).
    pub abandoned: bool,
    /// When the client learned that the lock was lost, and why.
    pub lost: Option<(Duration, String)>,
    /// When the client started to release (it stopped using the resource).
    pub release: Option<Duration>,
    pub error: Option<String>,
}

impl Op {
    /// An attempt of `client` on `resource`, invoked at `invoke`; the rest
    /// is filled in as it completes.
    pub fn new(client: usize, resource: &str, want: Want, invoke: Duration) -> Op {
        Op {
            client,
            resource: resource.to_string(),
            want,
            invoke,
            complete: invoke,
            outcome: Outcome::Ok,
            token: None,
            fence: None,
            validity_end: None,
            leases: Vec::new(),
            renewed_invoke: invoke,
            cs_start: None,
            cs_end: None,
            read: None,
            write: None,
            write_at: None,
            aborted: false,
            paused: false,
            abandoned: false,
            lost: None,
            release: None,
            error: None,
        }
    }

    /// The entry of another key of the same set as `self`: the set's grant,
    /// leases and release, that key's name and register accesses.
    pub fn with_accesses_of(&self, key: Op) -> Op {
        Op {
            resource: key.resource,
            cs_start: key.cs_start,
            cs_end: key.cs_end,
            read: key.read,
            write: key.write,
            write_at: key.write_at,
            ..self.clone()
        }
    }

    /// Records a lease learned at `at`, valid until `until`.
    pub fn lease(&mut self, at: Duration, until: Duration) {
        self.leases.push((at, until));
        self.validity_end = Some(self.validity_end.map_or(until, |end| end.max(until)));
    }

    /// The window in which this holder may use the resource: from the
    /// grant to the end of its validity, or to its release if earlier.
    pub fn window(&self) -> Option<(Duration, Duration)> {
        let end = self.validity_end?;
        let end = self.release.map_or(end, |r| r.min(end));
        Some((self.complete, end))
    }

    /// Until when the holder knew itself valid at `at`: the latest lease it
    /// had learned of by then.
    pub fn valid_until_at(&self, at: Duration) -> Option<Duration> {
        self.leases.iter().filter(|(learned, _)| *learned <= at).map(|(_, until)| *until).max()
    }

    /// The lock ran out without a release (the holder crashed): lock-delay
    /// applies after it. A release sent after the holder's own validity
    /// does not count: that validity is a lower bound, and the release may
    /// still have found the lock live on the node and freed it.
    pub fn expired_unreleased(&self) -> bool {
        self.validity_end.is_some() && self.release.is_none()
    }

    pub fn tsv(&self) -> String {
        let ms = |d: Option<Duration>| d.map_or("-".to_string(), |d| format!("{:.3}", d.as_secs_f64() * 1e3));
        format!(
            "{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}",
            self.client,
            self.resource,
            self.want.name(),
            ms(Some(self.invoke)),
            ms(Some(self.complete)),
            self.outcome.name(),
            self.token.as_deref().unwrap_or("-"),
            self.fence.map_or("-".to_string(), |f| f.to_string()),
            ms(self.validity_end),
            self.leases.len(),
            ms(self.cs_start),
            ms(self.cs_end),
            self.read.map_or("-".to_string(), |(a, v)| format!("{a:?}:{v}")),
            self.write.map_or(if self.aborted { "aborted".into() } else { "-".into() }, |a| {
                format!("{a:?}@{}", ms(self.write_at))
            }),
            match (self.paused, self.abandoned) {
                (true, _) => "paused",
                (_, true) => "abandoned",
                _ => "-",
            },
            self.lost.as_ref().map_or("-".to_string(), |(at, why)| format!("{}:{why}", ms(Some(*at)))),
            ms(self.release),
            self.error.as_deref().unwrap_or("-"),
        )
    }
}

/// A violation found while the run went on, outside the history's ops
/// (the misuse client's, a node that died, a lock left behind).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Found {
    /// A malformed call or a foreign token's call was not refused.
    Misuse,
    /// A node's process died without a fault killing it.
    NodeDied,
    /// A lock stayed on a node after its holder's release had settled.
    LeftBehind,
    /// A probe's lock was not granted again within the liveness bound.
    Liveness,
    /// A node granted a new lock while its `maxmemory-policy` could evict
    /// lock keys (`lock.eviction-mode refuse` must refuse it).
    Guard,
}

/// A fault: injected at `start`, healed at `end`.
#[derive(Clone, Debug)]
pub struct Event {
    pub name: String,
    pub detail: String,
    pub start: Duration,
    pub end: Duration,
}

pub struct Recorder {
    pub t0: Instant,
    ops: Mutex<Vec<Op>>,
    events: Mutex<Vec<Event>>,
    notes: Mutex<Vec<String>>,
    found: Mutex<Vec<(Found, Duration, String)>>,
}

impl Default for Recorder {
    fn default() -> Recorder {
        Recorder::new()
    }
}

impl Recorder {
    pub fn new() -> Recorder {
        Recorder {
            t0: Instant::now(),
            ops: Mutex::default(),
            events: Mutex::default(),
            notes: Mutex::default(),
            found: Mutex::default(),
        }
    }

    pub fn now(&self) -> Duration {
        self.t0.elapsed()
    }

    pub fn at(&self, instant: Instant) -> Duration {
        instant.saturating_duration_since(self.t0)
    }

    pub fn op(&self, op: Op) {
        self.ops.lock().unwrap_or_else(|p| p.into_inner()).push(op);
    }

    pub fn event(&self, name: &str, detail: String, start: Duration, end: Duration) {
        self.events.lock().unwrap_or_else(|p| p.into_inner()).push(Event {
            name: name.to_string(),
            detail,
            start,
            end,
        });
    }

    pub fn note(&self, text: String) {
        self.notes.lock().unwrap_or_else(|p| p.into_inner()).push(text);
    }

    /// Records a violation seen during the run.
    pub fn found(&self, what: Found, detail: String) {
        let at = self.now();
        self.found.lock().unwrap_or_else(|p| p.into_inner()).push((what, at, detail));
    }

    pub fn found_all(&self) -> Vec<(Found, Duration, String)> {
        self.found.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    pub fn ops(&self) -> Vec<Op> {
        self.ops.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    pub fn events(&self) -> Vec<Event> {
        let mut events = self.events.lock().unwrap_or_else(|p| p.into_inner()).clone();
        events.sort_by_key(|e| e.start);
        events
    }

    pub fn notes(&self) -> Vec<String> {
        self.notes.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// When the last fault healed (zero if none was injected).
    pub fn last_heal(&self) -> Duration {
        self.events.lock().unwrap_or_else(|p| p.into_inner()).iter().map(|e| e.end).max().unwrap_or_default()
    }

    /// True when every one of `resources` was granted (complete) after `since`.
    pub fn all_granted_after(&self, resources: &[String], since: Duration) -> bool {
        let ops = self.ops.lock().unwrap_or_else(|p| p.into_inner());
        resources.iter().all(|r| {
            ops.iter().any(|op| op.outcome == Outcome::Ok && &op.resource == r && op.complete > since)
        })
    }

    pub fn dump(&self) -> String {
        let mut text = String::from(
            "# client\tresource\twant\tinvoke_ms\tcomplete_ms\tresult\ttoken\tfence\tvalidity_end_ms\t\
             leases\tcs_start_ms\tcs_end_ms\tread\twrite\tpaused\tlost\trelease_ms\terror\n",
        );
        for op in self.ops() {
            text.push_str(&op.tsv());
            text.push('\n');
        }
        for (what, at, detail) in self.found_all() {
            let _ = writeln!(text, "# found {what:?} at {:.3}: {detail}", at.as_secs_f64() * 1e3);
        }
        for e in self.events() {
            let _ = writeln!(
                text,
                "# event {} [{:.3} .. {:.3}] {}",
                e.name,
                e.start.as_secs_f64() * 1e3,
                e.end.as_secs_f64() * 1e3,
                e.detail
            );
        }
        text
    }
}

/// One access to a register, in the register's own order.
#[derive(Clone, Debug)]
pub struct RegEntry {
    pub at: Duration,
    pub client: usize,
    pub token: Option<u64>,
    /// `None` for a read; for a write, the value the writer read before.
    pub base: Option<u64>,
    pub accepted: bool,
    pub before: u64,
    pub after: u64,
}

/// The protected resource: a counter. When fenced, it accepts a read or a
/// write only with a fencing token at least the highest it has seen (on a
/// read or a write), and an accepted access raises that highest. Fencing
/// reads too is what makes read-modify-write safe: a newer holder's read
/// shuts out an older holder's pending write. Unfenced (the classic recipe,
/// which has no token), it accepts everything.
#[derive(Default)]
pub struct Register {
    pub fenced: bool,
    pub value: u64,
    pub highest: u64,
    pub log: Vec<RegEntry>,
}

impl Register {
    fn admit(&mut self, token: Option<u64>) -> bool {
        if !self.fenced {
            return true;
        }
        match token {
            Some(t) if t >= self.highest => {
                self.highest = t;
                true
            }
            _ => false,
        }
    }
}

/// The registers of a run, one per resource, created on first use.
pub struct Registers {
    fenced: bool,
    map: Mutex<BTreeMap<String, Register>>,
}

impl Registers {
    pub fn new(fenced: bool) -> Registers {
        Registers { fenced, map: Mutex::default() }
    }

    fn with<T>(&self, resource: &str, f: impl FnOnce(&mut Register) -> T) -> T {
        let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        let register = map
            .entry(resource.to_string())
            .or_insert_with(|| Register { fenced: self.fenced, ..Register::default() });
        f(register)
    }

    pub fn read(&self, resource: &str, at: Duration, client: usize, token: Option<u64>) -> Option<u64> {
        self.with(resource, |r| {
            let accepted = r.admit(token);
            let value = r.value;
            r.log.push(RegEntry { at, client, token, base: None, accepted, before: value, after: value });
            accepted.then_some(value)
        })
    }

    /// Writes `base + 1`; true when accepted.
    pub fn write(&self, resource: &str, at: Duration, client: usize, token: Option<u64>, base: u64) -> bool {
        self.with(resource, |r| {
            let accepted = r.admit(token);
            let before = r.value;
            if accepted {
                r.value = base + 1;
            }
            r.log.push(RegEntry { at, client, token, base: Some(base), accepted, before, after: r.value });
            accepted
        })
    }

    /// (resource, final value, log) for every register.
    pub fn snapshot(&self) -> Vec<(String, u64, Vec<RegEntry>)> {
        let map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        map.iter().map(|(name, r)| (name.clone(), r.value, r.log.clone())).collect()
    }
}
