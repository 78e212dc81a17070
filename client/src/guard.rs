//! A held lock: its token, its fencing token (asked for lazily), validity,
//! explicit extend and release, release on drop, and the watchdog that
//! renews it and says at once when it is lost.
//!
//! When things happen (the lease's deadline, the loss, the watchdog's
//! schedule) is decided in `lifetime.rs`, with no I/O; this file adds the
//! rounds that a guard runs on the nodes it was granted on.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{watch, Mutex, OnceCell};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::claim::Claim;
use crate::error::{Error, Lost, Result};
use crate::lifetime::{run_watchdog, Lifetime, Renewal, Status, Watchdog};
use crate::quorum::{self, Answer, Mode, Tally};
use crate::rounds::extend::extend;
use crate::rounds::fanout::Members;
use crate::rounds::fence::fence;
use crate::rounds::grant::Granted;
use crate::rounds::lease::{check_ttl, Lease};
use crate::rounds::release::release_quorum;

pub(crate) struct Shared {
    /// The nodes it was granted on, where its own rounds run.
    members: Members,
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
/// held, no other holder of a plain lock (or writer, or permit beyond the
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
    pub(crate) fn new(members: Members, claim: Claim, token: String, granted: Granted) -> Guard {
        let shared = Shared {
            members,
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
        self.shared.life.subscribe()
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
    /// done under it may have overlapped another holder's.
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
            let background = shared.members.background();
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
        fence(&self.members, &self.claim, &self.token, self.floor, &self.grants, deadline).await?;
        // The majority must have answered within the validity.
        self.life.check_held(label)?;
        Ok(self.floor)
    }

    async fn extend(&self, ttl: Duration) -> Result<Duration> {
        let _op = self.op.lock().await;
        self.life.check_held(self.claim.label())?;
        let ttl = check_ttl(ttl)?;
        match extend(&self.members, &self.claim, &self.token, ttl).await {
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
        let result = release_quorum(&self.members, &self.claim, &self.token).await;
        self.life.released();
        result
    }
}
