//! Faults against a real etcd: a waiter whose lease expires while it waits (etcd#11456), a
//! third party deleting a held key, and an etcd restart while a lock is held.

use std::time::Duration;

use locksmith::LockOptions;
use locksmith_testkit::EtcdServer;

const TTL: Duration = Duration::from_secs(5);

async fn etcd(server: &EtcdServer) -> locksmith_etcd::raw::Client {
    locksmith_etcd::raw::Client::connect(&[format!("http://{}", server.endpoint())]).await.unwrap()
}

/// etcd#11456: a waiter whose lease is revoked while it waits never reports a grant once the
/// holder releases: its `lock()` fails (session expired) instead of returning a phantom guard.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiter_whose_lease_expired_while_waiting_gets_no_phantom_grant() {
    let server = EtcdServer::start();
    let a = locksmith::connect_with_ttl(&server.url(), TTL).await.unwrap();
    let b = locksmith::connect_with_ttl(&server.url(), TTL).await.unwrap();
    let g = a.lock("phantom").await.unwrap();
    let b_lease = i64::from_str_radix(&b.session_id().await.unwrap(), 16).unwrap();
    let waiter = {
        let b = b.clone();
        tokio::spawn(async move { b.lock("phantom").await })
    };
    for _ in 0..200 {
        if a.status(Some("phantom")).await.unwrap()[0].waiters == Some(1) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(a.status(Some("phantom")).await.unwrap()[0].waiters, Some(1), "the waiter never queued");
    etcd(&server).await.lease_revoke(b_lease).await.unwrap();
    assert!(g.unlock().await.unwrap());
    // Still waiting after 3 s is acceptable: it never claimed the lock.
    if let Ok(joined) = tokio::time::timeout(Duration::from_secs(3), waiter).await {
        let r = joined.unwrap();
        assert!(r.is_err(), "a waiter without a lease reported holding the lock: {r:?}");
    }
    let c = locksmith::connect_with_ttl(&server.url(), TTL).await.unwrap();
    assert!(c.try_lock("phantom").await.unwrap().is_some(), "the lock is free after the holder released");
}

/// A held key deleted by a third party is reported lost at the next keep-alive.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn key_deleted_by_a_third_party_fires_lost() {
    let server = EtcdServer::start();
    let a = locksmith::connect_with_ttl(&server.url(), Duration::from_secs(3)).await.unwrap();
    let g = a.lock("deleted").await.unwrap();
    let key = format!("deleted/{}", a.session_id().await.unwrap());
    let resp = etcd(&server).await.delete(key.as_str()).await.unwrap();
    assert_eq!(resp.deleted, 1, "the key {key} is not in Go's layout");
    tokio::time::timeout(Duration::from_secs(3), g.lost()).await.expect("lost() did not fire");
    assert!(!g.is_held());
    // The session itself is fine: the same client can take the lock again.
    let g2 = a.lock_with("deleted", LockOptions::new().timeout(Duration::from_secs(2))).await.unwrap();
    assert!(g2.token() > g.token());
}

/// kill -9 and restart of etcd (same data dir) while a lock is held: the holder keeps its lock
/// or learns it lost it; never two holders; tokens keep increasing after the restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_restart_while_held_never_gives_two_holders() {
    let mut server = EtcdServer::start();
    let a = locksmith::connect_with_ttl(&server.url(), TTL).await.unwrap();
    let b = locksmith::connect_with_ttl(&server.url(), TTL).await.unwrap();
    let g = a.lock("restart").await.unwrap();
    let t1 = g.token();
    server.kill9();
    tokio::time::sleep(Duration::from_millis(300)).await;
    server.restart();
    let until = tokio::time::Instant::now() + Duration::from_secs(8);
    let mut b_guard = None;
    while tokio::time::Instant::now() < until {
        if let Ok(Some(bg)) = b.try_lock("restart").await {
            assert!(!g.is_held(), "b was granted while a still believed it held the lock");
            b_guard = Some(bg);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let bg = match b_guard {
        Some(bg) => bg,
        None => {
            assert!(g.is_held(), "neither kept nor handed over");
            assert!(g.unlock().await.unwrap(), "a kept hold unlocks as ours");
            b.lock_with("restart", LockOptions::new().timeout(TTL)).await.unwrap()
        }
    };
    assert!(bg.token() > t1, "token {} not above {t1} after the restart", bg.token());
}

/// Bad URLs are refused without I/O; an unreachable cluster answers Unavailable within seconds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_and_unreachable_urls_give_typed_errors() {
    for bad in ["etcd://", "etcd://host:notaport", "etcd://user@host:2379"] {
        let r = locksmith::connect(bad).await;
        assert!(matches!(r, Err(locksmith::Error::InvalidUrl { .. })), "{bad}: {r:?}");
    }
    let port = locksmith_testkit::free_port();
    let c = locksmith::connect(&format!("etcd://127.0.0.1:{port}")).await.unwrap();
    let started = tokio::time::Instant::now();
    let r = c.try_lock("nobody-home").await;
    assert!(matches!(r, Err(locksmith::Error::Unavailable { .. })), "{r:?}");
    assert!(started.elapsed() < Duration::from_secs(5), "took {:?}", started.elapsed());
}

/// etcd#10756: holds of one client share one lease (one Go key per lease and name), yet two
/// waiting acquisitions through the same client are exclusive and each gets a fresh token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquisitions_sharing_one_lease_are_exclusive() {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::Arc;
    let server = EtcdServer::start();
    let a = locksmith::connect_with_ttl(&server.url(), TTL).await.unwrap();
    let inside = Arc::new(AtomicBool::new(false));
    let last = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let (a, inside, last) = (a.clone(), inside.clone(), last.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..5 {
                let g = a.lock("shared-lease").await.unwrap();
                assert!(!inside.swap(true, Ordering::SeqCst), "two holders through one lease");
                assert!(g.token() > last.swap(g.token(), Ordering::SeqCst), "token did not increase");
                tokio::time::sleep(Duration::from_millis(5)).await;
                inside.store(false, Ordering::SeqCst);
                assert!(g.unlock().await.unwrap());
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let s = a.status(Some("shared-lease")).await.unwrap();
    assert!(s[0].holder.is_none() && s[0].waiters == Some(0), "{s:?}");
}
