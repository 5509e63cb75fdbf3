//! What `locksmith serve` is given: the data directory, limits, durability, TLS, auth, network
//! bounds and a cluster node's part.

use std::path::PathBuf;

use crate::machine::{Durability, Limits};
use crate::net_limits::NetLimits;

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
    /// TLS for client connections; `None`: plain HTTP/2.
    pub tls: Option<ServerTls>,
    /// Who may do what; `None`: every client may do everything.
    pub auth: Option<crate::auth::Auth>,
    /// Bounds on connections and streams.
    pub net: NetLimits,
    /// This node's part in a cluster; `None`: a single node.
    pub cluster: Option<crate::cluster::ClusterOptions>,
}

/// The server's TLS material, PEM: its certificate chain and key, and optionally the CA whose
/// client certificates it demands (mutual TLS: a client without one is refused in the
/// handshake). `Debug` shows no key.
#[derive(Clone)]
#[non_exhaustive]
pub struct ServerTls {
    /// Certificate chain, PEM.
    pub cert: Vec<u8>,
    /// Private key, PEM. A secret.
    pub key: Vec<u8>,
    /// Authorities whose client certificates are accepted, PEM; `Some` makes one required.
    pub client_ca: Option<Vec<u8>>,
    /// The authority of node certificates (a cluster's `--peer-ca`), PEM: peers present one
    /// that names their node id, and `cert` must be this node's own. Its certificates are also
    /// accepted in the handshake (optional for clients when there is no `client_ca`), but only
    /// the Raft and membership services take them as a node's.
    pub peer_ca: Option<Vec<u8>>,
}

impl ServerTls {
    /// TLS with `cert` and `key` (PEM); no client certificates asked for.
    pub fn new(cert: Vec<u8>, key: Vec<u8>) -> Self {
        Self { cert, key, client_ca: None, peer_ca: None }
    }

    /// Require a client certificate signed by one of `ca` (PEM).
    #[must_use]
    pub fn client_ca(mut self, ca: Vec<u8>) -> Self {
        self.client_ca = Some(ca);
        self
    }

    /// Node certificates signed by `ca` (PEM): see [`ServerTls::peer_ca`](Self#structfield.peer_ca).
    #[must_use]
    pub fn peer_ca(mut self, ca: Vec<u8>) -> Self {
        self.peer_ca = Some(ca);
        self
    }

    pub(crate) fn config(&self) -> tonic::transport::ServerTlsConfig {
        use tonic::transport::{Certificate, Identity, ServerTlsConfig};
        let config = ServerTlsConfig::new().identity(Identity::from_pem(&self.cert, &self.key));
        match (&self.client_ca, &self.peer_ca) {
            (Some(ca), None) => config.client_ca_root(Certificate::from_pem(ca)),
            // One handshake for clients and nodes: either authority's certificate passes it; the
            // Raft gate then checks a node's against the peer CA alone.
            (Some(ca), Some(peer)) => config.client_ca_root(Certificate::from_pem([&ca[..], b"\n", peer].concat())),
            (None, Some(peer)) => config.client_ca_root(Certificate::from_pem(peer)).client_auth_optional(true),
            (None, None) => config,
        }
    }
}

impl std::fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerTls")
            .field("client_ca", &self.client_ca.is_some())
            .field("peer_ca", &self.peer_ca.is_some())
            .finish_non_exhaustive()
    }
}

impl ServeOptions {
    /// Options for `data_dir` with default limits.
    pub fn new(data_dir: impl Into<PathBuf>) -> Self {
        Self {
            data_dir: data_dir.into(),
            limits: Limits::default(),
            durability: Durability::default(),
            tls: None,
            auth: None,
            net: NetLimits::default(),
            cluster: None,
        }
    }

    /// The same options for node `cluster.node_id` of a cluster.
    pub fn cluster(mut self, cluster: crate::cluster::ClusterOptions) -> Self {
        self.cluster = Some(cluster);
        self
    }

    /// The same options with other connection and stream bounds.
    pub fn net_limits(mut self, net: NetLimits) -> Self {
        self.net = net;
        self
    }

    /// The same options with other lock-service limits.
    pub fn limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// The same options with every call authenticated and authorized by `auth`.
    pub fn auth(mut self, auth: crate::auth::Auth) -> Self {
        self.auth = Some(auth);
        self
    }

    /// The same options serving TLS with `tls`.
    pub fn tls(mut self, tls: ServerTls) -> Self {
        self.tls = Some(tls);
        self
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
