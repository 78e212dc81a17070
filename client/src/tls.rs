//! TLS for `rediss://` members: the settings ([`Tls`], one spelling for
//! the Rust [`crate::Config`], the CLI, Python and Node.js: see
//! client/README.md, "TLS"), the rustls client configuration built from
//! them once per client, the handshake, and each TLS failure in words
//! that name the node and the cause.
//!
//! Why rustls (with the `ring` provider) and the system's trust store:
//! docs/design.md, "TLS".

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;

/// How the client speaks TLS to its `rediss://` members (and to every node
/// of a `rediss+cluster://` member). The default: the system's trusted
/// CAs, no client certificate, the server's certificate checked for the
/// host the member's URL names.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tls {
    /// A PEM file of CA certificates to trust (`tls_ca_file`). Given this
    /// or [`Tls::ca_dir`], the client trusts those CAs only, not the
    /// system's.
    pub ca_file: Option<PathBuf>,
    /// A directory whose PEM files (`*.pem`, `*.crt`) hold CA certificates
    /// to trust (`tls_ca_dir`).
    pub ca_dir: Option<PathBuf>,
    /// The client's certificate chain, PEM (`tls_cert_file`), for servers
    /// that require one (`tls-auth-clients yes`: mutual TLS). Needs
    /// [`Tls::key_file`].
    pub cert_file: Option<PathBuf>,
    /// The private key of [`Tls::cert_file`], PEM (`tls_key_file`).
    pub key_file: Option<PathBuf>,
    /// The name every node's certificate must hold (`tls_server_name`),
    /// instead of the host in its URL (or the address a cluster gives):
    /// for nodes reached by IP address whose certificates name a host.
    pub server_name: Option<String>,
    /// Accept any certificate: no CA check, no name check
    /// (`tls_insecure_skip_verify`). The connection is encrypted but not
    /// authenticated: anyone on the path can pose as the node. For tests
    /// only.
    pub insecure_skip_verify: bool,
}

impl Tls {
    /// The settings given, by their shared names (`tls_ca_file`, ...):
    /// none for the default.
    pub fn named(&self) -> Vec<&'static str> {
        let mut names = Vec::new();
        for (given, name) in [
            (self.ca_file.is_some(), "tls_ca_file"),
            (self.ca_dir.is_some(), "tls_ca_dir"),
            (self.cert_file.is_some(), "tls_cert_file"),
            (self.key_file.is_some(), "tls_key_file"),
            (self.server_name.is_some(), "tls_server_name"),
            (self.insecure_skip_verify, "tls_insecure_skip_verify"),
        ] {
            if given {
                names.push(name);
            }
        }
        names
    }

    /// The client configuration these settings make (the files read now),
    /// or why not, naming the setting and the file.
    pub(crate) fn client(&self) -> Result<TlsClient, String> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS: {e}"))?;
        let builder = if self.insecure_skip_verify {
            builder.dangerous().with_custom_certificate_verifier(Arc::new(SkipVerify(provider)))
        } else {
            builder.with_root_certificates(self.roots()?)
        };
        let config = match (&self.cert_file, &self.key_file) {
            (None, None) => builder.with_no_client_auth(),
            (Some(cert_file), Some(key_file)) => {
                let chain = read_certs(cert_file, "tls_cert_file")?;
                let key = PrivateKeyDer::from_pem_file(key_file)
                    .map_err(|e| format!("tls_key_file {}: no private key read: {e}", key_file.display()))?;
                builder.with_client_auth_cert(chain, key).map_err(|e| {
                    format!(
                        "tls_cert_file {} and tls_key_file {} do not make a client identity: {e}",
                        cert_file.display(),
                        key_file.display()
                    )
                })?
            }
            (Some(_), None) => return Err("tls_cert_file is given without tls_key_file: give both".into()),
            (None, Some(_)) => return Err("tls_key_file is given without tls_cert_file: give both".into()),
        };
        let server_name = match &self.server_name {
            None => None,
            Some(name) => Some(
                ServerName::try_from(name.clone())
                    .map_err(|_| format!("tls_server_name {name:?} is not a DNS name or an IP address"))?,
            ),
        };
        Ok(TlsClient { config: Arc::new(config), server_name })
    }

    /// The CAs to trust: the files given, else the system's.
    fn roots(&self) -> Result<RootCertStore, String> {
        let mut roots = RootCertStore::empty();
        if self.ca_file.is_none() && self.ca_dir.is_none() {
            let found = rustls_native_certs::load_native_certs();
            let (added, _) = roots.add_parsable_certificates(found.certs);
            if added == 0 {
                let errors: Vec<String> = found.errors.iter().map(ToString::to_string).collect();
                return Err(format!(
                    "no trusted CA certificates found on this system ({}): give tls_ca_file or tls_ca_dir",
                    if errors.is_empty() { "none installed".to_string() } else { errors.join("; ") }
                ));
            }
            return Ok(roots);
        }
        if let Some(file) = &self.ca_file {
            add_all(&mut roots, read_certs(file, "tls_ca_file")?, file, "tls_ca_file")?;
        }
        if let Some(dir) = &self.ca_dir {
            let entries = std::fs::read_dir(dir).map_err(|e| format!("tls_ca_dir {}: {e}", dir.display()))?;
            let mut files: Vec<PathBuf> = entries
                .filter_map(|entry| entry.ok().map(|e| e.path()))
                .filter(|path| {
                    path.is_file() && path.extension().is_some_and(|ext| ext == "pem" || ext == "crt")
                })
                .collect();
            files.sort();
            let mut certs = Vec::new();
            for file in &files {
                certs.extend(read_certs(file, "tls_ca_dir")?);
            }
            if certs.is_empty() {
                return Err(format!(
                    "tls_ca_dir {}: no CA certificate in its *.pem or *.crt files",
                    dir.display()
                ));
            }
            add_all(&mut roots, certs, dir, "tls_ca_dir")?;
        }
        Ok(roots)
    }
}

/// Every certificate of a PEM file, or why not.
fn read_certs(file: &Path, setting: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_file_iter(file)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| format!("{setting} {}: {e}", file.display()))?;
    if certs.is_empty() {
        return Err(format!("{setting} {}: no PEM certificate in it", file.display()));
    }
    Ok(certs)
}

fn add_all(
    roots: &mut RootCertStore,
    certs: Vec<CertificateDer<'static>>,
    from: &Path,
    setting: &str,
) -> Result<(), String> {
    for cert in certs {
        roots.add(cert).map_err(|e| format!("{setting} {}: not a CA certificate: {e}", from.display()))?;
    }
    Ok(())
}

/// The client configuration of one client, shared by all its TLS members.
pub(crate) struct TlsClient {
    config: Arc<ClientConfig>,
    /// [`Tls::server_name`], parsed.
    server_name: Option<ServerName<'static>>,
}

impl TlsClient {
    /// What a connection to `host` needs: the name its certificate must
    /// hold ([`Tls::server_name`], else `host`).
    pub(crate) fn target(&self, host: &str) -> Result<TlsTarget, String> {
        let name = match &self.server_name {
            Some(name) => name.clone(),
            None => ServerName::try_from(host.to_string())
                .map_err(|_| format!("{host} is not a DNS name or an IP address (for TLS)"))?,
        };
        Ok(TlsTarget { connector: TlsConnector::from(self.config.clone()), name })
    }
}

/// How to speak TLS to one node.
#[derive(Clone)]
pub(crate) struct TlsTarget {
    connector: TlsConnector,
    name: ServerName<'static>,
}

impl TlsTarget {
    /// The TLS handshake over `stream`, to `addr` (`host:port`, for the
    /// error), or why it failed, in words.
    pub(crate) async fn handshake(
        &self,
        stream: TcpStream,
        addr: &str,
    ) -> Result<TlsStream<TcpStream>, String> {
        self.connector
            .connect(self.name.clone(), stream)
            .await
            .map_err(|e| format!("TLS handshake with {addr} failed: {}", explain(&e, Some(&self.name))))
    }
}

/// A TLS failure (a handshake's, or a connection's later) in words: the
/// cause, and what to do about it.
/// `name`: the name the certificate was checked for, when known.
pub(crate) fn explain(error: &std::io::Error, name: Option<&ServerName<'_>>) -> String {
    let Some(tls) = error.get_ref().and_then(|inner| inner.downcast_ref::<rustls::Error>()) else {
        return error.to_string();
    };
    use rustls::Error as E;
    use CertificateError as C;
    match tls {
        E::InvalidCertificate(C::UnknownIssuer) => {
            "unknown CA: the node's certificate is not signed by a CA \
             this client trusts (give the CA that signed it as tls_ca_file or in tls_ca_dir)"
                .into()
        }
        E::InvalidCertificate(C::NotValidForName | C::NotValidForNameContext { .. }) => format!(
            "name mismatch: the node's certificate is not valid for {} (connect by a name it holds, or \
             set tls_server_name to one)",
            name.map_or("the name asked for".into(), |name| name.to_str())
        ),
        E::InvalidCertificate(C::Expired) => "expired certificate: the node's certificate has expired".into(),
        E::InvalidCertificate(C::ExpiredContext { time, not_after }) => format!(
            "expired certificate: the node's certificate expired {} s ago",
            time.as_secs().saturating_sub(not_after.as_secs())
        ),
        E::InvalidCertificate(C::NotValidYet | C::NotValidYetContext { .. }) => {
            "the node's certificate is not valid yet (is this machine's clock right?)".into()
        }
        E::InvalidMessage(_) | E::InappropriateMessage { .. } | E::InappropriateHandshakeMessage { .. } => {
            "the node answered in plain text: not a TLS port, use redis://".into()
        }
        E::AlertReceived(alert) => format!(
            "the node refused the TLS handshake ({alert:?}): if it requires a client certificate \
             (tls-auth-clients), give one it trusts as tls_cert_file and tls_key_file"
        ),
        other => format!("TLS: {other}"),
    }
}

/// Whether `error` is the node's TLS alert (explained by [`explain`] as a
/// refusal).
pub(crate) fn is_alert(error: &std::io::Error) -> bool {
    let tls = error.get_ref().and_then(|inner| inner.downcast_ref::<rustls::Error>());
    matches!(tls, Some(rustls::Error::AlertReceived(_)))
}

/// `why` a TLS connection ended before its first reply, without the
/// node's alert: in TLS 1.3 a node that requires a client certificate
/// checks it after the client's side of the handshake is done, and its
/// refusal may reach the client as a reset or an end of stream alone (the
/// client's first command crossed the node's close).
/// `peer`: `host:port`.
pub(crate) fn refused_after_handshake(peer: &str, why: &str) -> String {
    format!(
        "{why} before {peer}'s first reply: the node may have refused the TLS handshake: if it requires a client \
         certificate (tls-auth-clients), give one it trusts as tls_cert_file and tls_key_file"
    )
}

/// The certificate verifier of [`Tls::insecure_skip_verify`]: accepts any
/// certificate for any name; still checks that the server holds the key
/// of the certificate it sent (the handshake's signatures).
#[derive(Debug)]
struct SkipVerify(Arc<CryptoProvider>);

impl ServerCertVerifier for SkipVerify {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_name_themselves_and_bad_ones_say_which() {
        assert!(Tls::default().named().is_empty());
        let tls = Tls { ca_file: Some("x".into()), insecure_skip_verify: true, ..Tls::default() };
        assert_eq!(tls.named(), ["tls_ca_file", "tls_insecure_skip_verify"]);
        let refused = |tls: Tls| tls.client().err().unwrap_or_default();
        let missing = PathBuf::from("/nonexistent/ca.pem");
        assert!(refused(Tls { ca_file: Some(missing.clone()), ..Tls::default() })
            .starts_with("tls_ca_file /nonexistent/ca.pem: "));
        assert!(refused(Tls { ca_dir: Some(missing.clone()), ..Tls::default() })
            .starts_with("tls_ca_dir /nonexistent/ca.pem: "));
        assert_eq!(
            refused(Tls { cert_file: Some(missing.clone()), insecure_skip_verify: true, ..Tls::default() }),
            "tls_cert_file is given without tls_key_file: give both"
        );
        assert_eq!(
            refused(Tls { key_file: Some(missing), insecure_skip_verify: true, ..Tls::default() }),
            "tls_key_file is given without tls_cert_file: give both"
        );
        assert_eq!(
            refused(Tls {
                server_name: Some("not a name".into()),
                insecure_skip_verify: true,
                ..Tls::default()
            }),
            "tls_server_name \"not a name\" is not a DNS name or an IP address"
        );
        // A file that holds no certificate.
        let empty = std::env::temp_dir().join(format!("redlock-tls-empty-{}.pem", std::process::id()));
        std::fs::write(&empty, "not a certificate\n").unwrap();
        let why = refused(Tls { ca_file: Some(empty.clone()), ..Tls::default() });
        let _ = std::fs::remove_file(&empty);
        assert!(why.ends_with("no PEM certificate in it"), "{why}");
    }

    #[test]
    fn a_target_names_the_host_or_the_name_given() {
        let client = Tls { insecure_skip_verify: true, ..Tls::default() }.client().unwrap();
        assert_eq!(client.target("10.0.0.1").unwrap().name.to_str(), "10.0.0.1");
        assert_eq!(client.target("lock1.example").unwrap().name.to_str(), "lock1.example");
        assert!(client.target("bad host").is_err());
        let named =
            Tls { server_name: Some("locks.example".into()), insecure_skip_verify: true, ..Tls::default() };
        assert_eq!(named.client().unwrap().target("10.0.0.1").unwrap().name.to_str(), "locks.example");
    }
}
