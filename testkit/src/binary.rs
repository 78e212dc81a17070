//! The server binary under test (`$LOCK_SERVER_BIN`) and its name and
//! version, for failure messages and the few tests whose expectations
//! differ between servers.

use std::process::Command;
use std::sync::OnceLock;

/// The server binary under test: `$LOCK_SERVER_BIN` (a path, or a name
/// looked up on the PATH), by default `redis-server`.
pub fn server_bin() -> String {
    std::env::var("LOCK_SERVER_BIN")
        .ok()
        .filter(|bin| !bin.is_empty())
        .unwrap_or_else(|| "redis-server".into())
}

/// The server under test as "Valkey 9.1.2 (path)", read once from the
/// binary's `--version` line ("Valkey server v=9.1.2 ..."): failure messages
/// name it, so that a failure in CI says which server it happened on.
pub fn server_name() -> &'static str {
    static NAME: OnceLock<String> = OnceLock::new();
    NAME.get_or_init(|| {
        let bin = server_bin();
        let version = Command::new(&bin).arg("--version").output();
        let line =
            version.as_ref().map(|out| String::from_utf8_lossy(&out.stdout).into_owned()).unwrap_or_default();
        match parse_version_line(&line) {
            Some((product, version)) => format!("{product} {version} ({bin})"),
            None => format!("{bin} (version unknown: {:?})", version.map(|out| out.status)),
        }
    })
}

/// ("Valkey", "9.1.2") from "Valkey server v=9.1.2 sha=... bits=64 ...".
fn parse_version_line(line: &str) -> Option<(&str, &str)> {
    let mut words = line.split_whitespace();
    let product = words.next()?;
    let version = words.find_map(|word| word.strip_prefix("v="))?;
    Some((product, version))
}

/// The server's product and version, e.g. ("Redis", (8, 2)), for the few
/// tests whose expectations differ between servers.
pub fn server_version() -> (String, (u32, u32)) {
    let name = server_name();
    let (product, version) = name.split_once(' ').unwrap_or((name, ""));
    let mut numbers = version.split(|c: char| !c.is_ascii_digit()).filter_map(|n| n.parse().ok());
    (product.to_string(), (numbers.next().unwrap_or(0), numbers.next().unwrap_or(0)))
}
