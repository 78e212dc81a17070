//! Sets: several resources taken all or nothing with one token
//! (`Redlock::acquire_many`, one `LOCK.MACQUIRE` per node), over the
//! resource the other holds take one at a time. What a set needs of the
//! simulator beyond a single lock: which set a cycle takes, and the check
//! that a node grants a set whole or not at all.

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::Rng;

use lock_core::args;
use lock_protocol::command as names;

use crate::command;
use crate::resp::Reply;

/// The resources sets are drawn from: the contended one first (single
/// holds take it alone), and two more that only sets take.
pub const RESOURCES: [&str; 3] = ["res", "res2", "res3"];

/// The set a lock cycle takes, in the order the client names it, or
/// `None` for the contended resource alone: in `per_mille` of the cycles,
/// two or three of [`RESOURCES`] in a random order (sets that overlap in
/// any order never deadlock: a node grants a set at once or refuses it).
pub fn draw(rng: &mut StdRng, per_mille: u32) -> Option<Vec<&'static str>> {
    if rng.gen_range(0..1000) >= per_mille {
        return None;
    }
    let mut keys = RESOURCES.to_vec();
    keys.shuffle(rng);
    keys.truncate(rng.gen_range(2..=RESOURCES.len()));
    Some(keys)
}

/// The same resources in one hash slot (a common hash tag, `res`'s own):
/// what sets take in a history with a cluster member, where the client
/// takes a set only within one slot.
pub const IN_ONE_SLOT: [&str; 3] = ["res", "{res}2", "{res}3"];

/// `set` (of [`RESOURCES`]) spelt in one hash slot ([`IN_ONE_SLOT`]).
pub fn in_one_slot(set: Vec<&'static str>) -> Vec<&'static str> {
    let spelt = |key: &'static str| {
        RESOURCES.iter().position(|r| *r == key).and_then(|i| IN_ONE_SLOT.get(i).copied()).unwrap_or(key)
    };
    set.into_iter().map(spelt).collect()
}

/// The owner and keys of a `LOCK.MACQUIRE` call, read with the module's
/// parser; `None` for any other call or one it refuses.
pub fn macquire(words: &[Vec<u8>]) -> Option<(Vec<u8>, Vec<Vec<u8>>)> {
    if !words.first()?.eq_ignore_ascii_case(names::text(names::MACQUIRE).as_bytes()) {
        return None;
    }
    let argv: Vec<&[u8]> = words.iter().map(Vec::as_slice).collect();
    let set = args::acquire_all(&argv, command::limits(i64::MAX)).ok()?;
    let keys = argv.iter().skip(args::MULTI_FIRST_KEY).take(set.wants.len()).map(|k| k.to_vec()).collect();
    Some((set.owner.to_vec(), keys))
}

/// The violation, if a node's `LOCK.MACQUIRE` was not all or nothing: a
/// grant (a token) leaves the owner on every key of the set; a refusal
/// leaves it on no key it was not on before (`before`, `after`: the
/// owner's presence on each key around the call).
pub fn all_or_nothing(
    node: usize,
    at_ms: i64,
    text: &str,
    reply: &Reply,
    before: &[bool],
    after: &[bool],
) -> Option<String> {
    let granted = matches!(reply, Reply::Int(_));
    let whole = after.iter().all(|&on| on);
    let gained = before.iter().zip(after).any(|(&was, &is)| is && !was);
    match (granted, whole, gained) {
        (true, false, _) => Some(format!(
            "sets all or nothing: n{node} granted {text} at {at_ms} ms ({reply:?}) but holds it on only some of its keys"
        )),
        (false, _, true) => Some(format!(
            "sets all or nothing: n{node} refused {text} at {at_ms} ms ({reply:?}) but took some of its keys"
        )),
        _ => None,
    }
}
