//! Expiry is decided by the database clock: a holder that stops renewing (here: a row written
//! straight into the lease table, as a crashed client would leave it) is taken over only after
//! its `expires_at` by the database clock, and a grant's `expires_at` is computed server-side.
//! The same for a semaphore's permits in `locksmith_holds`: a permit whose lease ended by the
//! database clock is not counted, and the next acquisition deletes it.

use std::time::{Duration, Instant};

use locksmith::{HoldMode, LockOptions};
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

/// The semaphore `name` of 1 permit has two foreign permit rows: token 1000, expiring 1 s after
/// `t0` by the database clock, and token 999, which expired an hour ago. `count` tells how many
/// rows of `name` are left in locksmith_holds.
async fn check_permit_takeover<F, Fut>(url: &str, name: &str, t0: Instant, count: F)
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = i64>,
{
    let client = locksmith::connect_with_ttl(url, TTL).await.unwrap_or_else(|e| panic!("connect: {e}"));
    let one = || LockOptions::new().permits(1);
    let busy = client.try_lock_with(name, one()).await.unwrap_or_else(|e| panic!("try_lock: {e}"));
    assert!(busy.is_none(), "the semaphore's one permit is live by the database clock but was granted again");
    let st = client.status(Some(name)).await.unwrap_or_else(|e| panic!("status: {e}"));
    let st = st.first().unwrap_or_else(|| panic!("no status for {name}"));
    let holders: Vec<_> = st.holders.iter().map(|h| (h.owner.as_str(), h.token, h.mode)).collect();
    assert_eq!(holders, vec![("crashed-client", 1000, HoldMode::Permit(1))], "the expired permit is not shown");
    assert_eq!(st.permits, Some(1));
    assert!(st.holders[0].ttl_left.is_some_and(|t| t <= Duration::from_secs(1)), "{st:?}");
    let g = client
        .lock_with(name, one().timeout(Duration::from_secs(5)))
        .await
        .unwrap_or_else(|e| panic!("permit after expiry: {e}"));
    let waited = t0.elapsed();
    assert!(waited >= Duration::from_millis(950), "taken over after {waited:?}, before the 1 s lease ended");
    assert!(waited < Duration::from_millis(1900), "took {waited:?}: the waiter did not wake at the expiry");
    assert_eq!(g.token(), 1001, "the counter row continues from the foreign token");
    assert_eq!(count().await, 1, "the expired permits were not cleaned up by the acquisition that looked");
    let st = client.status(Some(name)).await.unwrap_or_else(|e| panic!("status: {e}"));
    let ours = st.first().and_then(|s| s.holder.clone()).unwrap_or_else(|| panic!("no holder in {st:?}"));
    assert_eq!((ours.token, ours.mode), (1001, HoldMode::Permit(1)));
    assert!(ours.ttl_left.is_some_and(|t| t > Duration::from_millis(1000) && t <= TTL), "ttl_left {:?}", ours.ttl_left);
    assert!(g.unlock().await.unwrap_or(false));
    assert_eq!(count().await, 0);
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_permit_expiry_is_by_the_database_clock() {
    let server = PostgresServer::start();
    let url = server.url();
    schema(&url).await;
    let pool = sqlx::PgPool::connect(&url).await.unwrap_or_else(|e| panic!("{e}"));
    for sql in [
        "INSERT INTO locksmith_fence (name, token) VALUES ('db-clock-sem', 1000)",
        "INSERT INTO locksmith_holds (name, owner, token, kind, permits, expires_at) \
         VALUES ('db-clock-sem', 'long-gone', 999, 'permit', 1, clock_timestamp() - interval '1 hour')",
    ] {
        sqlx::query(sql).execute(&pool).await.unwrap_or_else(|e| panic!("{e}"));
    }
    let t0 = Instant::now();
    sqlx::query(
        "INSERT INTO locksmith_holds (name, owner, token, kind, permits, expires_at) \
         VALUES ('db-clock-sem', 'crashed-client', 1000, 'permit', 1, clock_timestamp() + interval '1 second')",
    )
    .execute(&pool)
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    let count = || async {
        sqlx::query_scalar::<_, i64>("SELECT count(*) FROM locksmith_holds WHERE name = 'db-clock-sem'")
            .fetch_one(&pool)
            .await
            .unwrap_or_else(|e| panic!("{e}"))
    };
    check_permit_takeover(&url, "db-clock-sem", t0, count).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_permit_expiry_is_by_the_database_clock() {
    let server = MySqlServer::start();
    let url = server.url();
    schema(&url).await;
    let pool = sqlx::MySqlPool::connect(&url).await.unwrap_or_else(|e| panic!("{e}"));
    for sql in [
        "INSERT INTO locksmith_fence (name, token) VALUES ('db-clock-sem', 1000)",
        "INSERT INTO locksmith_holds (name, owner, token, kind, permits, expires_at) \
         VALUES ('db-clock-sem', 'long-gone', 999, 'permit', 1, NOW(6) - INTERVAL 1 HOUR)",
    ] {
        sqlx::query(sql).execute(&pool).await.unwrap_or_else(|e| panic!("{e}"));
    }
    let t0 = Instant::now();
    sqlx::query(
        "INSERT INTO locksmith_holds (name, owner, token, kind, permits, expires_at) \
         VALUES ('db-clock-sem', 'crashed-client', 1000, 'permit', 1, NOW(6) + INTERVAL 1 SECOND)",
    )
    .execute(&pool)
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    let count = || async {
        sqlx::query_scalar::<_, i64>("SELECT COUNT(*) FROM locksmith_holds WHERE name = 'db-clock-sem'")
            .fetch_one(&pool)
            .await
            .unwrap_or_else(|e| panic!("{e}"))
    };
    check_permit_takeover(&url, "db-clock-sem", t0, count).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_permit_expiry_is_by_the_database_clock() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let url = format!("sqlite://{}", dir.path().join("locks.db").display());
    schema(&url).await;
    let pool = sqlx::SqlitePool::connect(&url).await.unwrap_or_else(|e| panic!("{e}"));
    for sql in [
        "INSERT INTO locksmith_fence (name, token) VALUES ('db-clock-sem', 1000)",
        "INSERT INTO locksmith_holds (name, owner, token, kind, permits, expires_at) VALUES \
         ('db-clock-sem', 'long-gone', 999, 'permit', 1, \
         CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER) - 3600000)",
    ] {
        sqlx::query(sql).execute(&pool).await.unwrap_or_else(|e| panic!("{e}"));
    }
    let t0 = Instant::now();
    sqlx::query(
        "INSERT INTO locksmith_holds (name, owner, token, kind, permits, expires_at) VALUES \
         ('db-clock-sem', 'crashed-client', 1000, 'permit', 1, \
         CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER) + 1000)",
    )
    .execute(&pool)
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    let count = || async {
        sqlx::query_scalar::<_, i64>("SELECT COUNT(*) FROM locksmith_holds WHERE name = 'db-clock-sem'")
            .fetch_one(&pool)
            .await
            .unwrap_or_else(|e| panic!("{e}"))
    };
    check_permit_takeover(&url, "db-clock-sem", t0, count).await;
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
