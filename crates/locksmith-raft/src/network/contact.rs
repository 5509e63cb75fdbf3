//! When each peer last answered one of this node's Raft calls: what `locksmith cluster status`
//! shows as a member's last contact, and how the leader tells a member it cannot reach.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::Mutex;
use std::time::Duration;
use std::time::Instant;

use crate::types::NodeId;

/// The last answer from each peer (any answer, a refusal included: the peer is up).
#[derive(Debug, Clone, Default)]
pub struct Contacts(Arc<Mutex<HashMap<NodeId, Instant>>>);

impl Contacts {
    /// Peer `id` answered now.
    pub(crate) fn answered(&self, id: NodeId) {
        // A poisoned map only means a panic elsewhere while inserting: the map itself is fine.
        self.0.lock().unwrap_or_else(|p| p.into_inner()).insert(id, Instant::now());
    }

    /// How long ago peer `id` last answered; `None` if it never did.
    pub fn since(&self, id: NodeId) -> Option<Duration> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).get(&id).map(Instant::elapsed)
    }
}
