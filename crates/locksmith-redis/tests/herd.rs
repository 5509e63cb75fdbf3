//! Plain mode under a herd: many waiters in several clients on one lock. Each release wakes
//! one waiter, and waiters are served in the order they queued, across clients.

mod common;

use std::time::Duration;

use common::{unique, until_waiters, wakeups};
use locksmith_testkit::RedisServer;
use tokio::sync::mpsc;

const TTL: Duration = Duration::from_secs(2);
const CLIENTS: usize = 5;
const WAITERS: usize = 60;

/// 60 waiters spread over 5 clients (each with its own connections) queue one after the other;
/// then the lock is handed on 60 times. Every waiter gets it, in queue order, and the drivers
/// count at most 1.5 wake-ups per release (a broadcast would wake every remaining waiter).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_release_wakes_one_waiter_in_fifo_order() {
    let server = RedisServer::start();
    let mut clients = Vec::new();
    for _ in 0..CLIENTS {
        clients.push(locksmith::connect_with_ttl(&server.url(), TTL).await.unwrap());
    }
    let holder = locksmith::connect_with_ttl(&server.url(), TTL).await.unwrap();
    let name = unique("herd");
    let held = holder.lock(&name).await.unwrap();
    let (tx, mut rx) = mpsc::unbounded_channel();
    let mut tasks = Vec::new();
    for i in 0..WAITERS {
        let (client, n, tx) = (clients[i % CLIENTS].clone(), name.clone(), tx.clone());
        tasks.push(tokio::spawn(async move {
            let guard = client.lock(&n).await.unwrap();
            tx.send((i, guard)).unwrap();
        }));
        until_waiters(&holder, &name, i as u64 + 1).await;
    }
    let before = wakeups();
    assert!(held.unlock().await.unwrap());
    let mut order = Vec::new();
    for _ in 0..WAITERS {
        let (i, guard) =
            tokio::time::timeout(Duration::from_secs(5), rx.recv()).await.expect("a hand-off stalled").unwrap();
        order.push(i);
        assert!(guard.unlock().await.unwrap(), "waiter {i} lost its hold");
    }
    let per_release = (wakeups() - before) as f64 / WAITERS as f64;
    assert_eq!(order, (0..WAITERS).collect::<Vec<_>>(), "not served in queue order");
    assert!(per_release <= 1.5, "{per_release} wake-ups per release");
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(common::waiters(&holder, &name).await, 0, "entries left in the queue");
}
