//! Only nodes speak Raft (issue 29): a 3-node cluster of real processes, each started with the
//! cluster secret, attacked through its own port with the project's `raft.proto` — forged
//! max-term appends and votes from a made-up node 99, an empty snapshot, membership changes —
//! without credentials, with another cluster's secret, with a client token, and with the right
//! secret in the name of a node that is no member. Every call is refused, and the cluster's
//! term, leader, voters and a held lock's token stay as they were. Over TLS with node
//! certificates (`--peer-ca`), the same calls with a client certificate of the clients' CA (one
//! claiming a node id included), with a valid token, and with another node's certificate are
//! refused too, while a probe client keeps locking.

#[path = "support/scrape.rs"]
mod scrape;

use std::process::{Command, Output, Stdio};
use std::time::Duration;

use locksmith_raft::network::pb::raft_client::RaftClient;
use locksmith_raft::network::pb::{RaftRequest, RaftStreamRequest};
use locksmith_raft::types::TypeConfig;
use locksmith_server::node_proof::{ClusterSecret, NODE_PROOF_HEADER};
use locksmith_testkit::{free_port, new_token, spawn, write_cluster_secret, NativeCluster, TestCerts};
use openraft::raft::{AppendEntriesRequest, InstallSnapshotRequest, VoteRequest};
use openraft::{SnapshotMeta, Vote};
use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_locksmith");

/// The term of every forged request: openraft's core once panicked on the election after it.
const MAX_TERM: u64 = u64::MAX - 1;
/// The made-up node the attacker claims to be.
const INTRUDER: u64 = 99;

#[derive(Clone, Copy, Debug)]
enum Rpc {
    Append,
    /// An AppendEntries as the one message of a replication stream (`AppendEntriesStream`):
    /// the credential at the stream's opening and on the message.
    AppendStream,
    Vote,
    Snapshot,
}

/// Every method that carries Raft messages.
const RPCS: [Rpc; 4] = [Rpc::Append, Rpc::AppendStream, Rpc::Vote, Rpc::Snapshot];

impl Rpc {
    fn path(self) -> &'static str {
        match self {
            Rpc::Append => "/locksmith.raft.v1.Raft/AppendEntries",
            Rpc::AppendStream => "/locksmith.raft.v1.Raft/AppendEntriesStream",
            Rpc::Vote => "/locksmith.raft.v1.Raft/Vote",
            Rpc::Snapshot => "/locksmith.raft.v1.Raft/InstallSnapshot",
        }
    }

    /// The forged openraft request, postcard-encoded, in the name of node `from`.
    fn payload(self, from: u64) -> Vec<u8> {
        let vote = Vote::new_committed(MAX_TERM, from);
        let encoded = match self {
            Rpc::Append | Rpc::AppendStream => postcard::to_stdvec(&AppendEntriesRequest::<TypeConfig> {
                vote,
                prev_log_id: None,
                entries: vec![],
                leader_commit: None,
            }),
            Rpc::Vote => postcard::to_stdvec(&VoteRequest::new(Vote::new(MAX_TERM, from), None)),
            // An empty snapshot: once it wiped every lock's counter.
            Rpc::Snapshot => postcard::to_stdvec(&InstallSnapshotRequest::<TypeConfig> {
                vote,
                meta: SnapshotMeta::default(),
                offset: 0,
                data: vec![],
                done: true,
            }),
        };
        encoded.unwrap_or_else(|e| panic!("{e}"))
    }
}

/// What the attacker presents.
#[derive(Clone, Copy, Debug)]
enum Credential<'a> {
    Nothing,
    /// A node proof made with this secret, as node `sender`.
    Proof(&'a ClusterSecret, u64),
    /// A client's bearer token.
    Bearer(&'a str),
}

/// The TLS side of a forged call: the CA it trusts for the server, the certificate it presents.
#[derive(Clone, Copy, Debug)]
struct Tls<'a> {
    ca: &'a std::path::Path,
    cert: &'a std::path::Path,
    key: &'a std::path::Path,
}

/// Sends one forged call to node `target` at `addr`; the gRPC code it got.
async fn forge(addr: &str, target: u64, rpc: Rpc, from: u64, credential: Credential<'_>) -> tonic::Code {
    forge_over(addr, None, target, rpc, from, credential).await
}

/// [`forge`], over TLS presenting `tls`' certificate when given.
async fn forge_over(
    addr: &str,
    tls: Option<Tls<'_>>,
    target: u64,
    rpc: Rpc,
    from: u64,
    credential: Credential<'_>,
) -> tonic::Code {
    use tonic::transport::{Certificate, ClientTlsConfig, Endpoint, Identity};
    let scheme = if tls.is_some() { "https" } else { "http" };
    let mut endpoint = Endpoint::from_shared(format!("{scheme}://{addr}")).unwrap_or_else(|e| panic!("{e}"));
    if let Some(tls) = tls {
        let read = |p: &std::path::Path| std::fs::read(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        let config = ClientTlsConfig::new()
            .ca_certificate(Certificate::from_pem(read(tls.ca)))
            .identity(Identity::from_pem(read(tls.cert), read(tls.key)))
            .domain_name("localhost");
        endpoint = endpoint.tls_config(config).unwrap_or_else(|e| panic!("{e}"));
    }
    let channel = endpoint.connect().await.unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    let mut client = RaftClient::new(channel);
    let payload = rpc.payload(from);
    let mut request = tonic::Request::new(RaftRequest { target, payload: payload.clone() });
    let metadata = request.metadata_mut();
    match credential {
        Credential::Nothing => {}
        Credential::Proof(secret, sender) => {
            let proof = secret.prove(rpc.path(), sender, target, 0, &payload);
            metadata.insert(NODE_PROOF_HEADER, proof.parse().unwrap_or_else(|e| panic!("{e}")));
        }
        Credential::Bearer(token) => {
            metadata.insert("authorization", format!("Bearer {token}").parse().unwrap_or_else(|e| panic!("{e}")));
        }
    }
    let answer = match rpc {
        Rpc::Append => client.append_entries(request).await.map(|_| ()),
        Rpc::AppendStream => {
            let proof = match credential {
                Credential::Proof(secret, sender) => secret.prove(rpc.path(), sender, target, 0, &payload),
                _ => String::new(),
            };
            let (metadata, extensions, _) = request.into_parts();
            // The opening's proof covers an empty message; the message carries its own.
            let mut metadata = metadata;
            if let Credential::Proof(secret, sender) = credential {
                let open = secret.prove(rpc.path(), sender, target, 0, b"");
                metadata.insert(NODE_PROOF_HEADER, open.parse().unwrap_or_else(|e| panic!("{e}")));
            }
            let message = RaftStreamRequest { target, payload, proof, cluster: vec![] };
            let request = tonic::Request::from_parts(metadata, extensions, tokio_stream::iter(vec![message]));
            match client.append_entries_stream(request).await {
                Err(status) => Err(status),
                Ok(replies) => replies.into_inner().message().await.map(|_| ()),
            }
        }
        Rpc::Vote => client.vote(request).await.map(|_| ()),
        Rpc::Snapshot => client.install_snapshot(request).await.map(|_| ()),
    };
    match answer {
        Ok(()) => tonic::Code::Ok,
        Err(status) => status.code(),
    }
}

/// (term, leader, voters) as `cluster status --json` tells through `backend`.
fn view(c: &NativeCluster, backend: Option<&str>) -> (u64, u64, Vec<u64>) {
    let out = c.cluster_command(&["status", "--json"], backend);
    assert!(out.status.success(), "cluster status: {}", String::from_utf8_lossy(&out.stderr));
    let s: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}"));
    let voters = s["nodes"]
        .as_array()
        .map(|n| n.iter().filter(|n| n["voter"] == true).filter_map(|n| n["id"].as_u64()).collect())
        .unwrap_or_default();
    (s["term"].as_u64().unwrap_or(0), s["leader"].as_u64().unwrap_or(0), voters)
}

/// A fresh token written to `dir/name`: (token, its digest for the policy, the file's path).
fn token_file(dir: &std::path::Path, name: &str) -> (String, String, String) {
    let (token, digest) = new_token(BIN.as_ref());
    let path = dir.join(name);
    std::fs::write(&path, format!("{token}\n")).unwrap_or_else(|e| panic!("{e}"));
    (token, digest, path.display().to_string())
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Runs every forged call against every node with each credential; each must be refused.
async fn attack(c: &NativeCluster, credentials: &[Credential<'_>]) {
    for id in c.ids() {
        let addr = c.addr(id);
        for rpc in RPCS {
            for credential in credentials {
                // In the intruder's name, and in the name of a real member (the leader's id).
                for from in [INTRUDER, 1] {
                    let code = forge(&addr, id, rpc, from, *credential).await;
                    assert!(
                        matches!(code, tonic::Code::Unauthenticated | tonic::Code::PermissionDenied),
                        "node {id} answered {code:?} to a forged {rpc:?} from node {from} with {credential:?}"
                    );
                }
            }
        }
    }
}

/// Forged Raft traffic and membership changes from anyone without the cluster secret are
/// refused on every node, and change nothing: same term, leader and voters, the held lock keeps
/// its token, and the next grant of that lock continues above it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_raft_calls_and_membership_changes_without_the_secret_change_nothing() {
    let c = NativeCluster::start(BIN.as_ref(), 3);
    let url = c.url();
    let client = locksmith::connect_with_ttl(&url, Duration::from_secs(5)).await.unwrap_or_else(|e| panic!("{e}"));
    let guard = client.lock("fenced").await.unwrap_or_else(|e| panic!("{e}"));
    let token = guard.token();
    let before = view(&c, None);

    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let other_file = write_cluster_secret(dir.path());
    let other = ClusterSecret::load(&other_file).unwrap_or_else(|e| panic!("{e}"));
    let ours = ClusterSecret::load(c.secret_file()).unwrap_or_else(|e| panic!("{e}"));
    attack(&c, &[Credential::Nothing, Credential::Proof(&other, INTRUDER), Credential::Bearer("not-a-node")]).await;
    // The right secret in the name of a node that is no member: a vote is refused before
    // openraft hears of it; a leader's message is not (whoever holds the secret is a node), but
    // a term no cluster reaches is. A proof names its sender, and the vote inside must be the
    // sender's.
    for id in c.ids() {
        for rpc in RPCS {
            let code = forge(&c.addr(id), id, rpc, INTRUDER, Credential::Proof(&ours, INTRUDER)).await;
            let expected = match rpc {
                Rpc::Vote => tonic::Code::PermissionDenied,
                _ => tonic::Code::InvalidArgument,
            };
            assert_eq!(code, expected, "node {id}, {rpc:?} from a non-member");
            // A member's proof carrying another node's vote.
            let code = forge(&c.addr(id), id, rpc, INTRUDER, Credential::Proof(&ours, 2)).await;
            assert!(
                matches!(code, tonic::Code::PermissionDenied | tonic::Code::FailedPrecondition),
                "node {id}, {rpc:?} from node 2 in node 99's name: {code:?}"
            );
        }
    }

    // Membership changes without the secret, and with another cluster's: exit 77, no change.
    for secret in [None, Some(other_file.as_path())] {
        for args in [vec!["remove", "3"], vec!["add", "99", "127.0.0.1:1"]] {
            let mut cmd = Command::new(BIN);
            cmd.arg("cluster").args(&args).args(["--backend", &url, "--timeout", "2s"]);
            if let Some(file) = secret {
                cmd.arg("--cluster-secret-file").arg(file);
            }
            let out = cmd.output().unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(out.status.code(), Some(77), "{args:?} with {secret:?}: {}", stderr(&out));
        }
    }

    assert_eq!(view(&c, None), before, "the cluster's term, leader or voters changed");
    assert!(guard.is_held(), "the holder lost its lock");
    let status = client.status(Some("fenced")).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(status.first().map(|s| s.last_token), Some(token), "{status:?}");
    guard.unlock().await.unwrap_or_else(|e| panic!("{e}"));
    let next = client.lock("fenced").await.unwrap_or_else(|e| panic!("{e}"));
    assert!(next.token() > token, "token {} after {token}: a counter went backwards", next.token());
    let _ = next.unlock().await;

    // The nodes' own credential does change the membership (the secret, no --auth).
    let out = c.cluster_command(&["add", "3", &c.addr(3)], None);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("nothing changed"));
}

/// Under `--auth`, a client's valid token — an admin's included — is no node credential for
/// Raft; a lock-only principal cannot change the membership either.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_tokens_never_speak_raft() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let token = |name: &str| token_file(dir.path(), name);
    let (jobs, admin) = (token("jobs.token"), token("admin.token"));
    let policy = dir.path().join("policy.toml");
    let text = format!(
        "[principals.jobs]\ntokens = [\"{}\"]\nlock = [\"jobs/\"]\n\n[principals.ops]\ntokens = [\"{}\"]\nadmin = true\n",
        jobs.1, admin.1
    );
    std::fs::write(&policy, text).unwrap_or_else(|e| panic!("{e}"));
    let admin_query = format!("token_file={}", admin.2);
    let c = NativeCluster::start_with(BIN.as_ref(), 3, &["--auth", &policy.display().to_string()], Some(&admin_query));
    let before = view(&c, None);
    attack(&c, &[Credential::Bearer(&jobs.0), Credential::Bearer(&admin.0)]).await;
    let as_jobs = format!("locksmith://{}?token_file={}", c.hosts(), jobs.2);
    let out = c.cluster_command(&["remove", "3", "--timeout", "2s"], Some(&as_jobs));
    assert_eq!(out.status.code(), Some(77), "{}", stderr(&out));
    assert_eq!(view(&c, None), before, "the cluster's term, leader or voters changed");
}

/// A cluster node never starts without node authentication: `--node-id` without a secret (or,
/// over TLS, node certificates), a secret file other users may read, one too short, or a
/// `--tls-cert` that is not this node's node certificate under `--peer-ca`, exit 78 naming what
/// to do.
#[test]
fn a_cluster_node_without_a_usable_secret_exits_78() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let data = dir.path().join("data");
    let serve = |extra: &[&str]| {
        Command::new(BIN)
            .args(["serve", "--listen", "127.0.0.1:0", "--node-id", "1", "--peers", "1=127.0.0.1:7531"])
            .arg("--data-dir")
            .arg(&data)
            .args(extra)
            .output()
            .unwrap_or_else(|e| panic!("{e}"))
    };
    let out = serve(&[]);
    assert_eq!(out.status.code(), Some(78), "{}", stderr(&out));
    assert!(stderr(&out).contains("--cluster-secret-file"), "{}", stderr(&out));

    let open = dir.path().join("open.secret");
    std::fs::write(&open, "0123456789abcdef0123456789abcdef\n").unwrap_or_else(|e| panic!("{e}"));
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o644)).unwrap_or_else(|e| panic!("{e}"));
    let out = serve(&["--cluster-secret-file", &open.display().to_string()]);
    assert_eq!(out.status.code(), Some(78), "{}", stderr(&out));
    assert!(stderr(&out).contains("chmod 600"), "{}", stderr(&out));
    assert!(!stderr(&out).contains("0123456789abcdef"), "the secret was printed: {}", stderr(&out));

    let short = dir.path().join("short.secret");
    std::fs::write(&short, "tiny\n").unwrap_or_else(|e| panic!("{e}"));
    std::fs::set_permissions(&short, std::fs::Permissions::from_mode(0o600)).unwrap_or_else(|e| panic!("{e}"));
    let out = serve(&["--cluster-secret-file", &short.display().to_string()]);
    assert_eq!(out.status.code(), Some(78), "{}", stderr(&out));
    assert!(stderr(&out).contains("at least 16"), "{}", stderr(&out));

    // Over TLS the message names node certificates too; with --peer-ca, --tls-cert must be this
    // node's own node certificate.
    let certs = TestCerts::with_nodes(&[2]);
    let (node2, node2_key) = certs.node_cert_of(2);
    let (node2, node2_key, peer_ca) = (node2.display().to_string(), node2_key.display().to_string(), certs.peer_ca());
    let out = serve(&["--tls-cert", &node2, "--tls-key", &node2_key]);
    assert_eq!(out.status.code(), Some(78), "{}", stderr(&out));
    assert!(stderr(&out).contains("--peer-ca"), "{}", stderr(&out));
    let out = serve(&["--tls-cert", &node2, "--tls-key", &node2_key, "--peer-ca", &peer_ca.display().to_string()]);
    assert_eq!(out.status.code(), Some(78), "{}", stderr(&out));
    assert!(stderr(&out).contains("node certificate of node 2"), "{}", stderr(&out));
    let server = (certs.server_cert().display().to_string(), certs.server_key().display().to_string());
    let out = serve(&["--tls-cert", &server.0, "--tls-key", &server.1, "--peer-ca", &peer_ca.display().to_string()]);
    assert_eq!(out.status.code(), Some(78), "{}", stderr(&out));
    assert!(stderr(&out).contains("locksmith-node://CLUSTER/1"), "{}", stderr(&out));
    assert!(!data.exists(), "a refused start created the data directory");
}

/// Two of three nodes lose their disks and are restarted with `--peers` while the third is
/// down: they form a new cluster (nothing can tell them otherwise). The third node, which holds
/// the old cluster's history, refuses it when it comes back — it exits 78 naming both cluster
/// ids, never panics — and its votes do not move the new cluster's term or leader.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_with_history_refuses_a_cluster_formed_beside_it_by_wiped_nodes() {
    let mut c = NativeCluster::start(BIN.as_ref(), 3);
    let client = locksmith::connect_with_ttl(&c.url(), Duration::from_secs(5)).await.unwrap_or_else(|e| panic!("{e}"));
    for _ in 0..3 {
        let g = client.lock("fenced").await.unwrap_or_else(|e| panic!("{e}"));
        g.unlock().await.unwrap_or_else(|e| panic!("{e}"));
    }
    client.close().await;
    // Node 3 must hold that history itself (a follower that lagged behind knew of nothing but
    // the cluster's first entries, and rightly follows whichever cluster reaches it).
    let leader_applied = |backend: &str| {
        let out = c.cluster_command(&["status", "--json"], Some(backend));
        let s: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
        s["applied_index"].as_u64().unwrap_or(0)
    };
    let goal = leader_applied(&c.url());
    let node3 = c.node_url(3);
    let until = std::time::Instant::now() + Duration::from_secs(10);
    while leader_applied(&node3) < goal {
        assert!(std::time::Instant::now() < until, "node 3 did not apply up to {goal} within 10 s");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(goal >= 4, "applied index {goal}");
    for id in c.ids() {
        c.kill9(id);
    }
    c.wipe(1);
    c.wipe(2);
    c.restart(1);
    c.restart(2);
    c.wait_for_leader(Duration::from_secs(20));
    let new_url = format!("locksmith://{},{}", c.addr(1), c.addr(2));
    let client = locksmith::connect_with_ttl(&new_url, Duration::from_secs(5)).await.unwrap_or_else(|e| panic!("{e}"));
    let g = client.lock("fenced").await.unwrap_or_else(|e| panic!("{e}"));
    g.unlock().await.unwrap_or_else(|e| panic!("{e}"));
    let before = view(&c, Some(&new_url));

    c.restart(3);
    let status = c.wait_exit(3, Duration::from_secs(20));
    let log = c.log(3);
    assert_eq!(status.and_then(|s| s.code()), Some(78), "node 3 did not exit 78: {status:?}\n{log}");
    assert!(log.contains("belongs to cluster"), "{log}");
    assert!(!log.contains("panicked"), "{log}");
    let (term, leader, _) = view(&c, Some(&new_url));
    assert_eq!((term, leader), (before.0, before.1), "node 3 moved the new cluster's term or leader");
}

/// Refused Raft calls are counted, by call and reason, in
/// `locksmith_server_raft_refused_total` (a one-node cluster with `--metrics-listen`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_raft_calls_are_counted_in_metrics() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let secret = write_cluster_secret(dir.path());
    let (port, metrics) = (free_port(), free_port());
    let addr = format!("127.0.0.1:{port}");
    let mut cmd = Command::new(BIN);
    cmd.args(["serve", "--listen", &addr, "--node-id", "1", "--peers", &format!("1={addr}")])
        .arg("--cluster-secret-file")
        .arg(&secret)
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .args(["--metrics-listen", &format!("127.0.0.1:{metrics}")])
        .stdin(Stdio::null())
        .stderr(Stdio::null());
    let _server = spawn("locksmith serve (one-node cluster)", &mut cmd);
    let until = std::time::Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(&addr).is_err() {
        assert!(std::time::Instant::now() < until, "the node did not listen within 20 s");
        std::thread::sleep(Duration::from_millis(50));
    }
    let other = ClusterSecret::new(b"another cluster's long secret").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(forge(&addr, 1, Rpc::Vote, INTRUDER, Credential::Nothing).await, tonic::Code::Unauthenticated);
    for _ in 0..2 {
        let code = forge(&addr, 1, Rpc::Append, INTRUDER, Credential::Proof(&other, INTRUDER)).await;
        assert_eq!(code, tonic::Code::Unauthenticated);
    }
    let text = scrape::metrics(metrics);
    let series = |call: &str, reason: &str| {
        scrape::sample(&text, &format!("locksmith_server_raft_refused_total{{call=\"{call}\",reason=\"{reason}\"}}"))
    };
    assert_eq!(series("vote", "no_proof"), 1.0, "{text}");
    assert_eq!(series("append_entries", "bad_proof"), 2.0, "{text}");
}

/// A node whose Raft core stops (here a fatal storage error: its next snapshot cannot be
/// written) does not stay up as a live-looking husk: it exits, saying so, with the exit-code
/// table's 74 (EX_IOERR: the disk), for its supervisor to restart it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_whose_raft_core_stops_exits() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let secret = write_cluster_secret(dir.path());
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let log = dir.path().join("node.log");
    let mut cmd = Command::new(BIN);
    cmd.args(["serve", "--listen", &addr, "--node-id", "1", "--peers", &format!("1={addr}")])
        .arg("--cluster-secret-file")
        .arg(&secret)
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .stdin(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap_or_else(|e| panic!("{e}")));
    let mut server = spawn("locksmith serve (one-node cluster)", &mut cmd);
    let url = format!("locksmith://{addr}");
    let until = std::time::Instant::now() + Duration::from_secs(20);
    let client = loop {
        if let Ok(c) = locksmith::connect_with_ttl(&url, Duration::from_secs(5)).await {
            if let Ok(g) = c.lock("churn").await {
                let _ = g.unlock().await;
                break c;
            }
        }
        assert!(std::time::Instant::now() < until, "the node served no lock within 20 s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    // A directory where the snapshot's temporary file goes: writing it fails (root included).
    std::fs::create_dir(dir.path().join("data/raft/snapshot.tmp")).unwrap_or_else(|e| panic!("{e}"));
    // A snapshot is built every 10,000 entries; each grant and each release is one.
    let until = std::time::Instant::now() + Duration::from_secs(240);
    let status = loop {
        if let Some(status) = server.try_wait() {
            break status;
        }
        assert!(std::time::Instant::now() < until, "the node still runs 240 s later");
        for _ in 0..100 {
            match client.lock("churn").await {
                Ok(g) => {
                    let _ = g.unlock().await;
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
            }
        }
    };
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    assert_eq!(status.code(), Some(74), "{text}");
    assert!(text.contains("raft core stopped on a storage error"), "{text}");
    assert!(!text.contains("panicked"), "{text}");
}

/// A TLS cluster whose nodes prove their ids by node certificates alone (`--peer-ca`, no cluster
/// secret; `--client-ca` and `--auth` for clients) forms, elects and grants. Forged votes,
/// appends and snapshots, and membership changes, sent with a client certificate of the clients'
/// CA (one whose SAN claims node 1 included), with a valid token, or with a node certificate of
/// another id than the request claims, are refused on every node; term, leader, voters and the
/// held lock's token stay, and a probe client's lock cycle goes on throughout. A member's node
/// certificate does change the membership.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_tls_only_a_node_certificate_naming_the_sender_speaks_raft() {
    let certs = TestCerts::with_nodes(&[1, 2, 3, 7]);
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let token = |name: &str| token_file(dir.path(), name);
    let (probe, admin) = (token("probe.token"), token("admin.token"));
    let policy = dir.path().join("policy.toml");
    let text = format!(
        "[principals.probe]\ntokens = [\"{}\"]\nlock = [\"probe/\"]\n\n[principals.ops]\ntokens = [\"{}\"]\nadmin = true\n",
        probe.1, admin.1
    );
    std::fs::write(&policy, text).unwrap_or_else(|e| panic!("{e}"));
    let path = |p: &std::path::Path| p.display().to_string();
    let (peer_ca, client_ca) = (certs.peer_ca(), certs.ca());
    let (client, client_key) = (certs.client_cert(), certs.client_key());
    // Clients check the servers' node certificates against the peer CA and present their own.
    let tls = format!("tls=true&ca={}&cert={}&key={}", path(&peer_ca), path(&client), path(&client_key));
    let admin_query = format!("{tls}&token_file={}", admin.2);
    let args = ["--client-ca", &path(&client_ca), "--auth", &path(&policy)];
    let c = NativeCluster::start_with_node_certs(BIN.as_ref(), 3, &certs, false, &args, &admin_query);
    let probe_url = format!("locksmith://{}?{tls}&token_file={}", c.hosts(), probe.2);
    let ttl = Duration::from_secs(3);
    let holder = locksmith::connect_with_ttl(&probe_url, ttl).await.unwrap_or_else(|e| panic!("{e}"));
    let guard = holder.lock("probe/fenced").await.unwrap_or_else(|e| panic!("{e}"));
    let token_before = guard.token();
    let before = view(&c, None);

    // The probe: lock and unlock one name as fast as it can while the attack runs.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let prober = {
        let (stop, url) = (stop.clone(), probe_url.clone());
        tokio::spawn(async move {
            let client = locksmith::connect_with_ttl(&url, ttl).await.unwrap_or_else(|e| panic!("{e}"));
            let (mut cycles, mut slowest, mut last_token) = (0u32, Duration::ZERO, 0);
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let t = std::time::Instant::now();
                let g = client.lock("probe/cycle").await.unwrap_or_else(|e| panic!("probe cycle {cycles}: {e}"));
                assert!(g.token() > last_token, "probe token {} after {last_token}", g.token());
                last_token = g.token();
                g.unlock().await.unwrap_or_else(|e| panic!("probe unlock {cycles}: {e}"));
                slowest = slowest.max(t.elapsed());
                cycles += 1;
            }
            (cycles, slowest)
        })
    };

    let (client_as_node, client_as_node_key) = certs.client_as_node_cert();
    let (node2, node2_key) = certs.node_cert_of(2);
    let (node7, node7_key) = certs.node_cert_of(7);
    let as_client = Tls { ca: &peer_ca, cert: &client, key: &client_key };
    let as_fake_node = Tls { ca: &peer_ca, cert: &client_as_node, key: &client_as_node_key };
    let as_node2 = Tls { ca: &peer_ca, cert: &node2, key: &node2_key };
    let refused = |code| matches!(code, tonic::Code::Unauthenticated | tonic::Code::PermissionDenied);
    for id in c.ids() {
        for rpc in RPCS {
            for from in [INTRUDER, 1] {
                // (a) the clients' CA, whatever the certificate names; (b) a valid token.
                for (tls, credential) in [
                    (as_client, Credential::Nothing),
                    (as_fake_node, Credential::Nothing),
                    (as_client, Credential::Bearer(&admin.0)),
                    (as_client, Credential::Bearer(&probe.0)),
                ] {
                    let code = forge_over(&c.addr(id), Some(tls), id, rpc, from, credential).await;
                    assert_eq!(
                        code,
                        tonic::Code::Unauthenticated,
                        "node {id}, {rpc:?} from {from}, {tls:?} {credential:?}"
                    );
                }
                // (c) node 2's certificate, the request claiming another node.
                let code = forge_over(&c.addr(id), Some(as_node2), id, rpc, from, Credential::Nothing).await;
                assert!(refused(code), "node {id}, {rpc:?} from {from} with node 2's certificate: {code:?}");
            }
        }
    }

    // Membership changes: with the clients' certificates, a lock-only token, and the certificate
    // of a node that is no member — exit 77, nothing changes.
    let change = |cert: &std::path::Path, key: &std::path::Path, token: Option<&str>, args: &[&str]| {
        let mut url =
            format!("locksmith://{}?tls=true&ca={}&cert={}&key={}", c.hosts(), path(&peer_ca), path(cert), path(key));
        if let Some(t) = token {
            url.push_str(&format!("&token_file={t}"));
        }
        c.cluster_command(&[args, &["--timeout", "2s"]].concat(), Some(&url))
    };
    for (cert, key, token) in [
        (&client, &client_key, None),
        (&client_as_node, &client_as_node_key, None),
        (&client, &client_key, Some(probe.2.as_str())),
        (&node7, &node7_key, None),
    ] {
        for args in [vec!["remove", "3"], vec!["add", "7", "127.0.0.1:1"]] {
            let out = change(cert, key, token, &args);
            assert_eq!(out.status.code(), Some(77), "{args:?} with {} {token:?}: {}", cert.display(), stderr(&out));
        }
    }

    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (cycles, slowest) = prober.await.unwrap_or_else(|e| panic!("the probe failed: {e}"));
    eprintln!("probe: {cycles} lock cycles during the attack, slowest {slowest:?}");
    assert!(cycles > 0, "the probe never locked");
    assert!(slowest < ttl, "a probe cycle took {slowest:?}");
    assert_eq!(view(&c, None), before, "the cluster's term, leader or voters changed");
    assert!(guard.is_held(), "the holder lost its lock");
    let status = holder.status(Some("probe/fenced")).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(status.first().map(|s| s.last_token), Some(token_before), "{status:?}");
    guard.unlock().await.unwrap_or_else(|e| panic!("{e}"));
    let next = holder.lock("probe/fenced").await.unwrap_or_else(|e| panic!("{e}"));
    assert!(next.token() > token_before, "token {} after {token_before}", next.token());
    let _ = next.unlock().await;

    // A member's node certificate is a node credential for membership changes.
    let (node1, node1_key) = certs.node_cert_of(1);
    let out = change(&node1, &node1_key, None, &["add", "3", &c.addr(3)]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("nothing changed"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

/// Over mutual TLS without `--peer-ca` (nodes authenticated by the cluster secret, their
/// certificates signed by the clients' CA), the certificate of a client that the clients' CA
/// signed (the nodes accept it in the TLS handshake) is no node credential: forged calls over TLS
/// with it are refused, and the cluster's term, leader and voters stay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_mutual_tls_a_client_certificate_is_no_node() {
    let certs = TestCerts::generate();
    let path = |p: std::path::PathBuf| p.display().to_string();
    let (cert, key, ca) = (path(certs.node_cert()), path(certs.node_key()), path(certs.ca()));
    let query = format!("tls=true&ca={ca}&cert={}&key={}", path(certs.client_cert()), path(certs.client_key()));
    let args = ["--tls-cert", cert.as_str(), "--tls-key", key.as_str(), "--client-ca", ca.as_str()];
    let c = NativeCluster::start_with(BIN.as_ref(), 3, &args, Some(&query));
    let (ca, client, client_key) = (certs.ca(), certs.client_cert(), certs.client_key());
    let tls = Tls { ca: &ca, cert: &client, key: &client_key };
    let before = view(&c, None);
    for id in c.ids() {
        for rpc in RPCS {
            for from in [INTRUDER, 1] {
                let code = forge_over(&c.addr(id), Some(tls), id, rpc, from, Credential::Nothing).await;
                assert_eq!(code, tonic::Code::Unauthenticated, "node {id}, {rpc:?} from {from} over TLS");
            }
        }
    }
    assert_eq!(view(&c, None), before, "the cluster's term, leader or voters changed");
}

/// The README's rolling upgrade from a TLS cluster authenticated by the secret (its nodes'
/// certificates signed by the clients' CA) to node certificates: three rounds of restarts, one
/// node at a time; a lock held throughout stays held with its token, every node hears the
/// leader after each restart, and at the end the cluster elects a new leader and grants with
/// node certificates doing the talking.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_certificates_are_turned_on_in_a_running_tls_cluster_one_node_at_a_time() {
    let certs = TestCerts::with_nodes(&[1, 2, 3]);
    let path = |p: &std::path::Path| p.display().to_string();
    let read = |p: &std::path::Path| std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{e}"));
    let both = certs.dir().join("both-cas.pem");
    std::fs::write(&both, read(&certs.ca()) + &read(&certs.peer_ca())).unwrap_or_else(|e| panic!("{e}"));
    let (ca, both) = (path(&certs.ca()), path(&both));
    let (old_cert, old_key) = (path(&certs.node_cert()), path(&certs.node_key()));
    let query = format!("tls=true&ca={both}&cert={}&key={}", path(&certs.client_cert()), path(&certs.client_key()));
    let mut c = NativeCluster::start_with(
        BIN.as_ref(),
        3,
        &["--tls-cert", &old_cert, "--tls-key", &old_key, "--client-ca", &ca],
        Some(&query),
    );
    let holder = locksmith::connect_with_ttl(&c.url(), Duration::from_secs(5)).await.unwrap_or_else(|e| panic!("{e}"));
    let guard = holder.lock("upgraded").await.unwrap_or_else(|e| panic!("{e}"));
    let token = guard.token();
    let rounds: [(&[&str], bool); 3] = [
        // 1. Every node trusts the nodes' CA too.
        (&["--tls-cert", &old_cert, "--tls-key", &old_key, "--client-ca", &both], false),
        // 2. Node certificates, still accepting peers that present the old ones (with the secret).
        (&["--client-ca", &both, "--accept-unauthenticated-peers"], true),
        // 3. Node certificates and the secret, both demanded.
        (&["--client-ca", &ca], true),
    ];
    for (round, (args, node_certs)) in rounds.iter().enumerate() {
        c.set_serve_args(args);
        if *node_certs {
            c.set_node_certs(&certs, true);
        }
        for id in c.ids() {
            c.restart(id);
            caught_up(&c, id, &holder).await;
        }
        assert!(guard.is_held(), "the holder lost its lock in round {}", round + 1);
    }
    let status = holder.status(Some("upgraded")).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(status.first().map(|s| s.last_token), Some(token), "{status:?}");
    guard.unlock().await.unwrap_or_else(|e| panic!("{e}"));
    // The last configuration elects and grants on its own.
    let leader = c.wait_for_leader(Duration::from_secs(10));
    c.kill9(leader);
    let next_leader = c.wait_for_leader(Duration::from_secs(20));
    assert_ne!(next_leader, leader);
    let after = holder.lock("upgraded").await.unwrap_or_else(|e| panic!("{e}"));
    assert!(after.token() > token, "token {} after {token}", after.token());
    let _ = after.unlock().await;
}

/// Waits until node `id` has applied a grant made after its restart: the leader replicates to it
/// (a node's own view of who leads survives a restart, and proves nothing).
async fn caught_up(c: &NativeCluster, id: u64, client: &locksmith::Client) {
    let g = client.lock("probe").await.unwrap_or_else(|e| panic!("{e}"));
    let _ = g.unlock().await;
    let status = |url: &str| {
        let out = c.cluster_command(&["status", "--json"], Some(url));
        serde_json::from_slice::<Value>(&out.stdout).unwrap_or(Value::Null)
    };
    let target = status(&c.url())["last_log_index"].as_u64().unwrap_or(u64::MAX);
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    loop {
        let s = status(&c.only_node_url(id));
        if s["applied_index"].as_u64().is_some_and(|a| a >= target) {
            return;
        }
        assert!(std::time::Instant::now() < deadline, "node {id} did not catch up to {target}: {s}\n{}", c.log(id));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
