//! [`Redlock`]: the client's API over N lock nodes. It checks its
//! arguments, runs the quorum rounds (in `rounds/`) and hands out a
//! [`Guard`] for what it granted; the protocol itself, and why it is safe,
//! is written next to each round.

use lock_protocol::command as names;
use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use crate::claim::{check_name, command, Claim};
#[cfg(doc)]
use crate::error::Error;
use crate::error::{Phase, Result};
use crate::guard::Guard;
use crate::info::{self, NodeInfo};
use crate::node::Request;
use crate::quorum::{self, Mode, RetryPolicy, Tally};
use crate::rounds::extend::extend;
use crate::rounds::fanout::{Config, Members};
use crate::rounds::grant::{grant, Kind};
use crate::rounds::lease::{check_ttl, Lease};
use crate::rounds::release::release_by_token;
use crate::sim;
use crate::status::{self, QuorumStatus};

impl RetryPolicy {
    /// Runs `attempt` until it succeeds, fails with an error that is not
    /// retryable ([`Error::is_retryable`]), or the policy is spent, sleeping
    /// a random delay within the policy between two attempts (on tokio's
    /// clock). Returns the last attempt's error. [`Redlock::acquire`] is
    /// this around [`Redlock::try_acquire`]; wrap your own steps with it,
    /// e.g. an acquire followed by [`Guard::fencing_token`] (the CLI does).
    pub async fn retry<T, F, Fut>(&self, mut attempt: F) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        let started = Instant::now();
        let mut attempts = 0u32;
        loop {
            attempts = attempts.saturating_add(1);
            let error = match attempt().await {
                Ok(done) => return Ok(done),
                Err(error) => error,
            };
            if !error.is_retryable() {
                return Err(error);
            }
            match self.delay_after(attempts, started.elapsed(), sim::random::<f64>()) {
                Some(delay) => tokio::time::sleep(delay).await,
                None => return Err(error),
            }
        }
    }
}

/// A reentrant hold obtained by [`Redlock::enter`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entered {
    pub fencing_token: u64,
    pub lease: Lease,
}

/// A client for N independent members (lock masters or clusters). Cheap to
/// clone (shared).
#[derive(Clone)]
pub struct Redlock {
    members: Members,
}

impl std::fmt::Debug for Redlock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Redlock")
            .field("nodes", &self.node_urls())
            .field("config", &self.members.config())
            .finish()
    }
}

impl Redlock {
    /// Parses the members, each one master
    /// (`redis://[[user]:password@]host:port[/db]`) or one cluster
    /// (`redis+cluster://[[user]:password@]host:port[?addr=host:port&addr=host:port]`,
    /// seeds; one vote) or one master under Sentinel
    /// (`redis+sentinel://[[user]:password@]host:port/master-name[?addr=host:port&sentinel_password=...]`,
    /// Sentinels; one vote), and opens their connections, in parallel (a
    /// cluster: its topology first, then one connection per master). A
    /// node that cannot be reached now is not an error: it counts as
    /// unreachable, and later calls try it again. A bad spelling is an
    /// [`Error::InvalidArgument`] that says what to write.
    pub async fn connect<I, S>(members: I, config: Config) -> Result<Redlock>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        Ok(Redlock { members: Members::connect(members, config).await? })
    }

    /// The members, as given.
    pub fn node_urls(&self) -> Vec<String> {
        self.members.list().iter().map(|m| m.text.clone()).collect()
    }

    /// How many nodes must agree: `N / 2 + 1`.
    pub fn majority(&self) -> usize {
        quorum::majority(self.members.len())
    }

    /// How many nodes must grant (and extend) a lock taken in `mode`: a
    /// majority, except for a semaphore with 2 or more permits (see
    /// [`quorum::semaphore_quorum`]: 4 of 5 nodes for 2 permits).
    pub fn quorum(&self, mode: Mode) -> usize {
        mode.quorum().need(self.members.len())
    }

    pub fn config(&self) -> Config {
        self.members.config()
    }

    /// Waits until the work that earlier calls left running in the
    /// background has ended: the calls to nodes that had not answered yet
    /// when a round returned at its majority, and the releases of dropped
    /// guards. Call it before the process exits, so that every node gets
    /// its release (a lock left on a minority of nodes is harmless, but
    /// stays there until its TTL).
    ///
    /// Bounded: it returns after `2 * (2 * connect_timeout +
    /// command_timeout)` at the latest.
    pub async fn settle(&self) {
        self.members.settle().await;
    }

    /// One attempt to take `resource` in `mode` for `ttl`: the grant
    /// command of that mode (`LOCK.ACQUIRE` for [`Mode::Plain`],
    /// `LOCK.SHARED` for [`Mode::Read`], `LOCK.EXCLUSIVE` for
    /// [`Mode::Write`], `LOCK.SEMAPHORE` for [`Mode::Permit`]) on every node
    /// in parallel, needing the mode's quorum ([`Redlock::quorum`]), within
    /// the validity. One round trip: the fencing round runs later, when
    /// [`Guard::fencing_token`] is first asked for. On any failure the
    /// partial grants are released on every node before this returns:
    /// [`Error::Contended`] (another owner holds it), [`Error::NoQuorum`],
    /// [`Error::ExpiredBeforeUse`], or [`Error::InvalidArgument`].
    ///
    /// A read, write or permit guard extends and releases like a plain one,
    /// with its mode's quorum. A fenced holder's token is above the token of
    /// every fenced holder whose hold ended before its own began: from one
    /// plain holder (or writer) to the next, tokens strictly increase.
    /// Readers and permit holders hold at the same time; one that asks for
    /// its token before the next is granted gets a lower token than that
    /// one, but two granted before either asked may get the same token.
    pub async fn try_acquire(&self, resource: &str, mode: Mode, ttl: Duration) -> Result<Guard> {
        let ttl = check_ttl(ttl)?;
        self.take(Claim::one(resource, mode)?, ttl).await
    }

    /// [`Redlock::try_acquire`], retried after a random delay while the
    /// failure is retryable (held, no quorum, too slow), within `policy`
    /// (see [`RetryPolicy::retry`]). Returns the last attempt's error.
    pub async fn acquire(
        &self,
        resource: &str,
        mode: Mode,
        ttl: Duration,
        policy: &RetryPolicy,
    ) -> Result<Guard> {
        policy.retry(|| self.try_acquire(resource, mode, ttl)).await
    }

    /// One attempt to take every resource of a set, each in its mode
    /// ([`Mode::Plain`], [`Mode::Read`] or [`Mode::Write`]), all or
    /// nothing, with one token, one TTL and one fencing token: one
    /// `LOCK.MACQUIRE` per node, in parallel. A node grants the whole set
    /// or nothing; the set is held when a majority of nodes granted it
    /// within the validity (a node that grants part of it does not exist:
    /// MACQUIRE is atomic). One round trip, like [`Redlock::try_acquire`],
    /// and the same [`Guard`]: its extensions (`LOCK.RENEW` over the set),
    /// watchdog, release (`LOCK.MRELEASE`) and fencing round (`LOCK.FENCE`
    /// on every key) count a node only if it did the whole set. On failure
    /// the set is released on every node before this returns.
    ///
    /// A set of one resource is [`Redlock::try_acquire`] (the single-key
    /// commands). Refused before any round ([`Error::InvalidArgument`]):
    /// no resource, more than [`quorum::SET_KEYS_MAX`], a resource named
    /// twice, a [`Mode::Permit`] (semaphores are not taken in sets), and,
    /// when a member is a cluster, resources in different hash slots (the
    /// error names two and suggests a hash tag: `{orders}:1`,
    /// `{orders}:2`).
    ///
    /// No deadlock whatever the order: a node grants the set at once or
    /// refuses it at once, so no client ever holds part of a set while it
    /// waits for the rest; overlapping sets given in any order are free of
    /// deadlock, and a refused attempt retries (see
    /// [`Redlock::acquire_many`]).
    pub async fn try_acquire_many<R: AsRef<str>>(
        &self,
        resources: &[(R, Mode)],
        ttl: Duration,
    ) -> Result<Guard> {
        let ttl = check_ttl(ttl)?;
        self.take(self.set(resources)?, ttl).await
    }

    /// [`Redlock::try_acquire_many`], retried like [`Redlock::acquire`].
    pub async fn acquire_many<R: AsRef<str>>(
        &self,
        resources: &[(R, Mode)],
        ttl: Duration,
        policy: &RetryPolicy,
    ) -> Result<Guard> {
        let ttl = check_ttl(ttl)?;
        let claim = self.set(resources)?;
        policy.retry(|| self.take(claim.clone(), ttl)).await
    }

    /// One grant round for `claim` under a new random token.
    async fn take(&self, claim: Claim, ttl: Duration) -> Result<Guard> {
        let token = quorum::token_from_bits(sim::random());
        let granted = grant(&self.members, Kind::Lock(&claim), &token, ttl, false).await?;
        Ok(Guard::new(self.members.clone(), claim, token, granted))
    }

    /// `LOCK.RELEASE` of the lock held with `token` (taken in `mode`) on
    /// every node, waiting for every answer (or its timeout): exact counts,
    /// for tools like the CLI. `Ok` with the counts when the mode's quorum
    /// released (a majority; for a semaphore fewer than its quorum means
    /// the permit was no longer counted on enough nodes to bound the
    /// holders); `Err(NoQuorum)` otherwise (the lock had expired or been
    /// taken on too many nodes, or they did not answer). [`Guard::release`]
    /// returns at the quorum instead.
    pub async fn release(&self, resource: &str, token: &str, mode: Mode) -> Result<Tally> {
        check_name("token", token)?;
        release_by_token(&self.members, &Claim::one(resource, mode)?, token).await
    }

    /// [`Redlock::release`] of a set taken with
    /// [`Redlock::try_acquire_many`] (`LOCK.MRELEASE` on every node): a
    /// node counts as released when it released every resource of the set
    /// (the modes do not matter: a set needs a majority).
    pub async fn release_many<R: AsRef<str>>(&self, resources: &[R], token: &str) -> Result<Tally> {
        check_name("token", token)?;
        release_by_token(&self.members, &self.by_token(resources)?, token).await
    }

    /// `LOCK.EXTEND` of the lock held with `token` (taken in `mode`) on
    /// every node: held again for `ttl` from the start of the round when the
    /// mode's quorum answered 1 within the new validity (a semaphore permit
    /// extended on fewer nodes than its grant needed no longer bounds the
    /// number of holders). Returns at that quorum (the other nodes' calls go
    /// on in the background, queued before any later command to them).
    pub async fn extend(&self, resource: &str, token: &str, mode: Mode, ttl: Duration) -> Result<Lease> {
        let ttl = check_ttl(ttl)?;
        check_name("token", token)?;
        extend(&self.members, &Claim::one(resource, mode)?, token, ttl).await
    }

    /// [`Redlock::extend`] of a set taken with
    /// [`Redlock::try_acquire_many`] (`LOCK.RENEW` over the set on every
    /// node): a node counts only if it extended every resource of the set.
    pub async fn extend_many<R: AsRef<str>>(
        &self,
        resources: &[R],
        token: &str,
        ttl: Duration,
    ) -> Result<Lease> {
        let ttl = check_ttl(ttl)?;
        check_name("token", token)?;
        extend(&self.members, &self.by_token(resources)?, token, ttl).await
    }
    /// Reentrant acquire (`LOCK.ENTER` on every node, then the fencing
    /// round at once): the first entry by `owner` grants a new fencing
    /// token, later ones add a hold on each node and return the same token.
    /// On failure, the hold just added is taken back (`LOCK.EXIT`) on the
    /// nodes that granted it. A node that did not answer may keep that
    /// extra hold until its TTL: the outcome there is unknown, and an EXIT
    /// could take back an earlier hold instead.
    pub async fn enter(&self, resource: &str, owner: &str, ttl: Duration) -> Result<Entered> {
        let ttl = check_ttl(ttl)?;
        check_name("resource", resource)?;
        check_name("owner", owner)?;
        let granted = grant(&self.members, Kind::Reentrant(resource), owner, ttl, true).await?;
        Ok(Entered { fencing_token: granted.floor, lease: granted.lease })
    }

    /// Reentrant release (`LOCK.EXIT` on every node): the holds left (the
    /// largest count among the nodes that answered; 0 = free everywhere
    /// that answered). `Err(NoQuorum)` unless a majority answered.
    pub async fn exit(&self, resource: &str, owner: &str) -> Result<u64> {
        check_name("owner", owner)?;
        let request = Request::one(command(names::text(names::EXIT), resource, owner, &[]), resource);
        let answers =
            self.members.round(&request, self.members.config().command_timeout, quorum::classify_exit).await;
        let tally = Tally::of(&answers);
        match quorum::holds_left(answers.iter()) {
            Some(left) if tally.has_quorum() => Ok(left),
            _ => Err(self.members.shortfall(resource, Phase::Exit, tally)),
        }
    }

    /// `LOCK.INFO` on every member, in member order (for a cluster, from
    /// the master of the resource's slot, named in [`NodeInfo::shard`]).
    pub async fn info(&self, resource: &str) -> Vec<NodeInfo> {
        info::info(&self.members, resource).await
    }

    /// `INFO lock` on every node, waiting for every answer (or its
    /// timeout): per member whether it can grant now and if not why
    /// (unreachable, no module, quarantined with the ms left, an evicting
    /// `maxmemory-policy`), its fencing counter and the protections its
    /// settings turn off; the settings that differ between nodes; and
    /// whether a majority can grant right now ([`QuorumStatus::summary`]).
    pub async fn status(&self) -> QuorumStatus {
        status::status(&self.members).await
    }

    /// `LOCK.CHECK resource fencing_token` on every node, waiting for every
    /// answer (or its timeout): is `fencing_token` the live grant of
    /// `resource` on a majority? [`Tally::has_quorum`] says so; a yes is a
    /// node on which it is the live grant (for a read-write lock or a
    /// semaphore, one of them), a no one on which it is not (released,
    /// expired, a later holder). For a resource server handed a fencing
    /// token, which cannot know which node is late: the quorum's word
    /// rather than one node's. `Err` only for an invalid resource name.
    pub async fn check(&self, resource: &str, fencing_token: u64) -> Result<Tally> {
        check_name("resource", resource)?;
        let mut cmd = redis::cmd(names::text(names::CHECK));
        cmd.arg(resource).arg(fencing_token);
        let timeout = self.members.config().command_timeout;
        let answers = self.members.round(&Request::one(cmd, resource), timeout, quorum::classify_flag).await;
        Ok(Tally::of(&answers))
    }
}

impl Redlock {
    /// A set to take: [`Claim::set`], and with a cluster member among the
    /// quorum, every key in one hash slot ([`Claim::check_one_slot`]).
    fn set<R: AsRef<str>>(&self, resources: &[(R, Mode)]) -> Result<Claim> {
        let claim = Claim::set(resources)?;
        if self.members.has_cluster() {
            claim.check_one_slot()?;
        }
        Ok(claim)
    }

    /// The set a by-token release or extension names: the modes do not
    /// change its commands, and a set of two or more needs a majority.
    fn by_token<R: AsRef<str>>(&self, resources: &[R]) -> Result<Claim> {
        let keys: Vec<(&str, Mode)> = resources.iter().map(|r| (r.as_ref(), Mode::Plain)).collect();
        self.set(&keys)
    }
}

#[cfg(test)]
mod tests {
    //! The retries, on tokio's paused clock: every delay below is exact.

    use std::cell::RefCell;
    use std::rc::Rc;

    use super::*;
    use crate::error::Error;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[tokio::test(start_paused = true)]
    async fn retries_wait_within_the_policy_and_stop_at_its_bounds() {
        let policy = RetryPolicy::within(ms(1_000)).with_delays(ms(20), ms(60));
        let attempts: Rc<RefCell<Vec<Instant>>> = Rc::default();
        let t0 = Instant::now();
        let result: Result<()> = policy
            .retry(|| {
                attempts.borrow_mut().push(Instant::now());
                assert!(attempts.borrow().len() <= 1_000, "retrying without end");
                async {
                    tokio::time::sleep(ms(3)).await;
                    Err(Error::NoQuorum {
                        resource: "r".into(),
                        phase: crate::Phase::Acquire,
                        tally: Box::default(),
                    })
                }
            })
            .await;
        assert!(matches!(result, Err(Error::NoQuorum { .. })), "the last error");
        let attempts = attempts.borrow().clone();
        assert!(attempts.len() >= 1_000 / 63 && attempts.len() <= 1_000 / 23 + 1, "{}", attempts.len());
        // Each delay is within the policy, except one cut short so that
        // the last attempt starts exactly at the total.
        for pair in attempts.windows(2) {
            let gap = pair[1] - pair[0] - ms(3);
            let cut = pair[1] == t0 + ms(1_000);
            assert!((gap >= ms(20) || cut) && gap <= ms(60), "delay {gap:?}");
        }
        let last = *attempts.last().unwrap() - t0;
        assert!(last <= ms(1_000), "an attempt started after the total: {last:?}");
        assert!(last > ms(1_000 - 63), "gave up early, at {last:?}");

        // A count: exactly that many attempts; an error that a retry cannot
        // fix (a caller mistake): one.
        for (policy, error, expected) in [
            (
                RetryPolicy::attempts(4).with_delays(ms(5), ms(5)),
                Error::ExpiredBeforeUse { resource: "r".into(), ttl: ms(10), elapsed: ms(10), drift: ms(2) },
                4,
            ),
            (RetryPolicy::attempts(4), Error::InvalidArgument("bad ttl".into()), 1),
        ] {
            let count = RefCell::new(0);
            let t0 = Instant::now();
            let result: Result<()> = policy
                .retry(|| {
                    *count.borrow_mut() += 1;
                    // Retrying past the policy would go on forever: fail.
                    assert!(*count.borrow() <= 100, "retrying without end");
                    std::future::ready(Err(error.clone()))
                })
                .await;
            assert_eq!(result, Err(error.clone()));
            assert_eq!(*count.borrow(), expected, "{error}");
            if expected == 4 {
                assert_eq!(Instant::now() - t0, ms(15), "three delays of 5 ms");
            }
        }
        // Success ends it at once.
        let done = RetryPolicy::attempts(3).retry(|| std::future::ready(Ok::<_, Error>(7))).await;
        assert_eq!(done, Ok(7));
    }
}
