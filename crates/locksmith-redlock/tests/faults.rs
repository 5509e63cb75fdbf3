//! Instance failures: killed, frozen (SIGSTOP) and restarted-empty Redis masters.

mod common;

use std::time::Duration;

use locksmith::{Error, LockOptions};
use tokio::time::Instant;

const TTL: Duration = Duration::from_secs(1);

/// With 2 of 5 instances killed (kill -9) a client still locks, and unlocks on the majority.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_of_five_killed_still_lock_and_unlock() {
    let mut five = common::Five::start();
    five.servers[1].kill9();
    five.servers[3].kill9();
    let a = five.client(TTL).await;
    let b = five.client(TTL).await;
    let name = common::unique("two-down");
    let g = a.try_lock_with(&name, common::unfenced()).await.unwrap().expect("free lock, 3 of 5 up");
    assert_eq!(five.holding_on(&name, &[0, 2, 4]).await, vec![0, 2, 4]);
    assert!(b.try_lock_with(&name, common::unfenced()).await.unwrap().is_none(), "a second holder");
    assert!(g.unlock().await.unwrap(), "unlock with 3 of 5 up must confirm");
    assert!(five.holding_on(&name, &[0, 2, 4]).await.is_empty(), "unlock left keys");
    let g = b.lock_with(&name, common::unfenced().timeout(Duration::from_secs(2))).await.unwrap();
    assert!(g.unlock().await.unwrap());
    a.close().await;
    b.close().await;
}

/// With 3 of 5 killed, a session open before fails at once with Unavailable naming "2 of 5 …
/// need 3" on try_lock, and its waiting lock with a 1 s timeout gives Timeout after about 1 s;
/// a new client's waiting lock gives up at once (Unavailable, exit 69 in the CLI) instead of
/// waiting for instances that are not there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_of_five_killed_is_unavailable_not_a_hang() {
    let mut five = common::Five::start();
    let a = five.client(TTL).await;
    let warm = common::unique("warm");
    a.lock_with(&warm, common::unfenced()).await.unwrap().unlock().await.unwrap();
    for i in [0, 2, 4] {
        five.servers[i].kill9();
    }
    let name = common::unique("three-down");
    let started = Instant::now();
    match a.try_lock_with(&name, common::unfenced()).await {
        Err(Error::Unavailable { message, .. }) => {
            assert!(message.contains("only 2 of 5 instances reachable, need 3"), "{message}");
        }
        other => panic!("expected Unavailable, got {other:?}"),
    }
    assert!(started.elapsed() < Duration::from_millis(500), "try_lock took {:?}", started.elapsed());
    let started = Instant::now();
    let r = a.lock_with(&name, common::unfenced().timeout(Duration::from_secs(1))).await;
    assert!(matches!(r, Err(Error::Timeout)), "expected Timeout, got {r:?}");
    let took = started.elapsed();
    assert!(took >= Duration::from_secs(1) && took < Duration::from_millis(1300), "lock_with took {took:?}");
    assert!(five.holding_on(&name, &[1, 3]).await.is_empty(), "failed attempts left keys on the live instances");
    a.close().await;

    let fresh = five.client(TTL).await;
    let started = Instant::now();
    match fresh.lock_with(&name, common::unfenced().timeout(Duration::from_secs(30))).await {
        Err(Error::Unavailable { message, .. }) => {
            assert!(message.contains("only 2 of 5 instances reachable, need 3"), "{message}");
        }
        other => panic!("expected Unavailable, got {other:?}"),
    }
    assert!(started.elapsed() < Duration::from_millis(1_000), "lock_with took {:?}", started.elapsed());
    fresh.close().await;
}

/// With 2 of 5 frozen (SIGSTOP) a client locks within 1 s, keeps the hold across 2.5 TTLs of
/// renewals, and unlocks; the frozen instances are resumed before the test ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_of_five_paused_still_lock_within_a_bounded_time() {
    let five = common::Five::start();
    let a = five.client(TTL).await;
    let b = five.client(TTL).await;
    // Connect first, so the frozen instances also hold live connections that stop answering.
    let warm = common::unique("warm");
    a.lock_with(&warm, common::unfenced()).await.unwrap().unlock().await.unwrap();
    five.servers[0].pause();
    five.servers[4].pause();
    let name = common::unique("paused");
    let started = Instant::now();
    let g = a.lock_with(&name, common::unfenced().timeout(Duration::from_secs(3))).await;
    let took = started.elapsed();
    let g = g.unwrap();
    assert!(took < Duration::from_secs(1), "locking with 2 of 5 frozen took {took:?}");
    // A fresh client must not stall on connecting to the frozen ones either.
    let started = Instant::now();
    assert!(b.try_lock_with(&name, common::unfenced()).await.unwrap().is_none(), "a second holder");
    assert!(started.elapsed() < Duration::from_secs(1), "try_lock took {:?}", started.elapsed());
    tokio::time::sleep(TTL * 5 / 2).await;
    assert!(g.is_held(), "renewal on 3 of 5 must keep the hold");
    assert!(g.unlock().await.unwrap());
    five.servers[0].resume();
    five.servers[4].resume();
    a.close().await;
    b.close().await;
}

/// Restart-empty: A holds (TTL 2 s); one instance with A's key is killed and restarted empty;
/// B's try_lock still fails (A keeps a majority, renewals go on); after A unlocks, B gets it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_restarted_empty_does_not_create_a_second_holder() {
    let ttl = Duration::from_secs(2);
    let mut five = common::Five::start();
    let a = five.client(ttl).await;
    let b = five.client(ttl).await;
    let name = common::unique("restart");
    let g = a.lock_with(&name, common::unfenced().timeout(Duration::from_secs(2))).await.unwrap();
    let holding = five.holding(&name).await;
    assert!(holding.len() >= 3, "A holds on {holding:?}");
    let victim = holding[0];
    five.servers[victim].kill9();
    five.servers[victim].restart();
    assert!(five.get(victim, &name).await.is_none(), "the restarted instance must be empty");
    for _ in 0..5 {
        assert!(b.try_lock_with(&name, common::unfenced()).await.unwrap().is_none(), "two holders");
        tokio::time::sleep(ttl / 4).await;
    }
    assert!(g.is_held(), "A must keep its hold across renewals");
    assert!(g.unlock().await.unwrap(), "A's unlock must confirm on a majority");
    let g = b.try_lock_with(&name, common::unfenced()).await.unwrap().expect("free after A's unlock");
    assert!(g.unlock().await.unwrap());
    a.close().await;
    b.close().await;
}

/// A waiting `lock()` dropped mid-way (timeout) leaves no vote of its own on any instance.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timed_out_waiter_leaves_nothing_on_the_instances() {
    let five = common::Five::start();
    let b = five.client(TTL).await;
    let name = common::unique("drop");
    // A third party holds a majority (0, 1, 2), so B's rounds keep winning the votes of 3 and 4
    // and must give them back.
    for i in 0..3 {
        let mut c = five.raw(i).await;
        let _: () =
            redis::cmd("SET").arg(&name).arg("third-party").arg("PX").arg(10_000).query_async(&mut c).await.unwrap();
    }
    let r = b.lock_with(&name, LockOptions::new().allow_unfenced().timeout(Duration::from_millis(300))).await;
    assert!(matches!(r, Err(Error::Timeout)), "{r:?}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    for i in 3..5 {
        assert_eq!(five.get(i, &name).await, None, "instance {i} kept a vote of the abandoned waiter");
    }
    for i in 0..3 {
        assert_eq!(five.get(i, &name).await.as_deref(), Some("third-party"), "B touched someone else's key");
    }
    b.close().await;
}

/// A key of another type left by another tool on a majority makes the lock busy (no error, no
/// hang, nothing overwritten); on a minority the lock is still granted and released.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_type_keys_count_as_taken_votes() {
    let five = common::Five::start();
    // Nothing here waits for an expiry: a 5 s TTL gives each instance 250 ms to answer (TTL/10
    // capped), not the 100 ms of a 1 s TTL that a loaded machine can miss on two of the four
    // free instances (a missing vote each, and then no quorum).
    let a = five.client(Duration::from_secs(5)).await;
    let name = common::unique("wrongtype");
    for i in 0..3 {
        let mut c = five.raw(i).await;
        let _: i64 = redis::cmd("HSET").arg(&name).arg("f").arg("v").query_async(&mut c).await.unwrap();
    }
    assert!(a.try_lock_with(&name, common::unfenced()).await.unwrap().is_none());
    // The lost round's votes on the two free instances are gone when try_lock returns: left
    // behind, they would make the next look (below) find the lock taken.
    assert_eq!(five.holding_on(&name, &[3, 4]).await, Vec::<usize>::new(), "a busy try_lock left its votes");
    let s = a.status(Some(&name)).await.unwrap();
    assert!(s[0].holder.is_none());
    for i in 0..2 {
        let mut c = five.raw(i).await;
        let _: i64 = redis::cmd("DEL").arg(&name).query_async(&mut c).await.unwrap();
    }
    let g = a.try_lock_with(&name, common::unfenced()).await.unwrap().expect("granted on 4 of 5");
    assert!(g.unlock().await.unwrap());
    let mut c = five.raw(2).await;
    let t: String = redis::cmd("TYPE").arg(&name).query_async(&mut c).await.unwrap();
    assert_eq!(t, "hash", "the foreign key must be left alone");
    a.close().await;
}
