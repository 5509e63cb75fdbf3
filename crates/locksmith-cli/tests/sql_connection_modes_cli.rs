//! The process properties of the contract (kill -9, SIGSTOP past the TTL, Ctrl-C while waiting,
//! exit codes) for `locksmith run` in the SQL connection-scoped modes (row locks and advisory
//! locks on PostgreSQL 15, row locks and `GET_LOCK` on MariaDB 10.11; one server per database
//! for the whole binary): a killed holder's connection ends with it, and a paused holder's
//! connection is ended by the database's idle timeout (the TTL) — its TCP connection alone would
//! keep the lock for as long as it is paused.

use std::sync::OnceLock;

use locksmith_core::conformance::UrlTarget;
use locksmith_testkit::{CliTarget, MySqlServer, PostgresServer};

static PG: OnceLock<PostgresServer> = OnceLock::new();
static MY: OnceLock<MySqlServer> = OnceLock::new();

const BIN: &str = env!("CARGO_BIN_EXE_locksmith");

fn target(url: String) -> CliTarget {
    CliTarget::new(BIN, UrlTarget::new(url, locksmith::backend).fifo(false).reports_waiters(false))
}

struct Mode;

impl Mode {
    fn postgres(mode: &str) -> CliTarget {
        target(format!("{}?mode={mode}", PG.get_or_init(PostgresServer::start).url()))
    }
    fn mariadb(mode: &str) -> CliTarget {
        target(format!("{}?mode={mode}", MY.get_or_init(MySqlServer::start).url()))
    }
}

mod postgres_row_lock {
    use super::*;
    locksmith_testkit::process_conformance_suite!(Mode::postgres("row_lock"));
}

mod postgres_advisory {
    use super::*;
    locksmith_testkit::process_conformance_suite!(Mode::postgres("advisory"));
}

mod mariadb_row_lock {
    use super::*;
    locksmith_testkit::process_conformance_suite!(Mode::mariadb("row_lock"));
}

mod mariadb_get_lock {
    use super::*;
    locksmith_testkit::process_conformance_suite!(Mode::mariadb("get_lock"));
}
