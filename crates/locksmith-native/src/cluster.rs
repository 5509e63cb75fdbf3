//! Cluster administration through a [`NativeBackend`] (`locksmith cluster status|add|remove`):
//! the server's `locksmith.v1.Cluster` service, reached like every other call. Give the backend
//! every node (`locksmith://h1:p1,h2:p2,h3:p3`): membership changes go to the leader, following
//! the `locksmith-leader` hint of a node that does not lead, and a status prefers the leader's
//! view (only the leader knows how far each node's log is).

use std::sync::Arc;
use std::time::Duration;

use locksmith_core::Error;
use locksmith_proto::cluster_client::ClusterClient;
use locksmith_proto::cluster_node::Role as PbRole;
use locksmith_proto::node_proof::{self, ClusterSecret};
use locksmith_proto::{AddNodeRequest, ClusterStatusRequest, RemoveNodeRequest};

use crate::grpc::{Failed, GrpcConnector, Peer, CONNECT_TIMEOUT};
use crate::route::NodeBound;
use crate::NativeBackend;

/// What a member does in the cluster, as the reporting node sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum NodeRole {
    /// It leads.
    Leader,
    /// A voter that follows the leader.
    Follower,
    /// It receives the log but does not vote.
    Learner,
}

impl NodeRole {
    /// `leader`, `follower` or `learner`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Leader => "leader",
            Self::Follower => "follower",
            Self::Learner => "learner",
        }
    }
}

/// One member of a cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ClusterNode {
    /// Its node id.
    pub id: u64,
    /// Its `host:port`.
    pub addr: String,
    /// Leader, follower or learner.
    pub role: NodeRole,
    /// Whether it votes.
    pub voter: bool,
    /// The last log index the leader knows it stored; only in the leader's view.
    pub matched_index: Option<u64>,
    /// How long ago it last answered the leader; only in the leader's view (`None` for the
    /// leader, and for a node that never answered it).
    pub last_contact: Option<Duration>,
    /// The leader has had no answer from it for longer than an election timeout; only in the
    /// leader's view.
    pub unreachable: bool,
    /// It did not answer this client's status call within the bound (`false` when it was not
    /// asked: a node reported by the others, or the status came from the leader first).
    pub silent: bool,
}

/// One node's view of the cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ClusterStatus {
    /// The node whose view this is.
    pub node_id: u64,
    /// Its current term.
    pub term: u64,
    /// The leader, when known.
    pub leader: Option<u64>,
    /// The leader's `host:port`, when known.
    pub leader_addr: Option<String>,
    /// The index of the last entry in its log.
    pub last_log_index: Option<u64>,
    /// The index of the last entry it applied.
    pub applied_index: Option<u64>,
    /// A membership change is under way.
    pub changing: bool,
    /// The members, in id order (empty on a node that waits to be added).
    pub nodes: Vec<ClusterNode>,
}

impl ClusterStatus {
    /// Whether this is the leader's own view (with each node's matched index).
    pub fn is_leader_view(&self) -> bool {
        self.leader == Some(self.node_id)
    }

    /// The voters.
    pub fn voters(&self) -> impl Iterator<Item = &ClusterNode> {
        self.nodes.iter().filter(|n| n.voter)
    }
}

/// What [`NativeBackend::add_node`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct NodeAdded {
    /// The leader's view afterwards.
    pub status: ClusterStatus,
    /// The node was a voter at that address already; nothing changed.
    pub already_voter: bool,
}

/// What [`NativeBackend::remove_node`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct NodeRemoved {
    /// The view of the node that made the change (the old leader's, when it removed itself).
    pub status: ClusterStatus,
    /// It was a member; `false`: nothing changed.
    pub was_member: bool,
    /// It was the leader: it steps down, and the other voters elect a new one.
    pub was_leader: bool,
}

/// Why a cluster administration call failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClusterError {
    /// The server runs alone (started without `--node-id`), or predates cluster administration.
    #[error("{backend}: {message}")]
    NotACluster {
        /// The backend URL (without credentials).
        backend: String,
        /// What the server said.
        message: String,
    },
    /// The change contradicts the cluster as it is: removing the last voter, a node id that is
    /// a member at another address, an address that is not `HOST:PORT`.
    #[error("{backend} refused the change: {message}")]
    Refused {
        /// The backend URL.
        backend: String,
        /// Why.
        message: String,
    },
    /// The change did not complete in time (a new node did not catch up, no quorum committed
    /// it); the message says how far it got. Running the same command again resumes it.
    #[error("{backend}: {message}")]
    TimedOut {
        /// The backend URL.
        backend: String,
        /// How far it got.
        message: String,
    },
    /// The leader could not make the change now (another change in progress): try again.
    #[error("{backend} could not change the membership now: {message}")]
    Busy {
        /// The backend URL.
        backend: String,
        /// Why.
        message: String,
    },
    /// The call did not get that far: the server is unreachable, refused the credentials
    /// ([`Error::Auth`], also for a principal that is not an admin), or the TLS configuration
    /// is wrong.
    #[error(transparent)]
    Client(#[from] Error),
}

impl NativeBackend {
    /// A node's view of the cluster within 6 s (see
    /// [`cluster_status_within`](Self::cluster_status_within)).
    ///
    /// # Errors
    /// As [`cluster_status_within`](Self::cluster_status_within).
    ///
    /// # Cancel safety
    /// Cancel safe: read only.
    pub async fn cluster_status(&self) -> Result<ClusterStatus, ClusterError> {
        self.cluster_status_within(CONNECT_TIMEOUT * 2).await
    }

    /// A node's view of the cluster, within `limit`: every node this backend knows is asked
    /// at once, and the leader's view (the only one with each node's progress, last contact
    /// and reachability) is the answer as soon as it comes; a leader that a node names but
    /// the backend had not asked is asked next. Otherwise, once every node answered or
    /// `limit` passed, the view of the answering node with the highest term. Nodes that did not
    /// answer within `limit` are marked [`silent`](ClusterNode::silent): a node or two that
    /// hang cost `limit`, never the answer.
    ///
    /// ```no_run
    /// # async fn show() -> Result<(), Box<dyn std::error::Error>> {
    /// let url = "locksmith://10.0.0.1:7531,10.0.0.2:7531,10.0.0.3:7531";
    /// let backend = locksmith_native::NativeBackend::from_url(url)?;
    /// let status = backend.cluster_status_within(std::time::Duration::from_secs(2)).await?;
    /// for n in &status.nodes {
    ///     println!("{} {} {} unreachable={}", n.id, n.addr, n.role.as_str(), n.unreachable || n.silent);
    /// }
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// [`ClusterError::NotACluster`]; [`ClusterError::Client`] when no node answered or the
    /// credentials were refused.
    ///
    /// # Cancel safety
    /// Cancel safe: read only.
    pub async fn cluster_status_within(&self, limit: Duration) -> Result<ClusterStatus, ClusterError> {
        use futures_util::stream::{FuturesUnordered, StreamExt};
        let inner = &self.inner;
        let deadline = tokio::time::Instant::now() + limit;
        let ask = |peer: Arc<Peer>| async move {
            let mut client = ClusterClient::new(peer.channel());
            let call = client.status(inner.request(ClusterStatusRequest {}));
            let answer = match tokio::time::timeout_at(deadline, call).await {
                Ok(Ok(a)) => Ok(from_pb(a.into_inner())),
                Ok(Err(status)) => Err(status),
                Err(_) => Err(tonic::Status::unavailable(format!("{} did not answer within {limit:?}", peer.addr))),
            };
            (peer, answer)
        };
        let mut asked: Vec<String> = Vec::new();
        let mut calls = FuturesUnordered::new();
        for peer in inner.peers() {
            asked.push(peer.addr.clone());
            calls.push(ask(peer));
        }
        let mut best: Option<ClusterStatus> = None;
        let mut failures: Vec<Failed> = Vec::new();
        let mut answered: Vec<String> = Vec::new();
        while let Some((peer, answer)) = calls.next().await {
            let view = match answer {
                Ok(view) => view,
                Err(status) => {
                    failures.push(Failed { peer: Some(peer), status });
                    continue;
                }
            };
            answered.push(peer.addr.clone());
            if view.is_leader_view() {
                return Ok(view);
            }
            // A leader named but not asked (a URL naming one node, or a node added since).
            if let Some(addr) = view.leader_addr.as_deref().filter(|a| !asked.iter().any(|x| x == a)) {
                if let Some(leader) = inner.follow_hint(addr) {
                    asked.push(leader.addr.clone());
                    calls.push(ask(leader));
                }
            }
            if best.as_ref().is_none_or(|b| view.term > b.term) {
                best = Some(view);
            }
        }
        match best {
            Some(mut view) => {
                for n in &mut view.nodes {
                    n.silent = asked.contains(&n.addr) && !answered.contains(&n.addr);
                }
                Ok(view)
            }
            None => {
                // A refusal (not a cluster, credentials) says more than a node that is down.
                let first = failures.iter().position(|f| f.status.code() != tonic::Code::Unavailable).unwrap_or(0);
                match failures.into_iter().nth(first) {
                    Some(f) => Err(cluster_error(inner, f).await),
                    None => {
                        Err(ClusterError::Client(Error::Internal("a native backend without a server address".into())))
                    }
                }
            }
        }
    }

    /// Adds node `id`, listening at `addr` (`host:port`, started with `locksmith serve
    /// --node-id ID --join`), to the cluster as a voter: the leader adds it as a learner, waits
    /// until it has caught up with the log, then promotes it. The whole change may take
    /// `timeout` (the server caps it at 10 minutes); a node that has not caught up by then
    /// stays a learner, and calling again promotes it. Adding a voter at its own address again
    /// changes nothing.
    ///
    /// # Errors
    /// [`ClusterError::NotACluster`], [`ClusterError::Refused`], [`ClusterError::TimedOut`],
    /// [`ClusterError::Busy`], [`ClusterError::Client`] (with [`Error::Auth`] for a principal
    /// that is not an admin).
    ///
    /// # Cancel safety
    /// Not cancel safe: the leader goes on; the node may end up a learner or a voter (see
    /// [`cluster_status`](Self::cluster_status)).
    pub async fn add_node(&self, id: u64, addr: &str, timeout: Duration) -> Result<NodeAdded, ClusterError> {
        self.add_node_with(id, addr, timeout, None).await
    }

    /// [`add_node`](Self::add_node), proven with the cluster secret when `secret` is given: the
    /// node credential, which a cluster accepts instead of an admin principal (and which a
    /// cluster without `--auth` demands).
    ///
    /// # Errors
    /// As [`add_node`](Self::add_node).
    ///
    /// # Cancel safety
    /// As [`add_node`](Self::add_node).
    pub async fn add_node_with(
        &self,
        id: u64,
        addr: &str,
        timeout: Duration,
        secret: Option<&ClusterSecret>,
    ) -> Result<NodeAdded, ClusterError> {
        let inner = &self.inner;
        let req = AddNodeRequest { id, addr: addr.to_string(), timeout_ms: timeout_ms(timeout) };
        let answer = inner
            .on_leader_raw(timeout + CONNECT_TIMEOUT * 3, NodeBound::Whole, |channel| {
                let request = proven(inner.request(req.clone()), node_proof::ADD_NODE, secret);
                async move { ClusterClient::new(channel).add_node(request).await }
            })
            .await;
        let answer = match answer {
            Ok(a) => a.into_inner(),
            Err(f) => return Err(cluster_error(inner, f).await),
        };
        let status = answer.status.ok_or_else(|| missing("an add_node answer"))?;
        Ok(NodeAdded { status: from_pb(status), already_voter: answer.already_voter })
    }

    /// Removes node `id` (a voter or a learner) from the cluster, within `timeout`. Removing
    /// the leader is allowed: it steps down once the change is committed, and the other voters
    /// elect a new leader. Removing the last voter is refused; removing a node that is no
    /// member changes nothing.
    ///
    /// # Errors
    /// As [`add_node`](Self::add_node).
    ///
    /// # Cancel safety
    /// Not cancel safe: the leader goes on with the change.
    pub async fn remove_node(&self, id: u64, timeout: Duration) -> Result<NodeRemoved, ClusterError> {
        self.remove_node_with(id, timeout, None).await
    }

    /// [`remove_node`](Self::remove_node), proven with the cluster secret when `secret` is
    /// given (see [`add_node_with`](Self::add_node_with)).
    ///
    /// # Errors
    /// As [`add_node`](Self::add_node).
    ///
    /// # Cancel safety
    /// Not cancel safe: the leader goes on with the change.
    pub async fn remove_node_with(
        &self,
        id: u64,
        timeout: Duration,
        secret: Option<&ClusterSecret>,
    ) -> Result<NodeRemoved, ClusterError> {
        let inner = &self.inner;
        let req = RemoveNodeRequest { id, timeout_ms: timeout_ms(timeout) };
        let answer = inner
            .on_leader_raw(timeout + CONNECT_TIMEOUT * 3, NodeBound::Whole, |channel| {
                let request = proven(inner.request(req), node_proof::REMOVE_NODE, secret);
                async move { ClusterClient::new(channel).remove_node(request).await }
            })
            .await;
        let answer = match answer {
            Ok(a) => a.into_inner(),
            Err(f) => return Err(cluster_error(inner, f).await),
        };
        let status = answer.status.ok_or_else(|| missing("a remove_node answer"))?;
        Ok(NodeRemoved { status: from_pb(status), was_member: answer.was_member, was_leader: answer.was_leader })
    }
}

/// `request` with an operator's node proof made with `secret`, when given.
fn proven<T: prost::Message>(
    mut request: tonic::Request<T>,
    call: &str,
    secret: Option<&ClusterSecret>,
) -> tonic::Request<T> {
    if let Some(secret) = secret {
        let proof =
            secret.prove(call, node_proof::OPERATOR, node_proof::OPERATOR, 0, &request.get_ref().encode_to_vec());
        // Hex digits and dots only: always a valid header value.
        if let Ok(value) = tonic::metadata::MetadataValue::try_from(proof) {
            request.metadata_mut().insert(node_proof::NODE_PROOF_HEADER, value);
        }
    }
    request
}

/// `timeout` in whole milliseconds, at least one (zero would mean the server's default).
fn timeout_ms(timeout: Duration) -> u64 {
    u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX).max(1)
}

fn missing(what: &str) -> Error {
    Error::Protocol(format!("{what} without the cluster's status"))
}

/// What a failed administration call means.
async fn cluster_error(inner: &GrpcConnector, f: Failed) -> ClusterError {
    use tonic::Code;
    let backend = inner.url.clone();
    let message = f.status.message().to_string();
    match f.status.code() {
        Code::FailedPrecondition => ClusterError::NotACluster { backend, message },
        Code::Unimplemented => ClusterError::NotACluster {
            backend,
            message: "this server is not a cluster: it offers no cluster administration (a locksmith server from before `locksmith \
                      cluster`)"
                .into(),
        },
        Code::InvalidArgument => ClusterError::Refused { backend, message },
        Code::DeadlineExceeded => ClusterError::TimedOut { backend, message },
        Code::Aborted => ClusterError::Busy { backend, message },
        _ => ClusterError::Client(inner.failure(&f).await),
    }
}

/// A status as the protocol carries it.
fn from_pb(s: locksmith_proto::ClusterStatus) -> ClusterStatus {
    let nodes = s
        .nodes
        .into_iter()
        .map(|n| {
            let role = match PbRole::try_from(n.role) {
                Ok(PbRole::Leader) => NodeRole::Leader,
                Ok(PbRole::Follower) => NodeRole::Follower,
                Ok(PbRole::Learner) => NodeRole::Learner,
                _ if n.voter => NodeRole::Follower,
                _ => NodeRole::Learner,
            };
            ClusterNode {
                id: n.id,
                addr: n.addr,
                role,
                voter: n.voter,
                matched_index: n.matched_index,
                last_contact: n.last_contact_ms.map(Duration::from_millis),
                unreachable: n.unreachable,
                silent: false,
            }
        })
        .collect();
    ClusterStatus {
        node_id: s.node_id,
        term: s.term,
        leader: s.leader_id,
        leader_addr: Some(s.leader_addr).filter(|a| !a.is_empty()),
        last_log_index: s.last_log_index,
        applied_index: s.applied_index,
        changing: s.changing,
        nodes,
    }
}
