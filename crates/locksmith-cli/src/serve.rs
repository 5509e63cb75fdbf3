//! `locksmith serve`: the native lock server in the foreground.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

use crate::exit;

/// Arguments of `locksmith serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:7531")]
    pub listen: SocketAddr,
    /// Data directory (created if missing; one server per directory).
    #[arg(long, default_value = "./locksmith-data")]
    pub data_dir: PathBuf,
}

/// Runs the server until SIGINT or SIGTERM.
///
/// # Cancel safety
/// Dropping it stops the server like a signal would, without the drain.
pub async fn serve(args: ServeArgs) -> ExitCode {
    let listener = match tokio::net::TcpListener::bind(args.listen).await {
        Ok(l) => l,
        Err(e) => {
            eprintln!("locksmith serve: cannot listen on {}: {e}", args.listen);
            return ExitCode::from(exit::UNAVAILABLE);
        }
    };
    let opts = locksmith_server::ServeOptions::new(args.data_dir);
    match locksmith_server::serve(listener, opts, shutdown_signal()).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => exit::report("serve", &e),
    }
}

async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut int)) = (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) else {
        // Without handlers the default action (terminate) still applies; never resolve here.
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM received"),
        _ = int.recv() => tracing::info!("SIGINT received"),
    }
}
