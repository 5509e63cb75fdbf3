//! One engine session over the instance set: the Redlock algorithm for acquire, release and
//! renewal. Redis has no session object: the "lease" is the per-key expiry of every hold, renewed
//! by `keep_alive`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures_util::future::join_all;
use locksmith_core::driver::CancelGuard;
use locksmith_core::{AcquireRequest, Acquired, Error, KeepAlive, LockName, Result, Session};
use tokio::time::Instant;

use crate::cluster::{Cluster, Tally};
use crate::holds::Holds;
use crate::instance::Reply;
use crate::timing::{round_backoff, within_validity, Timeouts};
use crate::value::new_value;

/// A session: an id, a TTL and the holds it keeps renewed.
#[derive(Debug)]
pub(crate) struct RedlockSession {
    id: String,
    cluster: Arc<Cluster>,
    ttl: Duration,
    timeouts: Timeouts,
    holds: Holds,
    closed: AtomicBool,
}

impl RedlockSession {
    pub(crate) fn new(cluster: Arc<Cluster>, ttl: Duration) -> Self {
        Self {
            id: format!("{:016x}", locksmith_core::driver::identity::random_u64()),
            cluster,
            ttl,
            timeouts: Timeouts::for_ttl(ttl),
            holds: Holds::default(),
            closed: AtomicBool::new(false),
        }
    }

    /// Owner-checked delete of `value` on all instances, in a spawned task so that it completes
    /// even if the caller's future is dropped.
    async fn release_everywhere(&self, key: String, value: String) -> Result<Tally> {
        let (cluster, t) = (self.cluster.clone(), self.timeouts);
        tokio::spawn(async move { cluster.release(&key, &value, t).await })
            .await
            .map_err(|e| Error::Backend(format!("redlock: release task failed: {e}")))
    }

    /// A replaced hold (lost earlier, never released): free its remaining keys in the background.
    fn release_in_background(&self, key: String, value: String) {
        let (cluster, t) = (self.cluster.clone(), self.timeouts);
        tokio::spawn(async move { cluster.release(&key, &value, t).await });
    }

    /// Instance `i` counts as reachable if it answered any of the renewals.
    fn merge_reachability(&self, tallies: &[Tally]) -> Vec<Reply<bool>> {
        (0..self.cluster.instances.len())
            .map(|i| {
                let mut replies = tallies.iter().filter_map(|t| t.replies.get(i));
                let first = replies.clone().next().cloned();
                replies.find(|r| r.reachable()).cloned().or(first).unwrap_or(Reply::Down("not asked".into()))
            })
            .collect()
    }
}

#[async_trait]
impl Session for RedlockSession {
    fn id(&self) -> String {
        self.id.clone()
    }

    /// Each instance's key lives for the TTL.
    fn lease(&self) -> Duration {
        self.ttl
    }

    async fn keep_alive(&self) -> Result<KeepAlive> {
        if self.closed.load(Ordering::Acquire) {
            return Err(Error::SessionExpired);
        }
        let holds = self.holds.live();
        if holds.is_empty() {
            // Nothing to renew: the "lease" is only the keys' expiry.
            let mut outcome = KeepAlive::default();
            outcome.lost = self.holds.lost();
            return Ok(outcome);
        }
        let started = Instant::now();
        let tallies = join_all(holds.iter().map(|h| {
            let key = self.cluster.key(h.name.as_str());
            async move { self.cluster.extend(&key, &h.value, self.ttl, self.timeouts).await }
        }))
        .await;
        let in_time = within_validity(self.ttl, started.elapsed());
        let merged = self.merge_reachability(&tallies);
        if merged.iter().filter(|r| r.reachable()).count() < self.cluster.quorum() {
            // Not a verdict on the holds: the engine's deadline (last renewal sent + TTL − drift)
            // ends them if this lasts.
            return Err(self.cluster.failure(&merged));
        }
        for (hold, tally) in holds.iter().zip(&tallies) {
            let renewed = in_time && tally.yes() >= self.cluster.quorum();
            if !renewed && self.holds.mark_lost(hold) {
                tracing::warn!(lock = %hold.name, renewed = tally.yes(), quorum = self.cluster.quorum(), "redlock: hold lost");
            }
        }
        let mut outcome = KeepAlive::default();
        outcome.lost = self.holds.lost();
        Ok(outcome)
    }

    async fn acquire(&self, req: AcquireRequest) -> Result<Acquired> {
        let key = self.cluster.key(req.name.as_str());
        let quorum = self.cluster.quorum();
        let mut backoff = round_backoff(self.ttl);
        let mut rounds = 0u64;
        loop {
            if self.closed.load(Ordering::Acquire) {
                return Err(Error::SessionExpired);
            }
            rounds += 1;
            let value = new_value(&self.id, &req.owner);
            // Armed before the first SET leaves: a drop from here on (a failed round, or this future
            // dropped by a timeout or `select!`) releases this round's votes on every instance,
            // owner-checked.
            let state = (self.cluster.clone(), key.clone(), value.clone(), self.timeouts);
            let pending = CancelGuard::new("redlock round", state, |(cluster, key, value, t)| {
                Some(async move {
                    cluster.release(&key, &value, t).await;
                })
            });
            let started = Instant::now();
            let tally = self.cluster.set_nx(&key, &value, self.ttl, self.timeouts).await;
            let elapsed = started.elapsed();
            if tally.yes() >= quorum && within_validity(self.ttl, elapsed) {
                if let Some(old) = self.holds.insert(req.name.clone(), req.owner.clone(), value) {
                    self.release_in_background(key.clone(), old);
                }
                pending.disarm();
                if self.closed.load(Ordering::Acquire) {
                    // Closed while we voted: close() may have drained before our insert.
                    if let Some(v) = self.holds.remove(&req.name, &req.owner) {
                        self.release_in_background(key, v);
                    }
                    return Err(Error::SessionExpired);
                }
                return Ok(Acquired::Granted { token: 0 });
            }
            // Not granted: release whatever this round set, on ALL instances (owner-checked).
            pending.fire();
            // Refused credentials or TLS settings on so many instances that no quorum is
            // possible: no later round can do better, also for a waiting lock().
            if let Some(e) = self.cluster.hopeless(&tally.replies) {
                return Err(e);
            }
            let reachable = tally.reachable();
            if !req.wait {
                if reachable < quorum {
                    return Err(self.cluster.failure(&tally.replies));
                }
                if tally.yes() >= quorum {
                    return Err(Error::Unavailable {
                        backend: self.cluster.describe.clone(),
                        message: format!("redlock: a round took {elapsed:?}, past the validity of TTL {:?}", self.ttl),
                    });
                }
                return Ok(Acquired::Busy);
            }
            if reachable < quorum {
                // Waiting goes on (the caller's timeout bounds it); say why it cannot succeed.
                let e = self.cluster.failure(&tally.replies);
                if rounds == 1 || rounds.is_multiple_of(50) {
                    tracing::warn!(lock = %req.name, error = %e, "redlock: still waiting");
                }
            }
            tokio::time::sleep(backoff.delay(None)).await;
            // Redlock has no notification: every retry round after a sleep is a wake-up.
            locksmith_core::metrics::wakeup("redlock");
        }
    }

    async fn release(&self, name: &LockName, owner: &str, _token: u64) -> Result<bool> {
        // Forget first, so the keeper stops renewing before the keys go.
        let Some(value) = self.holds.remove(name, owner) else { return Ok(false) };
        let tally = self.release_everywhere(self.cluster.key(name.as_str()), value).await?;
        let quorum = self.cluster.quorum();
        if tally.yes() >= quorum {
            return Ok(true);
        }
        if tally.reachable() < quorum {
            // Unknown whether it was ours; the keys expire after the TTL (no more renewals).
            return Err(self.cluster.failure(&tally.replies));
        }
        Ok(false)
    }

    async fn close(&self) -> Result<()> {
        self.closed.store(true, Ordering::Release);
        let holds = self.holds.drain();
        let releases =
            holds.into_iter().map(|(name, value)| self.release_everywhere(self.cluster.key(name.as_str()), value));
        for r in join_all(releases).await {
            if let Err(e) = r {
                tracing::debug!(error = %e, "redlock: release on close failed; the keys expire after the TTL");
            }
        }
        Ok(())
    }
}
