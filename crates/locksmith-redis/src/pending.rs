//! Cancel safety of an acquisition: a guard that owns the session entry while the acquire runs.
//! If the acquire future is dropped after a script was sent whose reply was never seen, the
//! grant may have happened; the guard then releases it (owner-checked, so it can only ever free
//! this attempt's own hold) in a background task. A plain-mode waiter also leaves the waiter
//! queue there (best effort: an entry left behind goes stale by itself).

use std::sync::Arc;

use tokio::sync::OwnedMutexGuard;

use crate::holds::{Entry, HoldKey, Holds};
use crate::shared::Shared;

/// The session entry of one acquisition in progress.
pub(crate) struct Pending {
    pub(crate) shared: Arc<Shared>,
    pub(crate) holds: Arc<Holds>,
    pub(crate) key: HoldKey,
    pub(crate) entry: Arc<Entry>,
    /// The entry's op lock, held until the acquisition ends or its cleanup has finished.
    pub(crate) op: Option<OwnedMutexGuard<()>>,
    pub(crate) ttl_ms: u64,
    /// A script was sent and its answer not yet seen: the hold may exist in Redis.
    pub(crate) in_flight: bool,
    /// False once granted: the entry then belongs to the session.
    pub(crate) armed: bool,
}

impl Pending {
    /// The acquisition succeeded: keep the entry.
    pub(crate) fn granted(mut self, token: u64) {
        self.entry.grant(token);
        self.armed = false;
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let queued = self.entry.waiter.get().is_some();
        if !self.in_flight && !queued {
            // Nothing of ours can be in Redis: forget the entry now.
            self.holds.remove_if(&self.key, &self.entry);
            return;
        }
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            // No runtime to clean up on: the key's TTL is the backstop.
            self.holds.remove_if(&self.key, &self.entry);
            return;
        };
        let (shared, holds, key, entry) =
            (self.shared.clone(), self.holds.clone(), self.key.clone(), self.entry.clone());
        let (op, ttl_ms, in_flight) = (self.op.take(), self.ttl_ms, self.in_flight);
        rt.spawn(async move {
            if in_flight {
                if let Err(e) = shared.release(&entry, ttl_ms).await {
                    tracing::debug!(key = %entry.key, error = %e, "cleanup of an abandoned acquisition failed; the TTL frees it");
                }
            }
            if let Some(waiter) = entry.waiter.get() {
                if let Err(e) = shared.leave(&entry.key, waiter).await {
                    tracing::debug!(key = %entry.key, error = %e, "leaving the waiter queue failed; the entry goes stale");
                }
            }
            holds.remove_if(&key, &entry);
            drop(op);
        });
    }
}
