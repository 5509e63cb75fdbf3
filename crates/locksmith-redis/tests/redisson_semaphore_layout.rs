//! Semaphores keep Redisson's `RPermitExpirableSemaphore` layout in every mode, checked at the
//! script level: the key holds the available permits, `{name}:timeout` scores each leased
//! permit's 16-byte id with its lease end, the count is published on `redisson_sc:{name}`, and
//! raw commands play the Java side (`trySetPermits`, `tryAcquire` with a lease, `release`).

mod common;

use std::time::{Duration, Instant};

use common::{cmd, raw, server_ms, unique};
use futures_util::StreamExt;
use locksmith::{Error, LockOptions};
use locksmith_testkit::RedisServer;
use redis::aio::MultiplexedConnection;

const TTL: Duration = Duration::from_secs(2);

fn timeouts(name: &str) -> String {
    format!("{{{name}}}:timeout")
}

/// What a Java `tryAcquire(…, lease)` leaves for one permit: the count one lower and the
/// permit's 16 random bytes scored with its lease end (`expiry_ms`, ms since the epoch).
async fn java_permit(r: &mut MultiplexedConnection, name: &str, expiry_ms: u64) -> Vec<u8> {
    let id: [u8; 16] = rand::random();
    let _: i64 = redis::cmd("DECRBY").arg(name).arg(1).query_async(r).await.unwrap();
    let _: i64 = redis::cmd("ZADD").arg(timeouts(name)).arg(expiry_ms).arg(&id[..]).query_async(r).await.unwrap();
    id.to_vec()
}

/// The permits out, as `(id, lease end)`.
async fn leased(r: &mut MultiplexedConnection, name: &str) -> Vec<(Vec<u8>, u64)> {
    redis::cmd("ZRANGE").arg(timeouts(name)).arg(0).arg(-1).arg("WITHSCORES").query_async(r).await.unwrap()
}

/// A locksmith permit is a Redisson permit: the first user sets the count (trySetPermits), a
/// grant takes one from it and scores a 16-byte id with the end of its lease (server clock + TTL)
/// in `{name}:timeout`; the token is locksmith's counter beside it; the release gives the permit
/// back and publishes the new count on `redisson_sc:{name}`, as Redisson's release does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permit_is_a_redisson_permit() {
    let server = RedisServer::start();
    let mut r = raw(&server.url()).await;
    let client = locksmith::connect_with_ttl(&server.url(), TTL).await.unwrap();
    let name = unique("layout-sem");
    let mut pubsub = redis::Client::open(server.url()).unwrap().get_async_pubsub().await.unwrap();
    pubsub.subscribe(format!("redisson_sc:{{{name}}}")).await.unwrap();
    let before = server_ms(&mut r).await;
    let g = client.lock_with(&name, LockOptions::new().permits(3)).await.unwrap();
    let after = server_ms(&mut r).await;
    let available: String = cmd(&mut r, &["GET", &name]).await;
    assert_eq!(available, "2");
    let pttl: i64 = cmd(&mut r, &["PTTL", &name]).await;
    assert_eq!(pttl, -1, "the count never expires");
    let out = leased(&mut r, &name).await;
    assert_eq!(out.len(), 1);
    let (id, expiry) = &out[0];
    assert_eq!(id.len(), 16, "a permit id is 16 raw bytes");
    let ttl = TTL.as_millis() as u64;
    assert!(*expiry >= before + ttl && *expiry <= after + ttl, "lease end {expiry} not in {before}+TTL..{after}+TTL");
    let last: u64 = cmd(&mut r, &["GET", &format!("locksmith:semaphore_token:{{{name}}}")]).await;
    assert_eq!(g.token(), last);
    let mut messages = pubsub.on_message();
    // The first user's trySetPermits announces the count.
    let msg = tokio::time::timeout(Duration::from_secs(2), messages.next()).await.unwrap().unwrap();
    assert_eq!(msg.get_payload::<String>().unwrap(), "3");
    assert!(g.unlock().await.unwrap());
    let available: String = cmd(&mut r, &["GET", &name]).await;
    assert_eq!(available, "3");
    assert!(leased(&mut r, &name).await.is_empty());
    let msg = tokio::time::timeout(Duration::from_secs(2), messages.next()).await.unwrap().unwrap();
    assert_eq!(msg.get_payload::<String>().unwrap(), "3");
    client.close().await;
}

/// A Java permit counts: with the only permit leased by Java, locksmith's try_lock answers
/// None; a waiting locksmith client wakes at once when the Java side releases it as Redisson does
/// (ZREM, INCRBY, the new count on `redisson_sc:{name}`), long before the Java lease ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redisson_permit_counts_and_its_release_wakes_a_locksmith_waiter() {
    let server = RedisServer::start();
    let mut r = raw(&server.url()).await;
    let client = locksmith::connect_with_ttl(&server.url(), TTL).await.unwrap();
    let name = unique("java-permit");
    let _: () = cmd(&mut r, &["SET", &name, "1"]).await; // trySetPermits(1)
    let now = server_ms(&mut r).await;
    let id = java_permit(&mut r, &name, now + 30_000).await;
    assert!(client.try_lock_with(&name, LockOptions::new().permits(1)).await.unwrap().is_none());
    let (c, n) = (client.clone(), name.clone());
    let waiter = tokio::spawn(async move { (c.lock_with(&n, LockOptions::new().permits(1)).await, Instant::now()) });
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let subs: (String, i64) = cmd(&mut r, &["PUBSUB", "NUMSUB", &format!("redisson_sc:{{{name}}}")]).await;
    assert_eq!(subs.1, 1, "the waiter is not subscribed to Redisson's channel");
    let released = Instant::now();
    let removed: i64 = redis::cmd("ZREM").arg(timeouts(&name)).arg(&id).query_async(&mut r).await.unwrap();
    assert_eq!(removed, 1);
    let v: i64 = cmd(&mut r, &["INCRBY", &name, "1"]).await;
    let _: i64 = cmd(&mut r, &["PUBLISH", &format!("redisson_sc:{{{name}}}"), &v.to_string()]).await;
    let (g, granted) = tokio::time::timeout(Duration::from_secs(1), waiter).await.unwrap().unwrap();
    let waited = granted.duration_since(released);
    assert!(waited < Duration::from_millis(100), "woke after {waited:?}");
    assert!(g.unwrap().unlock().await.unwrap());
    client.close().await;
}

/// A permit whose lease ran out (its Java holder crashed) is reclaimed by the next acquisition,
/// as every Redisson semaphore script does: the expired id leaves the timeout set and the
/// locksmith client gets the permit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_permit_in_the_timeout_set_is_reclaimed() {
    let server = RedisServer::start();
    let mut r = raw(&server.url()).await;
    let client = locksmith::connect_with_ttl(&server.url(), TTL).await.unwrap();
    let name = unique("expired-permit");
    let _: () = cmd(&mut r, &["SET", &name, "1"]).await;
    let now = server_ms(&mut r).await;
    let crashed = java_permit(&mut r, &name, now - 1).await;
    let g = client.try_lock_with(&name, LockOptions::new().permits(1)).await.unwrap().expect("reclaimed");
    let out = leased(&mut r, &name).await;
    assert_eq!(out.len(), 1);
    assert_ne!(out[0].0, crashed, "the expired permit is still out");
    let available: String = cmd(&mut r, &["GET", &name]).await;
    assert_eq!(available, "0");
    assert!(g.unlock().await.unwrap());
    client.close().await;
}

/// The number of permits is fixed by the first user (a Java `trySetPermits(5)` here): asking
/// for another number is `InvalidArgument` and changes nothing; the same number works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_number_of_permits_is_refused_and_changes_nothing() {
    let server = RedisServer::start();
    let mut r = raw(&server.url()).await;
    let client = locksmith::connect_with_ttl(&server.url(), TTL).await.unwrap();
    let name = unique("five");
    let _: () = cmd(&mut r, &["SET", &name, "5"]).await;
    let now = server_ms(&mut r).await;
    java_permit(&mut r, &name, now + 30_000).await;
    for attempt in [
        client.try_lock_with(&name, LockOptions::new().permits(3)).await.map(|_| ()),
        client.lock_with(&name, LockOptions::new().permits(4)).await.map(|_| ()),
    ] {
        match attempt {
            Err(Error::InvalidArgument(m)) => {
                assert!(m.contains("is a semaphore of 5 permits now; asked for one of"), "{m}")
            }
            other => panic!("expected InvalidArgument, got {other:?}"),
        }
    }
    let available: String = cmd(&mut r, &["GET", &name]).await;
    assert_eq!(available, "4");
    assert_eq!(leased(&mut r, &name).await.len(), 1);
    let g = client.try_lock_with(&name, LockOptions::new().permits(5)).await.unwrap().expect("a permit of 5");
    assert!(g.unlock().await.unwrap());
    client.close().await;
}

/// A semaphore's name is never a lock and a lock's never a semaphore, in every mode: both are
/// `InvalidArgument`, and neither key is changed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_semaphore_is_not_a_lock_and_a_lock_is_not_a_semaphore() {
    let server = RedisServer::start();
    let mut r = raw(&server.url()).await;
    for mode in ["plain", "reentrant", "rwlock"] {
        let client = locksmith::connect_with_ttl(&format!("{}?mode={mode}", server.url()), TTL).await.unwrap();
        let sem = unique("sem");
        let permit = client.lock_with(&sem, LockOptions::new().permits(2)).await.unwrap();
        match client.try_lock(&sem).await {
            Err(Error::InvalidArgument(m)) => assert!(m.contains("is a semaphore"), "{mode}: {m}"),
            other => panic!("{mode}: expected InvalidArgument, got {other:?}"),
        }
        let available: String = cmd(&mut r, &["GET", &sem]).await;
        assert_eq!(available, "1", "{mode}");
        let lock = unique("lock");
        let held = client.lock(&lock).await.unwrap();
        match client.try_lock_with(&lock, LockOptions::new().permits(2)).await {
            Err(Error::InvalidArgument(m)) => assert!(m.contains("in use as a lock"), "{mode}: {m}"),
            other => panic!("{mode}: expected InvalidArgument, got {other:?}"),
        }
        assert!(held.unlock().await.unwrap(), "{mode}");
        assert!(permit.unlock().await.unwrap(), "{mode}");
        client.close().await;
    }
}
