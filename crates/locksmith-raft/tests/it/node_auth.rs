//! Node authentication: nodes holding the same cluster secret form a cluster and replicate;
//! calls without a valid proof are refused before openraft hears of them, and counted; during
//! a rolling upgrade, nodes that accept unauthenticated peers run beside nodes without a secret.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::Mutex;
use std::time::Duration;

use locksmith_proto::node_proof::ClusterSecret;
use locksmith_raft::network::pb::raft_client::RaftClient;
use locksmith_raft::network::pb::RaftRequest;
use locksmith_raft::types::TypeConfig;
use locksmith_raft::NodeAuth;
use openraft::raft::AppendEntriesRequest;
use openraft::Vote;

use crate::common::caught_up;
use crate::common::config;
use crate::common::leader;
use crate::common::listeners;
use crate::common::write;
use crate::common::TestNode;

fn secret(text: &[u8]) -> ClusterSecret {
    ClusterSecret::new(text).unwrap()
}

/// Starts nodes 1..=n of a new cluster, node `id` with `auth(id)`.
async fn cluster(
    n: u64,
    dir: &std::path::Path,
    auth: impl Fn(u64) -> Option<NodeAuth>,
) -> (Vec<Option<TestNode>>, BTreeMap<u64, String>) {
    let (ls, peers) = listeners(n).await;
    let mut nodes = Vec::new();
    for (id, l) in (1..=n).zip(ls) {
        let mut c = config();
        c.auth = auth(id);
        let d = dir.join(id.to_string());
        nodes.push(Some(TestNode::start_with(id, &d, l, peers.clone(), c, None).await));
    }
    (nodes, peers)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_with_the_secret_replicate_and_forged_calls_are_refused_and_counted() {
    crate::common::init_tracing();
    let dir = tempfile::tempdir().unwrap();
    let refused: Arc<Mutex<Vec<(&'static str, &'static str)>>> = Arc::default();
    let seen = refused.clone();
    let (nodes, peers) = cluster(3, dir.path(), |_| {
        let seen = seen.clone();
        Some(NodeAuth::new(secret(b"cluster secret of the test, long enough")).on_refused(move |r| {
            seen.lock().unwrap().push((r.call, r.reason));
        }))
    })
    .await;
    leader(&nodes, Duration::from_secs(10)).await;
    let index = write(&nodes, b"hello".to_vec()).await;
    for n in nodes.iter().flatten() {
        caught_up(n, index, Duration::from_secs(10)).await;
    }
    assert!(refused.lock().unwrap().is_empty(), "a node refused its peers: {:?}", refused.lock().unwrap());
    let term = nodes.iter().flatten().map(|n| n.node.cluster().term).max();

    // A max-term heartbeat from node 99: without a proof, and with another cluster's.
    let payload = postcard::to_stdvec(&AppendEntriesRequest::<TypeConfig> {
        vote: Vote::new_committed(u64::MAX - 1, 99),
        prev_log_id: None,
        entries: vec![],
        leader_commit: None,
    })
    .unwrap();
    let mut client = RaftClient::connect(format!("http://{}", peers[&1])).await.unwrap();
    let status = client.append_entries(RaftRequest { target: 1, payload: payload.clone() }).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::Unauthenticated, "{status}");
    let mut request = tonic::Request::new(RaftRequest { target: 1, payload: payload.clone() });
    let proof = secret(b"another cluster's secret, also long").prove(
        "/locksmith.raft.v1.Raft/AppendEntries",
        99,
        1,
        0,
        &payload,
    );
    request.metadata_mut().insert("locksmith-node-proof", proof.parse().unwrap());
    let status = client.append_entries(request).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::Unauthenticated, "{status}");
    assert_eq!(*refused.lock().unwrap(), vec![("append_entries", "no_proof"), ("append_entries", "bad_proof")]);
    assert_eq!(nodes.iter().flatten().map(|n| n.node.cluster().term).max(), term, "the term moved");
    for n in nodes.into_iter().flatten() {
        let mut n = n;
        n.stop().await;
    }
}

/// The first step of turning node authentication on in a running cluster: nodes restarted with
/// the secret and `accept_unauthenticated` work beside nodes that have none yet.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn during_an_upgrade_nodes_with_and_without_the_secret_replicate() {
    let dir = tempfile::tempdir().unwrap();
    let (nodes, _) = cluster(3, dir.path(), |id| {
        (id != 3)
            .then(|| NodeAuth::new(secret(b"cluster secret of the test, long enough")).accept_unauthenticated(true))
    })
    .await;
    leader(&nodes, Duration::from_secs(10)).await;
    let index = write(&nodes, b"upgrading".to_vec()).await;
    for n in nodes.iter().flatten() {
        caught_up(n, index, Duration::from_secs(10)).await;
    }
    for n in nodes.into_iter().flatten() {
        let mut n = n;
        n.stop().await;
    }
}
