//! The hash slot of a key, as Redis Cluster computes it: CRC16 (XMODEM)
//! of the key, or of its hash tag (the bytes between the first `{` and
//! the first `}` after it, when there are any), modulo 16384.

/// How many hash slots a cluster has.
pub(crate) const SLOTS: u16 = 16_384;

/// The hash slot of `key`.
pub(crate) fn key_slot(key: &[u8]) -> u16 {
    crc16::State::<crc16::XMODEM>::calculate(hash_tag(key)) % SLOTS
}

/// What is hashed: the hash tag when the key has a non-empty one
/// (`{user:7}:cart` hashes `user:7`), else the whole key (`{}x` and
/// `x{` have none).
fn hash_tag(key: &[u8]) -> &[u8] {
    let Some(open) = key.iter().position(|&b| b == b'{') else { return key };
    let after = key.get(open + 1..).unwrap_or_default();
    match after.iter().position(|&b| b == b'}') {
        Some(close) if close > 0 => after.get(..close).unwrap_or(key),
        _ => key,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Slots as `CLUSTER KEYSLOT` gives them (checked on Redis 7.0), and
    /// the hash-tag rules of the cluster specification.
    #[test]
    fn slots_match_the_servers_and_the_hash_tag_rules() {
        for (key, slot) in [("foo", 12_182), ("bar", 5_061), ("123456789", 12_739), ("", 0)] {
            assert_eq!(key_slot(key.as_bytes()), slot, "{key:?}");
        }
        // The tag is hashed alone: every key with it shares a slot.
        let tagged = key_slot(b"user1000");
        for key in ["{user1000}.following", "{user1000}.followers", "x{user1000}y{other}"] {
            assert_eq!(key_slot(key.as_bytes()), tagged, "{key}");
        }
        // The first `{` and the first `}` after it.
        assert_eq!(key_slot(b"foo{{bar}}zap"), key_slot(b"{bar"));
        assert_eq!(key_slot(b"foo{bar}{zap}"), key_slot(b"bar"));
        // No tag: an empty one, or no closing brace; the whole key then.
        for key in ["foo{}{bar}", "{}", "foo{bar", "}foo{"] {
            assert_eq!(hash_tag(key.as_bytes()), key.as_bytes(), "{key}");
        }
        assert!((0..1000).all(|i| key_slot(format!("k{i}").as_bytes()) < SLOTS));
    }
}
