//! A node's address: `redis://[[user]:password@]host:port[/db]`, parsed
//! into what a connection needs, or refused in words that say what to
//! write instead.

use redis::{ConnectionAddr, ConnectionInfo, IntoConnectionInfo, ProtocolVersion};

/// The form of a node's address, for messages.
const URL_FORM: &str = "redis://[[user]:password@]host:port[/db]";

/// `url` as a node's address, or why not, in words that say what to write
/// instead (the redis crate's own error says "Redis URL did not parse" for
/// most mistakes).
pub(crate) fn parse_url(url: &str) -> Result<ConnectionInfo, String> {
    let Some((scheme, _)) = url.split_once("://") else {
        return Err(match suggestion(url) {
            Some(example) => format!("not a URL: write it as {URL_FORM}, e.g. {example}"),
            None => format!("not a URL: write it as {URL_FORM}"),
        });
    };
    match scheme {
        "redis" => {}
        "rediss" => return Err(format!("TLS (rediss://) is not supported: write it as {URL_FORM}")),
        "unix" | "redis+unix" => {
            return Err(format!("Unix sockets are not supported: write it as {URL_FORM}"))
        }
        other => {
            return Err(format!(
                "the scheme is {other}://, not redis:// (one master), redis+cluster:// (a cluster) or \
                 redis+sentinel:// (a master under Sentinel): \
                 write it as {URL_FORM}"
            ))
        }
    }
    let parsed = url::Url::parse(url).map_err(|e| format!("{e}: write it as {URL_FORM}"))?;
    if parsed.host_str().is_none_or(str::is_empty) {
        return Err(format!("no host: write it as {URL_FORM}"));
    }
    let db = parsed.path().trim_matches('/');
    if !db.is_empty() && db.parse::<u32>().is_err() {
        return Err(format!("the database is {db:?}, not a number: write it as {URL_FORM}"));
    }
    let info = url.into_connection_info().map_err(|e| {
        format!("{}: write it as {URL_FORM}", e.to_string().trim_end_matches("- InvalidClientConfig"))
    })?;
    if !matches!(info.addr, ConnectionAddr::Tcp(..)) {
        return Err(format!("only plain TCP nodes are supported: write it as {URL_FORM}"));
    }
    if info.redis.protocol != ProtocolVersion::RESP2 {
        return Err("only the RESP2 protocol is supported".into());
    }
    Ok(info)
}

/// What to write instead of an address without a scheme: `redis://`
/// before its words joined by `:` (`localhost 6379` becomes
/// `redis://localhost:6379`), when that parses; else nothing.
fn suggestion(url: &str) -> Option<String> {
    let joined = url.split_whitespace().collect::<Vec<_>>().join(":");
    let example = format!("redis://{joined}");
    (!joined.is_empty() && parse_url(&example).is_ok()).then_some(example)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A bad address says what is wrong and what to write instead.
    #[test]
    fn bad_urls_say_what_to_write() {
        let refused = |url: &str| match parse_url(url) {
            Err(why) => why,
            Ok(info) => panic!("{url} parsed as {info:?}"),
        };
        let form = "write it as redis://[[user]:password@]host:port[/db]";
        for (url, says) in [
            ("localhost:6379", "not a URL: write it as redis://[[user]:password@]host:port[/db], e.g. redis://localhost:6379"),
            ("10.0.0.1:6379", "not a URL: write it as redis://[[user]:password@]host:port[/db], e.g. redis://10.0.0.1:6379"),
            ("localhost 6379", "not a URL: write it as redis://[[user]:password@]host:port[/db], e.g. redis://localhost:6379"),
            ("localhost\t 6379 ", "e.g. redis://localhost:6379"),
            ("http://10.0.0.1:6379", "the scheme is http://, not redis://"),
            ("rediss://10.0.0.1:6379", "TLS (rediss://) is not supported"),
            ("unix:///tmp/redis.sock", "Unix sockets are not supported"),
            ("redis://", "no host"),
            ("redis://:6379", "empty host"),
            ("redis://10.0.0.1:port", "invalid port number"),
            ("redis://10.0.0.1:99999", "invalid port number"),
            ("redis://10.0.0.1:6379/zero", "the database is \"zero\", not a number"),
            ("redis://10.0.0.1:6379/?protocol=resp3", "only the RESP2 protocol"),
        ] {
            let why = refused(url);
            assert!(why.contains(says), "{url}: {why}");
            assert!(!why.contains("InvalidClientConfig") && !why.contains("did not parse"), "{url}: {why}");
            if !why.contains("RESP2") {
                assert!(why.contains(form), "{url}: {why}");
            }
        }
        // No example when none would parse.
        let why = refused("localhost 6379 extra");
        assert!(why.starts_with("not a URL: write it as") && !why.contains("e.g."), "{why}");
        for url in ["redis://10.0.0.1:6379", "redis://h", "redis://u:p@h:1/3", "redis://:p@[::1]:6379/"] {
            assert!(parse_url(url).is_ok(), "{url}");
        }
    }
}
