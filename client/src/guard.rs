//! A held lock: its token, fencing token and validity, explicit extend and
//! release, release on drop, and the watchdog that renews it and says at
//! once when it is lost.

use std::future::Future;
use std::sync::{Arc, Mutex as StdMutex};
use std::time::{Duration, Instant};

use tokio::sync::{watch, Mutex};
use tokio::task::JoinHandle;

use crate::error::{Error, Lost, Result};
use crate::quorum::{self, Mode, Tally};
use crate::redlock::{Lease, Redlock};

/// Bounds of the automatic renewal: it stops after `renewals_max` renewals
/// or once `duration_max` has passed since it started, whichever comes
/// first; the lock then runs out at the end of its last validity, and
/// [`Guard::lost`] fires with [`Lost::WatchdogLimit`].
#[derive(Clone, Copy, Debug)]
pub struct Watchdog {
    pub renewals_max: u32,
    pub duration_max: Duration,
}

impl Default for Watchdog {
    fn default() -> Watchdog {
        Watchdog { renewals_max: 10_000, duration_max: Duration::from_secs(3600) }
    }
}

/// Where the watchdog stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Renewal {
    /// No watchdog: the lock runs out at its deadline unless extended.
    Off,
    /// Renewing every ttl/3.
    Running,
    /// Reached its bound after this many renewals.
    Stopped { renewals: u32 },
}

/// The state of a guard, as seen by [`Guard::status`] and
/// [`Guard::subscribe`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Status {
    /// Held until `deadline` (on this process's monotonic clock), unless
    /// renewed.
    Held { deadline: Instant, renewal: Renewal },
    /// Lost: do not touch the protected resource any more.
    Lost(Lost),
    /// Released by [`Guard::release`] or on drop.
    Released,
}

pub(crate) struct Shared {
    redlock: Redlock,
    resource: String,
    token: String,
    /// What was granted; its quorum is also the extensions' and release's.
    mode: Mode,
    fencing_token: u64,
    lease: StdMutex<Lease>,
    status: watch::Sender<Status>,
    /// Serializes extensions (by hand and by the watchdog) and the release.
    op: Mutex<()>,
}

/// A lock held on a majority. Dropping it releases the lock in the
/// background (best effort; needs a Tokio runtime); call
/// [`Guard::release`] to release it and learn the outcome.
pub struct Guard {
    shared: Arc<Shared>,
    watchdog: Option<JoinHandle<()>>,
    finished: bool,
}

/// What is left of a guard after [`Guard::detach`]: the lock stays held
/// until its TTL runs out or someone releases it with the token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Detached {
    pub resource: String,
    pub token: String,
    pub fencing_token: u64,
    pub deadline: Instant,
}

impl std::fmt::Debug for Guard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Guard")
            .field("resource", &self.shared.resource)
            .field("token", &self.shared.token)
            .field("fencing_token", &self.shared.fencing_token)
            .field("status", &self.status())
            .finish()
    }
}

impl Guard {
    pub(crate) fn new(
        redlock: Redlock,
        resource: String,
        token: String,
        mode: Mode,
        fencing_token: u64,
        lease: Lease,
    ) -> Guard {
        let (status, _) = watch::channel(Status::Held { deadline: lease.deadline, renewal: Renewal::Off });
        let shared = Shared {
            redlock,
            resource,
            token,
            mode,
            fencing_token,
            lease: StdMutex::new(lease),
            status,
            op: Mutex::new(()),
        };
        Guard { shared: Arc::new(shared), watchdog: None, finished: false }
    }

    pub fn resource(&self) -> &str {
        &self.shared.resource
    }

    /// What this guard holds: the plain lock, a read or write hold, or a
    /// semaphore permit.
    pub fn mode(&self) -> Mode {
        self.shared.mode
    }

    /// The random 128-bit token (32 hex digits) this lock is held with.
    pub fn token(&self) -> &str {
        &self.shared.token
    }

    /// The quorum's fencing token: strictly above every earlier holder's.
    /// Pass it to the protected resource, which should refuse writes that
    /// carry a lower one.
    pub fn fencing_token(&self) -> u64 {
        self.shared.fencing_token
    }

    /// The current lease (start of the last successful round, TTL, deadline).
    pub fn lease(&self) -> Lease {
        self.shared.lease()
    }

    /// Time left before the lock may be someone else's; zero once lost.
    pub fn validity_remaining(&self) -> Duration {
        match self.status() {
            Status::Held { deadline, .. } => quorum::remaining(deadline, Instant::now()),
            Status::Lost(_) | Status::Released => Duration::ZERO,
        }
    }

    /// True while held and within its validity.
    pub fn is_held(&self) -> bool {
        !self.validity_remaining().is_zero()
    }

    pub fn status(&self) -> Status {
        self.shared.status.borrow().clone()
    }

    /// Every change of status (renewed deadline, lost, released).
    pub fn subscribe(&self) -> watch::Receiver<Status> {
        self.shared.status.subscribe()
    }

    /// A future that completes when the lock is lost: a renewal failed on
    /// a majority, or the validity ran out without a renewal. It completes
    /// at once if the lock is already lost, and never if the guard is
    /// released first. Independent of the guard's lifetime (`'static`).
    pub fn lost(&self) -> impl Future<Output = Lost> + Send + 'static {
        let mut rx = self.shared.status.subscribe();
        async move {
            loop {
                let status = rx.borrow_and_update().clone();
                match status {
                    Status::Lost(reason) => return reason,
                    Status::Released => return std::future::pending().await,
                    Status::Held { deadline, renewal } => {
                        tokio::select! {
                            _ = tokio::time::sleep_until(deadline.into()) => {
                                if !rx.has_changed().unwrap_or(false) {
                                    return expiry_reason(renewal);
                                }
                            }
                            changed = rx.changed() => {
                                if changed.is_err() {
                                    return std::future::pending().await;
                                }
                            }
                        }
                    }
                }
            }
        }
    }

    /// `LOCK.EXTEND` on every node: held for `ttl` from the start of the
    /// round when the mode's quorum (a majority, or a semaphore's) confirms. A failure means the lock is lost
    /// (the guard's status says so and [`Guard::lost`] fires), as does
    /// calling this after the validity ran out.
    pub async fn extend(&self, ttl: Duration) -> Result<Duration> {
        self.shared.extend(ttl).await
    }

    /// Starts renewing every ttl/3 in the background, within `limits`.
    /// Replaces a watchdog started before.
    pub fn start_watchdog(&mut self, limits: Watchdog) {
        if let Some(old) = self.watchdog.take() {
            old.abort();
        }
        self.shared.status.send_if_modified(|status| match status {
            Status::Held { renewal, .. } => {
                *renewal = Renewal::Running;
                true
            }
            _ => false,
        });
        self.watchdog = Some(tokio::spawn(run_watchdog(self.shared.clone(), limits)));
    }

    /// `LOCK.RELEASE` on every node (also those that did not grant).
    /// Returns once a majority confirmed; the other nodes' releases go on
    /// in the background (`Tally::pending` counts them; call
    /// [`Redlock::settle`] before the process exits so that they all get
    /// there). `Err(NoQuorum)` when fewer than a majority confirmed (after
    /// waiting for every node): the lock had expired or been taken on them,
    /// so the work done under it may not have been exclusive.
    pub async fn release(mut self) -> Result<Tally> {
        self.finished = true;
        if let Some(watchdog) = self.watchdog.take() {
            watchdog.abort();
        }
        self.shared.release().await
    }

    /// Gives up the guard without releasing: the lock stays until its TTL
    /// (for a process that exits while the lock must stay held, like the
    /// CLI's `acquire`). The watchdog stops.
    pub fn detach(mut self) -> Detached {
        self.finished = true;
        if let Some(watchdog) = self.watchdog.take() {
            watchdog.abort();
        }
        Detached {
            resource: self.shared.resource.clone(),
            token: self.shared.token.clone(),
            fencing_token: self.shared.fencing_token,
            deadline: self.shared.lease().deadline,
        }
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        if let Some(watchdog) = self.watchdog.take() {
            watchdog.abort();
        }
        if self.finished {
            return;
        }
        // Best effort: without a runtime there is nobody to send it, and the
        // lock runs out at its TTL.
        // Counted as background work, so that `Redlock::settle` waits for it.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let shared = self.shared.clone();
            let background = shared.redlock.background();
            runtime.spawn(async move {
                let _background = background;
                let _ = shared.release().await;
            });
        }
    }
}

fn expiry_reason(renewal: Renewal) -> Lost {
    match renewal {
        Renewal::Stopped { renewals } => Lost::WatchdogLimit { renewals },
        Renewal::Off | Renewal::Running => Lost::Expired,
    }
}

impl Shared {
    fn lease(&self) -> Lease {
        *self.lease.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn mark_lost(&self, reason: Lost) {
        self.status.send_if_modified(|status| match status {
            Status::Held { .. } => {
                *status = Status::Lost(reason);
                true
            }
            _ => false,
        });
    }

    fn lost_error(&self, reason: Lost) -> Error {
        Error::Lost { resource: self.resource.clone(), reason }
    }

    /// `Ok` while held within the validity; marks the lock lost once the
    /// deadline has passed.
    fn check_held(&self) -> Result<()> {
        let status = self.status.borrow().clone();
        match status {
            Status::Lost(reason) => Err(self.lost_error(reason)),
            Status::Released => Err(Error::InvalidArgument("the lock was released".into())),
            Status::Held { deadline, renewal } => {
                if Instant::now() >= deadline {
                    let reason = expiry_reason(renewal);
                    self.mark_lost(reason.clone());
                    Err(self.lost_error(reason))
                } else {
                    Ok(())
                }
            }
        }
    }

    async fn extend(&self, ttl: Duration) -> Result<Duration> {
        let _op = self.op.lock().await;
        self.check_held()?;
        match self.redlock.extend_with(&self.resource, &self.token, self.mode, ttl).await {
            Ok(lease) => {
                *self.lease.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) = lease;
                self.status.send_if_modified(|status| match status {
                    Status::Held { deadline, .. } => {
                        *deadline = lease.deadline;
                        true
                    }
                    _ => false,
                });
                Ok(quorum::remaining(lease.deadline, Instant::now()))
            }
            Err(Error::InvalidArgument(what)) => Err(Error::InvalidArgument(what)),
            Err(error) => {
                self.mark_lost(Lost::RenewalFailed(Box::new(error.clone())));
                Err(error)
            }
        }
    }

    async fn release(&self) -> Result<Tally> {
        // Waits for an extension in flight (an aborted watchdog lets go of
        // the lock at once), so the RELEASE is queued after its EXTEND.
        let _op = self.op.lock().await;
        let result = self.redlock.release_quorum(&self.resource, &self.token, self.mode).await;
        self.status.send_replace(Status::Released);
        result
    }

    fn set_renewal(&self, to: Renewal) {
        self.status.send_if_modified(|status| match status {
            Status::Held { renewal, .. } => {
                *renewal = to;
                true
            }
            _ => false,
        });
    }
}

/// Renews every ttl/3 until a renewal fails (the lock is then marked lost,
/// which wakes every [`Guard::lost`] future) or the bounds are reached.
async fn run_watchdog(shared: Arc<Shared>, limits: Watchdog) {
    let started = Instant::now();
    let mut renewals = 0u32;
    loop {
        let lease = shared.lease();
        let at = quorum::next_renewal(lease.start, lease.ttl);
        if !quorum::renewal_allowed(renewals, limits.renewals_max, started, at, limits.duration_max) {
            shared.set_renewal(Renewal::Stopped { renewals });
            return;
        }
        tokio::time::sleep_until(at.into()).await;
        if shared.extend(lease.ttl).await.is_err() {
            // extend() has marked the lock lost (or it was released).
            return;
        }
        renewals += 1;
    }
}
