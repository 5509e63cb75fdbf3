//! [`RaftNode`]: one member of a cluster, as the lock server uses it.

use std::collections::BTreeMap;
use std::collections::BTreeSet;
use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::Mutex;
use std::time::Duration;

use openraft::error::ForwardToLeader;
use openraft::error::InitializeError;
use openraft::error::RaftError;
use openraft::metrics::RaftDataMetrics;
use openraft::metrics::RaftServerMetrics;
use openraft::network::RaftNetworkFactory;
use openraft::BasicNode;
use openraft::ChangeMembers;
use openraft::RaftMetrics;
use openraft::ServerState;
use openraft::TryAsRef;
use tokio::sync::watch;

use crate::config::NodeConfig;
use crate::error::ClientWriteError;
use crate::error::LeaderHint;
use crate::error::MembershipError;
use crate::error::StartError;
use crate::leadership::Leadership;
use crate::membership::matched_index;
use crate::membership::Added;
use crate::membership::ClusterStatus;
use crate::membership::Removed;
use crate::network::pb::raft_server::RaftServer;
use crate::network::Contacts;
use crate::network::Network;
use crate::network::NodeGate;
use crate::network::RaftService;
use crate::state_machine::Replica;
use crate::state_machine::Replicated;
use crate::store::open_storage_in;
use crate::store::SyncMode;
use crate::types::Command;
use crate::types::Node;
use crate::types::NodeId;
use crate::types::Raft;
use crate::types::TypeConfig;

/// Largest command [`RaftNode::client_write`] accepts. Batch smaller records into one command
/// rather than exceeding it: a replication message carries about 1 MiB of entries.
pub const MAX_COMMAND: usize = 1 << 20;

/// One node of a Raft cluster replicating [`Replicated`] state `M`.
///
/// Dropping it does not stop openraft's tasks: call [`RaftNode::shutdown`].
pub struct RaftNode<M> {
    id: NodeId,
    raft: Raft,
    replica: Arc<Mutex<Replica<M>>>,
    leadership: watch::Receiver<Leadership>,
    timings: crate::Timings,
    /// When each peer last answered this node (its members' last contact).
    contacts: Contacts,
    /// The leadership watch, and a delayed initialization: ended with the node.
    tasks: Vec<tokio::task::JoinHandle<()>>,
    auth: Option<crate::network::NodeAuth>,
    identity: Arc<crate::identity::Identity>,
    /// [`NodeConfig::legacy_transport`].
    legacy_transport: bool,
}

impl<M> fmt::Debug for RaftNode<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RaftNode").field("id", &self.id).field("leadership", &*self.leadership.borrow()).finish()
    }
}

impl<M> Drop for RaftNode<M> {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

impl<M: Replicated> RaftNode<M> {
    /// Starts node `id` on its data directory `dir` (created if needed), restoring `machine`
    /// from the directory's snapshot and log.
    ///
    /// `peers` (id → `host:port` of each node's [`service`](Self::service), this node
    /// included) forms a new cluster: a node whose directory holds no cluster yet initializes
    /// it with `peers` as voters. Start every node of the new cluster with the same `peers`:
    /// the lowest id initializes at once, the others only if no leader reached them within an
    /// election timeout per rank (so the cluster forms without duelling candidates, and still
    /// forms when the lowest id is down). Pass an empty map to a node that joins an existing
    /// cluster (a new node, or a node whose directory was wiped): it waits to be added by the
    /// leader with
    /// [`add_learner`](Self::add_learner) and [`change_membership`](Self::change_membership).
    /// A node with a wiped directory must first be removed from the membership (it forgot its
    /// vote, and could otherwise vote twice in one term), then added back.
    ///
    /// The node serves no peer until the application serves [`service`](Self::service).
    ///
    /// # Errors
    /// [`StartError::Config`] for inconsistent settings, `peers` without this node, or
    /// [`routes`](NodeConfig::routes) naming a node that is not among non-empty `peers`;
    /// [`StartError::Store`] when the directory is in use or damaged; [`StartError::Raft`] when
    /// openraft fails to start.
    ///
    /// # Cancel safety
    /// Cancelling it before it returns may leave openraft's tasks running: do not.
    pub async fn start(
        id: NodeId,
        dir: impl Into<PathBuf>,
        peers: BTreeMap<NodeId, String>,
        config: NodeConfig,
        machine: M,
    ) -> Result<Self, StartError> {
        let (tls, connect_timeout, backoff) = (config.tls.clone(), config.connect_timeout, config.unreachable_backoff);
        let (routes, secret) = (config.routes.clone(), config.auth.as_ref().and_then(|a| a.secret.clone()));
        let legacy = config.legacy_transport;
        Self::start_with(id, dir, peers, config, machine, SyncMode::Inline, move |identity| {
            let network =
                Network::new(id, tls, connect_timeout, backoff, routes).with_secret(secret).with_identity(identity);
            let network = if legacy { network.without_stream() } else { network };
            let contacts = network.contacts();
            (network, contacts)
        })
        .await
    }

    /// [`start`](Self::start) over the network `network` builds (given the node's identity),
    /// which reports its peers' answers to the returned contacts: the gRPC [`Network`], or the
    /// in-process router of the test fixture.
    pub(crate) async fn start_with<N: RaftNetworkFactory<TypeConfig>>(
        id: NodeId,
        dir: impl Into<PathBuf>,
        peers: BTreeMap<NodeId, String>,
        config: NodeConfig,
        machine: M,
        sync: SyncMode,
        network: impl FnOnce(Arc<crate::identity::Identity>) -> (N, Contacts),
    ) -> Result<Self, StartError> {
        if !peers.is_empty() && !peers.contains_key(&id) {
            return Err(StartError::Config(format!("the initial peers do not include this node ({id})")));
        }
        // A route to a node the cluster does not have is a typo in the routes (or the peers):
        // that node's traffic would silently take the membership's address instead.
        if let Some(unknown) = config.routes.keys().find(|r| !peers.is_empty() && !peers.contains_key(r)) {
            return Err(StartError::Config(format!(
                "the routes name node {unknown}, which is not among the initial peers"
            )));
        }
        let openraft_config = Arc::new(config.to_openraft()?);
        let dir = dir.into();
        let raft_dir = dir.clone();
        // Reading the log and snapshot is blocking file I/O.
        let (log, sm) = tokio::task::spawn_blocking(move || open_storage_in(&dir, machine, sync))
            .await
            .map_err(|e| StartError::Raft(format!("opening the data directory: {e}")))??;
        let replica = sm.replica();
        let identity = Arc::new(crate::identity::Identity::load(&raft_dir)?);
        let (network, contacts) = network(identity.clone());
        let raft =
            Raft::new(id, openraft_config, network, log, sm).await.map_err(|e| StartError::Raft(e.to_string()))?;
        let initialized = raft.is_initialized().await.map_err(|e| StartError::Raft(e.to_string()))?;
        let mut tasks = Vec::new();
        if !peers.is_empty() && !initialized {
            // openraft starts an election as soon as a node initializes. When every node did
            // so as it started, one started later stood for election against the young leader:
            // it cannot win with its empty log, but its own vote in the leader's term kept it
            // from following that leader for about a second (seen in the cluster tests), and
            // a higher term can force another election. So the lowest id initializes at once
            // and the others only if no leader reached them within an election timeout per
            // rank: a majority still forms the cluster without the lowest id, just later.
            let rank = peers.keys().position(|p| *p == id).unwrap_or(0) as u32;
            let members: BTreeMap<NodeId, Node> =
                peers.into_iter().map(|(id, addr)| (id, BasicNode::new(addr))).collect();
            if rank == 0 {
                initialize(&raft, members).await.map_err(StartError::Raft)?;
            } else {
                let raft = raft.clone();
                let delay = config.timings.election_timeout_max * rank;
                tasks.push(tokio::spawn(async move {
                    tokio::time::sleep(delay).await;
                    if let Ok(false) = raft.is_initialized().await {
                        if let Err(e) = initialize(&raft, members).await {
                            tracing::warn!(error = %e, "raft: initializing the cluster failed");
                        }
                    }
                }));
            }
        }
        let (leadership, watcher) = watch_leadership(raft.server_metrics(), raft.data_metrics());
        tasks.push(watcher);
        Ok(Self {
            id,
            raft,
            replica,
            leadership,
            timings: config.timings,
            contacts,
            tasks,
            auth: config.auth,
            identity,
            legacy_transport: config.legacy_transport,
        })
    }

    /// Replicates `command`: returns its log index once a quorum stored it and this node's
    /// state machine applied it (read the outcome from [`replica`](Self::replica)).
    ///
    /// # Errors
    /// [`ClientWriteError::ForwardToLeader`] when this node is not the leader;
    /// [`ClientWriteError::TooLarge`] above [`MAX_COMMAND`]; [`ClientWriteError::Stopped`].
    ///
    /// # Cancel safety
    /// Not cancel safe: once proposed, the command may be committed and applied even if the
    /// future is dropped (or an error is returned because leadership was lost meanwhile). A
    /// retried command may therefore apply twice; make commands idempotent, or deduplicate in
    /// the state machine.
    pub async fn client_write(&self, command: Vec<u8>) -> Result<u64, ClientWriteError> {
        if command.len() > MAX_COMMAND {
            return Err(ClientWriteError::TooLarge { len: command.len(), max: MAX_COMMAND });
        }
        self.raft.client_write(Command(command)).await.map(|resp| resp.log_id.index).map_err(write_error)
    }

    /// Confirms with a quorum that this node is still the leader and waits until its state
    /// machine has applied everything committed so far; returns that log index. After it, a
    /// read of [`replica`](Self::replica) is linearizable.
    ///
    /// # Errors
    /// [`ClientWriteError::ForwardToLeader`] when this node is not the leader;
    /// [`ClientWriteError::Raft`] when no quorum answered; [`ClientWriteError::Stopped`].
    ///
    /// # Cancel safety
    /// Cancel safe: it changes nothing.
    pub async fn barrier(&self) -> Result<Option<u64>, ClientWriteError> {
        self.raft.ensure_linearizable().await.map(|log_id| log_id.map(|l| l.index)).map_err(write_error)
    }

    /// Adds node `id`, reachable at `addr`, as a learner: it receives the log (or a snapshot)
    /// but does not vote. With `blocking`, returns once it has caught up with the leader. Run
    /// on the leader (`locksmith cluster add`, step one).
    ///
    /// # Errors
    /// [`MembershipError::ForwardToLeader`], [`MembershipError::Rejected`],
    /// [`MembershipError::Stopped`].
    ///
    /// # Cancel safety
    /// Not cancel safe: the learner may be added anyway.
    pub async fn add_learner(&self, id: NodeId, addr: String, blocking: bool) -> Result<(), MembershipError> {
        membership_result(self.raft.add_learner(id, BasicNode::new(addr), blocking).await).map(|_| ())
    }

    /// Makes `voters` the voting members, through a joint configuration. Nodes new to the
    /// voters must be learners already. With `retain`, removed voters stay as learners;
    /// otherwise they leave the cluster. Run on the leader (`locksmith cluster add`, step two;
    /// `locksmith cluster remove`).
    ///
    /// # Errors
    /// [`MembershipError::ForwardToLeader`], [`MembershipError::Rejected`] (another change in
    /// progress, a voter that is not a learner yet, no voters), [`MembershipError::Stopped`].
    ///
    /// # Cancel safety
    /// Not cancel safe: the change may complete anyway, or stop in the joint configuration
    /// (which the next change completes).
    pub async fn change_membership(&self, voters: BTreeSet<NodeId>, retain: bool) -> Result<(), MembershipError> {
        membership_result(self.raft.change_membership(voters, retain).await).map(|_| ())
    }

    /// Adds node `id`, reachable at `addr` (where it serves [`service`](Self::service)), as a
    /// voter: as a learner first, then, once it stored the log up to the entry that added it
    /// (from the log, or a snapshot), as a voter. Run on the leader (`locksmith cluster add`).
    /// Start the new node with no peers beforehand (see [`start`](Self::start)).
    ///
    /// Within `limit` as a whole; a node that has not caught up by then stays a learner (call
    /// again to promote it).
    ///
    /// # Errors
    /// [`MembershipError::ForwardToLeader`]; [`MembershipError::Invalid`] when `id` is a member
    /// at another address (remove it first); [`MembershipError::Timeout`];
    /// [`MembershipError::Rejected`] (another change in progress); [`MembershipError::Stopped`].
    ///
    /// # Cancel safety
    /// Not cancel safe: the node may stay a learner, or be promoted anyway.
    pub async fn add_voter(&self, id: NodeId, addr: String, limit: Duration) -> Result<Added, MembershipError> {
        let deadline = tokio::time::Instant::now() + limit;
        let view = self.cluster();
        if !view.is_leader {
            return Err(MembershipError::ForwardToLeader(view_hint(&view)));
        }
        match view.node(id) {
            Some(m) if m.addr != addr => {
                return Err(MembershipError::Invalid(format!(
                    "node {id} is a member at {}; remove it first to add it at {addr}",
                    m.addr
                )))
            }
            Some(m) if m.voter && !view.changing => return Ok(Added::AlreadyVoter),
            _ => {}
        }
        let added = tokio::time::timeout_at(deadline, self.raft.add_learner(id, BasicNode::new(addr), false))
            .await
            .map_err(|_| MembershipError::Timeout(format!("node {id} was not added as a learner within {limit:?}")))?;
        let index = membership_result(added)?.log_id.index;
        let mut metrics = self.raft.metrics();
        let caught_up = tokio::time::timeout_at(deadline, async {
            // Done when it has the entry that added it, or when this node stops leading (the
            // change below then says where the leader is).
            metrics
                .wait_for(|m| m.state != ServerState::Leader || matched_index(m, id).is_some_and(|i| i >= index))
                .await
                .map(|_| ())
        })
        .await;
        match caught_up {
            Ok(Ok(())) => {}
            Ok(Err(_)) => return Err(MembershipError::Stopped("the node stopped".into())),
            Err(_) => {
                let has = match matched_index(&self.raft.metrics().borrow(), id) {
                    Some(i) => format!("it has the log up to index {i} of {index}"),
                    None => "it has not answered the leader yet: is it running, started with --join, and reachable \
                             from the leader at that address?"
                        .to_string(),
                };
                return Err(MembershipError::Timeout(format!(
                    "node {id} did not catch up within {limit:?} ({has}); it stays a learner: add it again to \
                     promote it, or remove it"
                )));
            }
        }
        let promoted = tokio::time::timeout_at(deadline, self.change(ChangeMembers::AddVoterIds([id].into())))
            .await
            .map_err(|_| {
                MembershipError::Timeout(format!(
                    "node {id} caught up, but its promotion to voter was not committed within {limit:?}"
                ))
            })?;
        promoted.map(|()| Added::Promoted)
    }

    /// Removes node `id` (a voter or a learner) from the cluster. Removing the leader (this
    /// node) is allowed: it steps down once the change is committed, and the others elect a
    /// new leader. Removing the last voter is refused. Run on the leader (`locksmith cluster
    /// remove`).
    ///
    /// # Errors
    /// [`MembershipError::ForwardToLeader`]; [`MembershipError::Invalid`] for the last voter;
    /// [`MembershipError::Timeout`] when no quorum committed the change within `limit`;
    /// [`MembershipError::Rejected`] (another change in progress); [`MembershipError::Stopped`].
    ///
    /// # Cancel safety
    /// Not cancel safe: the change may complete anyway, or stop in the joint configuration
    /// (which the next change completes).
    pub async fn remove_node(&self, id: NodeId, limit: Duration) -> Result<Removed, MembershipError> {
        let view = self.cluster();
        if !view.is_leader {
            return Err(MembershipError::ForwardToLeader(view_hint(&view)));
        }
        let Some(member) = view.node(id) else { return Ok(Removed::NotAMember) };
        let (change, removed) = if member.voter {
            if view.voters().all(|v| v == id) {
                return Err(MembershipError::Invalid(format!(
                    "node {id} is the last voter: a cluster cannot go on without one"
                )));
            }
            (ChangeMembers::RemoveVoters([id].into()), Removed::Voter { was_leader: id == self.id })
        } else {
            (ChangeMembers::RemoveNodes([id].into()), Removed::Learner)
        };
        tokio::time::timeout(limit, self.change(change))
            .await
            .map_err(|_| {
                MembershipError::Timeout(format!(
                    "removing node {id} was not committed within {limit:?} (does a quorum of the old and the new \
                     voters run?)"
                ))
            })?
            .map(|()| removed)
    }

    async fn change(&self, change: ChangeMembers<NodeId, Node>) -> Result<(), MembershipError> {
        membership_result(self.raft.change_membership(change, false).await).map(|_| ())
    }

    /// The application's state and the log position it reflects. Lock it briefly: applying
    /// committed commands waits for the lock.
    pub fn replica(&self) -> &Arc<Mutex<Replica<M>>> {
        &self.replica
    }
}

impl<M> RaftNode<M> {
    /// This node's id.
    pub fn id(&self) -> NodeId {
        self.id
    }

    /// Whether this node believes it is the leader (it may have been deposed without knowing
    /// yet, for up to an election timeout; see [`RaftNode::barrier`]).
    pub fn is_leader(&self) -> bool {
        self.leadership.borrow().is_leader
    }

    /// Whether a storage error (the disk) stopped this node's Raft core, rather than a panic or
    /// a shutdown: once [`Leadership::stopped`], a supervisor learns whether to look at the disk
    /// or at the log for a bug.
    pub fn stopped_by_storage(&self) -> bool {
        matches!(self.raft.metrics().borrow().running_state, Err(openraft::error::Fatal::StorageError(_)))
    }

    /// A watch of this node's [`Leadership`]: term, leader id, whether it leads and is ready.
    pub fn leadership(&self) -> watch::Receiver<Leadership> {
        self.leadership.clone()
    }

    /// This node's view of the cluster now: members, roles, the leader, log indexes (and, on
    /// the leader, each member's matched index, last contact, and whether it is unreachable:
    /// no answer for longer than an election timeout).
    pub fn cluster(&self) -> ClusterStatus {
        let mut view = ClusterStatus::from_metrics(&self.raft.metrics().borrow());
        if view.is_leader {
            for m in view.nodes.iter_mut().filter(|m| m.id != self.id) {
                m.last_contact = self.contacts.since(m.id);
                m.unreachable = m.last_contact.is_none_or(|t| t > self.election_timeout());
            }
        }
        view
    }

    /// openraft's full metrics (log indexes, replication progress, membership).
    pub fn metrics(&self) -> watch::Receiver<RaftMetrics<NodeId, Node>> {
        self.raft.metrics()
    }

    /// The longest election timeout ([`Timings::election_timeout_max`](crate::Timings)). It is also the
    /// leader lease of openraft 0.9: a voter that heard from a leader within it refuses to vote
    /// for another candidate, and a follower stands for election only after the lease plus its
    /// own random timeout.
    pub fn election_timeout(&self) -> Duration {
        self.timings.election_timeout_max
    }

    /// How long a cluster is typically without a serving leader after its leader fails:
    /// a follower stands for election once it heard nothing for the old leader's lease (one
    /// [`election_timeout`](Self::election_timeout)) plus its random election timeout (less
    /// than another one), then the new leader commits its first entry (a heartbeat interval is
    /// ample on a LAN). `2 × election_timeout_max + heartbeat` of the node's own
    /// [`Timings`](crate::Timings): 850 ms with the defaults. After a leader change, extend
    /// every lease by at least this (Chubby's grace period): clients may have been unable to
    /// renew for that long. Not a hard bound: Raft guarantees no election time (split votes
    /// repeat, a partition lasts as long as it lasts).
    pub fn failover_time(&self) -> Duration {
        self.timings.failover_time()
    }

    /// The `locksmith.raft.v1.Raft` gRPC service of this node, to add to the application's
    /// tonic router (with its TLS) on the address the cluster knows the node by.
    ///
    /// With [`NodeConfig::auth`], a call is served only when it carries a valid node proof from
    /// a member; others are refused before their message is read.
    pub fn service(&self) -> NodeGate<RaftServer<RaftService>> {
        let service = RaftService::new(self.id, self.raft.clone(), self.auth.clone(), self.identity.clone());
        let service = if self.legacy_transport { service.without_stream() } else { service };
        service.into_server()
    }

    /// A watch that turns `Some(why)` when a leader of another cluster with the same node ids
    /// reached this node (a cluster formed by nodes whose data directories were wiped): the node
    /// refuses it, and the application should stop, saying why, rather than go on beside it.
    /// Only with node authentication ([`NodeConfig::auth`]), whose proofs carry cluster ids.
    pub fn foreign_cluster(&self) -> watch::Receiver<Option<String>> {
        self.identity.foreign()
    }

    /// This node's cluster id (drawn by the cluster's first leader; 0 until it knows it).
    pub fn cluster_id(&self) -> u128 {
        self.identity.get()
    }

    /// The openraft handle, for what this API does not cover.
    pub fn raft(&self) -> &Raft {
        &self.raft
    }

    /// Stops the node: openraft's tasks end and release the data directory (a new node may
    /// start on it while this handle lives). Pending and later calls fail with
    /// [`ClientWriteError::Stopped`] or [`MembershipError::Stopped`]; the application should
    /// also stop serving [`service`](Self::service).
    ///
    /// # Errors
    /// openraft's core task had panicked.
    ///
    /// # Cancel safety
    /// Cancel safe: shutting down goes on; call it again to wait for it.
    pub async fn shutdown(&self) -> Result<(), String> {
        // The leadership watch publishes `stopped` by itself once openraft's metrics close.
        self.raft.shutdown().await.map_err(|e| e.to_string())
    }
}

/// Initializes the cluster with `members`, unless another node's initialization got here first.
async fn initialize(raft: &Raft, members: BTreeMap<NodeId, Node>) -> Result<(), String> {
    match raft.initialize(members).await {
        Ok(()) | Err(RaftError::APIError(InitializeError::NotAllowed(_))) => Ok(()),
        Err(e) => Err(e.to_string()),
    }
}

fn hint(f: &ForwardToLeader<NodeId, Node>) -> LeaderHint {
    LeaderHint { id: f.leader_id, addr: f.leader_node.as_ref().map(|n| n.addr.clone()) }
}

/// Maps an openraft error the way every call here reports it: where the leader is
/// (`forward`), the call's own refusal (`refused`), or openraft stopped (`stopped`).
fn raft_error<E, T>(
    e: RaftError<NodeId, E>,
    forward: impl FnOnce(LeaderHint) -> T,
    refused: impl FnOnce(String) -> T,
    stopped: impl FnOnce(String) -> T,
) -> T
where
    E: TryAsRef<ForwardToLeader<NodeId, Node>> + fmt::Display,
{
    match e {
        RaftError::APIError(e) => match e.try_as_ref() {
            Some(f) => forward(hint(f)),
            None => refused(e.to_string()),
        },
        RaftError::Fatal(e) => stopped(e.to_string()),
    }
}

/// An openraft error of a write or a barrier, as [`RaftNode::client_write`] and
/// [`RaftNode::barrier`] report it.
fn write_error<E>(e: RaftError<NodeId, E>) -> ClientWriteError
where
    E: TryAsRef<ForwardToLeader<NodeId, Node>> + fmt::Display,
{
    raft_error(e, ClientWriteError::ForwardToLeader, ClientWriteError::Raft, ClientWriteError::Stopped)
}

/// Where the leader is, as `view` knows.
fn view_hint(view: &ClusterStatus) -> LeaderHint {
    LeaderHint { id: view.leader, addr: view.leader_addr().map(str::to_string) }
}

fn membership_result<T>(
    r: Result<T, RaftError<NodeId, openraft::error::ClientWriteError<NodeId, Node>>>,
) -> Result<T, MembershipError> {
    r.map_err(|e| raft_error(e, MembershipError::ForwardToLeader, MembershipError::Rejected, MembershipError::Stopped))
}

/// Follows openraft's server metrics and publishes [`Leadership`] when it changes.
///
/// openraft sends its full metrics after nearly every batch of work (several times per entry);
/// the server metrics change only with the vote, the state, the leader or the membership. The
/// applied entry matters only between winning an election and [`Leadership::ready`], so the
/// data metrics are followed only then: in steady state nothing here wakes per entry.
fn watch_leadership(
    mut server: watch::Receiver<RaftServerMetrics<NodeId, Node>>,
    mut data: watch::Receiver<RaftDataMetrics<NodeId>>,
) -> (watch::Receiver<Leadership>, tokio::task::JoinHandle<()>) {
    let first = Leadership::from_server(&server.borrow_and_update(), data.borrow_and_update().last_applied.as_ref());
    let (tx, rx) = watch::channel(first);
    let task = tokio::spawn(async move {
        loop {
            let waiting_to_serve = {
                let l = tx.borrow();
                l.is_leader && !l.ready
            };
            // Both senders belong to openraft's core: either closing means it stopped.
            let closed = if waiting_to_serve {
                tokio::select! {
                    r = server.changed() => r.is_err(),
                    r = data.changed() => r.is_err(),
                }
            } else {
                server.changed().await.is_err()
            };
            // The leader's address is compared borrowed, and copied only when it changed.
            // openraft's metrics are released before publishing, so no lock is held while
            // taking the other.
            let (mut now, new_addr) = {
                let m = server.borrow_and_update();
                let applied = data.borrow_and_update().last_applied;
                let addr = crate::membership::leader_addr(&m);
                // Only this task publishes: what it reads here is still there below.
                let new_addr = (tx.borrow().leader_addr.as_deref() != addr).then(|| addr.map(str::to_string));
                (Leadership::without_addr(&m, applied.as_ref()), new_addr)
            };
            if closed {
                now = Leadership { is_leader: false, ready: false, stopped: true, ..now };
            }
            tx.send_if_modified(|l| {
                let (leader_addr, changed) = match new_addr {
                    Some(addr) => (addr, true),
                    None => {
                        // Both without an address now: the other fields decide.
                        let kept = l.leader_addr.take();
                        (kept, *l != now)
                    }
                };
                *l = Leadership { leader_addr, ..now };
                changed
            });
            if closed {
                break;
            }
        }
    });
    (rx, task)
}
