//! Clusters on the in-process network (`locksmith_raft::fixture`): leader loss and partitions
//! without processes or sockets, on paused time.

use std::time::Duration;

use locksmith_raft::fixture::Router;
use locksmith_raft::ClientWriteError;
use locksmith_raft::RaftNode;

use crate::common::Recorder;

const WITHIN: Duration = Duration::from_secs(10);

async fn three(router: &Router, dirs: &tempfile::TempDir) -> Vec<RaftNode<Recorder>> {
    let mut nodes = Vec::new();
    for id in 1..=3 {
        let dir = dirs.path().join(id.to_string());
        nodes.push(router.start(id, dir, &[1, 2, 3], Router::config(), Recorder::default()).await.unwrap());
    }
    nodes
}

fn node(nodes: &[RaftNode<Recorder>], id: u64) -> &RaftNode<Recorder> {
    &nodes[(id - 1) as usize]
}

fn others(id: u64) -> Vec<u64> {
    (1..=3).filter(|n| *n != id).collect()
}

/// A leader cut off from both followers stops committing: its writes never return success, a
/// barrier there fails, and the two others elect a leader that commits. Healed, the old leader
/// follows and holds the new leader's log.
#[tokio::test(start_paused = true)]
async fn a_cut_off_leader_commits_nothing_and_the_majority_goes_on() {
    let dirs = tempfile::tempdir().unwrap();
    let router = Router::new();
    let nodes = three(&router, &dirs).await;
    let old = router.wait_for_leader(WITHIN).await.expect("a first leader");
    let before = node(&nodes, old).client_write(b"before".to_vec()).await.unwrap();

    router.isolate(old);
    let cut_off = node(&nodes, old);
    let write = tokio::time::timeout(Duration::from_millis(1500), cut_off.client_write(b"lost".to_vec())).await;
    assert!(!matches!(write, Ok(Ok(_))), "a leader without a quorum committed a write: {write:?}");
    assert!(cut_off.barrier().await.is_err(), "a leader without a quorum confirmed its leadership");

    let new = router.wait_for_leader_among(&others(old), WITHIN).await.expect("a leader of the majority");
    let after = node(&nodes, new).client_write(b"after".to_vec()).await.unwrap();
    assert!(after > before);

    router.heal();
    let deadline = tokio::time::Instant::now() + WITHIN;
    while cut_off.replica().lock().unwrap().applied_index() < Some(after) {
        assert!(tokio::time::Instant::now() < deadline, "the old leader did not catch up");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let applied = cut_off.replica().lock().unwrap().machine().commands();
    assert!(applied.contains(&b"after".to_vec()));
    assert!(!applied.contains(&b"lost".to_vec()), "an uncommitted write of the deposed leader was applied");
    assert!(!cut_off.is_leader());
    for n in &nodes {
        n.shutdown().await.unwrap();
    }
}

/// A minority cannot elect a leader: a follower cut off from the others stays without one (it
/// stands for election again and again and loses), while the majority keeps committing.
#[tokio::test(start_paused = true)]
async fn a_minority_elects_no_leader() {
    let dirs = tempfile::tempdir().unwrap();
    let router = Router::new();
    let nodes = three(&router, &dirs).await;
    let leader = router.wait_for_leader(WITHIN).await.expect("a first leader");
    let lonely = others(leader)[0];
    router.isolate(lonely);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(router.leader_among(&[lonely]), None, "node {lonely} led alone");
    let write = node(&nodes, lonely).client_write(b"alone".to_vec()).await;
    assert!(matches!(write, Err(ClientWriteError::ForwardToLeader(_))), "{write:?}");
    node(&nodes, leader).client_write(b"majority".to_vec()).await.unwrap();
    for n in &nodes {
        n.shutdown().await.unwrap();
    }
}

/// A slow link within the heartbeat's deadline changes nothing: the cluster keeps its leader.
#[tokio::test(start_paused = true)]
async fn a_slow_link_within_the_deadline_keeps_the_leader() {
    let dirs = tempfile::tempdir().unwrap();
    let router = Router::new();
    let nodes = three(&router, &dirs).await;
    let leader = router.wait_for_leader(WITHIN).await.expect("a first leader");
    let term = node(&nodes, leader).metrics().borrow().current_term;
    for other in others(leader) {
        router.delay(leader, other, Duration::from_millis(10));
        router.delay(other, leader, Duration::from_millis(10));
    }
    for i in 0..20u8 {
        node(&nodes, leader).client_write(vec![i]).await.unwrap();
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(router.leader_among(&[1, 2, 3]), Some(leader));
    assert_eq!(node(&nodes, leader).metrics().borrow().current_term, term);
    for n in &nodes {
        n.shutdown().await.unwrap();
    }
}
