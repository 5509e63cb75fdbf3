//! The server main loop.

use std::future::Future;
use std::time::Duration;

use locksmith_proto::locksmith_server::LocksmithServer;
use tokio::net::TcpListener;
use tonic_health::server::HealthReporter;
use tonic_health::ServingStatus;

use crate::error::ServerError;
use crate::grpc::Grpc;
use crate::options::ServeOptions;
use crate::service::Service;

/// How long open session streams get to finish after a stop was asked for. Clients resume their
/// sessions on the next server, so there is no reason to wait for them.
const DRAIN: Duration = Duration::from_millis(500);

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
    let peer_ca = crate::cluster::peer_ca(&opts)?;
    let (service, mut task) = match &opts.cluster {
        None => Service::start_durable(&opts.data_dir, opts.limits, opts.durability)?,
        Some(cluster) => {
            let node = crate::cluster::start_raft(&opts, cluster, peer_ca.clone()).await?;
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
