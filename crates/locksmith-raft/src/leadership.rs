//! Who leads, as a small value the application can watch.

use openraft::metrics::RaftServerMetrics;
use openraft::LogId;
use openraft::ServerState;

use crate::types::Node;
use crate::types::NodeId;

/// This node's view of the cluster's leadership, from openraft's metrics. It changes only
/// when one of its fields does (not on every applied entry).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct Leadership {
    /// The current term (one leader at most per term).
    pub term: u64,
    /// The leader of the current term, when known.
    pub leader: Option<NodeId>,
    /// The leader's `host:port` as the membership records it, when the leader is known and a
    /// member (clients are sent there).
    pub leader_addr: Option<String>,
    /// Whether this node is the leader.
    pub is_leader: bool,
    /// This node is the leader and its state machine has applied an entry of its own term, so
    /// its [`Replica`](crate::Replica) holds every command committed under earlier leaders:
    /// from now on it may act on that state (expire sessions, grant locks). Only a guide: for
    /// a decision that must not be made by a deposed leader, go through the log
    /// ([`RaftNode::client_write`](crate::RaftNode::client_write)) or
    /// [`RaftNode::barrier`](crate::RaftNode::barrier).
    pub ready: bool,
    /// The node stopped (shut down, or a fatal storage error).
    pub stopped: bool,
}

impl Leadership {
    /// This node's view from openraft's server metrics, and the last entry its state machine
    /// applied (which only [`ready`](Self::ready) needs).
    pub(crate) fn from_server(m: &RaftServerMetrics<NodeId, Node>, applied: Option<&LogId<NodeId>>) -> Self {
        Self { leader_addr: crate::membership::leader_addr(m).map(str::to_string), ..Self::without_addr(m, applied) }
    }

    /// [`from_server`](Self::from_server) but for the leader's address (left `None`), which
    /// alone costs an allocation: for comparing on every metrics update.
    pub(crate) fn without_addr(m: &RaftServerMetrics<NodeId, Node>, applied: Option<&LogId<NodeId>>) -> Self {
        let is_leader = m.state == ServerState::Leader;
        let term = m.vote.leader_id().get_term();
        // A leader's first entry is a blank one of its own term: once an entry of this term by
        // this node is applied, everything before it is too.
        let ready = is_leader && applied.is_some_and(|l| l.leader_id.term == term && l.leader_id.node_id == m.id);
        Self {
            term,
            leader: crate::membership::server_leader(m),
            leader_addr: None,
            is_leader,
            ready,
            stopped: m.state == ServerState::Shutdown,
        }
    }
}
