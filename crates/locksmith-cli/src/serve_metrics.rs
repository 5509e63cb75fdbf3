//! `locksmith serve --metrics-listen`: the Prometheus exporter for the server's metrics
//! (`locksmith_server::telemetry`).

use std::net::SocketAddr;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder};

/// Serves `/metrics` on `addr` (plain HTTP) from now on, for the rest of the process.
///
/// # Errors
/// The address cannot be bound, or a recorder is installed already; the message says which.
pub(crate) fn install(addr: SocketAddr) -> Result<(), String> {
    let mut builder = PrometheusBuilder::new().with_http_listener(addr);
    for (name, buckets) in locksmith_server::telemetry::histogram_buckets() {
        builder = builder
            .set_buckets_for_metric(Matcher::Full(name.to_string()), buckets)
            .map_err(|e| format!("metrics: {e}"))?;
    }
    builder.install().map_err(|e| format!("cannot serve metrics on {addr}: {e}"))?;
    locksmith_server::telemetry::describe();
    Ok(())
}
