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
    /// What is synced to disk before a grant is acknowledged: `grants` (every grant; after a
    /// restart holders are restored and get one TTL to reconnect) or `leases` (only token
    /// blocks; no disk wait per grant, but after a restart every lock ever granted stays
    /// unavailable for the longest TTL + lock-delay in use).
    #[arg(long, value_enum, default_value_t = DurabilityArg::Grants)]
    pub durability: DurabilityArg,
}

/// `--durability` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum DurabilityArg {
    /// Every grant is on disk before its holder hears of it.
    Grants,
    /// Only reserved token blocks and the longest lease are on disk.
    Leases,
}

/// Runs the server until SIGINT or SIGTERM.
///
/// # Cancel safety
/// Dropping it stops the server like a signal would, without the drain.
pub async fn serve(args: ServeArgs) -> ExitCode {
    let shutdown = shutdown_signal();
    let listener = match tokio::net::TcpListener::bind(args.listen).await {
        Ok(l) => l,
        Err(e) => {
            eprintln!("locksmith serve: cannot listen on {}: {e}", args.listen);
            return ExitCode::from(exit::UNAVAILABLE);
        }
    };
    let durability = match args.durability {
        DurabilityArg::Grants => locksmith_server::Durability::Grants,
        DurabilityArg::Leases => locksmith_server::Durability::Leases,
    };
    let opts = locksmith_server::ServeOptions::new(args.data_dir).durability(durability);
    match locksmith_server::serve(listener, opts, shutdown).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => exit::report("serve", &e),
    }
}

/// Installs the SIGTERM/SIGINT handlers now and resolves when one arrives. Installed before the
/// listener is bound, so a signal sent as soon as the port answers stops the server cleanly
/// instead of killing it with the default action.
fn shutdown_signal() -> impl std::future::Future<Output = ()> {
    use tokio::signal::unix::{signal, SignalKind};
    let handlers = (signal(SignalKind::terminate()), signal(SignalKind::interrupt()));
    async move {
        let (Ok(mut term), Ok(mut int)) = handlers else {
            // Without handlers the default action (terminate) still applies; never resolve here.
            return std::future::pending().await;
        };
        tokio::select! {
            _ = term.recv() => tracing::info!("SIGTERM received"),
            _ = int.recv() => tracing::info!("SIGINT received"),
        }
    }
}
