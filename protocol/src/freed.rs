//! The pub/sub channel on which the module announces a freed lock
//! (`released` / `expired`), and how it is sent: a subscriber builds the
//! same name to listen.
//!
//! On a single master: a classic channel, `__lock@<db>__:<key>`
//! (`SUBSCRIBE`). In a cluster a classic `PUBLISH` goes over the cluster
//! bus to every node of the cluster, so the module sends a sharded message
//! (`SPUBLISH`), which goes only to the nodes of the key's shard. A
//! sharded subscriber must `SSUBSCRIBE` at a node of the shard that owns
//! the channel's slot, so the channel must hash to the key's slot:
//! - a key with a hash tag keeps the plain name: the prefix holds no `{`,
//!   so the channel's tag is the key's;
//! - a key without one becomes the tag: `__lock@<db>__:{<key>}`;
//! - a key that has no tag but holds a `}` (or is empty) cannot become one
//!   (its tag would end early, or be empty): it is announced the classic
//!   way on `__lock@<db>__:<key>`, to every node, as on a single master.

use crate::slot::hash_tag;

/// How an announcement is sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Announce {
    /// `PUBLISH`; subscribers `SUBSCRIBE`.
    Classic,
    /// `SPUBLISH` (to the key's shard only); subscribers `SSUBSCRIBE` at a
    /// node of the shard that serves the key.
    Sharded,
}

/// Writes into `out` (cleared first) the channel of `key` in database
/// `db`, on a server in cluster mode or not, and says how the module
/// announces on it. Allocates nothing once `out` is large enough: the
/// module builds it on every release.
pub fn channel_into(out: &mut Vec<u8>, db: i32, key: &[u8], cluster: bool) -> Announce {
    out.clear();
    out.extend_from_slice(b"__lock@");
    push_decimal(out, db);
    out.extend_from_slice(b"__:");
    if !cluster {
        out.extend_from_slice(key);
        return Announce::Classic;
    }
    if hash_tag(key).is_some() {
        out.extend_from_slice(key);
        return Announce::Sharded;
    }
    if key.is_empty() || key.contains(&b'}') {
        out.extend_from_slice(key);
        return Announce::Classic;
    }
    out.push(b'{');
    out.extend_from_slice(key);
    out.push(b'}');
    Announce::Sharded
}

/// [`channel_into`] as a new string, for a subscriber.
pub fn channel(db: i32, key: &[u8], cluster: bool) -> (Vec<u8>, Announce) {
    let mut out = Vec::with_capacity(key.len() + 16);
    let how = channel_into(&mut out, db, key, cluster);
    (out, how)
}

/// `n` in decimal, without the formatting machinery (on every release).
fn push_decimal(out: &mut Vec<u8>, n: i32) {
    if n < 0 {
        out.push(b'-');
    }
    let mut digits = [0u8; 10];
    let mut rest = n.unsigned_abs();
    let mut start = digits.len();
    for digit in digits.iter_mut().rev() {
        *digit = b'0' + (rest % 10) as u8;
        rest /= 10;
        start -= 1;
        if rest == 0 {
            break;
        }
    }
    out.extend_from_slice(digits.get(start..).unwrap_or_default());
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::slot::key_slot as slot;

    fn text(db: i32, key: &str, cluster: bool) -> (String, Announce) {
        let (name, how) = channel(db, key.as_bytes(), cluster);
        (String::from_utf8(name).unwrap(), how)
    }

    #[test]
    fn outside_a_cluster_the_channel_is_the_classic_one() {
        for key in ["job", "{user}:job", "a}b", "", "{}"] {
            assert_eq!(text(0, key, false), (format!("__lock@0__:{key}"), Announce::Classic));
        }
        assert_eq!(text(15, "job", false).0, "__lock@15__:job");
        assert_eq!(text(123_456, "job", false).0, "__lock@123456__:job");
        assert_eq!(text(i32::MAX, "j", false).0, format!("__lock@{}__:j", i32::MAX));
        assert_eq!(text(i32::MIN, "j", false).0, format!("__lock@{}__:j", i32::MIN));
    }

    #[test]
    fn in_a_cluster_the_names_follow_the_rule() {
        // A tag: the plain name.
        assert_eq!(text(0, "{user:7}:lock", true), ("__lock@0__:{user:7}:lock".into(), Announce::Sharded));
        assert_eq!(text(0, "}{a}", true), ("__lock@0__:}{a}".into(), Announce::Sharded));
        // No tag, no `}`: the key becomes the tag.
        assert_eq!(text(0, "job", true), ("__lock@0__:{job}".into(), Announce::Sharded));
        assert_eq!(text(0, "a{b", true), ("__lock@0__:{a{b}".into(), Announce::Sharded));
        assert_eq!(text(3, "job", true), ("__lock@3__:{job}".into(), Announce::Sharded));
        // No tag but a `}`, or nothing at all: classic.
        for key in ["a}b", "{}x", "x{}", "}", ""] {
            assert_eq!(text(0, key, true), (format!("__lock@0__:{key}"), Announce::Classic), "{key:?}");
        }
    }

    /// The property the rule exists for: every sharded channel hashes to
    /// its key's slot (or a subscriber at the key's shard never hears it).
    #[test]
    fn every_sharded_channel_lands_in_its_keys_slot() {
        let pieces: [&[u8]; 9] = [b"", b"{", b"}", b"a", b"job", b"{}", b"{x}", b":", b"\xff"];
        let mut sharded = 0;
        let mut out = Vec::new();
        for a in pieces {
            for b in pieces {
                for c in pieces {
                    let key = [a, b, c].concat();
                    for db in [0, 9] {
                        match channel_into(&mut out, db, &key, true) {
                            Announce::Sharded => {
                                sharded += 1;
                                assert_eq!(slot(&out), slot(&key), "{:?} -> {:?}", key, out);
                            }
                            Announce::Classic => {
                                assert!(key.is_empty() || (hash_tag(&key).is_none() && key.contains(&b'}')));
                            }
                        }
                    }
                }
            }
        }
        assert!(sharded > 500, "{sharded}");
        for i in 0..2000 {
            let key = format!("lock:{i}");
            assert_eq!(channel_into(&mut out, 0, key.as_bytes(), true), Announce::Sharded);
            assert_eq!(slot(&out), slot(key.as_bytes()), "{key}");
        }
    }
}
