//! The calls a simulated node serves, read with the module's own parser
//! (`lock_core::args`: the same functions its commands call, so a call the
//! module refuses is refused here, for the same reason and in the same
//! argument order), into one [`Request`] the node runs over the core.
//! What the module's commands add around the parser is restated here: the
//! `LOCK.FENCE` bound ([`FENCE_AHEAD_MS_MAX`]) and the error line's form.

use lock_core::args::{self, ArgError, Limits};
use lock_core::fencing::Fencer;
use lock_core::kind::Want;
use lock_protocol::code::ERR;
use lock_protocol::command as names;

use crate::resp::Reply;

/// How far ahead of the node's clock a `LOCK.FENCE` floor may be (the
/// module's `commands/fence.rs`: an hour).
pub const FENCE_AHEAD_MS_MAX: i64 = 3_600_000;

/// One parsed call. Borrowed from the call's words.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Request<'a> {
    /// `LOCK.ACQUIRE`, `ENTER`, `SHARED`, `EXCLUSIVE`, `SEMAPHORE`.
    Grant {
        key: &'a [u8],
        want: Want,
        owner: &'a [u8],
        ttl_ms: i64,
        wait_ms: Option<i64>,
    },
    Release {
        key: &'a [u8],
        owner: &'a [u8],
    },
    Extend {
        key: &'a [u8],
        owner: &'a [u8],
        ttl_ms: i64,
    },
    Exit {
        key: &'a [u8],
        owner: &'a [u8],
        request_id: Option<&'a [u8]>,
    },
    Fence {
        key: &'a [u8],
        owner: &'a [u8],
        floor: u64,
    },
    /// `LOCK.MACQUIRE`: every key or none.
    GrantAll {
        keys: Vec<&'a [u8]>,
        wants: Vec<Want>,
        owner: &'a [u8],
        ttl_ms: i64,
        wait_ms: Option<i64>,
    },
    /// `LOCK.RENEW`: `LOCK.EXTEND` of each key.
    Renew {
        keys: Vec<&'a [u8]>,
        owner: &'a [u8],
        ttl_ms: i64,
    },
    /// `LOCK.MRELEASE`: `LOCK.RELEASE` of each key.
    ReleaseAll {
        keys: Vec<&'a [u8]>,
        owner: &'a [u8],
    },
}

/// The module's limits on a node whose clients take TTLs up to
/// `ttl_ms_max` (`lock.max-ttl-ms`), with the default set sizes.
pub fn limits(ttl_ms_max: i64) -> Limits {
    Limits { ttl_ms_max, renew_keys_max: 100, multi_keys_max: 100 }
}

/// Reads `argv` (the name first) at the node's clock `now_ms`, as the
/// module's command of that name does; the error reply it would give
/// otherwise.
pub fn parse<'a>(argv: &[&'a [u8]], limits: Limits, now_ms: i64) -> Result<Request<'a>, Reply> {
    let first = argv.first().copied().unwrap_or_default();
    let name = || String::from_utf8_lossy(first).to_ascii_lowercase();
    let refused = |e: ArgError| match e {
        ArgError::Arity => Reply::Error(ERR, format!("wrong number of arguments for '{}' command", name())),
        other => Reply::Error(ERR, other.to_string()),
    };
    let is = |command: &'static std::ffi::CStr| first.eq_ignore_ascii_case(names::text(command).as_bytes());
    let key = argv.get(1).copied().unwrap_or_default();
    let keys_from = |at: usize| argv.get(at..).unwrap_or_default().to_vec();
    let grant = |want: Want, a: args::Acquire<'a>| Request::Grant {
        key,
        want,
        owner: a.owner,
        ttl_ms: a.ttl_ms,
        wait_ms: a.wait_ms,
    };
    let request = if is(names::ACQUIRE) {
        args::acquire(argv, limits).map(|a| grant(Want::plain(), a))
    } else if is(names::ENTER) {
        args::acquire(argv, limits).map(|a| grant(Want::reentrant(), a))
    } else if is(names::SHARED) {
        args::acquire(argv, limits).map(|a| grant(Want::read(), a))
    } else if is(names::EXCLUSIVE) {
        args::acquire(argv, limits).map(|a| grant(Want::write(), a))
    } else if is(names::SEMAPHORE) {
        args::semaphore(argv, limits).map(|(permits, a)| grant(Want::permit(permits), a))
    } else if is(names::RELEASE) {
        args::owner(argv).map(|o| Request::Release { key, owner: o.owner })
    } else if is(names::EXTEND) {
        args::extend(argv, limits).map(|e| Request::Extend { key, owner: e.owner, ttl_ms: e.ttl_ms })
    } else if is(names::EXIT) {
        args::exit(argv).map(|e| Request::Exit { key, owner: e.owner, request_id: e.request_id })
    } else if is(names::FENCE) {
        let floor_max = Fencer::clock_floor(now_ms.saturating_add(FENCE_AHEAD_MS_MAX));
        args::fence(argv, floor_max).map(|f| Request::Fence { key, owner: f.owner, floor: f.floor })
    } else if is(names::MACQUIRE) {
        args::acquire_all(argv, limits).map(|a| Request::GrantAll {
            keys: argv.iter().skip(args::MULTI_FIRST_KEY).take(a.wants.len()).copied().collect(),
            owner: a.owner,
            ttl_ms: a.ttl_ms,
            wait_ms: a.wait_ms,
            wants: a.wants,
        })
    } else if is(names::RENEW) {
        args::renew(argv, limits).map(|e| Request::Renew {
            keys: keys_from(3),
            owner: e.owner,
            ttl_ms: e.ttl_ms,
        })
    } else if is(names::MRELEASE) {
        args::release_all(argv, limits).map(|o| Request::ReleaseAll { keys: keys_from(2), owner: o.owner })
    } else {
        return Err(Reply::Error(ERR, format!("the simulated node does not serve '{}'", name())));
    };
    request.map_err(refused)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(line: &str) -> Result<Request<'_>, Reply> {
        let argv: Vec<&[u8]> = line.split(' ').map(str::as_bytes).collect();
        parse(&argv, limits(600), 1_700_000_000_000)
    }

    fn refused(line: &str) -> String {
        match parsed(line) {
            Err(Reply::Error(ERR, text)) => text,
            other => panic!("{line}: {other:?}"),
        }
    }

    #[test]
    fn calls_read_as_the_module_reads_them() {
        assert_eq!(
            parsed("lock.Acquire k t 100 WAIT 5"),
            Ok(Request::Grant { key: b"k", want: Want::plain(), owner: b"t", ttl_ms: 100, wait_ms: Some(5) })
        );
        assert_eq!(
            parsed("LOCK.MACQUIRE t 100 2 a b MODES SHARED"),
            Ok(Request::GrantAll {
                keys: vec![b"a", b"b"],
                wants: vec![Want::read(), Want::read()],
                owner: b"t",
                ttl_ms: 100,
                wait_ms: None
            })
        );
        assert_eq!(
            parsed("LOCK.RENEW t 100 a b"),
            Ok(Request::Renew { keys: vec![b"a", b"b"], owner: b"t", ttl_ms: 100 })
        );
        assert_eq!(parsed("LOCK.MRELEASE t a"), Ok(Request::ReleaseAll { keys: vec![b"a"], owner: b"t" }));
        assert_eq!(
            parsed("LOCK.EXIT k o ID r1"),
            Ok(Request::Exit { key: b"k", owner: b"o", request_id: Some(b"r1") })
        );
    }

    #[test]
    fn bad_input_gets_the_modules_error() {
        assert_eq!(
            refused("LOCK.ACQUIRE k t 0"),
            "ttl-ms 0 is out of range, must be 1..600 (lock.max-ttl-ms)"
        );
        assert_eq!(refused("LOCK.ACQUIRE k t"), "wrong number of arguments for 'lock.acquire' command");
        assert_eq!(refused("LOCK.EXTEND k t 1.5"), "ttl-ms '1.5' is not an integer or out of range");
        assert_eq!(refused("LOCK.ACQUIRE k  100"), "token must not be empty");
        assert!(refused("LOCK.FENCE k t 99999999999999999")
            .starts_with("floor 99999999999999999 is out of range"));
        assert_eq!(refused("LOCK.RELEASE k t x"), "wrong number of arguments for 'lock.release' command");
        assert_eq!(refused("LOCK.INFO k"), "the simulated node does not serve 'lock.info'");
    }
}
