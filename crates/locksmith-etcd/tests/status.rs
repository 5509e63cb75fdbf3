//! `status` without a name lists the locks that have a holder or a waiter, found by the shape
//! of Go's `concurrency.Mutex` keys, and nothing that merely looks like one.

use std::time::Duration;

use locksmith_testkit::EtcdServer;

const TTL: Duration = Duration::from_secs(5);

/// Held locks (names with slashes too) are listed with holder, token and waiters; released
/// locks, keys without a lease and keys whose suffix is not their own lease are not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_lists_held_and_awaited_locks_and_nothing_else() {
    let server = EtcdServer::start();
    let a = locksmith::connect_with_ttl(&server.url(), TTL).await.unwrap();
    let b = locksmith::connect_with_ttl(&server.url(), TTL).await.unwrap();
    let nightly = a.lock("jobs/nightly").await.unwrap();
    let other = a.lock("other").await.unwrap();
    let released = b.lock("released").await.unwrap();
    assert!(released.unlock().await.unwrap());
    let waiter = {
        let b = b.clone();
        tokio::spawn(async move { b.lock("jobs/nightly").await })
    };
    let mut raw = locksmith_etcd::raw::Client::connect(&[format!("http://{}", server.endpoint())]).await.unwrap();
    raw.put("config/abc", "no lease", 0).await.unwrap();
    let lease = raw.lease_grant(30).await.unwrap().id;
    raw.put("leased/ffff", "", lease).await.unwrap();

    let mut list = a.status(None).await.unwrap();
    for _ in 0..200 {
        if list.first().is_some_and(|s| s.waiters == Some(1)) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
        list = a.status(None).await.unwrap();
    }
    let names: Vec<&str> = list.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["jobs/nightly", "other"], "{list:?}");
    assert_eq!(list[0].waiters, Some(1), "{list:?}");
    assert_eq!(list[0].holder.as_ref().map(|h| h.token), Some(nightly.token()));
    assert!(list[0].last_token > nightly.token(), "the waiter's key is newer: {list:?}");
    assert_eq!(list[1].holder.as_ref().map(|h| h.token), Some(other.token()));
    assert!(list[1].holder.as_ref().is_some_and(|h| h.ttl_left.is_some_and(|t| t > Duration::ZERO && t <= TTL)));
    // The single-lock answer agrees with the listing (the TTL left may have ticked).
    let single = a.status(Some("other")).await.unwrap().remove(0);
    let who = |s: &locksmith::LockStatus| s.holder.as_ref().map(|h| (h.session.clone(), h.owner.clone(), h.token));
    assert_eq!((who(&single), single.waiters, single.last_token), (who(&list[1]), list[1].waiters, list[1].last_token));

    assert!(nightly.unlock().await.unwrap());
    let next = waiter.await.unwrap().unwrap();
    assert!(next.unlock().await.unwrap());
    other.unlock().await.unwrap();
    a.close().await;
    b.close().await;
}

/// Go's layout keys lock `jobs` by the prefix `jobs/`, which also covers the keys of lock
/// `jobs/nightly`: as with `etcdctl lock`, `jobs` waits for `jobs/nightly`'s holder (not the
/// other way round), and `status jobs` names the blocking key as the holder.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_waits_for_holders_of_locks_below_it_and_status_names_them() {
    let server = EtcdServer::start();
    let a = locksmith::connect_with_ttl(&server.url(), TTL).await.unwrap();
    let b = locksmith::connect_with_ttl(&server.url(), TTL).await.unwrap();
    let nightly = a.lock("jobs/nightly").await.unwrap();
    assert!(b.try_lock("jobs").await.unwrap().is_none(), "jobs must wait for jobs/nightly (Go's prefix)");
    let s = b.status(Some("jobs")).await.unwrap().remove(0);
    let owner = s.holder.as_ref().map(|h| h.owner.clone()).unwrap_or_default();
    assert!(owner.starts_with("jobs/nightly/"), "status should name the blocking key: {s:?}");
    let jobs = a.try_lock("jobs/other").await.unwrap();
    assert!(jobs.is_some(), "a sibling below jobs/ is its own lock");
    assert!(nightly.unlock().await.unwrap());
    drop(jobs);
}
