//! Cancel safety of an acquisition round: whatever a round may have set is released on every
//! instance unless the round ends in a grant.

use std::sync::Arc;

use crate::cluster::Cluster;
use crate::timing::Timeouts;

/// Armed from before the first `SET NX` is sent until the hold is registered. Dropping it armed
/// (a failed round, or the acquire future dropped mid-way by a timeout or `select!`) spawns an
/// owner-checked release on all instances, so no vote of an abandoned attempt stays behind.
#[derive(Debug)]
pub(crate) struct PendingHold {
    cluster: Arc<Cluster>,
    key: String,
    value: String,
    timeouts: Timeouts,
    armed: bool,
}

impl PendingHold {
    pub(crate) fn new(cluster: Arc<Cluster>, key: String, value: String, timeouts: Timeouts) -> Self {
        Self { cluster, key, value, timeouts, armed: true }
    }

    /// The round succeeded and the hold is registered: nothing to clean up.
    pub(crate) fn keep(mut self) {
        self.armed = false;
    }
}

impl Drop for PendingHold {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            tracing::debug!(key = %self.key, "acquisition dropped outside a runtime; its keys expire after the TTL");
            return;
        };
        let (cluster, key, value, t) =
            (self.cluster.clone(), std::mem::take(&mut self.key), std::mem::take(&mut self.value), self.timeouts);
        handle.spawn(async move {
            cluster.release(&key, &value, t).await;
        });
    }
}
