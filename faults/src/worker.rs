//! The clients: one lock implementation behind one interface (this
//! project's quorum client, or a contrast recipe), and the worker that
//! acquires, does a read-modify-write increment on the resource's register
//! under the lock, releases, and records all of it.
//!
//! `Locker` is the only place that calls the quorum client's API: a change
//! of the client's entry points touches this file only.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use redlock_client::{Config, Error, Guard, Mode, Redlock, Status, Watchdog};
use tokio::sync::oneshot;

use super::classic::{Classic, Recipe};
use super::history::{Access, Op, Outcome, Recorder, Registers, Want};

/// A worker writes only with at least this much validity left; less, and
/// it gives the write up (a careful client). A paused holder skips the
/// check: the pause falls between the check and the write.
pub const WRITE_MARGIN: Duration = Duration::from_millis(100);

/// Under `Work::Long`, the workers with an id below this hold long.
pub const LONG_WORKERS: usize = 2;

/// One read of a read-write lock in this many walks away (a reader that
/// crashed: never released), so that writers come after readers expired,
/// their holds still stored.
pub const READS_WALKING_AWAY: u32 = 8;

/// Which lock implementation a run tests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Impl {
    /// This project: the quorum client over module nodes.
    Module,
    /// The classic Redlock over plain Redis (the contrast).
    Classic,
    /// A semaphore taken at a plain majority of module nodes (the contrast
    /// for the semaphore quorum).
    MajoritySemaphore,
}

impl Impl {
    pub fn name(self) -> &'static str {
        match self {
            Impl::Module => "module",
            Impl::Classic => "classic",
            Impl::MajoritySemaphore => "majority-semaphore",
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Impl::Module => "this project",
            Impl::Classic => "classic Redlock",
            Impl::MajoritySemaphore => "semaphore at a majority",
        }
    }
}

pub enum Locker {
    Module(Redlock),
    Classic(Classic),
}

pub struct Held {
    pub token: String,
    pub fence: Option<u64>,
    pub deadline: Instant,
    guard: Option<Guard>,
}

impl Held {
    /// Validity left now: the latest deadline (the watchdog's renewals move
    /// it), zero once the guard reported the lock lost.
    pub fn remaining(&self) -> Duration {
        match &self.guard {
            Some(guard) => guard.validity_remaining(),
            None => self.deadline.saturating_duration_since(Instant::now()),
        }
    }
}

/// What a holder's guard says now.
pub enum Standing {
    /// Valid until this instant (a renewal may have moved it).
    Valid {
        deadline: Instant,
        since: Instant,
    },
    Lost(String),
}

fn mode(want: Want) -> Mode {
    match want {
        Want::Plain | Want::Reentrant => Mode::Plain,
        Want::Read => Mode::Read,
        Want::Write => Mode::Write,
        Want::Permit(permits) => Mode::Permit { permits },
    }
}

impl Locker {
    pub async fn connect(imp: Impl, urls: &[String], config: Config) -> Locker {
        match imp {
            Impl::Module => Locker::Module(Redlock::connect(urls, config).await.expect("connect")),
            Impl::Classic => Locker::Classic(Classic::connect(urls, config, Recipe::SetNx).await),
            Impl::MajoritySemaphore => {
                // The permit count comes with each request; 2 is the only
                // one the semaphore scenario uses.
                Locker::Classic(
                    Classic::connect(urls, config, Recipe::MajoritySemaphore { permits: 2 }).await,
                )
            }
        }
    }

    /// Extensions and the watchdog exist only in this project's client.
    pub fn renews(&self) -> bool {
        matches!(self, Locker::Module(_))
    }

    /// One attempt on `resources` (this project's client also takes a set
    /// of several, all or nothing, with one token; the contrasts take one).
    pub async fn try_acquire(
        &self,
        resources: &[&str],
        want: Want,
        ttl: Duration,
    ) -> Result<Held, (Outcome, String)> {
        match self {
            Locker::Module(redlock) => match acquire_fenced(redlock, resources, mode(want), ttl).await {
                Ok((guard, fence)) => Ok(Held {
                    token: guard.token().to_string(),
                    fence: Some(fence),
                    deadline: guard.lease().deadline.into_std(),
                    guard: Some(guard),
                }),
                Err(error) => {
                    let definite = match &error {
                        Error::Contended { .. } => true,
                        Error::NoQuorum { tally, .. } => {
                            tally.timed_out + tally.unreachable + tally.failed == 0
                        }
                        _ => false,
                    };
                    let outcome = if definite { Outcome::Fail } else { Outcome::Unknown };
                    Err((outcome, error.to_string()))
                }
            },
            Locker::Classic(classic) => {
                let [resource] = resources else { panic!("the contrasts take one resource at a time") };
                match classic.try_acquire(resource, ttl).await {
                    Ok(lock) => {
                        Ok(Held { token: lock.token, fence: None, deadline: lock.deadline, guard: None })
                    }
                    Err((definite, why)) => {
                        Err((if definite { Outcome::Fail } else { Outcome::Unknown }, why))
                    }
                }
            }
        }
    }

    /// Extends by hand: the new lease's (start, deadline), or why not.
    pub async fn extend(&self, held: &mut Held, ttl: Duration) -> Result<(Instant, Instant), String> {
        let Some(guard) = &held.guard else { return Err("this recipe cannot extend".into()) };
        guard.extend(ttl).await.map_err(|e| e.to_string())?;
        let lease = guard.lease();
        held.deadline = lease.deadline.into_std();
        Ok((lease.start.into_std(), held.deadline))
    }

    pub fn start_watchdog(&self, held: &mut Held) {
        if let Some(guard) = &mut held.guard {
            guard.start_watchdog(Watchdog::default());
        }
    }

    /// The holder's standing now, as its guard sees it.
    pub fn standing(&self, held: &Held) -> Standing {
        match &held.guard {
            Some(guard) => match guard.status() {
                Status::Held { deadline, .. } => {
                    // The client runs on tokio's clock; the history on std's.
                    let deadline = deadline.into_std();
                    if Instant::now() >= deadline {
                        Standing::Lost("expired".into())
                    } else {
                        Standing::Valid { deadline, since: guard.lease().start.into_std() }
                    }
                }
                Status::Lost(reason) => Standing::Lost(reason.to_string()),
                Status::Released => Standing::Lost("released".into()),
            },
            None if Instant::now() < held.deadline => {
                Standing::Valid { deadline: held.deadline, since: held.deadline }
            }
            None => Standing::Lost("expired".into()),
        }
    }

    /// How many nodes answer a harmless command now (`LOCK.INFO` or
    /// `PING`); a call on a broken connection drops it, the next reopens it.
    pub async fn reachable(&self) -> usize {
        match self {
            Locker::Module(redlock) => {
                redlock.info("reachable").await.iter().filter(|n| n.info.is_ok()).count()
            }
            Locker::Classic(classic) => classic.ping_all().await,
        }
    }

    pub fn nodes(&self) -> usize {
        match self {
            Locker::Module(redlock) => redlock.node_urls().len(),
            Locker::Classic(classic) => classic.nodes(),
        }
    }

    pub async fn release(&self, resource: &str, held: Held) {
        match (self, held.guard) {
            (Locker::Module(_), Some(guard)) => {
                let _ = guard.release().await;
            }
            (Locker::Classic(classic), _) => {
                classic.release_all(resource, &held.token).await;
            }
            (Locker::Module(redlock), None) => {
                let _ = redlock.release(resource, &held.token, Mode::Plain).await;
            }
        }
    }

    /// A crashed holder: nothing is released, the lock runs out.
    pub fn abandon(&self, held: Held) {
        if let Some(guard) = held.guard {
            let _ = guard.detach();
        }
    }

    /// Waits (bounded) until the calls a round left running in the
    /// background have ended (this project's client only).
    pub async fn settle(&self) {
        if let Locker::Module(redlock) = self {
            redlock.settle().await;
        }
    }
}

/// One attempt with the fencing round (the quorum client runs it when the
/// token is asked for; every scenario writes a fenced register, so every
/// grant reads it); a fencing round that fails releases the lock. Several
/// resources are one set (`try_acquire_many`: one token, one fencing token).
async fn acquire_fenced(
    redlock: &Redlock,
    resources: &[&str],
    mode: Mode,
    ttl: Duration,
) -> Result<(Guard, u64), Error> {
    let guard = match resources {
        [resource] => redlock.try_acquire(resource, mode, ttl).await?,
        set => {
            let set: Vec<(&str, Mode)> = set.iter().map(|&r| (r, mode)).collect();
            redlock.try_acquire_many(&set, ttl).await?
        }
    };
    match guard.fencing_token().await {
        Ok(fence) => Ok((guard, fence)),
        Err(error) => {
            let _ = guard.release().await;
            Err(error)
        }
    }
}

/// A request to pause a worker inside its next critical section.
pub struct PauseRequest {
    /// How long past the end of its validity the pause lasts.
    pub past_validity: Duration,
    pub done: oneshot::Sender<()>,
}

/// What the nemesis asks a worker to do with its next lock.
pub enum Request {
    /// Pause past the validity, then write without checking.
    Pause(PauseRequest),
    /// Crash: never release it (the worker goes on as a new client).
    Crash(oneshot::Sender<Duration>),
}

pub struct Ctx {
    pub rec: Recorder,
    pub regs: Registers,
    pub ttl: Duration,
    pub stop: AtomicBool,
    pub requests: Mutex<Vec<Option<Request>>>,
    /// Workers start no new attempt while set (a probe needs the nodes to
    /// itself).
    quiet: AtomicBool,
    /// Workers between the start of an attempt and its end.
    active: AtomicUsize,
}

impl Ctx {
    /// Reads `op`'s register with `fence`, recording the access in `op`
    /// (the critical section starts at the first access).
    pub fn read_register(&self, worker: usize, op: &mut Op, fence: Option<u64>) -> Option<u64> {
        let at = self.rec.now();
        op.cs_start.get_or_insert(at);
        let value = self.regs.read(&op.resource, at, worker, fence);
        op.read = Some(match value {
            Some(v) => (Access::Accepted, v),
            None => (Access::Rejected, 0),
        });
        value
    }

    /// Writes `base + 1` to `op`'s register with `fence`, recording the
    /// access in `op` (the write ends the critical section).
    pub fn write_register(&self, worker: usize, op: &mut Op, fence: Option<u64>, base: u64) -> bool {
        let at = self.rec.now();
        let accepted = self.regs.write(&op.resource, at, worker, fence, base);
        op.write = Some(if accepted { Access::Accepted } else { Access::Rejected });
        op.write_at = Some(at);
        op.cs_end = Some(self.rec.now());
        accepted
    }

    pub fn new(fenced: bool, ttl: Duration, workers: usize) -> Ctx {
        Ctx {
            rec: Recorder::new(),
            regs: Registers::new(fenced),
            ttl,
            stop: AtomicBool::new(false),
            requests: Mutex::new((0..workers).map(|_| None).collect()),
            quiet: AtomicBool::new(false),
            active: AtomicUsize::new(0),
        }
    }

    /// Holds the workers off: no new attempts, and waits (at most `within`)
    /// until the ones under way have ended.
    pub async fn hold_off(&self, within: Duration) {
        self.quiet.store(true, Ordering::SeqCst);
        let until = Instant::now() + within;
        while self.active.load(Ordering::SeqCst) > 0 && Instant::now() < until {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    pub fn resume(&self) {
        self.quiet.store(false, Ordering::SeqCst);
    }

    pub fn stopped(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }

    fn take_request(&self, worker: usize) -> Option<Request> {
        self.requests.lock().unwrap_or_else(|p| p.into_inner()).get_mut(worker).and_then(Option::take)
    }

    /// Withdraws a request the worker has not taken; true if it was there.
    pub fn withdraw(&self, worker: usize) -> bool {
        self.take_request(worker).is_some()
    }

    pub fn request(&self, worker: usize, request: Request) {
        if let Some(slot) = self.requests.lock().unwrap_or_else(|p| p.into_inner()).get_mut(worker) {
            *slot = Some(request);
        }
    }
}

/// A lock held by a worker, with its history entry being filled in.
pub struct Holding {
    pub held: Held,
    pub op: Op,
    /// The other keys of a set (empty for one resource), for their
    /// register accesses only: the rest of each key's history entry (the
    /// grant, leases, release) is the set's, `op`'s, copied when recorded.
    pub others: Vec<Op>,
}

impl Holding {
    /// Every key's entry: `op`'s, then the other keys of a set.
    fn ops_mut(&mut self) -> impl Iterator<Item = &mut Op> {
        std::iter::once(&mut self.op).chain(self.others.iter_mut())
    }
}

/// What a workload resource is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Plain,
    /// A read-write lock: a third of the attempts write, the rest read.
    ReadWrite,
    Semaphore(u32),
    /// A key of the set pool (every `Set` resource of the workload): an
    /// attempt takes 2 or 3 of the pool's keys, in random order, as one set
    /// (`try_acquire_many`, plain), so that sets overlap on some keys.
    Set,
}

#[derive(Clone, Debug)]
pub struct Resource {
    pub name: String,
    pub kind: Kind,
}

/// How long a worker holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Work {
    /// 1-8 ms: many grants, few holders caught by a fault.
    Short,
    /// For workers 0 and 1 (the others: short): 0.2-2.5 TTLs, kept alive
    /// by the watchdog (worker 0) or by extending by hand (worker 1), so
    /// that faults hit live holders.
    Long,
}

pub struct Worker {
    pub id: usize,
    pub locker: Locker,
    pub ctx: Arc<Ctx>,
}

impl Worker {
    /// One attempt, recorded. `Err` with the reason when not granted.
    pub async fn try_acquire(&self, resource: &str, want: Want) -> Result<Holding, String> {
        self.try_acquire_ttl(resource, want, self.ctx.ttl).await
    }

    pub async fn try_acquire_ttl(
        &self,
        resource: &str,
        want: Want,
        ttl: Duration,
    ) -> Result<Holding, String> {
        self.try_acquire_keys(&[resource], want, ttl).await
    }

    /// One attempt on one resource or a set of several; recorded as one
    /// history entry per key (the same grant, leases and release for all,
    /// so that the checker sees each key of a set held over the same
    /// window).
    async fn try_acquire_keys(&self, keys: &[&str], want: Want, ttl: Duration) -> Result<Holding, String> {
        let rec = &self.ctx.rec;
        let invoke = rec.now();
        let result = self.locker.try_acquire(keys, want, ttl).await;
        let completed = Instant::now();
        let mut op = Op::new(self.id, keys[0], want, invoke);
        let others = keys[1..].iter().map(|key| Op::new(self.id, key, want, invoke)).collect();
        op.complete = rec.at(completed);
        match result {
            Ok(held) => {
                op.token = Some(held.token.clone());
                op.fence = held.fence;
                op.lease(op.complete, op.complete + held.deadline.saturating_duration_since(completed));
                Ok(Holding { held, op, others })
            }
            Err((outcome, why)) => {
                op.outcome = outcome;
                op.error = Some(why.clone());
                self.record(op, others);
                Err(why)
            }
        }
    }

    /// Records a set's (or one resource's) entries: `op` and, for each
    /// other key, `op` with that key's name and register accesses.
    fn record(&self, op: Op, others: Vec<Op>) {
        for key in others {
            self.ctx.rec.op(op.with_accesses_of(key));
        }
        self.ctx.rec.op(op);
    }

    /// Until every node answers (at most ~1 s): connections broken by a
    /// fault are noticed and reopened, as a long-running client's would be.
    pub async fn reconnect(&self) -> bool {
        for _ in 0..50 {
            if self.locker.reachable().await == self.locker.nodes() {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        false
    }

    /// Attempts until granted or `within` has passed (random 20-60 ms
    /// between attempts).
    pub async fn acquire_within(
        &self,
        resource: &str,
        want: Want,
        within: Duration,
        rng: &mut StdRng,
    ) -> Option<Holding> {
        let until = Instant::now() + within;
        loop {
            if let Ok(holding) = self.try_acquire(resource, want).await {
                return Some(holding);
            }
            if Instant::now() >= until {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(rng.gen_range(20..60))).await;
        }
    }

    /// Reads the register with the lock's fencing token.
    pub fn read(&self, h: &mut Holding) -> Option<u64> {
        self.ctx.read_register(self.id, &mut h.op, h.held.fence)
    }

    /// Writes `base + 1` with the lock's fencing token.
    pub fn write(&self, h: &mut Holding, base: u64) -> bool {
        self.ctx.write_register(self.id, &mut h.op, h.held.fence, base)
    }

    /// Writes only with at least [`WRITE_MARGIN`] of validity left.
    pub fn careful_write(&self, h: &mut Holding, base: u64) -> bool {
        self.careful_write_all(h, &[base])
    }

    /// Reads every key's register (one resource, or each key of a set)
    /// with the lock's fencing token: the values, or `None` if one refused.
    fn read_all(&self, h: &mut Holding) -> Option<Vec<u64>> {
        let fence = h.held.fence;
        let values: Vec<Option<u64>> =
            h.ops_mut().map(|op| self.ctx.read_register(self.id, op, fence)).collect();
        values.into_iter().collect()
    }

    /// Writes `base + 1` to every key's register (`bases` as `read_all`
    /// returned them); true when all accepted.
    fn write_all(&self, h: &mut Holding, bases: &[u64]) -> bool {
        let fence = h.held.fence;
        let id = self.id;
        let written: Vec<bool> =
            h.ops_mut().zip(bases).map(|(op, &base)| self.ctx.write_register(id, op, fence, base)).collect();
        written.into_iter().all(|accepted| accepted)
    }

    /// `write_all` only with at least [`WRITE_MARGIN`] of validity left.
    fn careful_write_all(&self, h: &mut Holding, bases: &[u64]) -> bool {
        if h.held.remaining() < WRITE_MARGIN {
            h.op.aborted = true;
            return false;
        }
        self.write_all(h, bases)
    }

    /// Ends every key's critical section at `now`.
    fn end_sections(h: &mut Holding, now: Duration) {
        for op in h.ops_mut() {
            if op.cs_start.is_some() && op.cs_end.is_none() {
                op.cs_end = Some(now);
            }
        }
    }

    /// Ends the critical section, releases, and records the operation.
    pub async fn finish(&self, mut h: Holding) {
        let now = self.ctx.rec.now();
        Self::end_sections(&mut h, now);
        h.op.release = Some(now);
        let resource = h.op.resource.clone();
        self.locker.release(&resource, h.held).await;
        self.record(h.op, h.others);
    }

    /// Crashes while holding: no release; the lock runs out by itself.
    pub fn abandon(&self, mut h: Holding) -> Duration {
        let now = self.ctx.rec.now();
        h.op.abandoned = true;
        Self::end_sections(&mut h, now);
        self.locker.abandon(h.held);
        self.record(h.op, h.others);
        now
    }

    /// Holds for a long critical section, renewing; false if the lock was
    /// lost (the worker then gives its write up).
    async fn long_work(&self, h: &mut Holding, rng: &mut StdRng) -> bool {
        let ttl = self.ctx.ttl;
        let watchdog = self.id.is_multiple_of(2);
        if watchdog {
            self.locker.start_watchdog(&mut h.held);
        }
        let length = ttl.mul_f64(rng.gen_range(0.2..2.5));
        let step = ttl / 10;
        let started = Instant::now();
        let mut known = h.held.deadline;
        // Cut short when the run stops: its end waits for every worker.
        while started.elapsed() < length && !self.ctx.stopped() {
            tokio::time::sleep(step).await;
            if !watchdog && h.held.remaining() < ttl / 2 {
                let invoke = self.ctx.rec.now();
                match self.locker.extend(&mut h.held, ttl).await {
                    Ok((_, deadline)) => {
                        h.op.renewed_invoke = invoke;
                        h.op.lease(self.ctx.rec.now(), self.ctx.rec.at(deadline));
                        known = deadline;
                    }
                    Err(why) => {
                        h.op.lost = Some((self.ctx.rec.now(), why));
                        return false;
                    }
                }
            }
            match self.locker.standing(&h.held) {
                Standing::Valid { deadline, since } => {
                    if deadline != known {
                        // The watchdog renewed: learned now.
                        h.op.renewed_invoke = self.ctx.rec.at(since);
                        h.op.lease(self.ctx.rec.now(), self.ctx.rec.at(deadline));
                        known = deadline;
                    }
                }
                Standing::Lost(why) => {
                    h.op.lost = Some((self.ctx.rec.now(), why));
                    return false;
                }
            }
        }
        true
    }

    /// The workload: until stopped, pick a resource, try to acquire it, and
    /// under the lock read the register, work, write value + 1, release
    /// (readers and permit holders only hold). On request, pause (GC)
    /// inside the critical section past the validity, then write without
    /// checking; or crash and never release.
    pub async fn run(self, resources: Vec<Resource>, work: Work, seed: u64) {
        let mut rng = StdRng::seed_from_u64(seed);
        while !self.ctx.stopped() {
            if self.ctx.quiet.load(Ordering::SeqCst) {
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
            self.ctx.active.fetch_add(1, Ordering::SeqCst);
            self.attempt(&resources, work, &mut rng).await;
            self.ctx.active.fetch_sub(1, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(rng.gen_range(0..15))).await;
        }
        self.locker.settle().await;
    }

    /// One attempt of the workload, and the critical section if granted.
    async fn attempt(&self, resources: &[Resource], work: Work, rng: &mut StdRng) {
        let resource = &resources[rng.gen_range(0..resources.len())];
        let mut keys = vec![resource.name.as_str()];
        let want = match resource.kind {
            Kind::Plain => Want::Plain,
            Kind::ReadWrite if rng.gen_range(0..3) == 0 => Want::Write,
            Kind::ReadWrite => Want::Read,
            Kind::Semaphore(permits) => Want::Permit(permits),
            Kind::Set => {
                keys = resources.iter().filter(|r| r.kind == Kind::Set).map(|r| r.name.as_str()).collect();
                keys.shuffle(rng);
                keys.truncate(rng.gen_range(2..=3));
                Want::Plain
            }
        };
        let Ok(mut h) = self.try_acquire_keys(&keys, want, self.ctx.ttl).await else {
            tokio::time::sleep(Duration::from_millis(rng.gen_range(20..80))).await;
            return;
        };
        let label = keys.join(",");
        let bases = if want.writes() { self.read_all(&mut h) } else { None };
        match self.ctx.take_request(self.id) {
            Some(Request::Pause(pause)) => {
                let start = self.ctx.rec.now();
                h.op.paused = true;
                let until = h.held.deadline + pause.past_validity;
                tokio::time::sleep_until(until.into()).await;
                let accepted = bases.as_ref().map(|bases| self.write_all(&mut h, bases));
                let end = self.ctx.rec.now();
                self.ctx.rec.event(
                    "holder pause",
                    format!(
                        "client {} paused on '{}' until {} ms past its validity; stale write {}",
                        self.id,
                        label,
                        pause.past_validity.as_millis(),
                        match accepted {
                            Some(true) => "accepted",
                            Some(false) => "rejected",
                            None => "not made (no write under this mode)",
                        }
                    ),
                    start,
                    end,
                );
                let _ = pause.done.send(());
            }
            Some(Request::Crash(done)) => {
                let at = self.abandon(h);
                let _ = done.send(at);
                return;
            }
            None if want == Want::Read && rng.gen_ratio(1, READS_WALKING_AWAY) => {
                self.abandon(h);
                return;
            }
            None => {
                let kept = if work == Work::Long && self.id < LONG_WORKERS && self.locker.renews() {
                    self.long_work(&mut h, rng).await
                } else {
                    tokio::time::sleep(Duration::from_millis(rng.gen_range(1..8))).await;
                    true
                };
                match &bases {
                    Some(bases) if kept => {
                        self.careful_write_all(&mut h, bases);
                    }
                    Some(_) => h.op.aborted = true,
                    None => {}
                }
            }
        }
        self.finish(h).await;
    }
}
