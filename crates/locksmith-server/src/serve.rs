//! The server main loop.

use std::future::Future;
use std::path::PathBuf;
use std::time::Duration;

use tokio::net::TcpListener;

use crate::error::ServerError;
use crate::grpc::Grpc;
use crate::machine::{Durability, Limits};
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
}

impl ServeOptions {
    /// Options for `data_dir` with default limits.
    pub fn new(data_dir: impl Into<PathBuf>) -> Self {
        Self { data_dir: data_dir.into(), limits: Limits::default(), durability: Durability::default() }
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
    let (service, mut task) = Service::start_durable(&opts.data_dir, opts.limits, opts.durability)?;
    let addr = listener.local_addr()?;
    tracing::info!(%addr, data_dir = %opts.data_dir.display(), "locksmith server listening");
    // With our own listener tonic's `tcp_nodelay` does not apply: set it on every accepted
    // stream, or Nagle holds small answers back until the peer's delayed ACK (~40 ms).
    let incoming = tokio_stream::StreamExt::map(tokio_stream::wrappers::TcpListenerStream::new(listener), |s| {
        s.inspect(|s| {
            if let Err(e) = s.set_nodelay(true) {
                tracing::debug!(error = %e, "cannot set TCP_NODELAY");
            }
        })
    });
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let router = tonic::transport::Server::builder()
        .tcp_nodelay(true)
        .add_service(Grpc::server(service.clone()))
        .serve_with_incoming_shutdown(incoming, async {
            let _ = stop_rx.await;
        });
    tokio::pin!(router);
    let served = tokio::select! {
        r = &mut router => r.map_err(ServerError::from),
        r = &mut task => return task_result(r).and(Err(ServerError::Failed("lock service stopped unexpectedly".into()))),
        _ = shutdown => {
            tracing::info!("stopping");
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

fn task_result(r: Result<Result<(), ServerError>, tokio::task::JoinError>) -> Result<(), ServerError> {
    match r {
        Ok(r) => r,
        Err(e) => Err(ServerError::Failed(format!("lock service task failed: {e}"))),
    }
}
