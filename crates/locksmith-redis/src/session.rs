//! A session: Redis has no server-side session, so a session is an id (the Redisson client
//! uuid) plus the holds it renews. Each key carries its own `PX` TTL; the engine's keep-alive
//! renews every hold owner-checked.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use locksmith_core::driver::millis;
use locksmith_core::driver::WaitLoop;
use locksmith_core::{
    AcquireRequest, Acquired, ConflictKind, Error, KeepAlive, LockName, ModeConflict, Result, Session,
};

use crate::attempt::RedisAttempt;
use crate::holds::{Entry, Holds};
use crate::layout::{random_uuid, Kind};
use crate::pending::Pending;
use crate::scripts::Attempt;
use crate::shared::Shared;
use locksmith_core::driver::CancelGuard;

/// One session on a Redis backend.
pub(crate) struct RedisSession {
    pub(crate) shared: Arc<Shared>,
    id: String,
    pub(crate) ttl_ms: u64,
    pub(crate) holds: Arc<Holds>,
    closed: AtomicBool,
}

impl RedisSession {
    pub(crate) fn new(shared: Arc<Shared>, ttl: Duration) -> Self {
        let ttl_ms = millis(ttl);
        Self { shared, id: random_uuid(), ttl_ms, holds: Arc::default(), closed: AtomicBool::new(false) }
    }

    /// Creates the session entry for `key` (after any cleanup of an earlier attempt of the same
    /// `(lock, owner)` has finished) and returns it guarded.
    async fn begin(&self, name: &LockName, owner: &str, kind: Kind) -> Result<CancelGuard<Pending>> {
        loop {
            let key = self.shared.layout.key(name.as_str());
            let ident = self.shared.layout.ident(kind, &self.id, owner);
            let record = format!("{}:{owner}", self.id);
            let entry = Arc::new(Entry::new(name.clone(), kind, key, ident, record));
            let op = entry
                .op
                .clone()
                .try_lock_owned()
                .map_err(|_| Error::Internal("redis: a fresh hold entry was locked".into()))?;
            match self.holds.insert_pending(name.clone(), owner.to_string(), entry.clone()) {
                Ok(id) => {
                    return Ok(Pending {
                        shared: self.shared.clone(),
                        holds: self.holds.clone(),
                        id,
                        entry,
                        owner: owner.to_string(),
                        _op: op,
                        ttl_ms: self.ttl_ms,
                        in_flight: false,
                    }
                    .guard());
                }
                Err(existing) => {
                    // Wait for a cleanup still running; a granted entry left behind (the engine
                    // dropped a hold it considered dead) is freed before starting afresh.
                    let _op = existing.value.op.clone().lock_owned().await;
                    if self.holds.remove(name, owner, existing.id) && existing.granted {
                        self.shared.release(&existing.value, self.ttl_ms).await?;
                    }
                }
            }
        }
    }

    fn wrong_type(key: &str, ty: &str) -> Error {
        Error::Backend(format!("redis: key {key:?} holds a {ty}, not a lock"))
    }

    /// The error for an attempt that was refused outright (anything but granted or busy).
    pub(crate) fn refusal(&self, entry: &Entry, attempt: Attempt) -> Error {
        let key = entry.key.as_str();
        match attempt {
            Attempt::WrongType(ty) => Self::wrong_type(key, &ty),
            Attempt::WrongTypeAt(other, ty) => {
                Error::Backend(format!("redis: key {other:?} (of semaphore {key:?}) holds a {ty}, not a timeout set"))
            }
            // The script caught the INCR's error: an ACL user without INCR is refused there.
            Attempt::BadFence(e) if crate::connect::permission_refused(&e) => Error::Auth {
                backend: self.shared.conn.describe().to_string(),
                message: format!("NOPERM {e} (the acquire script INCRs the fencing counter)"),
            },
            Attempt::BadFence(e) => {
                let fence = self.shared.layout.counter(entry.kind, key);
                Error::Backend(format!("redis: fencing counter {fence:?} is unusable: {e}"))
            }
            // The Lua scripts decide atomically (their own copy of the mode rules); the
            // refusal's words are the core's, as on every backend.
            Attempt::InUse(what) if what == "semaphore" => {
                let why = ConflictKind::SemaphoreAsLock { permits: None };
                let seen =
                    format!("Redisson RPermitExpirableSemaphore key {key:?}; a name used as a semaphore stays one");
                ModeConflict::new(entry.name.as_str(), why).seen_at(seen).into()
            }
            Attempt::InUse(_) => {
                let asked = match entry.kind {
                    Kind::Permit(n) => n,
                    _ => 0,
                };
                let why = ConflictKind::LockAsSemaphore { asked };
                ModeConflict::new(entry.name.as_str(), why).seen_at(format!("key {key:?}")).into()
            }
            Attempt::Permits(total) => {
                let asked = match entry.kind {
                    Kind::Permit(n) => n,
                    _ => 0,
                };
                let why = ConflictKind::OtherPermits { permits: u32::try_from(total).ok(), asked };
                let seen = format!("key {key:?}; fixed by its first user, as Redisson's trySetPermits");
                ModeConflict::new(entry.name.as_str(), why).seen_at(seen).into()
            }
            Attempt::Granted(_) | Attempt::Busy(_) => {
                Error::Internal("redis: a grant or busy answer taken for a refusal".into())
            }
        }
    }
}

#[async_trait]
impl Session for RedisSession {
    fn id(&self) -> String {
        self.id.clone()
    }

    /// Each key's PX is the TTL, in milliseconds.
    fn lease(&self) -> Duration {
        Duration::from_millis(self.ttl_ms)
    }

    /// Renews every hold of this session in one script; reports holds found gone or taken.
    ///
    /// # Cancel safety
    /// Cancel safe.
    async fn keep_alive(&self) -> Result<KeepAlive> {
        // Pending entries are renewed too (a grant whose answer comes after this renewal is
        // covered by it), but never reported lost; a hold released meanwhile is not reported.
        let snapshot = self.holds.snapshot();
        if snapshot.is_empty() {
            self.shared.ping().await?;
            return Ok(KeepAlive::default());
        }
        let entries: Vec<&Entry> = snapshot.iter().map(|h| h.value.as_ref()).collect();
        let renewed = self.shared.renew(&entries, self.ttl_ms).await?;
        Ok(self.holds.report(snapshot.into_iter().zip(renewed), "hold found gone or taken on renewal"))
    }

    /// Acquires; a busy lock is waited for. Every kind but Redisson's `RLock` (reentrant mode)
    /// queues: after the first busy attempt the waiter subscribes to its own wake-up channel,
    /// then joins the lock's FIFO waiter queue; a release wakes only the waiters it admits. A
    /// read/write or semaphore waiter blocked by a Java holder also subscribes to Redisson's
    /// release channel (and tries again before it waits), so that holder's release wakes it. The next in
    /// line also retries on a fallback timer (the holder's TTL capped by a jittered backoff); the
    /// others refresh their entry about every second. Reentrant mode waits on Redisson's channel
    /// with the same fallback timer.
    ///
    /// # Cancel safety
    /// Cancel safe: the waiter's subscriptions are dropped; its queue entry is removed, and an
    /// attempt whose reply was never seen is released (owner-checked), in the background.
    async fn acquire(&self, req: AcquireRequest) -> Result<Acquired> {
        if self.closed.load(Ordering::SeqCst) {
            return Err(Error::SessionExpired);
        }
        if req.lock_delay.is_some() {
            return Err(Error::InvalidArgument("the redis backend does not support lock-delay".into()));
        }
        let Some(kind) = self.shared.layout.kind(req.mode) else {
            // The common refusal, plus how to get read locks from this driver.
            let refusal = locksmith_core::driver::unsupported(self.shared.conn.describe(), req.mode);
            return Err(Error::Unsupported(format!("{refusal} (read locks need ?mode=rwlock)")));
        };
        self.shared.layout.check_name(req.name.as_str())?;
        let pending = self.begin(&req.name, &req.owner, kind).await?;
        let key = pending.state().entry.key.clone();
        let redisson_channel = self.shared.layout.redisson_channel(kind, &key);
        // Redisson's channel, shared by every waiter of the lock. Reentrant mode subscribes
        // before the first try, so no release is missed. Queued kinds are woken by their own
        // channel (one message per admitted waiter, no herd) and subscribe to Redisson's only
        // once a Java holder blocks them (whose release is announced there alone), then try
        // again before waiting, so that release is not missed either.
        let redisson = match (req.wait && !kind.queued(), &redisson_channel) {
            (true, Some(channel)) => Some(self.shared.router.register(channel).await),
            _ => None,
        };
        let mut attempt = RedisAttempt {
            session: self,
            req: &req,
            kind,
            key,
            pending: Some(pending),
            redisson_channel,
            redisson,
            own: None,
        };
        WaitLoop::new("redis", req.wait).run(&mut attempt).await
    }

    /// Owner-checked release; renewal of the hold stops before the release is sent.
    ///
    /// # Cancel safety
    /// Cancel safe; the release may or may not have happened, the key's TTL is the backstop.
    async fn release(&self, name: &LockName, owner: &str, token: u64) -> Result<bool> {
        let Some(h) = self.holds.get(name, owner) else { return Ok(false) };
        if !h.granted || h.token != token || !self.holds.remove(name, owner, h.id) {
            return Ok(false);
        }
        self.shared.release(&h.value, self.ttl_ms).await
    }

    /// Releases every hold of the session, and takes acquisitions still pending out of their
    /// waiter queues (their own cleanup may not get to run before the process ends).
    ///
    /// # Cancel safety
    /// Cancel safe; holds not released expire after the TTL, queue entries go stale.
    async fn close(&self) -> Result<()> {
        self.closed.store(true, Ordering::SeqCst);
        let holds = self.holds.drain();
        let results = futures_util::future::join_all(holds.iter().map(|h| async move {
            let e = &h.value;
            self.shared.release(e, self.ttl_ms).await?;
            match (h.granted, e.waiter.get()) {
                (false, Some(waiter)) => self.shared.leave(e, waiter).await,
                _ => Ok(()),
            }
        }))
        .await;
        results.into_iter().find_map(std::result::Result::err).map_or(Ok(()), Err)
    }
}
