//! A session kept alive, and its liveness as a local deadline.
//!
//! The deadline is `time the last successful keep-alive was *sent* + TTL − drift`. The server
//! measures from when it *received* that keep-alive, which is later, so the server cannot hand a
//! lock to someone else before this side has stopped believing it holds it (DESIGN.md §2.5).
//! Once the deadline has passed the session is dead for good: a late success never revives it,
//! because the server may already have granted the lock elsewhere.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::backend::Session;
use crate::driver::drift;
use crate::Error;

/// Liveness of one session as this process knows it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Liveness {
    /// Holds are safe until this instant.
    pub(crate) deadline: Instant,
    /// Definitely gone (deadline passed, server said so, or closed).
    pub(crate) expired: bool,
}

impl Liveness {
    pub(crate) fn alive_at(&self, now: Instant) -> bool {
        !self.expired && now < self.deadline
    }
}

/// An open session plus the task that keeps it alive; aborting the task on drop ties the
/// background work to the handle.
pub(crate) struct SessionCtx {
    pub(crate) session: Arc<dyn Session>,
    pub(crate) ttl: Duration,
    pub(crate) liveness: watch::Sender<Liveness>,
    keeper: std::sync::Mutex<Option<JoinHandle<()>>>,
}

impl std::fmt::Debug for SessionCtx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionCtx").field("id", &self.session.id()).field("ttl", &self.ttl).finish()
    }
}

/// Called with holds a keep-alive found gone.
pub(crate) type LostHolds = Arc<dyn Fn(Vec<crate::LostHold>) + Send + Sync>;

impl SessionCtx {
    /// Wraps a session opened at `opened_at` and starts its keeper.
    pub(crate) fn start(session: Box<dyn Session>, ttl: Duration, opened_at: Instant, on_lost: LostHolds) -> Arc<Self> {
        let (liveness, _) = watch::channel(Liveness { deadline: opened_at + ttl - drift(ttl), expired: false });
        let ctx = Arc::new(Self { session: Arc::from(session), ttl, liveness, keeper: std::sync::Mutex::new(None) });
        let task = tokio::spawn(keep_alive_loop(Arc::downgrade(&ctx), on_lost));
        if let Ok(mut slot) = ctx.keeper.lock() {
            *slot = Some(task);
        }
        ctx
    }

    pub(crate) fn is_alive(&self) -> bool {
        self.liveness.borrow().alive_at(Instant::now())
    }

    /// Safe time left.
    pub(crate) fn remaining(&self) -> Duration {
        let l = *self.liveness.borrow();
        if l.expired {
            return Duration::ZERO;
        }
        l.deadline.saturating_duration_since(Instant::now())
    }

    /// The local deadline (kept after expiry: then it tells when safety ended).
    pub(crate) fn deadline(&self) -> Instant {
        self.liveness.borrow().deadline
    }

    pub(crate) fn expire(&self) {
        self.liveness.send_modify(|l| l.expired = true);
    }

    /// Resolves when the session is dead (deadline passed or declared expired).
    pub(crate) async fn dead(&self) {
        let mut rx = self.liveness.subscribe();
        loop {
            let l = *rx.borrow_and_update();
            if !l.alive_at(Instant::now()) {
                return;
            }
            tokio::select! {
                _ = tokio::time::sleep_until(l.deadline) => {}
                changed = rx.changed() => if changed.is_err() { return },
            }
        }
    }

    /// Stops the keeper and closes the session on the backend.
    pub(crate) async fn close(&self) {
        self.stop_keeper();
        self.expire();
        let session = self.session.clone();
        let _ = tokio::time::timeout(self.ttl, session.close()).await;
    }

    fn stop_keeper(&self) {
        if let Ok(mut slot) = self.keeper.lock() {
            if let Some(task) = slot.take() {
                task.abort();
            }
        }
    }
}

impl Drop for SessionCtx {
    fn drop(&mut self) {
        self.stop_keeper();
        // Free the holds now rather than after the TTL; needs a runtime to run on.
        let session = self.session.clone();
        let ttl = self.ttl;
        crate::driver::spawn_detached("close of a dropped session", async move {
            let _ = tokio::time::timeout(ttl, session.close()).await;
        });
    }
}

async fn keep_alive_loop(ctx: std::sync::Weak<SessionCtx>, on_lost: LostHolds) {
    let Some(first) = ctx.upgrade() else { return };
    let ttl = first.ttl;
    let period = ttl / 3;
    // After a failure retry sooner, but never in a tight loop.
    let retry = (ttl / 10).max(Duration::from_millis(10));
    let mut next = Instant::now() + period;
    drop(first);
    loop {
        tokio::time::sleep_until(next).await;
        let Some(ctx) = ctx.upgrade() else { return };
        if ctx.liveness.borrow().expired {
            return;
        }
        let sent = Instant::now();
        // An answer counts until the deadline; a driver that bounds its own calls is given
        // until then (see `Session::bounds_its_calls`), any other a third of the TTL.
        let budget = match ctx.session.bounds_its_calls() {
            true => ctx.deadline().saturating_duration_since(sent).max(period),
            false => period,
        };
        let answer = tokio::time::timeout(budget, ctx.session.keep_alive()).await;
        match answer {
            Ok(Ok(outcome)) => {
                let deadline = sent + ttl - drift(ttl);
                ctx.liveness.send_if_modified(|l| {
                    if !l.alive_at(Instant::now()) {
                        // Too late: the deadline already passed; being lost is final.
                        l.expired = true;
                        return true;
                    }
                    if deadline > l.deadline {
                        l.deadline = deadline;
                        return true;
                    }
                    false
                });
                if !outcome.lost.is_empty() {
                    on_lost(outcome.lost);
                }
                next = sent + period;
            }
            Ok(Err(Error::SessionExpired)) => {
                tracing::warn!(session = %ctx.session.id(), "session expired on the backend");
                crate::metrics::session_lost();
                ctx.expire();
                return;
            }
            Ok(Err(e)) => {
                tracing::debug!(session = %ctx.session.id(), error = %e, "keep-alive failed; retrying");
                next = Instant::now() + retry;
            }
            Err(_) => {
                tracing::debug!(session = %ctx.session.id(), "keep-alive timed out; retrying");
                next = Instant::now() + retry;
            }
        }
        if !ctx.is_alive() {
            tracing::warn!(session = %ctx.session.id(), "session deadline passed without a renewal");
            crate::metrics::session_lost();
            ctx.expire();
            return;
        }
    }
}
