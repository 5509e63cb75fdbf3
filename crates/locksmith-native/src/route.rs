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
//!
//! A leader hint is followed at once. Only after a whole round in which no node served nor
//! named another does the call pause ([`round_pause`]: 5 ms, doubling, at most
//! [`MAX_ROUND_PAUSE`]): a fail-over ends within milliseconds of the new leader's first
//! commit for the callers waiting on it, while a call never asks each node more than about
//! ten times a second once an election has lasted a few rounds.

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

/// The first pause after a round of refusals; each later one doubles, up to [`MAX_ROUND_PAUSE`].
const FIRST_ROUND_PAUSE: Duration = Duration::from_millis(5);

/// The longest pause between rounds: what a caller may lose after the new leader serves, and
/// what bounds the rate of calls to each node while there is none (one per pause per call).
pub(crate) const MAX_ROUND_PAUSE: Duration = Duration::from_millis(100);

/// The pause after the `round`th (from 0) round in which every node refused or did not answer.
fn round_pause(round: u32) -> Duration {
    FIRST_ROUND_PAUSE.saturating_mul(1u32.checked_shl(round).unwrap_or(u32::MAX)).min(MAX_ROUND_PAUSE)
}

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
    /// The nodes are tried round after round, with a short pause between rounds ([`round_pause`]),
    /// until `limit` has passed; a single node is tried once, within `limit`. A refusal of the request itself
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
        let mut rounds = 0;
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
                let pause = round_pause(rounds);
                rounds += 1;
                tokio::time::sleep(pause.min(deadline.saturating_duration_since(Instant::now()))).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// After each round of refusals the call pauses 5 ms, then twice as long each round, never
    /// more than 100 ms: quick to find a leader that has just been elected, and at most about
    /// ten calls a second to each node while an election lasts.
    #[tokio::test(start_paused = true)]
    async fn rounds_of_refusals_pause_briefly_at_first_then_at_a_bounded_rate() {
        let ms = Duration::from_millis;
        let pauses: Vec<Duration> = (0..8).map(round_pause).collect();
        assert_eq!(pauses, [ms(5), ms(10), ms(20), ms(40), ms(80), ms(100), ms(100), ms(100)]);
        assert_eq!(round_pause(u32::MAX), MAX_ROUND_PAUSE);

        let backend = NativeBackend::from_url("locksmith://127.0.0.1:1,127.0.0.1:2,127.0.0.1:3").unwrap();
        let started = Instant::now();
        let calls = std::sync::Mutex::new(Vec::new());
        let r: std::result::Result<(), Failed> = backend
            .inner
            .on_leader_raw(Duration::from_secs(2), NodeBound::Short, |_| {
                calls.lock().unwrap().push(started.elapsed());
                // Every node knows no leader yet (an election), and says so at once.
                async { Err(tonic::Status::unavailable("no leader is known")) }
            })
            .await;
        assert_eq!(r.unwrap_err().status.code(), tonic::Code::Unavailable);
        let calls = calls.into_inner().unwrap();
        // Rounds of three calls at 0, 5, 15, 35, 75, 155, 255, 355 … ms.
        let round_starts: Vec<Duration> = calls.iter().step_by(3).copied().collect();
        assert_eq!(round_starts[..7], [ms(0), ms(5), ms(15), ms(35), ms(75), ms(155), ms(255)]);
        // 2 s: six rounds by 155 ms, then one every 100 ms up to 1,955 ms; the last pause is cut
        // to the limit, and the one call after it ends the call.
        assert_eq!(calls.len(), 3 * (6 + 18) + 1, "{calls:?}");
        assert!(*calls.last().unwrap() <= Duration::from_secs(2));
    }
}
