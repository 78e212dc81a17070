//! The RESP2 the simulated node speaks: a request is an array of bulk
//! strings (what the client writes); a reply is an integer, nil, a status
//! or an error.

/// A node's reply to one command.
#[derive(Clone, PartialEq, Eq)]
pub enum Reply {
    Int(i64),
    Nil,
    Status(&'static str),
    /// An array of integers (`LOCK.RENEW`, `LOCK.MRELEASE`: one per key).
    Ints(Vec<i64>),
    /// Not a reply yet: the call waits (`WAIT`) as waiter this handle of
    /// the node (`waits.rs`); its connection writes the answer later.
    Blocked(u64),
    /// The error's code and the rest of its line.
    Error(&'static str, String),
    /// A bulk string (`INFO`, a cluster's node names).
    Bulk(Vec<u8>),
    /// An array (`CLUSTER SHARDS`).
    Array(Vec<Reply>),
}

/// As a history prints it: an array by its length only (a topology is
/// long and says nothing a history needs).
impl std::fmt::Debug for Reply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Reply::Int(n) => f.debug_tuple("Int").field(n).finish(),
            Reply::Nil => f.write_str("Nil"),
            Reply::Status(s) => f.debug_tuple("Status").field(s).finish(),
            Reply::Error(code, detail) => f.debug_tuple("Error").field(code).field(detail).finish(),
            Reply::Bulk(bytes) => f.debug_tuple("Bulk").field(&String::from_utf8_lossy(bytes)).finish(),
            Reply::Array(items) => write!(f, "Array({} items)", items.len()),
            Reply::Ints(ns) => f.debug_tuple("Ints").field(ns).finish(),
            Reply::Blocked(handle) => f.debug_tuple("Blocked").field(handle).finish(),
        }
    }
}

impl Reply {
    pub fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Reply::Int(n) => out.extend_from_slice(format!(":{n}\r\n").as_bytes()),
            Reply::Nil => out.extend_from_slice(b"$-1\r\n"),
            Reply::Status(s) => out.extend_from_slice(format!("+{s}\r\n").as_bytes()),
            // Never written: the connection writes the waiter's answer.
            Reply::Blocked(_) => {}
            Reply::Ints(ns) => {
                out.extend_from_slice(format!("*{}\r\n", ns.len()).as_bytes());
                for n in ns {
                    Reply::Int(*n).encode(out);
                }
            }
            Reply::Error(code, detail) => out.extend_from_slice(format!("-{code} {detail}\r\n").as_bytes()),
            Reply::Bulk(bytes) => {
                out.extend_from_slice(format!("${}\r\n", bytes.len()).as_bytes());
                out.extend_from_slice(bytes);
                out.extend_from_slice(b"\r\n");
            }
            Reply::Array(items) => {
                out.extend_from_slice(format!("*{}\r\n", items.len()).as_bytes());
                for item in items {
                    item.encode(out);
                }
            }
        }
    }
}

/// A request's words, and how many bytes of the buffer it took.
pub type Request = (Vec<Vec<u8>>, usize);

/// The first complete request in `buf`: its words and its length in
/// bytes; `Ok(None)` while incomplete; `Err` for anything that is not an
/// array of bulk strings.
pub fn parse_request(buf: &[u8]) -> Result<Option<Request>, String> {
    let Some((count, mut at)) = header(buf, 0, b'*')? else { return Ok(None) };
    let mut words = Vec::with_capacity(count);
    for _ in 0..count {
        let Some((len, start)) = header(buf, at, b'$')? else { return Ok(None) };
        let end = start + len;
        if buf.len() < end + 2 {
            return Ok(None);
        }
        words.push(buf[start..end].to_vec());
        at = end + 2;
    }
    Ok(Some((words, at)))
}

/// A `<kind><number>\r\n` line at `at`: the number and where the next
/// part starts.
fn header(buf: &[u8], at: usize, kind: u8) -> Result<Option<(usize, usize)>, String> {
    let Some(rest) = buf.get(at..) else { return Ok(None) };
    let Some(end) = rest.windows(2).position(|w| w == b"\r\n") else { return Ok(None) };
    match rest.split_first() {
        Some((first, _)) if *first == kind => {}
        _ => return Err(format!("expected {:?} at byte {at}", kind as char)),
    }
    let number = std::str::from_utf8(&rest[1..end]).ok().and_then(|s| s.parse().ok());
    match number {
        Some(n) => Ok(Some((n, at + end + 2))),
        None => Err(format!("a bad length at byte {at}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_parse_whole_or_not_at_all() {
        let bytes = b"*3\r\n$12\r\nLOCK.RELEASE\r\n$3\r\njob\r\n$1\r\nt\r\n";
        let (words, len) = parse_request(bytes).unwrap().unwrap();
        assert_eq!(words, [b"LOCK.RELEASE".to_vec(), b"job".to_vec(), b"t".to_vec()]);
        assert_eq!(len, bytes.len());
        for cut in 0..bytes.len() {
            assert_eq!(parse_request(&bytes[..cut]).unwrap(), None, "cut at {cut}");
        }
        assert!(parse_request(b"+OK\r\n").is_err());
    }
}
