//! The replication stream (`AppendEntriesStream`): replies stay paired with their requests
//! when a call gives up on a stalled follower, replication goes on across such a stall, and a
//! node that does not serve the stream (an older node) gets one call per AppendEntries.

use std::collections::BTreeMap;
use std::time::Duration;

use locksmith_faultproxy::FaultProxy;
use locksmith_raft::network::Network;
use locksmith_raft::network::PeerClient;
use locksmith_raft::types::Node;
use locksmith_raft::types::TypeConfig;
use locksmith_raft::NodeConfig;
use locksmith_raft::Timings;
use openraft::error::RPCError;
use openraft::network::RPCOption;
use openraft::network::RaftNetwork;
use openraft::network::RaftNetworkFactory;
use openraft::raft::AppendEntriesRequest;
use openraft::raft::AppendEntriesResponse;
use openraft::CommittedLeaderId;
use openraft::LogId;
use openraft::Vote;

use crate::common::caught_up;
use crate::common::config;
use crate::common::leader;
use crate::common::listeners;
use crate::common::write;
use crate::common::TestNode;

/// A leader's AppendEntries as node 1 in term 1: `after` the log entry with that index (which a
/// new node does not have: it answers Conflict), or from the start (Success).
fn append(after: Option<u64>) -> AppendEntriesRequest<TypeConfig> {
    AppendEntriesRequest {
        vote: Vote::new_committed(1, 1),
        prev_log_id: after.map(|index| LogId::new(CommittedLeaderId::new(1, 1), index)),
        entries: vec![],
        leader_commit: None,
    }
}

/// Node 1's client of node 2, dialled at `addr`.
async fn client_of(addr: String) -> PeerClient {
    let mut network = Network::new(1, None, Duration::from_millis(500), Duration::from_millis(100), BTreeMap::new());
    network.new_client(2, &Node { addr }).await
}

/// A node that belongs to no cluster yet (it hears from any leader), on a fresh port.
async fn lone_node(dir: &std::path::Path, legacy: bool) -> TestNode {
    let (mut ls, _) = listeners(1).await;
    let mut c = config();
    c.legacy_transport = legacy;
    TestNode::start_with(2, dir, ls.remove(0), BTreeMap::new(), c, None).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_that_comes_after_its_deadline_never_answers_the_next_append() {
    crate::common::init_tracing();
    let dir = tempfile::tempdir().unwrap();
    let node = lone_node(dir.path(), false).await;
    let proxy = FaultProxy::start(node.addr).await.unwrap();
    let mut client = client_of(proxy.local_addr().to_string()).await;
    let option = RPCOption::new(Duration::from_millis(400));
    let success = client.append_entries(append(None), option.clone()).await.unwrap();
    assert!(matches!(success, AppendEntriesResponse::Success), "{success:?}");
    assert!(client.streaming(), "the append did not go over the replication stream");

    // The follower's link stalls: the call gives up; its reply (a Conflict) arrives later.
    proxy.blackhole();
    let stalled = client.append_entries(append(Some(5)), option.clone()).await;
    assert!(matches!(stalled, Err(RPCError::Timeout(_))), "{stalled:?}");
    assert!(!client.streaming(), "the stream of the stalled call was kept");
    proxy.heal();
    tokio::time::sleep(Duration::from_millis(200)).await;

    // Every later call gets its own reply, never the stalled one's Conflict.
    for _ in 0..3 {
        let next = client.append_entries(append(None), option.clone()).await.unwrap();
        assert!(matches!(next, AppendEntriesResponse::Success), "a later append got {next:?}");
    }
    let conflict = client.append_entries(append(Some(5)), option.clone()).await.unwrap();
    assert!(matches!(conflict, AppendEntriesResponse::Conflict), "{conflict:?}");

    // A call cancelled by its caller (openraft drops the future) takes the stream along too.
    proxy.blackhole();
    let cancelled =
        tokio::time::timeout(Duration::from_millis(50), client.append_entries(append(Some(5)), option.clone()));
    assert!(cancelled.await.is_err(), "the stalled call answered");
    proxy.heal();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let next = client.append_entries(append(None), option).await.unwrap();
    assert!(matches!(next, AppendEntriesResponse::Success), "after a cancelled call: {next:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_does_not_serve_the_stream_gets_one_call_per_append() {
    crate::common::init_tracing();
    let dir = tempfile::tempdir().unwrap();
    let node = lone_node(dir.path(), true).await;
    let mut client = client_of(node.addr.to_string()).await;
    let option = RPCOption::new(Duration::from_millis(400));
    for after in [None, Some(5), None] {
        let reply = client.append_entries(append(after), option.clone()).await.unwrap();
        let expected = if after.is_some() { "Conflict" } else { "Success" };
        assert_eq!(format!("{reply:?}"), expected);
        assert!(!client.streaming(), "a stream to a node that does not serve it");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn old_and_new_nodes_replicate_in_one_cluster_whichever_leads() {
    crate::common::init_tracing();
    let dir = tempfile::tempdir().unwrap();
    let (ls, peers) = listeners(3).await;
    let mut nodes = Vec::new();
    for (id, l) in (1..=3).zip(ls) {
        let mut c = config();
        // Node 2 is an older node, in the middle of a rolling upgrade.
        c.legacy_transport = id == 2;
        nodes.push(Some(TestNode::start_with(id, &dir.path().join(id.to_string()), l, peers.clone(), c, None).await));
    }
    for round in 0..2u8 {
        leader(&nodes, Duration::from_secs(10)).await;
        let mut last = 0;
        for i in 0..20u8 {
            last = write(&nodes, vec![round, i]).await;
        }
        for n in nodes.iter().flatten() {
            caught_up(n, last, Duration::from_secs(10)).await;
        }
        let first = nodes.iter().flatten().next().unwrap().applied();
        assert!(nodes.iter().flatten().all(|n| n.applied() == first), "the nodes applied different logs");
        // Another leader for the second round: the old one stops.
        let l = leader(&nodes, Duration::from_secs(10)).await;
        if round == 0 {
            if let Some(mut n) = nodes[l].take() {
                n.stop().await;
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replication_goes_on_after_a_follower_stalls_past_the_deadline() {
    crate::common::init_tracing();
    let dir = tempfile::tempdir().unwrap();
    let (ls, peers) = listeners(3).await;
    // Every node reaches node 3 through a proxy that can stall.
    let addr3: std::net::SocketAddr = peers[&3].parse().unwrap();
    let proxy = FaultProxy::start(addr3).await.unwrap();
    let ms = Duration::from_millis;
    let mut nodes = Vec::new();
    for (id, l) in (1..=3).zip(ls) {
        // Elections slower than the stall: the same leader replicates before and after it.
        let mut c: NodeConfig = config().with_timings(Timings::new(ms(50), ms(3000), ms(4000)).unwrap());
        if id != 3 {
            c.routes.insert(3, proxy.local_addr().to_string());
        }
        nodes.push(Some(TestNode::start_with(id, &dir.path().join(id.to_string()), l, peers.clone(), c, None).await));
    }
    leader(&nodes, Duration::from_secs(15)).await;
    let before = write(&nodes, b"before".to_vec()).await;
    for n in nodes.iter().flatten() {
        caught_up(n, before, Duration::from_secs(10)).await;
    }
    // Node 3 stalls for many heartbeats (each AppendEntries to it times out) while the other
    // two commit; then it resumes.
    proxy.blackhole();
    for i in 0..10u8 {
        write(&nodes, vec![b'd', i]).await;
    }
    tokio::time::sleep(ms(500)).await;
    proxy.heal();
    let mut last = 0;
    for i in 0..10u8 {
        last = write(&nodes, vec![b'a', i]).await;
    }
    for n in nodes.iter().flatten() {
        caught_up(n, last, Duration::from_secs(10)).await;
    }
    let first = nodes[0].as_ref().unwrap().applied();
    let mut expected = vec![b"before".to_vec()];
    expected.extend((0..10u8).map(|i| vec![b'd', i]));
    expected.extend((0..10u8).map(|i| vec![b'a', i]));
    assert_eq!(first.commands(), expected, "applied out of order or twice");
    assert!(nodes.iter().flatten().all(|n| n.applied() == first), "node 3 applied another log");
}
