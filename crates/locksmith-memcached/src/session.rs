//! One engine session: memcached has no session object, so a session is an id plus the holds
//! it keeps renewed; each hold is one key whose value is unique to it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use locksmith_core::driver::{new_hold_value, new_session_id, unsupported, CancelGuard, HoldTable};
use locksmith_core::{AcquireRequest, Acquired, Backoff, Error, HoldMode, KeepAlive, LockName, Result, Session};

use crate::conn::Timeouts;
use crate::expiry::expiry_secs;
use crate::server::Server;

/// Consecutive failed attempts (server unreachable) a waiting acquisition tolerates before it
/// gives up: a reconnect after a restart or one lost answer should not fail a long wait.
const MAX_WAIT_FAILURES: u32 = 3;

/// A session: an id, a TTL and the holds it keeps renewed (`(name, owner)` → value).
#[derive(Debug)]
pub(crate) struct MemcachedSession {
    id: String,
    server: Arc<Server>,
    ttl: Duration,
    secs: u64,
    timeouts: Timeouts,
    holds: HoldTable<String>,
    closed: AtomicBool,
}

impl MemcachedSession {
    pub(crate) fn new(server: Arc<Server>, ttl: Duration) -> Self {
        Self {
            id: new_session_id(),
            server,
            ttl,
            secs: expiry_secs(ttl),
            timeouts: Timeouts::for_ttl(ttl),
            holds: HoldTable::default(),
            closed: AtomicBool::new(false),
        }
    }

    /// Owner-checked delete in a spawned task, so that it completes even if the caller's future
    /// is dropped.
    async fn delete(&self, key: String, value: String) -> Result<bool> {
        let (server, t) = (self.server.clone(), self.timeouts);
        tokio::spawn(async move { server.delete(&key, &value, t).await })
            .await
            .map_err(|e| Error::Backend(format!("memcached: release task failed: {e}")))?
    }

    /// A replaced hold (lost earlier, never released): free its key in the background.
    fn delete_in_background(&self, key: String, value: String) {
        let (server, t) = (self.server.clone(), self.timeouts);
        locksmith_core::driver::spawn_detached("memcached release", async move {
            let _ = server.delete(&key, &value, t).await;
        });
    }
}

#[async_trait]
impl Session for MemcachedSession {
    fn id(&self) -> String {
        self.id.clone()
    }

    /// The TTL asked for: every key is written to live at least that long (see `expiry`).
    fn lease(&self) -> Duration {
        self.ttl
    }

    async fn keep_alive(&self) -> Result<KeepAlive> {
        if self.closed.load(Ordering::Acquire) {
            return Err(Error::SessionExpired);
        }
        let holds = self.holds.snapshot();
        let mut verdicts = Vec::with_capacity(holds.len());
        for h in holds {
            let key = self.server.key(h.name.as_str())?;
            // An error is not a verdict: the engine retries, and its local deadline (last
            // renewal sent + TTL − drift) ends the holds in time if it lasts.
            let ours = self.server.renew(&key, &h.value, self.secs, self.timeouts).await?;
            verdicts.push((h, ours));
        }
        Ok(self
            .holds
            .report(verdicts, "memcached: hold gone at renewal (expired, evicted, server restarted, or replaced)"))
    }

    async fn acquire(&self, req: AcquireRequest) -> Result<Acquired> {
        if req.mode != HoldMode::Exclusive {
            return Err(unsupported(&self.server.describe, req.mode));
        }
        let key = self.server.key(req.name.as_str())?;
        let mut backoff = Backoff::new();
        let mut failures = 0;
        loop {
            if self.closed.load(Ordering::Acquire) {
                return Err(Error::SessionExpired);
            }
            let value = new_hold_value(&self.id, &req.owner);
            // Armed before the add leaves: if this future is dropped after the server stored
            // the value but before we read the answer, the key is deleted (owner-checked).
            let state = (self.server.clone(), key.clone(), value.clone(), self.timeouts);
            let pending = CancelGuard::new("memcached add", state, |(server, key, value, t)| {
                Some(async move {
                    let _ = server.delete(&key, &value, t).await;
                })
            });
            let added = self.server.add(&key, &value, self.secs, self.timeouts).await;
            match added {
                Ok(true) => {
                    pending.disarm();
                    if let Some(old) = self.holds.insert(req.name.clone(), req.owner.clone(), 0, value) {
                        self.delete_in_background(key.clone(), old.value);
                    }
                    if self.closed.load(Ordering::Acquire) {
                        // Closed while we added: close() may have drained before our insert.
                        if let Some(h) = self.holds.take(&req.name, &req.owner) {
                            self.delete_in_background(key, h.value);
                        }
                        return Err(Error::SessionExpired);
                    }
                    return Ok(Acquired::Granted { token: 0 });
                }
                // The add was refused: nothing of ours was stored.
                Ok(false) => pending.disarm(),
                // Unknown whether it was stored: the guard deletes it if it was.
                Err(e) => {
                    pending.fire();
                    failures += 1;
                    if !req.wait || failures >= MAX_WAIT_FAILURES || !matches!(e, Error::Unavailable { .. }) {
                        return Err(e);
                    }
                    tracing::debug!(lock = %req.name, error = %e, "memcached: attempt failed; still waiting");
                    tokio::time::sleep(backoff.delay(None)).await;
                    continue;
                }
            };
            failures = 0;
            if !req.wait {
                return Ok(Acquired::Busy);
            }
            // memcached tells nobody of a delete or an expiry: waiters poll.
            tokio::time::sleep(backoff.delay(None)).await;
            locksmith_core::metrics::wakeup("memcached");
        }
    }

    async fn release(&self, name: &LockName, owner: &str, _token: u64) -> Result<bool> {
        // Forget first, so the keeper stops renewing before the key goes.
        let Some(hold) = self.holds.take(name, owner) else { return Ok(false) };
        self.delete(self.server.key(name.as_str())?, hold.value).await
    }

    async fn close(&self) -> Result<()> {
        self.closed.store(true, Ordering::Release);
        for hold in self.holds.drain() {
            let Ok(key) = self.server.key(hold.name.as_str()) else { continue };
            if let Err(e) = self.delete(key, hold.value).await {
                tracing::debug!(error = %e, "memcached: release on close failed; the key expires after the TTL");
            }
        }
        Ok(())
    }
}
