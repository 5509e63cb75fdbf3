//! `locksmith dashboard`: a read-only web page showing the locks under a prefix live — holders
//! with time left counting down, waiters, a timeline of the last minutes, and a native
//! cluster's nodes. The page is embedded in the binary; the states reach it by server-sent
//! events from a feed (`feed.rs`), which reads the backend only while a page is open.
//! What the page shows is what the backend's own credentials (in `--backend`) let it see.

mod json;
mod metrics;

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::header::CONTENT_TYPE;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{Html, IntoResponse};
use axum::routing::get;
use axum::Router;
use clap::Args;
use tokio_stream::StreamExt;

use crate::exit;
use crate::feed::{Feed, FeedConfig};

/// The page, with its script and styles.
const PAGE: &str = include_str!("page.html");

/// Arguments of `locksmith dashboard`.
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  locksmith dashboard                                       # the native server on 127.0.0.1:7531
  locksmith dashboard --backend redis://127.0.0.1:6379 --prefix nightly-
  open http://127.0.0.1:7532/

The page is read-only and shows what --backend's credentials may see. Changes come from the
backend's change stream where it has one (the native server, memory://, etcd, ZooKeeper) and by
reading status every --interval otherwise; the page says which. Nothing is read while no page
is open. It listens on loopback only unless --allow-remote is given (it has no login of its own).")]
pub struct DashboardArgs {
    /// Backend URL.
    #[arg(long, env = "LOCKSMITH_BACKEND", default_value = crate::DEFAULT_BACKEND)]
    pub backend: String,
    /// Where the page is served (`IP:PORT`).
    #[arg(long, default_value = "127.0.0.1:7532")]
    pub listen: SocketAddr,
    /// Only locks whose name starts with this.
    #[arg(long, default_value = "")]
    pub prefix: String,
    /// How often the locks are listed (for new locks, and time left).
    #[arg(long, default_value = "500ms", value_parser = crate::duration_arg)]
    pub interval: Duration,
    /// The native server's `--metrics-listen` address (`HOST:PORT`): its grants, waits and WAL
    /// syncs on the page.
    #[arg(long, value_name = "HOST:PORT")]
    pub metrics: Option<String>,
    /// Allow --listen on an address other than loopback: anyone who reaches it sees the locks.
    #[arg(long)]
    pub allow_remote: bool,
}

/// What the handlers share.
struct App {
    feed: Feed,
    /// The backend's URL without credentials.
    backend: String,
    prefix: String,
    interval: Duration,
    /// The native client, for a cluster's status.
    native: Option<locksmith_native::NativeBackend>,
    /// The native server's metrics address.
    metrics: Option<String>,
}

/// Serves the dashboard until SIGINT/SIGTERM.
///
/// # Cancel safety
/// Cancel safe: read only; dropping it stops serving.
pub async fn dashboard(args: DashboardArgs) -> ExitCode {
    if !args.listen.ip().is_loopback() && !args.allow_remote {
        eprintln!(
            "locksmith dashboard: --listen {} is not a loopback address; the page has no login, so anyone who \
             reaches it sees the locks. Add --allow-remote to serve it there anyway.",
            args.listen
        );
        return ExitCode::from(exit::USAGE);
    }
    let client = match locksmith::connect(&args.backend).await {
        Ok(c) => c,
        Err(e) => return exit::report("dashboard", &e),
    };
    // One read now, so a wrong URL, credentials or an unreachable backend show at once.
    if let Err(e) = client.status(None).await {
        return exit::report("dashboard", &e);
    }
    let native = match client.backend().scheme() {
        "locksmith" => locksmith_native::NativeBackend::from_url(&args.backend).ok(),
        _ => None,
    };
    let app = Arc::new(App {
        backend: client.backend().describe(),
        feed: Feed::start(client, FeedConfig { prefix: args.prefix.clone(), interval: args.interval }),
        prefix: args.prefix,
        interval: args.interval,
        native,
        metrics: args.metrics,
    });
    let router = Router::new()
        .route("/", get(|| async { Html(PAGE) }))
        .route("/events", get(events))
        .route("/state.json", get(state))
        .route("/cluster.json", get(cluster))
        .route("/metrics.json", get(server_metrics))
        .with_state(app.clone());
    let listener = match tokio::net::TcpListener::bind(args.listen).await {
        Ok(l) => l,
        Err(e) => {
            eprintln!("locksmith dashboard: cannot listen on {}: {e}", args.listen);
            return ExitCode::from(exit::UNAVAILABLE);
        }
    };
    let shown = listener.local_addr().unwrap_or(args.listen);
    println!("locksmith dashboard: http://{shown}/ ({})", app.backend);
    let stop = locksmith_cli_common::shutdown_signal();
    match axum::serve(listener, router)
        .with_graceful_shutdown(async move {
            stop.await;
        })
        .await
    {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("locksmith dashboard: {e}");
            ExitCode::from(exit::UNAVAILABLE)
        }
    }
}

/// The states as server-sent events (`state`), the current one first.
async fn events(State(app): State<Arc<App>>) -> impl IntoResponse {
    let rx = app.feed.subscribe();
    let stream = tokio_stream::wrappers::WatchStream::new(rx).map(move |s| {
        let body = json::snapshot(&s, &app.backend, &app.prefix, app.interval, app.native.is_some());
        Ok::<_, std::convert::Infallible>(Event::default().event("state").data(body.to_string()))
    });
    // A keep-alive now and then also finds a closed page, so the feed can go to sleep.
    Sse::new(stream).keep_alive(KeepAlive::new().interval(Duration::from_secs(5)))
}

/// The current state once, as the events carry it (for scripts and checks).
async fn state(State(app): State<Arc<App>>) -> impl IntoResponse {
    let mut rx = app.feed.subscribe();
    // A feed woken by this request has not read yet: wait for its first read (bounded).
    if rx.borrow().locks.is_empty() {
        let _ = tokio::time::timeout(app.interval * 4, rx.changed()).await;
    }
    let s = rx.borrow().clone();
    json_body(json::snapshot(&s, &app.backend, &app.prefix, app.interval, app.native.is_some()))
}

fn json_body(v: serde_json::Value) -> impl IntoResponse {
    ([(CONTENT_TYPE, "application/json")], v.to_string())
}

/// A native cluster's nodes, roles, term and leader; `{"cluster": false}` for anything else.
async fn cluster(State(app): State<Arc<App>>) -> impl IntoResponse {
    let Some(native) = &app.native else {
        return json_body(serde_json::json!({ "cluster": false }));
    };
    json_body(match native.cluster_status().await {
        Ok(s) => serde_json::json!({ "cluster": true, "status": crate::cluster::status_json(&s) }),
        Err(locksmith_native::ClusterError::NotACluster { .. }) => serde_json::json!({ "cluster": false }),
        Err(e) => serde_json::json!({ "cluster": true, "error": e.to_string() }),
    })
}

/// The native server's figures (`--metrics`); `{"metrics": false}` without it.
async fn server_metrics(State(app): State<Arc<App>>) -> impl IntoResponse {
    let Some(addr) = &app.metrics else {
        return json_body(serde_json::json!({ "metrics": false }));
    };
    json_body(match metrics::scrape(addr).await {
        Ok(text) => serde_json::json!({ "metrics": true, "figures": metrics::figures(&text) }),
        Err(e) => serde_json::json!({ "metrics": true, "error": e }),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        args: DashboardArgs,
    }

    /// The page has no login: off loopback it is served only when asked for explicitly.
    #[tokio::test]
    async fn a_listen_address_off_loopback_is_refused_without_allow_remote() {
        let cli = Cli::parse_from(["x", "--listen", "0.0.0.0:0", "--backend", "memory://"]);
        assert_eq!(dashboard(cli.args).await, ExitCode::from(exit::USAGE));
    }
}
