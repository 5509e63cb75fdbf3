//! A database created by the previous schema (`locksmith_locks`, `locksmith_fence`,
//! `locksmith_rows`; no `locksmith_holds`) is upgraded by `locksmith sql init` or by the first
//! use of a URL without `schema=external`: the one new table is created, the existing rows stay —
//! a lock held across the upgrade stays held, fencing counters continue — and a lock row written
//! the previous version's way keeps new readers, writers and permits out. With
//! `schema=external` the driver runs no DDL and says what to do.

use locksmith::{Error, LockOptions};
use locksmith_sql::{InitReport, SqlBackend, FENCE_TABLE, HOLDS_TABLE, LOCKS_TABLE, ROWS_TABLE};
use locksmith_testkit::{MySqlServer, PostgresServer};

/// The DDL of the previous version, as `locksmith sql schema` printed it.
const OLD_POSTGRES: &[&str] = &[
    "CREATE TABLE locksmith_locks (name TEXT PRIMARY KEY, owner TEXT NOT NULL, token BIGINT NOT NULL, \
     expires_at TIMESTAMPTZ NOT NULL)",
    "CREATE TABLE locksmith_fence (name TEXT PRIMARY KEY, token BIGINT NOT NULL)",
    "CREATE TABLE locksmith_rows (name TEXT PRIMARY KEY)",
];
const OLD_MYSQL: &[&str] = &[
    "CREATE TABLE locksmith_locks (\
     name VARCHAR(256) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL PRIMARY KEY, \
     owner VARCHAR(512) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL, \
     token BIGINT NOT NULL, expires_at DATETIME(6) NOT NULL) ENGINE=InnoDB",
    "CREATE TABLE locksmith_fence (\
     name VARCHAR(256) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL PRIMARY KEY, \
     token BIGINT NOT NULL) ENGINE=InnoDB",
    "CREATE TABLE locksmith_rows (\
     name VARCHAR(256) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL PRIMARY KEY) ENGINE=InnoDB",
];
const OLD_SQLITE: &[&str] = &[
    "CREATE TABLE locksmith_locks (name TEXT PRIMARY KEY NOT NULL, owner TEXT NOT NULL, \
     token INTEGER NOT NULL, expires_at INTEGER NOT NULL)",
    "CREATE TABLE locksmith_fence (name TEXT PRIMARY KEY NOT NULL, token INTEGER NOT NULL)",
];

/// The old schema with data: `counted` was granted 41 times, and `held` is held (token 7, 60 s
/// left) by a client of the previous version. The statements per database.
struct Old {
    ddl: &'static [&'static str],
    rows: &'static [&'static str],
    /// The previous version's acquire statement for `old-style` (a live row, token 1).
    old_client_lock: &'static [&'static str],
    drop_holds: &'static str,
}

const PG_OLD: Old = Old {
    ddl: OLD_POSTGRES,
    rows: &[
        "INSERT INTO locksmith_fence (name, token) VALUES ('counted', 41), ('held', 7)",
        "INSERT INTO locksmith_locks (name, owner, token, expires_at) \
         VALUES ('held', 'old-client', 7, clock_timestamp() + interval '60 seconds')",
    ],
    old_client_lock: &[
        "INSERT INTO locksmith_fence (name, token) VALUES ('old-style', 1)",
        "INSERT INTO locksmith_locks (name, owner, token, expires_at) \
         VALUES ('old-style', 'old-client', 1, clock_timestamp() + interval '60 seconds') \
         ON CONFLICT (name) DO NOTHING",
    ],
    drop_holds: "DROP TABLE locksmith_holds",
};

const MY_OLD: Old = Old {
    ddl: OLD_MYSQL,
    rows: &[
        "INSERT INTO locksmith_fence (name, token) VALUES ('counted', 41), ('held', 7)",
        "INSERT INTO locksmith_locks (name, owner, token, expires_at) \
         VALUES ('held', 'old-client', 7, NOW(6) + INTERVAL 60 SECOND)",
    ],
    old_client_lock: &[
        "INSERT INTO locksmith_fence (name, token) VALUES ('old-style', 1)",
        "INSERT INTO locksmith_locks (name, owner, token, expires_at) \
         VALUES ('old-style', 'old-client', 1, NOW(6) + INTERVAL 60 SECOND)",
    ],
    drop_holds: "DROP TABLE locksmith_holds",
};

const SQLITE_OLD: Old = Old {
    ddl: OLD_SQLITE,
    rows: &[
        "INSERT INTO locksmith_fence (name, token) VALUES ('counted', 41), ('held', 7)",
        "INSERT INTO locksmith_locks (name, owner, token, expires_at) VALUES ('held', 'old-client', 7, \
         CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER) + 60000)",
    ],
    old_client_lock: &[
        "INSERT INTO locksmith_fence (name, token) VALUES ('old-style', 1)",
        "INSERT INTO locksmith_locks (name, owner, token, expires_at) VALUES ('old-style', 'old-client', 1, \
         CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER) + 60000) ON CONFLICT (name) DO NOTHING",
    ],
    drop_holds: "DROP TABLE locksmith_holds",
};

/// Runs statements on the database, as another program (a migration tool, an old client) would.
#[derive(Clone)]
enum Admin {
    Postgres(sqlx::PgPool),
    MySql(sqlx::MySqlPool),
    Sqlite(sqlx::SqlitePool),
}

impl Admin {
    async fn run(&self, sql: &'static str) {
        let r = match self {
            Admin::Postgres(p) => sqlx::query(sql).execute(p).await.map(drop),
            Admin::MySql(p) => sqlx::query(sql).execute(p).await.map(drop),
            Admin::Sqlite(p) => sqlx::query(sql).execute(p).await.map(drop),
        };
        r.unwrap_or_else(|e| panic!("{sql}: {e}"));
    }
}

async fn init(url: &str) -> InitReport {
    let backend = SqlBackend::from_url(url).unwrap_or_else(|e| panic!("{e}"));
    backend.init_schema().await.unwrap_or_else(|e| panic!("init: {e}"))
}

async fn connect(url: &str) -> locksmith::Client {
    locksmith::connect(url).await.unwrap_or_else(|e| panic!("connect: {e}"))
}

/// The upgraded database works for every kind of hold, its counters continue, and the rows of
/// the previous version (on `held`) keep everyone out.
async fn works_and_keeps_the_old_rows(url: &str, first_token: u64, held: &[&str]) {
    let c = connect(url).await;
    let g = c.lock("counted").await.unwrap_or_else(|e| panic!("lock: {e}"));
    assert_eq!(g.token(), first_token, "the fencing counter continues across the upgrade");
    assert!(g.unlock().await.unwrap_or(false));
    let r = c.lock_with("counted", LockOptions::new().shared()).await.unwrap_or_else(|e| panic!("read: {e}"));
    assert_eq!(r.token(), first_token + 1);
    assert!(r.unlock().await.unwrap_or(false));
    for &name in held {
        let as_writer = c.try_lock(name).await.unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(as_writer.is_none(), "{name}: a lock held the previous version's way was granted again");
        let as_reader = c.try_lock_with(name, LockOptions::new().shared()).await.unwrap_or_else(|e| panic!("{e}"));
        assert!(as_reader.is_none(), "{name}: a reader got in beside the previous version's holder");
        let as_permit = c.try_lock_with(name, LockOptions::new().permits(2)).await;
        assert!(
            matches!(as_permit, Err(Error::InvalidArgument(_))),
            "{name}: a lock is not a semaphore: {as_permit:?}"
        );
    }
    let st = c.status(Some("held")).await.unwrap_or_else(|e| panic!("status: {e}"));
    let holder = st.first().and_then(|s| s.holder.clone()).unwrap_or_else(|| panic!("no holder in {st:?}"));
    assert_eq!((holder.owner.as_str(), holder.token), ("old-client", 7));
    c.close().await;
}

async fn upgrade(admin: Admin, url: &str, old: Old, old_tables: &[&'static str]) {
    for sql in old.ddl.iter().chain(old.rows) {
        admin.run(sql).await;
    }
    // schema=external: no DDL; the error names the new table and the command that creates it.
    let external = format!("{url}{}schema=external", if url.contains('?') { '&' } else { '?' });
    let c = connect(&external).await;
    let r = c.try_lock("counted").await;
    assert!(
        matches!(&r, Err(Error::Backend(m)) if m.contains(HOLDS_TABLE) && m.contains("locksmith sql init")),
        "{r:?}"
    );
    c.close().await;

    // `locksmith sql init`: creates exactly the new table, touches nothing else.
    let report = init(url).await;
    assert_eq!(report.created, vec![HOLDS_TABLE]);
    assert_eq!(report.existing, old_tables);
    works_and_keeps_the_old_rows(&external, 42, &["held"]).await;
    let again = init(url).await;
    assert!(again.created.is_empty(), "init is idempotent: {again:?}");

    // A client of the previous version locks on the upgraded database: its row counts too.
    for sql in old.old_client_lock {
        admin.run(sql).await;
    }

    // The first use without schema=external upgrades as well (here: after the table is dropped
    // again, as on a database that was never upgraded).
    admin.run(old.drop_holds).await;
    works_and_keeps_the_old_rows(url, 44, &["held", "old-style"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_an_old_schema_is_upgraded_by_init_and_by_first_use() {
    let server = PostgresServer::start();
    let pool = sqlx::PgPool::connect(&server.url()).await.unwrap_or_else(|e| panic!("{e}"));
    upgrade(Admin::Postgres(pool), &server.url(), PG_OLD, &[LOCKS_TABLE, FENCE_TABLE, ROWS_TABLE]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_an_old_schema_is_upgraded_by_init_and_by_first_use() {
    let server = MySqlServer::start();
    let pool = sqlx::MySqlPool::connect(&server.url()).await.unwrap_or_else(|e| panic!("{e}"));
    upgrade(Admin::MySql(pool), &server.url(), MY_OLD, &[LOCKS_TABLE, FENCE_TABLE, ROWS_TABLE]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_an_old_schema_is_upgraded_by_init_and_by_first_use() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let url = format!("sqlite://{}", dir.path().join("locks.db").display());
    let pool = sqlx::SqlitePool::connect(&format!("{url}?mode=rwc")).await.unwrap_or_else(|e| panic!("{e}"));
    upgrade(Admin::Sqlite(pool.clone()), &url, SQLITE_OLD, &[LOCKS_TABLE, FENCE_TABLE]).await;
    // Nothing but the new table was added to the file.
    let tables: Vec<String> = sqlx::query_scalar("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
        .fetch_all(&pool)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(tables, vec!["locksmith_fence", "locksmith_holds", "locksmith_locks"]);
}
