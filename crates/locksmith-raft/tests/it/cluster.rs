//! Three nodes over real loopback gRPC: election, replication, fail-over, restart and re-join.

use std::collections::BTreeMap;
use std::collections::BTreeSet;
use std::time::Duration;
use std::time::Instant;

use locksmith_raft::ClientWriteError;
use locksmith_raft::LeaderHint;

use crate::common::caught_up;
use crate::common::init_tracing;
use crate::common::leader;
use crate::common::listeners;
use crate::common::write;
use crate::common::TestNode;

fn command(i: usize) -> Vec<u8> {
    format!("command {i}").into_bytes()
}

/// Starts a three-node cluster, every node initializing it with the same peers.
async fn cluster(dirs: &tempfile::TempDir) -> Vec<Option<TestNode>> {
    let (ls, peers) = listeners(3).await;
    let mut nodes = Vec::new();
    for (id, l) in (1..).zip(ls) {
        nodes.push(Some(TestNode::start(id, &dirs.path().join(format!("n{id}")), l, peers.clone()).await));
    }
    nodes
}

/// A cluster elects a leader, replicates 1,000 commands, elects another leader when the first
/// is shut down and goes on; every node applies the same commands in the same order, and the
/// old leader, restarted on its directory, catches up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_replicates_fails_over_and_a_restarted_node_catches_up() {
    init_tracing();
    let dirs = tempfile::tempdir().unwrap();
    let mut nodes = cluster(&dirs).await;
    let t = Instant::now();
    let first = leader(&nodes, Duration::from_secs(10)).await;
    println!("=== node {} leads after {:?}", first + 1, t.elapsed());

    // A follower names the leader (once it has heard from it: retry briefly).
    let follower = nodes[(first + 1) % 3].as_ref().unwrap();
    let lead = nodes[first].as_ref().unwrap();
    let want = LeaderHint { id: Some(first as u64 + 1), addr: Some(lead.addr.to_string()) };
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match follower.node.client_write(command(0)).await {
            Err(ClientWriteError::ForwardToLeader(hint)) if hint == want => break,
            Err(ClientWriteError::ForwardToLeader(hint)) if Instant::now() < deadline => {
                println!("=== hint {hint} so far");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            other => panic!("a follower answered {other:?}"),
        }
    }

    let t = Instant::now();
    let mut last = 0;
    for i in 0..1000 {
        last = write(&nodes, command(i)).await;
    }
    println!("=== 1000 commands replicated in {:?} (last index {last})", t.elapsed());
    for n in nodes.iter().flatten() {
        caught_up(n, last, Duration::from_secs(10)).await;
    }

    let mut old = nodes[first].take().unwrap();
    old.stop().await;
    let t = Instant::now();
    let second = leader(&nodes, Duration::from_secs(10)).await;
    assert_ne!(second, first);
    let bound = nodes[second].as_ref().unwrap().node.failover_time();
    println!(
        "=== node {} leads {:?} after node {} stopped (failover_time {bound:?})",
        second + 1,
        t.elapsed(),
        first + 1
    );
    for i in 1000..1200 {
        last = write(&nodes, command(i)).await;
    }
    for n in nodes.iter().flatten() {
        caught_up(n, last, Duration::from_secs(10)).await;
    }
    let want: Vec<Vec<u8>> = (0..1200).map(command).collect();
    for n in nodes.iter().flatten() {
        assert_eq!(n.applied().commands(), want, "node at {}", n.addr);
    }
    assert!(old.applied().commands().len() >= 1000, "the old leader applied its own writes");

    let t = Instant::now();
    let (dir, addr) = (old.dir.clone(), old.addr);
    drop(old);
    let peers: BTreeMap<_, _> = BTreeMap::new();
    let restarted = TestNode::restart(first as u64 + 1, &dir, addr, peers).await;
    // Restored from its snapshot and log before it hears from the leader.
    assert!(restarted.applied().commands().len() >= 1000);
    caught_up(&restarted, last, Duration::from_secs(10)).await;
    println!("=== restarted node {} caught up in {:?}", first + 1, t.elapsed());
    assert_eq!(restarted.applied().commands(), want);
    let reference = nodes[second].as_ref().unwrap().applied();
    assert_eq!(restarted.applied(), reference, "same commands at the same indexes");
    nodes[first] = Some(restarted);
    for n in nodes.iter_mut().flatten() {
        n.stop().await;
    }
}

/// A follower whose directory is wiped is removed, re-added as a learner and then as a voter,
/// and catches up from a snapshot (the log it missed was purged).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wiped_node_is_re_added_and_catches_up_from_a_snapshot() {
    init_tracing();
    let dirs = tempfile::tempdir().unwrap();
    let mut nodes = cluster(&dirs).await;
    let l = leader(&nodes, Duration::from_secs(10)).await;
    let mut last = 0;
    for i in 0..500 {
        last = write(&nodes, command(i)).await;
    }
    let f = (l + 1) % 3;
    let id = f as u64 + 1;
    let all: BTreeSet<u64> = (1..=3).collect();
    let others: BTreeSet<u64> = all.iter().copied().filter(|i| *i != id).collect();

    let t = Instant::now();
    let lead = &nodes[l].as_ref().unwrap().node;
    lead.change_membership(others, false).await.unwrap();
    let mut wiped = nodes[f].take().unwrap();
    wiped.stop().await;
    let (dir, addr) = (wiped.dir.clone(), wiped.addr);
    drop(wiped);
    std::fs::remove_dir_all(&dir).unwrap();
    for i in 500..600 {
        last = write(&nodes, command(i)).await;
    }

    let fresh = TestNode::restart(id, &dir, addr, BTreeMap::new()).await;
    assert!(fresh.applied().applied.is_empty());
    let lead = &nodes[l].as_ref().unwrap().node;
    lead.add_learner(id, addr.to_string(), true).await.unwrap();
    lead.change_membership(all, false).await.unwrap();
    nodes[f] = Some(fresh);
    last = last.max(write(&nodes, command(600)).await);
    let fresh = nodes[f].as_ref().unwrap();
    caught_up(fresh, last, Duration::from_secs(10)).await;
    println!("=== wiped node {id} re-joined and caught up in {:?}", t.elapsed());
    let snapshot = fresh.node.metrics().borrow().snapshot;
    assert!(snapshot.is_some(), "it received a snapshot");
    let want: Vec<Vec<u8>> = (0..601).map(command).collect();
    assert_eq!(fresh.applied().commands(), want);
    assert_eq!(fresh.applied(), nodes[l].as_ref().unwrap().applied());
    for n in nodes.iter_mut().flatten() {
        n.stop().await;
    }
}

/// Two of three nodes form the cluster while the lowest id (the one that initializes at once)
/// never starts: the others initialize it themselves after their delay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_majority_forms_the_cluster_without_the_lowest_id() {
    init_tracing();
    let dirs = tempfile::tempdir().unwrap();
    let (ls, peers) = listeners(3).await;
    let t = Instant::now();
    let mut nodes = vec![None];
    for (id, l) in (1..).zip(ls).skip(1) {
        nodes.push(Some(TestNode::start(id, &dirs.path().join(format!("n{id}")), l, peers.clone()).await));
    }
    leader(&nodes, Duration::from_secs(10)).await;
    println!("=== nodes 2 and 3 formed the cluster in {:?}", t.elapsed());
    let mut last = 0;
    for i in 0..10 {
        last = write(&nodes, command(i)).await;
    }
    // Every node catches up before any stops: a follower learns the last commit index from the
    // leader's next message, which a leader stopped first never sends.
    for n in nodes.iter().flatten() {
        caught_up(n, last, Duration::from_secs(10)).await;
        assert_eq!(n.applied().commands(), (0..10).map(command).collect::<Vec<_>>());
    }
    for n in nodes.iter_mut().flatten() {
        n.stop().await;
    }
}

/// Commands of the largest size accepted replicate, also to a follower that missed several of
/// them (one per message then, each within the AppendEntries deadline).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_of_the_largest_size_replicate() {
    init_tracing();
    let dirs = tempfile::tempdir().unwrap();
    let mut nodes = cluster(&dirs).await;
    let l = leader(&nodes, Duration::from_secs(10)).await;
    let f = (l + 1) % 3;
    let mut lagging = nodes[f].take().unwrap();
    lagging.stop().await;
    let big = |i: u8| vec![i; locksmith_raft::MAX_COMMAND];
    let t = Instant::now();
    let mut last = 0;
    for i in 0..8 {
        last = write(&nodes, big(i)).await;
    }
    let (dir, addr) = (lagging.dir.clone(), lagging.addr);
    drop(lagging);
    nodes[f] = Some(TestNode::restart(f as u64 + 1, &dir, addr, BTreeMap::new()).await);
    for n in nodes.iter().flatten() {
        caught_up(n, last, Duration::from_secs(20)).await;
        assert_eq!(n.applied().commands(), (0..8).map(big).collect::<Vec<_>>());
    }
    println!("=== 8 MiB of commands replicated and caught up in {:?}", t.elapsed());
    for n in nodes.iter_mut().flatten() {
        n.stop().await;
    }
}
