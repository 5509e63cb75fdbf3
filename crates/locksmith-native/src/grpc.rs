//! `locksmith://host:port`: the native server over gRPC, one session stream per session;
//! `locksmiths://host:port[?ca=FILE&cert=FILE&key=FILE]` (or `locksmith://…?tls=true`) over TLS.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use async_trait::async_trait;
use futures_util::StreamExt;
use locksmith_core::driver::{BackendUrl, TlsFiles};
use locksmith_core::{Backend, Error, HoldMode, LockName, LockStatus, Result, Session};
use locksmith_proto::locksmith_client::LocksmithClient;
use locksmith_proto::StatusRequest;
use tokio_stream::wrappers::UnboundedReceiverStream;
use tonic::metadata::{Ascii, MetadataValue};
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

use crate::mux::{Connector, StreamSession, Transport};
use crate::route::NodeBound;

/// How long a call may take to find a serving node before the server is called unreachable.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

/// The native backend.
#[derive(Debug, Clone)]
pub struct NativeBackend {
    pub(crate) inner: Arc<GrpcConnector>,
}

#[derive(Debug)]
pub(crate) struct GrpcConnector {
    pub(crate) url: String,
    /// One server, or the nodes of a cluster (calls go to the one that leads): the URL's, then
    /// those learned by following a leader hint (see `route`). Only ever grows.
    pub(crate) peers: Mutex<Vec<Arc<Peer>>>,
    /// The URL named one node (a DNS or load-balancer name, any member): follow the leader it
    /// names to an address the URL does not have, and learn the cluster's members. A URL
    /// listing nodes is a fixed list of routes (fault proxies, tunnels) and never leaves it.
    pub(crate) follow: bool,
    /// The members were learned already (once per backend).
    pub(crate) learned: AtomicBool,
    /// The URL's TLS files, for the nodes learned from hints.
    pub(crate) tls: Option<TlsFiles>,
    /// The peer calls go to first: the last one that answered, or that a node named leader.
    pub(crate) current: AtomicUsize,
    /// `authorization: Bearer …` for every call. A secret: the connector's `Debug` skips it.
    token: Option<MetadataValue<Ascii>>,
}

/// One server address.
#[derive(Debug)]
pub(crate) struct Peer {
    /// `host:port` as a cluster node names its leader.
    pub(crate) addr: String,
    endpoint: Endpoint,
    /// Created on first use: a channel needs a running tokio runtime, a URL does not.
    channel: OnceLock<Channel>,
    /// Where to run a TLS probe after a failure: host, port and the TLS files; `None` for
    /// plain HTTP/2 (a dropped connection may then be a TLS-only server, worth a hint).
    tls: Option<(String, u16, TlsFiles)>,
}

impl Peer {
    pub(crate) fn channel(&self) -> Channel {
        self.channel.get_or_init(|| self.endpoint.connect_lazy()).clone()
    }

    fn fresh(&self) -> Arc<Self> {
        Arc::new(Self {
            addr: self.addr.clone(),
            endpoint: self.endpoint.clone(),
            channel: OnceLock::new(),
            tls: self.tls.clone(),
        })
    }
}

impl NativeBackend {
    /// A backend for `host:port`. Connects lazily: an unreachable server shows on first use as
    /// [`Error::Unavailable`].
    ///
    /// # Errors
    /// [`Error::InvalidUrl`] if `authority` is not `host[:port]`.
    pub fn new(authority: &str) -> Result<Self> {
        Self::from_url(&format!("locksmith://{authority}"))
    }

    /// A backend for `locksmith://host[:port]` (port 7531 when omitted), or over TLS for
    /// `locksmiths://host[:port]` / `locksmith://…?tls=true`, with `ca=FILE` (trust only that CA;
    /// default: Mozilla's public roots, compiled in) and `cert=FILE&key=FILE` (a client
    /// certificate, for servers started with `--client-ca`). Files are read now. Connects
    /// lazily.
    ///
    /// ```
    /// use locksmith_core::Backend;
    /// let b = locksmith_native::NativeBackend::from_url("locksmiths://locks.internal:7531")?;
    /// assert_eq!(b.describe(), "locksmiths://locks.internal:7531");
    /// # Ok::<(), locksmith_core::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidUrl`] for another scheme, credentials, a path or other options;
    /// [`Error::Config`] for a TLS file that cannot be read.
    ///
    /// A URL naming one node (any member of a cluster, or a name that lands on any) follows the
    /// leader that node names, with the same TLS files and token, and learns the members the
    /// cluster reports; `follow=false` keeps to that one address. A URL listing several nodes
    /// keeps to them (each may be a proxy or a tunnel): list them all.
    pub fn from_url(url: &str) -> Result<Self> {
        let mut u = BackendUrl::parse(url)?;
        if u.scheme().base != "locksmith" {
            return Err(u.invalid("expected locksmith://host:port or locksmiths://host:port".into()));
        }
        let tls_scheme = u.scheme().tls;
        let tls = TlsFiles::take_from(&mut u, tls_scheme)?;
        let token = match u.take_option("token_file") {
            Some(path) => Some(read_token(&u.describe(&[]), "token_file=", &path)?),
            None => match std::env::var_os(TOKEN_FILE_ENV) {
                Some(path) => Some(read_token(&u.describe(&[]), TOKEN_FILE_ENV, &path.to_string_lossy())?),
                None => None,
            },
        };
        let follow = match u.take_option("follow").as_deref() {
            None | Some("true" | "1" | "yes") => true,
            Some("false" | "0" | "no") => false,
            Some(other) => return Err(u.invalid(format!("follow={other:?}: expected true or false"))),
        };
        u.refuse_extras(false, false, false)?;
        let hosts: Vec<(String, u16)> = u.hosts().iter().map(|h| (h.host.clone(), h.port)).collect();
        if hosts.is_empty() {
            return Err(u.invalid("expected host:port, or a cluster's host:port,host:port,…".into()));
        }
        let describe = match (&tls, u.scheme().tls) {
            (Some(_), false) => u.describe(&[("tls", "true")]),
            _ => u.describe(&[]),
        };
        let mut backend = Self::build(hosts, tls, describe)?;
        if let Some(inner) = Arc::get_mut(&mut backend.inner) {
            inner.token = token;
            inner.follow &= follow;
        }
        Ok(backend)
    }

    /// The same backend presenting bearer `token` on every call (for servers started with an
    /// auth policy), from code rather than a file.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] if the token is not printable ASCII.
    pub fn with_token(self, token: &str) -> Result<Self> {
        let value = bearer(token)
            .ok_or_else(|| Error::InvalidArgument("locksmith: the token is not printable ASCII".into()))?;
        let inner = GrpcConnector {
            url: self.inner.url.clone(),
            peers: Mutex::new(self.inner.peers().iter().map(|p| p.fresh()).collect()),
            follow: self.inner.follow,
            learned: AtomicBool::new(false),
            tls: self.inner.tls.clone(),
            current: AtomicUsize::new(self.inner.current.load(Ordering::Relaxed)),
            token: Some(value),
        };
        Ok(Self { inner: Arc::new(inner) })
    }

    /// A backend for `host:port` over TLS with PEM material held in memory (`tls.ca`: the CA to
    /// trust, `None` for the public roots; `tls.identity`: a client certificate and key) — for
    /// keys that do not belong in a file named in a URL. Connects lazily.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] if `authority` is not `host[:port]`.
    pub fn with_tls(authority: &str, tls: TlsFiles) -> Result<Self> {
        let u = BackendUrl::parse(&format!("locksmiths://{authority}"))
            .map_err(|e| Error::InvalidArgument(format!("locksmith: {e}")))?;
        let [host] = u.hosts() else {
            return Err(Error::InvalidArgument(format!("locksmith: expected one host:port, got {authority:?}")));
        };
        Self::build(vec![(host.host.clone(), host.port)], Some(tls), u.describe(&[]))
    }

    fn build(hosts: Vec<(String, u16)>, tls: Option<TlsFiles>, url: String) -> Result<Self> {
        let follow = hosts.len() == 1;
        let peers = hosts
            .into_iter()
            .map(|(host, port)| Self::peer(host, port, tls.clone(), &url).map(Arc::new))
            .collect::<Result<Vec<_>>>()?;
        let inner = GrpcConnector {
            url,
            peers: Mutex::new(peers),
            follow,
            learned: AtomicBool::new(false),
            tls,
            current: AtomicUsize::new(0),
            token: None,
        };
        Ok(Self { inner: Arc::new(inner) })
    }

    pub(crate) fn peer(host: String, port: u16, tls: Option<TlsFiles>, url: &str) -> Result<Peer> {
        let bad = |e: tonic::transport::Error| Error::InvalidUrl {
            url: url.to_string(),
            reason: locksmith_core::error_chain(&e),
        };
        // An IPv6 literal keeps its brackets in a URI; the certificate is checked against the
        // bare name or address.
        let authority = if host.contains(':') { format!("[{host}]:{port}") } else { format!("{host}:{port}") };
        let scheme = if tls.is_some() { "https" } else { "http" };
        let mut endpoint = Endpoint::from_shared(format!("{scheme}://{authority}"))
            .map_err(bad)?
            .connect_timeout(CONNECT_TIMEOUT)
            .tcp_nodelay(true)
            .http2_keep_alive_interval(Duration::from_secs(10))
            .keep_alive_while_idle(true);
        if let Some(tls) = &tls {
            let mut config = ClientTlsConfig::new().domain_name(host.trim_start_matches('[').trim_end_matches(']'));
            config = match &tls.ca {
                Some(ca) => config.ca_certificate(Certificate::from_pem(ca)),
                None => config.with_webpki_roots(),
            };
            if let Some((cert, key)) = &tls.identity {
                config = config.identity(Identity::from_pem(cert, key));
            }
            endpoint = endpoint.tls_config(config).map_err(|e| Error::Config {
                backend: url.to_string(),
                message: format!("TLS settings refused: {}", locksmith_core::error_chain(&e)),
            })?;
        }
        let tls = tls.map(|t| (host.trim_start_matches('[').trim_end_matches(']').to_string(), port, t));
        Ok(Peer { addr: format!("{host}:{port}"), endpoint, channel: OnceLock::new(), tls })
    }
}

/// Whether the server at `addr` (`host:port`) speaks TLS: it answers a few plain bytes with a
/// TLS alert record (content type 21, version 3.x). One short probe, after a plain connection
/// was dropped; `false` when it cannot tell.
async fn serves_tls(addr: &str) -> bool {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let probe = async {
        let mut stream = tokio::net::TcpStream::connect(addr).await.ok()?;
        stream.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n").await.ok()?;
        let mut head = [0u8; 2];
        stream.read_exact(&mut head).await.ok()?;
        Some(head == [21, 3])
    };
    tokio::time::timeout(crate::route::NODE_BOUND, probe).await.ok().flatten().unwrap_or(false)
}

/// Where `locksmith://` clients find their bearer token when the URL names no `token_file=`.
pub const TOKEN_FILE_ENV: &str = "LOCKSMITH_TOKEN_FILE";

/// The token in file `path` (surrounding whitespace trimmed), as metadata.
fn read_token(backend: &str, option: &str, path: &str) -> Result<MetadataValue<Ascii>> {
    let config = |message: String| Error::Config { backend: backend.to_string(), message };
    let text = std::fs::read_to_string(path).map_err(|e| config(format!("cannot read {option} {path}: {e}")))?;
    bearer(text.trim()).ok_or_else(|| config(format!("{option} {path} holds no token (printable ASCII)")))
}

fn bearer(token: &str) -> Option<MetadataValue<Ascii>> {
    if token.is_empty() || !token.bytes().all(|b| b.is_ascii_graphic()) {
        return None;
    }
    let mut value = MetadataValue::try_from(format!("Bearer {token}")).ok()?;
    value.set_sensitive(true);
    Some(value)
}

/// A call that failed at `peer` (none: the backend has no address at all) with `status`.
#[derive(Debug)]
pub(crate) struct Failed {
    pub(crate) peer: Option<Arc<Peer>>,
    pub(crate) status: tonic::Status,
}

impl GrpcConnector {
    /// `msg` as a request with the bearer token, if there is one.
    pub(crate) fn request<T>(&self, msg: T) -> tonic::Request<T> {
        let mut req = tonic::Request::new(msg);
        if let Some(token) = &self.token {
            req.metadata_mut().insert("authorization", token.clone());
        }
        req
    }

    /// What a failed call means: a TLS failure is a configuration (or, for a refused client
    /// certificate, an authentication) error that no retry fixes; anything else is the server
    /// being unreachable.
    ///
    /// A TLS connection the server closed gets one direct handshake to learn why (see
    /// `locksmith_core::driver::tls_probe`): a refused or missing client certificate only shows there.
    async fn transport_error(&self, peer: &Peer, s: &tonic::Status) -> Error {
        // The server's text may already name its kind: said once.
        let unprefixed = |prefix: &str| s.message().strip_prefix(prefix).unwrap_or(s.message()).to_string();
        match s.code() {
            tonic::Code::InvalidArgument => return Error::InvalidArgument(unprefixed("invalid argument: ")),
            tonic::Code::PermissionDenied => {
                return Error::permission_denied(self.url.clone(), unprefixed("permission denied: "))
            }
            tonic::Code::Unauthenticated => {
                return Error::Auth { backend: self.url.clone(), message: s.message().to_string() }
            }
            _ => {}
        }
        if let Some(f) = locksmith_core::driver::tls_failure(s, "locksmith") {
            let no_cert = peer.tls.as_ref().is_none_or(|(_, _, t)| t.identity.is_none());
            return if no_cert { f.without_client_cert() } else { f }.into_error(self.url.clone());
        }
        let mut message = status_message(s);
        let dropped = locksmith_core::driver::connection_dropped(&message);
        match &peer.tls {
            Some((host, port, files)) if dropped => {
                if let Some(f) = locksmith_core::driver::tls_probe(host, *port, files, "locksmith").await {
                    return f.into_error(self.url.clone());
                }
            }
            // A TLS server answers HTTP/2's preface with an alert record, which h2 reads as a
            // frame of invalid size: ask once whether it speaks TLS, and say so for certain.
            None if dropped => {
                if serves_tls(&peer.addr).await {
                    return Error::Config {
                        backend: self.url.clone(),
                        message: format!(
                            "{} requires TLS and this URL speaks plain HTTP/2: use locksmiths:// (or ?tls=true, with \
                             ca= for a private CA)",
                            peer.addr
                        ),
                    };
                }
                message.push_str(" (if the server serves TLS, use locksmiths://)");
            }
            _ => {}
        }
        Error::Unavailable { backend: self.url.clone(), message }
    }

    /// What a failed call means (see [`transport_error`](Self::transport_error)).
    pub(crate) async fn failure(&self, f: &Failed) -> Error {
        match &f.peer {
            Some(peer) => self.transport_error(peer, &f.status).await,
            None => Error::Internal(f.status.message().to_string()),
        }
    }

    /// The peers as they are now.
    pub(crate) fn peers(&self) -> Vec<Arc<Peer>> {
        self.peers.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Runs `call` on the peer that leads (see [`on_leader_raw`](Self::on_leader_raw)) and
    /// says what a failure means.
    pub(crate) async fn on_leader_checked<T, F, Fut>(&self, limit: Duration, call: F) -> Result<T>
    where
        F: FnMut(Channel) -> Fut,
        Fut: Future<Output = std::result::Result<T, tonic::Status>>,
    {
        match self.on_leader_raw(limit, NodeBound::Short, call).await {
            Ok(v) => Ok(v),
            Err(f) => Err(self.failure(&f).await),
        }
    }
}

#[async_trait]
impl Connector for GrpcConnector {
    fn describe(&self) -> String {
        self.url.clone()
    }

    fn scheme(&self) -> &'static str {
        "locksmith"
    }

    async fn connect(&self) -> Result<Transport> {
        let mut sender = None;
        let response = self
            .on_leader_checked(CONNECT_TIMEOUT, |channel| {
                let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
                sender = Some(tx);
                let request = self.request(UnboundedReceiverStream::new(rx));
                async move { LocksmithClient::new(channel).session(request).await }
            })
            .await?;
        let tx = sender.ok_or_else(|| Error::Internal("a session stream without its sender".into()))?;
        let url = self.url.clone();
        let inbound = response.into_inner().map(move |item| {
            item.map_err(|s| Error::Unavailable { backend: url.clone(), message: status_message(&s) })
        });
        Ok(Transport { tx, rx: inbound.boxed() })
    }
}

fn status_message(s: &tonic::Status) -> String {
    // tonic puts the useful cause (connection refused…) in the source chain.
    locksmith_core::message_with_causes(s.message(), std::error::Error::source(s))
}

#[async_trait]
impl Backend for NativeBackend {
    fn describe(&self) -> String {
        self.inner.url.clone()
    }

    fn scheme(&self) -> &'static str {
        "locksmith"
    }

    async fn open_session(&self, ttl: Duration) -> Result<Box<dyn Session>> {
        let connector: Arc<dyn Connector> = self.inner.clone();
        Ok(Box::new(StreamSession::open(connector, ttl).await?))
    }

    /// Read locks and semaphores are served by the server's own queue.
    fn supports(&self, mode: HoldMode) -> bool {
        crate::convert::served(mode)
    }

    fn supports_election(&self) -> bool {
        true
    }

    /// The server's `Observe` stream: each change of `name`'s holders once it is durable.
    async fn observe(&self, name: &LockName) -> Result<tokio::sync::mpsc::Receiver<Result<LockStatus>>> {
        let req = StatusRequest { name: name.as_str().to_string(), ..Default::default() };
        let inner = &self.inner;
        let mut stream = inner
            .on_leader_checked(CONNECT_TIMEOUT * 2, |channel| {
                let request = inner.request(req.clone());
                async move { LocksmithClient::new(channel).observe(request).await }
            })
            .await?
            .into_inner();
        let (tx, rx) = tokio::sync::mpsc::channel(16);
        let url = self.inner.url.clone();
        tokio::spawn(async move {
            loop {
                let item = match stream.message().await {
                    Ok(Some(m)) => crate::convert::observed(m),
                    Ok(None) => return,
                    // A reloaded policy that revoked the credential or the right to observe
                    // ends the stream: a permission error, not the server going away.
                    Err(s) if s.code() == tonic::Code::PermissionDenied => {
                        let message = s.message().strip_prefix("permission denied: ").unwrap_or(s.message());
                        Err(Error::permission_denied(url.clone(), message.to_string()))
                    }
                    Err(s) if s.code() == tonic::Code::Unauthenticated => {
                        Err(Error::Auth { backend: url.clone(), message: s.message().to_string() })
                    }
                    Err(s) => Err(Error::Unavailable { backend: url.clone(), message: status_message(&s) }),
                };
                let end = item.is_err();
                if tx.send(item).await.is_err() || end {
                    return;
                }
            }
        });
        Ok(rx)
    }

    /// One lock, or every lock the server lets this client observe: the server answers a
    /// listing page by page, and this follows the pages to the end.
    async fn status(&self, name: Option<&LockName>) -> Result<Vec<LockStatus>> {
        let mut all = Vec::new();
        let mut after = String::new();
        let inner = &self.inner;
        loop {
            let req = StatusRequest {
                name: name.map(|n| n.as_str().to_string()).unwrap_or_default(),
                after: std::mem::take(&mut after),
                limit: 0,
            };
            let resp = inner
                .on_leader_checked(CONNECT_TIMEOUT * 2, |channel| {
                    let request = inner.request(req.clone());
                    async move { LocksmithClient::new(channel).status(request).await }
                })
                .await?
                .into_inner();
            all.extend(resp.locks.into_iter().map(crate::convert::from_wire));
            if resp.next.is_empty() || name.is_some() {
                return Ok(all);
            }
            after = resp.next;
        }
    }
}
