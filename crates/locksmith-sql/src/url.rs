//! Backend URLs: `postgres://…`, `postgresql://…`, `mysql://…`, `sqlite://path`.

use std::str::FromStr;
use std::time::Duration;

use locksmith_core::driver::BackendUrl;
use locksmith_core::{Error, Result};
use sqlx::mysql::MySqlConnectOptions;
use sqlx::postgres::PgConnectOptions;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode};

/// Longest time SQLite waits for another process's write lock before a statement fails.
pub(crate) const SQLITE_BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// Pooled connections per backend unless `?pool_size=N` says otherwise.
pub(crate) const DEFAULT_POOL_SIZE: u32 = 5;
/// The largest `?pool_size`: beyond it one process would crowd out the database's other clients
/// (PostgreSQL's default `max_connections` is 100).
pub(crate) const MAX_POOL_SIZE: u32 = 100;

/// The database family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// PostgreSQL (`postgres://`, `postgresql://`).
    Postgres,
    /// MySQL or MariaDB (`mysql://`).
    MySql,
    /// SQLite, one file (`sqlite://path`).
    Sqlite,
}

impl Dialect {
    /// The name used in error messages: `postgres`, `mysql`, `sqlite`.
    pub fn label(self) -> &'static str {
        match self {
            Dialect::Postgres => "postgres",
            Dialect::MySql => "mysql",
            Dialect::Sqlite => "sqlite",
        }
    }
}

/// How locks are held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// The lease table (`?mode=lease`, the default on every database).
    Lease,
    /// PostgreSQL session advisory locks (`?mode=advisory`) on a dedicated connection per hold.
    Advisory,
    /// MySQL/MariaDB `GET_LOCK` (`?mode=get_lock`) on a dedicated connection per hold.
    GetLock,
    /// `SELECT … FOR UPDATE` on a row of `locksmith_rows` (`?mode=row_lock`, PostgreSQL and
    /// MySQL/MariaDB), held in an open transaction on a dedicated connection per hold.
    RowLock,
}

impl Mode {
    /// The URL spelling: `lease`, `advisory`, `get_lock`, `row_lock`.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Lease => "lease",
            Mode::Advisory => "advisory",
            Mode::GetLock => "get_lock",
            Mode::RowLock => "row_lock",
        }
    }
}

/// Parsed connection options of one of the three databases.
#[derive(Debug, Clone)]
pub(crate) enum Options {
    Postgres(PgConnectOptions),
    MySql(MySqlConnectOptions),
    Sqlite(SqliteConnectOptions),
}

/// A parsed URL. Its `Debug` prints only [`Config::describe`]: sqlx's options hold the password.
#[derive(Clone)]
pub(crate) struct Config {
    pub(crate) options: Options,
    pub(crate) mode: Mode,
    /// `?schema=external`: the tables are managed elsewhere (`locksmith sql init`, a migration
    /// tool); the driver never runs DDL and reports missing tables.
    pub(crate) schema_external: bool,
    /// `?pool_size=N`: pooled connections for statements (the lease mode, the fencing counter,
    /// status); PostgreSQL's NOTIFY listener and the connection-scoped modes' dedicated
    /// connections come on top.
    pub(crate) pool_size: u32,
    /// The URL without credentials.
    pub(crate) describe: String,
}

impl Config {
    pub(crate) fn parse(url: &str) -> Result<Self> {
        // The shared parser checks the scheme and the address and says what is wrong without
        // the password; the driver gets the URL as written, minus our own options.
        let parsed = BackendUrl::parse(url)?;
        let bad = |reason: String| parsed.invalid(reason);
        let (scheme, rest) = url.split_once("://").ok_or_else(|| bad("expected scheme://…".into()))?;
        let (base, query) = match rest.split_once('?') {
            Some((b, q)) => (b, Some(q)),
            None => (rest, None),
        };
        // Our own options are taken out of the query; the rest goes to the driver.
        let mut driver_query = Vec::new();
        let mut mode = Mode::Lease;
        let mut schema_external = false;
        let mut pool_size = DEFAULT_POOL_SIZE;
        for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            match k {
                "mode" => {
                    mode = match (v, scheme) {
                        ("lease", _) => Mode::Lease,
                        ("advisory", "postgres" | "postgresql") => Mode::Advisory,
                        ("get_lock", "mysql") => Mode::GetLock,
                        ("row_lock", "postgres" | "postgresql" | "mysql") => Mode::RowLock,
                        ("row_lock", "sqlite") => {
                            // A valid URL asking for something this database cannot do.
                            return Err(Error::InvalidArgument(
                                "sqlite: mode row_lock needs row locks (SELECT … FOR UPDATE), which SQLite does \
                                 not have (it locks the whole file): use the default lease mode"
                                    .into(),
                            ));
                        }
                        _ => {
                            return Err(bad(format!(
                                "unknown mode {v:?} for {scheme}://: lease (default) on every database, \
                                 advisory on postgres, get_lock on mysql, row_lock on postgres and mysql"
                            )))
                        }
                    }
                }
                "schema" => {
                    schema_external = match v {
                        "auto" => false,
                        "external" => true,
                        _ => return Err(bad(format!("unknown schema {v:?}: auto (default) or external"))),
                    }
                }
                "pool_size" => {
                    pool_size = v.parse().ok().filter(|n| (1..=MAX_POOL_SIZE).contains(n)).ok_or_else(|| {
                        bad(format!("pool_size must be a whole number from 1 to {MAX_POOL_SIZE}, not {v:?}"))
                    })?;
                }
                _ => driver_query.push(pair),
            }
        }
        let driver_url = match driver_query.is_empty() {
            true => format!("{scheme}://{base}"),
            false => format!("{scheme}://{base}?{}", driver_query.join("&")),
        };
        let describe = match mode {
            Mode::Lease => parsed.describe(&[]),
            other => parsed.describe(&[("mode", other.as_str())]),
        };
        let options = match scheme {
            "postgres" | "postgresql" => Options::Postgres(
                PgConnectOptions::from_str(&driver_url)
                    .map_err(|e| bad(format!("postgres: {e}")))?
                    .application_name("locksmith"),
            ),
            "mysql" => {
                Options::MySql(MySqlConnectOptions::from_str(&driver_url).map_err(|e| bad(format!("mysql: {e}")))?)
            }
            "sqlite" => {
                if base.is_empty() || base == ":memory:" {
                    return Err(bad("sqlite needs a file path: sqlite://path/to/locks.db".into()));
                }
                Options::Sqlite(
                    SqliteConnectOptions::from_str(&driver_url)
                        .map_err(|e| bad(format!("sqlite: {e}")))?
                        .create_if_missing(true)
                        .journal_mode(SqliteJournalMode::Wal)
                        .busy_timeout(SQLITE_BUSY_TIMEOUT),
                )
            }
            other => return Err(bad(format!("not a SQL scheme: {other:?}"))),
        };
        Ok(Self { options, mode, schema_external, pool_size, describe })
    }

    pub(crate) fn dialect(&self) -> Dialect {
        match self.options {
            Options::Postgres(_) => Dialect::Postgres,
            Options::MySql(_) => Dialect::MySql,
            Options::Sqlite(_) => Dialect::Sqlite,
        }
    }
}

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Config").field("url", &self.describe).field("pool_size", &self.pool_size).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_three_families_and_hides_passwords() {
        let c = Config::parse("postgres://me:secret@127.0.0.1:5432/db").map_err(|e| e.to_string());
        let c = c.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(c.dialect(), Dialect::Postgres);
        assert_eq!(c.describe, "postgres://me@127.0.0.1:5432/db");
        let c = Config::parse("mysql://root@localhost:3306/locks?mode=lease").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(c.dialect(), Dialect::MySql);
        let c = Config::parse("sqlite:///tmp/x.db").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(c.dialect(), Dialect::Sqlite);
        assert_eq!(c.describe, "sqlite:///tmp/x.db");
        let c = Config::parse("postgres://me:pw@h/db?mode=advisory").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((c.mode, c.describe.as_str()), (Mode::Advisory, "postgres://me@h:5432/db?mode=advisory"));
        let c = Config::parse("mysql://h/db?mode=get_lock").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(c.mode, Mode::GetLock);
        let c = Config::parse("mysql://h/db?mode=row_lock&schema=external").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            (c.mode, c.schema_external, c.describe.as_str()),
            (Mode::RowLock, true, "mysql://h:3306/db?mode=row_lock")
        );
        let c = Config::parse("postgres://h/db?mode=row_lock").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((c.mode, c.schema_external), (Mode::RowLock, false));
    }

    #[test]
    fn sqlite_row_lock_is_refused_naming_the_reason() {
        let err = Config::parse("sqlite:///tmp/x.db?mode=row_lock").map(|_| ());
        assert!(matches!(&err, Err(Error::InvalidArgument(m)) if m.contains("SQLite does not have")), "{err:?}");
    }

    #[test]
    fn refuses_bad_urls() {
        for bad in [
            "postgres://h/db?mode=get_lock",
            "mysql://h/db?mode=advisory",
            "sqlite://x?mode=advisory",
            "postgres://h/db?schema=maybe",
            "sqlite://",
            "sqlite://:memory:",
            "nothing",
            "mysql://h:notaport/db",
            "postgres://me:pa/ss@h/db",
        ] {
            assert!(matches!(Config::parse(bad), Err(Error::InvalidUrl { .. })), "{bad}");
        }
    }

    #[test]
    fn passwords_never_show_in_errors_or_debug() {
        for url in ["postgres://me:s3cret@h:x/db", "mysql://me:s3cret@h/db?mode=advisory", "postgres://me:s3/cret@h/db"]
        {
            let shown = Config::parse(url).map(|c| format!("{c:?}")).unwrap_or_else(|e| e.to_string());
            assert!(!shown.contains("s3cret") && !shown.contains("s3/cret"), "{url}: {shown}");
        }
        let c = Config::parse("postgres://me:s3cret@h/db").unwrap_or_else(|e| panic!("{e}"));
        assert!(!format!("{c:?}").contains("s3cret"));
    }

    #[test]
    fn pool_size_is_taken_from_the_query_and_bounded() {
        let size = |url: &str| Config::parse(url).map(|c| c.pool_size).map_err(|e| e.to_string());
        assert_eq!(size("postgres://me@127.0.0.1/db"), Ok(DEFAULT_POOL_SIZE));
        assert_eq!(size("postgres://me@127.0.0.1/db?pool_size=20&mode=advisory"), Ok(20));
        assert_eq!(size("sqlite:///tmp/x.db?pool_size=1"), Ok(1));
        for bad in ["0", "101", "-1", "five", ""] {
            let err = size(&format!("mysql://me@127.0.0.1/db?pool_size={bad}")).err().unwrap_or_default();
            assert!(err.contains("pool_size must be a whole number from 1 to 100"), "{bad:?}: {err}");
        }
    }
}
