//! The native server's own figures for the page (`--metrics HOST:PORT`, its `--metrics-listen`):
//! totals read from its Prometheus text, which the page turns into rates between two reads.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// How long one read of `/metrics` may take.
const TIMEOUT: Duration = Duration::from_secs(2);

/// The text of `GET /metrics` on `addr` (plain HTTP, as `serve --metrics-listen` serves it).
pub(super) async fn scrape(addr: &str) -> Result<String, String> {
    let read = async {
        let mut s = tokio::net::TcpStream::connect(addr).await.map_err(|e| format!("cannot reach {addr}: {e}"))?;
        let request = format!("GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
        s.write_all(request.as_bytes()).await.map_err(|e| format!("{addr}: {e}"))?;
        let mut response = Vec::new();
        s.read_to_end(&mut response).await.map_err(|e| format!("{addr}: {e}"))?;
        let response = String::from_utf8_lossy(&response).into_owned();
        match response.split_once("\r\n\r\n") {
            Some((head, body)) if head.starts_with("HTTP/1.1 200") => Ok(body.to_string()),
            _ => Err(format!("{addr} did not answer GET /metrics with 200")),
        }
    };
    tokio::time::timeout(TIMEOUT, read).await.unwrap_or_else(|_| Err(format!("{addr}: no answer within 2s")))
}

/// The figures the page shows: totals (summed over labels), gauges, the wait p99 (the upper
/// bound of the bucket it falls in) and the mean number of records per WAL sync.
pub(super) fn figures(text: &str) -> Value {
    let mut sums: BTreeMap<&str, f64> = BTreeMap::new();
    let mut wait_buckets: BTreeMap<String, f64> = BTreeMap::new();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some((series, value)) = line.rsplit_once(' ') else { continue };
        let Ok(value) = value.trim().parse::<f64>() else { continue };
        let name = series.split('{').next().unwrap_or(series);
        if name == "locksmith_server_wait_seconds_bucket" {
            if let Some(le) = series.split("le=\"").nth(1).and_then(|r| r.split('"').next()) {
                *wait_buckets.entry(le.to_string()).or_default() += value;
            }
        } else {
            *sums.entry(name).or_default() += value;
        }
    }
    let get = |n: &str| sums.get(n).copied();
    let waits = get("locksmith_server_wait_seconds_count").unwrap_or(0.0);
    let mut buckets: Vec<(f64, f64)> =
        wait_buckets.iter().filter_map(|(le, c)| le.parse::<f64>().ok().map(|le| (le, *c))).collect();
    buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    let wait_p99 = (waits > 0.0).then(|| buckets.iter().find(|(_, c)| *c >= waits * 0.99).map(|(le, _)| *le)).flatten();
    let syncs = get("locksmith_server_wal_sync_records_count").unwrap_or(0.0);
    json!({
        "grants_total": get("locksmith_server_grants_total"),
        "releases_total": get("locksmith_server_releases_total"),
        "waits_queued_total": get("locksmith_server_waits_queued_total"),
        "session_expiries_total": get("locksmith_server_session_expiries_total"),
        "sessions": get("locksmith_server_sessions"),
        "connections": get("locksmith_server_connections"),
        "wait_p99_s": wait_p99,
        "wal_sync_records_mean": (syncs > 0.0).then(|| get("locksmith_server_wal_sync_records_sum").unwrap_or(0.0) / syncs),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Totals are summed over labels; the wait p99 is the bound of the bucket holding it.
    #[test]
    fn the_figures_come_from_the_servers_series() {
        let text = "# TYPE locksmith_server_grants_total counter
locksmith_server_grants_total{kind=\"immediate\"} 7
locksmith_server_grants_total{kind=\"queued\"} 3
locksmith_server_sessions 2
locksmith_server_wait_seconds_bucket{le=\"0.001\"} 50
locksmith_server_wait_seconds_bucket{le=\"0.01\"} 99
locksmith_server_wait_seconds_bucket{le=\"0.1\"} 100
locksmith_server_wait_seconds_bucket{le=\"+Inf\"} 100
locksmith_server_wait_seconds_count 100
locksmith_server_wal_sync_records_sum 12
locksmith_server_wal_sync_records_count 4
";
        let f = figures(text);
        assert_eq!(f["grants_total"], 10.0);
        assert_eq!(f["sessions"], 2.0);
        assert_eq!(f["wait_p99_s"], 0.01);
        assert_eq!(f["wal_sync_records_mean"], 3.0);
        assert_eq!(f["connections"], Value::Null);
    }
}
