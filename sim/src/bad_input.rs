//! Bad input (property 7): the malformed calls the misusing client sends,
//! and the guard every call to a simulated node runs under. A panic in the
//! module takes the whole redis-server down, so a panic of the core on any
//! input is a violation, not a crash of the simulator; and a malformed call
//! must get an error reply and change nothing.

use std::panic::{self, AssertUnwindSafe};

use rand::rngs::StdRng;
use rand::Rng;

/// Runs `call` (a node serving a call); `Err` with the panic's message if
/// the core panicked (the module would have taken Redis down).
pub fn guarded<T>(call: impl FnOnce() -> T) -> Result<T, String> {
    panic::catch_unwind(AssertUnwindSafe(call)).map_err(|payload| {
        payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic".to_string())
    })
}

/// A call's words as the history prints them (an empty word as `''`).
pub fn text(words: &[Vec<u8>]) -> String {
    let word =
        |w: &Vec<u8>| if w.is_empty() { "''".to_string() } else { String::from_utf8_lossy(w).into_owned() };
    words.iter().map(word).collect::<Vec<_>>().join(" ")
}

/// The malformed calls of one moment, on `key` under `owner`, a few drawn
/// from `rng` with values of their own: a TTL of 0, negative, empty, not a
/// number, or beyond `ttl_ms_max`; an empty token; too few or too many
/// words; a huge number; a bad option. Each is one the module answers with
/// an error and nothing changed (docs/commands.md).
pub fn calls(rng: &mut StdRng, key: &str, owner: &str, ttl_ms_max: u64) -> Vec<Vec<Vec<u8>>> {
    let negative = format!("-{}", rng.gen_range(1..=ttl_ms_max));
    let beyond = (ttl_ms_max + rng.gen_range(1..1000)).to_string();
    let ttl = rng.gen_range(1..=ttl_ms_max).to_string();
    let all: [&[&str]; 16] = [
        &["LOCK.ACQUIRE", key, owner, "0"],
        &["LOCK.ACQUIRE", key, owner, &negative],
        &["LOCK.ENTER", key, owner, ""],
        &["LOCK.EXTEND", key, owner, "0"],
        &["LOCK.EXTEND", key, owner, &negative],
        &["LOCK.SHARED", key, owner, "1.5"],
        &["LOCK.EXCLUSIVE", key, owner, "+5"],
        &["LOCK.ACQUIRE", key, owner, &beyond],
        &["LOCK.ACQUIRE", key, owner, "99999999999999999999999"],
        &["LOCK.ACQUIRE", key, "", &ttl],
        &["LOCK.ACQUIRE", key, owner],
        &["LOCK.RELEASE", key, owner, "extra"],
        &["LOCK.ACQUIRE", key, owner, &ttl, "WAIT"],
        &["LOCK.SEMAPHORE", key, owner, "0", &ttl],
        &["LOCK.MACQUIRE", owner, "0", "2", key, "other"],
        &["LOCK.FENCE", key, owner, ""],
    ];
    let mut chosen: Vec<Vec<Vec<u8>>> = Vec::new();
    for call in all {
        if rng.gen_bool(0.5) {
            chosen.push(call.iter().map(|w| w.as_bytes().to_vec()).collect());
        }
    }
    chosen
}

/// The violation of a core that panicked on `text` at node `node`: the
/// module would have taken its redis-server down (the caller crashes the
/// node).
pub fn panicked(node: usize, at_ms: i64, text: &str, why: &str) -> String {
    format!("the core panicked on input: n{node} at {at_ms} ms, on {text}: {why} (redis-server would abort)")
}
