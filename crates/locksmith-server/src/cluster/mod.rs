//! The native server as a cluster: the same lock service on every node, replicated with Raft
//! (`locksmith-raft`, openraft underneath).
//!
//! The leader's service runs the state machine exactly as a single node does — it decides who is
//! granted what and when a lease ends, by its own clock — and every record it emits goes through
//! the Raft log before the answers that depend on it go out (`committer`). Every node applies
//! committed records to its replica (`replica`) through the machine's one `apply`; followers
//! never tick, so expiry is decided once, by the leader, and reaches the others as records.
//!
//! When a node becomes the leader it builds its machine from its replica as a restarted single
//! node does from its log: a new epoch (committed before it serves), sessions restored with
//! their holds and at least a full TTL — and no less than a fail-over's worth — before any can
//! expire (Chubby's grace period: a client that renewed in time never loses its lock to a
//! fail-over), queued waiters re-sent by the clients as they resume, tokens above the floor. A
//! node that stops leading ends its streams; its clients resume their sessions on the new leader.

pub(crate) mod committer;
mod replica;

pub(crate) use replica::encode;
pub use replica::ReplicaMachine;

use std::collections::BTreeMap;

/// A node's part in a cluster.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ClusterOptions {
    /// This node's id.
    pub node_id: u64,
    /// Every voter's id and address (`host:port`, where its server listens for clients and
    /// peers alike), this node included.
    pub peers: BTreeMap<u64, String>,
    /// Peers this node reaches at another address than the one in `peers` (a proxy, a tunnel):
    /// `peers` is the cluster's view, the same on every node; `routes` is this node's alone.
    pub routes: BTreeMap<u64, String>,
}

impl ClusterOptions {
    /// Node `node_id` of the cluster `peers`.
    pub fn new(node_id: u64, peers: BTreeMap<u64, String>) -> Self {
        Self { node_id, peers, routes: BTreeMap::new() }
    }

    /// The same options, reaching the peers in `routes` at the addresses given there.
    pub fn routes(mut self, routes: BTreeMap<u64, String>) -> Self {
        self.routes = routes;
        self
    }
}
