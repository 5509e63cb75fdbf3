//! The shared contract suite against a real memcached, and what only the real backend shows:
//! no fencing, so no lock without the opt-in, and only the exclusive mutex.
//!
//! The suite runs through `UnfencedTarget` (locksmith-core's conformance module): the real
//! driver, with a test-only counter in place of the token 0 of every grant, so that every
//! exclusion, waiting, cancellation, reentrancy, release, loss and renewal property is checked
//! while the token assertions say nothing about memcached (see that type's docs).

mod common;

use std::time::Duration;

use locksmith::{Error, LockOptions};
use locksmith_core::conformance::UnfencedTarget;
use locksmith_testkit::MemcachedServer;

fn memcached() -> UnfencedTarget {
    let server = MemcachedServer::start();
    UnfencedTarget::new(server.url(), locksmith::backend).keeping(server)
}

locksmith_core::conformance_suite!(memcached());

/// `lock`/`try_lock` without `allow_unfenced` are refused (Error::Unfenced) before anything is
/// stored; with it the hold has token 0 and `fencing_token() == None`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locking_without_opting_in_to_no_fencing_is_refused() {
    let server = MemcachedServer::start();
    let client = common::client(&server, Duration::from_secs(2)).await;
    assert!(!client.backend().provides_fencing());
    let name = common::unique("unfenced");
    let r = client.lock(&name).await;
    assert!(matches!(r, Err(Error::Unfenced(_))), "lock without opt-in gave {r:?}");
    let r = client.try_lock(&name).await;
    assert!(matches!(r, Err(Error::Unfenced(_))), "try_lock without opt-in gave {r:?}");
    let mut raw = common::Raw::connect(&server).await;
    assert_eq!(raw.get(&name).await, None, "a refused lock stored a key");

    let g = client.lock_with(&name, common::unfenced()).await.unwrap();
    assert_eq!(g.fencing_token(), None);
    assert_eq!(g.token(), 0);
    assert!(raw.get(&name).await.is_some());
    assert!(g.unlock().await.unwrap());
    assert_eq!(raw.get(&name).await, None, "unlock left the key");
    client.close().await;
}

/// Read/write locks, semaphores and elections are refused as unsupported, naming the backend.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_holds_permits_and_elections_are_unsupported() {
    let server = MemcachedServer::start();
    let client = common::client(&server, Duration::from_secs(2)).await;
    let name = common::unique("modes");
    for opts in [common::unfenced().shared(), common::unfenced().permits(3)] {
        let r = client.try_lock_with(&name, opts).await;
        assert!(matches!(&r, Err(Error::Unsupported(m)) if m.contains("memcached://")), "{r:?}");
    }
    let r = client.campaign(&name, "me", LockOptions::new().allow_unfenced()).await;
    assert!(matches!(r, Err(Error::Unsupported(_))), "{:?}", r.map(|_| ()));
    client.close().await;
}
