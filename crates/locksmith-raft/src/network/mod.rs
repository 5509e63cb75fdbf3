//! Raft traffic over gRPC: the `locksmith.raft.v1.Raft` service (`proto/raft.proto`), whose
//! messages carry openraft's own requests and results encoded with postcard.
//!
//! - [`Network`] (`client`): openraft's network factory: one lazily connected tonic channel per
//!   peer, reused by every replication stream and vote to it, optional TLS, a deadline per RPC;
//!   AppendEntries go over one long-lived gRPC stream per leader and follower
//!   (`AppendEntriesStream`: no HTTP/2 stream set-up, headers nor trailers per message; half the
//!   CPU of a unary call), unary calls to a peer that does not serve it (an older node);
//! - [`RaftService`] (`server`): the service the application adds to its own tonic router
//!   ([`RaftNode::service`](crate::RaftNode::service));
//! - [`NodeGate`] and [`NodeAuth`] (`gate`): only nodes speak Raft: every call carries a node
//!   proof made with the cluster secret, or comes over TLS with a node certificate ([`PeerCa`],
//!   `peer_cert`), or both; checked before its message is read.

mod client;
mod contact;
mod gate;
mod peer_cert;
mod server;

pub use client::Network;
pub use client::PeerClient;
pub use contact::Contacts;
pub use gate::NodeAuth;
pub use gate::NodeGate;
pub use gate::Refusal;
pub use peer_cert::node_id_of;
pub use peer_cert::PeerCa;
pub use peer_cert::PeerCertError;
pub use peer_cert::NODE_URI_SCHEME;
pub use server::RaftService;

/// `value` in postcard, the same bytes as `postcard::to_stdvec`, into a buffer sized once for
/// the common message (a heartbeat, a commit index, one small entry, a reply): growing it from
/// empty cost several reallocations per Raft message.
fn encode<T: serde::Serialize + ?Sized>(value: &T) -> postcard::Result<Vec<u8>> {
    postcard::to_extend(value, Vec::with_capacity(256))
}

/// The generated gRPC code of `locksmith.raft.v1` (`proto/raft.proto`).
#[allow(missing_docs, unreachable_pub, missing_debug_implementations, clippy::all, clippy::pedantic)]
pub mod pb {
    tonic::include_proto!("locksmith.raft.v1");
}

/// Largest gRPC message either side accepts: a batch of entries is capped at 1 MiB plus one
/// entry (at most [`MAX_COMMAND`](crate::MAX_COMMAND)), a snapshot chunk at 1 MiB.
pub(crate) const MAX_MESSAGE: usize = 16 << 20;

#[cfg(test)]
mod tests {
    #[test]
    fn messages_encode_to_the_same_bytes_as_postcard_to_stdvec() {
        for len in [0usize, 1, 255, 256, 257, 4096] {
            let value = (len as u64, vec![7u8; len], "entry");
            assert_eq!(super::encode(&value).unwrap(), postcard::to_stdvec(&value).unwrap(), "{len}");
        }
    }
}
