//! The server main loop.

use std::future::Future;
use std::path::PathBuf;

use locksmith_core::Error;
use tokio::net::TcpListener;

use crate::grpc::Grpc;
use crate::machine::Limits;
use crate::service::Service;

/// What `locksmith serve` needs.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ServeOptions {
    /// The data directory (created if missing).
    pub data_dir: PathBuf,
    /// Server limits.
    pub limits: Limits,
}

impl ServeOptions {
    /// Options for `data_dir` with default limits.
    pub fn new(data_dir: impl Into<PathBuf>) -> Self {
        Self { data_dir: data_dir.into(), limits: Limits::default() }
    }
}

/// Restores the data directory, serves gRPC on `listener` until `shutdown` resolves, then
/// drains: every acknowledged grant is already durable, so a stop loses nothing.
///
/// # Errors
/// A corrupt or locked data directory (nothing is changed), or a failing disk.
pub async fn serve(
    listener: TcpListener,
    opts: ServeOptions,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), Error> {
    let (service, task) = Service::start_durable(&opts.data_dir, opts.limits)?;
    let addr = listener.local_addr()?;
    tracing::info!(%addr, data_dir = %opts.data_dir.display(), "locksmith server listening");
    let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
    let router = tonic::transport::Server::builder().tcp_nodelay(true).add_service(Grpc::server(service.clone()));
    let stop = service.clone();
    let result = tokio::select! {
        r = router.serve_with_incoming_shutdown(incoming, shutdown) => r.map_err(|e| Error::Io(std::io::Error::other(e))),
        r = wait_task(task) => return r,
    };
    tracing::info!("shutting down");
    stop.shutdown();
    result
}

async fn wait_task(task: tokio::task::JoinHandle<Result<(), Error>>) -> Result<(), Error> {
    match task.await {
        Ok(r) => {
            r?;
            Err(Error::Io(std::io::Error::other("lock service stopped")))
        }
        Err(e) => Err(Error::Io(std::io::Error::other(format!("lock service task failed: {e}")))),
    }
}
