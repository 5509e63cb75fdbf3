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
use locksmith_raft::network::pb::RaftStreamRequest;
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

/// Sends `message` on a replication stream opened with `open_proof` to the node at `addr`; the
/// status the stream ended with (`Ok` when the message was answered).
async fn stream_code(addr: &str, open_proof: Option<String>, message: RaftStreamRequest) -> tonic::Code {
    let mut client = RaftClient::connect(format!("http://{addr}")).await.unwrap();
    let mut request = tonic::Request::new(futures_util::stream::iter(vec![message]));
    if let Some(proof) = open_proof {
        request.metadata_mut().insert("locksmith-node-proof", proof.parse().unwrap());
    }
    match client.append_entries_stream(request).await {
        Err(status) => status.code(),
        Ok(replies) => match replies.into_inner().message().await {
            Ok(_) => tonic::Code::Ok,
            Err(status) => status.code(),
        },
    }
}

/// Every message of a replication stream is checked as a unary call is: its own proof (made for
/// the stream's path, naming the node that opened it, covering this message), the target, the
/// sender against the vote inside, the term; a refused message ends the stream with the unary
/// call's status and is counted with the same reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_message_of_a_replication_stream_needs_its_own_proof() {
    crate::common::init_tracing();
    let dir = tempfile::tempdir().unwrap();
    let refused: Arc<Mutex<Vec<&'static str>>> = Arc::default();
    let seen = refused.clone();
    let ours = secret(b"cluster secret of the test, long enough");
    let theirs = secret(b"another cluster's secret, also long");
    let (nodes, peers) = cluster(3, dir.path(), |_| {
        let seen = seen.clone();
        Some(NodeAuth::new(ours.clone()).on_refused(move |r| {
            assert_eq!(r.call, "append_entries");
            seen.lock().unwrap().push(r.reason);
        }))
    })
    .await;
    leader(&nodes, Duration::from_secs(10)).await;
    let term = nodes.iter().flatten().map(|n| n.node.cluster().term).max();
    const STREAM: &str = "/locksmith.raft.v1.Raft/AppendEntriesStream";
    let payload = |from: u64, term: u64| {
        postcard::to_stdvec(&AppendEntriesRequest::<TypeConfig> {
            vote: Vote::new_committed(term, from),
            prev_log_id: None,
            entries: vec![],
            leader_commit: None,
        })
        .unwrap()
    };
    let open = |s: &ClusterSecret, sender: u64| Some(s.prove(STREAM, sender, 1, 0, b""));
    let message =
        |target: u64, payload: Vec<u8>, proof: String| RaftStreamRequest { target, payload, proof, cluster: vec![] };
    let high = u64::MAX - 1;
    let forged = payload(2, high);
    // What is sent, the proof at the opening, the message, the status and the refusal's reason.
    type Case<'a> = (&'a str, Option<String>, RaftStreamRequest, tonic::Code, Option<&'a str>);
    let cases: Vec<Case> = vec![
        (
            "no proof at the opening",
            None,
            message(1, forged.clone(), String::new()),
            tonic::Code::Unauthenticated,
            Some("no_proof"),
        ),
        (
            "another secret's proof at the opening",
            open(&theirs, 2),
            message(1, forged.clone(), ours.prove(STREAM, 2, 1, 0, &forged)),
            tonic::Code::Unauthenticated,
            Some("bad_proof"),
        ),
        (
            "a message without a proof",
            open(&ours, 2),
            message(1, forged.clone(), String::new()),
            tonic::Code::Unauthenticated,
            Some("no_proof"),
        ),
        (
            "a message with another secret's proof",
            open(&ours, 2),
            message(1, forged.clone(), theirs.prove(STREAM, 2, 1, 0, &forged)),
            tonic::Code::Unauthenticated,
            Some("bad_proof"),
        ),
        (
            "a message with the proof of another message",
            open(&ours, 2),
            message(1, forged.clone(), ours.prove(STREAM, 2, 1, 0, &payload(2, 1))),
            tonic::Code::Unauthenticated,
            Some("wrong_message"),
        ),
        (
            "a message with a unary call's proof",
            open(&ours, 2),
            message(1, forged.clone(), ours.prove("/locksmith.raft.v1.Raft/AppendEntries", 2, 1, 0, &forged)),
            tonic::Code::Unauthenticated,
            Some("bad_proof"),
        ),
        (
            "a message proven by another node than the stream's",
            open(&ours, 2),
            message(1, payload(3, high), ours.prove(STREAM, 3, 1, 0, &payload(3, high))),
            tonic::Code::PermissionDenied,
            Some("wrong_sender"),
        ),
        (
            "a message in the name of another leader",
            open(&ours, 2),
            message(1, payload(3, high), ours.prove(STREAM, 2, 1, 0, &payload(3, high))),
            tonic::Code::PermissionDenied,
            Some("wrong_sender"),
        ),
        (
            "a message for another node",
            open(&ours, 2),
            message(2, forged.clone(), ours.prove(STREAM, 2, 2, 0, &forged)),
            tonic::Code::FailedPrecondition,
            None,
        ),
        (
            "a term no cluster reaches, from a node that is no member",
            open(&ours, 99),
            message(1, payload(99, high), ours.prove(STREAM, 99, 1, 0, &payload(99, high))),
            tonic::Code::InvalidArgument,
            Some("bad_term"),
        ),
    ];
    for (what, open_proof, message, code, reason) in cases {
        refused.lock().unwrap().clear();
        assert_eq!(stream_code(&peers[&1], open_proof, message).await, code, "{what}");
        assert_eq!(refused.lock().unwrap().first().copied(), reason, "{what}");
    }
    assert_eq!(nodes.iter().flatten().map(|n| n.node.cluster().term).max(), term, "the term moved");
    // The cluster's own streams were never refused, and still replicate.
    refused.lock().unwrap().clear();
    let index = write(&nodes, b"after".to_vec()).await;
    for n in nodes.iter().flatten() {
        caught_up(n, index, Duration::from_secs(10)).await;
    }
    assert!(refused.lock().unwrap().is_empty(), "{:?}", refused.lock().unwrap());
    for n in nodes.into_iter().flatten() {
        let mut n = n;
        n.stop().await;
    }
}
