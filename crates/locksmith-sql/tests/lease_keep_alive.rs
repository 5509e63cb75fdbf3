//! Lease mode renews every hold of a session in one statement per table per keep-alive: holds
//! that are still ours stay renewed past many TTLs — locks in `locksmith_locks`, read holds and
//! permits in `locksmith_holds` — and a hold whose row vanished (deleted by hand, as an operator
//! or a foreign client could) is reported lost — that one only.

use std::time::Duration;

use locksmith::LockOptions;

use locksmith_testkit::{MySqlServer, PostgresServer};

const TTL: Duration = Duration::from_millis(600);

/// Four holds on one client (one session): locks `a` and `b`, a read hold of `c` and a permit
/// of `d`; `delete` removes the rows of `b` (from locksmith_locks) and `c` (from
/// locksmith_holds).
async fn only_the_vanished_hold_is_lost<F, Fut>(url: &str, delete: F)
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let client = locksmith::connect_with_ttl(url, TTL).await.unwrap_or_else(|e| panic!("{e}"));
    let a = client.lock("batch-a").await.unwrap_or_else(|e| panic!("{e}"));
    let b = client.lock("batch-b").await.unwrap_or_else(|e| panic!("{e}"));
    let c = client.lock_with("batch-c", LockOptions::new().shared()).await.unwrap_or_else(|e| panic!("{e}"));
    let d = client.lock_with("batch-d", LockOptions::new().permits(1)).await.unwrap_or_else(|e| panic!("{e}"));
    delete().await;
    for (name, g) in [("b", &b), ("c", &c)] {
        let lost = tokio::time::timeout(TTL * 2, g.lost()).await;
        lost.unwrap_or_else(|_| panic!("the vanished hold of {name} was not reported lost"));
    }
    // Several TTLs: a and d live only if every keep-alive renewed them.
    tokio::time::sleep(TTL * 3).await;
    assert!(a.is_held() && d.is_held(), "a renewed hold was reported lost");
    let other = locksmith::connect_with_ttl(url, TTL).await.unwrap_or_else(|e| panic!("{e}"));
    assert!(other.try_lock("batch-a").await.unwrap_or_else(|e| panic!("{e}")).is_none(), "batch-a expired");
    let d2 = other.try_lock_with("batch-d", LockOptions::new().permits(1)).await.unwrap_or_else(|e| panic!("{e}"));
    assert!(d2.is_none(), "the permit of batch-d expired");
    for name in ["batch-b", "batch-c"] {
        let free = other.try_lock(name).await.unwrap_or_else(|e| panic!("{e}"));
        assert!(free.is_some(), "the vanished hold's lock {name} is not free");
    }
    assert!(a.unlock().await.unwrap_or(false) && d.unlock().await.unwrap_or(false));
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
        let n = sqlx::query("DELETE FROM locksmith_holds WHERE name = 'batch-c'").execute(&pool).await;
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
        let n = sqlx::query("DELETE FROM locksmith_holds WHERE name = 'batch-c'").execute(&pool).await;
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
        let n = sqlx::query("DELETE FROM locksmith_holds WHERE name = 'batch-c'").execute(&pool).await;
        assert_eq!(n.unwrap_or_else(|e| panic!("{e}")).rows_affected(), 1);
    })
    .await;
}
