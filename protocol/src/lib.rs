//! What the `lock` module and its clients agree on, defined once: the
//! commands' names, the error codes a client acts on, the limits both
//! sides check, the channel a freed lock is announced on (`freed`), and a
//! key's hash slot (`slot`). One dependency, `crc16` (the slot's hash):
//! the module's pure core, the quorum client and the Python package all
//! use it.

use std::ffi::CStr;

pub mod freed;
pub mod slot;

/// Tokens and owners are non-empty byte strings of at most this many bytes
/// (the module refuses longer ones; the client checks before sending). A
/// UUID plus a thread id is about 45 bytes; 256 leaves room without letting
/// a client store megabytes per lock.
pub const TOKEN_LEN_MAX: usize = 256;

/// Keys one multi-key call (`LOCK.MACQUIRE`, `LOCK.MRELEASE`, `LOCK.RENEW`)
/// may name at most, whatever the node's settings (`lock.max-multi-keys`,
/// `lock.max-renew-keys` default to [`MULTI_KEYS_DEFAULT`]).
pub const MULTI_KEYS_MAX: usize = 1000;

/// The nodes' default bound on the keys of one multi-key call: what a
/// client may count on every node to accept.
pub const MULTI_KEYS_DEFAULT: usize = 100;

const _: () = assert!(MULTI_KEYS_DEFAULT <= MULTI_KEYS_MAX);

/// The error codes (the first word of an error reply) a client tells
/// apart.
pub mod code {
    /// A bad call: arity, a value out of range, an unknown option, ...
    pub const ERR: &str = "ERR";
    /// The key holds something that is not a lock of the kind asked for.
    pub const WRONGTYPE: &str = "WRONGTYPE";
    /// No new grants now (the node, the database or the key is in
    /// quarantine); the message ends with the milliseconds left.
    pub const QUARANTINE: &str = "QUARANTINE";
    /// No new grants while `maxmemory-policy` can evict lock keys.
    pub const EVICTION: &str = "EVICTION";
    /// Too many clients already wait for the key (or on the node).
    pub const MAXWAITERS: &str = "MAXWAITERS";
    /// A waiter's key moved to another cluster node: send the command again.
    pub const TRYAGAIN: &str = "TRYAGAIN";
}

/// The commands' names, as Redis registers them (lowercase; Redis matches
/// names case-insensitively).
pub mod command {
    use super::CStr;

    pub const ACQUIRE: &CStr = c"lock.acquire";
    pub const ENTER: &CStr = c"lock.enter";
    pub const SHARED: &CStr = c"lock.shared";
    pub const EXCLUSIVE: &CStr = c"lock.exclusive";
    pub const SEMAPHORE: &CStr = c"lock.semaphore";
    pub const MACQUIRE: &CStr = c"lock.macquire";
    pub const RELEASE: &CStr = c"lock.release";
    pub const MRELEASE: &CStr = c"lock.mrelease";
    pub const EXTEND: &CStr = c"lock.extend";
    pub const RENEW: &CStr = c"lock.renew";
    pub const EXIT: &CStr = c"lock.exit";
    pub const FENCE: &CStr = c"lock.fence";
    pub const CHECK: &CStr = c"lock.check";
    pub const INFO: &CStr = c"lock.info";
    pub const WAITERS: &CStr = c"lock.waiters";
    pub const CONTENDED: &CStr = c"lock.contended";
    pub const REVOKE: &CStr = c"lock.revoke";
    pub const UNQUARANTINE: &CStr = c"lock.unquarantine";
    pub const FORGOTTEN: &CStr = c"lock.forgotten";
    pub const QUARANTINED: &CStr = c"lock.quarantined";

    /// A name as text, for a client building a command.
    pub fn text(name: &'static CStr) -> &'static str {
        name.to_str().unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_read_as_text() {
        assert_eq!(command::text(command::ACQUIRE), "lock.acquire");
        assert_eq!(command::text(command::REVOKE), "lock.revoke");
    }
}
