//! The node API on its own: restart on a directory, leadership watch, limits, TLS between peers.

use std::collections::BTreeMap;
use std::time::Duration;

use locksmith_raft::store::open_storage;
use locksmith_raft::ClientWriteError;
use locksmith_raft::RaftNode;
use locksmith_raft::StartError;
use locksmith_raft::StoreError;
use locksmith_raft::MAX_COMMAND;
use tokio::net::TcpListener;
use tonic::transport::Certificate;
use tonic::transport::ClientTlsConfig;
use tonic::transport::Identity;
use tonic::transport::ServerTlsConfig;

use crate::common::caught_up;
use crate::common::config;
use crate::common::init_tracing;
use crate::common::leader;
use crate::common::listeners;
use crate::common::write;
use crate::common::Recorder;
use crate::common::TestNode;

fn command(i: usize) -> Vec<u8> {
    format!("command {i}").into_bytes()
}

/// A one-node cluster leads itself, publishes its leadership, refuses oversized commands and a
/// second node on its directory; after shutdown (its handle still alive) the directory is free
/// and a new node on it starts with the state replayed from the log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_single_node_restarts_on_its_directory_with_its_state() {
    init_tracing();
    let dirs = tempfile::tempdir().unwrap();
    let dir = dirs.path().join("n1");
    let (mut ls, peers) = listeners(1).await;
    let nodes = vec![Some(TestNode::start(1, &dir, ls.remove(0), peers.clone()).await)];
    leader(&nodes, Duration::from_secs(10)).await;
    let n = nodes[0].as_ref().unwrap();
    let seen = n.node.leadership().borrow().clone();
    assert!(seen.is_leader && seen.ready && !seen.stopped && seen.leader == Some(1) && seen.term >= 1, "{seen:?}");

    let mut last = 0;
    for i in 0..10 {
        last = write(&nodes, command(i)).await;
    }
    let too_large = n.node.client_write(vec![0; MAX_COMMAND + 1]).await;
    assert!(matches!(too_large, Err(ClientWriteError::TooLarge { .. })), "{too_large:?}");
    assert!(matches!(open_storage(&dir, Recorder::default()), Err(StoreError::InUse(_))));

    let mut n = nodes.into_iter().next().flatten().unwrap();
    let mut watch = n.node.leadership();
    n.stop().await;
    tokio::time::timeout(Duration::from_secs(5), watch.wait_for(|l| l.stopped)).await.unwrap().unwrap();
    assert!(matches!(n.node.client_write(command(99)).await, Err(ClientWriteError::Stopped(_))));

    // `n` is still alive: shutting down released the directory.
    let again = RaftNode::start(1, &dir, peers, config(), Recorder::default()).await.unwrap();
    {
        let replica = again.replica().lock().unwrap();
        assert_eq!(replica.applied_index(), Some(last), "replayed up to the saved committed index");
        assert_eq!(replica.machine().commands(), (0..10).map(command).collect::<Vec<_>>());
    }
    again.shutdown().await.unwrap();
}

/// Membership changes on a one-node cluster: its view names it leader and voter; the last voter
/// cannot be removed; a member cannot be added at another address, and at its own changes
/// nothing; a node that never answers stays a learner when the time runs out, and is removed;
/// removing a node that is no member changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn membership_changes_are_checked_against_the_cluster() {
    use locksmith_raft::{Added, MembershipError, NodeRole, Removed};

    init_tracing();
    let dirs = tempfile::tempdir().unwrap();
    let (mut ls, peers) = listeners(1).await;
    let mut nodes = vec![Some(TestNode::start(1, &dirs.path().join("n1"), ls.remove(0), peers.clone()).await)];
    leader(&nodes, Duration::from_secs(10)).await;
    let n = &nodes[0].as_ref().unwrap().node;
    let view = n.cluster();
    assert!(view.is_leader && view.leader == Some(1) && !view.changing, "{view:?}");
    assert_eq!(view.nodes.len(), 1);
    let me = &view.nodes[0];
    assert!(me.role == NodeRole::Leader && me.voter && me.addr == peers[&1] && me.matched_index.is_some(), "{me:?}");

    let limit = Duration::from_secs(5);
    let last = n.remove_node(1, limit).await;
    assert!(matches!(&last, Err(MembershipError::Invalid(m)) if m.contains("last voter")), "{last:?}");
    let moved = n.add_voter(1, "127.0.0.1:1".into(), limit).await;
    assert!(matches!(&moved, Err(MembershipError::Invalid(m)) if m.contains("remove it first")), "{moved:?}");
    assert_eq!(n.add_voter(1, peers[&1].clone(), limit).await.unwrap(), Added::AlreadyVoter);

    let nowhere = TcpListener::bind("127.0.0.1:0").await.unwrap().local_addr().unwrap().to_string();
    let slow = n.add_voter(2, nowhere, Duration::from_millis(500)).await;
    assert!(matches!(&slow, Err(MembershipError::Timeout(m)) if m.contains("stays a learner")), "{slow:?}");
    let learner = n.cluster().node(2).cloned().unwrap();
    assert!(learner.role == NodeRole::Learner && !learner.voter && learner.matched_index.is_none(), "{learner:?}");
    assert_eq!(n.remove_node(2, limit).await.unwrap(), Removed::Learner);
    assert_eq!(n.remove_node(2, limit).await.unwrap(), Removed::NotAMember);
    assert_eq!(n.cluster().voters().collect::<Vec<_>>(), vec![1]);
    nodes[0].as_mut().unwrap().stop().await;
}

/// Initial peers must name the node itself.
#[tokio::test]
async fn initial_peers_without_this_node_are_refused() {
    let dirs = tempfile::tempdir().unwrap();
    let peers = BTreeMap::from([(2, "127.0.0.1:1".to_string())]);
    let r = RaftNode::start(1, dirs.path(), peers, config(), Recorder::default()).await;
    assert!(matches!(r, Err(StartError::Config(_))), "{r:?}");
}

/// Routes may only name nodes among the initial peers: another id is a typo, refused.
#[tokio::test]
async fn routes_to_a_node_outside_the_initial_peers_are_refused() {
    let dirs = tempfile::tempdir().unwrap();
    let peers = BTreeMap::from([(1, "127.0.0.1:1".to_string()), (2, "127.0.0.1:2".to_string())]);
    let mut c = config();
    c.routes = BTreeMap::from([(3, "127.0.0.1:3".to_string())]);
    let r = RaftNode::start(1, dirs.path(), peers, c, Recorder::default()).await;
    assert!(matches!(&r, Err(StartError::Config(m)) if m.contains("node 3")), "{r:?}");
}

/// Three nodes reach each other over TLS (rustls on ring) and replicate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_replicates_over_tls() {
    init_tracing();
    let (ca, server_pem, server_key) = pki();
    let dirs = tempfile::tempdir().unwrap();
    let (ls, peers) = listeners(3).await;
    let mut nodes = Vec::new();
    for (id, l) in (1..).zip(ls) {
        let mut c = config();
        c.tls = Some(ClientTlsConfig::new().ca_certificate(Certificate::from_pem(&ca)).domain_name("localhost"));
        let tls = ServerTlsConfig::new().identity(Identity::from_pem(&server_pem, &server_key));
        let dir = dirs.path().join(format!("n{id}"));
        nodes.push(Some(TestNode::start_with(id, &dir, l, peers.clone(), c, Some(tls)).await));
    }
    leader(&nodes, Duration::from_secs(10)).await;
    let mut last = 0;
    for i in 0..20 {
        last = write(&nodes, command(i)).await;
    }
    for n in nodes.iter().flatten() {
        caught_up(n, last, Duration::from_secs(10)).await;
        assert_eq!(n.applied().commands(), (0..20).map(command).collect::<Vec<_>>());
    }
    for n in nodes.iter_mut().flatten() {
        n.stop().await;
    }
}

/// A CA, and a server certificate for `localhost` signed by it: `(ca, cert, key)` in PEM.
fn pki() -> (String, String, String) {
    use rcgen::BasicConstraints;
    use rcgen::CertificateParams;
    use rcgen::IsCa;
    use rcgen::KeyPair;

    let ca_key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = params.self_signed(&ca_key).unwrap();
    let key = KeyPair::generate().unwrap();
    let cert = CertificateParams::new(vec!["localhost".to_string()]).unwrap().signed_by(&key, &ca, &ca_key).unwrap();
    (ca.pem(), cert.pem(), key.serialize_pem())
}
