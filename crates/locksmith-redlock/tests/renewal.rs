//! Renewal of holds across TTLs, loss reported when a third party deletes the keys, and status.

mod common;

use std::time::Duration;

const TTL: Duration = Duration::from_secs(1);

/// A hold survives 3×TTL of renewals (another client stays locked out), and `lost()` resolves
/// once a third party deletes its key on a majority (3 of 5); then someone else can take it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_is_renewed_and_reported_lost_when_a_majority_of_keys_vanish() {
    let five = common::Five::start();
    let a = five.client(TTL).await;
    let b = five.client(TTL).await;
    let name = common::unique("renew");
    let g = a.lock_with(&name, common::unfenced()).await.unwrap();
    tokio::time::sleep(TTL * 3).await;
    assert!(g.is_held(), "renewal must keep the hold past 3 TTLs");
    assert!(b.try_lock_with(&name, common::unfenced()).await.unwrap().is_none(), "handed out while renewed");
    assert_eq!(five.holding(&name).await.len(), 5, "renewal keeps the key on every instance");

    for i in 0..3 {
        let mut c = five.raw(i).await;
        let _: i64 = redis::cmd("DEL").arg(&name).query_async(&mut c).await.unwrap();
    }
    tokio::time::timeout(TTL, g.lost()).await.expect("lost() must resolve within one renewal period + slack");
    assert!(!g.is_held());
    let g2 = b
        .lock_with(&name, common::unfenced().timeout(Duration::from_secs(2)))
        .await
        .expect("the lock must be available once the majority of keys is gone");
    assert!(!g.unlock().await.unwrap(), "unlock of a lost hold answers not ours");
    assert!(g2.is_held(), "the stale unlock must not free the new holder");
    assert!(g2.unlock().await.unwrap());
    a.close().await;
    b.close().await;
}

/// `status` names the holder (session, owner) while a majority agrees, with token 0, no waiters,
/// and a TTL left; nothing after the unlock. Listing all locks needs a prefix.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_reports_the_majority_holder() {
    let five = common::Five::start();
    let a = five.client(TTL).await;
    let name = common::unique("status");
    let g = a.lock_with(&name, common::unfenced().owner("worker-7")).await.unwrap();
    let s = a.status(Some(&name)).await.unwrap();
    let holder = s[0].holder.as_ref().expect("a holder");
    assert_eq!(holder.owner, "worker-7");
    assert_eq!(holder.session, g.session_id());
    assert_eq!(holder.token, 0);
    assert!(holder.ttl_left.is_some_and(|t| t > Duration::ZERO && t <= TTL));
    assert_eq!((s[0].waiters, s[0].last_token), (None, 0));
    assert!(matches!(a.status(None).await, Err(locksmith::Error::InvalidArgument(_))));
    assert!(g.unlock().await.unwrap());
    assert!(a.status(Some(&name)).await.unwrap()[0].holder.is_none());
    a.close().await;

    // With a prefix, keys are prefixed and status lists every held lock.
    let url = format!("{}?prefix=app:", five.url());
    let p = locksmith::connect_with_ttl(&url, TTL).await.unwrap();
    let g = p.lock_with("job-1", common::unfenced()).await.unwrap();
    assert_eq!(five.holding("app:job-1").await.len(), 5);
    let all = p.status(None).await.unwrap();
    assert_eq!(all.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(), vec!["job-1"]);
    assert!(g.unlock().await.unwrap());
    p.close().await;
}
