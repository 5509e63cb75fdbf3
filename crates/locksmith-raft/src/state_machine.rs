//! The state machine adapter: openraft's [`RaftStateMachine`] over the application's
//! [`Replicated`] state, with snapshots kept in the data directory.
//!
//! The application's state lives in a [`Replica`] behind an `Arc<Mutex<…>>` that the
//! application keeps a handle to ([`RaftNode::replica`](crate::RaftNode::replica)): committed
//! commands are applied to it under the lock, together with the log id it has reached, so a
//! reader always sees a state and the exact log position it reflects.
//!
//! Durability comes from the log, not from the state: the state is rebuilt on start from the
//! stored snapshot (if any) and the committed entries after it, applied again through the same
//! [`Replicated::apply`]. A snapshot is built from [`Replicated::snapshot`] when openraft's
//! snapshot policy says so, written to the directory, and sent to followers whose log lags
//! behind the leader's purged prefix.

use std::fmt;
use std::fs::File;
use std::io::Cursor;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::MutexGuard;
use std::time::SystemTime;
use std::time::UNIX_EPOCH;

use openraft::storage::RaftStateMachine;
use openraft::storage::Snapshot;
use openraft::AnyError;
use openraft::EntryPayload;
use openraft::OptionalSend;
use openraft::RaftSnapshotBuilder;
use openraft::StorageIOError;

use crate::error::StoreError;
use crate::store::SnapshotStore;
use crate::store::StoredSnapshot;
use crate::types::Command;
use crate::types::Entry;
use crate::types::LogId;
use crate::types::SnapshotMeta;
use crate::types::StorageError;
use crate::types::StoredMembership;
use crate::types::TypeConfig;

/// The application's replicated state: what the lock server's `Machine` implements.
///
/// # Correctness requirements
///
/// - `apply` must be deterministic in what it decides: every node applies the same commands in
///   the same order and must reach the same decisions (who holds what, which counter is where,
///   which session ended). Whatever decides — time, randomness, local configuration — may only
///   enter through the command bytes (the leader decides, and writes down what it decided). A
///   node's own clock may stamp local bookkeeping that decides nothing while the node follows
///   (the lock server stamps a restored deadline's start: see its `ReplicaMachine`), so replicas
///   may differ in those stamps, never in a decision.
/// - `apply` is infallible: a command the state machine cannot use must be ignored the same way
///   on every node (it is committed, and will be applied again on every restart).
/// - `install(snapshot())` must reproduce the state exactly.
/// - `install` must leave the state as it was when it returns an error.
pub trait Replicated: Send + 'static {
    /// Applies the committed command at log `index`. Called once per command, in log order
    /// (indexes increase, with gaps where the log holds Raft's own entries), and again after a
    /// restart for the commands after the stored snapshot.
    fn apply(&mut self, index: u64, command: &[u8]);

    /// The whole state as bytes: a snapshot.
    fn snapshot(&self) -> Vec<u8>;

    /// Replaces the whole state with a snapshot's.
    ///
    /// # Errors
    /// The bytes are not a snapshot of this state machine (the state is left unchanged).
    fn install(&mut self, snapshot: &[u8]) -> Result<(), String>;
}

/// The application's state with the Raft log position it reflects.
#[derive(Debug)]
pub struct Replica<M> {
    machine: M,
    applied: Option<LogId>,
    membership: StoredMembership,
}

impl<M> Replica<M> {
    /// The state.
    pub fn machine(&self) -> &M {
        &self.machine
    }

    /// The state, mutably: only for what is not replicated (caches, subscribers…). Changing
    /// replicated state here makes this node diverge from the others.
    pub fn machine_mut(&mut self) -> &mut M {
        &mut self.machine
    }

    /// The log id of the last entry the state reflects (`None` before any).
    pub fn applied(&self) -> Option<LogId> {
        self.applied
    }

    /// The index of the last entry the state reflects (`None` before any).
    pub fn applied_index(&self) -> Option<u64> {
        self.applied.map(|l| l.index)
    }
}

/// The [`RaftStateMachine`] handed to openraft (public for openraft's storage test suite).
pub struct StateMachine<M> {
    replica: Arc<Mutex<Replica<M>>>,
    snapshots: Arc<SnapshotStore>,
    _lock: Arc<File>,
}

impl<M> fmt::Debug for StateMachine<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StateMachine").field("snapshots", &self.snapshots).finish_non_exhaustive()
    }
}

impl<M: Replicated> StateMachine<M> {
    /// `machine` restored from the stored snapshot, if any.
    pub(crate) fn open(mut machine: M, snapshots: SnapshotStore, lock: Arc<File>) -> Result<Self, StoreError> {
        let (applied, membership) = match snapshots.current() {
            Some(s) => {
                machine.install(&s.data).map_err(StoreError::Snapshot)?;
                (s.meta.last_log_id, s.meta.last_membership.clone())
            }
            None => (None, StoredMembership::default()),
        };
        Ok(Self {
            replica: Arc::new(Mutex::new(Replica { machine, applied, membership })),
            snapshots: Arc::new(snapshots),
            _lock: lock,
        })
    }

    /// The application's state, shared with openraft.
    pub fn replica(&self) -> Arc<Mutex<Replica<M>>> {
        self.replica.clone()
    }
}

fn lock<M>(replica: &Mutex<Replica<M>>) -> Result<MutexGuard<'_, Replica<M>>, StorageError> {
    // Poisoned when the application's apply or install panicked: its state is unknown.
    replica.lock().map_err(|_| StorageIOError::read_state_machine(AnyError::error("the state machine panicked")).into())
}

fn to_snapshot(s: &StoredSnapshot) -> Snapshot<TypeConfig> {
    Snapshot { meta: s.meta.clone(), snapshot: Box::new(Cursor::new(s.data.clone())) }
}

/// Saves `snapshot` off the async runtime (a file write and two syncs).
async fn save(snapshots: &Arc<SnapshotStore>, snapshot: Arc<StoredSnapshot>) -> Result<(), StorageError> {
    let signature = Some(snapshot.meta.signature());
    let store = snapshots.clone();
    match tokio::task::spawn_blocking(move || store.save(snapshot)).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(StorageIOError::write_snapshot(signature, &e).into()),
        Err(e) => Err(StorageIOError::write_snapshot(signature, &e).into()),
    }
}

impl<M: Replicated> RaftStateMachine<TypeConfig> for StateMachine<M> {
    type SnapshotBuilder = SnapshotBuilder<M>;

    async fn applied_state(&mut self) -> Result<(Option<LogId>, StoredMembership), StorageError> {
        let r = lock(&self.replica)?;
        Ok((r.applied, r.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<()>, StorageError>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let started = crate::latency::start();
        let mut r = lock(&self.replica)?;
        let mut n = 0;
        for entry in entries {
            match entry.payload {
                EntryPayload::Blank => {}
                EntryPayload::Normal(Command(bytes)) => r.machine.apply(entry.log_id.index, &bytes),
                EntryPayload::Membership(m) => r.membership = StoredMembership::new(Some(entry.log_id), m),
            }
            r.applied = Some(entry.log_id);
            n += 1;
        }
        crate::latency::done(started, "apply", n);
        Ok(vec![(); n])
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        SnapshotBuilder { replica: self.replica.clone(), snapshots: self.snapshots.clone() }
    }

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<Cursor<Vec<u8>>>, StorageError> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<(), StorageError> {
        let data = snapshot.into_inner();
        {
            let mut r = lock(&self.replica)?;
            r.machine
                .install(&data)
                .map_err(|e| StorageIOError::read_snapshot(Some(meta.signature()), AnyError::error(e)))?;
            r.applied = meta.last_log_id;
            r.membership = meta.last_membership.clone();
        }
        save(&self.snapshots, Arc::new(StoredSnapshot { meta: meta.clone(), data })).await
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot<TypeConfig>>, StorageError> {
        Ok(self.snapshots.current().as_deref().map(to_snapshot))
    }
}

/// Builds a snapshot of a [`StateMachine`], concurrently with further applies.
pub struct SnapshotBuilder<M> {
    replica: Arc<Mutex<Replica<M>>>,
    snapshots: Arc<SnapshotStore>,
}

impl<M> fmt::Debug for SnapshotBuilder<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SnapshotBuilder").finish_non_exhaustive()
    }
}

impl<M: Replicated> RaftSnapshotBuilder<TypeConfig> for SnapshotBuilder<M> {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, StorageError> {
        // State, log id and membership taken under one lock: the snapshot is exactly the state
        // at its log id, whatever is applied while it is written.
        let (data, last_log_id, last_membership) = {
            let r = lock(&self.replica)?;
            (r.machine.snapshot(), r.applied, r.membership.clone())
        };
        // Unique per build (openraft uses it to tell transfers apart), readable in logs.
        let micros = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_micros());
        let snapshot_id = match last_log_id {
            Some(l) => format!("{}-{}-{micros}", l.leader_id, l.index),
            None => format!("none-{micros}"),
        };
        let stored =
            Arc::new(StoredSnapshot { meta: SnapshotMeta { last_log_id, last_membership, snapshot_id }, data });
        save(&self.snapshots, stored.clone()).await?;
        Ok(to_snapshot(&stored))
    }
}
