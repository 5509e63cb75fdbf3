//! Generated types of the native locksmith server: the wire protocol `locksmith.v1` at the
//! crate root (see `proto/locksmith.proto`, which documents the wire semantics), and the
//! server's write-ahead log records `locksmith.wal.v1` in [`wal`] (see `proto/wal.proto`).
#![allow(missing_docs, unreachable_pub, clippy::all, clippy::pedantic)]

tonic::include_proto!("locksmith.v1");

/// Records of the server's write-ahead log (`locksmith.wal.v1`): storage, not protocol.
pub mod wal {
    tonic::include_proto!("locksmith.wal.v1");
}

/// The metadata key of an `UNAVAILABLE` answer from a cluster node that does not lead the
/// cluster: the leader's `host:port`, where the client should go instead.
pub const LEADER_HEADER: &str = "locksmith-leader";

pub mod node_proof;
