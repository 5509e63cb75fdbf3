//! What memcached can do to a held lock — evict it, forget it in a restart, or let another
//! tool overwrite it — is reported through the holder's loss signal at its next renewal, and a
//! value that is not ours is never renewed or deleted. A plain `add` (the usual memcached lock
//! recipe) and a locksmith lock exclude each other.

mod common;

use std::time::Duration;

use locksmith::Error;
use locksmith_testkit::MemcachedServer;
use tokio::time::Instant;

/// Renewals every second: the filler batches have time to push the key out between two.
const EVICTION_TTL: Duration = Duration::from_secs(3);
const TTL: Duration = Duration::from_secs(1);

/// With 2 MiB of item memory, filler items of the lock item's size evict the held key; the
/// holder's loss signal fires at its next renewal, its unlock answers "not ours", and another
/// client can then take the lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_evicted_lock_is_reported_lost_at_the_next_renewal() {
    let server = MemcachedServer::start_with_memory(2);
    let a = common::client(&server, EVICTION_TTL).await;
    let name = common::unique("evict");
    let g = a.lock_with(&name, common::unfenced()).await.unwrap();
    let mut raw = common::Raw::connect(&server).await;
    let (value, _) = raw.get(&name).await.expect("the held key");
    // Fill until the key is gone. A renewal between two batches moves the key to the head of
    // the LRU again, so keep going (with more each time) until a check finds it evicted.
    let (mut written, mut batch) = (0, 20_000);
    let started = Instant::now();
    while raw.get(&name).await.is_some() {
        assert!(started.elapsed() < Duration::from_secs(60), "{written} fillers did not evict the held key");
        raw.fill(written, batch, name.len(), value.len()).await;
        written += batch;
        batch = (batch * 2).min(200_000);
    }
    let evicted = Instant::now();
    // The next renewal is at most TTL/3 away (plus its two round trips on a loaded machine).
    tokio::time::timeout(EVICTION_TTL, g.lost()).await.expect("lost() must fire at the next renewal");
    eprintln!("evicted after {written} fillers; loss signalled {:?} later", evicted.elapsed());
    assert!(!g.is_held());
    assert!(!g.unlock().await.unwrap(), "unlock of an evicted hold answers not ours");
    let b = common::client(&server, TTL).await;
    let g2 = b.try_lock_with(&name, common::unfenced()).await.unwrap().expect("the evicted lock is free");
    assert!(g2.unlock().await.unwrap());
    a.close().await;
    b.close().await;
}

/// A restart empties the server: the holder's loss signal fires, and the lock is free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_restart_is_reported_as_loss() {
    let mut server = MemcachedServer::start();
    let a = common::client(&server, TTL).await;
    let name = common::unique("restart");
    let g = a.lock_with(&name, common::unfenced()).await.unwrap();
    server.restart();
    tokio::time::timeout(TTL * 2, g.lost()).await.expect("lost() must fire after the restart");
    assert!(!g.unlock().await.unwrap(), "unlock after a restart answers not ours");
    let b = common::client(&server, TTL).await;
    let g2 = b.try_lock_with(&name, common::unfenced()).await.unwrap().expect("the restarted server is empty");
    assert!(g2.unlock().await.unwrap());
    a.close().await;
    b.close().await;
}

/// Another tool overwrites the held key: the holder learns of the loss at its next renewal,
/// and neither that renewal nor its unlock touches the other value (same value, same expiry).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_value_is_never_renewed_or_deleted() {
    let server = MemcachedServer::start();
    let a = common::client(&server, TTL).await;
    let name = common::unique("foreign");
    let g = a.lock_with(&name, common::unfenced()).await.unwrap();
    let mut raw = common::Raw::connect(&server).await;
    raw.set(&name, "someone-else", 60).await;
    tokio::time::timeout(TTL, g.lost()).await.expect("lost() must fire at the next renewal");
    assert!(!g.unlock().await.unwrap(), "unlock of an overwritten hold answers not ours");
    let (value, ttl) = raw.get(&name).await.expect("the foreign value must stay");
    assert_eq!(value, "someone-else");
    assert!(ttl > 55 && ttl <= 60, "the foreign item's expiry was changed: {ttl} s left");
    // Nor does a waiting lock take it over: it is busy until the foreign holder deletes it.
    let b = common::client(&server, TTL).await;
    assert!(b.try_lock_with(&name, common::unfenced()).await.unwrap().is_none());
    let s = b.status(Some(&name)).await.unwrap();
    let holder = s[0].holder.as_ref().expect("the foreign holder is shown");
    assert_eq!((holder.owner.as_str(), holder.session.as_str()), ("someone-else", ""));
    a.close().await;
    b.close().await;
}

/// The text protocol's `add KEY 0 TTL` (pymemcache's `client.add`, the usual lock recipe) and a
/// locksmith lock on the same key exclude each other, both ways.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_add_and_a_locksmith_lock_exclude_each_other() {
    let server = MemcachedServer::start();
    let mut raw = common::Raw::connect(&server).await;
    let a = common::client(&server, TTL).await;
    let name = common::unique("plain-add");

    assert!(raw.add(&name, "recipe-token", 10).await, "the recipe takes the free lock");
    assert!(a.try_lock_with(&name, common::unfenced()).await.unwrap().is_none(), "locksmith ignored the recipe's key");
    // A waiting locksmith client gets it once the recipe deletes its key.
    let waiter = {
        let a = a.clone();
        let name = name.clone();
        tokio::spawn(async move { a.lock_with(&name, common::unfenced().timeout(Duration::from_secs(5))).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiter.is_finished(), "the waiter got a lock the recipe holds");
    assert!(raw.delete(&name).await);
    let g = waiter.await.unwrap().unwrap();

    assert!(!raw.add(&name, "recipe-token", 10).await, "the recipe took a lock locksmith holds");
    tokio::time::sleep(TTL * 2).await;
    assert!(!raw.add(&name, "recipe-token", 10).await, "the recipe took a renewed lock");
    assert!(g.unlock().await.unwrap());
    assert!(raw.add(&name, "recipe-token", 10).await, "the recipe cannot take the released lock");
    a.close().await;
}

/// `status` names the holder (session, owner), token 0, the seconds memcached has left and no
/// waiter count; names with spaces work; listing every lock is refused with a clear message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_reports_the_holder_and_cannot_list() {
    let server = MemcachedServer::start();
    let a = common::client(&server, TTL).await;
    let name = format!("{} with spaces", common::unique("status"));
    let g = a.lock_with(&name, common::unfenced().owner("worker-7")).await.unwrap();
    let s = a.status(Some(&name)).await.unwrap();
    let holder = s[0].holder.as_ref().expect("a holder");
    assert_eq!((holder.owner.as_str(), holder.session.clone()), ("worker-7", g.session_id()));
    assert_eq!(holder.token, 0);
    // A 1 s TTL is written as 2 whole seconds (see the crate docs).
    assert!(holder.ttl_left.is_some_and(|t| t > Duration::ZERO && t <= Duration::from_secs(2)), "{holder:?}");
    assert_eq!((s[0].waiters, s[0].last_token), (None, 0));
    let b = common::client(&server, TTL).await;
    assert!(b.try_lock_with(&name, common::unfenced()).await.unwrap().is_none(), "a second holder");
    assert!(g.unlock().await.unwrap());
    assert!(a.status(Some(&name)).await.unwrap()[0].holder.is_none());
    assert!(matches!(a.status(None).await, Err(Error::InvalidArgument(m)) if m.contains("name one lock")));
    // With a prefix, the key is prefixed.
    let p = locksmith::connect_with_ttl(&format!("{}?prefix=app:", server.url()), TTL).await.unwrap();
    let g = p.lock_with("job-1", common::unfenced()).await.unwrap();
    let mut raw = common::Raw::connect(&server).await;
    assert!(raw.get("app:job-1").await.is_some());
    assert!(g.unlock().await.unwrap());
    a.close().await;
    b.close().await;
    p.close().await;
}

/// A server that is not there: `try_lock` is Unavailable at once, naming the address.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_server_is_unavailable_not_a_hang() {
    let url = format!("memcached://127.0.0.1:{}", locksmith_testkit::free_port());
    let a = locksmith::connect_with_ttl(&url, TTL).await.unwrap();
    let started = Instant::now();
    let r = a.try_lock_with("x", common::unfenced()).await;
    assert!(matches!(&r, Err(Error::Unavailable { message, .. }) if message.contains("127.0.0.1")), "{r:?}");
    assert!(started.elapsed() < Duration::from_secs(1));
    a.close().await;
}

/// A renewal is two round trips. With every answer 200 ms away (100 ms each way, through a
/// fault proxy) a renewal takes about 400 ms, more than the third of a 1 s lease the engine
/// gives a renewal of a driver that does not bound its own calls: the holder still keeps its
/// lock across three TTLs, because memcached's calls have their own limits (a third of the TTL
/// each) and the engine waits for the answer until the hold's deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_keeps_its_lock_through_slow_renewals() {
    let server = MemcachedServer::start();
    let upstream = server.addr().parse().unwrap();
    let proxy = locksmith_faultproxy::FaultProxy::start(upstream).await.unwrap();
    proxy.set_latency(Duration::from_millis(100));
    let slow = locksmith::connect_with_ttl(&format!("memcached://{}", proxy.local_addr()), TTL).await.unwrap();
    let name = common::unique("slow");
    let g = slow.lock_with(&name, common::unfenced()).await.unwrap();
    tokio::time::sleep(TTL * 3).await;
    assert!(g.is_held(), "slow renewals lost the hold");
    let other = common::client(&server, TTL).await;
    assert!(other.try_lock_with(&name, common::unfenced()).await.unwrap().is_none(), "a second holder");
    // Renewals back to back keep the one connection busy: the unlock (two more round trips,
    // bounded by the TTL) runs once the path is fast again.
    proxy.set_latency(Duration::ZERO);
    assert!(g.unlock().await.unwrap());
    other.close().await;
    slow.close().await;
}
