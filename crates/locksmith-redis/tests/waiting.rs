//! Waiting on pub/sub: prompt wake-ups, recovery of the pub/sub connection, cancel safety.
//! (Plain mode: each waiter listens on its own channel `locksmith:wake:{<key>}:<waiter-id>`.)

mod common;

use std::time::{Duration, Instant};

use common::{cmd, raw, unique};
use locksmith::LockOptions;
use locksmith_testkit::RedisServer;

const TTL: Duration = Duration::from_secs(2);

/// Holds `name` with a foreign value for 10 s, then waits long enough for a waiter's fallback
/// timer to reach its cap.
async fn hold_foreign(r: &mut redis::aio::MultiplexedConnection, name: &str) {
    let _: () = cmd(r, &["SET", name, "someone-else", "PX", "10000"]).await;
}

/// Releasing a lock with a locksmith unlock wakes a waiter in another client at once (its
/// release message), not on the fallback timer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unlock_wakes_a_waiter_promptly() {
    let server = RedisServer::start();
    let a = locksmith::connect_with_ttl(&server.url(), TTL).await.unwrap();
    let b = locksmith::connect_with_ttl(&server.url(), TTL).await.unwrap();
    let name = unique("wake");
    for round in 0..3 {
        let g = a.lock(&name).await.unwrap();
        let (b2, n) = (b.clone(), name.clone());
        let waiter = tokio::spawn(async move { (b2.lock(&n).await, Instant::now()) });
        tokio::time::sleep(Duration::from_millis(1000)).await;
        let released = Instant::now();
        assert!(g.unlock().await.unwrap());
        let (g2, at) = tokio::time::timeout(Duration::from_secs(1), waiter).await.unwrap().unwrap();
        let waited = at.duration_since(released);
        assert!(waited < Duration::from_millis(100), "round {round}: woke after {waited:?}");
        assert!(g2.unwrap().unlock().await.unwrap());
    }
}

/// The wake-up channels subscribed for `name`'s waiters.
async fn wake_channels(r: &mut redis::aio::MultiplexedConnection, name: &str) -> Vec<String> {
    cmd(r, &["PUBSUB", "CHANNELS", &format!("locksmith:wake:{{{name}}}:*")]).await
}

/// When the pub/sub connection is killed while a waiter waits, it is re-opened and the channel
/// re-subscribed, so the next release still wakes the waiter promptly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_survives_a_killed_pubsub_connection() {
    let server = RedisServer::start();
    let mut r = raw(&server.url()).await;
    let client = locksmith::connect_with_ttl(&server.url(), TTL).await.unwrap();
    let holder = locksmith::connect_with_ttl(&server.url(), TTL).await.unwrap();
    let name = unique("pubsub-kill");
    let g = holder.lock(&name).await.unwrap();
    let (c, n) = (client.clone(), name.clone());
    let waiter = tokio::spawn(async move { (c.lock(&n).await, Instant::now()) });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let killed: i64 = cmd(&mut r, &["CLIENT", "KILL", "TYPE", "pubsub"]).await;
    assert!(killed >= 1, "no pub/sub connection to kill");
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert_eq!(wake_channels(&mut r, &name).await.len(), 1, "the waiter did not re-subscribe");
    let released = Instant::now();
    assert!(g.unlock().await.unwrap());
    let (g2, at) = tokio::time::timeout(Duration::from_secs(1), waiter).await.unwrap().unwrap();
    assert!(at.duration_since(released) < Duration::from_millis(100), "woke after {:?}", at - released);
    assert!(g2.unwrap().unlock().await.unwrap());
}

/// A waiter that times out leaves no subscription behind, and a foreign (redis-py style) hold
/// that expires is taken over by a waiter on its fallback timer, without any message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeouts_unsubscribe_and_expiry_is_noticed_without_a_message() {
    let server = RedisServer::start();
    let mut r = raw(&server.url()).await;
    let client = locksmith::connect_with_ttl(&server.url(), TTL).await.unwrap();
    let name = unique("expiry");
    hold_foreign(&mut r, &name).await;
    let timed_out = client.lock_with(&name, LockOptions::new().timeout(Duration::from_millis(300))).await;
    assert!(matches!(timed_out, Err(locksmith::Error::Timeout)), "{timed_out:?}");
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(wake_channels(&mut r, &name).await, Vec::<String>::new(), "a timed-out waiter left its subscription");
    let _: i64 = cmd(&mut r, &["PEXPIRE", &name, "500"]).await;
    let started = Instant::now();
    let g = client.lock_with(&name, LockOptions::new().timeout(Duration::from_secs(3))).await.unwrap();
    assert!(started.elapsed() < Duration::from_millis(900), "took {:?}", started.elapsed());
    assert!(g.unlock().await.unwrap());
}
