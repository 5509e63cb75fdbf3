//! `locksmith://host:port`: the native server over gRPC, one session stream per session.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures_util::StreamExt;
use locksmith_core::driver::BackendUrl;
use locksmith_core::{Backend, Error, LockName, LockStatus, Result, Session};
use locksmith_proto::locksmith_client::LocksmithClient;
use locksmith_proto::StatusRequest;
use tokio_stream::wrappers::UnboundedReceiverStream;
use tonic::transport::{Channel, Endpoint};

use crate::mux::{Connector, StreamSession, Transport};

/// How long to wait for a TCP connection before calling the server unreachable.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

/// The native backend.
#[derive(Debug, Clone)]
pub struct NativeBackend {
    inner: Arc<GrpcConnector>,
}

#[derive(Debug)]
struct GrpcConnector {
    url: String,
    endpoint: Endpoint,
    /// Created on first use: a channel needs a running tokio runtime, a URL does not.
    channel: std::sync::OnceLock<Channel>,
}

impl GrpcConnector {
    fn channel(&self) -> Channel {
        self.channel.get_or_init(|| self.endpoint.connect_lazy()).clone()
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

    /// A backend for `locksmith://host[:port]` (port 7531 when omitted). Connects lazily.
    ///
    /// # Errors
    /// [`Error::InvalidUrl`] for another scheme, several hosts, credentials, a path or options.
    pub fn from_url(url: &str) -> Result<Self> {
        let u = BackendUrl::parse(url)?;
        if u.scheme().name != "locksmith" {
            return Err(u.invalid("expected locksmith://host:port".into()));
        }
        u.refuse_extras(false, false, false)?;
        let [host] = u.hosts() else {
            return Err(u.invalid("expected one host: locksmith://host:port".into()));
        };
        let bad = |e: tonic::transport::Error| u.invalid(locksmith_core::error_chain(&e));
        let endpoint = Endpoint::from_shared(format!("http://{host}"))
            .map_err(bad)?
            .connect_timeout(CONNECT_TIMEOUT)
            .tcp_nodelay(true)
            .http2_keep_alive_interval(Duration::from_secs(10))
            .keep_alive_while_idle(true);
        let url = u.describe(&[]);
        Ok(Self { inner: Arc::new(GrpcConnector { url, endpoint, channel: std::sync::OnceLock::new() }) })
    }

    fn unavailable(&self, e: impl std::fmt::Display) -> Error {
        Error::Unavailable { backend: self.inner.url.clone(), message: e.to_string() }
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
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let mut client = LocksmithClient::new(self.channel());
        let response = tokio::time::timeout(CONNECT_TIMEOUT, client.session(UnboundedReceiverStream::new(rx)))
            .await
            .map_err(|_| Error::Unavailable { backend: self.url.clone(), message: "no answer".into() })?
            .map_err(|s| Error::Unavailable { backend: self.url.clone(), message: status_message(&s) })?;
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

    async fn status(&self, name: Option<&LockName>) -> Result<Vec<LockStatus>> {
        let mut client = LocksmithClient::new(self.inner.channel());
        let req = StatusRequest { name: name.map(|n| n.as_str().to_string()).unwrap_or_default() };
        let resp = tokio::time::timeout(CONNECT_TIMEOUT * 2, client.status(req))
            .await
            .map_err(|_| self.unavailable("no answer"))?
            .map_err(|s| match s.code() {
                tonic::Code::InvalidArgument => Error::InvalidArgument(s.message().to_string()),
                _ => self.unavailable(status_message(&s)),
            })?;
        Ok(resp.into_inner().locks.into_iter().map(crate::convert::from_wire).collect())
    }
}
