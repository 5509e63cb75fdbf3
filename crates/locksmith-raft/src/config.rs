//! Timing and snapshot settings of a node.

use std::collections::BTreeMap;
use std::time::Duration;

use openraft::SnapshotPolicy;
use tonic::transport::ClientTlsConfig;

use crate::error::StartError;
use crate::timings::Timings;
use crate::types::NodeId;

/// Timing, snapshot and transport settings of a [`RaftNode`](crate::RaftNode). Every node of a
/// cluster should use the same timings.
///
/// The timings default to [`Timings::default`] (see [`Timings`] for what each trades and its
/// bounds, checked when the node starts). The lock server extends sessions by
/// [`RaftNode::failover_time`](crate::RaftNode::failover_time) after a leader change.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct NodeConfig {
    /// The heartbeat and election timeout (checked against their bounds when the node starts).
    pub timings: Timings,
    /// A snapshot is built once this many entries were applied since the last one.
    pub snapshot_after: u64,
    /// Entries kept in the log behind a snapshot, so that a follower lagging by less catches
    /// up from the log instead of receiving the whole snapshot.
    pub keep_after_snapshot: u64,
    /// Deadline of sending one snapshot chunk (1 MiB).
    pub snapshot_chunk_timeout: Duration,
    /// Deadline of establishing a connection to a peer.
    pub connect_timeout: Duration,
    /// How long to wait before retrying a peer whose connection was refused.
    pub unreachable_backoff: Duration,
    /// TLS for connections to peers (rustls on ring). The server side is the application's: it
    /// adds [`RaftNode::service`](crate::RaftNode::service) to its own TLS-configured router.
    pub tls: Option<ClientTlsConfig>,
    /// Addresses this node dials some peers at instead of the addresses in the cluster's
    /// membership: the membership holds one address per node for everyone, while this node may
    /// have to take another path to it (a proxy, a tunnel, another network). Also how the
    /// partition tests put a fault proxy between each pair of nodes. With initial peers given to
    /// [`RaftNode::start`](crate::RaftNode::start), it may only name nodes among them.
    pub routes: BTreeMap<NodeId, String>,
    /// Node authentication: the cluster secret that proves this node's calls and checks its
    /// peers', and/or the peer CA of node certificates (then [`tls`](Self::tls) must present
    /// this node's node certificate, and the router must serve TLS asking for client
    /// certificates of that CA). `None` trusts every caller of the Raft service, which lets anyone who reaches it
    /// rewrite the cluster's state: only for tests on a private network.
    pub auth: Option<crate::network::NodeAuth>,
    /// Tests only: act as a node older than the replication stream (`AppendEntriesStream`):
    /// answer it `UNIMPLEMENTED`, and send every AppendEntries as its own call.
    #[doc(hidden)]
    pub legacy_transport: bool,
}

impl Default for NodeConfig {
    fn default() -> Self {
        Self {
            timings: Timings::default(),
            snapshot_after: 10_000,
            keep_after_snapshot: 1_000,
            snapshot_chunk_timeout: Duration::from_secs(2),
            connect_timeout: Duration::from_millis(500),
            unreachable_backoff: Duration::from_millis(200),
            tls: None,
            routes: BTreeMap::new(),
            auth: None,
            legacy_transport: false,
        }
    }
}

/// Snapshot chunks are this large: one gRPC message each.
const SNAPSHOT_CHUNK: u64 = 1 << 20;

impl NodeConfig {
    /// The same settings with `timings`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use locksmith_raft::{NodeConfig, Timings};
    /// let ms = Duration::from_millis;
    /// let config = NodeConfig::default().with_timings(Timings::new(ms(100), ms(300), ms(600))?);
    /// assert_eq!(config.timings.election_timeout_max, ms(600));
    /// # Ok::<(), locksmith_raft::TimingError>(())
    /// ```
    #[must_use]
    pub fn with_timings(mut self, timings: Timings) -> Self {
        self.timings = timings;
        self
    }

    /// openraft's configuration for these settings.
    pub(crate) fn to_openraft(&self) -> Result<openraft::Config, StartError> {
        let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        let t = &self.timings;
        t.check()?;
        if self.snapshot_after == 0 {
            return Err(StartError::Config("snapshot_after must be at least 1".into()));
        }
        let config = openraft::Config {
            cluster_name: "locksmith".into(),
            heartbeat_interval: ms(t.heartbeat),
            election_timeout_min: ms(t.election_timeout_min),
            election_timeout_max: ms(t.election_timeout_max),
            install_snapshot_timeout: ms(self.snapshot_chunk_timeout),
            snapshot_policy: SnapshotPolicy::LogsSinceLast(self.snapshot_after),
            snapshot_max_chunk_size: SNAPSHOT_CHUNK,
            max_in_snapshot_log_to_keep: self.keep_after_snapshot,
            // Purge in batches: each purge writes a marker to the log.
            purge_batch_size: 64,
            ..Default::default()
        };
        config.validate().map_err(|e| StartError::Config(e.to_string()))
    }
}
