//! Session-scoped modes: when the connection holding an advisory lock / `GET_LOCK` is killed on
//! the server, the guard learns it (`lost()`), and another client gets the lock with a greater
//! fencing token.

use std::time::Duration;

use locksmith::LockOptions;
use locksmith_testkit::{MySqlServer, PostgresServer};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_killed_connection_loses_the_advisory_lock() {
    let server = PostgresServer::start();
    let url = format!("{}?mode=advisory", server.url());
    let ttl = Duration::from_secs(1);
    let a = locksmith::connect_with_ttl(&url, ttl).await.unwrap_or_else(|e| panic!("{e}"));
    let b = locksmith::connect_with_ttl(&url, ttl).await.unwrap_or_else(|e| panic!("{e}"));
    let g = a.lock("kill-me").await.unwrap_or_else(|e| panic!("lock: {e}"));
    assert!(b.try_lock("kill-me").await.unwrap_or_else(|e| panic!("{e}")).is_none(), "held lock granted twice");
    let admin = sqlx::PgPool::connect(&server.url()).await.unwrap_or_else(|e| panic!("{e}"));
    let killed: Vec<bool> =
        sqlx::query_scalar("SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory' AND granted")
            .fetch_all(&admin)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(killed, vec![true], "exactly one connection held the advisory lock");
    tokio::time::timeout(Duration::from_secs(3), g.lost()).await.unwrap_or_else(|_| panic!("lost() did not fire"));
    assert!(!g.is_held());
    let g2 = b
        .lock_with("kill-me", LockOptions::new().timeout(Duration::from_secs(2)))
        .await
        .unwrap_or_else(|e| panic!("lock after the kill: {e}"));
    assert!(g2.token() > g.token(), "token {} not above {}", g2.token(), g.token());
    assert!(g2.unlock().await.unwrap_or(false));
    a.close().await;
    b.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_killed_connection_loses_get_lock() {
    let server = MySqlServer::start();
    let url = format!("{}?mode=get_lock", server.url());
    let ttl = Duration::from_secs(1);
    let a = locksmith::connect_with_ttl(&url, ttl).await.unwrap_or_else(|e| panic!("{e}"));
    let b = locksmith::connect_with_ttl(&url, ttl).await.unwrap_or_else(|e| panic!("{e}"));
    let g = a.lock("kill-me").await.unwrap_or_else(|e| panic!("lock: {e}"));
    assert!(b.try_lock("kill-me").await.unwrap_or_else(|e| panic!("{e}")).is_none(), "held lock granted twice");
    let admin = sqlx::MySqlPool::connect(&server.url()).await.unwrap_or_else(|e| panic!("{e}"));
    let id: Option<i64> = sqlx::query_scalar("SELECT CAST(IS_USED_LOCK('kill-me') AS SIGNED)")
        .fetch_one(&admin)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let id = id.unwrap_or_else(|| panic!("GET_LOCK('kill-me') is not held"));
    sqlx::query(sqlx::AssertSqlSafe(format!("KILL {id}"))).execute(&admin).await.unwrap_or_else(|e| panic!("{e}"));
    tokio::time::timeout(Duration::from_secs(3), g.lost()).await.unwrap_or_else(|_| panic!("lost() did not fire"));
    assert!(!g.is_held());
    let g2 = b
        .lock_with("kill-me", LockOptions::new().timeout(Duration::from_secs(2)))
        .await
        .unwrap_or_else(|e| panic!("lock after the kill: {e}"));
    assert!(g2.token() > g.token(), "token {} not above {}", g2.token(), g.token());
    assert!(g2.unlock().await.unwrap_or(false));
    a.close().await;
    b.close().await;
}
