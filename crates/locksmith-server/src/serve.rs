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
}

impl ServerTls {
    /// TLS with `cert` and `key` (PEM); no client certificates asked for.
    pub fn new(cert: Vec<u8>, key: Vec<u8>) -> Self {
        Self { cert, key, client_ca: None }
    }

    /// Require a client certificate signed by one of `ca` (PEM).
    #[must_use]
    pub fn client_ca(mut self, ca: Vec<u8>) -> Self {
        self.client_ca = Some(ca);
        self
    }

    fn config(&self) -> tonic::transport::ServerTlsConfig {
        use tonic::transport::{Certificate, Identity, ServerTlsConfig};
        let config = ServerTlsConfig::new().identity(Identity::from_pem(&self.cert, &self.key));
        match &self.client_ca {
            Some(ca) => config.client_ca_root(Certificate::from_pem(ca)),
            None => config,
        }
    }
}

impl std::fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerTls").field("client_ca", &self.client_ca.is_some()).finish_non_exhaustive()
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
        }
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
        .http2_keepalive_timeout(Some(net.keepalive_timeout));
    if let Some(tls) = &opts.tls {
        builder = builder.tls_config(tls.config()).map_err(|e| {
            ServerError::Config(format!("TLS certificate or key unusable: {}", locksmith_core::error_chain(&e)))
        })?;
    }
    let (service, mut task) = Service::start_durable(&opts.data_dir, opts.limits, opts.durability)?;
    let addr = listener.local_addr()?;
    tracing::info!(%addr, data_dir = %opts.data_dir.display(), tls = opts.tls.is_some(), "locksmith server listening");
    tracing::info!(
        max_connections = net.max_connections,
        max_streams_per_connection = net.max_streams_per_connection,
        max_queued_messages = net.max_queued_messages,
        first_byte_timeout = ?net.first_byte_timeout,
        open_timeout = ?net.open_timeout,
        keepalive_interval = ?net.keepalive_interval,
        keepalive_timeout = ?net.keepalive_timeout,
        tcp_keepalive = ?net.tcp_keepalive,
        "connection limits"
    );
    let incoming = crate::accept::incoming(listener, net);
    let (health, health_service) = tonic_health::server::health_reporter();
    health.set_serving::<LocksmithServer<Grpc>>().await;
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let router = builder
        .add_service(health_service)
        .add_service(Grpc::server_with(service.clone(), opts.auth.clone(), net.clone()))
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
    let served = tokio::select! {
        r = &mut router => r.map_err(ServerError::from),
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
