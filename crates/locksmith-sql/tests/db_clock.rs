//! Expiry is decided by the database clock: a holder that stops renewing (here: a row written
//! straight into the lease table, as a crashed client would leave it) is taken over only after
//! its `expires_at` by the database clock, and a grant's `expires_at` is computed server-side.

use std::time::{Duration, Instant};

use locksmith::LockOptions;
use locksmith_testkit::{MySqlServer, PostgresServer};

const TTL: Duration = Duration::from_secs(2);

/// The foreign row (token 1000, expiring 1 s after `t0` by the database clock) is in place.
async fn check_takeover(url: &str, name: &str, t0: Instant) {
    let client = locksmith::connect_with_ttl(url, TTL).await.unwrap_or_else(|e| panic!("connect: {e}"));
    let busy = client.try_lock(name).await.unwrap_or_else(|e| panic!("try_lock: {e}"));
    assert!(busy.is_none(), "a live row (by the database clock) was taken over");
    let st = client.status(Some(name)).await.unwrap_or_else(|e| panic!("status: {e}"));
    let holder = st.first().and_then(|s| s.holder.clone()).unwrap_or_else(|| panic!("no holder in {st:?}"));
    assert_eq!((holder.owner.as_str(), holder.token), ("crashed-client", 1000));
    assert!(holder.ttl_left.is_some_and(|t| t <= Duration::from_secs(1)), "ttl_left {:?}", holder.ttl_left);
    let g = client
        .lock_with(name, LockOptions::new().timeout(Duration::from_secs(5)))
        .await
        .unwrap_or_else(|e| panic!("lock after expiry: {e}"));
    let waited = t0.elapsed();
    assert!(waited >= Duration::from_millis(950), "taken over after {waited:?}, before the 1 s lease ended");
    assert!(waited < Duration::from_millis(1900), "took {waited:?}: the waiter did not wake at the expiry");
    assert_eq!(g.token(), 1001, "the counter row continues from the foreign token");
    let st = client.status(Some(name)).await.unwrap_or_else(|e| panic!("status: {e}"));
    let ours = st.first().and_then(|s| s.holder.clone()).unwrap_or_else(|| panic!("no holder in {st:?}"));
    assert_eq!(ours.token, 1001);
    assert!(ours.ttl_left.is_some_and(|t| t > Duration::from_millis(1000) && t <= TTL), "ttl_left {:?}", ours.ttl_left);
    assert!(g.unlock().await.unwrap_or(false));
    client.close().await;
}

/// Creates the tables through a client (status on a fresh database creates them).
async fn schema(url: &str) {
    let c = locksmith::connect(url).await.unwrap_or_else(|e| panic!("connect: {e}"));
    c.status(Some("schema")).await.unwrap_or_else(|e| panic!("status: {e}"));
    c.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_expiry_is_by_the_database_clock() {
    let server = PostgresServer::start();
    let url = server.url();
    schema(&url).await;
    let pool = sqlx::PgPool::connect(&url).await.unwrap_or_else(|e| panic!("{e}"));
    sqlx::query("INSERT INTO locksmith_fence (name, token) VALUES ('db-clock', 1000)")
        .execute(&pool)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let t0 = Instant::now();
    sqlx::query(
        "INSERT INTO locksmith_locks (name, owner, token, expires_at) \
         VALUES ('db-clock', 'crashed-client', 1000, clock_timestamp() + interval '1 second')",
    )
    .execute(&pool)
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    check_takeover(&url, "db-clock", t0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_expiry_is_by_the_database_clock() {
    let server = MySqlServer::start();
    let url = server.url();
    schema(&url).await;
    let pool = sqlx::MySqlPool::connect(&url).await.unwrap_or_else(|e| panic!("{e}"));
    sqlx::query("INSERT INTO locksmith_fence (name, token) VALUES ('db-clock', 1000)")
        .execute(&pool)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let t0 = Instant::now();
    sqlx::query(
        "INSERT INTO locksmith_locks (name, owner, token, expires_at) \
         VALUES ('db-clock', 'crashed-client', 1000, NOW(6) + INTERVAL 1 SECOND)",
    )
    .execute(&pool)
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    check_takeover(&url, "db-clock", t0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_expiry_is_by_the_database_clock() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let url = format!("sqlite://{}", dir.path().join("locks.db").display());
    schema(&url).await;
    let pool = sqlx::SqlitePool::connect(&url).await.unwrap_or_else(|e| panic!("{e}"));
    sqlx::query("INSERT INTO locksmith_fence (name, token) VALUES ('db-clock', 1000)")
        .execute(&pool)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let t0 = Instant::now();
    sqlx::query(
        "INSERT INTO locksmith_locks (name, owner, token, expires_at) VALUES ('db-clock', 'crashed-client', 1000, \
         CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER) + 1000)",
    )
    .execute(&pool)
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    check_takeover(&url, "db-clock", t0).await;
}

/// An unreachable database is reported as `Unavailable`, quickly, naming the database.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_database_is_unavailable() {
    let port = locksmith_testkit::free_port();
    for url in [format!("postgres://postgres@127.0.0.1:{port}/postgres"), format!("mysql://x@127.0.0.1:{port}/x")] {
        let started = Instant::now();
        let c = locksmith::connect(&url).await.unwrap_or_else(|e| panic!("connect is lazy: {e}"));
        let r = c.try_lock("x").await;
        assert!(matches!(&r, Err(locksmith::Error::Unavailable { .. })), "{url}: {r:?}");
        assert!(started.elapsed() < Duration::from_secs(5), "{url}: took {:?}", started.elapsed());
        c.close().await;
    }
}
