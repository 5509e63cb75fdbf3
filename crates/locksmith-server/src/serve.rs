//! The server main loop.

use std::future::Future;
use std::path::PathBuf;
use std::time::Duration;

use locksmith_proto::locksmith_server::LocksmithServer;
use tokio::net::TcpListener;
use tonic_health::server::HealthReporter;
use tonic_health::ServingStatus;

use crate::error::ServerError;
use crate::grpc::Grpc;
use crate::machine::{Durability, Limits};
use crate::net_limits::NetLimits;
use crate::service::Service;

/// How long open session streams get to finish after a stop was asked for. Clients resume their
/// sessions on the next server, so there is no reason to wait for them.
const DRAIN: Duration = Duration::from_millis(500);

/// What `locksmith serve` needs.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ServeOptions {
    /// The data directory (created if missing).
    pub data_dir: PathBuf,
    /// Server limits.
    pub limits: Limits,
    /// What is synced before a grant is acknowledged (see [`Durability`]).
    pub durability: Durability,
    /// TLS for client connections; `None`: plain HTTP/2.
    pub tls: Option<ServerTls>,
    /// Who may do what; `None`: every client may do everything.
    pub auth: Option<crate::auth::Auth>,
    /// Bounds on connections and streams.
    pub net: NetLimits,
    /// This node's part in a cluster; `None`: a single node.
    pub cluster: Option<crate::cluster::ClusterOptions>,
}

/// The server's TLS material, PEM: its certificate chain and key, and optionally the CA whose
/// client certificates it demands (mutual TLS: a client without one is refused in the
/// handshake). `Debug` shows no key.
#[derive(Clone)]
#[non_exhaustive]
pub struct ServerTls {
    /// Certificate chain, PEM.
    pub cert: Vec<u8>,
    /// Private key, PEM. A secret.
    pub key: Vec<u8>,
    /// Authorities whose client certificates are accepted, PEM; `Some` makes one required.
    pub client_ca: Option<Vec<u8>>,
    /// The authority of node certificates (a cluster's `--peer-ca`), PEM: peers present one
    /// that names their node id, and `cert` must be this node's own. Its certificates are also
    /// accepted in the handshake (optional for clients when there is no `client_ca`), but only
    /// the Raft and membership services take them as a node's.
    pub peer_ca: Option<Vec<u8>>,
}

impl ServerTls {
    /// TLS with `cert` and `key` (PEM); no client certificates asked for.
    pub fn new(cert: Vec<u8>, key: Vec<u8>) -> Self {
        Self { cert, key, client_ca: None, peer_ca: None }
    }

    /// Require a client certificate signed by one of `ca` (PEM).
    #[must_use]
    pub fn client_ca(mut self, ca: Vec<u8>) -> Self {
        self.client_ca = Some(ca);
        self
    }

    /// Node certificates signed by `ca` (PEM): see [`ServerTls::peer_ca`](Self#structfield.peer_ca).
    #[must_use]
    pub fn peer_ca(mut self, ca: Vec<u8>) -> Self {
        self.peer_ca = Some(ca);
        self
    }

    fn config(&self) -> tonic::transport::ServerTlsConfig {
        use tonic::transport::{Certificate, Identity, ServerTlsConfig};
        let config = ServerTlsConfig::new().identity(Identity::from_pem(&self.cert, &self.key));
        match (&self.client_ca, &self.peer_ca) {
            (Some(ca), None) => config.client_ca_root(Certificate::from_pem(ca)),
            // One handshake for clients and nodes: either authority's certificate passes it; the
            // Raft gate then checks a node's against the peer CA alone.
            (Some(ca), Some(peer)) => config.client_ca_root(Certificate::from_pem([&ca[..], b"\n", peer].concat())),
            (None, Some(peer)) => config.client_ca_root(Certificate::from_pem(peer)).client_auth_optional(true),
            (None, None) => config,
        }
    }
}

impl std::fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerTls")
            .field("client_ca", &self.client_ca.is_some())
            .field("peer_ca", &self.peer_ca.is_some())
            .finish_non_exhaustive()
    }
}

impl ServeOptions {
    /// Options for `data_dir` with default limits.
    pub fn new(data_dir: impl Into<PathBuf>) -> Self {
        Self {
            data_dir: data_dir.into(),
            limits: Limits::default(),
            durability: Durability::default(),
            tls: None,
            auth: None,
            net: NetLimits::default(),
            cluster: None,
        }
    }

    /// The same options for node `cluster.node_id` of a cluster.
    pub fn cluster(mut self, cluster: crate::cluster::ClusterOptions) -> Self {
        self.cluster = Some(cluster);
        self
    }

    /// The same options with other connection and stream bounds.
    pub fn net_limits(mut self, net: NetLimits) -> Self {
        self.net = net;
        self
    }

    /// The same options with other lock-service limits.
    pub fn limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// The same options with every call authenticated and authorized by `auth`.
    pub fn auth(mut self, auth: crate::auth::Auth) -> Self {
        self.auth = Some(auth);
        self
    }

    /// The same options serving TLS with `tls`.
    pub fn tls(mut self, tls: ServerTls) -> Self {
        self.tls = Some(tls);
        self
    }

    /// The same options with another [`Durability`].
    ///
    /// ```
    /// use locksmith_server::{Durability, ServeOptions};
    /// let opts = ServeOptions::new("./data").durability(Durability::Leases);
    /// assert_eq!(opts.durability, Durability::Leases);
    /// ```
    pub fn durability(mut self, durability: Durability) -> Self {
        self.durability = durability;
        self
    }
}

/// HTTP/2 flow-control window of one stream: a client cannot have more than this in flight on
/// a stream that the server has not read (the lock service's messages are at most 64 KiB).
const STREAM_WINDOW: u32 = 64 * 1024;
/// The same for all the streams of one connection together.
const CONNECTION_WINDOW: u32 = 256 * 1024;
/// Headers of one request, decoded.
const MAX_HEADER_LIST: u32 = 16 * 1024;
/// HTTP/2's smallest maximum frame size, the default.
const MAX_FRAME: u32 = 16 * 1024;
/// A health check request (`grpc.health.v1.HealthCheckRequest`: a service name).
const MAX_HEALTH_MESSAGE: usize = 1024;

/// Restores the data directory, serves gRPC on `listener` until `shutdown` resolves, then
/// stops: every acknowledged grant is already durable, and the log is synced once more.
///
/// The standard gRPC health service (`grpc.health.v1.Health`) answers on the same port:
/// `SERVING` for `locksmith.v1.Locksmith` and for the server as a whole (`""`) while the lock
/// service runs, `NOT_SERVING` once it has stopped or is stopping.
///
/// # Cancel safety
/// Dropping the future stops serving at once; acknowledged grants are durable already, and
/// records not yet synced are lazy ones (releases, session ends) that the next start tolerates.
///
/// # Errors
/// A corrupt or locked data directory (nothing is changed), or a failing disk.
pub async fn serve(
    listener: TcpListener,
    opts: ServeOptions,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), ServerError> {
    // TLS settings are checked before the data directory is touched: a bad key changes nothing.
    let net = &opts.net;
    let mut builder = tonic::transport::Server::builder()
        .max_concurrent_streams(net.max_streams_per_connection)
        .http2_keepalive_interval(net.keepalive_interval)
        .http2_keepalive_timeout(Some(net.keepalive_timeout))
        // What one connection can make the server hold before a request is decoded (and, for
        // the health service, before any authentication): flow-control windows the client may
        // fill without the server reading, and the headers of one request.
        .initial_stream_window_size(STREAM_WINDOW)
        .initial_connection_window_size(CONNECTION_WINDOW)
        .http2_max_header_list_size(MAX_HEADER_LIST)
        .max_frame_size(MAX_FRAME);
    if let Some(tls) = &opts.tls {
        builder = builder.tls_config(tls.config()).map_err(|e| {
            ServerError::Config(format!("TLS certificate or key unusable: {}", locksmith_core::error_chain(&e)))
        })?;
    }
    let mut raft = None;
    let peer_ca = peer_ca(&opts)?;
    let (service, mut task) = match &opts.cluster {
        None => Service::start_durable(&opts.data_dir, opts.limits, opts.durability)?,
        Some(cluster) => {
            let node = start_raft(&opts, cluster, peer_ca.clone()).await?;
            let (service, task) = Service::start_cluster(node.clone(), opts.limits.clone());
            raft = Some(node);
            (service, task)
        }
    };
    let addr = listener.local_addr()?;
    tracing::info!(%addr, data_dir = %opts.data_dir.display(), tls = opts.tls.is_some(), "locksmith server listening");
    tracing::info!(
        max_connections = net.max_connections,
        max_connections_per_address = net.max_connections_per_address,
        max_streams_per_connection = net.max_streams_per_connection,
        max_queued_messages = net.max_queued_messages,
        first_byte_timeout = ?net.first_byte_timeout,
        open_timeout = ?net.open_timeout,
        keepalive_interval = ?net.keepalive_interval,
        keepalive_timeout = ?net.keepalive_timeout,
        tcp_keepalive = ?net.tcp_keepalive,
        "connection limits"
    );
    let incoming = crate::accept::incoming(listener, net, opts.tls.is_some());
    let (health, health_service) = tonic_health::server::health_reporter();
    // Anyone may ask for health (no credentials): a request names a service, so a few hundred
    // bytes; a larger announced message is refused at its header instead of being buffered.
    let health_service = health_service.max_decoding_message_size(MAX_HEALTH_MESSAGE);
    health.set_serving::<LocksmithServer<Grpc>>().await;
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    // One byte budget per address for incomplete messages, across the services that decode a
    // message before they know who sent it. Raft is not among them: its gate refuses a call
    // that is not from a node at its headers, body unread, and a node's replication (batches
    // up to 2 MiB, several in flight) must not compete with clients on the same address.
    let budgets = crate::budget::Budgets::new(crate::budget::PARTIAL_BYTES_PER_ADDRESS);
    let router = builder
        .add_service(budgets.wrap(health_service))
        .add_service(budgets.wrap(Grpc::server_with(service.clone(), opts.auth.clone(), net.clone())))
        // Peers reach a cluster node on the same port, through the same TLS.
        .add_optional_service(raft.as_ref().map(|node| node.service()))
        // A single node answers that it is not a cluster.
        .add_service(budgets.wrap(crate::cluster::admin::Admin::server(
            raft.clone(),
            opts.auth.clone(),
            opts.cluster.as_ref().and_then(|c| c.secret.clone()),
            peer_ca.clone(),
        )))
        .serve_with_incoming_shutdown(incoming, async {
            let _ = stop_rx.await;
        });
    tokio::pin!(router);
    // The policy file is re-read when it changes: revoking a token needs no restart.
    let _watch = opts.auth.clone().map(|auth| {
        AbortOnDrop(tokio::spawn(async move {
            let mut every = tokio::time::interval(Duration::from_secs(1));
            loop {
                every.tick().await;
                auth.reload_if_changed();
            }
        }))
    });
    // A Raft core that stopped (a panic, a fatal storage error) leaves a node that can neither
    // serve nor follow: it says so to health checkers and exits, for its supervisor to restart it.
    // So does a node that a leader of another cluster with the same node ids reached (wiped
    // nodes restarted with --peers formed it): it says why and exits 78 rather than join it.
    let raft_stopped = async {
        match &raft {
            Some(node) => {
                let (mut leadership, mut foreign) = (node.leadership(), node.foreign_cluster());
                tokio::select! {
                    _ = leadership.wait_for(|l| l.stopped) => None,
                    f = foreign.wait_for(Option::is_some) => f.ok().and_then(|f| (*f).clone()),
                }
            }
            None => std::future::pending().await,
        }
    };
    let served = tokio::select! {
        r = &mut router => r.map_err(ServerError::from),
        foreign = raft_stopped => {
            not_serving(&health).await;
            service.shutdown();
            return Err(match foreign {
                Some(message) => ServerError::Config(message),
                None => {
                    let storage = raft.as_ref().is_some_and(|node| node.stopped_by_storage());
                    tracing::error!(storage, "the raft core stopped; this node exits so that its supervisor restarts it");
                    ServerError::RaftStopped { storage }
                }
            });
        }
        r = &mut task => {
            not_serving(&health).await;
            return task_result(r).and(Err(ServerError::Failed("lock service stopped unexpectedly".into())));
        }
        _ = shutdown => {
            tracing::info!("stopping");
            not_serving(&health).await;
            let _ = stop_tx.send(());
            let _ = tokio::time::timeout(DRAIN, &mut router).await;
            Ok(())
        }
    };
    service.shutdown();
    if let Some(node) = &raft {
        if let Err(e) = node.shutdown().await {
            tracing::warn!(error = %e, "raft node did not stop cleanly");
        }
    }
    let finished = tokio::time::timeout(Duration::from_secs(10), task)
        .await
        .map_err(|_| ServerError::Failed("lock service did not stop in 10 s".into()))?;
    task_result(finished)?;
    served
}

/// The peer CA of `opts`, checked: usable, and this node's own certificate a node certificate
/// it signed naming this node (else peers would refuse every call of this node).
fn peer_ca(opts: &ServeOptions) -> Result<Option<locksmith_raft::PeerCa>, ServerError> {
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

/// Starts this node's Raft node in `<data-dir>/raft`; over TLS to its peers when the server
/// serves TLS (its own certificate as the client certificate; the peers' authority is its
/// `--peer-ca`, or without one its `--client-ca`: every node's certificate must be signed by it).
async fn start_raft(
    opts: &ServeOptions,
    cluster: &crate::cluster::ClusterOptions,
    peer_ca: Option<locksmith_raft::PeerCa>,
) -> Result<std::sync::Arc<locksmith_raft::RaftNode<crate::cluster::ReplicaMachine>>, ServerError> {
    if opts.durability != Durability::Grants {
        return Err(ServerError::Config(
            "a cluster replicates every grant: --durability leases is for a single node".into(),
        ));
    }
    let mut config = locksmith_raft::NodeConfig::default();
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
    let machine = crate::cluster::ReplicaMachine::new(opts.limits.clone());
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
        other => ServerError::Failed(format!("raft: {other}")),
    })?;
    if cluster.peers.is_empty() && node.cluster().nodes.is_empty() {
        tracing::info!(node = cluster.node_id, "cluster node started; waiting to be added (locksmith cluster add)");
    } else {
        tracing::info!(node = cluster.node_id, peers = ?cluster.peers, "cluster node started");
    }
    Ok(std::sync::Arc::new(node))
}

/// Tells health checkers that the lock service is gone (or going).
async fn not_serving(health: &HealthReporter) {
    health.set_not_serving::<LocksmithServer<Grpc>>().await;
    health.set_service_status("", ServingStatus::NotServing).await;
}

fn task_result(r: Result<Result<(), ServerError>, tokio::task::JoinError>) -> Result<(), ServerError> {
    match r {
        Ok(r) => r,
        Err(e) => Err(ServerError::Failed(format!("lock service task failed: {e}"))),
    }
}

/// Aborts a helper task (the policy watcher) when the server stops.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
