//! Bad input from the outside world: keys of a foreign type, unreachable servers.

mod common;

use std::time::Duration;

use common::{cmd, raw, unique};
use locksmith::{Error, LockOptions};
use locksmith_testkit::RedisServer;

async fn refuses_a_list(url: &str) {
    let server_url = url.split('?').next().unwrap().to_string();
    let mut r = raw(&server_url).await;
    let name = unique("a-list");
    let _: i64 = cmd(&mut r, &["LPUSH", &name, "x"]).await;
    let client = locksmith::connect_with_ttl(url, Duration::from_secs(2)).await.unwrap();
    let got = client.try_lock(&name).await;
    match &got {
        Err(Error::Backend(msg)) => assert!(msg.contains("holds a list, not a lock"), "{msg}"),
        other => panic!("expected a typed backend error, got {other:?}"),
    }
    // A waiting lock gives the same error rather than waiting forever.
    let waited = client.lock_with(&name, LockOptions::new().timeout(Duration::from_secs(2))).await;
    assert!(matches!(waited, Err(Error::Backend(_))), "{waited:?}");
    let status = client.status(Some(&name)).await;
    assert!(matches!(status, Err(Error::Backend(_))), "{status:?}");
    let items: Vec<String> = cmd(&mut r, &["LRANGE", &name, "0", "-1"]).await;
    assert_eq!(items, vec!["x".to_string()], "the list was changed");
    let ttl: i64 = cmd(&mut r, &["PTTL", &name]).await;
    assert_eq!(ttl, -1, "the list got an expiry");
    client.close().await;
}

/// Plain mode: a list under the lock's key is a typed error, and the list is left unchanged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_mode_refuses_a_foreign_type_and_changes_nothing() {
    let server = RedisServer::start();
    refuses_a_list(&server.url()).await;
}

/// Reentrant mode: a list (or a string) under the lock's key is a typed error and unchanged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reentrant_mode_refuses_a_foreign_type_and_changes_nothing() {
    let server = RedisServer::start();
    let url = format!("{}?mode=reentrant", server.url());
    refuses_a_list(&url).await;
    let mut r = raw(&server.url()).await;
    let name = unique("a-string");
    let _: () = cmd(&mut r, &["SET", &name, "hello"]).await;
    let client = locksmith::connect_with_ttl(&url, Duration::from_secs(2)).await.unwrap();
    match client.try_lock(&name).await {
        Err(Error::Backend(msg)) => assert!(msg.contains("holds a string"), "{msg}"),
        other => panic!("expected a typed backend error, got {other:?}"),
    }
    let v: String = cmd(&mut r, &["GET", &name]).await;
    assert_eq!(v, "hello");
}

/// A fencing counter that is not an integer is a typed error and no hold is left behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_fence_counter_is_a_typed_error_and_takes_no_hold() {
    let server = RedisServer::start();
    let mut r = raw(&server.url()).await;
    let name = unique("bad-fence");
    let _: () = cmd(&mut r, &["SET", &format!("{name}:fence"), "not-a-number"]).await;
    let client = locksmith::connect_with_ttl(&server.url(), Duration::from_secs(2)).await.unwrap();
    let got = client.try_lock(&name).await;
    assert!(matches!(&got, Err(Error::Backend(m)) if m.contains("fencing counter")), "{got:?}");
    let exists: i64 = cmd(&mut r, &["EXISTS", &name]).await;
    assert_eq!(exists, 0, "a hold was left behind");
}

/// An unreachable server gives `Unavailable` within a few seconds, and no panic.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_server_is_unavailable_quickly() {
    let url = format!("redis://127.0.0.1:{}", locksmith_testkit::free_port());
    let client = locksmith::connect_with_ttl(&url, Duration::from_secs(2)).await.unwrap();
    let started = std::time::Instant::now();
    let got = client.try_lock("x").await;
    assert!(matches!(got, Err(Error::Unavailable { .. })), "{got:?}");
    let got = client.lock_with("x", LockOptions::new().timeout(Duration::from_secs(10))).await;
    assert!(matches!(got, Err(Error::Unavailable { .. })), "{got:?}");
    assert!(started.elapsed() < Duration::from_secs(8), "took {:?}", started.elapsed());
}

/// Bad URLs are `InvalidUrl`, and `describe` never shows the password.
#[test]
fn bad_urls_are_typed_and_passwords_stay_hidden() {
    for url in ["redis://", "redis://h:1?mode=nope", "redis://h:1?x=1"] {
        assert!(matches!(locksmith::backend(url), Err(Error::InvalidUrl { .. })), "{url}");
    }
    let b = locksmith::backend("redis://alice:s3cret@127.0.0.1:6379/3").unwrap();
    assert!(!b.describe().contains("s3cret"), "{}", b.describe());
}

/// Plain mode: a name ending in `:fence` would be another lock's fencing counter, so it is
/// refused at once (waiting or not), and the counter it names is left unchanged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_mode_refuses_a_name_that_is_another_locks_counter() {
    let server = RedisServer::start();
    let client = locksmith::connect_with_ttl(&server.url(), Duration::from_secs(2)).await.unwrap();
    let owner = client.lock("report").await.unwrap();
    for attempt in [client.try_lock("report:fence").await.map(|_| ()), client.lock("report:fence").await.map(|_| ())] {
        match attempt {
            Err(Error::InvalidArgument(msg)) => assert!(msg.contains("reserved for fencing counters"), "{msg}"),
            other => panic!("expected InvalidArgument, got {other:?}"),
        }
    }
    let mut r = raw(&server.url()).await;
    let counter: u64 = cmd(&mut r, &["GET", "report:fence"]).await;
    assert_eq!(Some(counter), owner.fencing_token());
    // Reentrant mode keeps its counters elsewhere: the name is an ordinary lock there.
    let reentrant = locksmith::connect(&format!("{}?mode=reentrant", server.url())).await.unwrap();
    assert!(reentrant.try_lock("other:fence").await.unwrap().is_some());
    owner.unlock().await.unwrap();
}
