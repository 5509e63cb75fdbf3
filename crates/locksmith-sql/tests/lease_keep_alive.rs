//! Lease mode renews every hold of a session in one statement per keep-alive: holds that are
//! still ours stay renewed past many TTLs, and a hold whose row vanished (deleted by hand, as an
//! operator or a foreign client could) is reported lost — that one only.

use std::time::Duration;

use locksmith_testkit::{MySqlServer, PostgresServer};

const TTL: Duration = Duration::from_millis(600);

/// Three holds on one client (one session); `delete` removes the row of `b` from the table.
async fn only_the_vanished_hold_is_lost<F, Fut>(url: &str, delete: F)
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let client = locksmith::connect_with_ttl(url, TTL).await.unwrap_or_else(|e| panic!("{e}"));
    let a = client.lock("batch-a").await.unwrap_or_else(|e| panic!("{e}"));
    let b = client.lock("batch-b").await.unwrap_or_else(|e| panic!("{e}"));
    let c = client.lock("batch-c").await.unwrap_or_else(|e| panic!("{e}"));
    delete().await;
    tokio::time::timeout(TTL * 2, b.lost()).await.unwrap_or_else(|_| panic!("the vanished hold was not reported lost"));
    // Several TTLs: a and c live only if every keep-alive renewed them.
    tokio::time::sleep(TTL * 3).await;
    assert!(a.is_held() && c.is_held(), "a renewed hold was reported lost");
    let other = locksmith::connect_with_ttl(url, TTL).await.unwrap_or_else(|e| panic!("{e}"));
    for name in ["batch-a", "batch-c"] {
        assert!(other.try_lock(name).await.unwrap_or_else(|e| panic!("{e}")).is_none(), "{name} expired");
    }
    let b2 = other.try_lock("batch-b").await.unwrap_or_else(|e| panic!("{e}"));
    assert!(b2.is_some(), "the vanished hold's lock is not free");
    assert!(a.unlock().await.unwrap_or(false) && c.unlock().await.unwrap_or(false));
    client.close().await;
    other.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_keep_alive_renews_all_holds_and_reports_only_the_vanished_one() {
    let server = PostgresServer::start();
    let url = server.url();
    let pool = sqlx::PgPool::connect(&url).await.unwrap_or_else(|e| panic!("{e}"));
    only_the_vanished_hold_is_lost(&url, || async {
        let n = sqlx::query("DELETE FROM locksmith_locks WHERE name = 'batch-b'").execute(&pool).await;
        assert_eq!(n.unwrap_or_else(|e| panic!("{e}")).rows_affected(), 1);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_keep_alive_renews_all_holds_and_reports_only_the_vanished_one() {
    let server = MySqlServer::start();
    let url = server.url();
    let pool = sqlx::MySqlPool::connect(&url).await.unwrap_or_else(|e| panic!("{e}"));
    only_the_vanished_hold_is_lost(&url, || async {
        let n = sqlx::query("DELETE FROM locksmith_locks WHERE name = 'batch-b'").execute(&pool).await;
        assert_eq!(n.unwrap_or_else(|e| panic!("{e}")).rows_affected(), 1);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_keep_alive_renews_all_holds_and_reports_only_the_vanished_one() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let url = format!("sqlite://{}", dir.path().join("locks.db").display());
    let pool = sqlx::SqlitePool::connect(&format!("{url}?mode=rwc")).await.unwrap_or_else(|e| panic!("{e}"));
    only_the_vanished_hold_is_lost(&url, || async {
        let n = sqlx::query("DELETE FROM locksmith_locks WHERE name = 'batch-b'").execute(&pool).await;
        assert_eq!(n.unwrap_or_else(|e| panic!("{e}")).rows_affected(), 1);
    })
    .await;
}
