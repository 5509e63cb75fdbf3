//! Raft replication of opaque byte commands for the native locksmith server, on
//! [openraft](https://docs.rs/openraft/0.9) 0.9 (`storage-v2`).
//!
//! The application (the lock server) implements [`Replicated`] for its state machine and
//! starts a [`RaftNode`] per server process; a command it replicates with
//! [`RaftNode::client_write`] is applied, in log order, on every node through
//! [`Replicated::apply`], the same function a single node uses to replay its log.
//!
//! # Example
//! ```no_run
//! use std::collections::BTreeMap;
//!
//! use locksmith_raft::{NodeConfig, RaftNode, Replicated};
//!
//! /// Counts the bytes of every command: deterministic, so every node agrees.
//! #[derive(Default)]
//! struct Counter(u64);
//!
//! impl Replicated for Counter {
//!     fn apply(&mut self, _index: u64, command: &[u8]) {
//!         self.0 += command.len() as u64;
//!     }
//!     fn snapshot(&self) -> Vec<u8> {
//!         self.0.to_le_bytes().to_vec()
//!     }
//!     fn install(&mut self, snapshot: &[u8]) -> Result<(), String> {
//!         self.0 = u64::from_le_bytes(snapshot.try_into().map_err(|_| "not a counter")?);
//!         Ok(())
//!     }
//! }
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let peers: BTreeMap<u64, String> =
//!     (1..=3).map(|id| (id, format!("10.0.0.{id}:7001"))).collect();
//! let node = RaftNode::start(1, "/var/lib/locksmith/raft", peers, NodeConfig::default(), Counter::default()).await?;
//! // Peers reach this node through its own gRPC server (TLS, limits: the application's).
//! let server = tonic::transport::Server::builder().add_service(node.service()).serve("10.0.0.1:7001".parse()?);
//! tokio::spawn(server);
//!
//! node.leadership().wait_for(|l| l.leader.is_some()).await?;
//! match node.client_write(b"hello".to_vec()).await {
//!     Ok(index) => {
//!         let replica = node.replica().lock().map_err(|_| "state machine panicked")?;
//!         println!("applied at {index}: {} bytes so far", replica.machine().0);
//!     }
//!     Err(e) => match e.leader_hint() {
//!         Some(hint) => println!("not the leader: {hint}"),
//!         None => return Err(e.into()),
//!     },
//! }
//! # Ok(())
//! # }
//! ```
//!
//! # Layout
//! - [`types`]: the openraft type family: `NodeId = u64`, [`Node`] = `BasicNode` (the peer's
//!   gRPC `host:port`), the opaque [`Command`], response `()`;
//! - [`store`]: the data directory: a durable append-only log with the vote and committed index
//!   beside it ([`store::LogStore`]), and the snapshot;
//! - [`state_machine`]: openraft's state machine over the application's [`Replicated`] state,
//!   shared with the application as a [`Replica`] behind a mutex;
//! - [`network`]: the `locksmith.raft.v1.Raft` gRPC service and its client (postcard-encoded
//!   openraft messages, one lazily connected channel per peer, optional TLS);
//! - [`RaftNode`] with [`NodeConfig`] and [`Leadership`]: the API the server uses;
//! - `fixture` (feature `test-fixture`, for tests only): an in-process network (a router with
//!   cut and slow links) that runs real nodes without sockets or processes.
//!
//! # Durability and its cost
//! An entry is acknowledged to openraft (and so counted towards a quorum) only after
//! `fdatasync` of the log; votes are synced before use; snapshots are synced then renamed into
//! place. The log file is preallocated so a sync writes no inode.
//!
//! Measured here (2 cores, ext4 on a VM disk, other builds running: load average ~6), release
//! build, 2,000 appends of a 100-byte command through [`store::LogStore`] as openraft 0.9
//! drives it (write, then — at the time — a hand-off to a sync thread, `fdatasync`, callback; the
//! store now syncs in the appending task, see `store::sync`; `cargo run --release
//! -p locksmith-raft --example append_latency`): **p50 160–180 µs, p90 ~230 µs, p99
//! 0.4–0.8 ms**. A bare `pwrite` + `fdatasync` on the same disk at the same time took p50
//! 113 µs, p99 200 µs: the hand-off costs ~50 µs. A replicated write (three nodes in one
//! process over loopback gRPC, sequential `client_write`s, each returning once applied on the
//! leader) took 0.7–0.95 ms in a release build, ~4 ms in a debug build.
//!
//! # Reading the replicated state, following leadership
//! [`RaftNode::replica`] is the state with the log id it reflects. On a follower it trails the
//! leader. [`RaftNode::leadership`] is a watch of term, leader id and role that changes only when
//! they do; on the leader, [`Leadership::ready`] tells when its state holds everything committed
//! by earlier leaders (its first entry of the term is applied), which is when a new leader may
//! start acting on it, after extending leases by [`RaftNode::failover_time`].
//! [`RaftNode::barrier`] gives a linearizable point (leadership confirmed by a quorum).
//!
//! # Cluster changes
//! Form a cluster by starting every node with the same `peers`; add a node by starting it with
//! no peers, then [`RaftNode::add_voter`] on the leader (a learner first, a voter once it caught
//! up; [`RaftNode::add_learner`] and [`RaftNode::change_membership`] are the steps on their
//! own); remove one with [`RaftNode::remove_node`]. A node whose directory was lost is removed
//! first, then added back like a new one (it forgot its vote). [`RaftNode::cluster`] is a
//! node's [`ClusterStatus`]: members, roles, the leader and how far each member's log is.
#![warn(missing_docs, missing_debug_implementations, unreachable_pub, rust_2018_idioms)]
// openraft's storage traits return its `StorageError` (224 bytes): helpers returning it too are
// the natural shape, and errors are rare.
#![allow(clippy::result_large_err)]

mod config;
pub mod error;
#[cfg(feature = "test-fixture")]
pub mod fixture;
mod identity;
pub mod latency;
mod leadership;
mod membership;
pub mod network;
mod node;
pub mod state_machine;
pub mod store;
mod timings;
pub mod types;

pub use config::NodeConfig;
pub use error::ClientWriteError;
pub use error::LeaderHint;
pub use error::MembershipError;
pub use error::StartError;
pub use error::StoreError;
pub use leadership::Leadership;
pub use membership::Added;
pub use membership::ClusterNode;
pub use membership::ClusterStatus;
pub use membership::NodeRole;
pub use membership::Removed;
pub use network::NodeAuth;
pub use network::PeerCa;
pub use network::PeerCertError;
pub use network::Refusal;
pub use node::RaftNode;
pub use node::MAX_COMMAND;
pub use state_machine::Replica;
pub use state_machine::Replicated;
pub use timings::{TimingError, Timings, ELECTION_HEARTBEATS, MAX_ELECTION_TIMEOUT, MIN_HEARTBEAT};
pub use types::Command;
pub use types::Node;
pub use types::NodeId;

/// `tracing` filter directives that keep openraft's expected noise out of a node's log:
/// openraft logs every failed replication or vote call at ERROR (a peer not started yet,
/// restarting, or down), and each failed heartbeat and stale vote answer at WARN, all routine
/// in a cluster's life. The node's own lines say when a peer stops answering and when it
/// answers again (`locksmith_raft` at warn and info; a peer never heard from yet, at start-up,
/// at debug); openraft's other errors stay visible.
///
/// ```
/// let filter = format!("info,{}", locksmith_raft::QUIET_OPENRAFT);
/// assert!(filter.contains("openraft::replication=off"));
/// ```
pub const QUIET_OPENRAFT: &str =
    "openraft=error,openraft::replication=off,openraft::engine=off,openraft::core::raft_core=off";
