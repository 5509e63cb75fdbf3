//! The engine every backend shares: one session per client, guards, reentrancy, timeouts.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use crate::backend::{AcquireRequest, Acquired, Backend, LockStatus, LostHold};
use crate::driver::CancelGuard;
use crate::guard::Guard;
use crate::keeper::{LostHolds, SessionCtx};
use crate::{validate_ttl, Error, HoldMode, LockName, LockOptions, Result, DEFAULT_TTL};

/// A live hold as the engine tracks it: shared by reentrant guards of one owner.
#[derive(Debug)]
pub(crate) struct Hold {
    pub(crate) token: u64,
    pub(crate) count: usize,
    /// What the backend granted: a re-entry may share the hold only when it asks for the same,
    /// or its guard would claim (say) a write lock while only a read lock is held.
    pub(crate) mode: HoldMode,
    /// The value (an election's proposal) the backend holds, compared on re-entry like `mode`.
    pub(crate) value: Option<String>,
    pub(crate) lost: Arc<watch::Sender<bool>>,
    pub(crate) ctx: Arc<SessionCtx>,
}

/// Serialises acquisitions and releases of one `(name, owner)`, so reentrant counting never
/// races with the backend call that creates or frees the hold.
#[derive(Debug, Default)]
pub(crate) struct Slot {
    pub(crate) hold: tokio::sync::Mutex<Option<Hold>>,
}

type SlotKey = (LockName, String);

pub(crate) struct Inner {
    backend: Arc<dyn Backend>,
    ttl: Duration,
    client_id: String,
    next_owner: AtomicU64,
    session: tokio::sync::Mutex<Option<Arc<SessionCtx>>>,
    slots: Arc<Mutex<HashMap<SlotKey, Arc<Slot>>>>,
}

/// This client's part of anonymous owner ids: `<host>/<pid>/<random>`, so that `status` shows
/// operators which machine and process holds a lock (where the backend stores owners).
fn client_id() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_default();
    let host: String =
        host.trim().chars().filter(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_')).take(64).collect();
    let host = if host.is_empty() { "host".to_string() } else { host };
    format!("{host}/{}/{:08x}", std::process::id(), crate::driver::identity::random_u32())
}

/// A handle to one backend with one session (lease), cheap to clone.
///
/// Every guard taken through a client is kept alive by the client's session keeper (about every
/// TTL/3). If the session is lost, every guard reports it through [`Guard::lost`], and the next
/// acquisition opens a fresh session.
///
/// ```
/// # async fn demo() -> locksmith_core::Result<()> {
/// # let backend: std::sync::Arc<dyn locksmith_core::Backend> = unimplemented!();
/// use std::time::Duration;
/// use locksmith_core::{Client, LockOptions};
/// let client = Client::new(backend, Duration::from_secs(10))?;
/// let guard = client.lock_with("nightly-report", LockOptions::new().timeout(Duration::from_secs(5))).await?;
/// println!("fencing token {}", guard.token());
/// guard.unlock().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Client {
    pub(crate) inner: Arc<Inner>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client").field("backend", &self.inner.backend.describe()).field("ttl", &self.inner.ttl).finish()
    }
}

impl Client {
    /// A client over `backend` whose session lease is `ttl` long. No I/O happens until the first
    /// acquisition.
    ///
    /// # Errors
    /// [`Error::InvalidTtl`] when `ttl` is outside the documented range.
    pub fn new(backend: Arc<dyn Backend>, ttl: Duration) -> Result<Self> {
        validate_ttl(ttl)?;
        Ok(Self {
            inner: Arc::new(Inner {
                backend,
                ttl,
                client_id: client_id(),
                next_owner: AtomicU64::new(1),
                session: tokio::sync::Mutex::new(None),
                slots: Arc::new(Mutex::new(HashMap::new())),
            }),
        })
    }

    /// A client with the default TTL of 10 s.
    ///
    /// # Errors
    /// Never for the default TTL; kept fallible for symmetry.
    pub fn with_default_ttl(backend: Arc<dyn Backend>) -> Result<Self> {
        Self::new(backend, DEFAULT_TTL)
    }

    /// The session TTL.
    pub fn ttl(&self) -> Duration {
        self.inner.ttl
    }

    /// The backend this client talks to.
    pub fn backend(&self) -> &Arc<dyn Backend> {
        &self.inner.backend
    }

    /// Waits until `name` is ours (no timeout) and returns the guard.
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the future leaves no waiter and no hold behind, and you lose your
    /// place in the queue.
    ///
    /// # Errors
    /// Invalid name, unreachable backend, or a lost session.
    pub async fn lock(&self, name: &str) -> Result<Guard> {
        self.lock_with(name, LockOptions::new()).await
    }

    /// Acquires `name` with options (timeout, owner for reentrancy, lock-delay).
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the future leaves no waiter and no hold behind.
    ///
    /// # Errors
    /// [`Error::Timeout`] when `opts.timeout` passes first; nothing is left queued.
    pub async fn lock_with(&self, name: &str, opts: LockOptions) -> Result<Guard> {
        let name = LockName::new(name)?;
        opts.validate()?;
        let timeout = opts.timeout;
        let fut = self.acquire(name, opts, true);
        let guard = match timeout {
            Some(t) => tokio::time::timeout(t, fut).await.map_err(|_| Error::Timeout)??,
            None => fut.await?,
        };
        guard.ok_or_else(|| Error::Internal("the driver answered busy to a waiting acquisition".into()))
    }

    /// Takes `name` if it is free right now; `Ok(None)` if someone else holds it. Never waits
    /// for the lock (it does one round trip).
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the future leaves no hold behind.
    ///
    /// # Errors
    /// Invalid name, unreachable backend.
    pub async fn try_lock(&self, name: &str) -> Result<Option<Guard>> {
        self.try_lock_with(name, LockOptions::new()).await
    }

    /// [`Client::try_lock`] with options.
    ///
    /// # Cancel safety
    /// Cancel safe.
    ///
    /// # Errors
    /// As [`Client::try_lock`].
    pub async fn try_lock_with(&self, name: &str, opts: LockOptions) -> Result<Option<Guard>> {
        let name = LockName::new(name)?;
        opts.validate()?;
        self.acquire(name, opts, false).await
    }

    /// Runs `critical(token)` while holding `name`, and cancels it if the lock is lost:
    /// the library twin of `locksmith run`, which kills its child on loss.
    ///
    /// Returns `Err(Error::Lost)` if the lock was lost before `critical` finished (the future was
    /// dropped at its next await point), otherwise its output. The lock is released afterwards.
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the future drops `critical` and releases the lock.
    ///
    /// # Errors
    /// As [`Client::lock_with`], or [`Error::Lost`].
    pub async fn with_lock<F, Fut, T>(&self, name: &str, opts: LockOptions, critical: F) -> Result<T>
    where
        F: FnOnce(u64) -> Fut,
        Fut: Future<Output = T>,
    {
        let guard = self.lock_with(name, opts).await?;
        let out = tokio::select! {
            out = critical(guard.token()) => Some(out),
            _ = guard.lost() => None,
        };
        match out {
            Some(out) => {
                guard.unlock().await?;
                Ok(out)
            }
            None => Err(Error::Lost(name.to_string())),
        }
    }

    /// Introspection through the backend: one lock or all.
    ///
    /// # Cancel safety
    /// Cancel safe: read only.
    ///
    /// # Errors
    /// Invalid name, unreachable backend.
    pub async fn status(&self, name: Option<&str>) -> Result<Vec<LockStatus>> {
        let name = name.map(LockName::new).transpose()?;
        self.inner.backend.status(name.as_ref()).await
    }

    /// Ends the session now: every guard is lost, every hold freed on the backend.
    ///
    /// # Cancel safety
    /// Cancel safe; the lease expires anyway.
    pub async fn close(&self) {
        let ctx = self.inner.session.lock().await.take();
        if let Some(ctx) = ctx {
            ctx.close().await;
        }
    }

    /// The current session id, opening a session if there is none.
    ///
    /// # Cancel safety
    /// Cancel safe.
    ///
    /// # Errors
    /// Unreachable backend.
    pub async fn session_id(&self) -> Result<String> {
        Ok(self.session().await?.session.id())
    }

    async fn session(&self) -> Result<Arc<SessionCtx>> {
        let mut slot = self.inner.session.lock().await;
        if let Some(ctx) = slot.as_ref() {
            if ctx.is_alive() {
                return Ok(ctx.clone());
            }
        }
        let opened_at = Instant::now();
        let session = self.inner.backend.open_session(self.inner.ttl).await?;
        // A backend that granted less than asked (a negotiated timeout) ends the session sooner:
        // the deadline and the renewals follow the shorter lease. More than asked changes
        // nothing: our promise to the caller is the TTL.
        let lease = match session.lease() {
            l if l.is_zero() => self.inner.ttl,
            l => l.min(self.inner.ttl),
        };
        // The backend started the lease no earlier than this: count from here.
        let started = session.lease_started().map_or(opened_at, |t| t.max(opened_at));
        let ctx = SessionCtx::start(session, lease, started, self.lost_holds_hook());
        *slot = Some(ctx.clone());
        Ok(ctx)
    }

    fn lost_holds_hook(&self) -> LostHolds {
        let slots = Arc::downgrade(&self.inner.slots);
        let backend = self.inner.backend.scheme();
        Arc::new(move |lost: Vec<LostHold>| {
            crate::metrics::lost(backend, lost.len() as u64);
            let Some(slots) = slots.upgrade() else { return };
            let Ok(map) = slots.lock() else { return };
            for report in lost {
                let Some(slot) = map.get(&(report.name, report.owner)) else { continue };
                if let Ok(hold) = slot.hold.try_lock() {
                    if let Some(h) = hold.as_ref().filter(|h| h.token == report.token) {
                        h.lost.send_replace(true);
                    }
                    continue;
                }
                // The slot is busy (a release or a reentrant acquisition of this very hold):
                // drivers report a lost hold once, so deliver it when the slot is free again.
                let (slot, token) = (slot.clone(), report.token);
                crate::driver::spawn_detached("lost-hold report", async move {
                    if let Some(h) = slot.hold.lock().await.as_ref().filter(|h| h.token == token) {
                        h.lost.send_replace(true);
                    }
                });
            }
        })
    }

    fn slot(&self, key: &SlotKey) -> Arc<Slot> {
        let mut map = match self.inner.slots.lock() {
            Ok(m) => m,
            Err(poisoned) => poisoned.into_inner(),
        };
        map.entry(key.clone()).or_default().clone()
    }

    /// Drops the slot from the map once nobody else references it and it holds nothing.
    pub(crate) fn forget_slot(&self, key: &SlotKey, slot: &Arc<Slot>) {
        let mut map = match self.inner.slots.lock() {
            Ok(m) => m,
            Err(poisoned) => poisoned.into_inner(),
        };
        // Every clone is taken under this mutex, so the count cannot grow while we look.
        if Arc::strong_count(slot) == 2 && matches!(slot.hold.try_lock().as_deref(), Ok(None)) {
            map.remove(key);
        }
    }

    pub(crate) async fn acquire(&self, name: LockName, opts: LockOptions, wait: bool) -> Result<Option<Guard>> {
        if !self.inner.backend.supports(opts.mode) {
            let what = match opts.mode {
                crate::HoldMode::Exclusive => "exclusive holds".to_string(),
                crate::HoldMode::Shared => "read (shared) locks".to_string(),
                crate::HoldMode::Permit(_) => "semaphores".to_string(),
            };
            return Err(Error::Unsupported(format!(
                "{} offers no {what} (see README, \"Beyond the mutex\", for what each backend offers)",
                self.inner.backend.describe()
            )));
        }
        if !opts.allow_unfenced && !self.inner.backend.provides_fencing() {
            return Err(Error::Unfenced(self.inner.backend.describe()));
        }
        let reentrant = opts.owner.is_some();
        let owner = match opts.owner {
            Some(o) => o,
            None => format!("{}-{}", self.inner.client_id, self.inner.next_owner.fetch_add(1, Ordering::Relaxed)),
        };
        let key = (name.clone(), owner.clone());
        // Forgets the slot unless a guard now owns it, also when this future is dropped
        // (a timeout or a cancelled `lock()`), so abandoned attempts leave no entry behind.
        let slot = self.slot(&key);
        let cleanup = CancelGuard::sync("engine slot", (self.clone(), key, slot), |(client, key, slot)| {
            client.forget_slot(&key, &slot);
        });
        let mut req = AcquireRequest::new(name, owner, wait);
        req.lock_delay = opts.lock_delay;
        req.mode = opts.mode;
        req.value = opts.value;
        let attempt = self.acquire_in_slot(&cleanup.state().2, req, reentrant);
        // A no-wait attempt, session opening included, must not hang on a server that stopped
        // answering (e.g. paused): after one TTL it is given up as unavailable.
        let result = if wait { attempt.await } else { self.bounded(self.inner.ttl, attempt).await };
        if matches!(result, Ok(Some(_))) {
            // The guard's hold now keeps the slot.
            drop(cleanup.disarm());
        }
        result
    }

    async fn acquire_in_slot(&self, slot: &Arc<Slot>, req: AcquireRequest, reentrant: bool) -> Result<Option<Guard>> {
        let (name, owner) = (req.name.clone(), req.owner.clone());
        let mut hold = slot.hold.lock().await;
        if let Some(h) = hold.as_mut() {
            if reentrant && h.ctx.is_alive() && !*h.lost.borrow() {
                if h.mode != req.mode {
                    return Err(Error::InvalidArgument(format!(
                        "owner {owner:?} holds {name} as {} and cannot re-enter it as {}: release it first, \
                         or acquire with another owner id",
                        h.mode, req.mode
                    )));
                }
                if h.value != req.value {
                    return Err(Error::InvalidArgument(format!(
                        "owner {owner:?} holds {name} with another value than the one asked for: a re-entry \
                         cannot change it; release it first, or acquire with another owner id"
                    )));
                }
                h.count += 1;
                return Ok(Some(Guard::new(
                    self.clone(),
                    name,
                    owner,
                    h.token,
                    h.lost.clone(),
                    h.ctx.clone(),
                    slot.clone(),
                )));
            }
            // A dead hold: forget it; the backend has freed or will free it.
            *hold = None;
        }
        // One retry after a transient failure that came fast (a connection reset while a server
        // starts or fails over). A slow one (a connect timeout) is reported at once, so an
        // unreachable backend is not waited for twice.
        let mut retries = 1;
        let (ctx, answer) = loop {
            let started = Instant::now();
            let attempt = match self.session().await {
                Ok(ctx) => {
                    let answer = ctx.session.acquire(req.clone()).await;
                    Ok((ctx, answer))
                }
                Err(e) => Err(e),
            };
            match attempt {
                Ok((_, Err(e))) | Err(e)
                    if e.is_transient()
                        && !matches!(e, Error::Timeout)
                        && retries > 0
                        && started.elapsed() < Duration::from_millis(500) =>
                {
                    retries -= 1;
                    tracing::debug!(error = %e, "transient failure; retrying once");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Ok(done) => break done,
                Err(e) => return Err(e),
            }
        };
        let token = match answer {
            Ok(Acquired::Granted { token }) => token,
            Ok(Acquired::Busy) => return Ok(None),
            Err(Error::SessionExpired) => {
                ctx.expire();
                return Err(Error::SessionExpired);
            }
            Err(e) => return Err(e),
        };
        if !ctx.is_alive() {
            // Granted on a session we already consider dead: give it back, report loss.
            let _ = self.bounded(ctx.ttl, ctx.session.release(&name, &owner, token)).await;
            return Err(Error::SessionExpired);
        }
        let lost = Arc::new(watch::channel(false).0);
        *hold = Some(Hold { token, count: 1, mode: req.mode, value: req.value, lost: lost.clone(), ctx: ctx.clone() });
        crate::metrics::grant(self.inner.backend.scheme());
        Ok(Some(Guard::new(self.clone(), name, owner, token, lost, ctx, slot.clone())))
    }

    /// Runs a backend call that must not hang on an unresponsive server: after `limit` (the TTL,
    /// after which the lease has freed anything of ours anyway) it is given up as unavailable.
    async fn bounded<T>(&self, limit: Duration, call: impl Future<Output = Result<T>>) -> Result<T> {
        tokio::time::timeout(limit, call).await.unwrap_or_else(|_| {
            Err(Error::Unavailable {
                backend: self.inner.backend.describe(),
                message: format!("no answer within {limit:?}"),
            })
        })
    }

    /// Releases one count of the hold `(name, owner, token)`; frees it on the backend at zero.
    pub(crate) async fn release(&self, name: &LockName, owner: &str, token: u64, slot: Arc<Slot>) -> Result<bool> {
        let result = {
            let mut hold = slot.hold.lock().await;
            match hold.as_mut() {
                Some(h) if h.token == token => {
                    let still_ours = h.ctx.is_alive() && !*h.lost.borrow();
                    h.count -= 1;
                    if h.count > 0 {
                        Ok(still_ours)
                    } else {
                        let ctx = h.ctx.clone();
                        h.lost.send_replace(true);
                        *hold = None;
                        if still_ours {
                            crate::metrics::release(self.inner.backend.scheme());
                            self.bounded(ctx.ttl, ctx.session.release(name, owner, token)).await
                        } else {
                            // Lost already: tidy up if the backend still has it, report not ours.
                            let _ = self.bounded(ctx.ttl, ctx.session.release(name, owner, token)).await;
                            Ok(false)
                        }
                    }
                }
                // Already gone (a newer hold, or the session was replaced).
                _ => Ok(false),
            }
        };
        self.forget_slot(&(name.clone(), owner.to_string()), &slot);
        result
    }
}
