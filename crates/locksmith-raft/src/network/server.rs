//! The `locksmith.raft.v1.Raft` service: decodes openraft's request, hands it to the local
//! node, encodes its result — once the call is known to come from a node of this cluster
//! (`gate`).

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Instant;

use futures_util::Stream;

use openraft::raft::AppendEntriesRequest;
use openraft::raft::InstallSnapshotRequest;
use openraft::raft::VoteRequest;
use serde::de::DeserializeOwned;
use serde::Serialize;
use tonic::Request;
use tonic::Response;
use tonic::Status;
use tonic::Streaming;

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
use super::pb::RaftStreamRequest;
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
    /// Whether `AppendEntriesStream` is served (see [`NodeConfig::legacy_transport`](crate::NodeConfig)).
    stream: bool,
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
        Self { gate: Arc::new(Gate::new(id, raft.clone(), auth, identity)), raft, stream: true }
    }

    /// The same service answering `UNIMPLEMENTED` to `AppendEntriesStream`, as a node older
    /// than the stream does (tests of a rolling upgrade).
    pub(crate) fn without_stream(mut self) -> Self {
        self.stream = false;
        self
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
        let request = request.into_inner();
        self.check(call, admitted, peer, request.target, &request.payload)
    }

    /// What the service checks of every message once the gate admitted its call (`admitted`,
    /// `None` when served without the gate), before and after decoding it.
    fn check<T: DeserializeOwned + Voted>(
        &self,
        call: &'static str,
        admitted: Option<Admitted>,
        peer: Option<SocketAddr>,
        target: NodeId,
        payload: &[u8],
    ) -> Result<T, Status> {
        let refuse = |reason, sender, status| self.gate.refuse(Refusal { call, reason, sender, peer }, status);
        let proven = match admitted {
            Some(Admitted::Proven { sender, claim }) => Some((sender, claim)),
            Some(Admitted::Unproven) => None,
            // Served without its gate: only acceptable when no proof is asked for.
            None if !self.gate.demands_proof() => None,
            None => return Err(refuse("no_proof", None, Status::unauthenticated("raft call without a node proof"))),
        };
        if target != self.gate.id() {
            return Err(Status::failed_precondition(format!(
                "this is raft node {}, not node {}: the cluster's address for it is stale",
                self.gate.id(),
                target
            )));
        }
        if let Some((_, Some(claim))) = &proven {
            if !claim.covers(payload) {
                return Err(refuse(
                    "wrong_message",
                    Some(claim.sender),
                    Status::unauthenticated("the raft message is not the one its node proof covers"),
                ));
            }
        }
        let req: T = postcard::from_bytes(payload)
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

    /// Hands `req` (its message arrived at `started`) to this node's Raft core: its encoded
    /// reply, and whether the core has stopped.
    async fn append(
        &self,
        started: Option<Instant>,
        req: AppendEntriesRequest<TypeConfig>,
    ) -> Result<(RaftReply, bool), Status> {
        let entries = req.entries.len();
        let result = self.raft.append_entries(req).await;
        let stopped = matches!(result, Err(openraft::error::RaftError::Fatal(_)));
        let encoded = reply(&result);
        crate::latency::done(started, "follower_append_entries", entries);
        Ok((encoded?, stopped))
    }
}

/// One replication stream as the service sees it: the messages it reads, what the gate admitted
/// at its opening, and whether a refusal ended it.
struct Incoming {
    service: RaftService,
    messages: Streaming<RaftStreamRequest>,
    opened: Option<Admitted>,
    peer: Option<SocketAddr>,
    ended: bool,
}

impl Incoming {
    /// The reply to the next message; `None` once the sender closed the stream. The stream ends
    /// after a message that failed or was refused, and after the reply of this node's stopped
    /// Raft core (the node is shutting down: the stream must not keep its connection open).
    async fn next_reply(&mut self) -> Option<Result<RaftReply, Status>> {
        let reply = match self.messages.message().await {
            Ok(Some(message)) => self.answer(message).await,
            Ok(None) => return None,
            Err(status) => Err(status),
        };
        self.ended = !matches!(reply, Ok((_, false)));
        Some(reply.map(|(reply, _)| reply))
    }

    /// The reply to `message`, and whether this node's Raft core has stopped.
    async fn answer(&self, message: RaftStreamRequest) -> Result<(RaftReply, bool), Status> {
        let started = crate::latency::start();
        let gate = &self.service.gate;
        let cluster = match message.cluster.len() {
            0 => 0,
            16 => message.cluster.iter().fold(0u128, |c, b| c << 8 | u128::from(*b)),
            n => return Err(Status::invalid_argument(format!("a cluster id of {n} bytes, not 16"))),
        };
        // Each message is admitted as its own call would be, from its proof alone, before its
        // payload is decoded.
        let admitted = match &self.opened {
            Some(opened) => Some(gate.admit_message(opened, &message.proof, cluster, self.peer)?),
            None => None,
        };
        let req = self.service.check::<AppendEntriesRequest<TypeConfig>>(
            "append_entries",
            admitted,
            self.peer,
            message.target,
            &message.payload,
        )?;
        self.service.append(started, req).await
    }
}

/// The replies of a replication stream, one per message, in order; a refused message ends it
/// with its status.
type Replies = Pin<Box<dyn Stream<Item = Result<RaftReply, Status>> + Send>>;

/// The reply carrying openraft's `result`.
fn reply<T: Serialize>(result: &T) -> Result<RaftReply, Status> {
    let payload = super::encode(result).map_err(|e| Status::internal(format!("raft reply: {e}")))?;
    Ok(RaftReply { payload })
}

#[tonic::async_trait]
impl pb::raft_server::Raft for RaftService {
    async fn append_entries(&self, request: Request<RaftRequest>) -> Result<Response<RaftReply>, Status> {
        let started = crate::latency::start();
        let req = self.decode::<AppendEntriesRequest<TypeConfig>>("append_entries", request)?;
        let (reply, _) = self.append(started, req).await?;
        Ok(Response::new(reply))
    }

    type AppendEntriesStreamStream = Replies;

    async fn append_entries_stream(
        &self,
        request: Request<Streaming<RaftStreamRequest>>,
    ) -> Result<Response<Replies>, Status> {
        if !self.stream {
            return Err(Status::unimplemented("AppendEntriesStream is not served by this node"));
        }
        let opened = request.extensions().get::<Admitted>().cloned();
        if opened.is_none() && self.gate.demands_proof() {
            return Err(self.gate.refuse(
                Refusal { call: "append_entries", reason: "no_proof", sender: None, peer: request.remote_addr() },
                Status::unauthenticated("raft call without a node proof"),
            ));
        }
        let peer = request.remote_addr();
        let incoming = Incoming { service: self.clone(), messages: request.into_inner(), opened, peer, ended: false };
        // Lazily: a message is read and handed to openraft only while the sender still reads
        // the replies; when it drops the stream, the work on its last message is dropped too.
        let replies = futures_util::stream::unfold(incoming, |mut incoming| async move {
            if incoming.ended {
                return None;
            }
            let reply = incoming.next_reply().await?;
            Some((reply, incoming))
        });
        Ok(Response::new(Box::pin(replies)))
    }

    async fn vote(&self, request: Request<RaftRequest>) -> Result<Response<RaftReply>, Status> {
        let req = self.decode::<VoteRequest<NodeId>>("vote", request)?;
        reply(&self.raft.vote(req).await).map(Response::new)
    }

    async fn install_snapshot(&self, request: Request<RaftRequest>) -> Result<Response<RaftReply>, Status> {
        let req = self.decode::<InstallSnapshotRequest<TypeConfig>>("install_snapshot", request)?;
        reply(&self.raft.install_snapshot(req).await).map(Response::new)
    }
}
