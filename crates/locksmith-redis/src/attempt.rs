//! One Redis acquisition as the toolkit's [`WaitLoop`](locksmith_core::driver::WaitLoop) runs
//! it: one script call per attempt, woken by the waiter's own channel (queued kinds) or by
//! Redisson's channel (reentrant mode, or a Java holder in the way).

use std::time::Duration;

use locksmith_core::driver::{Attempt, Busy, CancelGuard, Try};
use locksmith_core::{AcquireRequest, Result};

use crate::layout::Kind;
use crate::pending::Pending;
use crate::router::Registration;
use crate::scripts;
use crate::session::RedisSession;

/// How often a queued plain waiter that is not next in line refreshes its queue entry (which
/// also checks the lock): well inside `QUEUE_LIFETIME` even with ±20 % jitter.
const QUEUE_REFRESH: Duration = Duration::from_secs(1);

/// The state of one acquisition between its attempts.
pub(crate) struct RedisAttempt<'a> {
    pub(crate) session: &'a RedisSession,
    pub(crate) req: &'a AcquireRequest,
    pub(crate) kind: Kind,
    pub(crate) key: String,
    /// The session entry, guarded until granted (then taken out and disarmed).
    pub(crate) pending: Option<CancelGuard<Pending>>,
    pub(crate) redisson_channel: Option<String>,
    /// Redisson's channel of the lock, once subscribed.
    pub(crate) redisson: Option<Registration>,
    /// The waiter's own channel, once it queues.
    pub(crate) own: Option<Registration>,
}

/// Resolves when `reg` is woken; never without one. Cancel safe: a wake-up that arrives later
/// is kept for the next call.
async fn notified(reg: Option<&Registration>) {
    match reg {
        Some(r) => r.notified().await,
        None => std::future::pending().await,
    }
}

impl Attempt for RedisAttempt<'_> {
    async fn try_once(&mut self) -> Result<Try> {
        let Some(pending) = self.pending.as_mut() else {
            return Err(locksmith_core::Error::Internal("redis: an attempt after the grant".into()));
        };
        pending.state_mut().in_flight = true;
        let entry = pending.state().entry.clone();
        let (shared, ttl_ms) = (&self.session.shared, self.session.ttl_ms);
        let attempt = shared.try_acquire(&entry, ttl_ms, entry.waiter.get().map(String::as_str)).await?;
        pending.state_mut().in_flight = matches!(attempt, scripts::Attempt::Granted(_));
        let busy = match attempt {
            scripts::Attempt::Granted(token) => {
                // The entry now belongs to the session; its op lock is freed here.
                if let Some(p) = self.pending.take() {
                    let p = p.disarm();
                    self.session.holds.grant(&self.req.name, &self.req.owner, p.id, token);
                }
                return Ok(Try::Granted(token));
            }
            scripts::Attempt::Busy(busy) => busy,
            refused => return Err(self.session.refusal(&entry, refused)),
        };
        if !self.req.wait {
            return Ok(Try::Busy(Busy::default()));
        }
        if let (true, None, Some(channel)) = (busy.foreign, &self.redisson, &self.redisson_channel) {
            self.redisson = Some(shared.router.register(channel).await);
            return Ok(Try::Busy(Busy::again_now()));
        }
        if self.kind.queued() && self.own.is_none() {
            // First busy attempt: subscribe first, so that no wake-up is missed, then join the
            // queue with the next attempt (not a wake-up: nothing woke us).
            let id = format!("{:016x}", locksmith_core::driver::identity::random_u64());
            let channel = shared.layout.queue(&self.key).wake_channel(&id);
            self.own = Some(shared.router.register(&channel).await);
            let _ = entry.waiter.set(id);
            return Ok(Try::Busy(Busy::again_now()));
        }
        // The next in line (and every reentrant waiter) retries on the fallback timer; a
        // waiter further back only refreshes its entry then, which is not a wake-up.
        Ok(Try::Busy(match busy.rank <= 0 {
            true => Busy::left(busy.left()),
            false => Busy::refresh_after(QUEUE_REFRESH.mul_f64(rand::random_range(0.8..1.2))),
        }))
    }

    async fn woken(&mut self) {
        // No backoff restart: on Redisson's channel every waiter of a process hears a release
        // and all but one find the lock taken again; the next release wakes them anew.
        tokio::select! {
            () = notified(self.own.as_ref()) => {}
            () = notified(self.redisson.as_ref()) => {}
        }
    }

    async fn after_wait(&mut self) {
        for reg in [self.own.as_ref(), self.redisson.as_ref()].into_iter().flatten() {
            reg.refresh().await;
        }
    }

    async fn recover(&mut self) {
        // The lost reply may have been a grant: give it back before trying again, so a retry
        // never finds (and counts) its own hold.
        let Some(pending) = self.pending.as_mut() else { return };
        let entry = pending.state().entry.clone();
        if self.session.shared.release(&entry, self.session.ttl_ms).await.is_ok() {
            pending.state_mut().in_flight = false;
        }
    }
}
