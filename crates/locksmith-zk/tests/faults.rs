//! ZooKeeper faults: a server restart (kill -9, same data dir) while a lock is held.

use std::time::Duration;

use locksmith_testkit::ZkServer;

/// kill -9 and restart of the server within the session timeout while a lock is held and
/// another client waits: the holder keeps its lock or is told it lost it, there are never two
/// holders, and tokens keep increasing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_within_session_timeout_keeps_or_signals_the_hold() {
    let mut server = ZkServer::start();
    let url = server.url();
    let ttl = Duration::from_secs(8);
    let a = locksmith::connect_with_ttl(&url, ttl).await.unwrap();
    let b = locksmith::connect_with_ttl(&url, ttl).await.unwrap();
    let g1 = a.lock("restart").await.unwrap();
    let t1 = g1.fencing_token().unwrap();
    let waiter = tokio::spawn(async move {
        let g = b.lock("restart").await.unwrap();
        (b, g)
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    server.kill9();
    tokio::time::sleep(Duration::from_millis(500)).await;
    server.restart();
    // Give the clients time to reconnect and a few keep-alives to run.
    tokio::time::sleep(Duration::from_secs(4)).await;
    if waiter.is_finished() {
        // The waiter got it: the first holder must know it lost.
        assert!(!g1.is_held(), "two holders after the restart");
    } else {
        assert!(g1.is_held(), "holder neither kept the lock nor was granted to the waiter");
    }
    let held_before = g1.is_held();
    let _ = g1.unlock().await;
    let (_b, g2) = tokio::time::timeout(Duration::from_secs(20), waiter).await.unwrap().unwrap();
    let t2 = g2.fencing_token().unwrap();
    assert!(t2 > t1, "token went backwards: {t1} then {t2}");
    assert!(g2.is_held());
    let st = a.status(Some("restart")).await.unwrap();
    assert_eq!(st[0].holder.as_ref().map(|h| h.token), Some(t2), "held_before={held_before}");
    g2.unlock().await.unwrap();
    let g3 = a.lock("restart").await.unwrap();
    assert!(g3.fencing_token().unwrap() > t2);
}

/// A hold whose node a third party deletes is reported lost by the next keep-alive.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_deleted_by_a_third_party_signals_loss() {
    let server = ZkServer::start();
    let c = locksmith::connect_with_ttl(&server.url(), Duration::from_secs(1)).await.unwrap();
    let g = c.lock("vandal").await.unwrap();
    let zk = zookeeper_client::Client::connect(&server.addr()).await.unwrap();
    let nodes = zk.list_children("/locksmith/vandal").await.unwrap();
    assert_eq!(nodes.len(), 1);
    assert!(nodes[0].starts_with("_c_") && nodes[0].contains("-lock-"), "{nodes:?}");
    zk.delete(&format!("/locksmith/vandal/{}", nodes[0]), None).await.unwrap();
    tokio::time::timeout(Duration::from_secs(3), g.lost()).await.expect("lost() did not fire");
    assert!(!g.is_held());
}

/// Bad URLs, unreachable servers and TTLs outside the server's session-timeout range give
/// typed errors, quickly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_urls_unreachable_servers_and_unsupported_ttls_are_typed_errors() {
    for url in ["zk://", "zk://h:0", "zk://h:99999", "zk://h:1/a//b", "zk://u@h:1", "zk://h:1?acl=creator"] {
        assert!(matches!(locksmith::connect(url).await, Err(locksmith::Error::InvalidUrl { .. })), "{url}");
    }
    let port = locksmith_testkit::free_port();
    let started = std::time::Instant::now();
    let r = match locksmith::connect_with_ttl(&format!("zk://127.0.0.1:{port}"), Duration::from_secs(5)).await {
        Ok(c) => c.lock("x").await.map(|_| ()),
        Err(e) => Err(e),
    };
    assert!(matches!(r, Err(locksmith::Error::Unavailable { .. })), "{r:?}");
    assert!(started.elapsed() < Duration::from_secs(5), "took {:?}", started.elapsed());
    let server = ZkServer::start();
    // The test server's maxSessionTimeout is 120 s.
    let c = locksmith::connect_with_ttl(&server.url(), Duration::from_secs(300)).await;
    let r = match c {
        Ok(c) => c.lock("x").await.map(|_| ()),
        Err(e) => Err(e),
    };
    assert!(matches!(r, Err(locksmith::Error::InvalidArgument(_))), "{r:?}");
}

/// Names with characters above U+FFFF (which ZooKeeper, checking paths as UTF-16, refuses as
/// surrogates) are escaped: they lock, contend and show in `status` under their own name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_beyond_the_basic_plane_lock_and_list_by_their_own_name() {
    let server = ZkServer::start();
    let a = locksmith::connect_with_ttl(&server.url(), Duration::from_secs(4)).await.unwrap();
    let b = locksmith::connect_with_ttl(&server.url(), Duration::from_secs(4)).await.unwrap();
    let name = "deploy-🔒/𝄞";
    let g = a.lock(name).await.unwrap();
    assert!(b.try_lock(name).await.unwrap().is_none(), "a second holder of {name}");
    let listed: Vec<String> = a.status(None).await.unwrap().into_iter().map(|s| s.name).collect();
    assert!(listed.iter().any(|n| n == name), "{listed:?}");
    assert!(g.unlock().await.unwrap());
    assert!(b.try_lock(name).await.unwrap().is_some());
}
