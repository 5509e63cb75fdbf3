//! TLS and authentication failures on the SQL backends, against real servers: a wrong CA, TLS
//! demanded from a server without it, and a wrong password are configuration / authentication
//! errors (exit 78 / 77), said at once and never retried as "unreachable", and no password shows
//! in them.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use locksmith_testkit::{MySqlServer, PostgresServer, TestCerts};

static CERTS: OnceLock<TestCerts> = OnceLock::new();
static PG_TLS: OnceLock<PostgresServer> = OnceLock::new();
static PG_PLAIN: OnceLock<PostgresServer> = OnceLock::new();
static MY_TLS: OnceLock<MySqlServer> = OnceLock::new();
static MY_PLAIN: OnceLock<MySqlServer> = OnceLock::new();

fn certs() -> &'static TestCerts {
    CERTS.get_or_init(TestCerts::generate)
}

fn pg_tls() -> &'static PostgresServer {
    PG_TLS.get_or_init(|| PostgresServer::start_tls(certs()))
}

fn my_tls() -> &'static MySqlServer {
    MY_TLS.get_or_init(|| MySqlServer::start_tls(certs()))
}

/// The error of one `try_lock` on `url`, and how long it took.
async fn failure(url: &str) -> (locksmith::Error, Duration) {
    let started = Instant::now();
    let client = locksmith::connect_with_ttl(url, Duration::from_secs(5)).await.unwrap_or_else(|e| panic!("{e}"));
    let e = client.try_lock("tls-failure").await.map(|_| ()).expect_err("the connection should have been refused");
    (e, started.elapsed())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_with_a_wrong_ca_is_a_configuration_error_at_once() {
    let url = format!(
        "postgres://postgres@localhost:{}/postgres?sslmode=verify-full&sslrootcert={}",
        pg_tls().port(),
        certs().other_ca().display()
    );
    let (e, took) = failure(&url).await;
    assert!(matches!(e, locksmith::Error::Config { .. }), "{e}");
    assert!(took < Duration::from_secs(3), "took {took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_sslmode_require_against_a_server_without_tls_is_a_configuration_error() {
    let plain = PG_PLAIN.get_or_init(PostgresServer::start);
    let (e, took) = failure(&format!("{}?sslmode=require", plain.url())).await;
    assert!(matches!(e, locksmith::Error::Config { .. }), "{e}");
    assert!(e.to_string().to_lowercase().contains("tls"), "{e}");
    assert!(took < Duration::from_secs(3), "took {took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_wrong_password_is_an_authentication_error_without_the_password() {
    let url = format!("postgres://app:not-the-password@localhost:{}/postgres?sslmode=require", pg_tls().port());
    let (e, took) = failure(&url).await;
    assert!(matches!(e, locksmith::Error::Auth { .. }), "{e}");
    assert!(!format!("{e} {e:?}").contains("not-the-password"), "{e:?}");
    assert!(took < Duration::from_secs(3), "took {took:?}");
    // The right password over TLS works.
    let ok = format!(
        "postgres://app:{}@localhost:{}/postgres?sslmode=verify-full&sslrootcert={}",
        PostgresServer::APP_PASSWORD,
        pg_tls().port(),
        certs().ca().display()
    );
    let c = locksmith::connect(&ok).await.unwrap_or_else(|e| panic!("{e}"));
    let g = c.lock("app-over-tls").await.unwrap_or_else(|e| panic!("{e}"));
    assert!(g.unlock().await.unwrap_or(false));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_wrong_ca_tls_required_and_wrong_password_say_what_is_wrong() {
    let port = my_tls().port();
    let wrong_ca = format!(
        "mysql://app:{}@localhost:{port}/locksmith?ssl-mode=VERIFY_CA&ssl-ca={}",
        MySqlServer::APP_PASSWORD,
        certs().other_ca().display()
    );
    let (e, _) = failure(&wrong_ca).await;
    assert!(matches!(e, locksmith::Error::Config { .. }), "{e}");
    let wrong_password = format!("mysql://app:not-the-password@localhost:{port}/locksmith?ssl-mode=REQUIRED");
    let (e, took) = failure(&wrong_password).await;
    assert!(matches!(e, locksmith::Error::Auth { .. }), "{e}");
    assert!(!format!("{e} {e:?}").contains("not-the-password"), "{e:?}");
    assert!(took < Duration::from_secs(3), "took {took:?}");
    let plain = MY_PLAIN.get_or_init(MySqlServer::start);
    let (e, _) = failure(&format!("{}?ssl-mode=REQUIRED", plain.url())).await;
    assert!(matches!(e, locksmith::Error::Config { .. }), "{e}");
}
