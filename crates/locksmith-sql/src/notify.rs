//! PostgreSQL wake-ups: a release runs `pg_notify('locksmith', name)`; one listener connection
//! per backend (sqlx's `PgListener`, `LISTEN locksmith`) wakes one local waiter of that lock.
//! Waiters keep a fallback timer, so a lost notification (listener reconnecting, a foreign
//! client deleting rows) only delays them.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use sqlx::postgres::{PgListener, PgPool};
use tokio::sync::Notify;

/// The notification channel.
pub(crate) const CHANNEL: &str = "locksmith";

/// Local waiters by lock name, and the listener task's lifecycle.
#[derive(Debug, Default)]
pub(crate) struct Wakeups {
    waiters: Mutex<HashMap<String, (Arc<Notify>, usize)>>,
    started: AtomicBool,
    /// Fired when the backend is dropped: the listener task ends and frees its connection.
    shutdown: Arc<Notify>,
}

impl Wakeups {
    fn waiters(&self) -> MutexGuard<'_, HashMap<String, (Arc<Notify>, usize)>> {
        self.waiters.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Starts the listener task (once per backend).
    pub(crate) fn start(self: &Arc<Self>, pool: &PgPool) {
        if self.started.swap(true, Ordering::SeqCst) {
            return;
        }
        let (weak, pool, shutdown) = (Arc::downgrade(self), pool.clone(), self.shutdown.clone());
        tokio::spawn(async move {
            loop {
                let listener = async {
                    let mut l = PgListener::connect_with(&pool).await?;
                    l.listen(CHANNEL).await?;
                    Ok::<_, sqlx::Error>(l)
                };
                let mut l = tokio::select! {
                    r = listener => match r {
                        Ok(l) => l,
                        Err(e) => {
                            tracing::debug!(error = %e, "postgres: LISTEN failed; waiters fall back to polling");
                            tokio::select! {
                                _ = tokio::time::sleep(Duration::from_secs(1)) => continue,
                                _ = shutdown.notified() => return,
                            }
                        }
                    },
                    _ = shutdown.notified() => return,
                };
                loop {
                    tokio::select! {
                        r = l.recv() => match r {
                            Ok(n) => match weak.upgrade() {
                                Some(w) => w.wake(n.payload()),
                                None => return,
                            },
                            Err(e) => {
                                tracing::debug!(error = %e, "postgres: listener connection lost");
                                break;
                            }
                        },
                        _ = shutdown.notified() => return,
                    }
                }
            }
        });
    }

    fn wake(&self, name: &str) {
        if let Some((n, _)) = self.waiters().get(name) {
            n.notify_one();
        }
    }

    /// Registers a waiter for `name` (before its first attempt, so no release is missed).
    pub(crate) fn register(self: &Arc<Self>, name: &str) -> Registration {
        let notify = {
            let mut w = self.waiters();
            let e = w.entry(name.to_string()).or_insert_with(|| (Arc::new(Notify::new()), 0));
            e.1 += 1;
            e.0.clone()
        };
        Registration { wakeups: self.clone(), name: name.to_string(), notify }
    }
}

impl Drop for Wakeups {
    fn drop(&mut self) {
        self.shutdown.notify_one();
    }
}

/// One waiter's registration; unregisters on drop.
#[derive(Debug)]
pub(crate) struct Registration {
    wakeups: Arc<Wakeups>,
    name: String,
    notify: Arc<Notify>,
}

impl Registration {
    /// Resolves when a release of the lock was announced.
    pub(crate) async fn notified(&self) {
        self.notify.notified().await;
    }

    /// Wakes the next local waiter of the lock. A notification wakes one waiter per process;
    /// a reader or permit holder that got in passes it on, since a release may admit several
    /// of them (the next one tries, and passes it on only if it gets in too).
    pub(crate) fn pass_on(&self) {
        self.notify.notify_one();
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        let mut w = self.wakeups.waiters();
        if let Some(e) = w.get_mut(&self.name) {
            e.1 = e.1.saturating_sub(1);
            if e.1 == 0 {
                w.remove(&self.name);
            }
        }
    }
}
