//! A session: Redis has no server-side session, so a session is an id (the Redisson client
//! uuid) plus the holds it renews. Each key carries its own `PX` TTL; the engine's keep-alive
//! renews every hold owner-checked.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use locksmith_core::driver::millis;
use locksmith_core::{AcquireRequest, Acquired, Backoff, Error, KeepAlive, LockName, Result, Session};

use crate::holds::{Entry, Holds};
use crate::layout::{random_uuid, Kind};
use crate::pending::Pending;
use crate::router::Registration;
use crate::scripts::Attempt;
use crate::shared::Shared;
use locksmith_core::driver::CancelGuard;

/// Consecutive connection failures a waiting acquisition tolerates before giving up.
const MAX_WAIT_FAILURES: u32 = 3;

/// How often a queued plain waiter that is not next in line refreshes its queue entry (which
/// also checks the lock): well inside `QUEUE_LIFETIME` even with ±20 % jitter.
const QUEUE_REFRESH: Duration = Duration::from_secs(1);

/// One session on a Redis backend.
pub(crate) struct RedisSession {
    shared: Arc<Shared>,
    id: String,
    ttl_ms: u64,
    holds: Arc<Holds>,
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
    fn refusal(&self, entry: &Entry, attempt: Attempt) -> Error {
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
            Attempt::InUse(what) if what == "semaphore" => Error::InvalidArgument(format!(
                "redis: {:?} is a semaphore (Redisson RPermitExpirableSemaphore at key {key:?}; a name used as a \
                 semaphore stays one), not a lock: ask for a permit of it",
                entry.name.as_str()
            )),
            Attempt::InUse(_) => Error::InvalidArgument(format!(
                "redis: {:?} is in use as a lock (key {key:?}), not a semaphore",
                entry.name.as_str()
            )),
            Attempt::Permits(total) => {
                let asked = match entry.kind {
                    Kind::Permit(n) => n.to_string(),
                    _ => "?".to_string(),
                };
                Error::InvalidArgument(format!(
                    "redis: semaphore {:?} has {total} permits (fixed by its first user, as Redisson's trySetPermits; \
                     available + leased); asked for one of {asked}",
                    entry.name.as_str()
                ))
            }
            Attempt::Granted(_) | Attempt::Busy(_) => {
                Error::Internal("redis: a grant or busy answer taken for a refusal".into())
            }
        }
    }
}

/// Resolves when `reg` is woken; never without one.
///
/// # Cancel safety
/// Cancel safe: a wake-up that arrives later is kept for the next call.
async fn notified(reg: Option<&Registration>) {
    match reg {
        Some(r) => r.notified().await,
        None => std::future::pending().await,
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
        let mut pending = self.begin(&req.name, &req.owner, kind).await?;
        let key = pending.state().entry.key.clone();
        let redisson_channel = self.shared.layout.redisson_channel(kind, &key);
        // Redisson's channel, shared by every waiter of the lock. Reentrant mode subscribes
        // before the first try, so no release is missed. Queued kinds are woken by their own
        // channel (one message per admitted waiter, no herd) and subscribe to Redisson's only
        // once a Java holder blocks them (whose release is announced there alone), then try
        // again before waiting, so that release is not missed either.
        let mut redisson = match (req.wait && !kind.queued(), &redisson_channel) {
            (true, Some(channel)) => Some(self.shared.router.register(channel).await),
            _ => None,
        };
        // The waiter's own channel, once it queues.
        let mut own: Option<Registration> = None;
        let mut backoff = Backoff::new();
        let mut failures = 0;
        loop {
            pending.state_mut().in_flight = true;
            let entry = pending.state().entry.clone();
            let attempt =
                match self.shared.try_acquire(&entry, self.ttl_ms, entry.waiter.get().map(String::as_str)).await {
                    Ok(a) => a,
                    // A waiter rides out a short blip (a dropped connection is re-opened on the next
                    // call); a no-wait attempt or a lasting outage reports it.
                    Err(e) if req.wait && e.is_transient() && failures < MAX_WAIT_FAILURES => {
                        failures += 1;
                        tokio::time::sleep(backoff.delay(None)).await;
                        // The lost reply may have been a grant: give it back before trying again,
                        // so a retry never finds (and counts) its own hold.
                        if self.shared.release(&entry, self.ttl_ms).await.is_ok() {
                            pending.state_mut().in_flight = false;
                        }
                        continue;
                    }
                    Err(e) => return Err(e),
                };
            failures = 0;
            pending.state_mut().in_flight = matches!(attempt, Attempt::Granted(_));
            let busy = match attempt {
                Attempt::Granted(token) => {
                    // The entry now belongs to the session; its op lock is freed here.
                    let p = pending.disarm();
                    self.holds.grant(&req.name, &req.owner, p.id, token);
                    return Ok(Acquired::Granted { token });
                }
                Attempt::Busy(busy) => busy,
                refused => return Err(self.refusal(&entry, refused)),
            };
            if !req.wait {
                return Ok(Acquired::Busy);
            }
            if let (true, None, Some(channel)) = (busy.foreign, &redisson, &redisson_channel) {
                redisson = Some(self.shared.router.register(channel).await);
                continue;
            }
            if kind.queued() && own.is_none() {
                // First busy attempt: subscribe first, so that no wake-up is missed, then join the
                // queue with the next attempt (not a wake-up: nothing woke us).
                let id = format!("{:016x}", locksmith_core::driver::identity::random_u64());
                let channel = self.shared.layout.queue(&key).wake_channel(&id);
                own = Some(self.shared.router.register(&channel).await);
                let _ = entry.waiter.set(id);
                continue;
            }
            // The next in line (and every reentrant waiter) retries on the fallback timer; a
            // waiter further back only refreshes its entry then, which is not a wake-up.
            let next_in_line = busy.rank <= 0;
            let timer = match next_in_line {
                true => backoff.delay(busy.left()),
                false => QUEUE_REFRESH.mul_f64(rand::random_range(0.8..1.2)),
            };
            let woken = tokio::select! {
                // No backoff restart: on Redisson's channel every waiter of a process hears a
                // release and all but one find the lock taken again; the next release wakes them
                // anew.
                _ = notified(own.as_ref()) => true,
                _ = notified(redisson.as_ref()) => true,
                _ = tokio::time::sleep(timer) => next_in_line,
            };
            if woken {
                locksmith_core::metrics::wakeup("redis");
            }
            for reg in [own.as_ref(), redisson.as_ref()].into_iter().flatten() {
                reg.refresh().await;
            }
        }
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
