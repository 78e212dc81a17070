//! What a guard holds: one resource in one mode, or a set of resources
//! taken all or nothing; and the command each round sends a node for it.
//! Pure (no I/O): the checks and the commands are unit-tested below.
//!
//! One resource uses the single-key commands, as before sets existed
//! (`LOCK.ACQUIRE` / `SHARED` / `EXCLUSIVE` / `SEMAPHORE`, `LOCK.EXTEND`,
//! `LOCK.RELEASE`, `LOCK.FENCE`), so nothing gets slower. A set of two or
//! more uses the module's multi-key commands, each of which a node applies
//! to the whole set or answers per key:
//!
//! | round | one node, a set |
//! |---|---|
//! | grant | `LOCK.MACQUIRE token ttl numkeys key... [MODES mode...]`: every key or none, one fencing token |
//! | extend | `LOCK.RENEW token ttl key...`: 1/0 per key |
//! | release | `LOCK.MRELEASE token key...`: 1/0 per key |
//! | fence | `LOCK.FENCE key token T` for each key, in one pipeline: 1/0 per key |
//!
//! A node counts towards the quorum of a set's round only if it answered
//! yes for every key ([`quorum::classify_every_flag`]); see `rounds/fence.rs`
//! for why the quorum token stays as safe as for one resource.

use lock_protocol::command as names;
use std::time::Duration;

use redis::Cmd;

use crate::error::{Error, Result};
use crate::member::key_slot;
use crate::node::Request;
use crate::quorum::{self, Answer, Mode, Quorum, Raw};

/// How a node's reply to a round's request is read.
pub(crate) type Classify = fn(&Raw) -> Answer;

/// The resources a guard holds, in the order given, with their modes.
/// Never empty; no resource twice.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Claim {
    keys: Vec<(String, Mode)>,
    /// What errors call it: the resource, or `{a, b, c}` for a set.
    label: String,
}

impl Claim {
    /// One resource, in any mode (a semaphore permit too).
    pub fn one(resource: &str, mode: Mode) -> Result<Claim> {
        check_name("resource", resource)?;
        check_mode(mode)?;
        Ok(Claim { keys: vec![(resource.to_string(), mode)], label: resource.to_string() })
    }

    /// A set, taken all or nothing. Refused before any round: no resource,
    /// more than [`quorum::SET_KEYS_MAX`], a resource named twice (the
    /// module would refuse it too, on every node), and a semaphore permit
    /// (a set is held by one token in plain, read or write mode; the
    /// module takes no semaphore in a set, and a permit's larger quorum
    /// would not be the set's).
    pub fn set<R: AsRef<str>>(resources: &[(R, Mode)]) -> Result<Claim> {
        if resources.is_empty() {
            return Err(Error::InvalidArgument("no resources given".into()));
        }
        if resources.len() > quorum::SET_KEYS_MAX {
            return Err(Error::InvalidArgument(format!(
                "{} resources given, at most {} can be taken at once",
                resources.len(),
                quorum::SET_KEYS_MAX
            )));
        }
        let mut keys: Vec<(String, Mode)> = Vec::with_capacity(resources.len());
        for (resource, mode) in resources {
            let resource = resource.as_ref();
            check_name("resource", resource)?;
            if let Mode::Permit { .. } = mode {
                return Err(Error::InvalidArgument(format!(
                    "'{resource}': a semaphore permit cannot be taken in a set (plain, read or \
                     write only; take it on its own with try_acquire)"
                )));
            }
            if keys.iter().any(|(seen, _)| seen == resource) {
                return Err(Error::InvalidArgument(format!("resource '{resource}' is listed twice")));
            }
            keys.push((resource.to_string(), *mode));
        }
        let label = match keys.as_slice() {
            [(one, _)] => one.clone(),
            many => format!("{{{}}}", many.iter().map(|(r, _)| r.as_str()).collect::<Vec<_>>().join(", ")),
        };
        Ok(Claim { keys, label })
    }

    /// Refuses a set whose keys are in different hash slots (for a quorum
    /// with a cluster member, where a node grants a set only in one slot:
    /// see `docs/design.md`), naming two of them and how to write them.
    pub fn check_one_slot(&self) -> Result<()> {
        let mut names = self.names();
        let Some(first) = names.next() else { return Ok(()) };
        let slot = key_slot(first.as_bytes());
        match names.find(|name| key_slot(name.as_bytes()) != slot) {
            None => Ok(()),
            Some(other) => Err(Error::InvalidArgument(format!(
                "'{first}' (slot {slot}) and '{other}' (slot {}) are in different hash slots, and a \
                 cluster member grants a set only within one slot: give the set's resources a \
                 common hash tag, e.g. {{orders}}:1 and {{orders}}:2 (the part in braces picks the slot)",
                key_slot(other.as_bytes())
            ))),
        }
    }

    pub fn keys(&self) -> &[(String, Mode)] {
        &self.keys
    }

    pub fn label(&self) -> &str {
        &self.label
    }

    /// The first resource and its mode (the only one, unless a set).
    pub fn first(&self) -> (&str, Mode) {
        self.keys.first().map_or(("", Mode::Plain), |(resource, mode)| (resource.as_str(), *mode))
    }

    /// Two or more resources: the multi-key commands.
    fn is_set(&self) -> bool {
        self.keys.len() > 1
    }

    /// The yes answers the grant, extend and release rounds need: the
    /// mode's quorum for one resource, a majority for a set (plain, read
    /// and write all need a majority; permits are not taken in sets).
    pub fn quorum(&self) -> Quorum {
        if self.is_set() {
            Quorum::Majority
        } else {
            self.first().1.quorum()
        }
    }

    fn names(&self) -> impl Iterator<Item = &str> {
        self.keys.iter().map(|(resource, _)| resource.as_str())
    }

    /// The grant round's request; the reply is a fencing token or nil
    /// ([`quorum::classify_grant`]) in both cases.
    pub fn grant(&self, token: &str, ttl: Duration) -> Request {
        let ttl = millis(ttl);
        let (resource, mode) = self.first();
        if !self.is_set() {
            let cmd = match mode {
                Mode::Plain => command(names::text(names::ACQUIRE), resource, token, &[ttl]),
                Mode::Read => command(names::text(names::SHARED), resource, token, &[ttl]),
                Mode::Write => command(names::text(names::EXCLUSIVE), resource, token, &[ttl]),
                Mode::Permit { permits } => {
                    command(names::text(names::SEMAPHORE), resource, token, &[u64::from(permits), ttl])
                }
            };
            return Request::one(cmd, resource);
        }
        let mut cmd = redis::cmd(names::text(names::MACQUIRE));
        cmd.arg(token).arg(ttl).arg(self.keys.len());
        for name in self.names() {
            cmd.arg(name);
        }
        // MODES only when needed: none when every key is plain (the
        // default), one word when all share a mode.
        if self.keys.iter().any(|(_, m)| *m != mode) {
            cmd.arg("MODES");
            for (_, mode) in &self.keys {
                cmd.arg(mode_word(*mode));
            }
        } else if mode != Mode::Plain {
            cmd.arg("MODES").arg(mode_word(mode));
        }
        Request::one(cmd, resource)
    }

    /// The fencing round's request for the quorum token `floor`.
    pub fn fence(&self, token: &str, floor: u64) -> (Request, Classify) {
        if !self.is_set() {
            return (
                Request::one(
                    command(names::text(names::FENCE), self.first().0, token, &[floor]),
                    self.first().0,
                ),
                quorum::classify_flag,
            );
        }
        let fences =
            self.names().map(|resource| command(names::text(names::FENCE), resource, token, &[floor]));
        (Request::each(fences, self.first().0), quorum::classify_every_flag)
    }

    /// The extend round's request (by hand or by the watchdog).
    pub fn extend(&self, token: &str, ttl: Duration) -> (Request, Classify) {
        if !self.is_set() {
            return (
                Request::one(
                    command(names::text(names::EXTEND), self.first().0, token, &[millis(ttl)]),
                    self.first().0,
                ),
                quorum::classify_flag,
            );
        }
        let mut cmd = redis::cmd(names::text(names::RENEW));
        cmd.arg(token).arg(millis(ttl));
        for name in self.names() {
            cmd.arg(name);
        }
        (Request::one(cmd, self.first().0), quorum::classify_every_flag)
    }

    /// The release round's request (also the undo of a failed grant).
    pub fn release(&self, token: &str) -> (Request, Classify) {
        if !self.is_set() {
            return (
                Request::one(
                    command(names::text(names::RELEASE), self.first().0, token, &[]),
                    self.first().0,
                ),
                quorum::classify_flag,
            );
        }
        let mut cmd = redis::cmd(names::text(names::MRELEASE));
        cmd.arg(token);
        for name in self.names() {
            cmd.arg(name);
        }
        (Request::one(cmd, self.first().0), quorum::classify_every_flag)
    }
}

/// `LOCK.MACQUIRE`'s name for a mode.
fn mode_word(mode: Mode) -> &'static str {
    match mode {
        Mode::Plain => "PLAIN",
        Mode::Read => "SHARED",
        Mode::Write => "EXCLUSIVE",
        // Refused by `Claim::set` before any command is built.
        Mode::Permit { .. } => "SEMAPHORE",
    }
}

/// `name key token [number ...]`, sized up front: a command is built for
/// every round, and growing its buffers argument by argument showed in
/// profiles.
pub(crate) fn command(name: &str, resource: &str, token: &str, numbers: &[u64]) -> Cmd {
    // 20 digits hold any u64.
    let bytes = name.len() + resource.len() + token.len() + 20 * numbers.len();
    let mut cmd = Cmd::with_capacity(3 + numbers.len(), bytes);
    cmd.arg(name).arg(resource).arg(token);
    for number in numbers {
        cmd.arg(*number);
    }
    cmd
}

pub(crate) fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// A semaphore has at least one permit (the nodes refuse 0 too, but the
/// quorum arithmetic needs it before any round).
pub(crate) fn check_mode(mode: Mode) -> Result<()> {
    match mode {
        Mode::Permit { permits: 0 } => {
            Err(Error::InvalidArgument("a semaphore needs at least 1 permit".into()))
        }
        _ => Ok(()),
    }
}

pub(crate) fn check_name(what: &str, value: &str) -> Result<()> {
    if value.is_empty() || value.len() > quorum::TOKEN_LEN_MAX {
        return Err(Error::InvalidArgument(format!(
            "{what} must be 1 to {} bytes, got {}",
            quorum::TOKEN_LEN_MAX,
            value.len()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A request's commands as words (numbers as their digits).
    fn words(request: &Request) -> Vec<Vec<String>> {
        request
            .commands()
            .into_iter()
            .map(|cmd| {
                cmd.args_iter()
                    .map(|arg| match arg {
                        redis::Arg::Simple(bytes) => String::from_utf8_lossy(bytes).into_owned(),
                        redis::Arg::Cursor => "<cursor>".into(),
                    })
                    .collect()
            })
            .collect()
    }

    /// The words of a command as sent: its name as `lock_protocol` spells
    /// it (lowercase, as Redis registers it), the rest as written.
    fn line(text: &str) -> Vec<String> {
        let mut words: Vec<String> = text.split(' ').map(String::from).collect();
        if let Some(name) = words.first_mut() {
            *name = name.to_lowercase();
        }
        words
    }

    const TTL: Duration = Duration::from_millis(5_000);

    #[test]
    fn one_resource_uses_the_single_key_commands() {
        let one = Claim::one("job", Mode::Read).unwrap();
        assert_eq!((one.label(), one.first(), one.quorum()), ("job", ("job", Mode::Read), Quorum::Majority));
        assert_eq!(words(&one.grant("t", TTL)), [line("LOCK.SHARED job t 5000")]);
        let (fence, classify) = one.fence("t", 42);
        assert_eq!(words(&fence), [line("LOCK.FENCE job t 42")]);
        assert_eq!(classify(&Raw::Int(1)), Answer::Yes(1));
        assert_eq!(words(&one.extend("t", TTL).0), [line("LOCK.EXTEND job t 5000")]);
        assert_eq!(words(&one.release("t").0), [line("LOCK.RELEASE job t")]);
        // A set of one is one resource, with the same commands.
        let single = Claim::set(&[("job", Mode::Read)]).unwrap();
        assert_eq!(single, one);
        let permit = Claim::one("backups", Mode::Permit { permits: 2 }).unwrap();
        assert_eq!(words(&permit.grant("t", TTL)), [line("LOCK.SEMAPHORE backups t 2 5000")]);
        assert_eq!(permit.quorum(), Quorum::Permits(2));
        assert!(Claim::one("backups", Mode::Permit { permits: 0 }).is_err());
        assert!(Claim::one("", Mode::Plain).is_err());
    }

    #[test]
    fn a_set_uses_the_multi_key_commands() {
        let plain = Claim::set(&[("a", Mode::Plain), ("b", Mode::Plain)]).unwrap();
        assert_eq!(plain.label(), "{a, b}");
        assert_eq!(words(&plain.grant("t", TTL)), [line("LOCK.MACQUIRE t 5000 2 a b")], "plain: no MODES");
        let reads = Claim::set(&[("a", Mode::Read), ("b", Mode::Read), ("c", Mode::Read)]).unwrap();
        assert_eq!(words(&reads.grant("t", TTL)), [line("LOCK.MACQUIRE t 5000 3 a b c MODES SHARED")]);
        let mixed = Claim::set(&[("c", Mode::Write), ("a", Mode::Plain), ("b", Mode::Read)]).unwrap();
        assert_eq!(
            words(&mixed.grant("t", TTL)),
            [line("LOCK.MACQUIRE t 5000 3 c a b MODES EXCLUSIVE PLAIN SHARED")],
            "in the order given"
        );
        assert_eq!(mixed.quorum(), Quorum::Majority);
        let (fence, classify) = mixed.fence("t", 9);
        assert_eq!(
            words(&fence),
            [line("LOCK.FENCE c t 9"), line("LOCK.FENCE a t 9"), line("LOCK.FENCE b t 9")],
            "one pipeline"
        );
        let flags = |ns: &[i64]| Raw::Array(ns.iter().map(|n| Raw::Int(*n)).collect());
        assert_eq!(classify(&flags(&[1, 1, 1])), Answer::Yes(1));
        assert_eq!(classify(&flags(&[1, 0, 1])), Answer::No, "a node counts only for the whole set");
        let (extend, classify) = mixed.extend("t", TTL);
        assert_eq!(words(&extend), [line("LOCK.RENEW t 5000 c a b")]);
        assert_eq!(classify(&flags(&[1, 1, 0])), Answer::No);
        let (release, classify) = mixed.release("t");
        assert_eq!(words(&release), [line("LOCK.MRELEASE t c a b")]);
        assert_eq!(classify(&flags(&[1, 1, 1])), Answer::Yes(1));
    }

    #[test]
    fn a_bad_set_is_refused_before_any_round() {
        let refused = |resources: &[(&str, Mode)]| match Claim::set(resources) {
            Err(Error::InvalidArgument(why)) => why,
            other => panic!("expected InvalidArgument, got {other:?}"),
        };
        assert_eq!(refused(&[]), "no resources given");
        assert_eq!(
            refused(&[("a", Mode::Plain), ("b", Mode::Read), ("a", Mode::Read)]),
            "resource 'a' is listed twice"
        );
        assert!(refused(&[("a", Mode::Plain), ("s", Mode::Permit { permits: 2 })])
            .starts_with("'s': a semaphore permit cannot be taken in a set"));
        assert!(
            refused(&[("s", Mode::Permit { permits: 1 })]).contains("semaphore permit"),
            "not even alone: take it with try_acquire"
        );
        assert!(refused(&[("a", Mode::Plain), ("", Mode::Plain)]).contains("resource must be"));
        // In one slot (a hash tag), or not.
        let tagged = Claim::set(&[("{orders}:1", Mode::Plain), ("{orders}:2", Mode::Read)]).unwrap();
        assert_eq!(tagged.check_one_slot(), Ok(()));
        assert_eq!(Claim::one("a", Mode::Plain).unwrap().check_one_slot(), Ok(()));
        let spread = Claim::set(&[("a", Mode::Plain), ("{a}:x", Mode::Plain), ("b", Mode::Plain)]).unwrap();
        match spread.check_one_slot() {
            Err(Error::InvalidArgument(why)) => assert_eq!(
                why,
                "'a' (slot 15495) and 'b' (slot 3300) are in different hash slots, and a cluster member \
                 grants a set only within one slot: give the set's resources a common hash tag, e.g. \
                 {orders}:1 and {orders}:2 (the part in braces picks the slot)"
            ),
            other => panic!("expected InvalidArgument, got {other:?}"),
        }
        let too_many: Vec<(String, Mode)> =
            (0..=quorum::SET_KEYS_MAX).map(|i| (format!("k{i}"), Mode::Plain)).collect();
        assert!(matches!(Claim::set(&too_many), Err(Error::InvalidArgument(_))));
        assert!(Claim::set(&too_many[..quorum::SET_KEYS_MAX]).is_ok(), "the bound itself is allowed");
    }
}
