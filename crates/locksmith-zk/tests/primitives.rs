//! ZooKeeper specifics of the primitives beyond the mutex: every hold is a node with Curator's
//! name and data, status shows every kind of holder, abandoned acquisitions leave no node
//! behind, and the two exclusive layouts exclude each other. (The shared properties run in
//! `conformance.rs`, the interop with Curator itself in `interop_primitives.rs`.)

use std::sync::OnceLock;
use std::time::Duration;

use locksmith::{HoldMode, LockOptions};
use locksmith_core::conformance::until_status;
use locksmith_testkit::ZkServer;
use zookeeper_client as zk;

static SERVER: OnceLock<ZkServer> = OnceLock::new();

fn server() -> &'static ZkServer {
    SERVER.get_or_init(ZkServer::start)
}

const TTL: Duration = Duration::from_secs(4);

async fn client(query: &str) -> locksmith::Client {
    locksmith::connect_with_ttl(&format!("{}{query}", server().url()), TTL).await.unwrap()
}

async fn raw() -> zk::Client {
    zk::Client::connect(&server().addr()).await.unwrap()
}

/// The one child of `dir`, checked to be `_c_<uuid>-<recipe><10 digits>`; its data and czxid.
async fn only_node(zk: &zk::Client, dir: &str, recipe: &str) -> (String, Vec<u8>, u64) {
    let children = zk.list_children(dir).await.unwrap();
    assert_eq!(children.len(), 1, "{dir}: {children:?}");
    let node = &children[0];
    let rest = node.strip_prefix("_c_").unwrap_or_else(|| panic!("{node}: no protected prefix"));
    let (uuid, rest) = rest.split_at(36);
    assert!(uuid.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-') && uuid.matches('-').count() == 4, "{node}");
    let seq = rest.strip_prefix('-').and_then(|r| r.strip_prefix(recipe)).unwrap_or_else(|| panic!("{node}"));
    assert!(seq.len() == 10 && seq.bytes().all(|b| b.is_ascii_digit()), "{node}");
    let (data, stat) = zk.get_data(&format!("{dir}/{node}")).await.unwrap();
    (node.clone(), data, u64::try_from(stat.czxid).unwrap())
}

/// Polls `dir` until it has `n` children (a dropped acquisition cleans up in a spawned task).
async fn until_children(zk: &zk::Client, dir: &str, n: usize) {
    for _ in 0..100 {
        match zk.list_children(dir).await {
            Ok(c) if c.len() == n => return,
            Err(zk::Error::NoNode) if n == 0 => return,
            _ => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
    panic!("{dir} never had {n} children: {:?}", zk.list_children(dir).await);
}

/// A reader is an `InterProcessReadWriteLock` read node, a writer a write node (with
/// `?exclusive=write-lock`) or an `InterProcessMutex` node (by default), a campaign a
/// `LeaderLatch` node whose data is the proposal, a permit an `InterProcessSemaphoreV2` lease
/// whose data carries the permits; each token is its node's czxid, and the semaphore's internal
/// lock is free once the permit is granted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kind_of_hold_is_a_node_with_curators_name_and_data() {
    let (c, w, zk) = (client("").await, client("?exclusive=write-lock").await, raw().await);
    let read = c.lock_with("kinds/read", LockOptions::new().shared()).await.unwrap();
    let (_, data, czxid) = only_node(&zk, "/locksmith/kinds/read", "__READ__").await;
    assert!(!data.is_empty(), "a reader's data is its owner id");
    assert_eq!(read.token(), czxid);
    let write = w.lock("kinds/write").await.unwrap();
    assert_eq!(only_node(&zk, "/locksmith/kinds/write", "__WRIT__").await.2, write.token());
    let mutex = c.lock("kinds/mutex").await.unwrap();
    assert_eq!(only_node(&zk, "/locksmith/kinds/mutex", "lock-").await.2, mutex.token());
    let leader = c.campaign("kinds/election", "10.0.0.7:8080", LockOptions::new()).await.unwrap();
    let (_, data, czxid) = only_node(&zk, "/locksmith/kinds/election", "latch-").await;
    assert_eq!((data.as_slice(), czxid), (&b"10.0.0.7:8080"[..], leader.token()));
    let permit = c.lock_with("kinds/semaphore", LockOptions::new().permits(3)).await.unwrap();
    let (_, data, czxid) = only_node(&zk, "/locksmith/kinds/semaphore/leases", "lease-").await;
    assert!(String::from_utf8(data).unwrap().starts_with("permits=3;owner="));
    assert_eq!(czxid, permit.token());
    until_children(&zk, "/locksmith/kinds/semaphore/locks", 0).await;
    for g in [read, write, mutex, leader, permit] {
        assert!(g.unlock().await.unwrap());
    }
}

/// `status` shows a leader's proposal with the next candidate waiting, and listing every lock
/// shows a read/write lock, a semaphore and an election by their names, never the semaphore's
/// parts (`NAME/locks`, `NAME/leases`). Readers' and permit holders' status is the shared
/// suite's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_shows_the_leaders_proposal_and_lists_no_semaphore_parts() {
    let (a, b) = (client("").await, client("").await);
    let r = a.lock_with("status/rw", LockOptions::new().shared()).await.unwrap();
    let p = a.lock_with("status/sem", LockOptions::new().permits(2)).await.unwrap();
    let leader = a.campaign("status/election", "alpha", LockOptions::new()).await.unwrap();
    let next = {
        let b = b.clone();
        tokio::spawn(async move { b.campaign("status/election", "beta", LockOptions::new()).await.unwrap() })
    };
    until_status(&a, "status/election", |s| s.waiters == Some(1)).await;

    let st = a.status(Some("status/election")).await.unwrap().remove(0);
    let h = st.holder.as_ref().unwrap();
    assert_eq!((h.value.as_deref(), h.token, h.mode), (Some("alpha"), leader.token(), HoldMode::Exclusive));
    assert_eq!(st.waiters, Some(1), "{st:?}");

    let names: Vec<String> = a.status(None).await.unwrap().into_iter().map(|s| s.name).collect();
    for n in ["status/rw", "status/sem", "status/election"] {
        assert!(names.iter().any(|x| x == n), "{n} not listed: {names:?}");
    }
    assert!(!names.iter().any(|x| x.ends_with("/locks") || x.ends_with("/leases")), "{names:?}");

    for g in [r, p, leader] {
        assert!(g.unlock().await.unwrap());
    }
    assert!(next.await.unwrap().unlock().await.unwrap());
}

/// Timed-out acquisitions of the kinds with ZooKeeper-only parts — a permit queued on the
/// semaphore's internal lock, one waiting with its lease, a candidate behind a leader — leave
/// no node behind, and the semaphore's internal lock is free for the next acquirer (readers and
/// writers: the shared suite's `a_cancelled_reader_or_writer_leaves_no_entry_and_no_hold`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timed_out_acquisitions_leave_no_node_behind() {
    let (a, b, zk) = (client("").await, client("").await, raw().await);
    let held = a.lock_with("abandon/sem", LockOptions::new().permits(1)).await.unwrap();
    let waiting = LockOptions::new().permits(1).timeout(Duration::from_millis(400));
    // Two at once: one waits for a lease holding the internal lock, the other for that lock.
    let (x, y) = tokio::join!(b.lock_with("abandon/sem", waiting.clone()), b.lock_with("abandon/sem", waiting));
    assert!(matches!((&x, &y), (Err(locksmith::Error::Timeout), Err(locksmith::Error::Timeout))), "{x:?} {y:?}");
    until_children(&zk, "/locksmith/abandon/sem/leases", 1).await;
    until_children(&zk, "/locksmith/abandon/sem/locks", 0).await;
    assert!(held.unlock().await.unwrap());
    let opts = LockOptions::new().permits(1).timeout(Duration::from_secs(2));
    assert!(b.lock_with("abandon/sem", opts).await.unwrap().unlock().await.unwrap());

    let leader = a.campaign("abandon/election", "a", LockOptions::new()).await.unwrap();
    let r = b.campaign("abandon/election", "b", LockOptions::new().timeout(Duration::from_millis(300))).await;
    assert!(matches!(r, Err(locksmith::Error::Timeout)), "{r:?}");
    until_children(&zk, "/locksmith/abandon/election", 1).await;
    assert!(leader.unlock().await.unwrap());
}

/// A mutex node (the default) and a write-lock node (`?exclusive=write-lock`) on one name
/// exclude each other, and a reader waits for either: locksmith clients with different layouts
/// still share one lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutex_and_write_lock_nodes_exclude_each_other_and_readers_wait_for_both() {
    let (m, w) = (client("").await, client("?exclusive=write-lock").await);
    let name = "layouts/both";
    let reader = || LockOptions::new().shared();
    let g = m.lock(name).await.unwrap();
    assert!(w.try_lock(name).await.unwrap().is_none(), "a write-lock node got in beside a mutex node");
    assert!(w.try_lock_with(name, reader()).await.unwrap().is_none(), "a reader got in beside a mutex node");
    assert!(g.unlock().await.unwrap());
    let g = w.lock(name).await.unwrap();
    assert!(m.try_lock(name).await.unwrap().is_none(), "a mutex node got in beside a write-lock node");
    assert!(m.try_lock_with(name, reader()).await.unwrap().is_none(), "a reader got in beside a write-lock node");
    assert!(g.unlock().await.unwrap());
    let r = m.try_lock_with(name, reader()).await.unwrap().unwrap();
    assert!(r.unlock().await.unwrap());
}

/// The next leader an observer reports, within 5 s.
async fn next(leaders: &mut locksmith::Observer) -> Option<locksmith::Leader> {
    match tokio::time::timeout(Duration::from_secs(5), leaders.next()).await {
        Ok(Some(Ok(l))) => l,
        other => panic!("no change observed: {other:?}"),
    }
}

/// An observer that starts before anyone campaigns sees nobody, then the leader; when the
/// leader's session ends the next candidate leads with a higher term, and the observer sees it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_whose_session_ends_is_replaced_and_the_observer_sees_each() {
    let (a, b, o) = (client("").await, client("").await, client("").await);
    let name = "sessions/election";
    let mut leaders = o.observe(name).await.unwrap();
    assert_eq!(next(&mut leaders).await, None);
    let first = a.campaign(name, "a", LockOptions::new()).await.unwrap();
    let seen = next(&mut leaders).await.unwrap();
    assert_eq!((seen.value.as_deref(), seen.term), (Some("a"), first.token()));
    let second = {
        let b = b.clone();
        tokio::spawn(async move { b.campaign(name, "b", LockOptions::new()).await.unwrap() })
    };
    // b must be the next candidate, queued, when a's session ends.
    until_status(&o, name, |s| s.waiters == Some(1)).await;
    a.close().await;
    assert!(!first.is_held());
    let second = tokio::time::timeout(Duration::from_secs(5), second).await.unwrap().unwrap();
    assert!(second.token() > first.token());
    let mut seen = next(&mut leaders).await;
    if seen.is_none() {
        seen = next(&mut leaders).await;
    }
    let seen = seen.unwrap();
    assert_eq!((seen.value.as_deref(), seen.term), (Some("b"), second.token()));
}
