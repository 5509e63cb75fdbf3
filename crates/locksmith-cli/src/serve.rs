//! `locksmith serve`: the native lock server in the foreground.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use locksmith_cli_common::duration_arg;

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
  locksmith serve --config /etc/locksmith/serve.toml --metrics-listen 127.0.0.1:9531
  locksmith serve --listen 10.0.0.1:7531 --node-id 1 --peers 1=10.0.0.1:7531,2=10.0.0.2:7531,3=10.0.0.3:7531 \
                  --cluster-secret-file /etc/locksmith/cluster.secret …
                                                    # one node of a new 3-node cluster (README: A cluster)
  locksmith serve --listen 10.0.0.4:7531 --node-id 4 --join --cluster-secret-file /etc/locksmith/cluster.secret …
                                                    # a node that waits for `locksmith cluster add 4 10.0.0.4:7531`
  locksmith serve --listen 10.0.0.1:7531 --node-id 1 --peers … --tls-cert node1.pem --tls-key node1.key \
                  --peer-ca nodes-ca.pem --client-ca clients-ca.pem
                                                    # a TLS cluster whose nodes prove their ids by certificate
                                                    # (node1.pem: SAN URI locksmith-node://prod/1; README: A cluster)
Beyond loopback, --listen needs --client-ca (clients authenticated by certificate) or
--insecure-listen-anywhere.

Every option can also come from an environment variable (LOCKSMITH_ and the option's name in
capitals, `-` as `_`, e.g. LOCKSMITH_MAX_CONNECTIONS=500) or from the TOML file of --config
(keys are the option names: `max-connections = 500`); a flag beats the environment, which beats
the file. Durations are written like 500ms, 10s, 2m; `0s` turns a keepalive off.

Exit codes: 0 stopped by SIGINT/SIGTERM; 2 bad arguments; 65 corrupt data directory; 69 cannot
listen on --listen or --metrics-listen; 70 a cluster node's Raft core stopped (a panic); 73 data
directory cannot be created or opened; 74 a cluster node's Raft core stopped on a storage error;
75 data directory in use; 78 configuration error; 1 another failure while running (a failing
disk under a single node's log).")]
pub struct ServeArgs {
    /// Read options from this TOML file (keys: the long option names, e.g. `data-dir`); flags
    /// and environment variables take precedence over it.
    #[arg(long, env = "LOCKSMITH_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Address to listen on: `HOST:PORT` (an IP address or a name such as `localhost`).
    #[arg(long, env = "LOCKSMITH_LISTEN", default_value = "127.0.0.1:7531", value_parser = listen_arg)]
    pub listen: SocketAddr,
    /// Data directory (created if missing; one server per directory).
    #[arg(long, env = "LOCKSMITH_DATA_DIR", default_value = "./locksmith-data")]
    pub data_dir: PathBuf,
    /// What is synced to disk before a grant is acknowledged: `grants` (every grant; after a
    /// restart holders are restored and get one TTL to reconnect) or `leases` (only token
    /// blocks; no disk wait per grant, but after a restart every lock ever granted stays
    /// unavailable for the longest TTL + lock-delay in use).
    #[arg(long, env = "LOCKSMITH_DURABILITY", value_enum, default_value_t = DurabilityArg::Grants)]
    pub durability: DurabilityArg,
    /// Serve TLS with this certificate chain (PEM); needs `--tls-key`. Clients then use
    /// `locksmiths://HOST:PORT?ca=CA.pem`.
    #[arg(long, env = "LOCKSMITH_TLS_CERT", requires = "tls_key", value_name = "FILE")]
    pub tls_cert: Option<PathBuf>,
    /// The private key of `--tls-cert` (PEM).
    #[arg(long, env = "LOCKSMITH_TLS_KEY", requires = "tls_cert", value_name = "FILE")]
    pub tls_key: Option<PathBuf>,
    /// Demand a client certificate signed by a CA in this file (PEM): mutual TLS; clients add
    /// `&cert=FILE&key=FILE`. Needs `--tls-cert`.
    #[arg(long, env = "LOCKSMITH_CLIENT_CA", requires = "tls_cert", value_name = "FILE")]
    pub client_ca: Option<PathBuf>,
    /// The CA of node certificates (PEM), for a cluster over TLS: keep it apart from
    /// --client-ca. A node then serves and dials its peers with --tls-cert as its node
    /// certificate — signed by this CA, for server and client use, with the SAN URI
    /// `locksmith-node://CLUSTER/ID` (ID this node's --node-id, CLUSTER any name) — and accepts
    /// Raft calls and membership changes only from a peer whose certificate this CA signed and
    /// that names the calling node. Needs --node-id and --tls-cert; with --cluster-secret-file
    /// too, both are checked.
    #[arg(long, env = "LOCKSMITH_PEER_CA", requires_all = ["tls_cert", "node_id"], value_name = "FILE")]
    pub peer_ca: Option<PathBuf>,
    /// Listen on an address other hosts can reach although no client is authenticated (no
    /// `--client-ca`): anyone who reaches the port can take and hold locks. Without this flag
    /// such a `--listen` is refused.
    #[arg(long, env = "LOCKSMITH_INSECURE_LISTEN_ANYWHERE")]
    pub insecure_listen_anywhere: bool,
    /// Authenticate every client by bearer token or client certificate and authorize it per
    /// lock-name prefix, as this TOML policy file says (re-read when it changes and on SIGHUP;
    /// see README "Security of the native server").
    #[arg(long, env = "LOCKSMITH_AUTH", value_name = "FILE")]
    pub auth: Option<PathBuf>,
    /// Serve Prometheus metrics (`locksmith_server_*`) over plain HTTP on `HOST:PORT`, e.g.
    /// `127.0.0.1:9531`; off unless given. Anyone who reaches it can read them: keep it on
    /// loopback or a private network.
    #[arg(long, env = "LOCKSMITH_METRICS_LISTEN", value_name = "HOST:PORT", value_parser = listen_arg)]
    pub metrics_listen: Option<SocketAddr>,
    /// Log lines as `text` (for people) or `json` (one object per line, for collectors). The
    /// level comes from LOCKSMITH_LOG (default `info`; `locksmith_server=debug` adds grants,
    /// releases and sessions).
    #[arg(long, env = "LOCKSMITH_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// Open client connections at most; one more is closed as soon as it is accepted. Lowered
    /// to what the open-file limit allows.
    #[arg(long, env = "LOCKSMITH_MAX_CONNECTIONS", value_name = "N", default_value_t = defaults().max_connections as u64, value_parser = clap::value_parser!(u64).range(1..))]
    pub max_connections: u64,
    /// Open connections from one IP address at most (all local processes share 127.0.0.1);
    /// one more from it is closed as soon as it is accepted.
    #[arg(long, env = "LOCKSMITH_MAX_CONNECTIONS_PER_ADDRESS", value_name = "N", default_value_t = defaults().max_connections_per_address as u64, value_parser = clap::value_parser!(u64).range(1..))]
    pub max_connections_per_address: u64,
    /// Concurrent streams (sessions, calls) on one HTTP/2 connection; a client waits for a
    /// free one.
    #[arg(long, env = "LOCKSMITH_MAX_STREAMS_PER_CONNECTION", value_name = "N", default_value_t = defaults().max_streams_per_connection, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_streams_per_connection: u32,
    /// Answers queued for one session stream whose client does not read them; then the stream
    /// is ended with RESOURCE_EXHAUSTED (the session lives on until its TTL).
    #[arg(long, env = "LOCKSMITH_MAX_QUEUED_MESSAGES", value_name = "N", default_value_t = defaults().max_queued_messages as u64, value_parser = clap::value_parser!(u64).range(1..))]
    pub max_queued_messages: u64,
    /// A connection that has not begun its handshake this long after it was accepted is closed
    /// (it must have sent 33 bytes, over TLS 256: a trickle of bytes does not keep it open).
    #[arg(long, env = "LOCKSMITH_FIRST_BYTE_TIMEOUT", value_name = "DURATION", default_value = "10s", value_parser = positive_duration)]
    pub first_byte_timeout: Duration,
    /// A session stream whose first message (open) does not come within this time is ended.
    #[arg(long, env = "LOCKSMITH_OPEN_TIMEOUT", value_name = "DURATION", default_value = "10s", value_parser = positive_duration)]
    pub open_timeout: Duration,
    /// Ping a connection that has sent nothing for this long (HTTP/2); `0s`: never.
    #[arg(long, env = "LOCKSMITH_KEEPALIVE_INTERVAL", value_name = "DURATION", default_value = "30s", value_parser = duration_arg)]
    pub keepalive_interval: Duration,
    /// Close a connection whose ping is not answered within this time.
    #[arg(long, env = "LOCKSMITH_KEEPALIVE_TIMEOUT", value_name = "DURATION", default_value = "10s", value_parser = positive_duration)]
    pub keepalive_timeout: Duration,
    /// TCP keepalive: the kernel probes a connection idle this long and closes it when the
    /// peer is gone; `0s`: off.
    #[arg(long, env = "LOCKSMITH_TCP_KEEPALIVE", value_name = "DURATION", default_value = "60s", value_parser = duration_arg)]
    pub tcp_keepalive: Duration,
    /// Live sessions on the server. When full, a new session of a principal (or address)
    /// holding fewer sessions than the one holding the most ends one of that one's sessions.
    #[arg(long, env = "LOCKSMITH_MAX_SESSIONS", value_name = "N", default_value_t = lock_limits().max_sessions as u64, value_parser = clap::value_parser!(u64).range(1..))]
    pub max_sessions: u64,
    /// Live sessions of one client: its principal with --auth, otherwise its connection
    /// (address and port: one locksmith process).
    #[arg(long, env = "LOCKSMITH_MAX_SESSIONS_PER_CLIENT", value_name = "N", default_value_t = lock_limits().max_sessions_per_client as u64, value_parser = clap::value_parser!(u64).range(1..))]
    pub max_sessions_per_client: u64,
    /// Waiters queued on one lock.
    #[arg(long, env = "LOCKSMITH_MAX_WAITERS_PER_LOCK", value_name = "N", default_value_t = lock_limits().max_waiters_per_lock as u64, value_parser = clap::value_parser!(u64).range(1..))]
    pub max_waiters_per_lock: u64,
    /// This node's id in a cluster (with --peers or --join).
    #[arg(long, env = "LOCKSMITH_NODE_ID", value_name = "N", requires = "membership")]
    pub node_id: Option<u64>,
    /// Every node of a new cluster, this one included: `ID=HOST:PORT,…` (the address where each
    /// node's server listens; clients and peers use it). Replicates the lock service with Raft:
    /// start every node with the same list. Only read while the data directory holds no
    /// cluster yet; later starts restart the member the directory says this node is.
    #[arg(long, env = "LOCKSMITH_PEERS", value_name = "ID=HOST:PORT,…", group = "membership", requires = "node_id", value_parser = peers_arg)]
    pub peers: Option<Peers>,
    /// Join an existing cluster: with an empty data directory the node waits until the leader
    /// adds it (`locksmith cluster add ID HOST:PORT`, HOST:PORT being its --listen address as
    /// the other nodes reach it); with a directory that holds cluster state it restarts as that
    /// member, like --peers would. For new nodes and for nodes whose disk was lost.
    #[arg(long, env = "LOCKSMITH_JOIN", group = "membership", requires = "node_id")]
    pub join: bool,
    /// Peers this node reaches at another address than the one in --peers (through a proxy or
    /// a tunnel): `ID=HOST:PORT,…`; --peers stays the cluster's view, the same on every node.
    #[arg(long, env = "LOCKSMITH_ROUTES", value_name = "ID=HOST:PORT,…", requires = "node_id", value_parser = peers_arg)]
    pub routes: Option<Peers>,
    /// The cluster secret, a file every node of the cluster is given (the same one): nodes prove
    /// every Raft call with it, and refuse calls without a valid proof. Required with --node-id
    /// unless --peer-ca is given (then both are checked); at least 16 bytes, e.g. `head -c 32 /dev/urandom | base64 > FILE`, readable by this user
    /// only. Never logged.
    #[arg(long, env = "LOCKSMITH_CLUSTER_SECRET_FILE", value_name = "FILE", requires = "node_id")]
    pub cluster_secret_file: Option<PathBuf>,
    /// Also accept Raft calls that carry no node credential — no node proof, no node certificate
    /// (a wrong proof, or a peer-CA certificate naming another node, is still refused): only
    /// while turning node authentication on in a running cluster, one node at a time (README:
    /// "Turning node authentication on in a running cluster"). Needs --node-id.
    #[arg(long, env = "LOCKSMITH_ACCEPT_UNAUTHENTICATED_PEERS", requires = "node_id")]
    pub accept_unauthenticated_peers: bool,
    /// How often the leader sends heartbeats, also the deadline of each replication call
    /// (default 50ms; at least 20ms). Shorter notices a dead leader sooner; too short for the
    /// machine's load times out batches of entries. Give every node the same timings. Only
    /// for cluster nodes (needs --node-id).
    #[arg(long, env = "LOCKSMITH_HEARTBEAT", value_name = "DURATION", requires = "node_id", value_parser = positive_duration)]
    pub heartbeat: Option<Duration>,
    /// A follower that hears no leader for MAX (the old leader's lease) plus a random time in
    /// MIN..MAX stands for election (default 200ms..400ms): a crashed leader is replaced after
    /// about 1.5–2 × MAX. Shorter fails over sooner but deposes a leader that a loaded machine
    /// stalls for that long. Sessions are extended by 2 × MAX + heartbeat after each
    /// fail-over. MIN at least 3 heartbeats, MAX − MIN at least one, MAX at most 60s; the same
    /// on every node. Only for cluster nodes (needs --node-id).
    #[arg(long, env = "LOCKSMITH_ELECTION_TIMEOUT", value_name = "MIN..MAX", requires = "node_id", value_parser = election_timeout_arg)]
    pub election_timeout: Option<(Duration, Duration)>,
    /// Holds plus queued acquires of one session.
    #[arg(long, env = "LOCKSMITH_MAX_ENTRIES_PER_SESSION", value_name = "N", default_value_t = lock_limits().max_entries_per_session as u64, value_parser = clap::value_parser!(u64).range(1..))]
    pub max_entries_per_session: u64,
}

/// The nodes of a cluster: id → `host:port`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peers(pub std::collections::BTreeMap<u64, String>);

/// Parses `--peers` and `--routes`: `ID=HOST:PORT` items separated by commas, each address as
/// strict as `locksmith cluster add` takes it.
fn peers_arg(s: &str) -> Result<Peers, String> {
    let mut peers = std::collections::BTreeMap::new();
    for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        let (id, addr) =
            item.split_once('=').ok_or_else(|| format!("{item:?} is not ID=HOST:PORT (e.g. 1=10.0.0.1:7531)"))?;
        let id: u64 = id.trim().parse().map_err(|_| format!("{id:?} is not a node id (a number) in {item:?}"))?;
        let addr = addr.trim();
        locksmith_server::cluster::check_addr(addr).map_err(|e| format!("{e} in {item:?}"))?;
        if peers.insert(id, addr.to_string()).is_some() {
            return Err(format!("node {id} is listed twice"));
        }
    }
    if peers.is_empty() {
        return Err("no peers given".into());
    }
    Ok(Peers(peers))
}

/// Parses `--election-timeout MIN..MAX` (two durations); the bounds are checked when the node
/// starts, as a configuration error naming the option.
fn election_timeout_arg(s: &str) -> Result<(Duration, Duration), String> {
    let (min, max) = s.split_once("..").ok_or_else(|| format!("{s:?} is not MIN..MAX, e.g. 200ms..400ms"))?;
    Ok((positive_duration(min.trim())?, positive_duration(max.trim())?))
}

/// The lock service's bounds, for the flags' defaults.
fn lock_limits() -> locksmith_server::machine::Limits {
    locksmith_server::machine::Limits::default()
}

/// `--log-format` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// The library's bounds, for the flags' defaults (one place decides them).
fn defaults() -> locksmith_server::NetLimits {
    locksmith_server::NetLimits::default()
}

/// A duration above zero.
fn positive_duration(s: &str) -> Result<Duration, String> {
    match duration_arg(s)? {
        d if d.is_zero() => Err(format!("{s:?} must be above zero")),
        d => Ok(d),
    }
}

impl ServeArgs {
    /// The connection and stream bounds the flags ask for, within `fd_limit` open files.
    fn net_limits(&self, fd_limit: Option<u64>) -> locksmith_server::NetLimits {
        let nonzero = |d: Duration| (!d.is_zero()).then_some(d);
        let mut net = locksmith_server::NetLimits::default();
        net.max_connections = usize::try_from(self.max_connections).unwrap_or(usize::MAX);
        net.max_connections_per_address = usize::try_from(self.max_connections_per_address).unwrap_or(usize::MAX);
        net.max_streams_per_connection = self.max_streams_per_connection;
        net.max_queued_messages = usize::try_from(self.max_queued_messages).unwrap_or(usize::MAX);
        net.first_byte_timeout = self.first_byte_timeout;
        net.open_timeout = self.open_timeout;
        net.keepalive_interval = nonzero(self.keepalive_interval);
        net.keepalive_timeout = self.keepalive_timeout;
        net.tcp_keepalive = nonzero(self.tcp_keepalive);
        if let Some(allowed) = fd_limit.map(connections_within) {
            if net.max_connections > allowed {
                tracing::warn!(
                    max_connections = net.max_connections,
                    open_file_limit = fd_limit,
                    using = allowed,
                    "--max-connections is above what the open-file limit allows; lowered (raise LimitNOFILE / ulimit -n)"
                );
                net.max_connections = allowed;
            }
        }
        net
    }

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
        if let Some(ca) = &self.peer_ca {
            tls = tls.peer_ca(read("--peer-ca", ca)?);
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
    // No cluster without node authentication, loopback included: any local process could
    // otherwise speak Raft to the node and rewrite the cluster.
    let secret = match (&args.node_id, &args.cluster_secret_file) {
        (Some(_), None) if args.peer_ca.is_none() => {
            let certs = if args.tls_cert.is_some() {
                " or --peer-ca FILE (the CA of node certificates; --tls-cert then this node's node certificate)"
            } else {
                ""
            };
            eprintln!(
                "locksmith serve: a cluster node needs node authentication: add --cluster-secret-file FILE, the same \
                 file on every node (create it once with `umask 077; head -c 32 /dev/urandom | base64 > FILE`){certs}; \
                 README: A cluster"
            );
            return ExitCode::from(exit::CONFIG);
        }
        (_, Some(path)) => match locksmith_server::node_proof::ClusterSecret::load(path) {
            Ok(secret) => Some(secret),
            Err(e) => {
                eprintln!("locksmith serve: --cluster-secret-file: {e}");
                return ExitCode::from(exit::CONFIG);
            }
        },
        (_, None) => None,
    };
    let auth = match args.auth.as_ref().map(locksmith_server::auth::Auth::load).transpose() {
        Ok(auth) => auth,
        Err(e) => {
            eprintln!("locksmith serve: {e}");
            return ExitCode::from(exit::CONFIG);
        }
    };
    let _hup = auth.clone().map(reload_on_sighup);
    let shutdown = {
        // Installed before the listener is bound, so a signal sent as soon as the port answers
        // stops the server cleanly instead of killing it with the default action.
        let signal = locksmith_cli_common::shutdown_signal();
        async move {
            // Awaited outside the log macro: a disabled level would skip its arguments.
            let name = signal.await;
            tracing::info!("{name} received");
        }
    };
    // Metrics first: once the server's port answers, so does its metrics port.
    if let Some(addr) = args.metrics_listen {
        if let Err(message) = crate::serve_metrics::install(addr) {
            eprintln!("locksmith serve: {message}");
            return ExitCode::from(exit::UNAVAILABLE);
        }
        tracing::info!(%addr, "metrics on http://{addr}/metrics");
    }
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
    let net = args.net_limits(raise_open_file_limit());
    let as_usize = |n: u64| usize::try_from(n).unwrap_or(usize::MAX);
    let limits = locksmith_server::machine::Limits {
        max_sessions: as_usize(args.max_sessions),
        max_sessions_per_client: as_usize(args.max_sessions_per_client),
        max_waiters_per_lock: as_usize(args.max_waiters_per_lock),
        max_entries_per_session: as_usize(args.max_entries_per_session),
        ..lock_limits()
    };
    let mut opts =
        locksmith_server::ServeOptions::new(args.data_dir).durability(durability).net_limits(net).limits(limits);
    let routes = args.routes.map(|r| r.0).unwrap_or_default();
    let accept_unauthenticated = args.accept_unauthenticated_peers;
    let (heartbeat, election_timeout) = (args.heartbeat, args.election_timeout);
    let node_auth = |c: locksmith_server::cluster::ClusterOptions| {
        let c = c.accept_unauthenticated_peers(accept_unauthenticated).timings(heartbeat, election_timeout);
        match secret.clone() {
            Some(s) => c.secret(s),
            None => c,
        }
    };
    match (args.node_id, args.peers, args.join) {
        (Some(id), Some(Peers(peers)), _) => {
            // RaftNode::start refuses both as configuration errors too; checked here as well
            // so that they are usage errors (exit 2), reported before the port is bound or
            // the data directory created.
            if !peers.contains_key(&id) {
                eprintln!("locksmith serve: --node-id {id} is not among --peers");
                return ExitCode::from(exit::USAGE);
            }
            if let Some(unknown) = routes.keys().find(|r| !peers.contains_key(r)) {
                eprintln!("locksmith serve: --routes names node {unknown}, which is not among --peers");
                return ExitCode::from(exit::USAGE);
            }
            opts = opts.cluster(node_auth(locksmith_server::cluster::ClusterOptions::new(id, peers).routes(routes)));
        }
        (Some(id), None, true) => {
            opts = opts.cluster(node_auth(locksmith_server::cluster::ClusterOptions::join(id).routes(routes)));
        }
        _ => {}
    }
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

/// Descriptors kept free of client connections: the listener, the data directory's files, the
/// metrics listener and its scrapers, logs.
const RESERVED_FDS: u64 = 64;

/// The most connections `fd_limit` open files leave room for.
fn connections_within(fd_limit: u64) -> usize {
    usize::try_from(fd_limit.saturating_sub(RESERVED_FDS).max(1)).unwrap_or(usize::MAX)
}

/// Raises the soft open-file limit to the hard one (each client connection is a descriptor;
/// many systems start processes with a soft limit of 1024) and returns the limit in force.
fn raise_open_file_limit() -> Option<u64> {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let (soft, hard) = match getrlimit(Resource::RLIMIT_NOFILE) {
        Ok(limits) => limits,
        Err(e) => {
            tracing::warn!(error = %e, "cannot read the open-file limit");
            return None;
        }
    };
    if soft >= hard {
        tracing::info!(open_file_limit = soft, "open-file limit");
        return Some(soft);
    }
    match setrlimit(Resource::RLIMIT_NOFILE, hard, hard) {
        Ok(()) => {
            tracing::info!(open_file_limit = hard, was = soft, "open-file limit raised to the hard limit");
            Some(hard)
        }
        Err(e) => {
            tracing::warn!(open_file_limit = soft, hard, error = %e, "cannot raise the open-file limit");
            Some(soft)
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

/// The exit code for a server failure: a corrupt data directory is [`exit::DATA`], one that
/// cannot be created or opened [`exit::CANTCREAT`], one in use by another server
/// [`exit::TEMPFAIL`], one without space left [`exit::IOERR`]; a cluster node whose Raft core
/// stopped [`exit::IOERR`] when a storage error stopped it, else [`exit::SOFTWARE`]; another
/// failed disk or the transport are 1.
fn server_code_for(err: &locksmith_server::ServerError) -> u8 {
    match err {
        locksmith_server::ServerError::RaftStopped { storage: true } => exit::IOERR,
        locksmith_server::ServerError::RaftStopped { storage: false } => exit::SOFTWARE,
        locksmith_server::ServerError::Corrupt(_) => exit::DATA,
        locksmith_server::ServerError::DataDir { .. } => exit::CANTCREAT,
        locksmith_server::ServerError::InUse(_) => exit::TEMPFAIL,
        locksmith_server::ServerError::NoSpace { .. } => exit::IOERR,
        locksmith_server::ServerError::Config(_) => exit::CONFIG,
        _ => 1,
    }
}

#[cfg(test)]
mod tests {
    use super::{listen_arg, server_code_for};
    use crate::exit::DATA;
    use locksmith_server::ServerError;

    /// A corrupt data directory exits 65 (EX_DATAERR), one that cannot be created 73, one in
    /// use 75; the other server failures exit 1.
    #[test]
    fn server_failures_map_to_the_exit_codes_serve_always_used() {
        assert_eq!(server_code_for(&ServerError::Corrupt("wal: bad header".into())), DATA);
        assert_eq!(server_code_for(&ServerError::InUse("./locksmith-data".into())), 75);
        let source = std::io::Error::from(std::io::ErrorKind::PermissionDenied);
        assert_eq!(server_code_for(&ServerError::DataDir { path: "/x".into(), source }), 73);
        assert_eq!(server_code_for(&ServerError::RaftStopped { storage: false }), 70);
        assert_eq!(server_code_for(&ServerError::RaftStopped { storage: true }), 74);
        assert_eq!(server_code_for(&ServerError::WriterStopped), 1);
        assert_eq!(server_code_for(&ServerError::Io(std::io::Error::other("disk full"))), 1);
        let full = std::io::Error::from_raw_os_error(28);
        assert_eq!(server_code_for(&ServerError::NoSpace { path: "/x".into(), source: full }), 74);
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
