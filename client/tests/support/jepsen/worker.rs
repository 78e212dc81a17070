//! The clients: one lock implementation behind one interface (this
//! project's quorum client, or the classic recipe), and the worker that
//! acquires, does a read-modify-write increment on the resource's register
//! under the lock, releases, and records all of it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use redlock_client::{Config, Error, Guard, Mode, Redlock};
use tokio::sync::oneshot;

use super::classic::Classic;
use super::history::{Access, Op, Outcome, Recorder, Registers};

/// A worker writes only with at least this much validity left; less, and
/// it gives the write up (a careful client). A paused holder skips the
/// check: the pause falls between the check and the write.
pub const WRITE_MARGIN: Duration = Duration::from_millis(100);

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
    pub fn remaining(&self) -> Duration {
        self.deadline.saturating_duration_since(Instant::now())
    }
}

impl Locker {
    pub async fn connect(classic: bool, urls: &[String], config: Config) -> Locker {
        if classic {
            Locker::Classic(Classic::connect(urls, config).await)
        } else {
            Locker::Module(Redlock::connect(urls, config).await.expect("connect"))
        }
    }

    pub async fn try_acquire(&self, resource: &str, ttl: Duration) -> Result<Held, (Outcome, String)> {
        match self {
            Locker::Module(redlock) => match acquire_fenced(redlock, resource, ttl).await {
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
            Locker::Classic(classic) => match classic.try_acquire(resource, ttl).await {
                Ok(lock) => Ok(Held { token: lock.token, fence: None, deadline: lock.deadline, guard: None }),
                Err((definite, why)) => Err((if definite { Outcome::Fail } else { Outcome::Unknown }, why)),
            },
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
                let _ = redlock.release(resource, &held.token, Mode::Exclusive).await;
            }
        }
    }
}

/// One attempt with the fencing round (the quorum client runs it when the
/// token is asked for); a fencing round that fails releases the lock.
async fn acquire_fenced(redlock: &Redlock, resource: &str, ttl: Duration) -> Result<(Guard, u64), Error> {
    let guard = redlock.try_acquire(resource, Mode::Exclusive, ttl).await?;
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

pub struct Ctx {
    pub rec: Recorder,
    pub regs: Registers,
    pub ttl: Duration,
    pub stop: AtomicBool,
    pub pauses: Mutex<Vec<Option<PauseRequest>>>,
}

impl Ctx {
    pub fn new(fenced: bool, ttl: Duration, workers: usize) -> Ctx {
        Ctx {
            rec: Recorder::new(),
            regs: Registers::new(fenced),
            ttl,
            stop: AtomicBool::new(false),
            pauses: Mutex::new((0..workers).map(|_| None).collect()),
        }
    }

    pub fn stopped(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }

    fn take_pause(&self, worker: usize) -> Option<PauseRequest> {
        self.pauses.lock().unwrap_or_else(|p| p.into_inner()).get_mut(worker).and_then(Option::take)
    }

    /// Withdraws a request the worker has not taken; true if it was there.
    pub fn withdraw_pause(&self, worker: usize) -> bool {
        self.take_pause(worker).is_some()
    }

    pub fn request_pause(&self, worker: usize, request: PauseRequest) {
        if let Some(slot) = self.pauses.lock().unwrap_or_else(|p| p.into_inner()).get_mut(worker) {
            *slot = Some(request);
        }
    }
}

/// A lock held by a worker, with its history entry being filled in.
pub struct Holding {
    pub held: Held,
    pub op: Op,
}

pub struct Worker {
    pub id: usize,
    pub locker: Locker,
    pub ctx: Arc<Ctx>,
}

impl Worker {
    /// One attempt, recorded. `Err` with the reason when not granted.
    pub async fn try_acquire(&self, resource: &str) -> Result<Holding, String> {
        let rec = &self.ctx.rec;
        let invoke = rec.now();
        let result = self.locker.try_acquire(resource, self.ctx.ttl).await;
        let completed = Instant::now();
        let complete = rec.at(completed);
        let mut op = Op {
            client: self.id,
            resource: resource.to_string(),
            invoke,
            complete,
            outcome: Outcome::Ok,
            token: None,
            fence: None,
            validity_end: None,
            cs_start: None,
            cs_end: None,
            read: None,
            write: None,
            aborted: false,
            paused: false,
            release: None,
            error: None,
        };
        match result {
            Ok(held) => {
                op.token = Some(held.token.clone());
                op.fence = held.fence;
                op.validity_end = Some(complete + held.deadline.saturating_duration_since(completed));
                Ok(Holding { held, op })
            }
            Err((outcome, why)) => {
                op.outcome = outcome;
                op.error = Some(why.clone());
                rec.op(op);
                Err(why)
            }
        }
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
        within: Duration,
        rng: &mut StdRng,
    ) -> Option<Holding> {
        let until = Instant::now() + within;
        loop {
            if let Ok(holding) = self.try_acquire(resource).await {
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
        let at = self.ctx.rec.now();
        h.op.cs_start.get_or_insert(at);
        let value = self.ctx.regs.read(&h.op.resource, at, self.id, h.held.fence);
        h.op.read = Some(match value {
            Some(v) => (Access::Accepted, v),
            None => (Access::Rejected, 0),
        });
        value
    }

    /// Writes `base + 1` with the lock's fencing token.
    pub fn write(&self, h: &mut Holding, base: u64) -> bool {
        let at = self.ctx.rec.now();
        let accepted = self.ctx.regs.write(&h.op.resource, at, self.id, h.held.fence, base);
        h.op.write = Some(if accepted { Access::Accepted } else { Access::Rejected });
        h.op.cs_end = Some(self.ctx.rec.now());
        accepted
    }

    /// Writes only with at least [`WRITE_MARGIN`] of validity left.
    pub fn careful_write(&self, h: &mut Holding, base: u64) -> bool {
        if h.held.remaining() < WRITE_MARGIN {
            h.op.aborted = true;
            return false;
        }
        self.write(h, base)
    }

    /// Ends the critical section, releases, and records the operation.
    pub async fn finish(&self, mut h: Holding) {
        let now = self.ctx.rec.now();
        if h.op.cs_start.is_some() && h.op.cs_end.is_none() {
            h.op.cs_end = Some(now);
        }
        h.op.release = Some(now);
        let resource = h.op.resource.clone();
        self.locker.release(&resource, h.held).await;
        self.ctx.rec.op(h.op);
    }

    /// The workload: until stopped, pick a resource, try to acquire it, and
    /// under the lock read the register, work 1-8 ms, write value + 1,
    /// release. On request, pause (GC) inside the critical section past
    /// the validity, then write without checking.
    pub async fn run(self, resources: Vec<String>, seed: u64) {
        let mut rng = StdRng::seed_from_u64(seed);
        while !self.ctx.stopped() {
            let resource = &resources[rng.gen_range(0..resources.len())];
            let Ok(mut h) = self.try_acquire(resource).await else {
                tokio::time::sleep(Duration::from_millis(rng.gen_range(20..80))).await;
                continue;
            };
            if let Some(base) = self.read(&mut h) {
                if let Some(pause) = self.ctx.take_pause(self.id) {
                    let start = self.ctx.rec.now();
                    h.op.paused = true;
                    let until = h.held.deadline + pause.past_validity;
                    tokio::time::sleep_until(until.into()).await;
                    let accepted = self.write(&mut h, base);
                    let end = self.ctx.rec.now();
                    self.ctx.rec.event(
                        "holder pause",
                        format!(
                            "client {} paused on '{resource}' until {} ms past its validity; stale write {}",
                            self.id,
                            pause.past_validity.as_millis(),
                            if accepted { "accepted" } else { "rejected" }
                        ),
                        start,
                        end,
                    );
                    let _ = pause.done.send(());
                } else {
                    tokio::time::sleep(Duration::from_millis(rng.gen_range(1..8))).await;
                    self.careful_write(&mut h, base);
                }
            }
            self.finish(h).await;
            tokio::time::sleep(Duration::from_millis(rng.gen_range(0..15))).await;
        }
    }
}
