//! Replies of the RESP2 protocol, read from the front of a buffer.
//!
//! The client writes its commands itself (see `node/mod.rs` for why), so it
//! reads the replies itself too. Only what a RESP2 server sends is read:
//! simple strings, errors, integers, bulk strings and arrays (and their nil
//! forms). Everything is bounded: a bulk string's length, an array's
//! length and how deeply arrays nest; a reply beyond them is refused as
//! malformed (the connection is then dropped), never allocated.

/// One reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Reply {
    /// `$-1` or `*-1`.
    Nil,
    Int(i64),
    Bulk(Vec<u8>),
    /// A simple string (`+OK`).
    Status(String),
    /// An error reply: its code (`ERR`, `WRONGTYPE`, ...) and the rest.
    Error {
        code: String,
        detail: String,
    },
    Array(Vec<Reply>),
}

/// The longest bulk string accepted (no lock command replies with more
/// than a few hundred bytes; `LOCK.INFO` of a full semaphore stays far
/// below).
pub(crate) const BULK_MAX: usize = 16 << 20;
/// The most elements of one array.
pub(crate) const ARRAY_MAX: usize = 1 << 20;
/// How deeply arrays nest (`LOCK.INFO` nests two levels).
pub(crate) const DEPTH_MAX: usize = 8;

/// The first complete reply at the front of `buf` and how many bytes it
/// took; `Ok(None)` while it is incomplete (read more and call again);
/// `Err` when the bytes cannot be a RESP2 reply.
pub(crate) fn parse(buf: &[u8]) -> Result<Option<(Reply, usize)>, String> {
    let mut at = 0;
    match value(buf, &mut at, 0)? {
        Some(value) => Ok(Some((value, at))),
        None => Ok(None),
    }
}

/// The reply starting at `*at`, moving `*at` past it.
fn value(buf: &[u8], at: &mut usize, depth: usize) -> Result<Option<Reply>, String> {
    let Some(line) = line(buf, *at) else { return Ok(None) };
    let Some((&kind, rest)) = line.split_first() else { return Err("an empty reply line".into()) };
    let after_line = *at + line.len() + 2;
    let value = match kind {
        b'+' => Reply::Status(text(rest)?),
        b'-' => {
            let text = text(rest)?;
            let (code, detail) = text.split_once(' ').unwrap_or((&text, ""));
            Reply::Error { code: code.to_string(), detail: detail.to_string() }
        }
        b':' => Reply::Int(integer(rest)?),
        b'$' => {
            let Some(len) = length(rest, BULK_MAX, "bulk string")? else {
                *at = after_line;
                return Ok(Some(Reply::Nil));
            };
            let end = after_line + len;
            if buf.len() < end + 2 {
                return Ok(None);
            }
            if &buf[end..end + 2] != b"\r\n" {
                return Err("a bulk string not followed by CRLF".into());
            }
            *at = end + 2;
            return Ok(Some(Reply::Bulk(buf[after_line..end].to_vec())));
        }
        b'*' => {
            if depth >= DEPTH_MAX {
                return Err(format!("arrays nested deeper than {DEPTH_MAX}"));
            }
            let Some(len) = length(rest, ARRAY_MAX, "array")? else {
                *at = after_line;
                return Ok(Some(Reply::Nil));
            };
            let mut next = after_line;
            // Not `with_capacity(len)`: a length promised by bytes not yet
            // read does not allocate.
            let mut items = Vec::new();
            for _ in 0..len {
                match value(buf, &mut next, depth + 1)? {
                    Some(item) => items.push(item),
                    None => return Ok(None),
                }
            }
            *at = next;
            return Ok(Some(Reply::Array(items)));
        }
        other => return Err(format!("a reply of unknown type {:?}", other as char)),
    };
    *at = after_line;
    Ok(Some(value))
}

/// The line starting at `from`, without its CRLF; None until the CRLF is
/// there.
fn line(buf: &[u8], from: usize) -> Option<&[u8]> {
    let rest = buf.get(from..)?;
    let end = rest.windows(2).position(|pair| pair == b"\r\n")?;
    Some(&rest[..end])
}

fn text(bytes: &[u8]) -> Result<String, String> {
    String::from_utf8(bytes.to_vec()).map_err(|_| "a status line that is not UTF-8".to_string())
}

fn integer(bytes: &[u8]) -> Result<i64, String> {
    std::str::from_utf8(bytes)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("a malformed integer {:?}", String::from_utf8_lossy(bytes)))
}

/// A bulk string's or array's length: None for -1 (nil), refused above
/// `max` or below -1.
fn length(bytes: &[u8], max: usize, what: &str) -> Result<Option<usize>, String> {
    match integer(bytes)? {
        -1 => Ok(None),
        n if n < 0 => Err(format!("a negative {what} length {n}")),
        n => match usize::try_from(n) {
            Ok(len) if len <= max => Ok(Some(len)),
            _ => Err(format!("a {what} of {n} (at most {max} are read)")),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn whole(bytes: &[u8]) -> Reply {
        let (value, used) = parse(bytes).expect("well-formed").expect("complete");
        assert_eq!(used, bytes.len(), "the whole reply is used");
        value
    }

    fn error(code: &str, detail: &str) -> Reply {
        Reply::Error { code: code.to_string(), detail: detail.to_string() }
    }

    #[test]
    fn every_resp2_reply_type() {
        assert_eq!(whole(b"+OK\r\n"), Reply::Status("OK".into()));
        assert_eq!(whole(b":-42\r\n"), Reply::Int(-42));
        assert_eq!(whole(b"$5\r\nab\r\nc\r\n"), Reply::Bulk(b"ab\r\nc".to_vec()));
        assert_eq!(whole(b"$0\r\n\r\n"), Reply::Bulk(Vec::new()));
        assert_eq!(whole(b"$-1\r\n"), Reply::Nil);
        assert_eq!(whole(b"*-1\r\n"), Reply::Nil);
        assert_eq!(whole(b"*0\r\n"), Reply::Array(Vec::new()));
        assert_eq!(
            whole(b"*3\r\n:1\r\n*2\r\n$1\r\nx\r\n$-1\r\n-ERR no\r\n"),
            Reply::Array(vec![
                Reply::Int(1),
                Reply::Array(vec![Reply::Bulk(b"x".to_vec()), Reply::Nil]),
                error("ERR", "no"),
            ])
        );
    }

    #[test]
    fn an_error_splits_into_code_and_detail() {
        assert_eq!(
            whole(b"-QUARANTINE node restarted 120 ms ago\r\n"),
            error("QUARANTINE", "node restarted 120 ms ago")
        );
        assert_eq!(whole(b"-NOPERM\r\n"), error("NOPERM", ""));
    }

    /// Replies arrive in pieces: every prefix of a reply is "incomplete",
    /// never an error and never a shorter reply; the bytes after it are
    /// left for the next call.
    #[test]
    fn a_reply_cut_anywhere_waits_for_the_rest() {
        let reply: &[u8] = b"*2\r\n$3\r\nabc\r\n*1\r\n:7\r\n";
        for cut in 0..reply.len() {
            assert_eq!(parse(&reply[..cut]), Ok(None), "cut at {cut}");
        }
        let mut two = reply.to_vec();
        two.extend_from_slice(b":9\r\n");
        let (first, used) = parse(&two).unwrap().unwrap();
        assert_eq!(used, reply.len());
        assert!(matches!(first, Reply::Array(_)));
        assert_eq!(parse(&two[used..]), Ok(Some((Reply::Int(9), 4))));
    }

    #[test]
    fn malformed_replies_are_refused() {
        for bad in [
            &b"\r\n"[..],
            b"?1\r\n",
            b":12x\r\n",
            b":\r\n",
            b"$-2\r\n",
            b"*-5\r\n",
            b"$3\r\nabcd\r\n",
            b"$99999999999999999999\r\n",
            b"*2\r\n:1\r\n?\r\n",
        ] {
            assert!(parse(bad).is_err(), "{:?} was accepted", String::from_utf8_lossy(bad));
        }
    }

    /// The bounds: the largest accepted, one more refused; nesting up to
    /// the limit.
    #[test]
    fn lengths_and_nesting_are_bounded() {
        assert_eq!(parse(format!("${BULK_MAX}\r\n").as_bytes()), Ok(None), "a full-size bulk string waits");
        assert!(parse(format!("${}\r\n", BULK_MAX + 1).as_bytes()).is_err());
        assert_eq!(parse(format!("*{ARRAY_MAX}\r\n").as_bytes()), Ok(None));
        assert!(parse(format!("*{}\r\n", ARRAY_MAX + 1).as_bytes()).is_err());
        let nested = |depth: usize| {
            let mut bytes = "*1\r\n".repeat(depth).into_bytes();
            bytes.extend_from_slice(b":1\r\n");
            bytes
        };
        assert!(matches!(parse(&nested(DEPTH_MAX)), Ok(Some(_))));
        assert!(parse(&nested(DEPTH_MAX + 1)).is_err());
    }
}
