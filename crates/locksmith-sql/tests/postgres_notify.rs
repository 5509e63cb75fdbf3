//! PostgreSQL waiters are woken by LISTEN/NOTIFY when the holder releases, not by their
//! fallback timer (which by then waits up to 1 s).

use std::time::{Duration, Instant};

use locksmith_testkit::PostgresServer;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_wakes_a_waiter_at_once() {
    let server = PostgresServer::start();
    let ttl = Duration::from_secs(30);
    let holder = locksmith::connect_with_ttl(&server.url(), ttl).await.unwrap_or_else(|e| panic!("{e}"));
    let waiter = locksmith::connect_with_ttl(&server.url(), ttl).await.unwrap_or_else(|e| panic!("{e}"));
    let mut latencies = Vec::new();
    for _ in 0..3 {
        let g = holder.lock("notify").await.unwrap_or_else(|e| panic!("lock: {e}"));
        let w = waiter.clone();
        let task = tokio::spawn(async move {
            let g = w.lock("notify").await.unwrap_or_else(|e| panic!("lock: {e}"));
            let at = Instant::now();
            assert!(g.unlock().await.unwrap_or(false));
            at
        });
        // Long enough for the waiter's fallback timer to have grown to its 1 s cap.
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let released = Instant::now();
        assert!(g.unlock().await.unwrap_or(false));
        let granted = task.await.unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()));
        latencies.push(granted.saturating_duration_since(released));
    }
    latencies.sort();
    assert!(latencies[1] < Duration::from_millis(150), "waiters were not woken by NOTIFY: {latencies:?}");
    holder.close().await;
    waiter.close().await;
}
