//! Workloads on ONE node, spoken directly (no quorum client): where a
//! node's own properties show without a majority masking them. Fair
//! hand-off (`LOCK.ACQUIRE ... WAIT`, with newcomers that do not wait),
//! reentrant `LOCK.ENTER` / `LOCK.EXIT ... ID` with exits sent again when
//! their reply is lost, semaphore permits and read-write locks with `WAIT`;
//! holders sometimes crash (never release). All of it is recorded in the
//! same history as the quorum workloads and checked by the same checker.
//!
//! Validity on one node needs no drift allowance: the node computes a
//! grant's deadline as its own now + TTL, and its now is after the client
//! sent the request, so the lock lasts at least until send + TTL on the
//! shared monotonic clock (the node's clock runs at the real rate here).

use std::sync::Arc;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::conn::{command, Conn, Reply};
use super::history::{Op, Outcome, Want};
use super::worker::{Ctx, Request, READS_WALKING_AWAY};

/// How long a `WAIT` may block; the call's own timeout is a little longer.
const WAIT_MS: u64 = 1_500;
const CALL: Duration = Duration::from_millis(300);

/// What one one-node worker does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// `LOCK.ACQUIRE plain ... WAIT` (two of three attempts) or without.
    Plain,
    /// `LOCK.ENTER` twice, `LOCK.EXIT ... ID` twice.
    Reentrant,
    /// `LOCK.SEMAPHORE sem token 2 ...` with `WAIT`.
    Permit,
    /// `LOCK.SHARED` / `LOCK.EXCLUSIVE rw ...` with `WAIT`.
    ReadWrite,
}

impl Role {
    pub fn resource(self) -> &'static str {
        match self {
            Role::Plain => "plain",
            Role::Reentrant => "reentrant",
            Role::Permit => "sem",
            Role::ReadWrite => "rw",
        }
    }
}

pub const PERMITS: u32 = 2;

/// One session of a one-node worker: the op being filled in.
pub struct Session {
    pub op: Op,
    pub owner: String,
}

pub struct OneNode {
    pub id: usize,
    pub role: Role,
    pub conn: Conn,
    pub ctx: Arc<Ctx>,
    sessions: u64,
}

fn ms(d: Duration) -> String {
    (d.as_millis() as u64).to_string()
}

impl OneNode {
    pub fn new(id: usize, role: Role, url: &str, ctx: Arc<Ctx>) -> OneNode {
        OneNode { id, role, conn: Conn::new(url), ctx, sessions: 0 }
    }

    fn owner(&mut self) -> String {
        self.sessions += 1;
        format!("w{}-{}", self.id, self.sessions)
    }

    /// One grant attempt of `want` on `resource` (`wait`: with `WAIT`).
    /// `Ok` with the session when granted; recorded either way.
    pub async fn grant(&mut self, resource: &str, want: Want, wait: bool) -> Result<Session, ()> {
        let owner = self.owner();
        let ttl = ms(self.ctx.ttl);
        let permits = PERMITS.to_string();
        let mut words: Vec<&str> = match want {
            Want::Plain => vec!["LOCK.ACQUIRE", resource, &owner, &ttl],
            Want::Reentrant => vec!["LOCK.ENTER", resource, &owner, &ttl],
            Want::Read => vec!["LOCK.SHARED", resource, &owner, &ttl],
            Want::Write => vec!["LOCK.EXCLUSIVE", resource, &owner, &ttl],
            Want::Permit(_) => vec!["LOCK.SEMAPHORE", resource, &owner, &permits, &ttl],
        };
        let wait_ms = WAIT_MS.to_string();
        if wait {
            words.extend(["WAIT", &wait_ms]);
        }
        let limit = if wait { Duration::from_millis(WAIT_MS) + CALL } else { CALL };
        let rec = &self.ctx.rec;
        let invoke = rec.now();
        let reply = self.conn.call(&command(&words), limit).await;
        let mut op = Op::new(self.id, resource, want, invoke);
        op.complete = rec.now();
        op.token = Some(owner.clone());
        match reply {
            Reply::Int(fence) if fence > 0 => {
                op.fence = Some(fence as u64);
                op.lease(op.complete, invoke + self.ctx.ttl);
                Ok(Session { op, owner })
            }
            Reply::Nil => {
                op.outcome = Outcome::Fail;
                rec.op(op);
                Err(())
            }
            other => {
                // An error changes nothing; no answer may have granted.
                op.outcome = if matches!(other, Reply::Error(..)) { Outcome::Fail } else { Outcome::Unknown };
                op.error = Some(format!("{other:?}"));
                rec.op(op);
                Err(())
            }
        }
    }

    /// Reads the register under the session's lock.
    fn read(&self, s: &mut Session) -> Option<u64> {
        let fence = s.op.fence;
        self.ctx.read_register(self.id, &mut s.op, fence)
    }

    /// Writes `base + 1` if at least 50 ms of validity are left.
    fn careful_write(&self, s: &mut Session, base: u64) {
        let at = self.ctx.rec.now();
        if s.op.validity_end.is_none_or(|end| at + Duration::from_millis(50) >= end) {
            s.op.aborted = true;
            return;
        }
        let fence = s.op.fence;
        self.ctx.write_register(self.id, &mut s.op, fence, base);
    }

    /// Releases with `LOCK.RELEASE` and records the session.
    pub async fn release(&mut self, mut s: Session) {
        s.op.release = Some(self.ctx.rec.now());
        let cmd = command(&["LOCK.RELEASE", &s.op.resource, &s.owner]);
        let _ = self.conn.call(&cmd, CALL).await;
        self.ctx.rec.op(s.op);
    }

    /// The holder crashes: nothing is released.
    fn abandon(&self, mut s: Session) -> Duration {
        s.op.abandoned = true;
        let at = self.ctx.rec.now();
        self.ctx.rec.op(s.op);
        at
    }

    /// A crash the nemesis asked for, if any: abandons the session.
    fn crash_requested(&self, s: Session) -> Result<Session, ()> {
        match self.ctx.requests.lock().unwrap_or_else(|p| p.into_inner()).get_mut(self.id) {
            Some(slot @ Some(Request::Crash(_))) => {
                if let Some(Request::Crash(done)) = slot.take() {
                    let at = self.abandon(s);
                    let _ = done.send(at);
                }
                Err(())
            }
            _ => Ok(s),
        }
    }

    async fn work(&self, rng: &mut StdRng) {
        let ttl_ms = self.ctx.ttl.as_millis() as u64;
        tokio::time::sleep(Duration::from_millis(rng.gen_range(1..=ttl_ms / 4))).await;
    }

    /// One reentrant session: enter twice, work, exit twice with request
    /// ids, an exit sent again (same id) while its reply is lost. The
    /// worker counts its own holds, as a reentrant lock's user does; a
    /// node that applied a retried exit twice frees the lock under it.
    pub async fn reentrant_session(&mut self, resource: &str, rng: &mut StdRng) {
        let Ok(mut s) = self.grant(resource, Want::Reentrant, false).await else { return };
        let ttl = ms(self.ctx.ttl);
        let invoke = self.ctx.rec.now();
        let again = self.conn.call(&command(&["LOCK.ENTER", resource, &s.owner, &ttl]), CALL).await;
        let mut holds = 1;
        if let Reply::Int(_) = again {
            holds = 2;
            s.op.renewed_invoke = invoke;
            s.op.lease(self.ctx.rec.now(), invoke + self.ctx.ttl);
        }
        let Ok(mut s) = self.crash_requested(s) else { return };
        let base = self.read(&mut s);
        self.work(rng).await;
        if let Some(base) = base {
            self.careful_write(&mut s, base);
        }
        for exit in 1..=holds {
            if exit == holds {
                // The last exit frees the lock: the holder stops using it.
                s.op.release = Some(self.ctx.rec.now());
            }
            let id = format!("{}-x{exit}", s.owner);
            let cmd = command(&["LOCK.EXIT", resource, &s.owner, "ID", &id]);
            let reply = self.conn.call_until_answered(&cmd, CALL, 20).await;
            if matches!(reply, Reply::Nil) {
                // Not the holder any more (expired): nothing left to exit.
                if s.op.release.is_none() {
                    s.op.release = Some(self.ctx.rec.now());
                }
                break;
            }
            if exit < holds {
                tokio::time::sleep(Duration::from_millis(rng.gen_range(5..40))).await;
            }
        }
        self.ctx.rec.op(s.op);
    }

    /// The worker's loop, until the run stops.
    pub async fn run(mut self, seed: u64) {
        let mut rng = StdRng::seed_from_u64(seed);
        let resource = self.role.resource();
        while !self.ctx.stopped() {
            match self.role {
                Role::Reentrant => self.reentrant_session(resource, &mut rng).await,
                role => {
                    let want = match role {
                        Role::Permit => Want::Permit(PERMITS),
                        Role::ReadWrite if rng.gen_range(0..3) == 0 => Want::Write,
                        Role::ReadWrite => Want::Read,
                        _ => Want::Plain,
                    };
                    let wait = role != Role::Plain || rng.gen_range(0..3) > 0;
                    if let Ok(s) = self.grant(resource, want, wait).await {
                        if want == Want::Read && rng.gen_ratio(1, READS_WALKING_AWAY) {
                            // Writers then come after readers expired.
                            self.abandon(s);
                        } else if let Ok(mut s) = self.crash_requested(s) {
                            let base = if want.writes() { self.read(&mut s) } else { None };
                            self.work(&mut rng).await;
                            if let Some(base) = base {
                                self.careful_write(&mut s, base);
                            }
                            self.release(s).await;
                        }
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(rng.gen_range(0..20))).await;
        }
    }
}
