//! `locksmith.v1.Cluster`: the administration of a cluster (`locksmith cluster status|add|remove`)
//! over gRPC, on the server's own port. Any node answers `Status` from its own Raft state; a
//! membership change runs on the leader ([`RaftNode::add_voter`], [`RaftNode::remove_node`]),
//! and another node sends the client there like the lock service does.
//!
//! With an auth policy, `Status` is open to every authenticated principal (it shows node ids
//! and addresses, no lock). Changing the membership needs a node credential — a node proof
//! made with the cluster secret (`locksmith cluster add --cluster-secret-file`), or, with
//! `--peer-ca`, a member's node certificate as the caller's TLS certificate (`cert=`/`key=` of
//! the URL) — or, under an auth policy, an admin principal: a principal that may lock some names, and an anonymous
//! client of a cluster without a policy, must not be able to take the cluster's quorum apart.

use std::sync::Arc;
use std::time::Duration;

use locksmith_proto::cluster_node::Role as PbRole;
use locksmith_proto::cluster_server::{Cluster, ClusterServer};
use locksmith_proto::{
    AddNodeRequest, AddNodeResponse, ClusterNode, ClusterStatus, ClusterStatusRequest, RemoveNodeRequest,
    RemoveNodeResponse,
};
use locksmith_raft::{Added, MembershipError, NodeRole, PeerCa, PeerCertError, RaftNode, Removed};
use tonic::{Request, Response, Status};

use super::{check_addr, ReplicaMachine};
use crate::auth::Auth;
use crate::grpc::{authenticate, not_serving, MAX_MESSAGE_SIZE};
use crate::node_proof::{ClusterSecret, ADD_NODE, NODE_PROOF_HEADER, OPERATOR, REMOVE_NODE};

/// How far from this node's clock the time in an operator's node proof may be: a proof seen on
/// the wire cannot be replayed later than this.
const PROOF_WINDOW: Duration = Duration::from_secs(300);

/// How long a membership change may take when the request does not say.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);
/// The longest a membership change may take, whatever the request says.
const MAX_TIMEOUT: Duration = Duration::from_secs(600);

/// The `Cluster` service of one server: `node` is its Raft node, `None` on a server that is
/// not a cluster (which refuses every call with `FAILED_PRECONDITION`).
#[derive(Debug, Clone)]
pub(crate) struct Admin {
    node: Option<Arc<RaftNode<ReplicaMachine>>>,
    auth: Option<Auth>,
    secret: Option<ClusterSecret>,
    peer_ca: Option<PeerCa>,
}

impl Admin {
    /// The tonic service, ready for the server's router.
    pub(crate) fn server(
        node: Option<Arc<RaftNode<ReplicaMachine>>>,
        auth: Option<Auth>,
        secret: Option<ClusterSecret>,
        peer_ca: Option<PeerCa>,
    ) -> ClusterServer<Self> {
        ClusterServer::new(Self { node, auth, secret, peer_ca }).max_decoding_message_size(MAX_MESSAGE_SIZE)
    }

    fn node(&self) -> Result<&RaftNode<ReplicaMachine>, Status> {
        self.node.as_deref().ok_or_else(|| {
            Status::failed_precondition(
                "this server is not a cluster: it was started without --node-id and runs alone (start nodes with \
                 `locksmith serve --node-id N --peers …` or `--join`)",
            )
        })
    }

    /// Who may change the membership: the holder of the cluster secret (a node proof for `call`
    /// covering the request), or an admin principal of the policy. Returns who, for the log.
    fn changer<T: prost::Message>(&self, call: &'static str, request: &Request<T>) -> Result<String, Status> {
        let refuse = |reason, status| {
            crate::telemetry::raft_refused(call_label(call), reason);
            tracing::warn!(call, reason, peer = ?request.remote_addr(), "cluster: membership change refused");
            status
        };
        // A member's node certificate. One the peer CA did not sign is a client's: its holder is
        // judged as a principal below.
        if let (Some(ca), Some(chain)) = (&self.peer_ca, request.peer_certs()) {
            match ca.node_id(&chain) {
                Ok(id) => {
                    let member = self.node()?.cluster().nodes.iter().any(|m| m.id == id);
                    if !member {
                        return Err(refuse(
                            "not_a_member",
                            Status::permission_denied(format!(
                                "the node certificate names node {id}, which is no member of this cluster"
                            )),
                        ));
                    }
                    return Ok(format!("node {id} (node certificate)"));
                }
                Err(PeerCertError::NoNodeId | PeerCertError::Ambiguous(..)) => {
                    return Err(refuse(
                        "bad_node_cert",
                        Status::permission_denied(
                            "a certificate of the peer CA that names no single node changes no membership",
                        ),
                    ));
                }
                Err(_) => {}
            }
        }
        if let Some(header) = request.metadata().get(NODE_PROOF_HEADER) {
            let Some(secret) = &self.secret else {
                return Err(refuse(
                    "bad_proof",
                    Status::unauthenticated("this server has no cluster secret to check a node proof with"),
                ));
            };
            let claim = header
                .to_str()
                .map_err(|_| crate::node_proof::ProofError::Malformed)
                .and_then(|h| secret.check(call, h))
                .map_err(|e| refuse("bad_proof", Status::unauthenticated(e.to_string())))?;
            let own = self.node.as_ref().map(|n| n.id());
            if !claim.covers(&request.get_ref().encode_to_vec()) {
                return Err(refuse(
                    "wrong_message",
                    Status::unauthenticated("the request is not the one its node proof covers"),
                ));
            }
            if claim.target != OPERATOR && Some(claim.target) != own {
                return Err(Status::failed_precondition(format!("the node proof is for node {}", claim.target)));
            }
            if !claim.fresh(PROOF_WINDOW) {
                return Err(refuse(
                    "bad_proof",
                    Status::unauthenticated(format!(
                        "the node proof was made more than {} s from this node's time: a replay, or a clock far off",
                        PROOF_WINDOW.as_secs()
                    )),
                ));
            }
            return Ok(match claim.sender {
                OPERATOR => "cluster secret".to_string(),
                n => format!("node {n}"),
            });
        }
        let principal = authenticate(self.auth.as_ref(), request).map_err(|s| refuse("no_proof", s))?;
        match principal {
            Some(p) if p.is_admin() => Ok(p.name),
            Some(p) => Err(refuse(
                "not_admin",
                Status::permission_denied(format!(
                    "{} may not change the cluster's membership (only an admin or the cluster secret may)",
                    p.name
                )),
            )),
            None => Err(refuse(
                "no_proof",
                Status::unauthenticated(
                    "changing the cluster's membership needs the cluster secret (locksmith cluster add|remove \
                     --cluster-secret-file FILE) or, on a server with --auth, an admin's token or certificate",
                ),
            )),
        }
    }
}

/// The metric label of a membership call.
fn call_label(call: &str) -> &'static str {
    if call.ends_with("AddNode") {
        "add_node"
    } else {
        "remove_node"
    }
}

#[tonic::async_trait]
impl Cluster for Admin {
    /// This node's view.
    ///
    /// # Cancel safety
    /// Cancel safe: read only.
    async fn status(&self, request: Request<ClusterStatusRequest>) -> Result<Response<ClusterStatus>, Status> {
        authenticate(self.auth.as_ref(), &request)?;
        Ok(Response::new(to_pb(&self.node()?.cluster())))
    }

    /// Adds a voter (see [`RaftNode::add_voter`]).
    ///
    /// # Cancel safety
    /// Not cancel safe: a dropped call may leave the node a learner, or a voter.
    async fn add_node(&self, request: Request<AddNodeRequest>) -> Result<Response<AddNodeResponse>, Status> {
        let node = self.node()?;
        let who = self.changer(ADD_NODE, &request)?;
        let who = who.as_str();
        let AddNodeRequest { id, addr, timeout_ms } = request.into_inner();
        check_addr(&addr).map_err(Status::invalid_argument)?;
        tracing::info!(node = id, %addr, principal = who, "cluster: adding a node");
        let added = node.add_voter(id, addr.clone(), limit(timeout_ms)).await.map_err(membership_status)?;
        match added {
            Added::AlreadyVoter => tracing::info!(node = id, %addr, "cluster: the node was a voter already"),
            _ => tracing::info!(node = id, %addr, principal = who, "cluster: node added as a voter"),
        }
        let status = Some(to_pb(&node.cluster()));
        Ok(Response::new(AddNodeResponse { status, already_voter: added == Added::AlreadyVoter }))
    }

    /// Removes a member (see [`RaftNode::remove_node`]).
    ///
    /// # Cancel safety
    /// Not cancel safe: a dropped call may leave the change done, or in its joint step.
    async fn remove_node(&self, request: Request<RemoveNodeRequest>) -> Result<Response<RemoveNodeResponse>, Status> {
        let node = self.node()?;
        let who = self.changer(REMOVE_NODE, &request)?;
        let who = who.as_str();
        let RemoveNodeRequest { id, timeout_ms } = request.into_inner();
        tracing::info!(node = id, principal = who, "cluster: removing a node");
        let removed = node.remove_node(id, limit(timeout_ms)).await.map_err(membership_status)?;
        let (was_member, was_leader) = match removed {
            Removed::Voter { was_leader } => (true, was_leader),
            Removed::NotAMember => (false, false),
            _ => (true, false),
        };
        if was_leader {
            tracing::info!(node = id, principal = who, "cluster: this node, the leader, was removed; it steps down");
        } else if was_member {
            tracing::info!(node = id, principal = who, "cluster: node removed");
        }
        let status = Some(to_pb(&node.cluster()));
        Ok(Response::new(RemoveNodeResponse { status, was_member, was_leader }))
    }
}

/// The time a change may take: what the request asks for (0: the default), at most the cap.
fn limit(timeout_ms: u64) -> Duration {
    match timeout_ms {
        0 => DEFAULT_TIMEOUT,
        ms => Duration::from_millis(ms).min(MAX_TIMEOUT),
    }
}

/// What a failed membership change tells the client.
fn membership_status(e: MembershipError) -> Status {
    match e {
        MembershipError::ForwardToLeader(hint) => not_serving(hint.addr),
        MembershipError::Invalid(m) => Status::invalid_argument(m),
        MembershipError::Timeout(m) => Status::deadline_exceeded(m),
        MembershipError::Rejected(m) => Status::aborted(m),
        MembershipError::Stopped(m) => Status::unavailable(format!("this node is stopping: {m}")),
        other => Status::unknown(other.to_string()),
    }
}

/// A view as the protocol carries it.
fn to_pb(view: &locksmith_raft::ClusterStatus) -> ClusterStatus {
    let nodes = view
        .nodes
        .iter()
        .map(|m| ClusterNode {
            id: m.id,
            addr: m.addr.clone(),
            role: match m.role {
                NodeRole::Leader => PbRole::Leader,
                NodeRole::Follower => PbRole::Follower,
                NodeRole::Learner => PbRole::Learner,
            } as i32,
            voter: m.voter,
            matched_index: m.matched_index,
            last_contact_ms: m.last_contact.map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
            unreachable: m.unreachable,
        })
        .collect();
    ClusterStatus {
        node_id: view.node_id,
        term: view.term,
        leader_id: view.leader,
        leader_addr: view.leader_addr().unwrap_or_default().to_string(),
        last_log_index: view.last_log_index,
        applied_index: view.applied_index,
        changing: view.changing,
        nodes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A request without a timeout gets the default; none may exceed the cap.
    #[test]
    fn timeouts_default_and_are_capped() {
        assert_eq!(limit(0), DEFAULT_TIMEOUT);
        assert_eq!(limit(1_500), Duration::from_millis(1_500));
        assert_eq!(limit(u64::MAX), MAX_TIMEOUT);
    }
}
