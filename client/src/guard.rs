//! A held lock: its token, its fencing token (asked for lazily), validity,
//! explicit extend and release, release on drop, and the watchdog that
//! renews it and says at once when it is lost.
//!
//! Time is tokio's clock (`tokio::time::Instant`, `sleep_until`): the
//! lease, the deadline that [`Guard::lost`] waits for, and the watchdog's
//! schedule. The part that decides when (the [`Lifetime`] of a lease and
//! [`run_watchdog`]) does no I/O itself, so the tests below run it on
//! tokio's paused clock with a fake renewal and assert exact instants.

use std::future::Future;
use std::sync::{Arc, Mutex as StdMutex};
use std::time::Duration;

use tokio::sync::{watch, Mutex, OnceCell};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::claim::Claim;
use crate::error::{Error, Lost, Result};
use crate::quorum::{self, Answer, Mode, Tally};
use crate::rounds::extend::extend;
use crate::rounds::fanout::Nodes;
use crate::rounds::fence::fence;
use crate::rounds::grant::Granted;
use crate::rounds::lease::{check_ttl, Lease};
use crate::rounds::release::release_quorum;

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
    /// Held until `deadline` (on tokio's clock, this process's monotonic
    /// clock), unless renewed.
    Held { deadline: Instant, renewal: Renewal },
    /// Lost: do not touch the protected resource any more.
    Lost(Lost),
    /// Released by [`Guard::release`] or on drop.
    Released,
}

/// The lease of a held lock and its status, with no I/O: what the guard,
/// the watchdog and [`Guard::lost`] share.
pub(crate) struct Lifetime {
    lease: StdMutex<Lease>,
    status: watch::Sender<Status>,
}

impl Lifetime {
    pub(crate) fn new(lease: Lease) -> Lifetime {
        let (status, _) = watch::channel(Status::Held { deadline: lease.deadline, renewal: Renewal::Off });
        Lifetime { lease: StdMutex::new(lease), status }
    }

    pub(crate) fn lease(&self) -> Lease {
        // Nothing panics while it is held; a poisoned value is still whole.
        *self.lease.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn status(&self) -> Status {
        self.status.borrow().clone()
    }

    /// A renewal (or extension) succeeded: held until the new deadline.
    pub(crate) fn renewed(&self, lease: Lease) {
        *self.lease.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) = lease;
        self.status.send_if_modified(|status| match status {
            Status::Held { deadline, .. } => {
                *deadline = lease.deadline;
                true
            }
            _ => false,
        });
    }

    /// Marks a held lock lost (a lost or released one stays as it is).
    pub(crate) fn mark_lost(&self, reason: Lost) {
        self.status.send_if_modified(|status| match status {
            Status::Held { .. } => {
                *status = Status::Lost(reason);
                true
            }
            _ => false,
        });
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

    fn released(&self) {
        self.status.send_replace(Status::Released);
    }

    /// `Ok` while held within the validity; once the deadline has passed
    /// the lock is marked lost, and that is the error.
    fn check_held(&self, resource: &str) -> Result<()> {
        let lost = |reason: Lost| Error::Lost { resource: resource.to_string(), reason };
        match self.status() {
            Status::Lost(reason) => Err(lost(reason)),
            Status::Released => Err(Error::InvalidArgument("the lock was released".into())),
            Status::Held { deadline, renewal } if Instant::now() >= deadline => {
                let reason = expiry_reason(renewal);
                self.mark_lost(reason.clone());
                Err(lost(reason))
            }
            Status::Held { .. } => Ok(()),
        }
    }

    /// Completes when the lock is lost (see [`Guard::lost`]).
    fn lost(&self) -> impl Future<Output = Lost> + Send + 'static {
        let mut rx = self.status.subscribe();
        async move {
            loop {
                let status = rx.borrow_and_update().clone();
                match status {
                    Status::Lost(reason) => return reason,
                    Status::Released => return std::future::pending().await,
                    Status::Held { deadline, renewal } => {
                        tokio::select! {
                            _ = tokio::time::sleep_until(deadline) => {
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
}

fn expiry_reason(renewal: Renewal) -> Lost {
    match renewal {
        Renewal::Stopped { renewals } => Lost::WatchdogLimit { renewals },
        Renewal::Off | Renewal::Running => Lost::Expired,
    }
}

/// Renews the lease of `life` every ttl/3 (counted from the start of the
/// last lease, on tokio's clock) by calling `renew` with the TTL, until a
/// renewal fails (`renew` returns false; it has marked the lock lost, which
/// wakes every [`Guard::lost`] future) or the bounds of `limits` are
/// reached (then the renewal state says `Stopped`, and the loss is
/// reported when the last validity ends).
pub(crate) async fn run_watchdog<R, F>(life: &Lifetime, limits: Watchdog, mut renew: R)
where
    R: FnMut(Duration) -> F,
    F: Future<Output = bool>,
{
    let started = Instant::now();
    let mut renewals = 0u32;
    loop {
        let lease = life.lease();
        let at = quorum::next_renewal(lease.start, lease.ttl);
        if !quorum::renewal_allowed(renewals, limits.renewals_max, started, at, limits.duration_max) {
            life.set_renewal(Renewal::Stopped { renewals });
            return;
        }
        tokio::time::sleep_until(at).await;
        if !renew(lease.ttl).await {
            return;
        }
        renewals += 1;
    }
}

pub(crate) struct Shared {
    /// The nodes it was granted on, where its own rounds run.
    nodes: Nodes,
    /// What was granted (one resource, or a set); its quorum is also the
    /// extensions' and release's.
    claim: Claim,
    token: String,
    /// The quorum token T: the highest token among the grants that decided
    /// the grant round. Held with it once the fencing round confirmed it.
    floor: u64,
    /// The grant round's answers when it was decided, for the fencing round.
    grants: Vec<Option<Answer>>,
    /// T, once a fencing round confirmed it (run at most once at a time).
    fenced: OnceCell<u64>,
    life: Lifetime,
    /// Serializes extensions (by hand and by the watchdog) and the release.
    op: Mutex<()>,
}

/// A lock held on a quorum of nodes. Dropping it releases the lock in the
/// background (best effort; needs a Tokio runtime); call
/// [`Guard::release`] to release it and learn the outcome.
///
/// # What a guard gives, with and without its fencing token
///
/// Every guard gives mutual exclusion within its validity: while it is
/// held, no other exclusive holder (or writer, or permit beyond the
/// count) holds the lock on a quorum. Each node's own tokens increase
/// from one holder to the next on that node. What only
/// [`Guard::fencing_token`] gives is one token for the whole quorum that
/// is above every earlier fenced holder's: pass it to the protected
/// resource, so that it refuses a holder that was paused past its
/// validity and writes late. A guard that never asks for it has no such
/// token, and its acquire cost one round trip instead of two.
pub struct Guard {
    shared: Arc<Shared>,
    watchdog: Option<JoinHandle<()>>,
    finished: bool,
}

/// What is left of a guard after [`Guard::detach`]: the lock stays held
/// until its TTL runs out or someone releases it with the token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Detached {
    /// The resource (a set's first).
    pub resource: String,
    /// Every resource held, with its mode.
    pub resources: Vec<(String, Mode)>,
    pub token: String,
    /// The quorum fencing token, if [`Guard::fencing_token`] was asked for.
    pub fencing_token: Option<u64>,
    pub deadline: Instant,
}

impl std::fmt::Debug for Guard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Guard")
            .field("resources", &self.shared.claim.keys())
            .field("token", &self.shared.token)
            .field("fencing_token", &self.shared.fenced.get())
            .field("status", &self.status())
            .finish()
    }
}

impl Guard {
    pub(crate) fn new(nodes: Nodes, claim: Claim, token: String, granted: Granted) -> Guard {
        let shared = Shared {
            nodes,
            claim,
            token,
            floor: granted.floor,
            grants: granted.grants,
            fenced: OnceCell::new(),
            life: Lifetime::new(granted.lease),
            op: Mutex::new(()),
        };
        Guard { shared: Arc::new(shared), watchdog: None, finished: false }
    }

    /// The resource; for a set ([`crate::Redlock::try_acquire_many`]), the first
    /// one given (all are in [`Guard::resources`]).
    pub fn resource(&self) -> &str {
        self.shared.claim.first().0
    }

    /// What this guard holds: the plain lock, a read or write hold, or a
    /// semaphore permit; for a set, the first resource's mode.
    pub fn mode(&self) -> Mode {
        self.shared.claim.first().1
    }

    /// Every resource held, in the order given, with its mode: one for
    /// [`crate::Redlock::try_acquire`], the whole set for
    /// [`crate::Redlock::try_acquire_many`].
    pub fn resources(&self) -> &[(String, Mode)] {
        self.shared.claim.keys()
    }

    /// The random 128-bit token (32 hex digits) this lock is held with.
    pub fn token(&self) -> &str {
        &self.shared.token
    }

    /// The quorum's fencing token T: strictly above the token of every
    /// fenced holder whose hold ended before this one began (two readers or
    /// permit holders holding at once may share one, see
    /// [`crate::Redlock::try_acquire`]). Pass it to the protected resource, which
    /// should refuse writes that carry a lower one.
    ///
    /// The first call runs the fencing round (`LOCK.FENCE key token T` on
    /// the nodes that need it, returning at a majority of 1s; for a set,
    /// on every key, and a node counts only if every key answered 1: T is
    /// then the token of every resource of the set); T counts
    /// only when that majority answered within the validity. Later calls
    /// (and calls while one is running) get the same T without a round.
    /// Errors: [`Error::NoQuorum`] (phase `Fence`) when no majority
    /// confirmed T: the guard is unchanged, and a later call tries again;
    /// [`Error::Lost`] when the validity ran out first (the guard is then
    /// lost).
    pub async fn fencing_token(&self) -> Result<u64> {
        let shared = &*self.shared;
        shared.fenced.get_or_try_init(|| shared.fence()).await.copied()
    }

    /// The current lease (start of the last successful round, TTL, deadline).
    pub fn lease(&self) -> Lease {
        self.shared.life.lease()
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
        self.shared.life.status()
    }

    /// Every change of status (renewed deadline, lost, released).
    pub fn subscribe(&self) -> watch::Receiver<Status> {
        self.shared.life.status.subscribe()
    }

    /// A future that completes when the lock is lost: a renewal failed on
    /// a majority, or the validity ran out without a renewal. It completes
    /// at once if the lock is already lost, and never if the guard is
    /// released first. Independent of the guard's lifetime (`'static`).
    pub fn lost(&self) -> impl Future<Output = Lost> + Send + 'static {
        self.shared.life.lost()
    }

    /// `LOCK.EXTEND` on every node (for a set, `LOCK.RENEW` of every
    /// resource, a node counting only if it extended them all): held for
    /// `ttl` from the start of the round when the mode's quorum (a
    /// majority, or a semaphore's) confirms.
    /// A failure means the lock is lost (the guard's status says so and
    /// [`Guard::lost`] fires), as does calling this after the validity ran
    /// out.
    pub async fn extend(&self, ttl: Duration) -> Result<Duration> {
        self.shared.extend(ttl).await
    }

    /// Starts renewing every ttl/3 in the background, within `limits`.
    /// Replaces a watchdog started before.
    pub fn start_watchdog(&mut self, limits: Watchdog) {
        if let Some(old) = self.watchdog.take() {
            old.abort();
        }
        self.shared.life.set_renewal(Renewal::Running);
        let shared = self.shared.clone();
        self.watchdog = Some(tokio::spawn(async move {
            let shared = &*shared;
            run_watchdog(&shared.life, limits, |ttl| async move { shared.extend(ttl).await.is_ok() }).await;
        }));
    }

    /// `LOCK.RELEASE` on every node (also those that did not grant; for a
    /// set, `LOCK.MRELEASE`, a node counting only if it released them all).
    /// Returns once the mode's quorum confirmed; the other nodes' releases
    /// go on in the background (`Tally::pending` counts them; call
    /// [`crate::Redlock::settle`] before the process exits so that they all get
    /// there). `Err(NoQuorum)` when fewer confirmed (after waiting for
    /// every node): the lock had expired or been taken on them, so the work
    /// done under it may not have been exclusive.
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
            resource: self.resource().to_string(),
            resources: self.resources().to_vec(),
            token: self.shared.token.clone(),
            fencing_token: self.shared.fenced.get().copied(),
            deadline: self.shared.life.lease().deadline,
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
            let background = shared.nodes.background();
            runtime.spawn(async move {
                let _background = background;
                let _ = shared.release().await;
            });
        }
    }
}

impl Shared {
    /// The fencing round for T (see [`Guard::fencing_token`]). Not under
    /// `op`: it changes no lease, and an extension may run meanwhile; the
    /// deadline it is held to is the one before the round, the earlier.
    async fn fence(&self) -> Result<u64> {
        let label = self.claim.label();
        self.life.check_held(label)?;
        let deadline = self.life.lease().deadline;
        fence(&self.nodes, &self.claim, &self.token, self.floor, &self.grants, deadline).await?;
        // The majority must have answered within the validity.
        self.life.check_held(label)?;
        Ok(self.floor)
    }

    async fn extend(&self, ttl: Duration) -> Result<Duration> {
        let _op = self.op.lock().await;
        self.life.check_held(self.claim.label())?;
        let ttl = check_ttl(ttl)?;
        match extend(&self.nodes, &self.claim, &self.token, ttl).await {
            Ok(lease) => {
                self.life.renewed(lease);
                Ok(quorum::remaining(lease.deadline, Instant::now()))
            }
            Err(Error::InvalidArgument(what)) => Err(Error::InvalidArgument(what)),
            Err(error) => {
                self.life.mark_lost(Lost::RenewalFailed(Box::new(error.clone())));
                Err(error)
            }
        }
    }

    async fn release(&self) -> Result<Tally> {
        // Waits for an extension in flight (an aborted watchdog lets go of
        // the lock at once), so the RELEASE is queued after its EXTEND.
        let _op = self.op.lock().await;
        let result = release_quorum(&self.nodes, &self.claim, &self.token).await;
        self.life.released();
        result
    }
}

#[cfg(test)]
mod tests {
    //! The watchdog's schedule and the loss reports, on tokio's paused
    //! clock: `sleep` and `sleep_until` complete when the runtime has
    //! nothing else to do, by advancing the clock to the next timer, so
    //! every instant below is exact. The renewal is a fake (it takes `RTT`
    //! and succeeds or fails as told): these tests are about when things
    //! happen, not about the nodes.

    use std::cell::RefCell;

    use super::*;

    const TTL: Duration = Duration::from_millis(900);
    const RTT: Duration = Duration::from_millis(4);

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// A fake renewal round that starts now, takes `RTT`, and succeeds
    /// (the new lease starts when the round did) unless `fail` says so;
    /// records when each round began.
    async fn renew(life: &Lifetime, ttl: Duration, calls: &RefCell<Vec<Instant>>, fail: bool) -> bool {
        let start = Instant::now();
        calls.borrow_mut().push(start);
        // A watchdog past its bounds would renew forever: fail, not hang.
        assert!(calls.borrow().len() <= 100, "renewing without end");
        tokio::time::sleep(RTT).await;
        if fail {
            let error = Error::InvalidArgument("the fake renewal failed".into());
            life.mark_lost(Lost::RenewalFailed(Box::new(error)));
            return false;
        }
        life.renewed(Lease::new(start, ttl));
        true
    }

    #[tokio::test(start_paused = true)]
    async fn the_watchdog_renews_every_third_of_the_ttl_then_reports_the_failure_at_once() {
        let t0 = Instant::now();
        let life = Lifetime::new(Lease::new(t0, TTL));
        let calls = RefCell::new(Vec::new());
        let lost = life.lost();
        // Renewals 1..=4 succeed, the fifth fails.
        let watchdog = run_watchdog(&life, Watchdog::default(), |ttl| {
            let fail = calls.borrow().len() == 4;
            renew(&life, ttl, &calls, fail)
        });
        let (_, reason) = tokio::join!(watchdog, async {
            let reason = lost.await;
            (reason, Instant::now())
        });
        let (reason, at) = reason;
        // Every ttl/3 from the start of the lease before, not from the end
        // of the round: the lease starts when its round did.
        let third = TTL / 3;
        let expected: Vec<Instant> = (1..=5).map(|k| t0 + third * k).collect();
        assert_eq!(*calls.borrow(), expected);
        assert!(matches!(reason, Lost::RenewalFailed(_)), "{reason:?}");
        // Reported as the failed round ended, long before the validity of
        // the last lease (it started at 4 * ttl/3) runs out.
        assert_eq!(at, t0 + third * 5 + RTT);
        let last_deadline = quorum::deadline(t0 + third * 4, TTL);
        assert!(at < last_deadline, "{:?} before the deadline", last_deadline - at);
        assert!(matches!(life.status(), Status::Lost(Lost::RenewalFailed(_))));
    }

    #[tokio::test(start_paused = true)]
    async fn a_renewal_that_hangs_is_reported_when_the_validity_ends() {
        let t0 = Instant::now();
        let life = Lifetime::new(Lease::new(t0, TTL));
        let lost = life.lost();
        // The renewal never comes back (a node that does not answer, a
        // round stuck behind its timeouts).
        let watchdog = run_watchdog(&life, Watchdog::default(), |_| std::future::pending::<bool>());
        tokio::select! {
            _ = watchdog => panic!("the watchdog cannot end"),
            reason = lost => {
                assert_eq!(reason, Lost::Expired);
                assert_eq!(Instant::now(), quorum::deadline(t0, TTL), "exactly at the deadline");
            }
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_bounded_watchdog_stops_and_the_loss_comes_at_the_last_deadline() {
        let t0 = Instant::now();
        let life = Lifetime::new(Lease::new(t0, TTL));
        let calls = RefCell::new(Vec::new());
        let lost = life.lost();
        let limits = Watchdog { renewals_max: 2, duration_max: Duration::from_secs(60) };
        run_watchdog(&life, limits, |ttl| renew(&life, ttl, &calls, false)).await;
        let third = TTL / 3;
        assert_eq!(*calls.borrow(), [t0 + third, t0 + third * 2]);
        assert_eq!(
            life.status(),
            Status::Held {
                deadline: quorum::deadline(t0 + third * 2, TTL),
                renewal: Renewal::Stopped { renewals: 2 }
            }
        );
        // It stopped at once, without sleeping again.
        assert_eq!(Instant::now(), t0 + third * 2 + RTT);
        assert_eq!(lost.await, Lost::WatchdogLimit { renewals: 2 });
        assert_eq!(Instant::now(), quorum::deadline(t0 + third * 2, TTL));

        // The duration bound: no renewal due after duration_max.
        let t1 = Instant::now();
        let life = Lifetime::new(Lease::new(t1, TTL));
        let calls = RefCell::new(Vec::new());
        let limits = Watchdog { renewals_max: 100, duration_max: third * 3 };
        run_watchdog(&life, limits, |ttl| renew(&life, ttl, &calls, false)).await;
        assert_eq!(*calls.borrow(), [t1 + third, t1 + third * 2, t1 + third * 3], "the last at the bound");
        assert_eq!(life.lease().start, t1 + third * 3);
    }

    #[tokio::test(start_paused = true)]
    async fn without_a_watchdog_the_loss_comes_at_the_deadline_and_a_release_silences_it() {
        let t0 = Instant::now();
        let life = Lifetime::new(Lease::new(t0, TTL));
        // An extension by hand moves the deadline the future waits for.
        let lost = life.lost();
        tokio::time::sleep(ms(500)).await;
        let extended = Lease::new(Instant::now(), TTL);
        life.renewed(extended);
        assert_eq!(lost.await, Lost::Expired);
        assert_eq!(Instant::now(), extended.deadline);
        assert_eq!(life.check_held("r"), Err(Error::Lost { resource: "r".into(), reason: Lost::Expired }));
        assert!(matches!(life.status(), Status::Lost(Lost::Expired)), "check_held marks it");
        // Already lost: at once.
        let before = Instant::now();
        assert_eq!(life.lost().await, Lost::Expired);
        assert_eq!(Instant::now(), before);

        // Released before the deadline: the future never completes.
        let life = Lifetime::new(Lease::new(Instant::now(), TTL));
        let lost = life.lost();
        life.released();
        let waited = tokio::time::timeout(TTL * 10, lost).await;
        assert!(waited.is_err(), "no loss after a release");
        assert!(matches!(life.check_held("r"), Err(Error::InvalidArgument(_))));
        life.mark_lost(Lost::Expired);
        assert_eq!(life.status(), Status::Released, "a released lock is not lost later");
    }
}
