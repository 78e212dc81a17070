//! The lifetime of a held lock, with no I/O: its lease and status (held
//! until a deadline, lost, released), what [`crate::Guard::lost`] waits
//! for, and the watchdog's schedule (renew every ttl/3, within bounds).
//!
//! Time is tokio's clock (`tokio::time::Instant`, `sleep_until`). Nothing
//! here sends a command: the watchdog calls the renewal it is given, so
//! the tests below run it on tokio's paused clock with a fake renewal and
//! assert exact instants.

use std::future::Future;
use std::sync::Mutex as StdMutex;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use crate::error::{Error, Lost, Result};
use crate::quorum;
use crate::rounds::lease::Lease;

/// Bounds of the automatic renewal: it stops after `renewals_max` renewals
/// or once `duration_max` has passed since it started, whichever comes
/// first; the lock then runs out at the end of its last validity, and
/// [`crate::Guard::lost`] fires with [`Lost::WatchdogLimit`].
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

/// The state of a guard, as seen by [`crate::Guard::status`] and
/// [`crate::Guard::subscribe`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Status {
    /// Held until `deadline` (on tokio's clock, this process's monotonic
    /// clock), unless renewed.
    Held { deadline: Instant, renewal: Renewal },
    /// Lost: do not touch the protected resource any more.
    Lost(Lost),
    /// Released by [`crate::Guard::release`] or on drop.
    Released,
}

/// The lease of a held lock and its status, with no I/O: what the guard,
/// the watchdog and [`crate::Guard::lost`] share.
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

    pub(crate) fn status(&self) -> Status {
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

    /// Every change of status, from now on.
    pub(crate) fn subscribe(&self) -> watch::Receiver<Status> {
        self.status.subscribe()
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

    pub(crate) fn set_renewal(&self, to: Renewal) {
        self.status.send_if_modified(|status| match status {
            Status::Held { renewal, .. } => {
                *renewal = to;
                true
            }
            _ => false,
        });
    }

    pub(crate) fn released(&self) {
        self.status.send_replace(Status::Released);
    }

    /// `Ok` while held within the validity; once the deadline has passed
    /// the lock is marked lost, and that is the error.
    pub(crate) fn check_held(&self, resource: &str) -> Result<()> {
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

    /// Completes when the lock is lost (see [`crate::Guard::lost`]).
    pub(crate) fn lost(&self) -> impl Future<Output = Lost> + Send + 'static {
        let mut rx = self.status.subscribe();
        async move {
            loop {
                let status = rx.borrow_and_update().clone();
                match status {
                    Status::Lost(reason) => return reason,
                    Status::Released => return std::future::pending().await,
                    Status::Held { deadline, renewal } => {
                        // Biased: either order gives the same outcome (a
                        // change seen after the sleep loops too), and a
                        // fixed one keeps a simulated run deterministic.
                        tokio::select! {
                            biased;
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
/// wakes every [`crate::Guard::lost`] future) or the bounds of `limits` are
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
