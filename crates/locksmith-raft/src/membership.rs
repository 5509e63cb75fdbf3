//! A node's view of its cluster ([`ClusterStatus`]) and the outcomes of membership changes, as
//! `locksmith cluster status|add|remove` shows them.

use openraft::metrics::RaftServerMetrics;
use openraft::RaftMetrics;
use openraft::ServerState;

use crate::types::Node;
use crate::types::NodeId;

/// What a member does, as the node that reports it sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeRole {
    /// The leader of the current term.
    Leader,
    /// A voter that does not lead.
    Follower,
    /// A member that receives the log but does not vote (being added, or kept as a learner).
    Learner,
}

/// One member of the cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ClusterNode {
    /// Its node id.
    pub id: NodeId,
    /// Its `host:port`, where peers and clients reach it.
    pub addr: String,
    /// Leader, follower or learner.
    pub role: NodeRole,
    /// Whether it votes (during a membership change: in the old or the new voter set).
    pub voter: bool,
    /// The last log index the leader knows to be stored on it. Only the leader knows: `None`
    /// in any other node's view, and on the leader until the member first answered.
    pub matched_index: Option<u64>,
    /// How long ago the member last answered the leader: only in the leader's view (`None`
    /// for the leader itself, and for a member that never answered it).
    pub last_contact: Option<std::time::Duration>,
    /// The leader has had no answer from it for longer than an election timeout (or never):
    /// only in the leader's view.
    pub unreachable: bool,
}

/// One node's view of the cluster, from its Raft state now. Any node has one; only the
/// leader's has each node's [`matched_index`](ClusterNode::matched_index).
///
/// ```
/// # async fn show(node: &locksmith_raft::RaftNode<impl locksmith_raft::Replicated>) {
/// let view = node.cluster();
/// for n in &view.nodes {
///     println!("{} {} {:?} voter={} matched={:?}", n.id, n.addr, n.role, n.voter, n.matched_index);
/// }
/// println!("term {}, leader {:?}", view.term, view.leader);
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ClusterStatus {
    /// The node whose view this is.
    pub node_id: NodeId,
    /// Its current term.
    pub term: u64,
    /// The leader of that term, when known.
    pub leader: Option<NodeId>,
    /// Whether this node is that leader.
    pub is_leader: bool,
    /// The index of the last entry in its log.
    pub last_log_index: Option<u64>,
    /// The index of the last entry its state machine applied.
    pub applied_index: Option<u64>,
    /// A membership change is under way (a joint configuration of old and new voters).
    pub changing: bool,
    /// The members, in id order. Empty on a node that waits to be added.
    pub nodes: Vec<ClusterNode>,
}

/// The leader of the current term as `m` knows it. Not this node once it stopped leading: a
/// leader removed from the cluster steps down within its term, and openraft still names it.
pub(crate) fn current_leader(m: &RaftMetrics<NodeId, Node>) -> Option<NodeId> {
    leader_of(m.id, m.state, m.current_leader)
}

/// [`current_leader`] from openraft's server metrics (which change only with the vote, the
/// state, the leader or the membership, not with every entry).
pub(crate) fn server_leader(m: &RaftServerMetrics<NodeId, Node>) -> Option<NodeId> {
    leader_of(m.id, m.state, m.current_leader)
}

fn leader_of(id: NodeId, state: ServerState, leader: Option<NodeId>) -> Option<NodeId> {
    leader.filter(|l| *l != id || state == ServerState::Leader)
}

/// The `host:port` of the leader [`server_leader`] names, when it is a member: what
/// [`ClusterStatus::leader_addr`] answers, without building the view.
pub(crate) fn leader_addr(m: &RaftServerMetrics<NodeId, Node>) -> Option<&str> {
    server_leader(m).and_then(|l| m.membership_config.membership().get_node(&l)).map(|n| n.addr.as_str())
}

/// The last log index the leader knows node `id` stored (leader only).
pub(crate) fn matched_index(m: &RaftMetrics<NodeId, Node>, id: NodeId) -> Option<u64> {
    m.replication.as_ref()?.get(&id)?.as_ref().map(|l| l.index)
}

impl ClusterStatus {
    pub(crate) fn from_metrics(m: &RaftMetrics<NodeId, Node>) -> Self {
        let leader = current_leader(m);
        let membership = m.membership_config.membership();
        let configs = membership.get_joint_config();
        let is_leader = m.state == ServerState::Leader;
        let progress = |id: &NodeId| {
            matched_index(m, *id).or_else(|| {
                // The leader's own log is all there.
                (is_leader && *id == m.id).then_some(m.last_log_index).flatten()
            })
        };
        let nodes = membership
            .nodes()
            .map(|(id, node)| {
                let voter = configs.iter().any(|c| c.contains(id));
                let role = match (leader == Some(*id), voter) {
                    (true, _) => NodeRole::Leader,
                    (false, true) => NodeRole::Follower,
                    (false, false) => NodeRole::Learner,
                };
                ClusterNode {
                    id: *id,
                    addr: node.addr.clone(),
                    role,
                    voter,
                    matched_index: if is_leader { progress(id) } else { None },
                    last_contact: None,
                    unreachable: false,
                }
            })
            .collect();
        Self {
            node_id: m.id,
            term: m.current_term,
            leader,
            is_leader,
            last_log_index: m.last_log_index,
            applied_index: m.last_applied.map(|l| l.index),
            changing: configs.len() > 1,
            nodes,
        }
    }

    /// Node `id`, if it is a member.
    pub fn node(&self, id: NodeId) -> Option<&ClusterNode> {
        self.nodes.iter().find(|n| n.id == id)
    }

    /// The ids of the voters.
    pub fn voters(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.nodes.iter().filter(|n| n.voter).map(|n| n.id)
    }

    /// The leader's `host:port`, when the leader is known and a member.
    pub fn leader_addr(&self) -> Option<&str> {
        self.leader.and_then(|l| self.node(l)).map(|m| m.addr.as_str())
    }
}

/// What [`RaftNode::add_voter`](crate::RaftNode::add_voter) did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Added {
    /// The node was added as a learner, caught up, and now votes.
    Promoted,
    /// It was a voter at that address already; nothing changed.
    AlreadyVoter,
}

/// What [`RaftNode::remove_node`](crate::RaftNode::remove_node) did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Removed {
    /// A voter left the cluster. `was_leader`: it was this node, the leader, which steps down
    /// once the change is committed (the others elect a new leader).
    Voter {
        /// The removed voter was the leader.
        was_leader: bool,
    },
    /// A learner left the cluster.
    Learner,
    /// It was no member; nothing changed.
    NotAMember,
}
