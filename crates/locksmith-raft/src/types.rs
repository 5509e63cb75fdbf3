//! The type family openraft is instantiated with: node ids, node addresses and the opaque
//! command that is replicated.

use std::fmt;
use std::io::Cursor;

use serde::Deserialize;
use serde::Serialize;

/// A node's id in the cluster. Ids are never reused for a different node while the old one may
/// still be a member (see [`RaftNode::start`](crate::RaftNode::start)).
pub type NodeId = u64;

/// A node as the cluster membership records it: [`openraft::BasicNode`] whose `addr` is the
/// `host:port` of the node's gRPC endpoint serving [`RaftNode::service`](crate::RaftNode::service).
pub type Node = openraft::BasicNode;

/// One replicated command: opaque bytes, only interpreted by the application's
/// [`Replicated`](crate::Replicated) state machine.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Command(pub Vec<u8>);

impl fmt::Debug for Command {
    // The bytes are the application's; their length is what helps when reading openraft's logs.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Command({} bytes)", self.0.len())
    }
}

impl fmt::Display for Command {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

openraft::declare_raft_types!(
    /// The openraft type configuration of locksmith: [`Command`]s in, nothing out (the
    /// application reads results from its own state machine, at the index a write returns).
    pub TypeConfig:
        D = Command,
        R = (),
        NodeId = NodeId,
        Node = Node,
        SnapshotData = Cursor<Vec<u8>>,
);

/// A log id of this configuration (term, leader and index).
pub type LogId = openraft::LogId<NodeId>;
/// A log entry of this configuration.
pub type Entry = openraft::Entry<TypeConfig>;
/// A vote of this configuration.
pub type Vote = openraft::Vote<NodeId>;
/// A membership with the log id it was written at.
pub type StoredMembership = openraft::StoredMembership<NodeId, Node>;
/// A snapshot's metadata.
pub type SnapshotMeta = openraft::SnapshotMeta<NodeId, Node>;
/// A storage error as openraft expects it from storage.
pub type StorageError = openraft::StorageError<NodeId>;
/// The openraft handle of this configuration.
pub type Raft = openraft::Raft<TypeConfig>;
