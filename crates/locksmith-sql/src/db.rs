//! The lease table on each database: schema, the acquire transaction, owner-checked renewal and
//! release, and status. Every expiry is computed by the database from its own clock.

use std::future::Future;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use locksmith_core::{Error, Result};
use sqlx::mysql::{MySqlPool, MySqlPoolOptions};
use sqlx::postgres::{PgPool, PgPoolOptions};
use sqlx::sqlite::{SqlitePool, SqlitePoolOptions};

use crate::notify::{Registration, Wakeups};
use crate::schema;
use crate::url::{Config, Dialect, Options};

/// Bumps (creating at 1) the fencing counter of a name and returns it: one statement on
/// PostgreSQL; on MySQL the value comes back through the connection's `LAST_INSERT_ID()`, so
/// [`LAST_FENCE_MYSQL`] must run on the same connection.
pub(crate) const BUMP_FENCE_POSTGRES: &str = "INSERT INTO locksmith_fence (name, token) VALUES ($1, 1) \
     ON CONFLICT (name) DO UPDATE SET token = locksmith_fence.token + 1 RETURNING token";
/// See [`BUMP_FENCE_POSTGRES`].
pub(crate) const BUMP_FENCE_MYSQL: &str = "INSERT INTO locksmith_fence (name, token) VALUES (?, LAST_INSERT_ID(1)) \
     ON DUPLICATE KEY UPDATE token = LAST_INSERT_ID(token + 1)";
/// The token [`BUMP_FENCE_MYSQL`] left on its connection.
pub(crate) const LAST_FENCE_MYSQL: &str = "SELECT CAST(LAST_INSERT_ID() AS SIGNED)";

/// Time to open a connection (or wait for a free one) before the database counts as unreachable.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// Longest time one operation (a statement or the acquire transaction) may take.
const OP_TIMEOUT: Duration = Duration::from_secs(8);
/// Times an acquire transaction is retried at once after a deadlock or serialization failure.
const MAX_TXN_RETRIES: u32 = 8;

/// Milliseconds since the Unix epoch by SQLite's clock (`julianday('now')` has ms precision).
macro_rules! sqlite_now_ms {
    () => {
        "CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)"
    };
}

/// PostgreSQL: `$n` milliseconds from the server's clock.
macro_rules! pg_in_ms {
    ($n:literal) => {
        concat!("clock_timestamp() + ($", $n, "::float8 * interval '1 millisecond')")
    };
}

/// What a driver error means for the caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Class {
    Unavailable,
    Config,
    Auth,
    Other,
}

fn classify(e: &sqlx::Error) -> Class {
    match e {
        sqlx::Error::Tls(_) => Class::Config,
        // The TLS handshake runs inside the stream: a certificate that does not verify, or an
        // alert from the server, arrives as an I/O error whose cause is rustls's.
        sqlx::Error::Io(io) if is_tls_failure(io) => Class::Config,
        sqlx::Error::Io(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed
        | sqlx::Error::Protocol(_) => Class::Unavailable,
        sqlx::Error::Database(d) => {
            let code = d.code();
            let message = d.message().to_ascii_lowercase();
            match code.as_deref() {
                // SQLite busy/locked after the busy timeout; PostgreSQL shutting down or the
                // connection failing.
                Some("5" | "6" | "57P01" | "57P02" | "57P03" | "08006" | "08001") => Class::Unavailable,
                // PostgreSQL invalid_password / invalid_authorization_specification (pg_hba
                // refused the connection); MySQL/MariaDB access denied (SQLSTATE 28000).
                Some("28P01" | "28000") => Class::Auth,
                // MySQL: the account requires TLS (--require-secure-transport, REQUIRE SSL).
                _ if message.contains("secure transport") || message.contains("requires ssl") => Class::Config,
                // MySQL 42000 access denied to a database.
                Some("42000") if message.contains("access denied") => Class::Auth,
                _ => Class::Other,
            }
        }
        _ => Class::Other,
    }
}

/// Whether an I/O error is a failed TLS handshake (rustls's errors, as their text names them:
/// `invalid peer certificate: UnknownIssuer`, `received fatal alert: …`, `peer is incompatible`).
fn is_tls_failure(io: &std::io::Error) -> bool {
    let text = locksmith_core::error_chain(io).to_ascii_lowercase();
    ["invalid peer certificate", "received fatal alert", "peer is incompatible", "peer misbehaved", "certificate"]
        .iter()
        .any(|needle| text.contains(needle))
}

/// A connection outside the pool: a session-scoped lock lives exactly as long as it.
#[derive(Debug)]
pub(crate) enum Dedicated {
    Postgres(sqlx::PgConnection),
    MySql(sqlx::MySqlConnection),
}

#[derive(Debug, Clone)]
pub(crate) enum Pool {
    Postgres(PgPool),
    MySql(MySqlPool),
    Sqlite(SqlitePool),
}

/// The database of one backend: a pool created on first use, and the schema created once.
#[derive(Debug)]
pub(crate) struct Db {
    config: Config,
    pool: OnceLock<Pool>,
    schema: tokio::sync::OnceCell<()>,
    wakeups: Arc<Wakeups>,
    /// Dedicated connections that hold nothing, kept for reuse (see `conn`).
    idle: std::sync::Mutex<Vec<Dedicated>>,
}

impl Db {
    pub(crate) fn new(config: Config) -> Self {
        Self {
            config,
            pool: OnceLock::new(),
            schema: tokio::sync::OnceCell::new(),
            wakeups: Arc::default(),
            idle: std::sync::Mutex::default(),
        }
    }

    pub(crate) fn describe(&self) -> &str {
        &self.config.describe
    }

    pub(crate) fn mode(&self) -> crate::url::Mode {
        self.config.mode
    }

    fn idle(&self) -> std::sync::MutexGuard<'_, Vec<Dedicated>> {
        self.idle.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A kept dedicated connection (most recently used first), if any.
    pub(crate) fn take_idle(&self) -> Option<Dedicated> {
        self.idle().pop()
    }

    pub(crate) fn idle_len(&self) -> usize {
        self.idle().len()
    }

    /// Keeps `c` unless `max` are kept already (then it is closed).
    pub(crate) fn put_idle(&self, c: Dedicated, max: usize) {
        let mut idle = self.idle();
        if idle.len() < max {
            idle.push(c);
        }
    }

    /// A connection of its own (not from the pool), for a session-scoped lock.
    pub(crate) async fn connect_dedicated(&self) -> Result<Dedicated> {
        use sqlx::ConnectOptions;
        // The counter table must exist before the first grant.
        self.pool().await?;
        let r = match &self.config.options {
            Options::Postgres(o) => {
                tokio::time::timeout(CONNECT_TIMEOUT, o.connect()).await.map(|r| r.map(Dedicated::Postgres))
            }
            Options::MySql(o) => {
                tokio::time::timeout(CONNECT_TIMEOUT, o.connect()).await.map(|r| r.map(Dedicated::MySql))
            }
            Options::Sqlite(_) => {
                return Err(Error::Internal(
                    "sqlite: no session-scoped locks (refused when the URL was parsed)".into(),
                ));
            }
        };
        match r {
            Ok(r) => r.map_err(|e| self.map_err(e)),
            Err(_) => Err(Error::Unavailable {
                backend: self.describe().to_string(),
                message: format!("{}: no connection within {CONNECT_TIMEOUT:?}", self.dialect().label()),
            }),
        }
    }

    /// Runs one operation on a dedicated connection with the operation timeout.
    pub(crate) async fn on<T>(&self, f: impl Future<Output = Result<T, sqlx::Error>>) -> Result<T> {
        match tokio::time::timeout(OP_TIMEOUT, f).await {
            Ok(r) => r.map_err(|e| self.map_err(e)),
            Err(_) => Err(Error::Unavailable {
                backend: self.describe().to_string(),
                message: format!("{}: no answer within {OP_TIMEOUT:?}", self.dialect().label()),
            }),
        }
    }

    pub(crate) fn dialect(&self) -> Dialect {
        self.config.dialect()
    }

    /// Maps a driver error: connection trouble is [`Error::Unavailable`]; TLS trouble
    /// (verification failed, TLS required by one side only) is [`Error::Config`]; refused
    /// credentials or a connection the server's access rules reject are [`Error::Auth`]; the rest
    /// names the database.
    pub(crate) fn map_err(&self, e: sqlx::Error) -> Error {
        let label = self.dialect().label();
        let text = format!("{label}: {}", locksmith_core::error_chain(&e));
        let backend = self.describe().to_string();
        match classify(&e) {
            Class::Unavailable => Error::Unavailable { backend, message: text },
            Class::Config => Error::Config { backend, message: text },
            Class::Auth => Error::Auth { backend, message: text },
            Class::Other => Error::Backend(text),
        }
    }

    /// Runs `f` with the operation timeout, again after a deadlock, a serialization failure or
    /// SQLite's immediate `SQLITE_BUSY` (a read transaction that cannot upgrade, a journal-mode
    /// switch by another connection).
    pub(crate) async fn timed<T, F, Fut>(&self, f: F) -> Result<T>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<T, sqlx::Error>>,
    {
        let run = async {
            let mut retries = 0;
            loop {
                match f().await {
                    Err(e) if retries < MAX_TXN_RETRIES && retryable(&e) => {
                        retries += 1;
                        tokio::time::sleep(Duration::from_millis(rand::random_range(1..10) * u64::from(retries))).await;
                    }
                    r => return r,
                }
            }
        };
        match tokio::time::timeout(OP_TIMEOUT, run).await {
            Ok(r) => r.map_err(|e| self.map_err(e)),
            Err(_) => Err(Error::Unavailable {
                backend: self.describe().to_string(),
                message: format!("{}: no answer within {OP_TIMEOUT:?}", self.dialect().label()),
            }),
        }
    }

    fn raw_pool(&self) -> &Pool {
        self.pool.get_or_init(|| match &self.config.options {
            // The NOTIFY listener holds one pooled connection for good (sqlx's `PgListener`
            // takes it from the pool): it comes on top of `pool_size`, or a pool of one would
            // have none left for statements.
            Options::Postgres(o) => Pool::Postgres(
                PgPoolOptions::new()
                    .max_connections(self.config.pool_size + 1)
                    .acquire_timeout(CONNECT_TIMEOUT)
                    .idle_timeout(Duration::from_secs(60))
                    .connect_lazy_with(o.clone().options([("statement_timeout", "5s")])),
            ),
            Options::MySql(o) => Pool::MySql(
                MySqlPoolOptions::new()
                    .max_connections(self.config.pool_size)
                    .acquire_timeout(CONNECT_TIMEOUT)
                    .idle_timeout(Duration::from_secs(60))
                    .connect_lazy_with(o.clone()),
            ),
            Options::Sqlite(o) => Pool::Sqlite(
                SqlitePoolOptions::new()
                    .max_connections(self.config.pool_size)
                    .acquire_timeout(crate::url::SQLITE_BUSY_TIMEOUT + CONNECT_TIMEOUT)
                    .idle_timeout(Duration::from_secs(60))
                    .connect_lazy_with(o.clone()),
            ),
        })
    }

    /// The pool, with the schema in place: created on first use, or with `schema=external`
    /// checked to exist (a failed check is not remembered, so `locksmith sql init` fixes it
    /// without a restart).
    pub(crate) async fn pool(&self) -> Result<&Pool> {
        let pool = self.raw_pool();
        let first_use = self
            .schema
            .get_or_try_init(|| async move {
                if !self.config.schema_external {
                    return self.timed(move || schema::create(pool)).await;
                }
                let needed = schema::tables_of(self.mode());
                let missing = self.timed(move || schema::missing(pool, needed)).await?;
                // Only locksmith_holds missing: a schema from before read locks and semaphores.
                let upgrade = match missing.as_slice() {
                    [schema::HOLDS_TABLE] => {
                        " (locksmith_holds is new: read locks and semaphores; the other tables and their \
                         rows stay as they are)"
                    }
                    _ => "",
                };
                match missing.is_empty() {
                    true => Ok(()),
                    false => Err(Error::Backend(format!(
                        "{db}: missing table{s} {list}, and the URL says schema=external (the driver runs \
                         no DDL): create the tables with `locksmith sql init <url>`, or apply the DDL of \
                         `locksmith sql schema --db {db}` with your migration tool{upgrade}",
                        s = if missing.len() > 1 { "s" } else { "" },
                        list = missing.join(", "),
                        db = self.dialect().label(),
                    ))),
                }
            })
            .await;
        match first_use {
            Ok(()) => Ok(pool),
            Err(e) => Err(self.why_unavailable(e).await),
        }
    }

    /// The pool retries a refused connection until its acquire timeout and then says only "pool
    /// timed out": one direct connection attempt tells the real cause (connection refused, a
    /// wrong password, TLS required…), which also classifies it (unreachable or not).
    async fn why_unavailable(&self, e: Error) -> Error {
        use sqlx::ConnectOptions;
        if !matches!(&e, Error::Unavailable { message, .. } if message.contains("pool timed out")) {
            return e;
        }
        let probe = match &self.config.options {
            Options::Postgres(o) => tokio::time::timeout(CONNECT_TIMEOUT, o.connect()).await.map(|r| r.err()),
            Options::MySql(o) => tokio::time::timeout(CONNECT_TIMEOUT, o.connect()).await.map(|r| r.err()),
            Options::Sqlite(_) => return e,
        };
        match probe {
            Ok(Some(cause)) => self.map_err(cause),
            _ => e,
        }
    }

    /// Creates every table of the dialect that is missing (whatever the URL's `schema=`), and
    /// says which were created.
    pub(crate) async fn init_schema(&self) -> Result<schema::InitReport> {
        let pool = self.raw_pool();
        let all = schema::tables(self.dialect());
        let missing = self.timed(move || schema::missing(pool, all)).await?;
        self.timed(move || schema::create(pool)).await?;
        let (created, existing) = all.iter().partition(|t| missing.contains(t));
        Ok(schema::InitReport { created, existing })
    }

    /// Bumps the fencing counter of `name` in its own committed statement (pool connection)
    /// and returns the new value.
    pub(crate) async fn bump_fence(&self, name: &str) -> Result<u64> {
        let pool = self.pool().await?;
        let token = self
            .timed(move || async move {
                match pool {
                    Pool::Postgres(p) => {
                        sqlx::query_scalar::<_, i64>(BUMP_FENCE_POSTGRES).bind(name).fetch_one(p).await
                    }
                    Pool::MySql(p) => {
                        // LAST_INSERT_ID(expr) is per connection: both statements on one.
                        let mut c = p.acquire().await?;
                        sqlx::query(BUMP_FENCE_MYSQL).bind(name).execute(&mut *c).await?;
                        sqlx::query_scalar::<_, i64>(LAST_FENCE_MYSQL).fetch_one(&mut *c).await
                    }
                    Pool::Sqlite(p) => {
                        sqlx::query_scalar::<_, i64>(
                            "INSERT INTO locksmith_fence (name, token) VALUES (?1, 1) \
                             ON CONFLICT (name) DO UPDATE SET token = token + 1 RETURNING token",
                        )
                        .bind(name)
                        .fetch_one(p)
                        .await
                    }
                }
            })
            .await?;
        u64::try_from(token).map_err(|_| {
            Error::Protocol(format!("{}: fencing counter of {name:?} is negative ({token})", self.dialect().label()))
        })
    }

    /// Kills another connection of this database by its server-side id (PostgreSQL backend pid,
    /// MySQL connection id): ends a dropped acquisition blocked in a lock wait, which would
    /// otherwise stay queued (and briefly hold the lock) after its client went away.
    pub(crate) async fn kill_connection(&self, id: i64) -> Result<()> {
        let pool = self.raw_pool();
        self.timed(move || async move {
            match pool {
                // Only a backend that still exists: terminating one that already ended (its
                // client went away first) makes PostgreSQL send a WARNING, logged by sqlx.
                Pool::Postgres(p) => {
                    sqlx::query("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid = $1::int")
                        .bind(id)
                        .execute(p)
                        .await
                        .map(drop)
                }
                // KILL takes no placeholders; the id is a number we read from the server.
                Pool::MySql(p) => {
                    sqlx::query(sqlx::AssertSqlSafe(format!("KILL CONNECTION {id}"))).execute(p).await.map(drop)
                }
                Pool::Sqlite(_) => Ok(()),
            }
        })
        .await
    }

    /// A wake-up registration for a waiter on `name` (PostgreSQL only: LISTEN/NOTIFY), starting
    /// the backend's listener on first use.
    pub(crate) async fn register_waiter(&self, name: &str) -> Result<Option<Registration>> {
        match self.pool().await? {
            Pool::Postgres(p) => {
                self.wakeups.start(p);
                Ok(Some(self.wakeups.register(name)))
            }
            Pool::MySql(_) | Pool::Sqlite(_) => Ok(None),
        }
    }

    /// One round trip (and the schema on first use).
    pub(crate) async fn ping(&self) -> Result<()> {
        let pool = self.pool().await?;
        self.timed(move || async move {
            match pool {
                Pool::Postgres(p) => sqlx::query("SELECT 1").execute(p).await.map(drop),
                Pool::MySql(p) => sqlx::query("SELECT 1").execute(p).await.map(drop),
                Pool::Sqlite(p) => sqlx::query("SELECT 1").execute(p).await.map(drop),
            }
        })
        .await
    }
}

/// Worth retrying at once: deadlock, serialization failure, SQLite busy/locked without wait.
fn retryable(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Database(d) => matches!(d.code().as_deref(), Some("40001" | "40P01" | "5" | "6" | "517" | "262")),
        _ => false,
    }
}
