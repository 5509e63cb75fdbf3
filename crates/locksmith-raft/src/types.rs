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
#[derive(Clone, PartialEq, Eq)]
pub struct Command(pub Vec<u8>);

// Serialized as a byte string, not as a sequence of `u8`: postcard writes both the same way
// (length, then the bytes), but reads and writes a byte string in one copy instead of one call
// per byte, which a 1 MiB command in a debug build would feel within a heartbeat's deadline.
impl Serialize for Command {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_bytes(&self.0)
    }
}

impl<'de> Deserialize<'de> for Command {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Bytes;
        impl<'de> serde::de::Visitor<'de> for Bytes {
            type Value = Command;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a byte string")
            }
            fn visit_bytes<E: serde::de::Error>(self, v: &[u8]) -> Result<Command, E> {
                Ok(Command(v.to_vec()))
            }
            fn visit_byte_buf<E: serde::de::Error>(self, v: Vec<u8>) -> Result<Command, E> {
                Ok(Command(v))
            }
            // Self-describing formats may hand a byte string over as a sequence.
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Command, A::Error> {
                let mut v = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(1 << 16));
                while let Some(b) = seq.next_element()? {
                    v.push(b);
                }
                Ok(Command(v))
            }
        }
        deserializer.deserialize_byte_buf(Bytes)
    }
}

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

#[cfg(test)]
mod tests {
    use super::Command;

    /// The byte-string encoding is the one a derived `Vec<u8>` had: logs stay readable.
    #[test]
    fn a_command_encodes_as_its_length_and_bytes() {
        let c = Command(vec![1, 2, 200]);
        let bytes = postcard::to_stdvec(&c).unwrap();
        assert_eq!(bytes, postcard::to_stdvec(&vec![1u8, 2, 200]).unwrap());
        assert_eq!(bytes, [3, 1, 2, 200]);
        assert_eq!(postcard::from_bytes::<Command>(&bytes).unwrap(), c);
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
