//! The contract over verified TLS on the SQL backends, against real servers: PostgreSQL 15
//! with `ssl = on` (`sslmode=verify-full`) and MariaDB 10.11 with a server certificate
//! (`ssl-mode=VERIFY_IDENTITY`, a user with a password), both from a test PKI (`TestCerts`).
//! What goes wrong is in `tls_errors.rs`.

use std::sync::OnceLock;

use locksmith_core::conformance::UrlTarget;
use locksmith_testkit::{MySqlServer, PostgresServer, TestCerts};

static CERTS: OnceLock<TestCerts> = OnceLock::new();
static PG_TLS: OnceLock<PostgresServer> = OnceLock::new();
static MY_TLS: OnceLock<MySqlServer> = OnceLock::new();

fn certs() -> &'static TestCerts {
    CERTS.get_or_init(TestCerts::generate)
}

fn pg_tls() -> &'static PostgresServer {
    PG_TLS.get_or_init(|| PostgresServer::start_tls(certs()))
}

fn my_tls() -> &'static MySqlServer {
    MY_TLS.get_or_init(|| MySqlServer::start_tls(certs()))
}

/// `postgres://postgres@localhost:PORT/postgres?sslmode=verify-full&sslrootcert=CA` (the
/// certificate names `localhost`, so the host name is verified).
fn pg_verified() -> String {
    format!(
        "postgres://postgres@localhost:{}/postgres?sslmode=verify-full&sslrootcert={}",
        pg_tls().port(),
        certs().ca().display()
    )
}

fn my_verified() -> String {
    format!(
        "mysql://app:{}@localhost:{}/locksmith?ssl-mode=VERIFY_IDENTITY&ssl-ca={}",
        MySqlServer::APP_PASSWORD,
        my_tls().port(),
        certs().ca().display()
    )
}

fn target(url: String) -> UrlTarget {
    UrlTarget::new(url, locksmith::backend).fifo(false).reports_waiters(false)
}

/// PostgreSQL over `sslmode=verify-full`.
mod postgres_verify_full {
    locksmith_core::conformance_suite!(super::target(super::pg_verified()));
}

/// MariaDB over `ssl-mode=VERIFY_IDENTITY`, as a user with a password.
mod mariadb_verify_identity {
    locksmith_core::conformance_suite!(super::target(super::my_verified()));
}

/// Backends built in code from sqlx's options, with the password and the CA held in memory
/// (never in a URL or a file path): verified TLS to PostgreSQL and MariaDB, locks exclude each
/// other, and neither password shows in what the backend prints.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backends_from_options_in_code_lock_over_verified_tls() {
    use locksmith_sql::sqlx::mysql::{MySqlConnectOptions, MySqlSslMode};
    use locksmith_sql::sqlx::postgres::{PgConnectOptions, PgSslMode};
    use locksmith_sql::{ConnectOptions, SqlBackend, SqlSettings};
    let ca = std::fs::read(certs().ca()).unwrap();
    let pg: ConnectOptions = PgConnectOptions::new()
        .host("localhost")
        .port(pg_tls().port())
        .username("app")
        .password(PostgresServer::APP_PASSWORD)
        .database("postgres")
        .ssl_mode(PgSslMode::VerifyFull)
        .ssl_root_cert_from_pem(ca.clone())
        .into();
    let my: ConnectOptions = MySqlConnectOptions::new()
        .host("localhost")
        .port(my_tls().port())
        .username("app")
        .password(MySqlServer::APP_PASSWORD)
        .database("locksmith")
        .ssl_mode(MySqlSslMode::VerifyIdentity)
        .ssl_ca_from_pem(ca)
        .into();
    for (options, secret) in [(pg, PostgresServer::APP_PASSWORD), (my, MySqlServer::APP_PASSWORD)] {
        let backend = || std::sync::Arc::new(SqlBackend::from_options(options.clone(), SqlSettings::new()).unwrap());
        let shown = format!("{} {:?}", locksmith_core::Backend::describe(&*backend()), backend());
        assert!(!shown.contains(secret), "{shown}");
        let a = locksmith::Client::new(backend(), std::time::Duration::from_secs(5)).unwrap();
        let b = locksmith::Client::new(backend(), std::time::Duration::from_secs(5)).unwrap();
        let g = a.lock("from-options").await.unwrap();
        assert!(b.try_lock("from-options").await.unwrap().is_none(), "{shown}: two holders");
        assert!(g.unlock().await.unwrap());
        let g = b.try_lock("from-options").await.unwrap().expect("free after unlock");
        assert!(g.unlock().await.unwrap());
        a.close().await;
        b.close().await;
    }
}
