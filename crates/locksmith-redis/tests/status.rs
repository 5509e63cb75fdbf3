//! `status` without a name lists the locks of the URL's layout and prefix, found by their
//! fencing counters, and nothing that merely looks like one.

mod common;

use std::time::Duration;

use common::{cmd, raw};
use locksmith_testkit::RedisServer;

fn names(list: &[locksmith::LockStatus]) -> Vec<&str> {
    list.iter().map(|s| s.name.as_str()).collect()
}

/// Plain mode with a prefix: held and free locks are listed with their holders and tokens;
/// counters that are not integers, keys of a foreign type and locks outside the prefix are
/// not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_status_lists_every_lock_under_the_prefix_and_nothing_else() {
    let server = RedisServer::start();
    let url = format!("{}?prefix=app:", server.url());
    let client = locksmith::connect_with_ttl(&url, Duration::from_secs(5)).await.unwrap();
    let held = client.lock("held").await.unwrap();
    let released = client.lock("released").await.unwrap();
    assert!(released.unlock().await.unwrap());
    let other_prefix = locksmith::connect_with_ttl(&server.url(), Duration::from_secs(5)).await.unwrap();
    let elsewhere = other_prefix.lock("elsewhere").await.unwrap();
    let mut r = raw(&server.url()).await;
    let _: () = cmd(&mut r, &["SET", "app:words:fence", "not a number"]).await;
    let _: () = cmd(&mut r, &["SET", "app:hashed:fence", "3"]).await;
    let _: i64 = cmd(&mut r, &["HSET", "app:hashed", "field", "value"]).await;
    let _: i64 = cmd(&mut r, &["RPUSH", "app:listed:fence", "1"]).await;

    let list = client.status(None).await.unwrap();
    assert_eq!(names(&list), ["held", "released"], "{list:?}");
    let holder = list[0].holder.as_ref().expect("held has a holder");
    assert_eq!(Some(holder.token), held.fencing_token());
    assert!(holder.ttl_left.is_some_and(|t| t > Duration::ZERO && t <= Duration::from_secs(5)), "{holder:?}");
    assert!(list[1].holder.is_none(), "{:?}", list[1]);
    assert_eq!(list[1].last_token, 1);
    // Without a prefix the prefixed locks are names like any other (`app:held` is the same key).
    let unprefixed = other_prefix.status(None).await.unwrap();
    assert_eq!(names(&unprefixed), ["app:held", "app:released", "elsewhere"], "{unprefixed:?}");

    held.unlock().await.unwrap();
    elsewhere.unlock().await.unwrap();
    client.close().await;
    other_prefix.close().await;
}

/// Listing pages through `SCAN`: more locks than one page holds are all found, once each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_lists_locks_beyond_one_scan_page() {
    let server = RedisServer::start();
    let mut r = raw(&server.url()).await;
    let mut mset = vec!["MSET".to_string()];
    for i in 0..2_500 {
        mset.extend([format!("lock-{i:04}:fence"), "7".to_string()]);
    }
    let args: Vec<&str> = mset.iter().map(String::as_str).collect();
    let _: () = cmd(&mut r, &args).await;
    let client = locksmith::connect(&server.url()).await.unwrap();
    let list = client.status(None).await.unwrap();
    let expected: Vec<String> = (0..2_500).map(|i| format!("lock-{i:04}")).collect();
    assert_eq!(names(&list), expected.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(list.iter().all(|s| s.last_token == 7 && s.holder.is_none()));
    client.close().await;
}

/// Reentrant (Redisson) mode lists the locks fenced by Redisson's token key, and plain-mode
/// locks on the same server are not mistaken for them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reentrant_status_lists_redisson_fenced_locks_only() {
    let server = RedisServer::start();
    let plain = locksmith::connect(&server.url()).await.unwrap();
    let plain_guard = plain.lock("plain-lock").await.unwrap();
    let client = locksmith::connect(&format!("{}?mode=reentrant", server.url())).await.unwrap();
    let guard = client.lock("job").await.unwrap();
    let list = client.status(None).await.unwrap();
    assert_eq!(names(&list), ["job"], "{list:?}");
    assert_eq!(list[0].holder.as_ref().map(|h| h.token), guard.fencing_token());
    guard.unlock().await.unwrap();
    plain_guard.unlock().await.unwrap();
    client.close().await;
    plain.close().await;
}
