//! The backend: URL, the shared pool, sessions and status.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use locksmith_core::{Backend, Error, HoldMode, HolderStatus, LockName, LockStatus, Result, Session};

use crate::db::Db;
use crate::schema::InitReport;
use crate::scoped::ScopedSession;
use crate::session::{split_column, SqlSession};
use crate::url::{Config, Dialect, Mode};

/// A SQL database as a locksmith backend (`postgres://`, `postgresql://`, `mysql://`,
/// `sqlite://path`). Cheap to clone; clones share one connection pool.
#[derive(Debug, Clone)]
pub struct SqlBackend {
    db: Arc<Db>,
}

impl SqlBackend {
    /// Parses the URL. Does no I/O and needs no runtime: the pool is created on first use, and
    /// an unreachable database shows then as [`Error::Unavailable`] (after about 3 s).
    ///
    /// - `postgres://user[:pass]@host:port/db`, `postgresql://…` (driver options such as
    ///   `sslmode` pass through);
    /// - `mysql://user[:pass]@host:port/db` (MySQL or MariaDB);
    /// - `sqlite://path/to/file.db` (created if missing, WAL journal, 5 s busy timeout).
    ///
    /// Options of our own in the query (the rest pass to the database driver):
    /// - `mode=lease` (default, every database), `mode=advisory` (PostgreSQL),
    ///   `mode=get_lock` (MySQL/MariaDB), `mode=row_lock` (PostgreSQL, MySQL/MariaDB): see the
    ///   [crate docs](crate);
    /// - `schema=auto` (default: the tables are created at first use) or `schema=external`
    ///   (the driver runs no DDL; missing tables are an error naming `locksmith sql init`).
    ///
    /// ```
    /// use locksmith_core::Backend;
    /// let b = locksmith_sql::SqlBackend::from_url("postgres://me:secret@127.0.0.1:5432/locks")?;
    /// assert_eq!(b.describe(), "postgres://me@127.0.0.1:5432/locks");
    /// assert_eq!(b.dialect(), locksmith_sql::Dialect::Postgres);
    /// # Ok::<(), locksmith_core::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidUrl`] for a malformed URL, a non-SQL scheme or an unknown mode;
    /// [`Error::InvalidArgument`] for `mode=row_lock` on SQLite (it has no row locks).
    pub fn from_url(url: &str) -> Result<Self> {
        Ok(Self { db: Arc::new(Db::new(Config::parse(url)?)) })
    }

    /// A backend from sqlx's connect options built in code (a password from a vault, a CA or
    /// client key held in memory) and the settings a URL's own options would give. No I/O.
    ///
    /// ```
    /// use locksmith_core::Backend;
    /// use locksmith_sql::{Mode, SqlBackend, SqlSettings};
    /// use sqlx::postgres::{PgConnectOptions, PgSslMode};
    ///
    /// # fn password_from_the_vault() -> String { "s3cret".into() }
    /// let options = PgConnectOptions::new()
    ///     .host("db.internal")
    ///     .username("app")
    ///     .password(&password_from_the_vault())
    ///     .database("app")
    ///     .ssl_mode(PgSslMode::VerifyFull);
    /// let b = SqlBackend::from_options(options, SqlSettings::new().mode(Mode::Advisory))?;
    /// assert_eq!(b.describe(), "postgres://app@db.internal:5432/app?mode=advisory");
    /// # Ok::<(), locksmith_core::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a mode the database does not have or a pool size outside
    /// 1..=100.
    pub fn from_options(options: impl Into<crate::ConnectOptions>, settings: crate::SqlSettings) -> Result<Self> {
        Ok(Self { db: Arc::new(Db::new(crate::options::config(options.into(), settings)?)) })
    }

    /// Creates every missing table of this database's [`schema`](crate::schema()) (all modes'
    /// tables, whatever this URL's mode and `schema=` say) and reports which were created and
    /// which were already there. Idempotent. What `locksmith sql init URL` runs.
    ///
    /// # Cancel safety
    /// Cancel safe: each statement is idempotent; run it again.
    ///
    /// # Errors
    /// [`Error::Unavailable`] if the database cannot be reached; [`Error::Backend`] if the DDL
    /// is refused (e.g. the user may not create tables).
    pub async fn init_schema(&self) -> Result<InitReport> {
        self.db.init_schema().await
    }

    /// How locks are held (lease table, advisory lock, `GET_LOCK`).
    pub fn mode(&self) -> Mode {
        self.db.mode()
    }

    /// Which database family this is.
    pub fn dialect(&self) -> Dialect {
        self.db.dialect()
    }
}

/// What a connection-scoped mode offers: the mutex, and read locks on PostgreSQL advisory locks
/// (a semaphore would need N advisory keys and a fair way to pick one; `GET_LOCK` has no shared
/// mode; a waiting `FOR UPDATE` does not stop new `FOR SHARE` lockers, so writers could starve).
pub(crate) fn scoped_supports(mode: Mode, hold: HoldMode) -> bool {
    matches!((mode, hold), (_, HoldMode::Exclusive) | (Mode::Advisory, HoldMode::Shared))
}

#[async_trait]
impl Backend for SqlBackend {
    fn describe(&self) -> String {
        self.db.describe().to_string()
    }

    fn scheme(&self) -> &'static str {
        self.db.dialect().label()
    }

    /// Opens a session after one round trip (creating the tables on first use), so an
    /// unreachable database is reported at once.
    ///
    /// # Cancel safety
    /// Cancel safe: a session creates no rows.
    async fn open_session(&self, ttl: Duration) -> Result<Box<dyn Session>> {
        self.db.ping().await?;
        match self.db.mode() {
            Mode::Lease => Ok(Box::new(SqlSession::new(self.db.clone(), ttl))),
            Mode::Advisory | Mode::GetLock | Mode::RowLock => Ok(Box::new(ScopedSession::new(self.db.clone(), ttl))),
        }
    }

    /// Read locks and semaphores in the lease mode, on every database; read locks also in
    /// PostgreSQL's advisory mode (`pg_advisory_lock_shared`). `GET_LOCK` and row locks: only
    /// the mutex (see the [crate docs](crate)).
    fn supports(&self, mode: HoldMode) -> bool {
        match self.db.mode() {
            Mode::Lease => matches!(mode, HoldMode::Exclusive | HoldMode::Shared | HoldMode::Permit(_)),
            scoped => scoped_supports(scoped, mode),
        }
    }

    /// One lock, or every lock that was ever granted (`name == None`, from the counter table),
    /// with its live holders (by the database clock): the exclusive holder, or every reader or
    /// permit holder (with the semaphore's number of permits), and the last token. Waiters are
    /// not known (waiting writers' announcements are not holds and are not shown).
    ///
    /// # Cancel safety
    /// Cancel safe: read only.
    async fn status(&self, name: Option<&LockName>) -> Result<Vec<LockStatus>> {
        let rows = self.db.status(name.map(LockName::as_str)).await?;
        let mut out = Vec::with_capacity(rows.len());
        for r in rows {
            let last = u64::try_from(r.last_token).map_err(|_| {
                Error::Protocol(format!("{}: negative fencing counter for {:?}", self.db.dialect().label(), r.name))
            })?;
            let holders = r
                .holders
                .into_iter()
                .map(|h| {
                    let (session, owner) = split_column(&h.column);
                    let ttl_left = Duration::from_millis(u64::try_from(h.left_ms).unwrap_or(0));
                    HolderStatus::new(session, owner, u64::try_from(h.token).unwrap_or(0), ttl_left)
                        .with_mode(h.mode, None)
                })
                .collect();
            // Waiters poll (or queue in the database's lock manager): none is visible here.
            out.push(
                LockStatus::new(r.name, None, 0, last).with_holders(holders).with_permits(r.permits).waiters_unknown(),
            );
        }
        if out.is_empty() {
            if let Some(name) = name {
                out.push(LockStatus::new(name.to_string(), None, 0, 0).waiters_unknown());
            }
        }
        Ok(out)
    }
}
