//! A [`SqlBackend`](crate::SqlBackend) built in code from sqlx's connect options: for passwords,
//! certificates and keys that do not belong in a URL (read from a vault, held in memory).

use locksmith_core::{Error, Result};
use sqlx::mysql::MySqlConnectOptions;
use sqlx::postgres::PgConnectOptions;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode};

use crate::url::{Config, Dialect, Mode, Options, DEFAULT_POOL_SIZE, MAX_POOL_SIZE, SQLITE_BUSY_TIMEOUT};

/// The database to connect to, as sqlx's own options (`PgConnectOptions::new().password(…)
/// .ssl_mode(…).ssl_root_cert_from_pem(…)`, and so on). Converts from each of them.
#[derive(Debug, Clone)]
pub enum ConnectOptions {
    /// PostgreSQL.
    Postgres(PgConnectOptions),
    /// MySQL or MariaDB.
    MySql(MySqlConnectOptions),
    /// SQLite.
    Sqlite(SqliteConnectOptions),
}

impl From<PgConnectOptions> for ConnectOptions {
    fn from(o: PgConnectOptions) -> Self {
        Self::Postgres(o)
    }
}

impl From<MySqlConnectOptions> for ConnectOptions {
    fn from(o: MySqlConnectOptions) -> Self {
        Self::MySql(o)
    }
}

impl From<SqliteConnectOptions> for ConnectOptions {
    fn from(o: SqliteConnectOptions) -> Self {
        Self::Sqlite(o)
    }
}

/// What the URL's own options say (`mode`, `schema`, `pool_size`), for a backend built in code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SqlSettings {
    mode: Mode,
    schema_external: bool,
    pool_size: u32,
}

impl Default for SqlSettings {
    fn default() -> Self {
        Self { mode: Mode::Lease, schema_external: false, pool_size: DEFAULT_POOL_SIZE }
    }
}

impl SqlSettings {
    /// The lease mode, tables created on first use, 5 pooled connections.
    pub fn new() -> Self {
        Self::default()
    }

    /// How locks are held (`?mode=`).
    #[must_use]
    pub fn mode(mut self, mode: Mode) -> Self {
        self.mode = mode;
        self
    }

    /// The tables are managed elsewhere (`?schema=external`): no DDL is run.
    #[must_use]
    pub fn external_schema(mut self) -> Self {
        self.schema_external = true;
        self
    }

    /// Pooled connections for statements (`?pool_size=`, 1 to 100).
    #[must_use]
    pub fn pool_size(mut self, n: u32) -> Self {
        self.pool_size = n;
        self
    }
}

/// The configuration of a backend built from `options` and `settings`, checked as a URL would
/// be; the description names user, host, port and database only.
pub(crate) fn config(options: ConnectOptions, settings: SqlSettings) -> Result<Config> {
    if !(1..=MAX_POOL_SIZE).contains(&settings.pool_size) {
        return Err(Error::InvalidArgument(format!(
            "sql: pool_size must be from 1 to {MAX_POOL_SIZE}, not {}",
            settings.pool_size
        )));
    }
    let (options, describe) = match options {
        ConnectOptions::Postgres(o) => {
            let shown = format!(
                "postgres://{}@{}:{}/{}",
                o.get_username(),
                o.get_host(),
                o.get_port(),
                o.get_database().unwrap_or_default()
            );
            let o = match o.get_application_name() {
                Some(_) => o,
                None => o.application_name("locksmith"),
            };
            (Options::Postgres(o), shown)
        }
        ConnectOptions::MySql(o) => {
            let shown = format!(
                "mysql://{}@{}:{}/{}",
                o.get_username(),
                o.get_host(),
                o.get_port(),
                o.get_database().unwrap_or_default()
            );
            (Options::MySql(o), shown)
        }
        ConnectOptions::Sqlite(o) => {
            let shown = format!("sqlite://{}", o.get_filename().display());
            // The lease mode needs what the URL form sets: concurrent readers and a busy wait.
            let o = o.create_if_missing(true).journal_mode(SqliteJournalMode::Wal).busy_timeout(SQLITE_BUSY_TIMEOUT);
            (Options::Sqlite(o), shown)
        }
    };
    let dialect = match options {
        Options::Postgres(_) => Dialect::Postgres,
        Options::MySql(_) => Dialect::MySql,
        Options::Sqlite(_) => Dialect::Sqlite,
    };
    check_mode(settings.mode, dialect)?;
    let describe = match settings.mode {
        Mode::Lease => describe,
        other => format!("{describe}?mode={}", other.as_str()),
    };
    Ok(Config {
        options,
        mode: settings.mode,
        schema_external: settings.schema_external,
        pool_size: settings.pool_size,
        describe,
    })
}

/// Refuses a mode the database cannot do.
fn check_mode(mode: Mode, dialect: Dialect) -> Result<()> {
    let fits = match mode {
        Mode::Lease => true,
        Mode::Advisory => dialect == Dialect::Postgres,
        Mode::GetLock => dialect == Dialect::MySql,
        Mode::RowLock => dialect != Dialect::Sqlite,
    };
    match fits {
        true => Ok(()),
        false => Err(Error::InvalidArgument(format!(
            "{}: mode {} is not available: lease on every database, advisory on postgres, get_lock on mysql, \
             row_lock on postgres and mysql",
            dialect.label(),
            mode.as_str()
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Settings are checked as the URL's options are, and the description has no password.
    #[test]
    fn settings_are_checked_and_the_password_stays_out() {
        let pg = || ConnectOptions::from(PgConnectOptions::new().host("db").username("app").password("s3cret"));
        let my = || ConnectOptions::from(MySqlConnectOptions::new().host("db").username("app").password("s3cret"));
        let sqlite = || ConnectOptions::from(SqliteConnectOptions::new().filename("/tmp/locks.db"));
        let c = config(pg(), SqlSettings::new().mode(Mode::RowLock)).unwrap();
        assert_eq!(c.describe, "postgres://app@db:5432/?mode=row_lock");
        assert!(!format!("{c:?}").contains("s3cret"));
        assert_eq!(config(sqlite(), SqlSettings::new()).unwrap().describe, "sqlite:///tmp/locks.db");
        for (options, mode) in
            [(pg(), Mode::GetLock), (my(), Mode::Advisory), (sqlite(), Mode::RowLock), (sqlite(), Mode::Advisory)]
        {
            assert!(
                matches!(config(options, SqlSettings::new().mode(mode)), Err(Error::InvalidArgument(_))),
                "{mode:?}"
            );
        }
        for n in [0, MAX_POOL_SIZE + 1] {
            assert!(matches!(config(my(), SqlSettings::new().pool_size(n)), Err(Error::InvalidArgument(_))));
        }
        assert!(
            config(my(), SqlSettings::new().mode(Mode::GetLock).external_schema().pool_size(1))
                .unwrap()
                .schema_external
        );
    }
}
