//! One engine session over the instance set: the Redlock algorithm for acquire, release and
//! renewal. Redis has no session object: the "lease" is the per-key expiry of every hold, renewed
//! by `keep_alive`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures_util::future::join_all;
use locksmith_core::driver::{
    new_hold_value, new_session_id, run_to_end, spawn_detached, Attempt, Busy, CancelGuard, HoldTable, Try, WaitLoop,
};
use locksmith_core::{AcquireRequest, Acquired, Error, KeepAlive, LockName, Result, Session};
use tokio::time::Instant;

use crate::cluster::{Cluster, Tally};
use crate::instance::Reply;
use crate::timing::{round_backoff, within_validity, Timeouts};

/// A session: an id, a TTL and the holds it keeps renewed (`(name, owner)` → the random value
/// on the instances; token 0).
#[derive(Debug)]
pub(crate) struct RedlockSession {
    id: String,
    cluster: Arc<Cluster>,
    ttl: Duration,
    timeouts: Timeouts,
    holds: HoldTable<String>,
    closed: AtomicBool,
}

impl RedlockSession {
    pub(crate) fn new(cluster: Arc<Cluster>, ttl: Duration) -> Self {
        Self {
            id: new_session_id(),
            cluster,
            ttl,
            timeouts: Timeouts::for_ttl(ttl),
            holds: HoldTable::default(),
            closed: AtomicBool::new(false),
        }
    }

    /// Owner-checked delete of `value` on all instances, in a spawned task so that it completes
    /// even if the caller's future is dropped.
    async fn release_everywhere(&self, key: String, value: String) -> Result<Tally> {
        let (cluster, t) = (self.cluster.clone(), self.timeouts);
        run_to_end("redlock release", async move { cluster.release(&key, &value, t).await }).await
    }

    /// A replaced hold (lost earlier, never released): free its remaining keys in the background.
    fn release_in_background(&self, key: String, value: String) {
        let (cluster, t) = (self.cluster.clone(), self.timeouts);
        spawn_detached("redlock release", async move {
            cluster.release(&key, &value, t).await;
        });
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
        // Holds reported lost are not renewed; they stay registered until released.
        let holds: Vec<_> = self.holds.snapshot().into_iter().filter(|h| !h.lost).collect();
        if holds.is_empty() {
            // Nothing to renew: the "lease" is only the keys' expiry.
            return Ok(self.holds.report_kept([], "redlock: hold lost"));
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
        let quorum = self.cluster.quorum();
        let verdicts = holds.into_iter().zip(&tallies).map(|(h, tally)| {
            let renewed = in_time && tally.yes() >= quorum;
            if !renewed {
                tracing::debug!(lock = %h.name, renewed = tally.yes(), quorum, "redlock: renewal short of a quorum");
            }
            (h, renewed)
        });
        Ok(self.holds.report_kept(verdicts, "redlock: hold lost"))
    }

    async fn acquire(&self, req: AcquireRequest) -> Result<Acquired> {
        let mut attempt = Round { session: self, key: self.cluster.key(req.name.as_str()), req: &req, rounds: 0 };
        WaitLoop::new("redlock", req.wait).backoff(round_backoff(self.ttl)).run(&mut attempt).await
    }

    async fn release(&self, name: &LockName, owner: &str, _token: u64) -> Result<bool> {
        // Forget first, so the keeper stops renewing before the keys go.
        let Some(hold) = self.holds.take(name, owner) else { return Ok(false) };
        let tally = self.release_everywhere(self.cluster.key(name.as_str()), hold.value).await?;
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
        let releases = holds.into_iter().map(|h| self.release_everywhere(self.cluster.key(h.name.as_str()), h.value));
        for r in join_all(releases).await {
            if let Err(e) = r {
                tracing::debug!(error = %e, "redlock: release on close failed; the keys expire after the TTL");
            }
        }
        Ok(())
    }
}

/// One acquisition: Redis has no queue and no notification, so a waiter polls in rounds (the
/// loop's fallback timer is the round backoff).
struct Round<'a> {
    session: &'a RedlockSession,
    req: &'a AcquireRequest,
    key: String,
    rounds: u64,
}

impl Attempt for Round<'_> {
    /// One round: `SET NX PX` on every instance; a quorum in time wins.
    async fn try_once(&mut self) -> Result<Try> {
        let (session, req, key) = (self.session, self.req, &self.key);
        let cluster = &session.cluster;
        if session.closed.load(Ordering::Acquire) {
            return Err(Error::SessionExpired);
        }
        self.rounds += 1;
        let quorum = cluster.quorum();
        let value = new_hold_value(&session.id, &req.owner);
        // Armed before the first SET leaves: a drop from here on (this future dropped by a
        // timeout or `select!`) releases this round's votes on every instance, owner-checked.
        let state = (cluster.clone(), key.clone(), value.clone(), session.timeouts);
        let pending = CancelGuard::new("redlock round", state, |(cluster, key, value, t)| {
            Some(async move {
                cluster.release(&key, &value, t).await;
            })
        });
        let started = Instant::now();
        let tally = cluster.set_nx(key, &value, session.ttl, session.timeouts).await;
        let elapsed = started.elapsed();
        if tally.yes() >= quorum && within_validity(session.ttl, elapsed) {
            if let Some(old) = session.holds.insert(req.name.clone(), req.owner.clone(), 0, value) {
                session.release_in_background(key.clone(), old.value);
            }
            pending.disarm();
            if session.closed.load(Ordering::Acquire) {
                // Closed while we voted: close() may have drained before our insert.
                if let Some(h) = session.holds.take(&req.name, &req.owner) {
                    session.release_in_background(key.clone(), h.value);
                }
                return Err(Error::SessionExpired);
            }
            return Ok(Try::Granted(0));
        }
        // Not granted: release whatever this round set, on ALL instances (owner-checked), before
        // anything else looks at the lock: votes left behind by a lost round would make the next
        // look (this session's, or a try_lock right after this one returned) find it taken. The
        // guard stays armed meanwhile, so a drop mid-release still frees them.
        cluster.release(key, &value, session.timeouts).await;
        pending.disarm();
        // Refused credentials or TLS settings on so many instances that no quorum is
        // possible: no later round can do better, also for a waiting lock().
        if let Some(e) = cluster.hopeless(&tally.replies) {
            return Err(e);
        }
        let reachable = tally.reachable();
        if !req.wait {
            if reachable < quorum {
                return Err(cluster.failure(&tally.replies));
            }
            if tally.yes() >= quorum {
                return Err(Error::Unavailable {
                    backend: cluster.describe.clone(),
                    message: format!("redlock: a round took {elapsed:?}, past the validity of TTL {:?}", session.ttl),
                });
            }
            return Ok(Try::Busy(Busy::default()));
        }
        if reachable < quorum {
            // Waiting goes on (the caller's timeout bounds it); say why it cannot succeed.
            let e = cluster.failure(&tally.replies);
            if self.rounds == 1 || self.rounds.is_multiple_of(50) {
                tracing::warn!(lock = %req.name, error = %e, "redlock: still waiting");
            }
        }
        // Redlock has no notification: every retry round after a sleep is a wake-up.
        Ok(Try::Busy(Busy::default()))
    }
}
