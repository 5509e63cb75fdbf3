//! The schema: the one place its DDL is written. The driver runs it at first use (unless the URL
//! says `schema=external`), `locksmith sql init` runs it on demand, and `locksmith sql schema`
//! prints it for migration tools.

use crate::db::Pool;
use crate::url::{Dialect, Mode};

/// The lease table: one row per held lock (lease mode).
pub const LOCKS_TABLE: &str = "locksmith_locks";
/// The fencing counter per lock, never deleted (every mode).
pub const FENCE_TABLE: &str = "locksmith_fence";
/// One row per lock name for `SELECT … FOR UPDATE` (row-lock mode; not on SQLite).
pub const ROWS_TABLE: &str = "locksmith_rows";
/// Lease mode beyond the mutex: one row per read hold, per semaphore permit and per waiting
/// writer's announcement, keyed by `(name, owner)`; each row has its own lease.
pub const HOLDS_TABLE: &str = "locksmith_holds";

/// `locksmith_holds.kind` of a read (shared) hold.
pub(crate) const KIND_SHARED: &str = "shared";
/// `locksmith_holds.kind` of a semaphore permit (`permits` = the semaphore's N).
pub(crate) const KIND_PERMIT: &str = "permit";
/// `locksmith_holds.kind` of a waiting writer's announcement (not a hold; token 0): new
/// readers wait while one is live.
pub(crate) const KIND_WRITER_WAITING: &str = "writer-waiting";

const POSTGRES: &[&str] = &[
    "CREATE TABLE IF NOT EXISTS locksmith_locks (name TEXT PRIMARY KEY, owner TEXT NOT NULL, \
     token BIGINT NOT NULL, expires_at TIMESTAMPTZ NOT NULL)",
    "CREATE TABLE IF NOT EXISTS locksmith_fence (name TEXT PRIMARY KEY, token BIGINT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS locksmith_rows (name TEXT PRIMARY KEY)",
    "CREATE TABLE IF NOT EXISTS locksmith_holds (name TEXT NOT NULL, owner TEXT NOT NULL, \
     token BIGINT NOT NULL, kind TEXT NOT NULL CHECK (kind IN ('shared', 'permit', 'writer-waiting')), \
     permits INTEGER, expires_at TIMESTAMPTZ NOT NULL, PRIMARY KEY (name, owner))",
];

// Binary collation: lock names compare byte for byte, as on every other backend.
const MYSQL: &[&str] = &[
    "CREATE TABLE IF NOT EXISTS locksmith_locks (\
     name VARCHAR(256) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL PRIMARY KEY, \
     owner VARCHAR(512) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL, \
     token BIGINT NOT NULL, expires_at DATETIME(6) NOT NULL) ENGINE=InnoDB",
    "CREATE TABLE IF NOT EXISTS locksmith_fence (\
     name VARCHAR(256) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL PRIMARY KEY, \
     token BIGINT NOT NULL) ENGINE=InnoDB",
    "CREATE TABLE IF NOT EXISTS locksmith_rows (\
     name VARCHAR(256) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL PRIMARY KEY) ENGINE=InnoDB",
    // The key is 3,072 bytes at most (utf8mb4: 4 × (256 + 512)), InnoDB's limit with the
    // DYNAMIC row format (the default of MariaDB ≥ 10.2 and MySQL ≥ 5.7).
    "CREATE TABLE IF NOT EXISTS locksmith_holds (\
     name VARCHAR(256) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL, \
     owner VARCHAR(512) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL, \
     token BIGINT NOT NULL, kind VARCHAR(16) CHARACTER SET ascii COLLATE ascii_bin NOT NULL \
     CHECK (kind IN ('shared', 'permit', 'writer-waiting')), \
     permits INT NULL, expires_at DATETIME(6) NOT NULL, PRIMARY KEY (name, owner)) \
     ENGINE=InnoDB ROW_FORMAT=DYNAMIC",
];

const SQLITE: &[&str] = &[
    "CREATE TABLE IF NOT EXISTS locksmith_locks (name TEXT PRIMARY KEY NOT NULL, owner TEXT NOT NULL, \
     token INTEGER NOT NULL, expires_at INTEGER NOT NULL)",
    "CREATE TABLE IF NOT EXISTS locksmith_fence (name TEXT PRIMARY KEY NOT NULL, token INTEGER NOT NULL)",
    "CREATE TABLE IF NOT EXISTS locksmith_holds (name TEXT NOT NULL, owner TEXT NOT NULL, \
     token INTEGER NOT NULL, kind TEXT NOT NULL CHECK (kind IN ('shared', 'permit', 'writer-waiting')), \
     permits INTEGER, expires_at INTEGER NOT NULL, PRIMARY KEY (name, owner))",
];

/// The DDL of every table locksmith uses on `dialect`, one statement per item, idempotent
/// (`CREATE TABLE IF NOT EXISTS`). Teams that manage migrations apply these themselves and
/// connect with `?schema=external`.
///
/// **Upgrading** a database created before read locks and semaphores (no `locksmith_holds`):
/// the only change is that new table — the existing tables and their rows (held locks, fencing
/// counters) are left exactly as they are. `locksmith sql init URL` (or the first use of a URL
/// without `schema=external`) creates it; a migration tool applies the `locksmith_holds`
/// statement of this list. Nothing else is needed, and clients of the previous version keep
/// working on the upgraded database for plain locks.
///
/// ```
/// use locksmith_sql::{schema, Dialect, HOLDS_TABLE};
/// let ddl = schema(Dialect::Postgres);
/// assert!(ddl.iter().any(|s| s.contains("locksmith_fence")));
/// assert!(ddl.iter().any(|s| s.contains(HOLDS_TABLE)));
/// assert_eq!(schema(Dialect::Sqlite).len(), 3, "SQLite has no row-lock mode, so no locksmith_rows");
/// ```
pub fn schema(dialect: Dialect) -> &'static [&'static str] {
    match dialect {
        Dialect::Postgres => POSTGRES,
        Dialect::MySql => MYSQL,
        Dialect::Sqlite => SQLITE,
    }
}

/// Every table of `dialect`, in the order of [`schema`].
pub(crate) fn tables(dialect: Dialect) -> &'static [&'static str] {
    match dialect {
        Dialect::Postgres | Dialect::MySql => &[LOCKS_TABLE, FENCE_TABLE, ROWS_TABLE, HOLDS_TABLE],
        Dialect::Sqlite => &[LOCKS_TABLE, FENCE_TABLE, HOLDS_TABLE],
    }
}

/// The tables a mode reads and writes.
pub(crate) fn tables_of(mode: Mode) -> &'static [&'static str] {
    match mode {
        // A database without locksmith_holds (created before read locks and semaphores) is
        // refused with `schema=external` rather than half-served: a writer must see readers.
        Mode::Lease => &[LOCKS_TABLE, FENCE_TABLE, HOLDS_TABLE],
        Mode::Advisory | Mode::GetLock => &[FENCE_TABLE],
        Mode::RowLock => &[FENCE_TABLE, ROWS_TABLE],
    }
}

/// What [`SqlBackend::init_schema`](crate::SqlBackend::init_schema) did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InitReport {
    /// Tables that were missing and are now created.
    pub created: Vec<&'static str>,
    /// Tables that were already there (left untouched).
    pub existing: Vec<&'static str>,
}

/// Runs the DDL. On PostgreSQL under a transaction-scoped advisory lock: concurrent
/// `CREATE TABLE IF NOT EXISTS` there can fail with a unique violation.
pub(crate) async fn create(pool: &Pool) -> Result<(), sqlx::Error> {
    match pool {
        Pool::Postgres(p) => {
            let mut tx = p.begin().await?;
            sqlx::query("SELECT pg_advisory_xact_lock(7531753175317531)").execute(&mut *tx).await?;
            for ddl in POSTGRES {
                sqlx::query(*ddl).execute(&mut *tx).await?;
            }
            tx.commit().await
        }
        Pool::MySql(p) => {
            for ddl in MYSQL {
                sqlx::query(*ddl).execute(p).await?;
            }
            Ok(())
        }
        Pool::Sqlite(p) => {
            for ddl in SQLITE {
                sqlx::query(*ddl).execute(p).await?;
            }
            Ok(())
        }
    }
}

/// Which of `tables` do not exist (in the connection's schema / database / file).
pub(crate) async fn missing(pool: &Pool, tables: &[&'static str]) -> Result<Vec<&'static str>, sqlx::Error> {
    let mut out = Vec::new();
    for &t in tables {
        let exists = match pool {
            // to_regclass resolves through search_path, as the driver's statements do.
            Pool::Postgres(p) => {
                sqlx::query_scalar::<_, bool>("SELECT to_regclass($1) IS NOT NULL").bind(t).fetch_one(p).await?
            }
            Pool::MySql(p) => {
                sqlx::query_scalar::<_, i64>(
                    "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = ?",
                )
                .bind(t)
                .fetch_one(p)
                .await?
                    > 0
            }
            Pool::Sqlite(p) => {
                sqlx::query_scalar::<_, i64>("SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = ?1")
                    .bind(t)
                    .fetch_one(p)
                    .await?
                    > 0
            }
        };
        if !exists {
            out.push(t);
        }
    }
    Ok(out)
}
