//! When each peer last answered one of this node's Raft calls: what `locksmith cluster status`
//! shows as a member's last contact, and how the leader tells a member it cannot reach. Also
//! the node's own voice about its peers: one line when a peer that answered stops answering
//! and one when it answers again, where openraft logs every failed call (filter it with
//! [`QUIET_OPENRAFT`](crate::QUIET_OPENRAFT)); a peer that never answered yet (not started) is
//! only worth a debug line.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::Mutex;
use std::time::Duration;
use std::time::Instant;

use crate::types::NodeId;

#[derive(Debug, Default)]
struct Peer {
    /// Its last answer.
    answered: Option<Instant>,
    /// Its calls fail since the last answer.
    silent: bool,
}

/// The last answer from each peer (any answer, a refusal included: the peer is up).
#[derive(Debug, Clone, Default)]
pub struct Contacts(Arc<Mutex<HashMap<NodeId, Peer>>>);

impl Contacts {
    fn with<T>(&self, id: NodeId, f: impl FnOnce(&mut Peer) -> T) -> T {
        // A poisoned map only means a panic elsewhere while inserting: the map itself is fine.
        f(self.0.lock().unwrap_or_else(|p| p.into_inner()).entry(id).or_default())
    }

    /// Peer `id` answered now.
    pub(crate) fn answered(&self, id: NodeId) {
        let (was_silent, before) = self.with(id, |p| {
            let before = p.answered.replace(Instant::now()).is_some();
            (std::mem::take(&mut p.silent), before)
        });
        match (was_silent, before) {
            (true, true) => tracing::info!(node = id, "raft: peer answers again"),
            (_, false) => tracing::debug!(node = id, "raft: peer answers"),
            _ => {}
        }
    }

    /// A call to peer `id` got no answer (`why`).
    pub(crate) fn failed(&self, id: NodeId, why: &str) {
        let (first, ever) = self.with(id, |p| (!std::mem::replace(&mut p.silent, true), p.answered.is_some()));
        match (first, ever) {
            (true, true) => tracing::warn!(node = id, error = why, "raft: peer stopped answering"),
            _ => tracing::debug!(node = id, error = why, "raft: peer not answering (not started yet, or down)"),
        }
    }

    /// How long ago peer `id` last answered; `None` if it never did.
    pub fn since(&self, id: NodeId) -> Option<Duration> {
        self.with(id, |p| p.answered.map(|t| t.elapsed()))
    }
}
