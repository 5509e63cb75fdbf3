//! The shared contract suite on every SQL database and mode: PostgreSQL 15 and MariaDB 10.11
//! (one server each for the whole binary, started on first use) and a SQLite file. Every test
//! uses its own lock names. No SQL mode orders its waiters or reports them to `status`.

use std::sync::OnceLock;

use locksmith_core::conformance::UrlTarget;
use locksmith_testkit::{temp_dir_for_process, MySqlServer, PostgresServer, ProcessTempDir};

static PG: OnceLock<PostgresServer> = OnceLock::new();
static MY: OnceLock<MySqlServer> = OnceLock::new();

fn target(url: String) -> UrlTarget {
    UrlTarget::new(url, locksmith::backend).fifo(false).reports_waiters(false)
}

fn postgres(query: &str) -> UrlTarget {
    target(format!("{}{query}", PG.get_or_init(PostgresServer::start).url()))
}

fn mariadb(query: &str) -> UrlTarget {
    target(format!("{}{query}", MY.get_or_init(MySqlServer::start).url()))
}

fn sqlite() -> UrlTarget {
    // One database for the whole binary, in a dir removed once the test process is gone.
    static DIR: OnceLock<ProcessTempDir> = OnceLock::new();
    let dir = DIR.get_or_init(|| {
        temp_dir_for_process(std::path::Path::new(env!("CARGO_TARGET_TMPDIR")), "locksmith-sql-conformance-")
    });
    let path = dir.path().join("locks.db");
    target(format!("sqlite://{}", path.display()))
}

/// Lease table (the default mode).
mod postgres_lease {
    locksmith_core::conformance_suite!(super::postgres(""));
}

/// Session-scoped advisory locks.
mod postgres_advisory {
    locksmith_core::conformance_suite!(super::postgres("?mode=advisory"));
}

/// `SELECT … FOR UPDATE` in an open transaction.
mod postgres_row_lock {
    locksmith_core::conformance_suite!(super::postgres("?mode=row_lock"));
}

/// Lease table (the default mode).
mod mariadb_lease {
    locksmith_core::conformance_suite!(super::mariadb(""));
}

/// Session-scoped `GET_LOCK`.
mod mariadb_get_lock {
    locksmith_core::conformance_suite!(super::mariadb("?mode=get_lock"));
}

/// `SELECT … FOR UPDATE` in an open transaction.
mod mariadb_row_lock {
    locksmith_core::conformance_suite!(super::mariadb("?mode=row_lock"));
}

/// Lease table in one file shared by the tests of this binary.
mod sqlite_lease {
    locksmith_core::conformance_suite!(super::sqlite());
}
