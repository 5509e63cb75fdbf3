//! `?pool_size=N` sizes the shared connection pool. The smallest pool (one connection) must still
//! serve every operation of the lease mode — several holds renewed together, a waiter woken by a
//! release, status — without an operation waiting for a second pooled connection that would
//! never come free (a pool deadlock).

use std::time::Duration;

use locksmith_testkit::{MySqlServer, PostgresServer};

const TTL: Duration = Duration::from_millis(900);

async fn one_connection_serves_holds_waiters_and_renewals(url: &str) {
    let client = locksmith::connect_with_ttl(url, TTL).await.unwrap_or_else(|e| panic!("{e}"));
    let a = client.lock("pool-a").await.unwrap_or_else(|e| panic!("{e}"));
    let b = client.lock("pool-b").await.unwrap_or_else(|e| panic!("{e}"));
    // A second client (its own pool of one) waits for `a` while the first keeps both alive.
    let other = locksmith::connect_with_ttl(url, TTL).await.unwrap_or_else(|e| panic!("{e}"));
    let waiter = tokio::spawn(async move {
        let g = other.lock("pool-a").await.map_err(|e| e.to_string())?;
        let token = g.fencing_token();
        g.unlock().await.map_err(|e| e.to_string())?;
        other.close().await;
        Ok::<_, String>(token)
    });
    tokio::time::sleep(TTL * 3).await;
    assert!(a.is_held() && b.is_held(), "a hold was lost with a pool of one connection");
    let status = client.status(Some("pool-a")).await.unwrap_or_else(|e| panic!("{e}"));
    let holder_token = status.first().and_then(|s| s.holder.as_ref()).map(|h| h.token);
    assert_eq!(holder_token, a.fencing_token(), "status reads the holder's token");
    let a_token = a.fencing_token();
    assert!(a.unlock().await.unwrap_or(false));
    let next = tokio::time::timeout(TTL * 4, waiter)
        .await
        .unwrap_or_else(|_| panic!("the waiter was not granted the released lock"))
        .unwrap_or_else(|e| panic!("{e}"))
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(next > a_token, "the next holder's token {next:?} is not above {a_token:?}");
    assert!(b.unlock().await.unwrap_or(false));
    client.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_with_a_pool_of_one_connection_serves_every_lease_operation() {
    let server = PostgresServer::start();
    one_connection_serves_holds_waiters_and_renewals(&format!("{}?pool_size=1", server.url())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_with_a_pool_of_one_connection_serves_every_lease_operation() {
    let server = MySqlServer::start();
    one_connection_serves_holds_waiters_and_renewals(&format!("{}?pool_size=1", server.url())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_with_a_pool_of_one_connection_serves_every_lease_operation() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let url = format!("sqlite://{}?pool_size=1", dir.path().join("locks.db").display());
    one_connection_serves_holds_waiters_and_renewals(&url).await;
}

#[tokio::test]
async fn a_pool_size_out_of_range_is_an_invalid_url() {
    for size in ["0", "101", "many"] {
        let url = format!("postgres://me@127.0.0.1:1/db?pool_size={size}");
        let err = locksmith::connect(&url).await.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(err.contains("pool_size must be a whole number from 1 to 100"), "{size}: {err}");
    }
}
