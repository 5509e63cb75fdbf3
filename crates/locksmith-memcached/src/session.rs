//! One engine session: memcached has no session object, so a session is an id plus the holds
//! it keeps renewed; each hold is one key whose value is unique to it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use locksmith_core::driver::{
    new_hold_value, new_session_id, run_to_end, unsupported, Attempt, Busy, CancelGuard, HoldTable, Try, WaitLoop,
};
use locksmith_core::{AcquireRequest, Acquired, Error, HoldMode, KeepAlive, LockName, Result, Session};

use crate::conn::Timeouts;
use crate::expiry::expiry_secs;
use crate::server::Server;

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
        run_to_end("memcached release", async move { server.delete(&key, &value, t).await }).await?
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

    /// `true`: every connect and command has its limit (a third of the TTL), and one that ran
    /// out closes the connection, so the next call connects afresh.
    fn bounds_its_calls(&self) -> bool {
        true
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
        WaitLoop::new("memcached", req.wait).run(&mut Add { session: self, req: &req, key }).await
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

/// One acquisition: memcached tells nobody of a delete or an expiry, so a waiter polls with
/// one owner-valued add per attempt. A waiter rides out a few failed attempts (a reconnect
/// after a restart, one lost answer): the loop's blip rule.
struct Add<'a> {
    session: &'a MemcachedSession,
    req: &'a AcquireRequest,
    key: String,
}

impl Attempt for Add<'_> {
    async fn try_once(&mut self) -> Result<Try> {
        let (session, req, key) = (self.session, self.req, &self.key);
        if session.closed.load(Ordering::Acquire) {
            return Err(Error::SessionExpired);
        }
        let value = new_hold_value(&session.id, &req.owner);
        // Armed before the add leaves: if this future is dropped after the server stored the
        // value but before we read the answer, or the answer is an error (unknown whether it
        // was stored), the key is deleted (owner-checked).
        let state = (session.server.clone(), key.clone(), value.clone(), session.timeouts);
        let pending = CancelGuard::new("memcached add", state, |(server, key, value, t)| {
            Some(async move {
                let _ = server.delete(&key, &value, t).await;
            })
        });
        if !session.server.add(key, &value, session.secs, session.timeouts).await? {
            // The add was refused: nothing of ours was stored.
            pending.disarm();
            return Ok(Try::Busy(Busy::default()));
        }
        pending.disarm();
        if let Some(old) = session.holds.insert(req.name.clone(), req.owner.clone(), 0, value) {
            session.delete_in_background(key.clone(), old.value);
        }
        if session.closed.load(Ordering::Acquire) {
            // Closed while we added: close() may have drained before our insert.
            if let Some(h) = session.holds.take(&req.name, &req.owner) {
                session.delete_in_background(key.clone(), h.value);
            }
            return Err(Error::SessionExpired);
        }
        Ok(Try::Granted(0))
    }
}
