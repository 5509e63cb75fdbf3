//! A cluster node's part in its lock service: it serves while this node leads, with a machine
//! built from the committed state ([`takeover`](super::takeover)), and forgets everything beyond
//! that state when it stops leading. The service asks [`Role::follow`] what to do after each
//! change of the leadership and does it to its own state.

use std::sync::Arc;
use std::time::{Duration, Instant};

use locksmith_raft::{Leadership, RaftNode};
use tokio::sync::watch;

use super::replica::ReplicaMachine;
use crate::machine::{Limits, Machine};
use crate::sink::Sink;

/// How soon a new leader that failed to commit its epoch tries again.
const EPOCH_RETRY: Duration = Duration::from_millis(100);

/// A cluster node's part in the service: its Raft node and whether it serves.
pub(crate) struct Role {
    node: Arc<RaftNode<ReplicaMachine>>,
    leadership: watch::Receiver<Leadership>,
    serving: bool,
    /// Look at the leadership again after this long even if it did not change: at start,
    /// because openraft restarts a node that led as the leader (the watched value is already
    /// "leader" and may never change again), and after a new leader failed to commit its epoch.
    check_again: Option<Duration>,
}

/// What the service does after a change of the leadership.
pub(crate) enum Change {
    /// Serve clients with this machine: the committed state, its new epoch committed.
    Lead(Box<Machine>),
    /// Stop serving: forget everything beyond the committed state (streams end, their clients
    /// resume on the leader, which is here when known).
    StepDown(Option<String>),
    /// Still not serving; the leader is here when known.
    Follow(Option<String>),
    /// Nothing changes (still leading, or leading but not able to serve yet).
    Stay,
}

impl Role {
    /// The role of a service over `node`, not serving yet, and the sink its records go through
    /// (the Raft log, see `super::committer`).
    pub(crate) fn start(node: Arc<RaftNode<ReplicaMachine>>) -> (Self, Sink) {
        let sink = Sink::Cluster(super::committer::start(node.clone()));
        let role = Role { leadership: node.leadership(), node, serving: false, check_again: Some(Duration::ZERO) };
        (role, sink)
    }

    /// Whether this node serves clients now.
    pub(crate) fn serving(&self) -> bool {
        self.serving
    }

    /// Resolves when the leadership changes (or it is time to look again).
    pub(crate) async fn changed(&mut self) {
        if let Some(after) = self.check_again {
            match tokio::time::timeout(after, self.leadership.changed()).await {
                Ok(Err(_)) => std::future::pending::<()>().await,
                _ => return,
            }
        }
        if self.leadership.changed().await.is_err() {
            // The Raft node is gone: nothing will change any more.
            std::future::pending::<()>().await;
        }
    }

    /// What the service does now that the leadership changed: a node that became the leader
    /// builds its machine from its replica, as a restarted single node does from its log, and
    /// commits its epoch before it serves; one that stopped leading steps down.
    pub(crate) async fn follow(&mut self, limits: &Limits, now: fn() -> Instant) -> Change {
        self.check_again = None;
        let l = self.leadership.borrow_and_update().clone();
        let leader = l.leader_addr.clone();
        if l.is_leader && l.ready && !self.serving {
            // The committed state, as a restarted single node reads its log.
            let records = match self.node.replica().lock() {
                Ok(replica) => replica.machine().records(),
                Err(_) => {
                    tracing::error!("the replica's lock is poisoned; not serving");
                    return Change::Stay;
                }
            };
            let (machine, boot) = super::takeover(limits.clone(), records, now(), self.node.failover_time());
            if let Err(e) = self.node.client_write(super::encode(&boot)).await {
                tracing::warn!(error = %e, "could not commit the new leader's epoch; not serving yet");
                self.check_again = Some(EPOCH_RETRY);
                return Change::Stay;
            }
            tracing::info!(term = l.term, epoch = machine.epoch(), "leading: serving clients");
            self.serving = true;
            Change::Lead(Box::new(machine))
        } else if !l.is_leader && self.serving {
            self.serving = false;
            tracing::info!(term = l.term, leader = ?leader, "no longer leading: streams end, clients go to the leader");
            Change::StepDown(leader)
        } else if !self.serving {
            Change::Follow(leader)
        } else {
            Change::Stay
        }
    }
}
