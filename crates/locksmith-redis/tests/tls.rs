//! TLS and authentication against real TLS-only redis-servers: each misconfiguration gives its
//! own error class, fast, without the password in any message; mutual TLS, `?tls=true`,
//! `#insecure` and a caller-built `redis::Client` work.

mod common;

use std::time::{Duration, Instant};

use locksmith::Error;
use locksmith_core::Backend;
use locksmith_redis::{Mode, RedisBackend};
use locksmith_testkit::{RedisServer, TestCerts, TlsMode, REDIS_TLS_USER};

/// A wrong password or CA must be reported well before any retry loop could hide it.
const FAST: Duration = Duration::from_secs(2);

/// The first acquisition on `url`: its error and how long it took.
async fn first_lock_error(url: &str) -> (Error, Duration) {
    let client = locksmith::connect_with_ttl(url, Duration::from_secs(5)).await.unwrap();
    let started = Instant::now();
    let e = client.lock(&common::unique("tls")).await.map(|_| ()).unwrap_err();
    let took = started.elapsed();
    println!("{url_shown}: {e} (after {took:?})", url_shown = locksmith_core::driver::redact(url));
    client.close().await;
    (e, took)
}

/// Neither the error's message nor its Debug form shows `secret`.
fn assert_hidden(e: &Error, secret: &str) {
    assert!(!e.to_string().contains(secret), "message shows the secret: {e}");
    assert!(!format!("{e:?}").contains(secret), "Debug shows the secret: {e:?}");
}

/// The server's URL with `query` instead of its own `?ca=…`.
fn url_with(server: &RedisServer, password: &str, query: &str) -> String {
    format!("rediss://{REDIS_TLS_USER}:{password}@localhost:{}?{query}", server.port())
}

/// A lock, released again: the connection works.
async fn lock_cycle(url: &str) {
    let client = locksmith::connect_with_ttl(url, Duration::from_secs(5)).await.unwrap();
    let guard = client.lock(&common::unique("tls")).await.unwrap();
    assert!(guard.fencing_token().is_some_and(|t| t > 0));
    assert!(guard.unlock().await.unwrap());
    client.close().await;
}

/// A CA that did not sign the server's certificate: `Error::Config`, at once, naming `ca=`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_ca_is_a_config_error_fast() {
    let certs = TestCerts::generate();
    let server = RedisServer::start_tls(&certs, TlsMode::ServerOnly);
    let url = url_with(&server, server.password(), &format!("ca={}", certs.other_ca().display()));
    let (e, took) = first_lock_error(&url).await;
    assert!(
        matches!(&e, Error::Config { message, .. } if message.contains("not trusted") && message.contains("ca=")),
        "{e}"
    );
    assert!(took < FAST, "took {took:?}");
    assert_hidden(&e, server.password());
}

/// Without `ca=` only Mozilla's public roots are trusted, and they did not sign a test server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_ca_the_public_roots_decide() {
    let server = RedisServer::start_tls(&TestCerts::generate(), TlsMode::ServerOnly);
    let url = format!("rediss://{REDIS_TLS_USER}:{}@localhost:{}", server.password(), server.port());
    let (e, _) = first_lock_error(&url).await;
    assert!(matches!(e, Error::Config { .. }), "{e}");
}

/// A wrong password: `Error::Auth`, at once, never showing either password.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_password_is_an_auth_error_fast() {
    let server = RedisServer::start_tls(&TestCerts::generate(), TlsMode::ServerOnly);
    let wrong = "not-the-password-5f2a";
    let url = url_with(&server, wrong, &format!("ca={}", server.ca().display()));
    let (e, took) = first_lock_error(&url).await;
    assert!(matches!(&e, Error::Auth { message, .. } if message.contains("WRONGPASS")), "{e}");
    assert!(took < FAST, "took {took:?}");
    assert_hidden(&e, wrong);
    assert_hidden(&e, server.password());
    // An unknown user is the same answer (Redis does not say which part was wrong).
    let url = format!("rediss://nobody:{wrong}@localhost:{}?ca={}", server.port(), server.ca().display());
    assert!(matches!(first_lock_error(&url).await.0, Error::Auth { .. }));
}

/// No credentials where the `default` user is disabled: NOAUTH, an `Error::Auth`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_credentials_is_an_auth_error() {
    let server = RedisServer::start_tls(&TestCerts::generate(), TlsMode::ServerOnly);
    let url = format!("rediss://localhost:{}?ca={}", server.port(), server.ca().display());
    let (e, took) = first_lock_error(&url).await;
    assert!(matches!(&e, Error::Auth { message, .. } if message.contains("NOAUTH")), "{e}");
    assert!(took < FAST, "took {took:?}");
}

/// An ACL user that may not run what the acquire script runs: `Error::Auth` naming NOPERM.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_permission_is_an_auth_error() {
    let server = RedisServer::start_tls(&TestCerts::generate(), TlsMode::ServerOnly);
    let mut admin = common::raw_tls(&server, None).await;
    let _: () =
        common::cmd(&mut admin, &["ACL", "SETUSER", "noincr", "on", ">pw-noincr", "~*", "&*", "+@all", "-incr"]).await;
    let _: () =
        common::cmd(&mut admin, &["ACL", "SETUSER", "otherkeys", "on", ">pw-other", "~other:*", "&*", "+@all"]).await;
    for user in ["noincr:pw-noincr", "otherkeys:pw-other"] {
        let url = format!("rediss://{user}@localhost:{}?ca={}", server.port(), server.ca().display());
        let (e, took) = first_lock_error(&url).await;
        assert!(matches!(&e, Error::Auth { message, .. } if message.contains("NOPERM")), "{user}: {e}");
        assert!(took < FAST, "took {took:?}");
    }
}

/// A server that demands client certificates, asked without one: `Error::Config` (the URL
/// lacks `cert=`/`key=`; no credential was presented and refused), saying what to add.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_client_certificate_is_a_config_error() {
    let server = RedisServer::start_tls(&TestCerts::generate(), TlsMode::ClientCert);
    let (e, took) = first_lock_error(&server.tls_url()).await;
    assert!(matches!(&e, Error::Config { message, .. } if message.contains("cert=FILE&key=FILE")), "{e}");
    assert!(took < FAST, "took {took:?}");
}

/// A client certificate the server does not accept (here one made for servers only): the
/// server refused a credential we presented, `Error::Auth`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_client_certificate_is_an_auth_error() {
    let certs = TestCerts::generate();
    let server = RedisServer::start_tls(&certs, TlsMode::ClientCert);
    let url =
        format!("{}&cert={}&key={}", server.tls_url(), certs.server_cert().display(), certs.server_key().display());
    let (e, took) = first_lock_error(&url).await;
    assert!(matches!(&e, Error::Auth { message, .. } if message.contains("client certificate")), "{e}");
    assert!(took < FAST, "took {took:?}");
}

/// Mutual TLS: with the client certificate the full cycle works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_tls_locks() {
    let certs = TestCerts::generate();
    let server = RedisServer::start_tls(&certs, TlsMode::ClientCert);
    lock_cycle(&format!(
        "{}&cert={}&key={}",
        server.tls_url(),
        certs.client_cert().display(),
        certs.client_key().display()
    ))
    .await;
}

/// `redis://…?tls=true&ca=…` is the same as `rediss://…?ca=…`, and the IP address in the
/// certificate verifies too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_true_and_ip_addresses_work() {
    let server = RedisServer::start_tls(&TestCerts::generate(), TlsMode::ServerOnly);
    let ca = server.ca();
    lock_cycle(&format!(
        "redis://{REDIS_TLS_USER}:{}@127.0.0.1:{}?tls=true&ca={}",
        server.password(),
        server.port(),
        ca.display()
    ))
    .await;
}

/// `#insecure` connects without verifying the certificate (here one no trusted CA signed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn insecure_skips_verification_when_written() {
    let server = RedisServer::start_tls(&TestCerts::generate(), TlsMode::ServerOnly);
    let url = format!("rediss://{REDIS_TLS_USER}:{}@localhost:{}#insecure", server.password(), server.port());
    assert!(RedisBackend::from_url(&url).unwrap().describe().ends_with("#insecure"));
    lock_cycle(&url).await;
}

/// A plain `redis://` URL to a TLS-only port: the server resets the connection, which stays
/// `Error::Unavailable` (a server going away does the same) but says to try `rediss://`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_to_a_tls_port_is_unavailable_and_says_rediss() {
    let server = RedisServer::start_tls(&TestCerts::generate(), TlsMode::ServerOnly);
    let url = format!("redis://{REDIS_TLS_USER}:{}@localhost:{}", server.password(), server.port());
    let (e, took) = first_lock_error(&url).await;
    assert!(matches!(&e, Error::Unavailable { message, .. } if message.contains("rediss://")), "{e}");
    assert!(took < FAST, "took {took:?}");
    assert_hidden(&e, server.password());
}

/// `rediss://` to a plain port: the server never answers the handshake; after the connect
/// timeout it is `Error::Unavailable`, suggesting `redis://`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_to_a_plain_port_is_unavailable_and_says_redis() {
    let server = RedisServer::start();
    let certs = TestCerts::generate();
    let url = format!("rediss://127.0.0.1:{}?ca={}", server.port(), certs.ca().display());
    let (e, _) = first_lock_error(&url).await;
    assert!(matches!(&e, Error::Unavailable { message, .. } if message.contains("redis://")), "{e}");
}

/// A caller-built `redis::Client` (credentials never in a URL) over TLS, with the redis
/// crate's own certificate API.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_built_tls_client_works() {
    let certs = TestCerts::generate();
    let server = RedisServer::start_tls(&certs, TlsMode::ClientCert);
    let addr = redis::ConnectionAddr::TcpTls {
        host: "localhost".into(),
        port: server.port(),
        insecure: false,
        tls_params: None,
    };
    let info = redis::IntoConnectionInfo::into_connection_info(addr).unwrap().set_redis_settings(
        redis::RedisConnectionInfo::default().set_username(REDIS_TLS_USER).set_password(server.password()),
    );
    let tls = redis::TlsCertificates {
        client_tls: Some(redis::ClientTlsConfig {
            client_cert: std::fs::read(certs.client_cert()).unwrap(),
            client_key: std::fs::read(certs.client_key()).unwrap(),
        }),
        root_cert: Some(std::fs::read(certs.ca()).unwrap()),
    };
    let backend = RedisBackend::from_client(redis::Client::build_with_tls(info, tls).unwrap(), Mode::Reentrant, "app:");
    assert_eq!(backend.describe(), format!("rediss://{REDIS_TLS_USER}@localhost:{}", server.port()));
    assert!(!format!("{backend:?}").contains(server.password()));
    let client = locksmith::Client::new(std::sync::Arc::new(backend), Duration::from_secs(5)).unwrap();
    let guard = client.lock("job").await.unwrap();
    let mut raw = common::raw_tls(&server, Some(&certs)).await;
    let ty: String = common::cmd(&mut raw, &["TYPE", "app:job"]).await;
    assert_eq!(ty, "hash", "reentrant layout under the prefix");
    assert!(guard.unlock().await.unwrap());
    client.close().await;
}
