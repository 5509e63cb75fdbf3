//! The plain-mode waiter queue: entries are removed by cancelled waiters, go stale when their
//! waiter dies, never block a hand-off past their deadline, and silent (redis-py style)
//! releases are still noticed.

mod common;

use std::time::{Duration, Instant};

use common::{cmd, raw, server_ms, unique, until_waiters};
use locksmith::LockOptions;
use locksmith_testkit::RedisServer;

const TTL: Duration = Duration::from_secs(2);
/// How long a queue entry stays live without a refresh (the driver's constant).
const LIFETIME_MS: u64 = 2400;

fn queue(name: &str) -> (String, String) {
    (format!("locksmith:waiters:{{{name}}}"), format!("locksmith:waiters:{{{name}}}:deadlines"))
}

/// An uncontended lock and unlock takes no pub/sub connection and leaves no queue behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_uncontended_lock_does_not_queue_or_subscribe() {
    let server = RedisServer::start();
    let mut r = raw(&server.url()).await;
    let client = locksmith::connect_with_ttl(&server.url(), TTL).await.unwrap();
    let name = unique("uncontended");
    for _ in 0..3 {
        let g = client.lock(&name).await.unwrap();
        assert!(g.unlock().await.unwrap());
    }
    let pubsub: String = cmd(&mut r, &["CLIENT", "LIST", "TYPE", "pubsub"]).await;
    assert_eq!(pubsub.trim(), "", "a pub/sub connection was opened");
    let (waiters, deadlines) = queue(&name);
    let exists: i64 = cmd(&mut r, &["EXISTS", &waiters, &deadlines]).await;
    assert_eq!(exists, 0);
}

/// Waiters that time out or are dropped leave no queue entry and no subscription, and the
/// queue keys disappear with them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_waiter_leaves_no_queue_entry() {
    let server = RedisServer::start();
    let mut r = raw(&server.url()).await;
    let holder = locksmith::connect_with_ttl(&server.url(), TTL).await.unwrap();
    let client = locksmith::connect_with_ttl(&server.url(), TTL).await.unwrap();
    let name = unique("cancel");
    let g = holder.lock(&name).await.unwrap();
    let timed_out = client.lock_with(&name, LockOptions::new().timeout(Duration::from_millis(300))).await;
    assert!(matches!(timed_out, Err(locksmith::Error::Timeout)), "{timed_out:?}");
    let (c, n) = (client.clone(), name.clone());
    let dropped = tokio::spawn(async move { c.lock(&n).await });
    until_waiters(&holder, &name, 1).await;
    dropped.abort();
    let _ = dropped.await;
    let (waiters, deadlines) = queue(&name);
    let pattern = format!("locksmith:wake:{{{name}}}:*");
    let started = Instant::now();
    loop {
        let exists: i64 = cmd(&mut r, &["EXISTS", &waiters, &deadlines]).await;
        let channels: Vec<String> = cmd(&mut r, &["PUBSUB", "CHANNELS", &pattern]).await;
        if exists == 0 && channels.is_empty() {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_millis(500),
            "left behind: {exists} queue keys, channels {channels:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(g.unlock().await.unwrap());
    let got = client.try_lock(&name).await.unwrap();
    assert!(got.is_some(), "the lock is free and nobody is queued");
}

/// A queued entry whose waiter died without cleanup (here: inserted by hand, deadline 2.4 s
/// out, never refreshed) keeps its place until its deadline, and not longer: then the waiter
/// behind it gets the lock. Meanwhile a `try_lock` does not jump the queue.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_head_blocks_the_hand_off_only_until_its_deadline() {
    let server = RedisServer::start();
    let mut r = raw(&server.url()).await;
    let holder = locksmith::connect_with_ttl(&server.url(), TTL).await.unwrap();
    let client = locksmith::connect_with_ttl(&server.url(), TTL).await.unwrap();
    let name = unique("dead-head");
    let (waiters, deadlines) = queue(&name);
    let g = holder.lock(&name).await.unwrap();
    let deadline = server_ms(&mut r).await + LIFETIME_MS;
    let inserted = Instant::now();
    let _: i64 = cmd(&mut r, &["ZADD", &waiters, "1", "ghost"]).await;
    let _: i64 = cmd(&mut r, &["ZADD", &deadlines, &deadline.to_string(), "ghost"]).await;
    let (c, n) = (client.clone(), name.clone());
    let waiter = tokio::spawn(async move { (c.lock(&n).await, Instant::now()) });
    until_waiters(&holder, &name, 2).await;
    assert!(g.unlock().await.unwrap());
    // The key is free, but a live waiter is queued: newcomers wait their turn.
    assert!(holder.try_lock(&name).await.unwrap().is_none(), "try_lock jumped the queue");
    let (got, at) = tokio::time::timeout(Duration::from_secs(5), waiter).await.expect("the hand-off stalled").unwrap();
    let after = at.duration_since(inserted);
    let lifetime = Duration::from_millis(LIFETIME_MS);
    assert!(after >= lifetime - Duration::from_millis(20), "granted {after:?} after the dead entry was queued");
    // At most one refresh period (1 s + 20 %) after the deadline, plus slack.
    assert!(after < lifetime + Duration::from_millis(1500), "granted {after:?} after the dead entry was queued");
    assert!(got.unwrap().unlock().await.unwrap());
    let score: Option<String> = cmd(&mut r, &["ZSCORE", &waiters, "ghost"]).await;
    assert_eq!(score, None, "the stale entry was not dropped");
}

/// A waiter that freezes mid-wait (its runtime is never driven again, its connections stay
/// open: a SIGSTOPped process) is the head of the queue when the lock is released; it is
/// dropped after its deadline and the next waiter gets the lock then.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_head_is_skipped_after_its_deadline() {
    let server = RedisServer::start();
    let holder = locksmith::connect_with_ttl(&server.url(), TTL).await.unwrap();
    let client = locksmith::connect_with_ttl(&server.url(), TTL).await.unwrap();
    let name = unique("frozen");
    let g = holder.lock(&name).await.unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (url, n, s) = (server.url(), name.clone(), stop.clone());
    let frozen = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let c = locksmith::connect_with_ttl(&url, TTL).await.unwrap();
            tokio::spawn(async move { c.lock(&n).await });
            while !s.load(std::sync::atomic::Ordering::SeqCst) {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        });
        // Never driven again, never dropped: no cleanup runs, as in a stopped process.
        std::mem::forget(rt);
    });
    until_waiters(&holder, &name, 1).await;
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    frozen.join().unwrap();
    let (c, n) = (client.clone(), name.clone());
    let waiter = tokio::spawn(async move { c.lock(&n).await });
    until_waiters(&holder, &name, 2).await;
    let released = Instant::now();
    assert!(g.unlock().await.unwrap());
    let got = tokio::time::timeout(Duration::from_secs(6), waiter).await.expect("the hand-off stalled").unwrap();
    let took = released.elapsed();
    assert!(took < Duration::from_millis(LIFETIME_MS + 1500), "took {took:?}");
    assert!(got.unwrap().unlock().await.unwrap());
    assert_eq!(common::waiters(&holder, &name).await, 0, "the frozen waiter is still counted");
}

/// A redis-py style release (a plain `DEL`, no message) is noticed by the head of the queue on
/// its fallback timer (backoff capped at 200 ms ± 20 %), and the hand-offs after it, by
/// locksmith releases, are prompt and in queue order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_release_is_noticed_by_the_head() {
    let server = RedisServer::start();
    let mut r = raw(&server.url()).await;
    let holder = locksmith::connect_with_ttl(&server.url(), TTL).await.unwrap();
    let name = unique("silent");
    let _: () = cmd(&mut r, &["SET", &name, "redis-py-token", "PX", "10000"]).await;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    for i in 0..3 {
        let c = locksmith::connect_with_ttl(&server.url(), TTL).await.unwrap();
        let (n, tx) = (name.clone(), tx.clone());
        tokio::spawn(async move {
            let g = c.lock(&n).await.unwrap();
            tx.send((i, g, Instant::now())).unwrap();
        });
        until_waiters(&holder, &name, i + 1).await;
    }
    // Long enough for the head's backoff to reach its cap.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let mut released = Instant::now();
    let _: i64 = cmd(&mut r, &["DEL", &name]).await;
    for expected in 0..3 {
        let (i, g, at) = tokio::time::timeout(Duration::from_secs(3), rx.recv()).await.expect("stalled").unwrap();
        assert_eq!(i, expected, "out of queue order");
        let took = at.duration_since(released);
        let bound = Duration::from_millis(if i == 0 { 350 } else { 100 });
        assert!(took < bound, "waiter {i} took {took:?}");
        released = Instant::now();
        assert!(g.unlock().await.unwrap());
    }
}
