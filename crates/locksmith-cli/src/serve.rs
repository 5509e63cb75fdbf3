//! `locksmith serve`: the native lock server in the foreground.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

use crate::exit;

pub use locksmith_cli_common::DurabilityArg;

/// Arguments of `locksmith serve`.
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  locksmith serve                                   # 127.0.0.1:7531, data in ./locksmith-data
  locksmith serve --listen localhost:7600 --data-dir /var/lib/locksmith
  locksmith serve --durability leases               # no disk wait per grant (see README)
  locksmith serve --tls-cert server.pem --tls-key server.key [--client-ca clients-ca.pem]
                                                    # clients: locksmiths://host:7531?ca=ca.pem
Beyond loopback, --listen needs --client-ca (clients authenticated by certificate) or
--insecure-listen-anywhere.")]
pub struct ServeArgs {
    /// Address to listen on: `HOST:PORT` (an IP address or a name such as `localhost`).
    #[arg(long, default_value = "127.0.0.1:7531", value_parser = listen_arg)]
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
    /// Serve TLS with this certificate chain (PEM); needs `--tls-key`. Clients then use
    /// `locksmiths://HOST:PORT?ca=CA.pem`.
    #[arg(long, requires = "tls_key", value_name = "FILE")]
    pub tls_cert: Option<PathBuf>,
    /// The private key of `--tls-cert` (PEM).
    #[arg(long, requires = "tls_cert", value_name = "FILE")]
    pub tls_key: Option<PathBuf>,
    /// Demand a client certificate signed by a CA in this file (PEM): mutual TLS; clients add
    /// `&cert=FILE&key=FILE`. Needs `--tls-cert`.
    #[arg(long, requires = "tls_cert", value_name = "FILE")]
    pub client_ca: Option<PathBuf>,
    /// Listen on an address other hosts can reach although no client is authenticated (no
    /// `--client-ca`): anyone who reaches the port can take and hold locks. Without this flag
    /// such a `--listen` is refused.
    #[arg(long)]
    pub insecure_listen_anywhere: bool,
    /// Authenticate every client by bearer token or client certificate and authorize it per
    /// lock-name prefix, as this TOML policy file says (re-read when it changes and on SIGHUP;
    /// see README "Security of the native server").
    #[arg(long, value_name = "FILE")]
    pub auth: Option<PathBuf>,
}

impl ServeArgs {
    /// The TLS material named by the flags, read now; `None` without `--tls-cert`.
    fn tls(&self) -> Result<Option<locksmith_server::ServerTls>, String> {
        let (Some(cert), Some(key)) = (&self.tls_cert, &self.tls_key) else { return Ok(None) };
        let read = |flag: &str, path: &PathBuf| {
            std::fs::read(path).map_err(|e| format!("cannot read {flag} {}: {e}", path.display()))
        };
        let mut tls = locksmith_server::ServerTls::new(read("--tls-cert", cert)?, read("--tls-key", key)?);
        if let Some(ca) = &self.client_ca {
            tls = tls.client_ca(read("--client-ca", ca)?);
        }
        Ok(Some(tls))
    }
}

/// Parses `--listen`: `HOST:PORT` or `[IPv6]:PORT`; a name is resolved (IPv4 first), and a
/// bad port is named as such.
fn listen_arg(s: &str) -> Result<SocketAddr, String> {
    if let Ok(addr) = s.parse::<SocketAddr>() {
        return Ok(addr);
    }
    let (host, port) = s.rsplit_once(':').ok_or_else(|| format!("{s:?} is not HOST:PORT, e.g. 127.0.0.1:7531"))?;
    let port: u16 = port.parse().map_err(|_| format!("{port:?} is not a port number (0-65535) in {s:?}"))?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let addrs: Vec<SocketAddr> = std::net::ToSocketAddrs::to_socket_addrs(&(host, port))
        .map_err(|e| format!("cannot resolve {host:?}: {e}"))?
        .collect();
    addrs
        .iter()
        .find(|a| a.is_ipv4())
        .or_else(|| addrs.first())
        .copied()
        .ok_or_else(|| format!("{host:?} has no address"))
}

/// Runs the server until SIGINT or SIGTERM.
///
/// # Cancel safety
/// Dropping it stops the server like a signal would, without the drain.
pub async fn serve(args: ServeArgs) -> ExitCode {
    if !args.listen.ip().is_loopback() && args.client_ca.is_none() && args.auth.is_none() {
        if !args.insecure_listen_anywhere {
            eprintln!(
                "locksmith serve: refusing to listen on {}: clients are not authenticated, so anyone who reaches \
                 it could take locks. Use mutual TLS (--tls-cert, --tls-key, --client-ca), listen on loopback, or \
                 accept the risk on a trusted network with --insecure-listen-anywhere (or give --auth FILE)",
                args.listen
            );
            return ExitCode::from(exit::USAGE);
        }
        tracing::warn!(
            listen = %args.listen,
            "listening beyond loopback without client authentication (--insecure-listen-anywhere): anyone who \
             reaches this port can take locks"
        );
    }
    let tls = match args.tls() {
        Ok(tls) => tls,
        Err(message) => {
            eprintln!("locksmith serve: {message}");
            return ExitCode::from(exit::CONFIG);
        }
    };
    let auth = match args.auth.as_ref().map(locksmith_server::auth::Auth::load).transpose() {
        Ok(auth) => auth,
        Err(e) => {
            eprintln!("locksmith serve: {e}");
            return ExitCode::from(exit::CONFIG);
        }
    };
    let _hup = auth.clone().map(reload_on_sighup);
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
    let mut opts = locksmith_server::ServeOptions::new(args.data_dir).durability(durability);
    if let Some(tls) = tls {
        opts = opts.tls(tls);
    }
    if let Some(auth) = auth {
        opts = opts.auth(auth);
    }
    match locksmith_server::serve(listener, opts, shutdown).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => report_server("serve", &e),
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

/// Re-reads the policy on every SIGHUP (it is also re-read when the file changes), for as long
/// as the returned task lives.
fn reload_on_sighup(auth: locksmith_server::auth::Auth) -> tokio::task::JoinHandle<()> {
    use tokio::signal::unix::{signal, SignalKind};
    let hup = signal(SignalKind::hangup());
    tokio::spawn(async move {
        let Ok(mut hup) = hup else { return };
        while hup.recv().await.is_some() {
            if let Err(e) = auth.reload() {
                tracing::error!(error = %e, "auth policy not reloaded; the previous one stays");
            }
        }
    })
}

/// Prints a failure of the server itself and returns its exit code.
fn report_server(context: &str, err: &locksmith_server::ServerError) -> ExitCode {
    eprintln!("locksmith {context}: {err}");
    ExitCode::from(server_code_for(err))
}

/// The exit code for a server failure: a corrupt data directory is [`exit::DATA`]; a directory
/// in use, a failed disk or transport are 1, as when they arrived as library I/O errors.
fn server_code_for(err: &locksmith_server::ServerError) -> u8 {
    match err {
        locksmith_server::ServerError::Corrupt(_) => exit::DATA,
        locksmith_server::ServerError::Config(_) => exit::CONFIG,
        _ => 1,
    }
}

#[cfg(test)]
mod tests {
    use super::{listen_arg, server_code_for};
    use crate::exit::DATA;
    use locksmith_server::ServerError;

    /// A corrupt data directory exits 65 (EX_DATAERR); the other server failures exit 1.
    #[test]
    fn server_failures_map_to_the_exit_codes_serve_always_used() {
        assert_eq!(server_code_for(&ServerError::Corrupt("wal: bad header".into())), DATA);
        assert_eq!(server_code_for(&ServerError::InUse("./locksmith-data".into())), 1);
        assert_eq!(server_code_for(&ServerError::WriterStopped), 1);
        assert_eq!(server_code_for(&ServerError::Io(std::io::Error::other("disk full"))), 1);
    }

    #[test]
    fn listen_addresses_take_names_and_refuse_bad_ports() {
        assert_eq!(listen_arg("127.0.0.1:7531").unwrap().to_string(), "127.0.0.1:7531");
        assert_eq!(listen_arg("localhost:7000").unwrap().port(), 7000);
        assert!(listen_arg("localhost:7000").unwrap().ip().is_loopback());
        assert_eq!(listen_arg("[::1]:80").unwrap().to_string(), "[::1]:80");
        assert!(listen_arg("127.0.0.1:99999").unwrap_err().contains("not a port number"));
        assert!(listen_arg("7531").unwrap_err().contains("HOST:PORT"));
    }
}
