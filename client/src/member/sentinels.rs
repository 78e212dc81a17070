//! How a Sentinel-managed member is written:
//! `redis[s]+sentinel://[[user]:password@]host:port[/master-name][?addr=host:port&...&master=name&sentinel_username=u&sentinel_password=p]`.
//! The host in the authority and every `addr=` are Sentinels; the master's
//! name is the path (or `master=`); the credentials in the authority are
//! the master's (as for every member), the Sentinels' own go in
//! `sentinel_username` / `sentinel_password` (a Sentinel with `requirepass`
//! of its own). Pure: parsed into addresses and credentials, or refused in
//! words that say what to write instead.

use redis::ConnectionInfo;

use super::redirect::Addr;
use super::spelling::{authority, connection_info, decode, Authority};

/// The form of a Sentinel member, for messages.
pub(crate) const SENTINEL_FORM: &str = "redis+sentinel://[[user]:password@]host:port/master-name\
     [?addr=host:port&sentinel_username=user&sentinel_password=password]";

/// Sentinels given in one member; more are refused.
pub(crate) const SENTINELS_MAX: usize = 16;

/// A Sentinel member as written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SentinelSpelling {
    pub sentinels: Vec<Addr>,
    /// The name the Sentinels monitor the master under.
    pub master: String,
    /// The master's (and its replicas') credentials.
    pub username: Option<String>,
    pub password: Option<String>,
    /// The Sentinels' own credentials.
    pub sentinel_username: Option<String>,
    pub sentinel_password: Option<String>,
    /// The Sentinels and the master over TLS (`rediss+sentinel://`).
    pub tls: bool,
}

impl SentinelSpelling {
    /// What a connection to a Sentinel at `addr` needs.
    pub fn sentinel_connection(&self, addr: &Addr) -> ConnectionInfo {
        connection_info(addr, self.sentinel_username.clone(), self.sentinel_password.clone())
    }

    /// What a connection to the master at `addr` needs.
    pub fn master_connection(&self, addr: &Addr) -> ConnectionInfo {
        connection_info(addr, self.username.clone(), self.password.clone())
    }
}

/// `text` (`redis+sentinel://...`) as a Sentinel member, or why not.
pub(crate) fn parse_sentinel(text: &str) -> Result<SentinelSpelling, String> {
    let form = |what: String| format!("{what}: write it as {SENTINEL_FORM}");
    let Authority { url: parsed, first, username, password } = authority(text, 26379, &form)?;
    let mut spelling = SentinelSpelling {
        sentinels: vec![first],
        master: decode(parsed.path().trim_matches('/'), &form)?,
        username,
        password,
        sentinel_username: None,
        sentinel_password: None,
        tls: super::spelling::scheme(text).is_some_and(|(_, tls)| tls),
    };
    for (name, value) in parsed.query_pairs() {
        match &*name {
            "addr" => {
                let Some(sentinel) = Addr::parse(&value, "") else {
                    return Err(form(format!("addr={value} is not host:port")));
                };
                if spelling.sentinels.contains(&sentinel) {
                    return Err(form(format!("Sentinel {sentinel} is listed twice")));
                }
                spelling.sentinels.push(sentinel);
            }
            "master" if spelling.master.is_empty() => spelling.master = value.into_owned(),
            "master" => return Err(form("the master's name is given twice (path and master=)".into())),
            "sentinel_username" => spelling.sentinel_username = Some(value.into_owned()),
            "sentinel_password" => spelling.sentinel_password = Some(value.into_owned()),
            other => {
                return Err(form(format!(
                    "unknown parameter {other:?} (addr=, master=, sentinel_username=, sentinel_password=)"
                )))
            }
        }
    }
    if spelling.master.is_empty() {
        return Err(form("no master name".into()));
    }
    if spelling.master.contains('/') {
        return Err(form(format!("{:?} is not a master name", spelling.master)));
    }
    if spelling.sentinels.len() > SENTINELS_MAX {
        return Err(form(format!("{} Sentinels given, at most {SENTINELS_MAX}", spelling.sentinels.len())));
    }
    Ok(spelling)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(host: &str, port: u16) -> Addr {
        Addr { host: host.into(), port }
    }

    #[test]
    fn a_sentinel_member_names_its_sentinels_master_and_credentials() {
        let one = parse_sentinel("redis+sentinel://10.0.0.1:26379/locks").unwrap();
        assert_eq!(one.sentinels, [addr("10.0.0.1", 26379)]);
        assert_eq!(one.master, "locks");
        assert_eq!((one.username, one.password, one.sentinel_password), (None, None, None));
        let many = parse_sentinel(
            "redis+sentinel://app:s%40cret@s1/locks?addr=s2:26380&addr=[::1]:26381&sentinel_password=sp",
        )
        .unwrap();
        assert_eq!(many.sentinels, [addr("s1", 26379), addr("s2", 26380), addr("::1", 26381)]);
        assert_eq!((many.username.as_deref(), many.password.as_deref()), (Some("app"), Some("s@cret")));
        assert_eq!(many.sentinel_password.as_deref(), Some("sp"));
        let master = many.master_connection(&addr("m", 6379));
        assert_eq!(master.redis.password.as_deref(), Some("s@cret"));
        let sentinel = many.sentinel_connection(&addr("s1", 26379));
        assert_eq!(sentinel.redis.password.as_deref(), Some("sp"));
        let by_parameter = parse_sentinel("redis+sentinel://s1:26379?master=locks").unwrap();
        assert_eq!(by_parameter.master, "locks");
        assert!(!one.tls && parse_sentinel("rediss+sentinel://h:1/m").unwrap().tls);
    }

    #[test]
    fn bad_sentinel_members_say_what_to_write() {
        for (text, says) in [
            ("redis+sentinel://", "no host"),
            ("redis+sentinel://h:26379", "no master name"),
            ("redis+sentinel://h:26379/", "no master name"),
            ("redis+sentinel://h:26379/a/b", "is not a master name"),
            ("redis+sentinel://h:26379/m?master=n", "given twice"),
            ("redis+sentinel://h:26379/m?addr=h2", "addr=h2 is not host:port"),
            ("redis+sentinel://h:26379/m?addr=h:26379", "listed twice"),
            ("redis+sentinel://h:26379/m?seed=h2:1", "unknown parameter \"seed\""),
            ("redis+sentinel://h:26379/m#x", "a #fragment"),
        ] {
            let why = parse_sentinel(text).expect_err(text);
            assert!(why.contains(says), "{text}: {why}");
            assert!(why.contains(SENTINEL_FORM), "{text}: {why}");
        }
    }
}
