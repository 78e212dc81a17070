//! The hash slot of a key, as Redis Cluster computes it: CRC16 (XMODEM)
//! of the key, or of its hash tag (the bytes between the first `{` and
//! the first `}` after it, when there are any), modulo 16384. The quorum
//! client routes a cluster member's calls by it, and the freed channel's
//! rule (`freed`) keeps a sharded channel in its key's slot by the tag.
//! (The simulator, `sim/`, keeps a copy of its own on purpose.)

/// How many hash slots a cluster has.
pub const SLOTS: u16 = 16_384;

/// The hash slot of `key`.
pub fn key_slot(key: &[u8]) -> u16 {
    crc16::State::<crc16::XMODEM>::calculate(hash_tag(key).unwrap_or(key)) % SLOTS
}

/// The key's hash tag, when it has a non-empty one: `{user:7}:cart` is
/// hashed as `user:7`; `{}x` and `x{` have none (the whole key is hashed).
pub fn hash_tag(key: &[u8]) -> Option<&[u8]> {
    let open = key.iter().position(|&b| b == b'{')?;
    let after = key.get(open + 1..)?;
    let close = after.iter().position(|&b| b == b'}')?;
    after.get(..close).filter(|tag| !tag.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Slots as `CLUSTER KEYSLOT` gives them (checked on Redis 7.0), and
    /// the hash-tag rules of the cluster specification.
    #[test]
    fn slots_match_the_servers_and_the_hash_tag_rules() {
        for (key, slot) in
            [("foo", 12_182), ("bar", 5_061), ("123456789", 12_739), ("", 0), ("{foo}x", 12_182)]
        {
            assert_eq!(key_slot(key.as_bytes()), slot, "{key:?}");
        }
        // The tag is hashed alone: every key with it shares a slot.
        let tagged = key_slot(b"user1000");
        for key in ["{user1000}.following", "{user1000}.followers", "x{user1000}y{other}"] {
            assert_eq!(key_slot(key.as_bytes()), tagged, "{key}");
        }
        // The first `{` and the first `}` after it.
        assert_eq!(hash_tag(b"foo{{bar}}zap"), Some(&b"{bar"[..]));
        assert_eq!(hash_tag(b"foo{bar}{zap}"), Some(&b"bar"[..]));
        assert_eq!(hash_tag(b"}{a}"), Some(&b"a"[..]));
        // No tag: an empty one, or no closing brace; the whole key then.
        for key in ["foo{}{bar}", "{}", "foo{bar", "}foo{", "foo", ""] {
            assert_eq!(hash_tag(key.as_bytes()), None, "{key}");
        }
        assert_eq!(key_slot(b"foo{}{bar}"), crc16::State::<crc16::XMODEM>::calculate(b"foo{}{bar}") % SLOTS);
        assert!((0..1000).all(|i| key_slot(format!("k{i}").as_bytes()) < SLOTS));
    }
}
