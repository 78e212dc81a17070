//! How a quorum member is written: its kind by its URL's scheme (one
//! table, [`SCHEMES`]: each kind plain or over TLS, the TLS scheme with
//! the `rediss` of `rediss://`): one master, `redis://...` (see
//! `node/address.rs`), or one cluster,
//! `redis+cluster://[[user]:password@]host:port[?addr=host:port&addr=host:port]`:
//! the host in the authority and every `addr=` are seed nodes (the
//! spelling of go-redis' cluster URLs; it keeps commas free for the list
//! of members). Pure: parsed into addresses and credentials, or refused in
//! words that say what to write instead.

use redis::{ConnectionAddr, ConnectionInfo, ProtocolVersion, RedisConnectionInfo};

use super::redirect::Addr;

/// The form of a cluster member, for messages.
pub(crate) const CLUSTER_FORM: &str =
    "redis[s]+cluster://[[user]:password@]host:port[?addr=host:port&addr=host:port]";

/// What a member is, by its scheme.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum MemberKind {
    /// One master: `redis://`, `rediss://`.
    Master,
    /// One Redis / Valkey Cluster: `redis+cluster://`, `rediss+cluster://`.
    Cluster,
    /// One master under Sentinel: `redis+sentinel://`, `rediss+sentinel://`.
    Sentinel,
}

/// Every member scheme, with its kind and whether it speaks TLS. A new
/// kind of member adds its plain and its TLS scheme here.
pub(crate) const SCHEMES: [(&str, MemberKind, bool); 6] = [
    ("redis", MemberKind::Master, false),
    ("rediss", MemberKind::Master, true),
    ("redis+cluster", MemberKind::Cluster, false),
    ("rediss+cluster", MemberKind::Cluster, true),
    ("redis+sentinel", MemberKind::Sentinel, false),
    ("rediss+sentinel", MemberKind::Sentinel, true),
];

/// The kind of member `text` names and whether it speaks TLS, by its
/// scheme (any case); `None` for a scheme not in [`SCHEMES`] or no scheme.
pub(crate) fn scheme(text: &str) -> Option<(MemberKind, bool)> {
    let (written, _) = text.split_once("://")?;
    SCHEMES.iter().find(|(name, _, _)| name.eq_ignore_ascii_case(written)).map(|&(_, kind, tls)| (kind, tls))
}

/// Seed nodes given in one member; more are refused.
pub(crate) const SEEDS_MAX: usize = 64;

/// A cluster member as written: its seed nodes and the credentials every
/// node of the cluster is connected with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ClusterSpelling {
    pub seeds: Vec<Addr>,
    pub username: Option<String>,
    pub password: Option<String>,
    /// Every node over TLS (`rediss+cluster://`), at the `tls-port` the
    /// cluster announces.
    pub tls: bool,
}

impl ClusterSpelling {
    /// What a connection to the cluster's node at `addr` needs.
    pub fn connection(&self, addr: &Addr) -> ConnectionInfo {
        connection_info(addr, self.username.clone(), self.password.clone())
    }
}

/// A connection to `addr` (database 0, RESP2) with these credentials.
pub(crate) fn connection_info(
    addr: &Addr,
    username: Option<String>,
    password: Option<String>,
) -> ConnectionInfo {
    ConnectionInfo {
        addr: ConnectionAddr::Tcp(addr.host.clone(), addr.port),
        redis: RedisConnectionInfo { db: 0, username, password, protocol: ProtocolVersion::RESP2 },
    }
}

/// Whether `text` names a cluster (`redis+cluster://`, `rediss+cluster://`).
pub(crate) fn is_cluster(text: &str) -> bool {
    scheme(text).is_some_and(|(kind, _)| kind == MemberKind::Cluster)
}

/// What the authority of a member's URL gives: the URL parsed, the
/// address in it, and the credentials (the data nodes').
pub(crate) struct Authority {
    pub url: url::Url,
    pub first: Addr,
    pub username: Option<String>,
    pub password: Option<String>,
}

/// Reads a member's URL up to its path: `form` turns what is wrong into
/// a message that says what to write.
pub(crate) fn authority(
    text: &str,
    default_port: u16,
    form: &dyn Fn(String) -> String,
) -> Result<Authority, String> {
    let url = url::Url::parse(text).map_err(|e| form(e.to_string()))?;
    let host = url.host_str().unwrap_or_default();
    if host.is_empty() {
        return Err(form("no host".into()));
    }
    let port = url.port().unwrap_or(default_port);
    if port == 0 {
        return Err(form("port 0".into()));
    }
    if url.fragment().is_some() {
        return Err(form("a #fragment".into()));
    }
    let username = Some(url.username()).filter(|u| !u.is_empty()).map(|u| decode(u, form)).transpose()?;
    let password = url.password().map(|p| decode(p, form)).transpose()?;
    let first = Addr::parse(&format!("[{}]:{port}", host.trim_matches(|c| c == '[' || c == ']')), "")
        .ok_or_else(|| form(format!("{host}:{port} is not a node address")))?;
    Ok(Authority { url, first, username, password })
}

/// A percent-encoded part of a URL, decoded, or why not.
pub(crate) fn decode(part: &str, form: &dyn Fn(String) -> String) -> Result<String, String> {
    percent_decode(part).ok_or_else(|| form(format!("{part:?} is not valid percent-encoded UTF-8")))
}

/// `text` (`redis+cluster://...`) as a cluster member, or why not.
pub(crate) fn parse_cluster(text: &str) -> Result<ClusterSpelling, String> {
    let tls = scheme(text).is_some_and(|(_, tls)| tls);
    let form = |what: String| format!("{what}: write it as {CLUSTER_FORM}");
    let Authority { url: parsed, first, username, password } = authority(text, 6379, &form)?;
    let db = parsed.path().trim_matches('/');
    if !db.is_empty() && db != "0" {
        return Err(format!(
            "a cluster has database 0 only, not {db:?}: remove the /{db} (write it as {CLUSTER_FORM})"
        ));
    }
    let mut seeds = vec![first];
    for (name, value) in parsed.query_pairs() {
        if name != "addr" {
            return Err(form(format!("unknown parameter {name:?} (only addr=host:port)")));
        }
        let Some(seed) = Addr::parse(&value, "") else {
            return Err(form(format!("addr={value} is not host:port")));
        };
        if seeds.contains(&seed) {
            return Err(form(format!("seed {seed} is listed twice")));
        }
        seeds.push(seed);
    }
    if seeds.len() > SEEDS_MAX {
        return Err(form(format!("{} seeds given, at most {SEEDS_MAX}", seeds.len())));
    }
    Ok(ClusterSpelling { seeds, username, password, tls })
}

/// `%xx` escapes decoded (the URL's user and password as written).
fn percent_decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        if b == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(host: &str, port: u16) -> Addr {
        Addr { host: host.into(), port }
    }

    #[test]
    fn a_cluster_member_names_its_seeds_and_credentials() {
        let one = parse_cluster("redis+cluster://10.0.0.1:7000").unwrap();
        assert_eq!(
            one,
            ClusterSpelling {
                seeds: vec![addr("10.0.0.1", 7000)],
                username: None,
                password: None,
                tls: false
            }
        );
        let tls = parse_cluster("rediss+cluster://10.0.0.1:7000?addr=10.0.0.2:7000").unwrap();
        assert!(tls.tls && tls.seeds.len() == 2);
        let many =
            parse_cluster("redis+cluster://app:s%40cret@h1:7000/?addr=h2:7001&addr=[::1]:7002").unwrap();
        assert_eq!(many.seeds, [addr("h1", 7000), addr("h2", 7001), addr("::1", 7002)]);
        assert_eq!((many.username.as_deref(), many.password.as_deref()), (Some("app"), Some("s@cret")));
        let info = many.connection(&addr("h9", 7009));
        assert_eq!(info.addr, ConnectionAddr::Tcp("h9".into(), 7009));
        assert_eq!((info.redis.db, info.redis.password.as_deref()), (0, Some("s@cret")));
        // A password alone, database 0 written out, the default port.
        let password_only = parse_cluster("redis+cluster://:pw@h/0").unwrap();
        assert_eq!((password_only.username, password_only.password.as_deref()), (None, Some("pw")));
        assert_eq!(password_only.seeds, [addr("h", 6379)]);
        assert_eq!(parse_cluster("redis+cluster://[::1]:7000").unwrap().seeds, [addr("::1", 7000)]);
        assert!(is_cluster("redis+cluster://h:1") && is_cluster("REDIS+CLUSTER://h:1"));
        assert!(is_cluster("rediss+cluster://h:1"));
        assert!(!is_cluster("redis://h:1") && !is_cluster("rediss://h:1") && !is_cluster("h:1"));
        assert_eq!(scheme("rediss://h:1"), Some((MemberKind::Master, true)));
        assert_eq!(scheme("Redis://h:1"), Some((MemberKind::Master, false)));
        assert_eq!(scheme("rediss+cluster://h:1"), Some((MemberKind::Cluster, true)));
        assert_eq!(scheme("http://h:1"), None);
    }

    /// A bad spelling says what is wrong and what to write instead.
    #[test]
    fn bad_cluster_members_say_what_to_write() {
        for (text, says) in [
            ("redis+cluster://", "no host"),
            ("redis+cluster://h:7000/3", "a cluster has database 0 only, not \"3\": remove the /3"),
            ("redis+cluster://h:7000?addr=h2", "addr=h2 is not host:port"),
            ("redis+cluster://h:7000?addr=h2:0", "addr=h2:0 is not host:port"),
            ("redis+cluster://h:7000?seed=h2:1", "unknown parameter \"seed\" (only addr=host:port)"),
            ("redis+cluster://h:7000?addr=h:7000", "seed h:7000 is listed twice"),
            ("redis+cluster://h:99999", "invalid port number"),
            ("redis+cluster://h:7000#x", "a #fragment"),
            ("redis+cluster://u:%ff@h:1", "not valid percent-encoded UTF-8"),
        ] {
            let why = parse_cluster(text).expect_err(text);
            assert!(why.contains(says), "{text}: {why}");
            assert!(why.contains(CLUSTER_FORM), "{text}: {why}");
        }
    }
}
