//! What the Python and Node.js packages share: each binding is its
//! language's glue (argument conversion, how a future reaches the caller,
//! how an error becomes an exception), and this module is the rest, the
//! same for both: units of time, modes by name, retry policies, the claims
//! of an acquire, the calls by token, the channel a freed lock is
//! announced on, and [`HeldLock`], a guard shared by a language's lock
//! object and the tasks that act on it.
//!
//! Rust callers use [`crate::Redlock`] and [`crate::Guard`] directly.

use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use tokio::runtime::Handle;
use tokio::sync::{watch, RwLock};
use tokio::task::AbortHandle;
use tokio::time::Instant;

use crate::{
    Blocker, Error, Guard, Lost, Mode, Readiness, Redlock, Renewal, Result, RetryPolicy, Status, Tally,
    Watchdog,
};

/// The pub/sub channel on which the module announces that `resource`'s
/// lock was freed, and the command a subscriber sends: `SUBSCRIBE` on a
/// single master; on a cluster member `SSUBSCRIBE` (at a node of the
/// shard that serves the resource), or `SUBSCRIBE` for a resource that
/// no channel in its slot can name ([`crate::freed`]).
pub fn freed_channel(resource: &str, cluster: bool, db: i32) -> (String, &'static str) {
    let (name, how) = crate::freed::channel(db, resource.as_bytes(), cluster);
    let verb = match how {
        crate::freed::Announce::Classic => "SUBSCRIBE",
        crate::freed::Announce::Sharded => "SSUBSCRIBE",
    };
    (String::from_utf8_lossy(&name).into_owned(), verb)
}

/// The unit a language gives times in: Python's seconds, JavaScript's
/// milliseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit {
    Seconds,
    Milliseconds,
}

impl Unit {
    fn name(self) -> &'static str {
        match self {
            Unit::Seconds => "seconds",
            Unit::Milliseconds => "milliseconds",
        }
    }

    fn per_second(self) -> f64 {
        match self {
            Unit::Seconds => 1.0,
            Unit::Milliseconds => 1000.0,
        }
    }

    /// `value` in this unit as a duration; `what` names the argument in
    /// the error (a negative, infinite or NaN value).
    pub fn duration(self, what: &str, value: f64) -> Result<Duration> {
        Duration::try_from_secs_f64(value / self.per_second()).map_err(|_| {
            Error::InvalidArgument(format!(
                "{what} must be a finite number of {}, at least 0; got {value}",
                self.name()
            ))
        })
    }

    /// A duration in this unit.
    pub fn of(self, duration: Duration) -> f64 {
        duration.as_secs_f64() * self.per_second()
    }
}

/// A mode from its name: "plain", "read", "write", or "permit" with
/// `permits` ([`Mode::from_name`]).
pub fn mode(name: &str, permits: Option<u32>) -> Result<Mode> {
    Mode::from_name(name, permits).map_err(Error::InvalidArgument)
}

/// A mode as the bindings spell it: its name and, for a permit, the count.
pub fn mode_out(mode: Mode) -> (&'static str, Option<u32>) {
    match mode {
        Mode::Permit { permits } => (mode.name(), Some(permits)),
        other => (other.name(), None),
    }
}

/// An acquire's retry policy: within `wait` in all ([`RetryPolicy::within`])
/// or the default; other delay bounds and an attempt count if given.
pub fn retry_policy(
    wait: Option<Duration>,
    attempts: Option<u32>,
    delays: Option<(Duration, Duration)>,
) -> Result<RetryPolicy> {
    let mut policy = wait.map_or_else(RetryPolicy::default, RetryPolicy::within);
    if let Some((min, max)) = delays {
        policy = policy.with_delays(min, max);
    }
    if let Some(attempts) = attempts {
        if attempts == 0 {
            return Err(Error::InvalidArgument("attempts must be at least 1".into()));
        }
        policy.attempts_max = attempts;
    }
    Ok(policy)
}

fn one_expected() -> Error {
    Error::InvalidArgument("one resource expected".into())
}

/// What an acquire takes: one resource (any mode) or a set
/// ([`Redlock::try_acquire_many`], all or nothing).
#[derive(Clone, Debug)]
pub enum Claims {
    One(String, Mode),
    Many(Vec<(String, Mode)>),
}

impl Claims {
    /// The claims of (resource, mode name, permits); `many`: a set, else
    /// exactly one.
    pub fn parse(
        list: impl IntoIterator<Item = (String, String, Option<u32>)>,
        many: bool,
    ) -> Result<Claims> {
        let set = list.into_iter().map(|(name, mode_name, permits)| Ok((name, mode(&mode_name, permits)?)));
        let set = set.collect::<Result<Vec<_>>>()?;
        if many {
            return Ok(Claims::Many(set));
        }
        match <[(String, Mode); 1]>::try_from(set) {
            Ok([(name, mode)]) => Ok(Claims::One(name, mode)),
            Err(_) => Err(one_expected()),
        }
    }

    /// One acquire attempt, and with `fence` the fencing round right after
    /// it (a failed round drops the guard, which releases it): the guard,
    /// and its fencing token if fenced.
    pub async fn attempt(
        &self,
        redlock: &Redlock,
        ttl: Duration,
        fence: bool,
    ) -> Result<(Guard, Option<u64>)> {
        let guard = match self {
            Claims::One(resource, mode) => redlock.try_acquire(resource, *mode, ttl).await?,
            Claims::Many(set) => redlock.try_acquire_many(set, ttl).await?,
        };
        let fenced = if fence { Some(guard.fencing_token().await?) } else { None };
        Ok((guard, fenced))
    }
}

/// Release by token: a set (`many`), or one resource in `mode`.
pub async fn release_by_token(
    redlock: &Redlock,
    resources: &[String],
    many: bool,
    token: &str,
    mode: Result<Mode>,
) -> Result<Tally> {
    match (many, resources) {
        (true, set) => redlock.release_many(set, token).await,
        (false, [one]) => redlock.release(one, token, mode?).await,
        (false, _) => Err(one_expected()),
    }
}

/// Extend by token for `ttl`: the validity left.
pub async fn extend_by_token(
    redlock: &Redlock,
    resources: &[String],
    many: bool,
    token: &str,
    mode: Result<Mode>,
    ttl: Duration,
) -> Result<Duration> {
    let lease = match (many, resources) {
        (true, set) => redlock.extend_many(set, token, ttl).await?,
        (false, [one]) => redlock.extend(one, token, mode?, ttl).await?,
        (false, _) => return Err(one_expected()),
    };
    Ok(left(lease.deadline))
}

/// Reentrant enter: the fencing token and the validity left.
pub async fn enter(redlock: &Redlock, resource: &str, owner: &str, ttl: Duration) -> Result<(u64, Duration)> {
    let entered = redlock.enter(resource, owner, ttl).await?;
    Ok((entered.fencing_token, left(entered.lease.deadline)))
}

fn left(deadline: Instant) -> Duration {
    deadline.saturating_duration_since(Instant::now())
}

/// Why a status's majority cannot grant, by name ([`Blocker::name`]), and
/// in how many ms enough quarantines end; both `None` when it grants.
pub fn readiness_out(readiness: &Readiness) -> (Option<&'static str>, Option<i64>) {
    match readiness {
        Readiness::Grants => (None, None),
        Readiness::Blocked { cause, ready_in_ms } => (cause.as_ref().map(Blocker::name), *ready_in_ms),
    }
}

/// What a node's blocker says, in words.
pub fn blocker_text(blocker: &Blocker) -> String {
    match blocker {
        Blocker::Unreachable(why) | Blocker::Evicting(why) | Blocker::Failed(why) => why.clone(),
        Blocker::NoModule => "INFO lock is empty: the lock module is not loaded".into(),
        Blocker::Quarantined(q) => format!("{} quarantine, {} ms left", q.reason, q.ms_left),
    }
}

/// Where a held lock stands, read without I/O.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeldStatus {
    /// "held", "lost", "released" or "detached". A lock past its deadline
    /// is "lost", as the guard itself says at its next use.
    pub state: &'static str,
    /// The validity left (zero unless held).
    pub validity: Duration,
    /// The watchdog: "off", "running" or "stopped".
    pub watchdog: &'static str,
}

/// What is left of a lock after [`HeldLock::detach`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DetachedLock {
    pub token: String,
    pub fencing_token: Option<u64>,
    /// The validity left when it was detached.
    pub validity: Duration,
}

/// A lock held on a quorum of nodes (a [`Guard`]), shared by a language's
/// lock object and the tasks that act on it.
///
/// The guard sits in an async read-write lock: the fencing round and
/// extensions read it (they may run together); release, detach and the
/// watchdog's start take it. What a language reads without I/O
/// ([`HeldLock::status`]) comes from the guard's status channel, so that
/// its thread never waits for a round.
pub struct HeldLock {
    resource: String,
    token: String,
    resources: Vec<(String, Mode)>,
    guard: RwLock<Option<Guard>>,
    status: watch::Receiver<Status>,
    /// The quorum fencing token, once a fencing round confirmed it.
    fenced: OnceLock<u64>,
    /// "released" or "detached" once the guard was given up.
    ended: OnceLock<&'static str>,
    /// The task waiting for a loss, aborted when the guard is given up.
    watcher: Mutex<Option<AbortHandle>>,
    /// The runtime the guard's rounds run on: a guard dropped with the
    /// language's object (on its thread, outside the runtime) is released
    /// there.
    runtime: Handle,
    /// The process it was made in: a forked child neither uses nor
    /// releases its parent's locks.
    pid: u32,
}

impl HeldLock {
    /// `fenced`: the fencing token if the acquire ran the fencing round;
    /// `runtime`: the one the guard's rounds run on.
    pub fn new(guard: Guard, fenced: Option<u64>, runtime: Handle) -> HeldLock {
        let fencing = OnceLock::new();
        if let Some(token) = fenced {
            let _ = fencing.set(token);
        }
        HeldLock {
            resource: guard.resource().to_string(),
            token: guard.token().to_string(),
            resources: guard.resources().to_vec(),
            status: guard.subscribe(),
            guard: RwLock::new(Some(guard)),
            fenced: fencing,
            ended: OnceLock::new(),
            watcher: Mutex::new(None),
            runtime,
            pid: std::process::id(),
        }
    }

    /// The resource (a set's first).
    pub fn resource(&self) -> &str {
        &self.resource
    }

    pub fn token(&self) -> &str {
        &self.token
    }

    /// Every resource with its mode, in the order given.
    pub fn resources(&self) -> &[(String, Mode)] {
        &self.resources
    }

    /// The quorum fencing token if a fencing round confirmed it already.
    pub fn fenced(&self) -> Option<u64> {
        self.fenced.get().copied()
    }

    /// The process the lock was taken in.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The runtime its rounds run on (for the task that waits for its loss).
    pub fn runtime(&self) -> &Handle {
        &self.runtime
    }

    fn released(&self) -> Error {
        Error::InvalidArgument(format!("the lock on '{}' was released or detached", self.resource))
    }

    /// Takes the guard out to give it up (`how`: "released" or
    /// "detached"): no loss can come any more.
    async fn give_up(&self, how: &'static str) -> Result<Guard> {
        let guard = self.guard.write().await.take().ok_or_else(|| self.released())?;
        let _ = self.ended.set(how);
        self.stop_watching();
        Ok(guard)
    }

    fn stop_watching(&self) {
        let watcher = self.watcher.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).take();
        if let Some(watcher) = watcher {
            watcher.abort();
        }
    }

    /// Keeps `task` (one waiting for the loss, see [`wait_for_loss`]) to
    /// abort it when the guard is given up or dropped; an earlier one is
    /// aborted now.
    pub fn watch(&self, task: AbortHandle) {
        let old = self.watcher.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).replace(task);
        if let Some(old) = old {
            old.abort();
        }
    }

    pub fn status(&self) -> HeldStatus {
        let status = |state, validity, watchdog| HeldStatus { state, validity, watchdog };
        if let Some(ended) = self.ended.get() {
            return status(ended, Duration::ZERO, "off");
        }
        match &*self.status.borrow() {
            Status::Held { deadline, renewal } => {
                let left = left(*deadline);
                let watchdog = match renewal {
                    Renewal::Off => "off",
                    Renewal::Running => "running",
                    Renewal::Stopped { .. } => "stopped",
                };
                status(if left.is_zero() { "lost" } else { "held" }, left, watchdog)
            }
            Status::Lost(_) => status("lost", Duration::ZERO, "off"),
            Status::Released => status("released", Duration::ZERO, "off"),
        }
    }

    /// The fencing round (the first call; later ones return the same
    /// token without a round).
    pub async fn fence(&self) -> Result<u64> {
        let held = self.guard.read().await;
        let guard = held.as_ref().ok_or_else(|| self.released())?;
        let token = guard.fencing_token().await?;
        let _ = self.fenced.set(token);
        Ok(token)
    }

    /// Extends the lock for `ttl` (default: the TTL it was taken with): the
    /// validity left.
    pub async fn extend(&self, ttl: Option<Duration>) -> Result<Duration> {
        let held = self.guard.read().await;
        let guard = held.as_ref().ok_or_else(|| self.released())?;
        guard.extend(ttl.unwrap_or(guard.lease().ttl)).await
    }

    /// Releases on every node: the release round's counts.
    pub async fn release(&self) -> Result<Tally> {
        self.give_up("released").await?.release().await
    }

    /// Gives the guard up without releasing: the lock stays until its TTL
    /// or a release by token.
    pub async fn detach(&self) -> Result<DetachedLock> {
        let detached = self.give_up("detached").await?.detach();
        Ok(DetachedLock {
            token: detached.token,
            fencing_token: detached.fencing_token,
            validity: left(detached.deadline),
        })
    }

    /// Starts (or restarts) the watchdog: renews every ttl/3 within the
    /// bounds.
    pub async fn start_watchdog(&self, limits: Watchdog) -> Result<()> {
        let mut held = self.guard.write().await;
        held.as_mut().ok_or_else(|| self.released())?.start_watchdog(limits);
        Ok(())
    }
}

impl Drop for HeldLock {
    fn drop(&mut self) {
        self.stop_watching();
        // A guard neither released nor detached is released in the
        // background, on the runtime (the guard's own drop does it); in a
        // forked child, not at all.
        if let Some(guard) = self.guard.get_mut().take() {
            if self.pid == std::process::id() {
                let _runtime = self.runtime.enter();
                drop(guard);
            }
        }
    }
}

/// Waits for the loss report of the lock `held(state)` holds, and returns
/// the state with the reason: `None` if the lock was given up or dropped
/// first. Holds no strong reference while it waits, so that a lock nobody
/// holds any more is still dropped (and released).
pub async fn wait_for_loss<T>(state: Weak<T>, held: impl Fn(&T) -> &HeldLock) -> Option<(Arc<T>, Lost)> {
    let lost = {
        let strong = state.upgrade()?;
        let guard = held(&strong).guard.read().await;
        guard.as_ref()?.lost()
    };
    let reason = lost.await;
    Some((state.upgrade()?, reason))
}
