//! Renewal (the watchdog): keeps holds alive, stops at unlock, survives dropped connections and
//! a restarted durable server, and reports a hold deleted by a third party.

mod common;

use std::time::Duration;

use common::{cmd, raw, unique};
use locksmith_testkit::RedisServer;

const TTL: Duration = Duration::from_secs(1);

/// A hold stays ours across 3×TTL: the key keeps a TTL and the same value, nobody else gets it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewal_keeps_a_hold_across_three_ttls() {
    let server = RedisServer::start();
    let mut r = raw(&server.url()).await;
    let a = locksmith::connect_with_ttl(&server.url(), TTL).await.unwrap();
    let b = locksmith::connect_with_ttl(&server.url(), TTL).await.unwrap();
    let name = unique("renew");
    let g = a.lock(&name).await.unwrap();
    let value: String = cmd(&mut r, &["GET", &name]).await;
    tokio::time::sleep(TTL * 3).await;
    assert!(g.is_held());
    let now: String = cmd(&mut r, &["GET", &name]).await;
    assert_eq!(now, value, "the key changed hands");
    let pttl: i64 = cmd(&mut r, &["PTTL", &name]).await;
    assert!(pttl > 0, "pttl {pttl}");
    assert!(b.try_lock(&name).await.unwrap().is_none());
    assert!(g.unlock().await.unwrap());
}

/// After unlock the old session never renews again: a key re-created with the old token value
/// (the one value its renewal would accept) still expires on its own short TTL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_renewal_after_unlock() {
    let server = RedisServer::start();
    let mut r = raw(&server.url()).await;
    let a = locksmith::connect_with_ttl(&server.url(), TTL).await.unwrap();
    let name = unique("no-renew");
    let keep = a.lock(&unique("other")).await.unwrap(); // keeps the keeper busy renewing
    let g = a.lock(&name).await.unwrap();
    let value: String = cmd(&mut r, &["GET", &name]).await;
    assert!(g.unlock().await.unwrap());
    let _: () = cmd(&mut r, &["SET", &name, &value, "PX", "700"]).await;
    tokio::time::sleep(TTL * 2).await;
    let exists: i64 = cmd(&mut r, &["EXISTS", &name]).await;
    assert_eq!(exists, 0, "the released hold was renewed after unlock");
    assert!(keep.is_held());
}

/// Killing every normal client connection (twice) does not lose the hold: the command
/// connection reconnects and renewal goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewal_survives_killed_connections() {
    let server = RedisServer::start();
    let mut r = raw(&server.url()).await;
    let a = locksmith::connect_with_ttl(&server.url(), TTL).await.unwrap();
    let name = unique("kill");
    let g = a.lock(&name).await.unwrap();
    for _ in 0..2 {
        tokio::time::sleep(TTL / 2).await;
        let killed: i64 = cmd(&mut r, &["CLIENT", "KILL", "TYPE", "normal"]).await;
        assert!(killed >= 1);
    }
    tokio::time::sleep(TTL * 2).await;
    assert!(g.is_held(), "hold lost after dropped connections");
    let pttl: i64 = cmd(&mut r, &["PTTL", &name]).await;
    assert!(pttl > 0, "pttl {pttl}");
    assert!(g.unlock().await.unwrap());
}

/// A durable server restarted within the TTL keeps the key, and renewal resumes on the new
/// connection without losing the hold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewal_survives_a_durable_restart_within_the_ttl() {
    let ttl = Duration::from_secs(2);
    let mut server = RedisServer::start_durable();
    let a = locksmith::connect_with_ttl(&server.url(), ttl).await.unwrap();
    let name = unique("restart");
    let g = a.lock(&name).await.unwrap();
    server.restart();
    tokio::time::sleep(ttl * 2).await;
    assert!(g.is_held(), "hold lost across a restart within the TTL");
    let mut r = raw(&server.url()).await;
    let pttl: i64 = cmd(&mut r, &["PTTL", &name]).await;
    assert!(pttl > 0, "pttl {pttl}");
    let b = locksmith::connect_with_ttl(&server.url(), ttl).await.unwrap();
    assert!(b.try_lock(&name).await.unwrap().is_none());
    assert!(g.unlock().await.unwrap());
}

/// A third party deleting the key makes `lost()` fire within about TTL/3, for that guard only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_fires_when_a_third_party_deletes_the_key() {
    for mode in ["", "?mode=reentrant"] {
        let server = RedisServer::start();
        let mut r = raw(&server.url()).await;
        let a = locksmith::connect_with_ttl(&format!("{}{mode}", server.url()), TTL).await.unwrap();
        let name = unique("deleted");
        let other = a.lock(&unique("kept")).await.unwrap();
        let g = a.lock(&name).await.unwrap();
        let _: i64 = cmd(&mut r, &["DEL", &name]).await;
        let started = std::time::Instant::now();
        tokio::time::timeout(TTL / 3 + Duration::from_millis(300), g.lost())
            .await
            .unwrap_or_else(|_| panic!("{mode}: lost() did not fire"));
        assert!(!g.is_held());
        assert!(started.elapsed() < TTL, "{mode}");
        assert!(other.is_held(), "{mode}: the other guard was reported lost too");
        assert!(!g.unlock().await.unwrap(), "{mode}: unlock of a lost hold must say not ours");
        assert!(other.unlock().await.unwrap());
    }
}
