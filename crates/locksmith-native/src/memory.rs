//! `memory://[name]`: the native server's service running in this process, without network or
//! disk, for users' own tests. The same state machine and the same session protocol as
//! `locksmith://`, so behaviour matches the real server (except durability). The same URL in
//! one process means the same lock space.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use async_trait::async_trait;
use futures_util::StreamExt;
use locksmith_core::{Backend, HoldMode, LockName, LockStatus, Result, Session};
use locksmith_server::machine::Limits;
use locksmith_server::Service;
use tokio_stream::wrappers::UnboundedReceiverStream;

use crate::mux::{Connector, StreamSession, Transport};

/// The in-process backend.
#[derive(Debug, Clone)]
pub struct MemoryBackend {
    inner: Arc<MemoryConnector>,
}

#[derive(Debug)]
struct MemoryConnector {
    /// `None` for an isolated space.
    name: Option<String>,
    /// Started on first use, inside the caller's runtime.
    service: std::sync::OnceLock<Service>,
}

impl MemoryConnector {
    fn service(&self) -> Service {
        self.service
            .get_or_init(|| match &self.name {
                Some(name) => {
                    let mut reg = registry().lock().unwrap_or_else(|p| p.into_inner());
                    match reg.get(name) {
                        Some(s) if s.is_running() => s.clone(),
                        _ => {
                            let s = Service::start_in_memory(Limits::default());
                            reg.insert(name.clone(), s.clone());
                            s
                        }
                    }
                }
                None => Service::start_in_memory(Limits::default()),
            })
            .clone()
    }
}

fn registry() -> &'static Mutex<HashMap<String, Service>> {
    static REGISTRY: OnceLock<Mutex<HashMap<String, Service>>> = OnceLock::new();
    REGISTRY.get_or_init(Default::default)
}

impl MemoryBackend {
    /// The in-process lock space called `name` (`""` for plain `memory://`), created on first
    /// use inside a tokio runtime. A space whose runtime has ended is recreated empty.
    pub fn named(name: &str) -> Self {
        Self { inner: Arc::new(MemoryConnector { name: Some(name.to_string()), service: Default::default() }) }
    }

    /// A private lock space nobody else can reach.
    pub fn isolated() -> Self {
        Self { inner: Arc::new(MemoryConnector { name: None, service: Default::default() }) }
    }
}

#[async_trait]
impl Connector for MemoryConnector {
    fn describe(&self) -> String {
        format!("memory://{}", self.name.as_deref().unwrap_or("(isolated)"))
    }

    fn scheme(&self) -> &'static str {
        "memory"
    }

    async fn connect(&self) -> Result<Transport> {
        let (to_server, from_client) = tokio::sync::mpsc::unbounded_channel();
        let (to_client, from_server) = tokio::sync::mpsc::unbounded_channel();
        let inbound = UnboundedReceiverStream::new(from_client).map(Ok::<_, Infallible>);
        tokio::spawn(locksmith_server::serve_stream(self.service(), inbound, to_client));
        Ok(Transport { tx: to_server, rx: UnboundedReceiverStream::new(from_server).map(Ok).boxed() })
    }
}

#[async_trait]
impl Backend for MemoryBackend {
    fn describe(&self) -> String {
        self.inner.describe()
    }

    fn scheme(&self) -> &'static str {
        "memory"
    }

    async fn open_session(&self, ttl: Duration) -> Result<Box<dyn Session>> {
        let connector: Arc<dyn Connector> = self.inner.clone();
        Ok(Box::new(StreamSession::open(connector, ttl).await?))
    }

    async fn status(&self, name: Option<&LockName>) -> Result<Vec<LockStatus>> {
        let views = self.inner.service().status(name.cloned()).await?;
        Ok(views.into_iter().map(crate::convert::from_view).collect())
    }

    /// Read locks and semaphores are served by the in-process server's own queue.
    fn supports(&self, mode: HoldMode) -> bool {
        crate::convert::served(mode)
    }

    fn supports_election(&self) -> bool {
        true
    }

    async fn observe(&self, name: &LockName) -> Result<tokio::sync::mpsc::Receiver<Result<LockStatus>>> {
        let (to_observer, mut from_service) = tokio::sync::mpsc::unbounded_channel();
        self.inner.service().observe(name.clone(), to_observer).await?;
        let (tx, rx) = tokio::sync::mpsc::channel(16);
        tokio::spawn(async move {
            while let Some(m) = from_service.recv().await {
                // Unlike the gRPC stream (which ends at its first error), this reads on after an
                // odd message, as it always did: the in-process service is still there to send
                // the next status.
                if tx.send(crate::convert::observed(m)).await.is_err() {
                    return;
                }
            }
        });
        Ok(rx)
    }
}
