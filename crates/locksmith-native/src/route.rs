//! Which node a call goes to: the one that leads. A node that does not lead names the leader
//! (`locksmith-leader`, see `locksmith-proto`); a URL naming one node follows that name, also
//! to an address the URL does not have (with the URL's TLS files and token, at most
//! [`MAX_HOPS`] times per call), and learns the members the cluster reports. A URL listing
//! nodes follows names only among them: each may be a proxy, a tunnel, another route that
//! going around would defeat.
//!
//! Each node gets a short bound ([`NODE_BOUND`], doubling each round) when there is another to
//! try: a paused node (SIGSTOP, a blackhole) accepts the TCP connection and then says nothing,
//! and must cost a fraction of a second, not the whole call.

use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use locksmith_proto::cluster_client::ClusterClient;
use locksmith_proto::ClusterStatusRequest;
use tokio::time::Instant;
use tonic::transport::Channel;

use crate::grpc::{Failed, GrpcConnector, Peer};
use crate::NativeBackend;

/// A node's first bound on answering when another node could answer instead.
pub(crate) const NODE_BOUND: Duration = Duration::from_millis(500);

/// At most this many leader hints to an address the URL does not have, per call: nodes that
/// name each other in a loop (a misconfigured address) end the call instead of spinning.
const MAX_HOPS: u32 = 3;

/// How long one node may take with a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NodeBound {
    /// [`NODE_BOUND`], doubling after each round over the nodes, when there is another node.
    Short,
    /// The call's whole limit: for calls that take long by nature (membership changes).
    Whole,
}

/// Whether a call's status refuses the request itself (its input, its credentials, what it
/// asks of this server), so that asking another node cannot help.
fn refused(code: tonic::Code) -> bool {
    use tonic::Code as C;
    matches!(
        code,
        C::InvalidArgument
            | C::Unauthenticated
            | C::PermissionDenied
            | C::FailedPrecondition
            | C::Unimplemented
            | C::Aborted
            | C::DeadlineExceeded
            | C::AlreadyExists
            | C::NotFound
            | C::OutOfRange
    )
}

/// `host:port` (IPv6 in brackets) as host and port.
fn split_addr(addr: &str) -> Option<(String, u16)> {
    let (host, port) = addr.rsplit_once(':')?;
    let port = port.parse().ok().filter(|p| *p != 0)?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    (!host.is_empty()).then(|| (host.to_string(), port))
}

impl GrpcConnector {
    /// The index of the peer at `addr`, added (with the URL's TLS files) when the URL follows
    /// hints and does not have it yet; `None` when it may not be added.
    fn peer_at(&self, addr: &str, add: bool) -> Option<usize> {
        let mut peers = self.peers.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(i) = peers.iter().position(|p| p.addr == addr) {
            return Some(i);
        }
        if !add || !self.follow {
            return None;
        }
        let (host, port) = split_addr(addr)?;
        let peer = NativeBackend::peer(host, port, self.tls.clone(), &self.url).ok()?;
        peers.push(Arc::new(peer));
        tracing::debug!(backend = %self.url, node = addr, "following the leader a node named");
        Some(peers.len() - 1)
    }

    /// The peer at `addr`, a leader a node named: one the backend has, or (a URL naming one
    /// node) a new one.
    pub(crate) fn follow_hint(&self, addr: &str) -> Option<Arc<Peer>> {
        let i = self.peer_at(addr, true)?;
        self.peers().get(i).cloned()
    }

    /// Asks `peer` (it just served a call) for the cluster's members and remembers them, once
    /// per backend: when the node the URL names fails, the others are known. Best effort (a
    /// single server answers that it is no cluster), bounded by [`NODE_BOUND`].
    async fn learn_members(&self, peer: &Peer) {
        if !self.follow || self.learned.swap(true, Ordering::Relaxed) {
            return;
        }
        let mut client = ClusterClient::new(peer.channel());
        let call = client.status(self.request(ClusterStatusRequest {}));
        if let Ok(Ok(status)) = tokio::time::timeout(NODE_BOUND, call).await {
            for node in status.into_inner().nodes {
                self.peer_at(&node.addr, true);
            }
        }
    }

    /// Runs `call` on the peer that leads: first the current one; a node that does not lead and
    /// names the leader sends it there (see the module docs), one that cannot be reached, does
    /// not answer within its bound, or knows no leader yet (an election) to the next known node.
    /// The nodes are tried round after round, with a short pause between rounds, until `limit`
    /// has passed; a single node is tried once, within `limit`. A refusal of the request itself
    /// ends it at once. Returns the last failure as the server said it.
    pub(crate) async fn on_leader_raw<T, F, Fut>(
        &self,
        limit: Duration,
        bound: NodeBound,
        mut call: F,
    ) -> std::result::Result<T, Failed>
    where
        F: FnMut(Channel) -> Fut,
        Fut: Future<Output = std::result::Result<T, tonic::Status>>,
    {
        let deadline = Instant::now() + limit;
        let mut pause = Duration::from_millis(25);
        let mut node_bound = NODE_BOUND;
        let mut since_round = 0;
        let mut hops = 0;
        loop {
            let peers = self.peers();
            let n = peers.len();
            let i = self.current.load(Ordering::Relaxed) % n.max(1);
            let Some(peer) = peers.get(i).cloned() else {
                let status = tonic::Status::internal("a native backend without a server address");
                return Err(Failed { peer: None, status });
            };
            // Alone, a node has the whole limit: a slow server is still the only one.
            let until = match bound {
                NodeBound::Short if n > 1 => deadline.min(Instant::now() + node_bound),
                _ => deadline,
            };
            let failure = match tokio::time::timeout_at(until, call(peer.channel())).await {
                Ok(Ok(v)) => {
                    self.learn_members(&peer).await;
                    return Ok(v);
                }
                Ok(Err(s)) => s,
                Err(_) => tonic::Status::unavailable(format!("{} did not answer", peer.addr)),
            };
            // Anything but a refusal of the request may be this node alone: a connection
            // refused or reset, no answer, a node that does not lead.
            let hint = failure.metadata().get(locksmith_proto::LEADER_HEADER).and_then(|v| v.to_str().ok());
            let hinted = hint.and_then(|leader| self.peer_at(leader, hops < MAX_HOPS)).filter(|j| *j != i);
            let n = self.peers().len();
            if n == 1 || refused(failure.code()) || Instant::now() >= deadline {
                return Err(Failed { peer: Some(peer), status: failure });
            }
            if hinted.is_some() && self.follow {
                hops += 1;
            }
            self.current.store(hinted.unwrap_or((i + 1) % n), Ordering::Relaxed);
            since_round += 1;
            if hinted.is_none() && since_round >= n {
                // Every node said no, or did not answer: an election is under way, or nodes are
                // slow. Wait a moment, and give each node longer.
                since_round = 0;
                node_bound *= 2;
                tokio::time::sleep(pause.min(deadline.saturating_duration_since(Instant::now()))).await;
                pause = (pause * 2).min(Duration::from_millis(250));
            }
        }
    }
}
