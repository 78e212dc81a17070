//! The misuse client: during a run, under the same faults, it sends the
//! nodes malformed calls and calls with tokens that hold nothing, on the
//! workload's own resources and on a lock it holds itself. Each must be
//! refused: a malformed call with an `ERR` reply, a foreign token's
//! RELEASE / EXTEND / FENCE with 0, its EXIT with nil (or `WRONGTYPE` on
//! another kind of lock); `LOCK.INFO` of a value the module could not
//! have written (a lock held for centuries, SET by hand) with `WRONGTYPE`.
//! Anything else is recorded as a violation. That
//! the refused calls changed nothing shows in the history (a freed or
//! extended lock under a holder is an overlap); a node that dies of a call
//! is found by the run's liveness check of the processes.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::conn::{command, Conn, Reply};
use super::history::Found;
use super::worker::Ctx;

const CALL: Duration = Duration::from_millis(300);

pub struct Misuse {
    pub conns: Vec<Conn>,
    pub ctx: Arc<Ctx>,
    /// The workload's resources: foreign tokens are tried on them too.
    pub resources: Vec<String>,
    /// Calls answered (the others got no answer under the faults).
    pub answered: usize,
}

/// Malformed calls on `key`: every one must answer `ERR`.
fn malformed(key: &str) -> Vec<Vec<String>> {
    let long = "x".repeat(257);
    let lines: Vec<Vec<&str>> = vec![
        vec!["LOCK.ACQUIRE", key, "m", "0"],
        vec!["LOCK.ACQUIRE", key, "m", "-5"],
        vec!["LOCK.ACQUIRE", key, "m", "+5"],
        vec!["LOCK.ACQUIRE", key, "m", "07"],
        vec!["LOCK.ACQUIRE", key, "m", "1.5"],
        vec!["LOCK.ACQUIRE", key, "m", ""],
        vec!["LOCK.ACQUIRE", key, "", "100"],
        vec!["LOCK.ACQUIRE", key, &long, "100"],
        vec!["LOCK.ACQUIRE", key, "m", "100", "WAIT", "-1"],
        vec!["LOCK.ACQUIRE", key, "m", "100", "NX"],
        vec!["LOCK.ACQUIRE", key, "m", "100", "WAIT", "1", "WAIT", "2"],
        vec!["LOCK.ACQUIRE", key, "m", "99999999999"],
        vec!["LOCK.EXTEND", key, "m", "0"],
        vec!["LOCK.ENTER", key, "m", "-1"],
        vec!["LOCK.EXIT", key, "m", "ID", "a|b"],
        vec!["LOCK.SEMAPHORE", key, "m", "0", "100"],
        vec!["LOCK.SEMAPHORE", key, "m", "2", "0"],
        vec!["LOCK.SHARED", key, "m", "-1"],
        vec!["LOCK.EXCLUSIVE", key, "m", ""],
        vec!["LOCK.FENCE", key, "m", "-1"],
        vec!["LOCK.FENCE", key, "m", "9223372036854775807"],
        vec!["LOCK.CHECK", key, "-1"],
        vec!["LOCK.RENEW", "m", "100"],
        vec!["LOCK.RELEASE", key],
        vec!["LOCK.INFO"],
    ];
    lines.into_iter().map(|l| l.into_iter().map(String::from).collect()).collect()
}

/// Calls by a token that holds nothing.
fn foreign(key: &str) -> Vec<Vec<String>> {
    let lines: Vec<Vec<&str>> = vec![
        vec!["LOCK.RELEASE", key, "intruder"],
        vec!["LOCK.EXTEND", key, "intruder", "1000"],
        vec!["LOCK.FENCE", key, "intruder", "1"],
        vec!["LOCK.EXIT", key, "intruder"],
        vec!["LOCK.EXIT", key, "intruder", "ID", "intruder-1"],
        vec!["LOCK.CHECK", key, "1"],
        vec!["LOCK.RENEW", "intruder", "1000", key],
    ];
    lines.into_iter().map(|l| l.into_iter().map(String::from).collect()).collect()
}

/// A foreign token's call is refused with 0 (nil for `LOCK.EXIT`, whose 0
/// means "freed"), an array of 0s (`LOCK.RENEW`), or WRONGTYPE (EXIT on
/// another kind of lock).
fn refused(words: &[String], reply: &Reply) -> bool {
    let exit = words.first().is_some_and(|w| w == "LOCK.EXIT");
    match reply {
        Reply::Nil => true,
        Reply::Int(0) => !exit,
        // OOM: Redis itself refused it under an eviction fault's memory
        // limit, before the module ran (nothing changed).
        Reply::Error(code, _) => code == "WRONGTYPE" || code == "OOM",
        Reply::Other(redis::Value::Array(items)) => items.iter().all(|v| *v == redis::Value::Int(0)),
        _ => false,
    }
}

impl Misuse {
    fn flag(&self, node: usize, words: &[String], reply: &Reply, wanted: &str) {
        let shown: Vec<String> =
            words.iter().map(|w| if w.len() > 20 { format!("{}...", &w[..20]) } else { w.clone() }).collect();
        self.ctx.rec.found(
            Found::Misuse,
            format!("node {node}: {:?} answered {reply:?}, must be {wanted}", shown.join(" ")),
        );
    }

    async fn send(&mut self, node: usize, words: &[String]) -> Reply {
        let refs: Vec<&str> = words.iter().map(String::as_str).collect();
        let reply = match self.conns.get_mut(node) {
            Some(conn) => conn.call(&command(&refs), CALL).await,
            None => Reply::Lost,
        };
        if reply != Reply::Lost {
            self.answered += 1;
        }
        reply
    }

    async fn expect_error(&mut self, node: usize, words: Vec<String>) {
        let reply = self.send(node, &words).await;
        match &reply {
            Reply::Lost => {}
            Reply::Error(code, _) if code == "ERR" || code == "OOM" => {}
            _ => self.flag(node, &words, &reply, "an ERR reply (or Redis' own OOM)"),
        }
    }

    async fn expect_refused(&mut self, node: usize, words: Vec<String>) {
        let reply = self.send(node, &words).await;
        if reply != Reply::Lost && !refused(&words, &reply) {
            self.flag(node, &words, &reply, "0, nil or WRONGTYPE");
        }
    }

    /// Takes a lock of its own on `node` (plain or reentrant), then tries
    /// every foreign call on it while it is surely held.
    async fn own_lock(&mut self, node: usize, rng: &mut StdRng) {
        let reentrant = rng.gen_bool(0.5);
        let key = format!("misuse-own-{}", if reentrant { "r" } else { "p" });
        let ttl = (self.ctx.ttl.as_millis() as u64).to_string();
        let grant = if reentrant { "LOCK.ENTER" } else { "LOCK.ACQUIRE" };
        let words: Vec<String> = [grant, &key, "owner", &ttl].iter().map(|s| s.to_string()).collect();
        let Reply::Int(_) = self.send(node, &words).await else { return };
        for words in foreign(&key) {
            self.expect_refused(node, words).await;
        }
        let free = if reentrant { "LOCK.EXIT" } else { "LOCK.RELEASE" };
        let words: Vec<String> = [free, &key, "owner"].iter().map(|s| s.to_string()).collect();
        let _ = self.send(node, &words).await;
    }

    /// Writes, with SET, a value that reads as a plain lock held for
    /// centuries (a value the module did not write): `LOCK.INFO` on it must
    /// answer WRONGTYPE, never show it as a lock held. (Nil: the key was
    /// evicted or removed by a fault meanwhile, which proves nothing; an
    /// error on the SET, such as OOM under an eviction fault, neither.)
    async fn forged(&mut self, node: usize) {
        let key = "misuse-forged".to_string();
        let far = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
            + 100_000_000_000;
        let set = vec!["SET".to_string(), key.clone(), format!("LK1|P|1|{far}|1|forger")];
        if !matches!(self.send(node, &set).await, Reply::Other(redis::Value::Okay)) {
            return;
        }
        let words = vec!["LOCK.INFO".to_string(), key.clone()];
        let reply = self.send(node, &words).await;
        match &reply {
            Reply::Lost | Reply::Nil => {}
            Reply::Error(code, _) if code == "WRONGTYPE" => {}
            // `kind none`: no key there any more (a flush or an eviction
            // between the SET and the LOCK.INFO; seen once under load).
            reply if holds_no_lock(reply) => {}
            _ => {
                self.flag(node, &words, &reply, "WRONGTYPE (a lock value the module could not have written)")
            }
        }
        let _ = self.send(node, &["DEL".to_string(), key]).await;
    }

    pub async fn run(mut self, seed: u64) {
        let mut rng = StdRng::seed_from_u64(seed);
        while !self.ctx.stopped() {
            let node = rng.gen_range(0..self.conns.len());
            match rng.gen_range(0..4) {
                0 => {
                    let key = if rng.gen_bool(0.5) {
                        "misuse-bad".to_string()
                    } else {
                        self.resources[rng.gen_range(0..self.resources.len())].clone()
                    };
                    let calls = malformed(&key);
                    let words = calls[rng.gen_range(0..calls.len())].clone();
                    self.expect_error(node, words).await;
                }
                1 => {
                    let key = self.resources[rng.gen_range(0..self.resources.len())].clone();
                    let calls = foreign(&key);
                    let words = calls[rng.gen_range(0..calls.len())].clone();
                    self.expect_refused(node, words).await;
                }
                2 => self.own_lock(node, &mut rng).await,
                _ => self.forged(node).await,
            }
            tokio::time::sleep(Duration::from_millis(rng.gen_range(5..30))).await;
        }
        self.ctx.rec.note(format!("misuse client: {} calls answered", self.answered));
    }
}

/// `LOCK.INFO`'s answer for a key with no lock at all (`kind` `none`).
fn holds_no_lock(reply: &Reply) -> bool {
    let Reply::Other(redis::Value::Array(fields)) = reply else { return false };
    fields.windows(2).any(|pair| {
        matches!(pair, [redis::Value::BulkString(k), redis::Value::BulkString(v)]
            if k.as_slice() == b"kind" && v.as_slice() == b"none")
    })
}
