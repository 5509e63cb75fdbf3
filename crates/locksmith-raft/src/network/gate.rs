//! Node authentication of Raft calls: only nodes speak Raft — a node holding the cluster secret,
//! or presenting a node certificate signed by the peer CA (`peer_cert`), or both when both are
//! configured.
//!
//! [`NodeGate`] sits in front of the generated service and checks a call's node proof
//! (`locksmith_proto::node_proof`) and its TLS peer certificate from the connection and headers
//! alone, before the message is read: a caller without them is answered `UNAUTHENTICATED` (or
//! `PERMISSION_DENIED` when the proven sender is no member, or the certificate and the proof name
//! different nodes) and its message is never buffered nor decoded. The service then checks
//! what only the message shows: that it is the message the proof covers, and that the vote it
//! carries is the sender's own (the candidate of a vote, the leader of an append or snapshot).
//! The replication stream (`AppendEntriesStream`) is admitted here at its opening, like a call
//! (its proof covers an empty message); then every message on it carries its own proof, which
//! `Gate::admit_message` checks before the service decodes it, and which must name the node
//! that opened the stream.
//! Client credentials play no part: a bearer token or a client certificate is never a node.

use std::convert::Infallible;
use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::Mutex;
use std::task::Context;
use std::task::Poll;
use std::time::Duration;
use std::time::Instant;

use locksmith_proto::node_proof::Claim;
use locksmith_proto::node_proof::ClusterSecret;
use locksmith_proto::node_proof::ProofError;
use locksmith_proto::node_proof::NODE_PROOF_HEADER;
use tonic::body::Body;
use tonic::codegen::http;
use tonic::codegen::BoxFuture;
use tonic::codegen::Service;
use tonic::server::NamedService;
use tonic::transport::server::TcpConnectInfo;
use tonic::transport::server::TlsConnectInfo;
use tonic::Status;

use super::peer_cert::PeerCa;
use super::peer_cert::PeerCertError;
use crate::identity::Identity;
use crate::types::NodeId;
use crate::types::Raft;

/// How a node authenticates its peers' Raft calls and its own
/// ([`NodeConfig::auth`](crate::NodeConfig::auth)): by the cluster secret, by node certificates
/// ([`NodeAuth::certificates`]: the node's TLS identity, given in
/// [`NodeConfig::tls`](crate::NodeConfig::tls), is presented to its peers), or both.
///
/// ```
/// use locksmith_proto::node_proof::ClusterSecret;
/// use locksmith_raft::{NodeAuth, NodeConfig};
/// let secret = ClusterSecret::new(b"the same long random secret on every node")?;
/// let mut config = NodeConfig::default();
/// config.auth = Some(NodeAuth::new(secret).on_refused(|r| eprintln!("refused {}: {}", r.call, r.reason)));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
#[non_exhaustive]
pub struct NodeAuth {
    /// The cluster secret: proves this node's calls and checks its peers'.
    pub secret: Option<ClusterSecret>,
    /// The CA of node certificates: a call must come over TLS with a certificate it signed that
    /// names the calling node (`locksmith-node://CLUSTER/ID`).
    pub peer_ca: Option<PeerCa>,
    /// Also accept calls that carry no proof at all (a proof that does not verify is still
    /// refused): only while a running cluster is upgraded to node authentication, one node at a
    /// time.
    pub accept_unauthenticated: bool,
    on_refused: Option<OnRefused>,
}

/// What [`NodeAuth::on_refused`] calls.
type OnRefused = Arc<dyn Fn(&Refusal) + Send + Sync>;

impl fmt::Debug for NodeAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NodeAuth")
            .field("secret", &self.secret.is_some())
            .field("peer_ca", &self.peer_ca.is_some())
            .field("accept_unauthenticated", &self.accept_unauthenticated)
            .finish_non_exhaustive()
    }
}

impl NodeAuth {
    /// Authentication with `secret`, refusing every call without a valid proof.
    pub fn new(secret: ClusterSecret) -> Self {
        Self { secret: Some(secret), peer_ca: None, accept_unauthenticated: false, on_refused: None }
    }

    /// Authentication by node certificates signed by `peer_ca`, refusing every call without one
    /// that names its sender. Add a secret with [`NodeAuth::secret()`] to demand both.
    pub fn certificates(peer_ca: PeerCa) -> Self {
        Self { secret: None, peer_ca: Some(peer_ca), accept_unauthenticated: false, on_refused: None }
    }

    /// The same, also demanding a node proof made with `secret`.
    #[must_use]
    pub fn secret(mut self, secret: ClusterSecret) -> Self {
        self.secret = Some(secret);
        self
    }

    /// The same, also demanding a node certificate signed by `peer_ca`.
    #[must_use]
    pub fn peer_ca(mut self, peer_ca: PeerCa) -> Self {
        self.peer_ca = Some(peer_ca);
        self
    }

    /// The same, accepting calls without a proof when `accept` (see
    /// [`accept_unauthenticated`](Self::accept_unauthenticated)).
    #[must_use]
    pub fn accept_unauthenticated(mut self, accept: bool) -> Self {
        self.accept_unauthenticated = accept;
        self
    }

    /// The same, calling `f` for every refused call (e.g. to count them in metrics).
    #[must_use]
    pub fn on_refused(mut self, f: impl Fn(&Refusal) + Send + Sync + 'static) -> Self {
        self.on_refused = Some(Arc::new(f));
        self
    }
}

/// A Raft call this node refused.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Refusal {
    /// The method: `append_entries`, `vote`, `install_snapshot` (or `other`).
    pub call: &'static str,
    /// Why, as a metric label: `no_proof`, `bad_proof`, `no_node_cert`, `bad_node_cert`,
    /// `not_a_member`, `wrong_sender`, `wrong_message`, `bad_term`, `foreign_cluster`.
    pub reason: &'static str,
    /// The node id the caller claimed or proved, when known.
    pub sender: Option<NodeId>,
    /// The caller's address, when known.
    pub peer: Option<SocketAddr>,
}

/// What the gate let through, for the service to finish checking.
#[derive(Debug, Clone)]
pub(crate) enum Admitted {
    /// The calling node, proven by a node certificate, a node proof (`claim`), or both (then
    /// they name the same node).
    Proven { sender: NodeId, claim: Option<Claim> },
    /// No proof, and none is asked for (no node authentication, or an upgrade under way).
    Unproven,
}

/// State shared by the gate and the service of one node.
pub(crate) struct Gate {
    id: NodeId,
    raft: Raft,
    auth: Option<NodeAuth>,
    identity: Arc<Identity>,
    quiet: Mutex<Quiet>,
}

/// Refusals are logged at most once per [`LOG_EVERY`], with how many were not.
#[derive(Default)]
struct Quiet {
    last: Option<Instant>,
    suppressed: u64,
}

const LOG_EVERY: Duration = Duration::from_secs(10);

/// Terms beyond this are refused: no cluster holds that many elections, and openraft's term
/// arithmetic must never meet `u64::MAX`.
pub(crate) const MAX_TERM: u64 = 1 << 62;

impl Gate {
    pub(crate) fn new(id: NodeId, raft: Raft, auth: Option<NodeAuth>, identity: Arc<Identity>) -> Self {
        Self { id, raft, auth, identity, quiet: Mutex::default() }
    }

    pub(crate) fn id(&self) -> NodeId {
        self.id
    }

    /// Whether a call reaching the service without the gate's verdict must be refused.
    pub(crate) fn demands_proof(&self) -> bool {
        self.auth.as_ref().is_some_and(|a| !a.accept_unauthenticated)
    }

    /// Whether `id` is a member (voter or learner) of this node's cluster. A node that belongs
    /// to none yet (forming a cluster, or waiting to be added) hears from any authenticated node.
    pub(crate) fn is_member(&self, id: NodeId) -> bool {
        let metrics = self.raft.metrics();
        let m = metrics.borrow();
        let membership = m.membership_config.membership();
        membership.nodes().next().is_none() || membership.get_node(&id).is_some()
    }

    /// Whether this node has applied more than a cluster's first entries: it belongs to a
    /// cluster that has served.
    fn has_history(&self) -> bool {
        let metrics = self.raft.metrics();
        let m = metrics.borrow();
        m.last_applied.is_some_and(|l| l.index >= 2) || m.last_log_index.is_some_and(|i| i >= 2)
    }

    /// Checks the cluster id a proof carries against this node's (see `crate::identity`): takes
    /// a leader's when this node has none or no history; refuses another cluster's otherwise,
    /// and stops the node when that cluster's leader reached it.
    fn check_cluster(&self, call: &'static str, sender: NodeId, cluster: u128) -> Result<(), String> {
        let mine = self.identity.get();
        if cluster == 0 || cluster == mine {
            return Ok(());
        }
        let from_leader = call != "vote";
        if mine == 0 || !self.has_history() {
            if from_leader {
                self.identity.adopt(cluster);
            }
            return Ok(());
        }
        let message = format!(
            "node {} belongs to cluster {:032x}, this node to cluster {mine:032x}: two clusters with the same node \
             ids (were the data directories of a majority wiped and their nodes restarted with --peers?); this \
             node will not join the other one (README: A cluster)",
            sender, cluster
        );
        if from_leader {
            tracing::error!("raft: {message}");
            self.identity.met_foreign(message.clone());
        }
        Err(message)
    }

    /// Counts and logs (rate-limited) a refusal; returns `status` for the caller.
    pub(crate) fn refuse(&self, refusal: Refusal, status: Status) -> Status {
        if let Some(f) = self.auth.as_ref().and_then(|a| a.on_refused.as_ref()) {
            f(&refusal);
        }
        let mut quiet = self.quiet.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        if quiet.last.is_none_or(|l| now.duration_since(l) >= LOG_EVERY) {
            tracing::warn!(
                call = refusal.call,
                reason = refusal.reason,
                sender = ?refusal.sender,
                peer = ?refusal.peer,
                more_refused_since_last = quiet.suppressed,
                "raft: refused a call that is not from a node of this cluster: {}",
                status.message()
            );
            quiet.last = Some(now);
            quiet.suppressed = 0;
        } else {
            quiet.suppressed += 1;
        }
        status
    }

    /// Who sent a call or a stream message: the node its credentials name — `known` (its
    /// node certificate, or the node that opened the stream) and the `claim` of its node proof,
    /// which must agree — or `None` when neither proved anyone (let through only while
    /// upgrading). Refused when they name different nodes (`mismatch` says how), and when the
    /// proof is for another node than this one.
    fn sender(
        &self,
        known: Option<NodeId>,
        claim: Option<&Claim>,
        refusal: &dyn Fn(&'static str, Option<NodeId>) -> Refusal,
        mismatch: impl FnOnce(NodeId, NodeId) -> String,
    ) -> Result<Option<NodeId>, Status> {
        let sender = match (known, claim) {
            (None, None) => return Ok(None),
            (Some(id), None) => id,
            (None, Some(c)) => c.sender,
            (Some(id), Some(c)) if id == c.sender => id,
            (Some(id), Some(c)) => {
                return Err(
                    self.refuse(refusal("wrong_sender", Some(id)), Status::permission_denied(mismatch(id, c.sender)))
                )
            }
        };
        if let Some(claim) = claim {
            if claim.target != self.id {
                return Err(Status::failed_precondition(format!(
                    "this is raft node {}, not node {}: the cluster's address for it is stale",
                    self.id, claim.target
                )));
            }
        }
        Ok(Some(sender))
    }

    /// The gate's verdict on a call from its connection and headers.
    fn admit<B>(&self, req: &http::Request<B>) -> Result<Admitted, Status> {
        let Some(auth) = &self.auth else { return Ok(Admitted::Unproven) };
        let path = req.uri().path();
        let call = call_name(path);
        let peer = peer_addr(req);
        let refusal = |reason, sender| Refusal { call, reason, sender, peer };
        // Each configured credential is checked; a missing one is let through only while
        // upgrading (accept_unauthenticated), and then only if no credential at all was shown.
        let by_cert = match &auth.peer_ca {
            None => None,
            Some(ca) => match peer_chain(req).map_or(Err(PeerCertError::Missing), |chain| ca.node_id(&chain)) {
                Ok(id) => Some(id),
                Err(PeerCertError::Missing | PeerCertError::NotSigned(_)) if auth.accept_unauthenticated => None,
                Err(e) => {
                    let reason = if e == PeerCertError::Missing { "no_node_cert" } else { "bad_node_cert" };
                    return Err(self.refuse(
                        refusal(reason, None),
                        Status::unauthenticated(format!(
                            "raft calls need a node certificate signed by this cluster's --peer-ca naming the \
                             calling node (SAN URI locksmith-node://CLUSTER/ID): {e}"
                        )),
                    ));
                }
            },
        };
        let proof = req.headers().get(NODE_PROOF_HEADER).map(|h| h.to_str().map_err(|_| ProofError::Malformed));
        let claim = self.claim(
            auth,
            path,
            proof,
            by_cert,
            &refusal,
            "raft calls need a node proof: every node of the cluster needs the same --cluster-secret-file",
        )?;
        let sender = self.sender(by_cert, claim.as_ref(), &refusal, |id, claimed| {
            format!("the node certificate names node {id}, the node proof node {claimed}")
        })?;
        let Some(sender) = sender else { return Ok(Admitted::Unproven) };
        // A candidate must be a member as this node sees it. A proven leader need not: a member
        // that missed the change adding that leader learns of it from the leader's own log.
        if call == "vote" && !self.is_member(sender) {
            return Err(self.refuse(
                refusal("not_a_member", Some(sender)),
                Status::permission_denied(format!("node {sender} is not a member of this node's cluster")),
            ));
        }
        // The cluster id: inside the proof when there is one; otherwise in a header whose sender
        // the certificate proved.
        let unproven_cluster = || {
            req.headers()
                .get(CLUSTER_ID_HEADER)
                .and_then(|h| h.to_str().ok())
                .and_then(|h| u128::from_str_radix(h, 16).ok())
                .unwrap_or(0)
        };
        self.proven(call, sender, claim, unproven_cluster, &refusal)
    }

    /// The claim of the node proof a call or a message shows over `path` (`proof`: `None` when
    /// it shows none, `Err` when it cannot be read); `None` when no secret is configured, or when
    /// none is shown while upgrading (`accept_unauthenticated`). Refused `no_proof` (`no_proof`
    /// says what is missing) or `bad_proof`, naming `known` (the node its certificate or its
    /// stream's opening proved) as the sender.
    fn claim(
        &self,
        auth: &NodeAuth,
        path: &str,
        proof: Option<Result<&str, ProofError>>,
        known: Option<NodeId>,
        refusal: &dyn Fn(&'static str, Option<NodeId>) -> Refusal,
        no_proof: &'static str,
    ) -> Result<Option<Claim>, Status> {
        let Some(secret) = &auth.secret else { return Ok(None) };
        match proof {
            None if auth.accept_unauthenticated => Ok(None),
            None => Err(self.refuse(refusal("no_proof", known), Status::unauthenticated(no_proof))),
            Some(proof) => proof
                .and_then(|p| secret.check(path, p))
                .map(Some)
                .map_err(|e| self.refuse(refusal("bad_proof", known), Status::unauthenticated(e.to_string()))),
        }
    }

    /// The verdict on a call or a message from `sender`, proven by its credentials (`claim`: its
    /// node proof's, if any): admitted unless it comes from another cluster than this node's —
    /// by the cluster id in its proof, or without one by `unproven_cluster()`.
    fn proven(
        &self,
        call: &'static str,
        sender: NodeId,
        claim: Option<Claim>,
        unproven_cluster: impl FnOnce() -> u128,
        refusal: &dyn Fn(&'static str, Option<NodeId>) -> Refusal,
    ) -> Result<Admitted, Status> {
        let cluster = claim.as_ref().map_or_else(unproven_cluster, |c| c.cluster);
        if let Err(message) = self.check_cluster(call, sender, cluster) {
            return Err(self.refuse(refusal("foreign_cluster", Some(sender)), Status::permission_denied(message)));
        }
        Ok(Admitted::Proven { sender, claim })
    }
}

/// The gRPC path of the replication stream, which the proof of its opening and of each of its
/// messages covers.
pub(crate) const STREAM_PATH: &str = "/locksmith.raft.v1.Raft/AppendEntriesStream";

impl Gate {
    /// The verdict on one message of a replication stream whose opening the gate admitted as
    /// `opened`: its own node proof `proof` (empty: none) is checked as a unary call's header
    /// would be, and must name the node that opened the stream; `cluster` is the cluster id a
    /// message without a proof carries. The service then checks the message against it as it
    /// checks a unary call.
    pub(crate) fn admit_message(
        &self,
        opened: &Admitted,
        proof: &str,
        cluster: u128,
        peer: Option<SocketAddr>,
    ) -> Result<Admitted, Status> {
        let Some(auth) = &self.auth else { return Ok(Admitted::Unproven) };
        let call = "append_entries";
        let refusal = |reason, sender| Refusal { call, reason, sender, peer };
        let opener = match opened {
            Admitted::Proven { sender, .. } => Some(*sender),
            Admitted::Unproven => None,
        };
        let claim = self.claim(
            auth,
            STREAM_PATH,
            (!proof.is_empty()).then_some(Ok(proof)),
            opener,
            &refusal,
            "every raft message needs a node proof: every node of the cluster needs the same \
             --cluster-secret-file",
        )?;
        let sender = self.sender(opener, claim.as_ref(), &refusal, |id, claimed| {
            format!("node {id} opened this stream, and a message's node proof names node {claimed}")
        })?;
        let Some(sender) = sender else { return Ok(Admitted::Unproven) };
        self.proven(call, sender, claim, || cluster, &refusal)
    }
}

/// The cluster id of a sender without a node proof (authenticated by its node certificate), in
/// hex: what a proof would carry.
pub(crate) const CLUSTER_ID_HEADER: &str = "locksmith-cluster-id";

/// The certificates the TLS peer presented (leaf first), if any.
fn peer_chain<B>(req: &http::Request<B>) -> Option<Arc<Vec<rustls::pki_types::CertificateDer<'static>>>> {
    req.extensions().get::<TlsConnectInfo<TcpConnectInfo>>().and_then(TlsConnectInfo::peer_certs)
}

/// The method of a Raft call's path, as metrics and logs name it.
pub(crate) fn call_name(path: &str) -> &'static str {
    match path.rsplit('/').next() {
        Some("AppendEntries" | "AppendEntriesStream") => "append_entries",
        Some("Vote") => "vote",
        Some("InstallSnapshot") => "install_snapshot",
        _ => "other",
    }
}

fn peer_addr<B>(req: &http::Request<B>) -> Option<SocketAddr> {
    let ext = req.extensions();
    ext.get::<TcpConnectInfo>()
        .and_then(TcpConnectInfo::remote_addr)
        .or_else(|| ext.get::<TlsConnectInfo<TcpConnectInfo>>().and_then(|i| i.get_ref().remote_addr()))
}

/// A Raft service behind node authentication: what [`RaftNode::service`](crate::RaftNode::service)
/// returns, for the application's tonic router.
#[derive(Clone)]
pub struct NodeGate<S> {
    inner: S,
    gate: Arc<Gate>,
}

impl<S> fmt::Debug for NodeGate<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NodeGate").field("node", &self.gate.id).finish_non_exhaustive()
    }
}

impl<S> NodeGate<S> {
    pub(crate) fn new(inner: S, gate: Arc<Gate>) -> Self {
        Self { inner, gate }
    }
}

impl<S> Service<http::Request<Body>> for NodeGate<S>
where
    S: Service<http::Request<Body>, Response = http::Response<Body>, Error = Infallible>,
    S::Future: Send + 'static,
{
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture<Self::Response, Infallible>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: http::Request<Body>) -> Self::Future {
        match self.gate.admit(&req) {
            Ok(admitted) => {
                req.extensions_mut().insert(admitted);
                Box::pin(self.inner.call(req))
            }
            // The request, body unread, is dropped here: its sender cannot make this node buffer it.
            Err(status) => Box::pin(async move { Ok(status.into_http()) }),
        }
    }
}

impl<S: NamedService> NamedService for NodeGate<S> {
    const NAME: &'static str = S::NAME;
}
