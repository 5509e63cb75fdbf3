//! Errors of this crate, one type per operation.

use std::fmt;
use std::path::PathBuf;

use crate::types::NodeId;

/// Opening a node's data directory failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// Another process (or another node in this process) holds the directory.
    #[error("{}: the raft data directory is in use by another node", .0.display())]
    InUse(PathBuf),
    /// A file of the directory does not check out, beyond a torn last write. Nothing was
    /// changed. A node that cannot read its log must not take part in elections with what is
    /// left of it: remove it from the cluster, wipe the directory and add it back (it then
    /// catches up from the leader).
    #[error("raft data directory damaged: {0}")]
    Corrupt(String),
    /// The application's state machine rejected the snapshot stored in the directory.
    #[error("the state machine rejected the stored snapshot: {0}")]
    Snapshot(String),
    /// An I/O error.
    #[error("raft data directory: {0}")]
    Io(#[from] std::io::Error),
}

/// Starting a node failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StartError {
    /// The timeouts or snapshot settings are inconsistent.
    #[error("invalid raft configuration: {0}")]
    Config(String),
    /// The heartbeat or election timeout is outside its bounds (see [`Timings`](crate::Timings)).
    #[error("invalid raft timings: {0}")]
    Timing(#[from] crate::timings::TimingError),
    /// The data directory could not be opened.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// openraft failed to start or to initialize the cluster.
    #[error("raft: {0}")]
    Raft(String),
}

/// Where the leader is, as far as the node that refused a request knows.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LeaderHint {
    /// The leader's id, when known.
    pub id: Option<NodeId>,
    /// The leader's gRPC address (`host:port`), when known.
    pub addr: Option<String>,
}

impl fmt::Display for LeaderHint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.id, &self.addr) {
            (Some(id), Some(addr)) => write!(f, "the leader is node {id} at {addr}"),
            (Some(id), None) => write!(f, "the leader is node {id}"),
            _ => f.write_str("no leader is known"),
        }
    }
}

/// [`RaftNode::client_write`](crate::RaftNode::client_write) or
/// [`RaftNode::barrier`](crate::RaftNode::barrier) failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientWriteError {
    /// This node is not the leader: send the request to the one in the hint.
    #[error("not the leader: {0}")]
    ForwardToLeader(LeaderHint),
    /// The command is larger than [`MAX_COMMAND`](crate::MAX_COMMAND).
    #[error("command of {len} bytes exceeds the limit of {max}")]
    TooLarge {
        /// The command's length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// The node stopped (shut down, or a storage error ended it).
    #[error("raft node stopped: {0}")]
    Stopped(String),
    /// Any other refusal by openraft (for example a quorum that was not reached in time).
    #[error("raft: {0}")]
    Raft(String),
}

impl ClientWriteError {
    /// Whether another node should be asked (this one is not, or no longer, the leader).
    pub fn leader_hint(&self) -> Option<&LeaderHint> {
        match self {
            Self::ForwardToLeader(hint) => Some(hint),
            _ => None,
        }
    }
}

/// [`RaftNode::add_learner`](crate::RaftNode::add_learner) or
/// [`RaftNode::change_membership`](crate::RaftNode::change_membership) failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MembershipError {
    /// This node is not the leader: send the request to the one in the hint.
    #[error("not the leader: {0}")]
    ForwardToLeader(LeaderHint),
    /// The change was refused: another change is in progress, a new voter was not added as a
    /// learner first, the membership would be empty, …
    #[error("membership change refused: {0}")]
    Rejected(String),
    /// The change contradicts the membership: removing the last voter, adding a node id that
    /// is a member at another address.
    #[error("{0}")]
    Invalid(String),
    /// The change did not complete in the time given (a new node did not catch up, no quorum
    /// committed it); the message says how far it got.
    #[error("{0}")]
    Timeout(String),
    /// The node stopped.
    #[error("raft node stopped: {0}")]
    Stopped(String),
}
