//! The `locksmith.raft.v1.Raft` service: decodes openraft's request, hands it to the local
//! node, encodes its result — once the call is known to come from a node of this cluster
//! (`gate`).

use std::sync::Arc;

use openraft::raft::AppendEntriesRequest;
use openraft::raft::InstallSnapshotRequest;
use openraft::raft::VoteRequest;
use serde::de::DeserializeOwned;
use serde::Serialize;
use tonic::Request;
use tonic::Response;
use tonic::Status;

use super::gate::Admitted;
use super::gate::Gate;
use super::gate::NodeAuth;
use super::gate::NodeGate;
use super::gate::Refusal;
use super::gate::MAX_TERM;
use super::pb;
use super::pb::raft_server::RaftServer;
use super::pb::RaftReply;
use super::pb::RaftRequest;
use super::MAX_MESSAGE;
use crate::identity::Identity;
use crate::types::NodeId;
use crate::types::Raft;
use crate::types::TypeConfig;
use crate::types::Vote;

/// The gRPC service of one node; add [`RaftService::into_server`] to a tonic router.
#[derive(Clone)]
pub struct RaftService {
    gate: Arc<Gate>,
    raft: Raft,
}

impl std::fmt::Debug for RaftService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RaftService").field("id", &self.gate.id()).finish_non_exhaustive()
    }
}

/// A Raft request and the vote it acts under.
trait Voted {
    fn vote(&self) -> &Vote;
}

impl Voted for VoteRequest<NodeId> {
    fn vote(&self) -> &Vote {
        &self.vote
    }
}

impl Voted for AppendEntriesRequest<TypeConfig> {
    fn vote(&self) -> &Vote {
        &self.vote
    }
}

impl Voted for InstallSnapshotRequest<TypeConfig> {
    fn vote(&self) -> &Vote {
        &self.vote
    }
}

impl RaftService {
    /// The service of node `id` driven by `raft`, authenticating its callers with `auth`
    /// (`None`: every caller is trusted, as on a private test network).
    pub(crate) fn new(id: NodeId, raft: Raft, auth: Option<NodeAuth>, identity: Arc<Identity>) -> Self {
        Self { gate: Arc::new(Gate::new(id, raft.clone(), auth, identity)), raft }
    }

    /// The service as a tonic server behind node authentication, accepting messages as large
    /// as peers send once the caller is authenticated.
    pub fn into_server(self) -> NodeGate<RaftServer<Self>> {
        let gate = self.gate.clone();
        let server =
            RaftServer::new(self).max_decoding_message_size(MAX_MESSAGE).max_encoding_message_size(MAX_MESSAGE);
        NodeGate::new(server, gate)
    }

    fn decode<T: DeserializeOwned + Voted>(
        &self,
        call: &'static str,
        request: Request<RaftRequest>,
    ) -> Result<T, Status> {
        let admitted = request.extensions().get::<Admitted>().cloned();
        let peer = request.remote_addr();
        let refuse = |reason, sender, status| self.gate.refuse(Refusal { call, reason, sender, peer }, status);
        let proven = match admitted {
            Some(Admitted::Proven { sender, claim }) => Some((sender, claim)),
            Some(Admitted::Unproven) => None,
            // Served without its gate: only acceptable when no proof is asked for.
            None if !self.gate.demands_proof() => None,
            None => return Err(refuse("no_proof", None, Status::unauthenticated("raft call without a node proof"))),
        };
        let request = request.into_inner();
        if request.target != self.gate.id() {
            return Err(Status::failed_precondition(format!(
                "this is raft node {}, not node {}: the cluster's address for it is stale",
                self.gate.id(),
                request.target
            )));
        }
        if let Some((_, Some(claim))) = &proven {
            if !claim.covers(&request.payload) {
                return Err(refuse(
                    "wrong_message",
                    Some(claim.sender),
                    Status::unauthenticated("the raft message is not the one its node proof covers"),
                ));
            }
        }
        let req: T = postcard::from_bytes(&request.payload)
            .map_err(|e| Status::invalid_argument(format!("undecodable raft request: {e}")))?;
        let leader = req.vote().leader_id;
        if let Some((sender, _)) = proven {
            if sender != leader.node_id {
                return Err(refuse(
                    "wrong_sender",
                    Some(sender),
                    Status::permission_denied(format!(
                        "node {sender} sent a raft request in the name of node {}",
                        leader.node_id
                    )),
                ));
            }
        }
        // openraft hears votes only from members of this node's cluster, and anything else only
        // from members unless a node proof vouches for its sender (the leader's log then tells
        // a member that missed it which change made that leader a member).
        if (call == "vote" || proven.is_none()) && !self.gate.is_member(leader.node_id) {
            return Err(refuse(
                "not_a_member",
                Some(leader.node_id),
                Status::permission_denied(format!("node {} is not a member of this node's cluster", leader.node_id)),
            ));
        }
        if leader.term > MAX_TERM {
            return Err(refuse(
                "bad_term",
                Some(leader.node_id),
                Status::invalid_argument(format!("term {} is beyond any real count of elections", leader.term)),
            ));
        }
        Ok(req)
    }
}

fn reply<T: Serialize>(result: &T) -> Result<Response<RaftReply>, Status> {
    let payload = postcard::to_stdvec(result).map_err(|e| Status::internal(format!("raft reply: {e}")))?;
    Ok(Response::new(RaftReply { payload }))
}

#[tonic::async_trait]
impl pb::raft_server::Raft for RaftService {
    async fn append_entries(&self, request: Request<RaftRequest>) -> Result<Response<RaftReply>, Status> {
        let started = crate::latency::start();
        let req = self.decode::<AppendEntriesRequest<TypeConfig>>("append_entries", request)?;
        let entries = req.entries.len();
        let result = reply(&self.raft.append_entries(req).await);
        crate::latency::done(started, "follower_append_entries", entries);
        result
    }

    async fn vote(&self, request: Request<RaftRequest>) -> Result<Response<RaftReply>, Status> {
        let req = self.decode::<VoteRequest<NodeId>>("vote", request)?;
        reply(&self.raft.vote(req).await)
    }

    async fn install_snapshot(&self, request: Request<RaftRequest>) -> Result<Response<RaftReply>, Status> {
        let req = self.decode::<InstallSnapshotRequest<TypeConfig>>("install_snapshot", request)?;
        reply(&self.raft.install_snapshot(req).await)
    }
}
