//! `?mode=rwlock` keeps Redisson's `RReadWriteLock` layout, checked at the script level: the
//! keys locksmith writes are read back as Redisson writes them, and raw commands play the Java
//! side (a hash with `mode`, Redisson's field names and timeout keys, its unlock messages on
//! `redisson_rwlock:{name}`).

mod common;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use common::{cmd, raw, unique};
use futures_util::StreamExt;
use locksmith::LockOptions;
use locksmith_testkit::RedisServer;

const TTL: Duration = Duration::from_secs(2);

async fn rwlock_client(server: &RedisServer) -> locksmith::Client {
    locksmith::connect_with_ttl(&format!("{}?mode=rwlock", server.url()), TTL).await.unwrap()
}

/// Leaves the hash a Java `rwLock.writeLock().lock()` leaves: `mode` = `write` and the
/// writer's `<uuid>:<thread>:write` = 1, with the watchdog's 30 s lease.
async fn java_writer(r: &mut redis::aio::MultiplexedConnection, name: &str) {
    let _: i64 = cmd(r, &["HSET", name, "mode", "write", "8743c9c0-0795-4907-87fd-6c719a6b4586:1:write", "1"]).await;
    let _: i64 = cmd(r, &["PEXPIRE", name, "30000"]).await;
}

/// Leaves what a Java `rwLock.readLock().lock()` leaves (with `lease_ms`): `mode` = `read`, the
/// reader's `<uuid>:<thread>` = 1 and its timeout key `{name}:<uuid>:<thread>:rwlock_timeout:1`.
async fn java_reader(r: &mut redis::aio::MultiplexedConnection, name: &str, thread: u32, lease_ms: u64) -> String {
    let field = format!("5c1ad2a4-7f7e-4c41-9d0e-2f8f3f6a1b77:{thread}");
    let lease = lease_ms.to_string();
    let _: i64 = cmd(r, &["HSET", name, "mode", "read"]).await;
    let _: i64 = cmd(r, &["HINCRBY", name, &field, "1"]).await;
    let _: () = cmd(r, &["SET", &format!("{{{name}}}:{field}:rwlock_timeout:1"), "1", "PX", &lease]).await;
    let _: i64 = cmd(r, &["PEXPIRE", name, &lease]).await;
    field
}

/// A locksmith reader is a Redisson read hold: the hash's `mode` is `read`, its field
/// `<session-uuid>:<owner>` = 1, its timeout key `{name}:<field>:rwlock_timeout:1` carries the
/// lease, the hash lives as long as it, and the token is locksmith's counter beside the lock.
/// The last reader out deletes the hash and its timeout keys and publishes Redisson's `0` on
/// `redisson_rwlock:{name}`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_is_a_redisson_read_hold() {
    let server = RedisServer::start();
    let mut r = raw(&server.url()).await;
    let a = rwlock_client(&server).await;
    let b = rwlock_client(&server).await;
    let name = unique("layout-read");
    let mut pubsub = redis::Client::open(server.url()).unwrap().get_async_pubsub().await.unwrap();
    pubsub.subscribe(format!("redisson_rwlock:{{{name}}}")).await.unwrap();
    let ga = a.lock_with(&name, LockOptions::new().shared().owner("reader-1")).await.unwrap();
    let gb = b.lock_with(&name, LockOptions::new().shared().owner("reader-2")).await.unwrap();
    let fa = format!("{}:reader-1", a.session_id().await.unwrap());
    let fb = format!("{}:reader-2", b.session_id().await.unwrap());
    let fields: HashMap<String, String> = cmd(&mut r, &["HGETALL", &name]).await;
    let expected =
        HashMap::from([("mode".to_string(), "read".to_string()), (fa.clone(), "1".into()), (fb.clone(), "1".into())]);
    assert_eq!(fields, expected);
    for f in [&fa, &fb] {
        let pttl: i64 = cmd(&mut r, &["PTTL", &format!("{{{name}}}:{f}:rwlock_timeout:1")]).await;
        assert!(pttl > 0 && pttl <= TTL.as_millis() as i64, "timeout key of {f}: pttl {pttl}");
    }
    let pttl: i64 = cmd(&mut r, &["PTTL", &name]).await;
    assert!(pttl > 0 && pttl <= TTL.as_millis() as i64, "hash pttl {pttl}");
    let last: u64 = cmd(&mut r, &["GET", &format!("locksmith:rwlock_token:{{{name}}}")]).await;
    assert_eq!((ga.token(), gb.token(), last), (last - 1, last, last));
    assert!(ga.unlock().await.unwrap());
    let fields: HashMap<String, String> = cmd(&mut r, &["HGETALL", &name]).await;
    assert_eq!(fields.len(), 2, "the other reader still holds: {fields:?}");
    assert!(gb.unlock().await.unwrap());
    let exists: i64 = cmd(
        &mut r,
        &["EXISTS", &name, &format!("{{{name}}}:{fa}:rwlock_timeout:1"), &format!("{{{name}}}:{fb}:rwlock_timeout:1")],
    )
    .await;
    assert_eq!(exists, 0, "the last reader out must delete the hash and the timeout keys");
    let msg = tokio::time::timeout(Duration::from_secs(2), pubsub.on_message().next()).await.unwrap().unwrap();
    assert_eq!(msg.get_payload::<String>().unwrap(), "0");
    a.close().await;
    b.close().await;
}

/// A locksmith writer is a Redisson write hold: `mode` = `write` and the field
/// `<session-uuid>:<owner>:write` = 1 with the lease as the hash's TTL; its unlock deletes the
/// hash and publishes Redisson's `1` (which wakes every Java waiter).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_is_a_redisson_write_hold() {
    let server = RedisServer::start();
    let mut r = raw(&server.url()).await;
    let client = rwlock_client(&server).await;
    let name = unique("layout-write");
    let mut pubsub = redis::Client::open(server.url()).unwrap().get_async_pubsub().await.unwrap();
    pubsub.subscribe(format!("redisson_rwlock:{{{name}}}")).await.unwrap();
    let g = client.lock_with(&name, LockOptions::new().owner("writer-7")).await.unwrap();
    let fields: HashMap<String, String> = cmd(&mut r, &["HGETALL", &name]).await;
    let field = format!("{}:writer-7:write", client.session_id().await.unwrap());
    assert_eq!(fields, HashMap::from([("mode".to_string(), "write".to_string()), (field, "1".to_string())]));
    let pttl: i64 = cmd(&mut r, &["PTTL", &name]).await;
    assert!(pttl > 0 && pttl <= TTL.as_millis() as i64, "pttl {pttl}");
    let last: u64 = cmd(&mut r, &["GET", &format!("locksmith:rwlock_token:{{{name}}}")]).await;
    assert_eq!(g.token(), last);
    assert!(g.unlock().await.unwrap());
    let exists: i64 = cmd(&mut r, &["EXISTS", &name]).await;
    assert_eq!(exists, 0);
    let msg = tokio::time::timeout(Duration::from_secs(2), pubsub.on_message().next()).await.unwrap().unwrap();
    assert_eq!(msg.get_payload::<String>().unwrap(), "1");
    client.close().await;
}

/// A Java writer's hash keeps out locksmith readers and writers (try_lock answers None) and is
/// left exactly as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redisson_writer_blocks_locksmith_readers_and_writers() {
    let server = RedisServer::start();
    let mut r = raw(&server.url()).await;
    let client = rwlock_client(&server).await;
    let name = unique("java-writes");
    java_writer(&mut r, &name).await;
    let before: HashMap<String, String> = cmd(&mut r, &["HGETALL", &name]).await;
    assert!(client.try_lock_with(&name, LockOptions::new().shared()).await.unwrap().is_none(), "a reader got in");
    assert!(client.try_lock(&name).await.unwrap().is_none(), "a writer got in");
    let after: HashMap<String, String> = cmd(&mut r, &["HGETALL", &name]).await;
    assert_eq!(before, after);
    client.close().await;
}

/// A locksmith reader and a locksmith writer waiting behind a Java writer wake at once when the
/// Java side unlocks as Redisson does (DEL, then `1` on `redisson_rwlock:{name}`), long before
/// the hash's 30 s lease ends; both were subscribed to Redisson's channel.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redisson_unlock_message_wakes_locksmith_waiters() {
    let server = RedisServer::start();
    let mut r = raw(&server.url()).await;
    let channel = |name: &str| format!("redisson_rwlock:{{{name}}}");
    for shared in [true, false] {
        let client = rwlock_client(&server).await;
        let name = unique("java-unlocks");
        java_writer(&mut r, &name).await;
        let (c, n) = (client.clone(), name.clone());
        let waiter = tokio::spawn(async move {
            let opts = if shared { LockOptions::new().shared() } else { LockOptions::new() };
            (c.lock_with(&n, opts).await, Instant::now())
        });
        // Long enough for the fallback timer to reach its cap.
        tokio::time::sleep(Duration::from_millis(1000)).await;
        let subs: (String, i64) = cmd(&mut r, &["PUBSUB", "NUMSUB", &channel(&name)]).await;
        assert_eq!(subs.1, 1, "the waiter is not subscribed to Redisson's channel");
        let released = Instant::now();
        let _: i64 = cmd(&mut r, &["DEL", &name]).await;
        let _: i64 = cmd(&mut r, &["PUBLISH", &channel(&name), "1"]).await;
        let (g, granted) = tokio::time::timeout(Duration::from_secs(1), waiter).await.unwrap().unwrap();
        let g = g.unwrap();
        let waited = granted.duration_since(released);
        assert!(waited < Duration::from_millis(100), "shared {shared}: woke after {waited:?}");
        assert!(g.unlock().await.unwrap());
        client.close().await;
    }
}

/// Locksmith readers join Java readers (a hash in read mode), writers wait; when the locksmith
/// reader leaves, the hash lives on for the Java reader's lease (Redisson's rule: the longest
/// live timeout key), and once that lease has run out (a crashed Java reader) the locksmith
/// writer gets in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locksmith_readers_join_redisson_readers_and_a_crashed_one_frees_the_lock_after_its_lease() {
    let server = RedisServer::start();
    let mut r = raw(&server.url()).await;
    let client = rwlock_client(&server).await;
    let name = unique("java-reads");
    let java = java_reader(&mut r, &name, 1, 1500).await;
    let reader = client.try_lock_with(&name, LockOptions::new().shared()).await.unwrap().expect("joins Java readers");
    assert!(client.try_lock(&name).await.unwrap().is_none(), "a writer got in with readers inside");
    let fields: HashMap<String, String> = cmd(&mut r, &["HGETALL", &name]).await;
    assert_eq!(fields.len(), 3, "{fields:?}");
    assert_eq!(fields.get(&java).map(String::as_str), Some("1"));
    assert!(reader.unlock().await.unwrap());
    let fields: HashMap<String, String> = cmd(&mut r, &["HGETALL", &name]).await;
    assert_eq!(fields, HashMap::from([("mode".to_string(), "read".to_string()), (java, "1".to_string())]));
    let started = Instant::now();
    let writer = client.lock_with(&name, LockOptions::new().timeout(Duration::from_secs(5))).await.unwrap();
    assert!(started.elapsed() < Duration::from_millis(1500 + 500), "the writer waited {:?}", started.elapsed());
    let mode: String = cmd(&mut r, &["HGET", &name, "mode"]).await;
    assert_eq!(mode, "write");
    assert!(writer.unlock().await.unwrap());
    client.close().await;
}

/// A hash without `mode` is Redisson's `RLock` (or `?mode=reentrant`): held, never joined —
/// Redisson's own read/write scripts would add `mode` to it and share it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_rlock_hash_is_never_joined() {
    let server = RedisServer::start();
    let mut r = raw(&server.url()).await;
    let client = rwlock_client(&server).await;
    let name = unique("rlock");
    let _: i64 = cmd(&mut r, &["HINCRBY", &name, "8743c9c0-0795-4907-87fd-6c719a6b4586:1", "1"]).await;
    let _: i64 = cmd(&mut r, &["PEXPIRE", &name, "10000"]).await;
    assert!(client.try_lock_with(&name, LockOptions::new().shared()).await.unwrap().is_none());
    assert!(client.try_lock(&name).await.unwrap().is_none());
    let fields: HashMap<String, String> = cmd(&mut r, &["HGETALL", &name]).await;
    assert_eq!(fields.len(), 1, "{fields:?}");
    client.close().await;
}
