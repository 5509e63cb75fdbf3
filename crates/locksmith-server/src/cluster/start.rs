//! Starting a cluster node's Raft node (`locksmith serve --node-id`): its TLS to the peers,
//! node authentication and data directory, checked before anything starts.

use super::{ClusterOptions, ReplicaMachine};
use crate::error::ServerError;
use crate::machine::Durability;
use crate::options::ServeOptions;

/// The peer CA of `opts`, checked: usable, and this node's own certificate a node certificate
/// it signed naming this node (else peers would refuse every call of this node).
pub(crate) fn peer_ca(opts: &ServeOptions) -> Result<Option<locksmith_raft::PeerCa>, ServerError> {
    let Some(tls) = &opts.tls else { return Ok(None) };
    let Some(pem) = &tls.peer_ca else { return Ok(None) };
    let ca = locksmith_raft::PeerCa::from_pem(pem).map_err(|e| ServerError::Config(format!("--peer-ca: {e}")))?;
    let Some(cluster) = &opts.cluster else {
        return Err(ServerError::Config("--peer-ca is for the nodes of a cluster (with --node-id)".into()));
    };
    match ca.node_id_pem(&tls.cert) {
        Ok(id) if id == cluster.node_id => Ok(Some(ca)),
        Ok(id) => Err(ServerError::Config(format!(
            "--tls-cert is the node certificate of node {id}, this is node {} (with --peer-ca, --tls-cert must be \
             this node's certificate: SAN URI locksmith-node://CLUSTER/{})",
            cluster.node_id, cluster.node_id
        ))),
        Err(e) => Err(ServerError::Config(format!(
            "with --peer-ca, --tls-cert must be this node's certificate, signed by the peer CA, for server and client \
             use, with the SAN URI locksmith-node://CLUSTER/{}: {e}",
            cluster.node_id
        ))),
    }
}

/// The node's heartbeat and election timeout, checked (`ServerError::Config` naming the option
/// at fault, as `locksmith serve` spells it).
pub(crate) fn timings(cluster: &ClusterOptions) -> Result<locksmith_raft::Timings, ServerError> {
    locksmith_raft::Timings::with(cluster.heartbeat, cluster.election_timeout)
        .map_err(|e| ServerError::Config(format!("--{}: {e}", e.option())))
}

/// Starts this node's Raft node in `<data-dir>/raft`; over TLS to its peers when the server
/// serves TLS (its own certificate as the client certificate; the peers' authority is its
/// `--peer-ca`, or without one its `--client-ca`: every node's certificate must be signed by it).
pub(crate) async fn start_raft(
    opts: &ServeOptions,
    cluster: &ClusterOptions,
    peer_ca: Option<locksmith_raft::PeerCa>,
) -> Result<std::sync::Arc<locksmith_raft::RaftNode<ReplicaMachine>>, ServerError> {
    if opts.durability != Durability::Grants {
        return Err(ServerError::Config(
            "a cluster replicates every grant: --durability leases is for a single node".into(),
        ));
    }
    let timings = timings(cluster)?;
    let mut config = locksmith_raft::NodeConfig::default().with_timings(timings);
    if let Some(tls) = &opts.tls {
        let ca = match (&tls.peer_ca, &tls.client_ca) {
            // While upgrading to node certificates, the peers not yet restarted still serve the
            // certificates the clients' CA signed.
            (Some(peer), Some(client)) if cluster.accept_unauthenticated_peers => {
                [&peer[..], b"\n", &client[..]].concat()
            }
            (Some(ca), _) | (None, Some(ca)) => ca.clone(),
            (None, None) => {
                return Err(ServerError::Config(
                    "a cluster over TLS needs --peer-ca (the authority of the node certificates; each node's \
                     --tls-cert its node certificate) or at least --client-ca and --cluster-secret-file"
                        .into(),
                ))
            }
        };
        config.tls = Some(
            tonic::transport::ClientTlsConfig::new()
                .ca_certificate(tonic::transport::Certificate::from_pem(ca))
                .identity(tonic::transport::Identity::from_pem(&tls.cert, &tls.key)),
        );
    }
    config.routes = cluster.routes.clone();
    let auth = match (cluster.secret.clone(), peer_ca) {
        (Some(secret), None) => locksmith_raft::NodeAuth::new(secret),
        (None, Some(ca)) => locksmith_raft::NodeAuth::certificates(ca),
        (Some(secret), Some(ca)) => locksmith_raft::NodeAuth::certificates(ca).secret(secret),
        (None, None) => {
            let add = if opts.tls.is_some() {
                "--peer-ca (with each node's --tls-cert its node certificate) or --cluster-secret-file"
            } else {
                "the same --cluster-secret-file on every node"
            };
            return Err(ServerError::Config(format!(
                "a cluster needs node authentication: add {add} (without it any process that reaches the port could \
                 speak Raft and rewrite the cluster)"
            )));
        }
    };
    config.auth = Some(
        auth.accept_unauthenticated(cluster.accept_unauthenticated_peers)
            .on_refused(|r| crate::telemetry::raft_refused(r.call, r.reason)),
    );
    if cluster.accept_unauthenticated_peers {
        tracing::warn!(
            "accepting raft calls without node credentials (--accept-unauthenticated-peers): only while upgrading \
             a running cluster; restart without it once every node has its node certificate or cluster secret"
        );
    }
    std::fs::create_dir_all(&opts.data_dir)
        .map_err(|source| ServerError::DataDir { path: opts.data_dir.clone(), source })?;
    let machine = ReplicaMachine::new(opts.limits.clone());
    let node = locksmith_raft::RaftNode::start(
        cluster.node_id,
        opts.data_dir.join("raft"),
        cluster.peers.clone(),
        config,
        machine,
    )
    .await
    .map_err(|e| match e {
        locksmith_raft::StartError::Store(locksmith_raft::StoreError::Corrupt(m)) => ServerError::Corrupt(m),
        locksmith_raft::StartError::Store(locksmith_raft::StoreError::InUse(path)) => ServerError::InUse(path),
        locksmith_raft::StartError::Store(locksmith_raft::StoreError::Io(source))
            if locksmith_disk::is_no_space(&source) =>
        {
            ServerError::NoSpace { path: opts.data_dir.clone(), source }
        }
        locksmith_raft::StartError::Config(m) => ServerError::Config(m),
        locksmith_raft::StartError::Timing(e) => ServerError::Config(format!("--{}: {e}", e.option())),
        other => ServerError::Failed(format!("raft: {other}")),
    })?;
    if cluster.peers.is_empty() && node.cluster().nodes.is_empty() {
        tracing::info!(node = cluster.node_id, "cluster node started; waiting to be added (locksmith cluster add)");
    } else {
        tracing::info!(node = cluster.node_id, peers = ?cluster.peers, "cluster node started");
    }
    Ok(std::sync::Arc::new(node))
}
