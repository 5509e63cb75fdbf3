//! openraft's [`RaftNetworkFactory`]: a tonic client per peer.

use std::collections::BTreeMap;
use std::collections::HashMap;
use std::error::Error;
use std::sync::Arc;
use std::sync::Mutex;
use std::time::Duration;
use std::time::Instant;

use locksmith_proto::node_proof::ClusterSecret;
use locksmith_proto::node_proof::NODE_PROOF_HEADER;
use openraft::error::InstallSnapshotError;
use openraft::error::NetworkError;
use openraft::error::PayloadTooLarge;
use openraft::error::RPCError;
use openraft::error::RaftError;
use openraft::error::RemoteError;
use openraft::error::Timeout;
use openraft::error::Unreachable;
use openraft::network::Backoff;
use openraft::network::RPCOption;
use openraft::network::RPCTypes;
use openraft::network::RaftNetwork;
use openraft::network::RaftNetworkFactory;
use openraft::raft::AppendEntriesRequest;
use openraft::raft::AppendEntriesResponse;
use openraft::raft::InstallSnapshotRequest;
use openraft::raft::InstallSnapshotResponse;
use openraft::raft::VoteRequest;
use openraft::raft::VoteResponse;
use openraft::AnyError;
use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::sync::mpsc;
use tonic::transport::Channel;
use tonic::transport::ClientTlsConfig;
use tonic::transport::Endpoint;

use super::contact::Contacts;
use super::gate::STREAM_PATH;
use super::pb::raft_client::RaftClient;
use super::pb::RaftReply;
use super::pb::RaftRequest;
use super::pb::RaftStreamRequest;
use super::MAX_MESSAGE;
use crate::identity::Identity;
use crate::types::Node;
use crate::types::NodeId;
use crate::types::TypeConfig;

/// How the nodes reach each other; one per node, handed to openraft.
#[derive(Debug, Clone)]
pub struct Network {
    /// This node (named in timeouts reported to openraft).
    id: NodeId,
    /// One channel per peer (id and address): openraft asks for a client per replication stream
    /// and per election round, and they all share the peer's HTTP/2 connection.
    channels: Arc<Mutex<HashMap<NodeId, (String, Channel)>>>,
    tls: Option<ClientTlsConfig>,
    connect_timeout: Duration,
    backoff: Duration,
    /// Peers this node reaches at another address than the membership's.
    routes: Arc<BTreeMap<NodeId, String>>,
    /// When each peer last answered.
    contacts: Contacts,
    /// Proves every call to come from this node (see [`Network::with_secret`]).
    secret: Option<ClusterSecret>,
    /// The cluster id every proof carries.
    identity: Option<Arc<Identity>>,
    /// Whether AppendEntries go over the replication stream (else one call each).
    stream: bool,
    /// Peers that do not serve the stream (older nodes), and when to try it again.
    legacy: Legacy,
}

/// Peers (id and the address dialled) that answered `UNIMPLEMENTED` to the replication stream,
/// and when to try it again: a node that comes back upgraded at another address is tried at once.
type Legacy = Arc<Mutex<HashMap<(NodeId, String), Instant>>>;

/// How long a peer that does not serve the replication stream gets unary calls before the
/// stream is tried again (it may have been upgraded meanwhile).
const RETRY_STREAM: Duration = Duration::from_secs(30);

impl Network {
    /// The network of node `id`, reaching peers in plain text, or with `tls` when given (then peers' addresses
    /// are dialled as `https://addr`; set the expected server name in `tls` when the
    /// certificates do not name the address). A connection attempt gives up after
    /// `connect_timeout`; a peer that is unreachable is retried every `backoff`. Peers in
    /// `routes` are dialled at the address given there instead of their membership address.
    pub fn new(
        id: NodeId,
        tls: Option<ClientTlsConfig>,
        connect_timeout: Duration,
        backoff: Duration,
        routes: BTreeMap<NodeId, String>,
    ) -> Self {
        Self {
            id,
            channels: Arc::default(),
            tls,
            connect_timeout,
            backoff,
            routes: Arc::new(routes),
            contacts: Contacts::default(),
            secret: None,
            identity: None,
            stream: true,
            legacy: Legacy::default(),
        }
    }

    /// The same network sending every AppendEntries as its own call, as nodes did before the
    /// replication stream (tests of a rolling upgrade).
    pub(crate) fn without_stream(mut self) -> Self {
        self.stream = false;
        self
    }

    /// When each peer last answered this node's calls.
    pub fn contacts(&self) -> Contacts {
        self.contacts.clone()
    }

    /// The same network, putting a node proof made with `secret` on every call (peers that
    /// authenticate nodes refuse calls without one).
    #[must_use]
    pub fn with_secret(mut self, secret: Option<ClusterSecret>) -> Self {
        self.secret = secret;
        self
    }

    pub(crate) fn with_identity(mut self, identity: Arc<Identity>) -> Self {
        self.identity = Some(identity);
        self
    }

    /// The address node `target` is dialled at: its route's when it has one, else `addr`, its
    /// membership address.
    fn dial_addr<'a>(&'a self, target: NodeId, addr: &'a str) -> &'a str {
        self.routes.get(&target).map_or(addr, String::as_str)
    }

    /// The channel to node `target`, dialled at `addr` (see [`Network::dial_addr`]).
    fn channel(&self, target: NodeId, addr: &str) -> Result<Channel, String> {
        // A poisoned map only means a panic elsewhere while inserting: the map itself is fine.
        let mut channels = self.channels.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((a, ch)) = channels.get(&target) {
            if a == addr {
                return Ok(ch.clone());
            }
        }
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        let mut endpoint = Endpoint::from_shared(format!("{scheme}://{addr}"))
            .map_err(|e| format!("node {target}: bad address {addr:?}: {e}"))?
            .connect_timeout(self.connect_timeout)
            .tcp_nodelay(true);
        if let Some(tls) = &self.tls {
            endpoint = endpoint.tls_config(tls.clone()).map_err(|e| format!("node {target}: TLS: {e}"))?;
        }
        // Lazily: nothing is dialled until the first RPC, and the channel reconnects by itself.
        let channel = endpoint.connect_lazy();
        channels.insert(target, (addr.to_string(), channel.clone()));
        Ok(channel)
    }
}

impl RaftNetworkFactory<TypeConfig> for Network {
    type Network = PeerClient;

    async fn new_client(&mut self, target: NodeId, node: &Node) -> PeerClient {
        let addr = self.dial_addr(target, &node.addr);
        let client = self.channel(target, addr).map(|ch| {
            RaftClient::new(ch).max_decoding_message_size(MAX_MESSAGE).max_encoding_message_size(MAX_MESSAGE)
        });
        PeerClient {
            id: self.id,
            target,
            node: node.clone(),
            client,
            backoff: self.backoff,
            contacts: self.contacts.clone(),
            secret: self.secret.clone(),
            identity: self.identity.clone(),
            stream: self.stream,
            legacy: self.legacy.clone(),
            legacy_key: (target, addr.to_owned()),
            replication: None,
        }
    }
}

/// The RPCs to one peer.
#[derive(Debug)]
pub struct PeerClient {
    id: NodeId,
    target: NodeId,
    node: Node,
    client: Result<RaftClient<Channel>, String>,
    backoff: Duration,
    contacts: Contacts,
    secret: Option<ClusterSecret>,
    identity: Option<Arc<Identity>>,
    stream: bool,
    legacy: Legacy,
    /// The peer's key in `legacy`: its id and the address dialled (the route's, or the
    /// membership's).
    legacy_key: (NodeId, String),
    /// The replication stream to the peer, once opened; taken out while a call uses it, so a
    /// call that times out or is cancelled takes it along and the next call opens another.
    replication: Option<Replication>,
}

/// One open replication stream: the requests it sends, the replies it receives in order.
#[derive(Debug)]
struct Replication {
    requests: mpsc::Sender<RaftStreamRequest>,
    replies: tonic::Streaming<RaftReply>,
}

#[derive(Clone, Copy)]
enum Rpc {
    AppendEntries,
    Vote,
    InstallSnapshot,
}

impl Rpc {
    fn kind(self) -> RPCTypes {
        match self {
            Rpc::AppendEntries => RPCTypes::AppendEntries,
            Rpc::Vote => RPCTypes::Vote,
            Rpc::InstallSnapshot => RPCTypes::InstallSnapshot,
        }
    }

    /// The gRPC path, which a node proof covers.
    fn path(self) -> &'static str {
        match self {
            Rpc::AppendEntries => "/locksmith.raft.v1.Raft/AppendEntries",
            Rpc::Vote => "/locksmith.raft.v1.Raft/Vote",
            Rpc::InstallSnapshot => "/locksmith.raft.v1.Raft/InstallSnapshot",
        }
    }
}

/// The error openraft gets for a transport failure.
fn network_error<E: Error>(e: &dyn ToString) -> RPCError<NodeId, Node, RaftError<NodeId, E>> {
    RPCError::Network(NetworkError::from(AnyError::error(e.to_string())))
}

impl PeerClient {
    /// Whether a replication stream to the peer is open (tests).
    #[doc(hidden)]
    pub fn streaming(&self) -> bool {
        self.replication.is_some()
    }

    /// The cluster id this node's message `rpc` carries: a leader's message draws it when the
    /// cluster has none yet (see `crate::identity`).
    fn cluster(&self, rpc: Rpc) -> u128 {
        match (&self.identity, rpc) {
            (Some(i), Rpc::Vote) => i.get(),
            (Some(i), _) => i.get_or_draw(),
            (None, _) => 0,
        }
    }

    /// The error for a call that got no answer within `deadline`.
    fn timed_out<E: Error>(&self, rpc: Rpc, deadline: Duration) -> RPCError<NodeId, Node, RaftError<NodeId, E>> {
        self.contacts.failed(self.target, "no answer in time");
        RPCError::Timeout(Timeout { action: rpc.kind(), id: self.id, target: self.target, timeout: deadline })
    }

    /// The error for a call that failed with `status`.
    fn failed<E: Error>(
        &self,
        rpc: Rpc,
        deadline: Duration,
        status: &tonic::Status,
    ) -> RPCError<NodeId, Node, RaftError<NodeId, E>> {
        // tonic says Cancelled when the request's own timeout expired.
        if matches!(status.code(), tonic::Code::DeadlineExceeded | tonic::Code::Unavailable | tonic::Code::Cancelled) {
            self.contacts.failed(self.target, status.message());
        }
        match status.code() {
            tonic::Code::DeadlineExceeded => {
                RPCError::Timeout(Timeout { action: rpc.kind(), id: self.id, target: self.target, timeout: deadline })
            }
            // Connection refused or reset: back off instead of retrying at once.
            tonic::Code::Unavailable => RPCError::Unreachable(Unreachable::new(status)),
            _ => RPCError::Network(NetworkError::new(status)),
        }
    }

    /// The peer's answer `payload`: openraft's result on the peer.
    fn answered<Resp, E>(&self, payload: &[u8]) -> Result<Resp, RPCError<NodeId, Node, RaftError<NodeId, E>>>
    where
        Resp: DeserializeOwned,
        E: Error + DeserializeOwned,
    {
        self.contacts.answered(self.target);
        let result: Result<Resp, RaftError<NodeId, E>> =
            postcard::from_bytes(payload).map_err(|e| network_error(&e))?;
        result.map_err(|e| RPCError::RemoteError(RemoteError::new_with_node(self.target, self.node.clone(), e)))
    }

    async fn call<Req, Resp, E>(
        &mut self,
        rpc: Rpc,
        req: &Req,
        option: &RPCOption,
    ) -> Result<Resp, RPCError<NodeId, Node, RaftError<NodeId, E>>>
    where
        Req: Serialize,
        Resp: DeserializeOwned,
        E: Error + DeserializeOwned,
    {
        let payload = super::encode(req).map_err(|e| network_error(&e))?;
        let cluster = self.cluster(rpc);
        let proof = self.secret.as_ref().map(|s| s.prove(rpc.path(), self.id, self.target, cluster, &payload));
        let mut request = tonic::Request::new(RaftRequest { target: self.target, payload });
        authenticate(&mut request, proof, cluster).map_err(|e| network_error(&e))?;
        // openraft gives up at the hard TTL; answering a timeout a little before lets
        // `append_entries` turn it into a smaller batch. The deadline also travels as
        // `grpc-timeout`, so the peer stops working on a request its sender has given up on.
        let deadline = option.soft_ttl();
        request.set_timeout(deadline);
        let client = self.client.as_mut().map_err(|e| network_error(e))?;
        let reply = tokio::time::timeout(deadline, async {
            match rpc {
                Rpc::AppendEntries => client.append_entries(request).await,
                Rpc::Vote => client.vote(request).await,
                Rpc::InstallSnapshot => client.install_snapshot(request).await,
            }
        })
        .await
        .map_err(|_| self.timed_out(rpc, deadline))?
        .map_err(|status| self.failed(rpc, deadline, &status))?;
        self.answered(&reply.into_inner().payload)
    }

    /// Whether AppendEntries to this peer go over the replication stream: unless the peer
    /// answered `UNIMPLEMENTED` to it less than [`RETRY_STREAM`] ago. A stream already open
    /// is used at once: `legacy` is consulted only before opening one.
    fn streams(&self) -> bool {
        if !self.stream {
            return false;
        }
        if self.replication.is_some() {
            return true;
        }
        let mut legacy = self.legacy.lock().unwrap_or_else(|p| p.into_inner());
        match legacy.get(&self.legacy_key) {
            Some(until) if Instant::now() < *until => false,
            Some(_) => {
                legacy.remove(&self.legacy_key);
                true
            }
            None => true,
        }
    }

    /// Sends `req` over the replication stream (opening it first when there is none) and
    /// waits for its reply; `None` when the peer does not serve the stream (an older node): it
    /// gets unary calls from now on, for [`RETRY_STREAM`].
    async fn append_over_stream(
        &mut self,
        req: &AppendEntriesRequest<TypeConfig>,
        option: &RPCOption,
    ) -> Option<Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, Node, RaftError<NodeId>>>> {
        let rpc = Rpc::AppendEntries;
        let payload = match super::encode(req) {
            Ok(p) => p,
            Err(e) => return Some(Err(network_error(&e))),
        };
        let cluster = self.cluster(rpc);
        let proof = self.secret.as_ref().map(|s| s.prove(STREAM_PATH, self.id, self.target, cluster, &payload));
        // Without a proof to carry it, the cluster id travels in the message.
        let cluster_field = if proof.is_none() && cluster != 0 { cluster.to_be_bytes().to_vec() } else { vec![] };
        let message = RaftStreamRequest {
            target: self.target,
            payload,
            proof: proof.unwrap_or_default(),
            cluster: cluster_field,
        };
        let deadline = option.soft_ttl();
        // Taken out for this call: if the call times out or is cancelled (openraft drops its
        // future), the stream goes with it, and no later request reads this one's late reply.
        let open = self.replication.take();
        let opening = match open {
            Some(replication) => Ok(replication),
            // Only a stream being opened needs the proof of its opening call (over an empty
            // message): made here, not for every message sent on an open stream.
            None => match self.client.as_mut() {
                Ok(client) => Err((
                    client.clone(),
                    self.secret.as_ref().map(|s| s.prove(STREAM_PATH, self.id, self.target, cluster, b"")),
                )),
                Err(e) => return Some(Err(network_error(e))),
            },
        };
        let exchange = async {
            let mut replication = match opening {
                Ok(replication) => {
                    replication.requests.send(message).await.map_err(|_| closed())?;
                    replication
                }
                Err((client, open_proof)) => open_stream(client, message, open_proof, cluster).await?,
            };
            match replication.replies.message().await {
                Ok(Some(reply)) => Ok((reply, replication)),
                Ok(None) => Err(closed()),
                Err(status) => Err(status),
            }
        };
        let outcome = tokio::time::timeout(deadline, exchange).await;
        let result = match outcome {
            Err(_) => Err(self.timed_out(rpc, deadline)),
            Ok(Err(status)) if status.code() == tonic::Code::Unimplemented => {
                tracing::info!(
                    peer = self.target,
                    "raft: node {} does not serve the replication stream (an older version?): one call per \
                     AppendEntries for {RETRY_STREAM:?}",
                    self.target
                );
                let mut legacy = self.legacy.lock().unwrap_or_else(|p| p.into_inner());
                legacy.insert(self.legacy_key.clone(), Instant::now() + RETRY_STREAM);
                return None;
            }
            Ok(Err(status)) => Err(self.failed(rpc, deadline, &status)),
            Ok(Ok((reply, replication))) => {
                let result = self.answered(&reply.payload);
                // A peer whose Raft core stopped ends the stream (it is going away); anything
                // else keeps it for the next request.
                if !matches!(result, Err(RPCError::RemoteError(RemoteError { source: RaftError::Fatal(_), .. }))) {
                    self.replication = Some(replication);
                }
                result
            }
        };
        Some(result)
    }
}

/// The status of a replication stream the peer (or the connection) ended without one.
fn closed() -> tonic::Status {
    tonic::Status::unavailable("the replication stream to the peer closed")
}

/// Puts on `request` what authenticates this node's call: its node `proof` in
/// [`NODE_PROOF_HEADER`], otherwise (authenticated by its node certificate alone) the cluster
/// id `cluster`, when it has one, in hex in `CLUSTER_ID_HEADER`.
fn authenticate<T>(
    request: &mut tonic::Request<T>,
    proof: Option<String>,
    cluster: u128,
) -> Result<(), tonic::metadata::errors::InvalidMetadataValue> {
    if let Some(proof) = proof {
        request.metadata_mut().insert(NODE_PROOF_HEADER, tonic::metadata::MetadataValue::try_from(proof)?);
    } else if cluster != 0 {
        let value = tonic::metadata::MetadataValue::try_from(format!("{cluster:x}"))?;
        request.metadata_mut().insert(super::gate::CLUSTER_ID_HEADER, value);
    }
    Ok(())
}

/// Opens a replication stream through `client`, `first` already queued on it so that it
/// travels with the opening; `proof` (of an empty message) authenticates the opening.
async fn open_stream(
    mut client: RaftClient<Channel>,
    first: RaftStreamRequest,
    proof: Option<String>,
    cluster: u128,
) -> Result<Replication, tonic::Status> {
    let (requests, queued) = mpsc::channel(1);
    requests.try_send(first).map_err(|_| closed())?;
    let outgoing = futures_util::stream::unfold(queued, |mut queued| async move {
        queued.recv().await.map(|message| (message, queued))
    });
    let mut request = tonic::Request::new(outgoing);
    authenticate(&mut request, proof, cluster).map_err(|e| tonic::Status::internal(e.to_string()))?;
    let replies = client.append_entries_stream(request).await?.into_inner();
    Ok(Replication { requests, replies })
}

impl RaftNetwork<TypeConfig> for PeerClient {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, Node, RaftError<NodeId>>> {
        let entries = rpc.entries.len() as u64;
        let started = crate::latency::start();
        let streamed = if self.streams() { self.append_over_stream(&rpc, &option).await } else { None };
        let result = match streamed {
            Some(result) => result,
            None => self.call(Rpc::AppendEntries, &rpc, &option).await,
        };
        crate::latency::done(started, "append_entries_rpc", rpc.entries.len());
        match result {
            // A batch that cannot make it within the deadline (the heartbeat interval) never
            // will: ask openraft for smaller ones rather than resend it forever.
            Err(RPCError::Timeout(_)) if entries > 1 => {
                Err(RPCError::PayloadTooLarge(PayloadTooLarge::new_entries_hint(entries / 2)))
            }
            r => r,
        }
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<InstallSnapshotResponse<NodeId>, RPCError<NodeId, Node, RaftError<NodeId, InstallSnapshotError>>> {
        self.call(Rpc::InstallSnapshot, &rpc, &option).await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RPCError<NodeId, Node, RaftError<NodeId>>> {
        self.call(Rpc::Vote, &rpc, &option).await
    }

    fn backoff(&self) -> Backoff {
        Backoff::new(std::iter::repeat(self.backoff))
    }
}
