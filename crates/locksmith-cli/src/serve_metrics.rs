//! `locksmith serve --metrics-listen`: the Prometheus text of the server's metrics
//! (`locksmith_server::telemetry`) over plain HTTP/1, on a listener bounded on its own.
//!
//! The exporter's own HTTP listener keeps every connection it accepts for as long as the peer
//! wants and, out of file descriptors, retries `accept` in a tight loop that logs each failure:
//! idle connections to the metrics port could take every descriptor of the process, starve the
//! lock port and a cluster's Raft, and fill the disk with warnings. Here the exporter only
//! renders, and this listener serves at most [`MAX_CONNECTIONS`] connections at once (further
//! ones wait in the kernel's backlog, holding no descriptor of ours), gives each
//! [`CONNECTION_DEADLINE`] to send its request and read the answer, answers one request per
//! connection, and backs off (logging once per burst) when `accept` fails for lack of resources.

use std::convert::Infallible;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

/// Metrics connections served at once. A scraper or two, a dashboard, a person with curl: a
/// handful is plenty, and it is a tiny share of the descriptors `serve` keeps for lock clients.
pub(crate) const MAX_CONNECTIONS: usize = 16;
/// A metrics connection is closed this long after it was accepted, answered or not.
pub(crate) const CONNECTION_DEADLINE: Duration = Duration::from_secs(5);
/// How often histograms are drained (what the exporter's own listener did for us).
const UPKEEP_INTERVAL: Duration = Duration::from_secs(5);
/// The first pause after `accept` failed for lack of descriptors or memory; doubled up to
/// [`MAX_BACKOFF`] while the failures go on.
const FIRST_BACKOFF: Duration = Duration::from_millis(5);
const MAX_BACKOFF: Duration = Duration::from_secs(1);

/// Serves `/metrics` on `addr` (plain HTTP) from now on, for the rest of the process. Must be
/// called within the tokio runtime.
///
/// # Errors
/// The address cannot be bound, or a recorder is installed already; the message says which.
pub(crate) fn install(addr: SocketAddr) -> Result<(), String> {
    let mut builder = PrometheusBuilder::new();
    for (name, buckets) in locksmith_server::telemetry::histogram_buckets() {
        builder = builder
            .set_buckets_for_metric(Matcher::Full(name.to_string()), buckets)
            .map_err(|e| format!("metrics: {e}"))?;
    }
    let cannot = |e: &dyn std::fmt::Display| format!("cannot serve metrics on {addr}: {e}");
    let listener = std::net::TcpListener::bind(addr)
        .and_then(|l| l.set_nonblocking(true).map(|()| l))
        .and_then(TcpListener::from_std)
        .map_err(|e| cannot(&e))?;
    let handle = builder.install_recorder().map_err(|e| cannot(&e))?;
    locksmith_server::telemetry::describe();
    tokio::spawn(upkeep(handle.clone()));
    tokio::spawn(serve(listener, handle));
    Ok(())
}

async fn upkeep(handle: PrometheusHandle) {
    let mut every = tokio::time::interval(UPKEEP_INTERVAL);
    loop {
        every.tick().await;
        handle.run_upkeep();
    }
}

/// The accept loop: a connection is accepted only once one of the [`MAX_CONNECTIONS`] slots
/// is free.
async fn serve(listener: TcpListener, handle: PrometheusHandle) {
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    // While `accept` keeps failing for lack of resources: since when, how often, the pause.
    let mut failing: Option<(Instant, u64, Duration)> = None;
    loop {
        let Ok(slot) = slots.clone().acquire_owned().await else { return };
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                drop(slot);
                if !out_of_resources(&e) {
                    tracing::debug!(error = %e, "metrics: accept failed");
                    continue;
                }
                let (_, failures, pause) = failing.get_or_insert_with(|| {
                    tracing::warn!(error = %e, "metrics: cannot accept connections (out of file descriptors or memory); retrying with back-off");
                    (Instant::now(), 0, FIRST_BACKOFF)
                });
                *failures += 1;
                let now = *pause;
                *pause = (*pause * 2).min(MAX_BACKOFF);
                tokio::time::sleep(now).await;
                continue;
            }
        };
        if let Some((since, failures, _)) = failing.take() {
            tracing::info!(failures, after = ?since.elapsed(), "metrics: accepting connections again");
        }
        let handle = handle.clone();
        tokio::spawn(async move {
            let _slot = slot;
            let service = hyper::service::service_fn(move |req| {
                let answer = respond(&handle, &req);
                async move { Ok::<_, Infallible>(answer) }
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .keep_alive(false)
                .serve_connection(TokioIo::new(stream), service);
            match tokio::time::timeout(CONNECTION_DEADLINE, conn).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => tracing::debug!(error = %e, "metrics: connection failed"),
                Err(_) => tracing::debug!("metrics: connection past its deadline; closed"),
            }
        });
    }
}

/// Out of descriptors or memory: the pending connection stays in the backlog and the next
/// `accept` fails the same way at once, so the loop must pause.
fn out_of_resources(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(nix::libc::EMFILE | nix::libc::ENFILE | nix::libc::ENOBUFS | nix::libc::ENOMEM))
}

fn respond(handle: &PrometheusHandle, req: &Request<Incoming>) -> Response<String> {
    let (status, body) = match (req.method(), req.uri().path()) {
        (&Method::GET | &Method::HEAD, "/metrics" | "/") => (StatusCode::OK, handle.render()),
        (&Method::GET | &Method::HEAD, _) => (StatusCode::NOT_FOUND, "not found: try /metrics\n".to_string()),
        _ => (StatusCode::METHOD_NOT_ALLOWED, "only GET\n".to_string()),
    };
    let mut answer = Response::new(body);
    *answer.status_mut() = status;
    answer
        .headers_mut()
        .insert(hyper::header::CONTENT_TYPE, hyper::header::HeaderValue::from_static("text/plain; version=0.0.4"));
    answer
}
