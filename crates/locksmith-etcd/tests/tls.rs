//! etcd with TLS (`--cert-file/--key-file`, `--client-cert-auth`) and authentication on
//! (`etcdctl auth enable`): the contract over TLS as a user; a wrong CA, a missing client
//! certificate and TLS/plain mismatches are configuration errors, a wrong password and a missing
//! user authentication errors, all said at once and never showing the password; an expired token
//! is renewed without the holder noticing.

use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use locksmith_core::conformance::UrlTarget;
use locksmith_core::driver::TlsFiles;
use locksmith_etcd::{Credentials, EtcdBackend, EtcdOptions};
use locksmith_testkit::{EtcdServer, TestCerts};

const PASSWORD: &str = "r00t-s3cret";
/// Refusals must come long before any lock timeout.
const FAST: Duration = Duration::from_secs(3);

static CERTS: OnceLock<TestCerts> = OnceLock::new();
static SECURED: OnceLock<EtcdServer> = OnceLock::new();

fn certs() -> &'static TestCerts {
    CERTS.get_or_init(TestCerts::generate)
}

/// Mutual TLS and authentication on, shared by the tests that only read its URL.
fn secured() -> &'static EtcdServer {
    SECURED.get_or_init(|| EtcdServer::builder().tls(certs(), true).auth("root", PASSWORD).start())
}

fn target() -> UrlTarget {
    UrlTarget::new(secured().url(), locksmith::backend)
}

/// The whole contract over mutual TLS as an authenticated user.
mod mutual_tls_as_a_user {
    locksmith_core::conformance_suite!(super::target());
}

/// The error of one `try_lock` on `url`, and how long it took.
async fn failure(url: &str) -> (locksmith::Error, Duration) {
    let started = Instant::now();
    let client = locksmith::connect_with_ttl(url, Duration::from_secs(5)).await.unwrap_or_else(|e| panic!("{e}"));
    let e = client.try_lock("tls").await.map(|_| ()).expect_err("the connection should have been refused");
    client.close().await;
    (e, started.elapsed())
}

fn hidden(e: &locksmith::Error, secret: &str) {
    assert!(!e.to_string().contains(secret) && !format!("{e:?}").contains(secret), "{e:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_password_is_an_auth_error_at_once() {
    let url = secured().url_with(Some(("root", "not-the-password")), None, true);
    let (e, took) = failure(&url).await;
    assert!(matches!(&e, locksmith::Error::Auth { message, .. } if message.contains("password")), "{e}");
    assert!(took < FAST, "took {took:?}");
    hidden(&e, "not-the-password");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_credentials_against_a_cluster_with_auth_is_an_auth_error() {
    let (e, took) = failure(&secured().url_with(None, None, true)).await;
    assert!(matches!(&e, locksmith::Error::Auth { message, .. } if message.contains("user:password@")), "{e}");
    assert!(took < FAST, "took {took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_ca_is_a_config_error_at_once() {
    let url = secured().url_with(Some(("root", PASSWORD)), Some(&certs().other_ca()), true);
    let (e, took) = failure(&url).await;
    assert!(matches!(&e, locksmith::Error::Config { message, .. } if message.contains("not trusted")), "{e}");
    assert!(took < FAST, "took {took:?}");
    hidden(&e, PASSWORD);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_client_certificate_is_a_config_error() {
    let (e, took) = failure(&secured().url_with(Some(("root", PASSWORD)), None, false)).await;
    assert!(matches!(&e, locksmith::Error::Config { message, .. } if message.contains("cert=")), "{e}");
    assert!(took < FAST, "took {took:?}");
}

/// TLS to a plain cluster is a configuration error suggesting `etcd://`; plain HTTP/2 to a TLS
/// cluster fails at once suggesting `etcds://`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_and_plain_mismatches_say_which_scheme_to_use() {
    let plain = EtcdServer::start();
    let (e, took) = failure(&format!("etcds://{}?ca={}", plain.endpoint(), certs().ca().display())).await;
    assert!(matches!(&e, locksmith::Error::Config { message, .. } if message.contains("etcd://")), "{e}");
    assert!(took < FAST, "took {took:?}");
    let tls = EtcdServer::start_tls(certs(), false);
    let (e, took) = failure(&format!("etcd://{}", tls.endpoint())).await;
    assert!(!matches!(e, locksmith::Error::Auth { .. }), "{e}");
    assert!(e.to_string().contains("etcds://"), "{e}");
    assert!(took < FAST, "took {took:?}");
}

/// A backend built in code, the CA, client key and password held in memory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn options_built_in_code_lock_over_mutual_tls() {
    let read = |p: std::path::PathBuf| std::fs::read(p).unwrap();
    let tls = TlsFiles {
        ca: Some(read(certs().ca())),
        identity: Some((read(certs().client_cert()), read(certs().client_key()))),
        paths: Vec::new(),
    };
    let options = EtcdOptions::new().tls(tls).credentials(Credentials::new("root", PASSWORD));
    let endpoint = format!("localhost:{}", secured().endpoint().rsplit_once(':').unwrap().1);
    let backend = Arc::new(EtcdBackend::with_options([endpoint], options).unwrap());
    assert!(!format!("{backend:?}").contains(PASSWORD));
    let client = locksmith::Client::new(backend, Duration::from_secs(5)).unwrap();
    let g = client.lock("from-options").await.unwrap();
    assert!(g.unlock().await.unwrap());
    client.close().await;
}

/// etcd's simple tokens expire (`--auth-token-ttl 1`): a holder renewing for several token
/// lifetimes keeps its lock, and releasing and locking again work — the driver authenticated
/// again when etcd refused the old token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_token_is_renewed_without_losing_the_lock() {
    let server = EtcdServer::builder()
        .tls(certs(), false)
        .args(["--auth-token", "simple", "--auth-token-ttl", "1"])
        .auth("root", PASSWORD)
        .start();
    let client = locksmith::connect_with_ttl(&server.url(), Duration::from_secs(2)).await.unwrap();
    let g = client.lock("long").await.unwrap();
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert!(g.is_held(), "the hold was lost while the token expired");
    assert!(g.unlock().await.unwrap());
    tokio::time::sleep(Duration::from_secs(2)).await;
    let g = client.lock("long").await.unwrap();
    assert!(g.unlock().await.unwrap());
    client.close().await;
}
