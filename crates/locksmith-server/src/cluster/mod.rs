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
//! fail-over), queued waiters re-sent by the clients as they resume, tokens above the floor
//! ([`takeover`], a pure function). A node that stops leading ends its streams; its clients
//! resume their sessions on the new leader. `leader` decides both for the service (which keeps
//! a thin call); `start` starts the Raft node for `serve`.
//!
//! Membership (`admin`): any node shows its view of the cluster, and the leader adds and
//! removes nodes (`locksmith cluster status|add|remove`) through the `locksmith.v1.Cluster`
//! service on the server's own port.
//!
//! All but [`ClusterOptions`], [`check_addr`] and [`takeover`] (pure) are the `cluster` feature.

#[cfg(feature = "cluster")]
pub(crate) mod admin;
#[cfg(feature = "cluster")]
pub(crate) mod committer;
#[cfg(feature = "cluster")]
mod leader;
#[cfg(feature = "cluster")]
mod replica;
#[cfg(feature = "cluster")]
mod start;
mod takeover;

#[cfg(feature = "cluster")]
pub(crate) use leader::{Change, Role};
#[cfg(feature = "cluster")]
pub(crate) use replica::encode;
#[cfg(feature = "cluster")]
pub use replica::ReplicaMachine;
#[cfg(feature = "cluster")]
pub(crate) use start::{peer_ca, start_raft};
pub use takeover::takeover;

/// Without the `cluster` feature no service is a cluster node's: a role that cannot exist.
#[cfg(not(feature = "cluster"))]
pub(crate) enum Role {}

#[cfg(not(feature = "cluster"))]
impl Role {
    pub(crate) fn serving(&self) -> bool {
        match *self {}
    }

    pub(crate) async fn changed(&mut self) {
        match *self {}
    }
}

use std::collections::BTreeMap;

/// A node's part in a cluster.
///
/// ```
/// use locksmith_server::cluster::ClusterOptions;
/// // One of three nodes forming a new cluster (`locksmith serve --node-id 1 --peers …`):
/// let peers = (1..=3).map(|id| (id, format!("10.0.0.{id}:7531"))).collect();
/// use locksmith_server::node_proof::ClusterSecret;
/// let secret = ClusterSecret::new(b"the same long random secret on every node")?;
/// let first = ClusterOptions::new(1, peers).secret(secret);
/// assert_eq!(first.peers.len(), 3);
/// // A node that waits to be added (`locksmith serve --node-id 4 --join`):
/// let joining = ClusterOptions::join(4);
/// assert!(joining.peers.is_empty());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ClusterOptions {
    /// This node's id.
    pub node_id: u64,
    /// Every voter's id and address (`host:port`, where its server listens for clients and
    /// peers alike), this node included, when the node forms a new cluster with them; empty
    /// when it joins an existing one. Only read while the data directory holds no cluster yet.
    pub peers: BTreeMap<u64, String>,
    /// Peers this node reaches at another address than the one in `peers` (a proxy, a tunnel):
    /// `peers` is the cluster's view, the same on every node; `routes` is this node's alone.
    pub routes: BTreeMap<u64, String>,
    /// The cluster secret every node is given: it proves this node's Raft calls and checks its
    /// peers' (`locksmith serve --cluster-secret-file`). A cluster does not start without it.
    pub secret: Option<locksmith_proto::node_proof::ClusterSecret>,
    /// Accept Raft calls that carry no node proof (one with a wrong proof is still refused):
    /// only while a running cluster is upgraded to node authentication, one node at a time.
    pub accept_unauthenticated_peers: bool,
    /// The leader's heartbeat interval (`--heartbeat`); `None`: the default. Every node of a
    /// cluster should use the same; see `locksmith_raft::Timings` for the bounds and trades.
    pub heartbeat: Option<std::time::Duration>,
    /// The election timeout's range `(min, max)` (`--election-timeout MIN..MAX`); `None`: the
    /// default.
    pub election_timeout: Option<(std::time::Duration, std::time::Duration)>,
}

/// Checks a node's address as the peers will dial it: `HOST:PORT`, the host a name or an IP
/// address (IPv6 in brackets), the port 1 to 65535. The one rule for `--peers`, `--routes`,
/// `locksmith cluster add` and the server's `AddNode`, so that an address one of them accepts
/// is never refused by another.
///
/// # Errors
/// What is wrong, naming `addr`.
pub fn check_addr(addr: &str) -> Result<(), String> {
    let bad = || {
        format!("{addr:?} is not HOST:PORT (a host name or IP address and a port from 1 to 65535, e.g. 10.0.0.4:7531)")
    };
    let (host, port) = addr.rsplit_once(':').ok_or_else(bad)?;
    let host_ok = !host.is_empty()
        && host.len() <= 253
        && host.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | ':' | '[' | ']'));
    match port.parse::<u16>() {
        Ok(p) if p != 0 && host_ok => Ok(()),
        _ => Err(bad()),
    }
}

/// The refusal of a node that does not lead, naming the leader when known.
pub(crate) fn not_leader(leader: Option<String>) -> crate::machine::Refusal {
    crate::machine::Refusal::NotLeader(leader.map_or_else(
        || "this node does not lead the cluster (no leader is known yet)".to_string(),
        |l| format!("this node does not lead the cluster; the leader is at {l}"),
    ))
}

impl ClusterOptions {
    /// Node `node_id` of the cluster `peers`: with a data directory that holds no cluster yet,
    /// it forms one with them (see [`RaftNode::start`](locksmith_raft::RaftNode::start)).
    pub fn new(node_id: u64, peers: BTreeMap<u64, String>) -> Self {
        Self {
            node_id,
            peers,
            routes: BTreeMap::new(),
            secret: None,
            accept_unauthenticated_peers: false,
            heartbeat: None,
            election_timeout: None,
        }
    }

    /// The same options with another heartbeat and/or election timeout (`None`: the default),
    /// checked when the node starts.
    pub fn timings(
        mut self,
        heartbeat: Option<std::time::Duration>,
        election_timeout: Option<(std::time::Duration, std::time::Duration)>,
    ) -> Self {
        self.heartbeat = heartbeat;
        self.election_timeout = election_timeout;
        self
    }

    /// The same options with the cluster secret.
    pub fn secret(mut self, secret: locksmith_proto::node_proof::ClusterSecret) -> Self {
        self.secret = Some(secret);
        self
    }

    /// The same options accepting Raft calls without a node proof when `accept` (during an
    /// upgrade; see [`accept_unauthenticated_peers`](Self::accept_unauthenticated_peers)).
    pub fn accept_unauthenticated_peers(mut self, accept: bool) -> Self {
        self.accept_unauthenticated_peers = accept;
        self
    }

    /// The same options, reaching the peers in `routes` at the addresses given there.
    pub fn routes(mut self, routes: BTreeMap<u64, String>) -> Self {
        self.routes = routes;
        self
    }

    /// Node `node_id` joining an existing cluster: with a data directory that holds no cluster
    /// yet, it waits until the leader adds it (`locksmith cluster add`); otherwise it restarts
    /// as the member its directory says it is.
    pub fn join(node_id: u64) -> Self {
        Self::new(node_id, BTreeMap::new())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Addresses are `HOST:PORT` with a real port; anything else is named as such.
    #[test]
    fn node_addresses_need_a_host_and_a_port() {
        for ok in ["127.0.0.1:7531", "locks-2.internal:7000", "[::1]:7531"] {
            assert_eq!(check_addr(ok), Ok(()), "{ok}");
        }
        for bad in ["", "7531", "host:", ":7531", "host:0", "host:99999", "a b:1", "h1:1,h2:2"] {
            assert!(check_addr(bad).is_err(), "{bad}");
        }
    }
}
