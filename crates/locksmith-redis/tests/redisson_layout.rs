//! Reentrant mode keeps Redisson's `RLock` layout, checked at the script level with raw
//! commands playing the Java side.

mod common;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use common::{cmd, raw, unique};
use futures_util::StreamExt;
use locksmith::LockOptions;
use locksmith_testkit::RedisServer;

const TTL: Duration = Duration::from_secs(2);

/// A locksmith hold is one hash field `<session-uuid>:<owner>` = "1" with a TTL, and its token
/// is Redisson's `RFencedLock` counter.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_is_one_redisson_field_with_count_one() {
    let server = RedisServer::start();
    let mut r = raw(&server.url()).await;
    let client = locksmith::connect_with_ttl(&format!("{}?mode=reentrant", server.url()), TTL).await.unwrap();
    let name = unique("layout");
    let g = client.lock_with(&name, LockOptions::new().owner("worker-7")).await.unwrap();
    let fields: HashMap<String, String> = cmd(&mut r, &["HGETALL", &name]).await;
    let expected = format!("{}:worker-7", client.session_id().await.unwrap());
    assert_eq!(fields, HashMap::from([(expected, "1".to_string())]));
    let pttl: i64 = cmd(&mut r, &["PTTL", &name]).await;
    assert!(pttl > 0 && pttl <= TTL.as_millis() as i64, "pttl {pttl}");
    let token: u64 = cmd(&mut r, &["GET", &format!("redisson_lock_token:{{{name}}}")]).await;
    assert_eq!(g.token(), token);
    assert!(g.unlock().await.unwrap());
    let exists: i64 = cmd(&mut r, &["EXISTS", &name]).await;
    assert_eq!(exists, 0, "unlock must delete the hash");
}

/// A hash held by a "Java" field (HINCRBY + PEXPIRE, as Redisson does) makes try_lock answer
/// None and is left untouched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redisson_holder_excludes_locksmith() {
    let server = RedisServer::start();
    let mut r = raw(&server.url()).await;
    let client = locksmith::connect_with_ttl(&format!("{}?mode=reentrant", server.url()), TTL).await.unwrap();
    let name = unique("java-holds");
    let _: i64 = cmd(&mut r, &["HINCRBY", &name, "8743c9c0-0795-4907-87fd-6c719a6b4586:1", "1"]).await;
    let _: i64 = cmd(&mut r, &["PEXPIRE", &name, "10000"]).await;
    assert!(client.try_lock(&name).await.unwrap().is_none(), "granted over a Redisson holder");
    let fields: HashMap<String, String> = cmd(&mut r, &["HGETALL", &name]).await;
    assert_eq!(fields.len(), 1);
    assert_eq!(fields.values().next().map(String::as_str), Some("1"));
}

/// A locksmith waiter is subscribed to `redisson_lock__channel:{name}` and wakes promptly when
/// the Java side unlocks (DEL + PUBLISH 0), long before the key's 10 s TTL, round after round.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_wakes_on_a_redisson_unlock_message() {
    let server = RedisServer::start();
    let mut r = raw(&server.url()).await;
    let url = format!("{}?mode=reentrant", server.url());
    let client = locksmith::connect_with_ttl(&url, TTL).await.unwrap();
    let name = unique("java-unlocks");
    let channel = format!("redisson_lock__channel:{{{name}}}");
    for round in 0..3 {
        let _: i64 = cmd(&mut r, &["HINCRBY", &name, "java-uuid:1", "1"]).await;
        let _: i64 = cmd(&mut r, &["PEXPIRE", &name, "10000"]).await;
        let c = client.clone();
        let n = name.clone();
        let waiter = tokio::spawn(async move { (c.lock(&n).await, Instant::now()) });
        // Long enough for the fallback timer to reach its 200 ms cap.
        tokio::time::sleep(Duration::from_millis(1000)).await;
        let subs: (String, i64) = cmd(&mut r, &["PUBSUB", "NUMSUB", &channel]).await;
        assert_eq!(subs.1, 1, "the waiter is not subscribed to Redisson's channel");
        let released = Instant::now();
        let _: i64 = cmd(&mut r, &["DEL", &name]).await;
        let _: i64 = cmd(&mut r, &["PUBLISH", &channel, "0"]).await;
        let (g, granted) = tokio::time::timeout(Duration::from_secs(1), waiter).await.unwrap().unwrap();
        let g = g.unwrap();
        let waited = granted.duration_since(released);
        assert!(waited < Duration::from_millis(100), "round {round}: woke after {waited:?}");
        assert!(g.unlock().await.unwrap());
    }
    client.close().await;
}

/// A locksmith unlock publishes Redisson's unlock message (0) on Redisson's channel, so Java
/// waiters wake too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_locksmith_unlock_wakes_redisson_waiters() {
    let server = RedisServer::start();
    let client = locksmith::connect_with_ttl(&format!("{}?mode=reentrant", server.url()), TTL).await.unwrap();
    let name = unique("rust-unlocks");
    let mut pubsub = redis::Client::open(server.url()).unwrap().get_async_pubsub().await.unwrap();
    pubsub.subscribe(format!("redisson_lock__channel:{{{name}}}")).await.unwrap();
    let g = client.lock(&name).await.unwrap();
    assert!(g.unlock().await.unwrap());
    let msg = tokio::time::timeout(Duration::from_secs(2), pubsub.on_message().next()).await.unwrap().unwrap();
    assert_eq!(msg.get_payload::<String>().unwrap(), "0");
}
