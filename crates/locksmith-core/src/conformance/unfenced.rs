//! [`UnfencedTarget`]: the suite against a backend without fencing tokens (Redlock, memcached).
//!
//! The suite calls `lock()` without `allow_unfenced`, which such a backend rightly refuses
//! ([`Error::Unfenced`](crate::Error::Unfenced)), and three of its properties compare tokens,
//! which such a backend cannot give (token 0). To still run every exclusion, waiting,
//! cancellation, reentrancy, release, loss and renewal property against the real driver, the
//! suite runs through a shim: it delegates every call to the real backend unchanged, but claims
//! fencing and replaces each grant's token 0 by a **test-only** counter shared by all clients of
//! one target. That counter is NOT a fencing token: it is assigned in this process after the
//! grant, so it only mirrors the order in which the suite observed grants. The token
//! assertions of the suite therefore say nothing about the backend; the overlap checks ("two
//! holders at once") and every other assertion do. A driver's own tests assert the real
//! behaviour (refusal without the opt-in, `fencing_token() == None`, token 0).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;

use super::{BackendFactory, Caps, Target};
use crate::{
    AcquireRequest, Acquired, Backend, Client, Error, KeepAlive, LockName, LockStatus, LostHold, Result, Session,
};

/// A [`Target`] for a backend whose [`Backend::provides_fencing`] is false: polling waiters
/// (not FIFO, not counted by `status`), grants renumbered by a test-only counter.
///
/// ```no_run
/// # fn backend(_: &str) -> locksmith_core::Result<std::sync::Arc<dyn locksmith_core::Backend>> { unimplemented!() }
/// use locksmith_core::conformance::UnfencedTarget;
/// let target = UnfencedTarget::new("memcached://127.0.0.1:11211", backend);
/// ```
pub struct UnfencedTarget {
    url: String,
    factory: BackendFactory,
    counter: Arc<AtomicU64>,
    _keep: Option<Box<dyn std::any::Any + Send + Sync>>,
}

impl std::fmt::Debug for UnfencedTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UnfencedTarget").field("url", &self.url).finish()
    }
}

impl UnfencedTarget {
    /// A target for `url`, built by `factory` (pass `locksmith::backend`).
    pub fn new(url: impl Into<String>, factory: BackendFactory) -> Self {
        Self { url: url.into(), factory, counter: Arc::new(AtomicU64::new(0)), _keep: None }
    }

    /// Keeps `resource` (typically the test servers) alive as long as the target.
    pub fn keeping<T: Send + Sync + 'static>(mut self, resource: T) -> Self {
        self._keep = Some(Box::new(resource));
        self
    }
}

#[async_trait]
impl Target for UnfencedTarget {
    fn url(&self) -> String {
        self.url.clone()
    }
    async fn client(&self, ttl: Duration) -> Result<Client> {
        let inner = (self.factory)(&self.url)?;
        if inner.provides_fencing() {
            return Err(Error::Internal(format!("{} has fencing tokens: use UrlTarget", inner.describe())));
        }
        Client::new(Arc::new(ShimBackend { inner, counter: self.counter.clone() }), ttl)
    }
    fn caps(&self) -> Caps {
        Caps { fifo: false, reports_waiters: false, ..Caps::default() }
    }
}

/// Delegates to the real driver; only the fencing claim and the token numbers are the shim's.
#[derive(Debug)]
struct ShimBackend {
    inner: Arc<dyn Backend>,
    counter: Arc<AtomicU64>,
}

#[async_trait]
impl Backend for ShimBackend {
    fn describe(&self) -> String {
        self.inner.describe()
    }
    fn scheme(&self) -> &'static str {
        self.inner.scheme()
    }
    fn provides_fencing(&self) -> bool {
        true // test shim only: lets the suite's plain `lock()` through
    }
    fn supports(&self, mode: crate::HoldMode) -> bool {
        self.inner.supports(mode)
    }
    fn supports_election(&self) -> bool {
        self.inner.supports_election()
    }
    async fn open_session(&self, ttl: Duration) -> Result<Box<dyn Session>> {
        let inner = self.inner.open_session(ttl).await?;
        Ok(Box::new(ShimSession { inner, counter: self.counter.clone(), tokens: Mutex::new(HashMap::new()) }))
    }
    async fn status(&self, name: Option<&LockName>) -> Result<Vec<LockStatus>> {
        self.inner.status(name).await
    }
}

struct ShimSession {
    inner: Box<dyn Session>,
    counter: Arc<AtomicU64>,
    /// (name, owner) → shim token, to translate loss reports (the driver reports token 0).
    tokens: Mutex<HashMap<(LockName, String), u64>>,
}

impl ShimSession {
    fn tokens(&self) -> MutexGuard<'_, HashMap<(LockName, String), u64>> {
        self.tokens.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[async_trait]
impl Session for ShimSession {
    fn id(&self) -> String {
        self.inner.id()
    }
    fn lease(&self) -> Duration {
        self.inner.lease()
    }
    async fn keep_alive(&self) -> Result<KeepAlive> {
        let mut ka = self.inner.keep_alive().await?;
        let tokens = self.tokens();
        ka.lost = ka
            .lost
            .into_iter()
            .filter_map(|lost| {
                let token = tokens.get(&(lost.name.clone(), lost.owner.clone())).copied()?;
                Some(LostHold::new(lost.name, lost.owner, token))
            })
            .collect();
        Ok(ka)
    }
    async fn acquire(&self, req: AcquireRequest) -> Result<Acquired> {
        let key = (req.name.clone(), req.owner.clone());
        match self.inner.acquire(req).await? {
            Acquired::Granted { token } => {
                assert_eq!(token, 0, "an unfenced backend granted token {token}");
                let shim = self.counter.fetch_add(1, Ordering::SeqCst) + 1;
                self.tokens().insert(key, shim);
                Ok(Acquired::Granted { token: shim })
            }
            Acquired::Busy => Ok(Acquired::Busy),
        }
    }
    async fn release(&self, name: &LockName, owner: &str, _token: u64) -> Result<bool> {
        self.tokens().remove(&(name.clone(), owner.to_string()));
        self.inner.release(name, owner, 0).await
    }
    async fn close(&self) -> Result<()> {
        self.inner.close().await
    }
}
