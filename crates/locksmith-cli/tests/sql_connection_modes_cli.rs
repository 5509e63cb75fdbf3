//! The process properties of the contract (kill -9, SIGSTOP past the TTL, Ctrl-C while waiting,
//! exit codes) for `locksmith run` in the SQL connection-scoped modes (row locks and advisory
//! locks on PostgreSQL 15, row locks and `GET_LOCK` on MariaDB 10.11; one server per database
//! for the whole binary): a killed holder's connection ends with it, and a paused holder's
//! connection is ended by the database's idle timeout (the TTL) — its TCP connection alone would
//! keep the lock for as long as it is paused.

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

use locksmith_core::conformance::{Caps, Target};
use locksmith_testkit::{MySqlServer, PostgresServer};

static PG: OnceLock<PostgresServer> = OnceLock::new();
static MY: OnceLock<MySqlServer> = OnceLock::new();

const BIN: &str = env!("CARGO_BIN_EXE_locksmith");

struct Mode {
    url: String,
}

impl Mode {
    fn postgres(mode: &str) -> Self {
        Self { url: format!("{}?mode={mode}", PG.get_or_init(PostgresServer::start).url()) }
    }
    fn mariadb(mode: &str) -> Self {
        Self { url: format!("{}?mode={mode}", MY.get_or_init(MySqlServer::start).url()) }
    }
}

#[async_trait::async_trait]
impl Target for Mode {
    fn url(&self) -> String {
        self.url.clone()
    }
    async fn client(&self, ttl: Duration) -> locksmith::Result<locksmith::Client> {
        locksmith::connect_with_ttl(&self.url, ttl).await
    }
    fn caps(&self) -> Caps {
        let mut c = Caps::default();
        c.fifo = false;
        c.reports_waiters = false;
        c
    }
    fn cli(&self) -> Option<PathBuf> {
        Some(BIN.into())
    }
}

mod postgres_row_lock {
    use super::*;
    locksmith_core::process_conformance_suite!(Mode::postgres("row_lock"));
}

mod postgres_advisory {
    use super::*;
    locksmith_core::process_conformance_suite!(Mode::postgres("advisory"));
}

mod mariadb_row_lock {
    use super::*;
    locksmith_core::process_conformance_suite!(Mode::mariadb("row_lock"));
}

mod mariadb_get_lock {
    use super::*;
    locksmith_core::process_conformance_suite!(Mode::mariadb("get_lock"));
}
