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
