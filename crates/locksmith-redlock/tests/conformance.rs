//! The shared contract suite against Redlock over five real Redis masters, and the fencing
//! refusal that only the real backend shows.
//!
//! Why a wrapper: the suite calls `lock()` without `allow_unfenced`, which the real backend
//! rightly refuses (`Error::Unfenced`), and three of its properties compare tokens (they must
//! increase), which Redlock cannot give (token 0). To still run every exclusion, waiting,
//! cancellation, reentrancy, release, loss and renewal property against the real driver, the
//! suite runs through `ShimBackend`: it delegates every call to `RedlockBackend` unchanged, but
//! claims fencing and replaces each grant's token 0 by a **test-only** counter shared by all
//! clients of one target. That counter is NOT a fencing token: it is assigned in this process
//! after the grant, so it only mirrors the order in which the suite observed grants. The
//! token assertions of the suite therefore say nothing about Redlock; the overlap checks
//! ("two holders at once") and every other assertion do. The real backend's behaviour (refusal
//! without opt-in, `fencing_token() == None`, token 0) is asserted separately below.

mod common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use locksmith_core::conformance::{Caps, Target};
use locksmith_core::{
    AcquireRequest, Acquired, Backend, Client, Error, KeepAlive, LockName, LockStatus, LostHold, Result, Session,
};
use locksmith_redlock::RedlockBackend;

/// Delegates to the real driver; only the fencing claim and the token numbers are the shim's.
#[derive(Debug)]
struct ShimBackend {
    inner: RedlockBackend,
    counter: Arc<AtomicU64>,
}

#[async_trait::async_trait]
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

#[async_trait::async_trait]
impl Session for ShimSession {
    fn id(&self) -> String {
        self.inner.id()
    }
    fn lease(&self) -> Duration {
        self.inner.lease()
    }
    async fn keep_alive(&self) -> Result<KeepAlive> {
        let mut ka = self.inner.keep_alive().await?;
        let tokens = self.tokens.lock().unwrap();
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
                assert_eq!(token, 0, "Redlock grants carry token 0");
                let shim = self.counter.fetch_add(1, Ordering::SeqCst) + 1;
                self.tokens.lock().unwrap().insert(key, shim);
                Ok(Acquired::Granted { token: shim })
            }
            Acquired::Busy => Ok(Acquired::Busy),
        }
    }
    async fn release(&self, name: &LockName, owner: &str, _token: u64) -> Result<bool> {
        self.tokens.lock().unwrap().remove(&(name.clone(), owner.to_string()));
        self.inner.release(name, owner, 0).await
    }
    async fn close(&self) -> Result<()> {
        self.inner.close().await
    }
}

struct Redlock5 {
    five: common::Five,
    counter: Arc<AtomicU64>,
}

impl Redlock5 {
    fn new() -> Self {
        Self { five: common::Five::start(), counter: Arc::new(AtomicU64::new(0)) }
    }
}

#[async_trait::async_trait]
impl Target for Redlock5 {
    fn url(&self) -> String {
        self.five.url()
    }
    async fn client(&self, ttl: Duration) -> Result<Client> {
        let inner = RedlockBackend::from_url(&self.five.url())?;
        Client::new(Arc::new(ShimBackend { inner, counter: self.counter.clone() }), ttl)
    }
    fn caps(&self) -> Caps {
        let mut c = Caps::default();
        c.fifo = false;
        c.reports_waiters = false;
        c
    }
}

locksmith_core::conformance_suite!(Redlock5::new());

/// The real backend refuses `lock`/`try_lock` without `allow_unfenced` (Error::Unfenced), and a
/// hold taken with it has token 0 and `fencing_token() == None`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_backend_refuses_to_lock_without_opting_in_to_no_fencing() {
    let five = common::Five::start();
    let client = locksmith::connect_with_ttl(&five.url(), Duration::from_secs(2)).await.unwrap();
    assert!(!client.backend().provides_fencing());
    let name = common::unique("unfenced");
    let r = client.lock(&name).await;
    assert!(matches!(r, Err(Error::Unfenced(_))), "lock without opt-in gave {r:?}");
    let r = client.try_lock(&name).await;
    assert!(matches!(r, Err(Error::Unfenced(_))), "try_lock without opt-in gave {r:?}");
    assert!(five.holding(&name).await.is_empty(), "a refused lock touched the instances");

    let g = client.lock_with(&name, common::unfenced()).await.unwrap();
    assert_eq!(g.fencing_token(), None);
    assert_eq!(g.token(), 0);
    assert!(g.is_held());
    assert!(g.unlock().await.unwrap());
    client.close().await;
}
