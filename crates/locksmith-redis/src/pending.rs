//! Cancel safety of an acquisition: a guard that owns the session entry while the acquire runs.
//! If the acquire future is dropped after a script was sent whose reply was never seen, the
//! grant may have happened; the guard then releases it (owner-checked, so it can only ever free
//! this attempt's own hold) in a background task. A queued waiter also leaves the waiter
//! queue there (best effort: an entry left behind goes stale by itself).

use std::sync::Arc;

use locksmith_core::driver::{CancelGuard, HoldId, OnDrop};
use tokio::sync::OwnedMutexGuard;

use crate::holds::{Entry, Holds};
use crate::shared::Shared;

/// The session entry of one acquisition in progress, as its cleanup needs it.
pub(crate) struct Pending {
    pub(crate) shared: Arc<Shared>,
    pub(crate) holds: Arc<Holds>,
    /// The entry's registration in `holds`.
    pub(crate) id: HoldId,
    pub(crate) entry: Arc<Entry>,
    pub(crate) owner: String,
    /// The entry's op lock, held until the acquisition ends or its cleanup has finished, so the
    /// next acquisition of the same `(lock, owner)` starts after it.
    pub(crate) _op: OwnedMutexGuard<()>,
    pub(crate) ttl_ms: u64,
    /// A script was sent and its answer not yet seen: the hold may exist in Redis.
    pub(crate) in_flight: bool,
}

impl Pending {
    /// Armed: unless disarmed (granted: the entry then belongs to the session), the entry is
    /// forgotten, and what may be in Redis is released and the waiter queue left.
    pub(crate) fn guard(self) -> CancelGuard<Pending> {
        CancelGuard::new("redis acquisition", self, |p| {
            let queued = p.entry.waiter.get().is_some();
            if !p.in_flight && !queued {
                // Nothing of ours can be in Redis: forget the entry now.
                p.holds.remove(&p.entry.name, &p.owner, p.id);
                return None;
            }
            // Forgotten also when no runtime runs the rest: the key's TTL is then the backstop.
            let forget = {
                let (holds, name, owner, id) = (p.holds.clone(), p.entry.name.clone(), p.owner.clone(), p.id);
                OnDrop::new(move || {
                    holds.remove(&name, &owner, id);
                })
            };
            Some(async move {
                if p.in_flight {
                    if let Err(e) = p.shared.release(&p.entry, p.ttl_ms).await {
                        tracing::debug!(key = %p.entry.key, error = %e, "cleanup of an abandoned acquisition failed; the TTL frees it");
                    }
                }
                if let Some(waiter) = p.entry.waiter.get() {
                    if let Err(e) = p.shared.leave(&p.entry, waiter).await {
                        tracing::debug!(key = %p.entry.key, error = %e, "leaving the waiter queue failed; the entry goes stale");
                    }
                }
                drop(forget);
                drop(p);
            })
        })
    }
}
