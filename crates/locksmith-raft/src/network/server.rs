//! The `locksmith.raft.v1.Raft` service: decodes openraft's request, hands it to the local
//! node, encodes its result.

use serde::de::DeserializeOwned;
use serde::Serialize;
use tonic::Request;
use tonic::Response;
use tonic::Status;

use super::pb;
use super::pb::raft_server::RaftServer;
use super::pb::RaftReply;
use super::pb::RaftRequest;
use super::MAX_MESSAGE;
use crate::types::NodeId;
use crate::types::Raft;

/// The gRPC service of one node; add [`RaftService::into_server`] to a tonic router.
#[derive(Clone)]
pub struct RaftService {
    id: NodeId,
    raft: Raft,
}

impl std::fmt::Debug for RaftService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RaftService").field("id", &self.id).finish_non_exhaustive()
    }
}

impl RaftService {
    /// The service of node `id` driven by `raft`.
    pub fn new(id: NodeId, raft: Raft) -> Self {
        Self { id, raft }
    }

    /// The service as a tonic server, accepting messages as large as peers send.
    pub fn into_server(self) -> RaftServer<Self> {
        RaftServer::new(self).max_decoding_message_size(MAX_MESSAGE).max_encoding_message_size(MAX_MESSAGE)
    }

    fn decode<T: DeserializeOwned>(&self, request: Request<RaftRequest>) -> Result<T, Status> {
        let request = request.into_inner();
        if request.target != self.id {
            return Err(Status::failed_precondition(format!(
                "this is raft node {}, not node {}: the cluster's address for it is stale",
                self.id, request.target
            )));
        }
        postcard::from_bytes(&request.payload)
            .map_err(|e| Status::invalid_argument(format!("undecodable raft request: {e}")))
    }
}

fn reply<T: Serialize>(result: &T) -> Result<Response<RaftReply>, Status> {
    let payload = postcard::to_stdvec(result).map_err(|e| Status::internal(format!("raft reply: {e}")))?;
    Ok(Response::new(RaftReply { payload }))
}

#[tonic::async_trait]
impl pb::raft_server::Raft for RaftService {
    async fn append_entries(&self, request: Request<RaftRequest>) -> Result<Response<RaftReply>, Status> {
        let req = self.decode(request)?;
        reply(&self.raft.append_entries(req).await)
    }

    async fn vote(&self, request: Request<RaftRequest>) -> Result<Response<RaftReply>, Status> {
        let req = self.decode(request)?;
        reply(&self.raft.vote(req).await)
    }

    async fn install_snapshot(&self, request: Request<RaftRequest>) -> Result<Response<RaftReply>, Status> {
        let req = self.decode(request)?;
        reply(&self.raft.install_snapshot(req).await)
    }
}
