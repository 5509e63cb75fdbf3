//! Connection-scoped modes: when the connection holding an advisory lock / `GET_LOCK` / row lock
//! is killed on the server, the guard learns it (`lost()`), and another client gets the lock with
//! a greater fencing token. A row-lock waiter that gives up leaves the database's lock queue at
//! once.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

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

/// Holder `g` lost its hold; `b` takes over with a greater token.
async fn assert_taken_over(g: locksmith::Guard, b: &locksmith::Client, name: &str) {
    tokio::time::timeout(Duration::from_secs(3), g.lost()).await.unwrap_or_else(|_| panic!("lost() did not fire"));
    assert!(!g.is_held());
    let g2 = b
        .lock_with(name, LockOptions::new().timeout(Duration::from_secs(2)))
        .await
        .unwrap_or_else(|e| panic!("lock after the kill: {e}"));
    assert!(g2.token() > g.token(), "token {} not above {}", g2.token(), g.token());
    assert!(g2.unlock().await.unwrap_or(false));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_killed_connection_loses_the_row_lock() {
    let server = PostgresServer::start();
    let url = format!("{}?mode=row_lock", server.url());
    let ttl = Duration::from_secs(1);
    let a = locksmith::connect_with_ttl(&url, ttl).await.unwrap_or_else(|e| panic!("{e}"));
    let b = locksmith::connect_with_ttl(&url, ttl).await.unwrap_or_else(|e| panic!("{e}"));
    let g = a.lock("kill-me").await.unwrap_or_else(|e| panic!("lock: {e}"));
    assert!(b.try_lock("kill-me").await.unwrap_or_else(|e| panic!("{e}")).is_none(), "held lock granted twice");
    let admin = sqlx::PgPool::connect(&server.url()).await.unwrap_or_else(|e| panic!("{e}"));
    // The holder is the one connection idling inside a transaction.
    let killed: Vec<bool> = sqlx::query_scalar(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE state = 'idle in transaction'",
    )
    .fetch_all(&admin)
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(killed, vec![true], "exactly one connection held a transaction open");
    assert_taken_over(g, &b, "kill-me").await;
    a.close().await;
    b.close().await;
}

/// Runs SQL as MariaDB's root over the server's socket (the test user may not see other
/// users' transactions); returns the output lines.
fn mariadb_root(dir: &Path, sql: &str) -> Vec<String> {
    let out = Command::new("mariadb")
        .arg("--no-defaults")
        .arg(format!("--socket={}", dir.join("sock").display()))
        .args(["-u", "root", "-N", "-B", "-e", sql])
        .output()
        .unwrap_or_else(|e| panic!("mariadb client (scripts/setup.sh installs mariadb-server): {e}"));
    assert!(out.status.success(), "{sql}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).lines().map(str::to_string).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_killed_connection_loses_the_row_lock() {
    let server = MySqlServer::start();
    let url = format!("{}?mode=row_lock", server.url());
    let ttl = Duration::from_secs(1);
    let a = locksmith::connect_with_ttl(&url, ttl).await.unwrap_or_else(|e| panic!("{e}"));
    let b = locksmith::connect_with_ttl(&url, ttl).await.unwrap_or_else(|e| panic!("{e}"));
    let g = a.lock("kill-me").await.unwrap_or_else(|e| panic!("lock: {e}"));
    assert!(b.try_lock("kill-me").await.unwrap_or_else(|e| panic!("{e}")).is_none(), "held lock granted twice");
    let ids = mariadb_root(server.dir(), "SELECT trx_mysql_thread_id FROM information_schema.INNODB_TRX");
    assert_eq!(ids.len(), 1, "exactly one open transaction: {ids:?}");
    mariadb_root(server.dir(), &format!("KILL {}", ids[0]));
    assert_taken_over(g, &b, "kill-me").await;
    a.close().await;
    b.close().await;
}

/// A waiter that times out while queued behind a row lock leaves the queue at once (its
/// connection is killed), not after its wait chunk, and never holds the row after the holder
/// lets go.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_row_lock_waiter_that_gives_up_leaves_the_queue() {
    let server = PostgresServer::start();
    let url = format!("{}?mode=row_lock", server.url());
    let a = locksmith::connect(&url).await.unwrap_or_else(|e| panic!("{e}"));
    let b = locksmith::connect(&url).await.unwrap_or_else(|e| panic!("{e}"));
    let admin = sqlx::PgPool::connect(&server.url()).await.unwrap_or_else(|e| panic!("{e}"));
    let queued = || async {
        sqlx::query_scalar::<_, i64>("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'")
            .fetch_one(&admin)
            .await
            .unwrap_or_else(|e| panic!("{e}"))
    };
    let g = a.lock("queue").await.unwrap_or_else(|e| panic!("lock: {e}"));
    let waiter = {
        let b = b.clone();
        tokio::spawn(async move { b.lock_with("queue", LockOptions::new().timeout(Duration::from_millis(700))).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(queued().await, 1, "the waiter waits in the server's lock queue");
    let r = waiter.await.unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()));
    assert!(matches!(r, Err(locksmith::Error::Timeout)), "{r:?}");
    let gave_up = Instant::now();
    while queued().await > 0 {
        assert!(gave_up.elapsed() < Duration::from_millis(800), "the abandoned waiter stayed queued");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(g.unlock().await.unwrap_or(false));
    let c = locksmith::connect(&url).await.unwrap_or_else(|e| panic!("{e}"));
    let g3 = c.try_lock("queue").await.unwrap_or_else(|e| panic!("{e}"));
    assert!(g3.is_some(), "the lock was not free after the holder released it");
    a.close().await;
    b.close().await;
    c.close().await;
}

/// Connections are kept for reuse after a clean release; one that died while kept (here:
/// terminated by the server, as a restart or an idle timeout would) is noticed and replaced, so
/// the next acquisition still succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_kept_connection_that_died_is_replaced() {
    let server = PostgresServer::start();
    let admin = sqlx::PgPool::connect(&server.url()).await.unwrap_or_else(|e| panic!("{e}"));
    for mode in ["advisory", "row_lock"] {
        let url = format!("{}?mode={mode}", server.url());
        let a = locksmith::connect(&url).await.unwrap_or_else(|e| panic!("{e}"));
        let g = a.lock("reuse").await.unwrap_or_else(|e| panic!("{mode}: lock: {e}"));
        let first = g.token();
        assert!(g.unlock().await.unwrap_or(false));
        let killed: Vec<bool> = sqlx::query_scalar(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
             WHERE application_name = 'locksmith' AND pid <> pg_backend_pid()",
        )
        .fetch_all(&admin)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
        assert!(!killed.is_empty(), "{mode}: no locksmith connection was open");
        let g = a.lock("reuse").await.unwrap_or_else(|e| panic!("{mode}: lock after the kill: {e}"));
        assert!(g.token() > first, "{mode}: token {} not above {first}", g.token());
        assert!(g.unlock().await.unwrap_or(false));
        a.close().await;
    }
}
