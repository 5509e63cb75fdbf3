//! A node's data directory: the durable Raft log and vote, and the state machine's snapshot.
//!
//! Layout of `<dir>`:
//! - `LOCK`: held with an exclusive file lock while a node runs, so two nodes never share it;
//! - `meta`: the vote and the committed log id (`meta`), in two checksummed slots;
//! - `log`: the entries, as appended frames (`log_file`), synced (`sync`)
//!   before openraft hears they are stored; a log that ends before the committed entry `meta`
//!   names is cut, and refused;
//! - `snapshot`: the newest snapshot of the state machine (`snapshot`).
//!
//! A crash loses nothing that was acknowledged: an append is acknowledged after `fdatasync`, a
//! vote is synced before it is used, a snapshot is renamed into place after being synced. A
//! restart drops a torn last frame of the log; anything else that does not check out stops the
//! node with [`StoreError::Corrupt`] and changes nothing.
//!
//! The exact bytes of the three files are pinned by `tests/it/golden_disk.rs`, written and read
//! back: changing them is a data-format break (see `docs/raft-format.md` at the repository root).

mod log_file;
mod log_store;
mod meta;
mod snapshot;
mod sync;

use std::fs::OpenOptions;
use std::path::Path;
use std::sync::Arc;

pub use log_store::LogReader;
pub use log_store::LogStore;
pub(crate) use snapshot::SnapshotStore;
pub(crate) use snapshot::StoredSnapshot;
pub(crate) use sync::SyncMode;

use crate::error::StoreError;
use crate::state_machine::Replicated;
use crate::state_machine::StateMachine;

/// Opens (creating if needed) and locks the data directory `dir`, and restores `machine` from
/// its snapshot: the two halves openraft is started with.
///
/// [`RaftNode::start`](crate::RaftNode::start) calls this; it is public for openraft's storage
/// test suite and for tools that inspect a directory.
///
/// # Errors
/// [`StoreError::InUse`] when another node holds `dir`; [`StoreError::Corrupt`] for damage;
/// [`StoreError::Snapshot`] when `machine` rejects the stored snapshot; I/O errors.
pub fn open_storage<M: Replicated>(dir: &Path, machine: M) -> Result<(LogStore, StateMachine<M>), StoreError> {
    open_storage_in(dir, machine, SyncMode::Inline)
}

/// [`open_storage`] with the log's syncs run in `sync`.
pub(crate) fn open_storage_in<M: Replicated>(
    dir: &Path,
    machine: M,
    sync: SyncMode,
) -> Result<(LogStore, StateMachine<M>), StoreError> {
    std::fs::create_dir_all(dir)?;
    let lock = OpenOptions::new().create(true).truncate(false).write(true).open(dir.join("LOCK"))?;
    lock.try_lock().map_err(|_| StoreError::InUse(dir.to_path_buf()))?;
    let lock = Arc::new(lock);
    let fresh = !dir.join("log").exists();
    if fresh && dir.join("snapshot").exists() {
        return Err(StoreError::Corrupt(format!("{}: a snapshot but no log", dir.display())));
    }
    let meta = meta::MetaFile::open(&dir.join("meta"), fresh)?;
    if fresh && meta.current().vote.is_some() {
        // The log is created right after `meta`, before any vote: it was lost.
        return Err(StoreError::Corrupt(format!("{}: a vote but no log", dir.display())));
    }
    let snapshots = SnapshotStore::open(dir)?;
    // The log must hold every committed entry the snapshot does not cover: one that ends
    // before is cut (a torn tail never reaches below what a quorum acknowledged).
    let covered = snapshots.current().and_then(|s| s.meta.last_log_id);
    let must_reach = meta.current().committed.filter(|c| Some(c.index) > covered.map(|l| l.index));
    let log = log_file::LogFile::open(dir, must_reach)?;
    let machine = StateMachine::open(machine, snapshots, lock.clone())?;
    let store = LogStore::new(log, meta, sync::Syncer::new(sync), lock);
    Ok((store, machine))
}

#[cfg(test)]
mod tests {
    use openraft::storage::RaftLogStorage;
    use openraft::storage::RaftStateMachine;
    use openraft::RaftSnapshotBuilder;

    use super::*;
    use crate::types::Vote;

    /// A state machine holding one byte string; it rejects snapshots starting with `!`.
    #[derive(Default)]
    struct Bytes(Vec<u8>);

    impl Replicated for Bytes {
        fn apply(&mut self, _: u64, command: &[u8]) {
            self.0.extend_from_slice(command);
        }
        fn snapshot(&self) -> Vec<u8> {
            self.0.clone()
        }
        fn install(&mut self, snapshot: &[u8]) -> Result<(), String> {
            if snapshot.starts_with(b"!") {
                return Err("not mine".into());
            }
            self.0 = snapshot.to_vec();
            Ok(())
        }
    }

    fn rt() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
    }

    #[test]
    fn a_vote_without_its_log_is_damage() {
        let dir = tempfile::tempdir().unwrap();
        let (mut log, _sm) = open_storage(dir.path(), Bytes::default()).unwrap();
        rt().block_on(log.save_vote(&Vote::new(3, 1))).unwrap();
        drop((log, _sm));
        std::fs::remove_file(dir.path().join("log")).unwrap();
        assert!(matches!(open_storage(dir.path(), Bytes::default()), Err(StoreError::Corrupt(_))));
    }

    /// A log cut below the committed entry `meta` names lost entries a quorum acknowledged:
    /// refused as damage naming the file and where it ends, and nothing is changed. A torn tail
    /// above the committed entry is only dropped.
    #[test]
    fn a_log_cut_below_the_committed_entry_is_damage_naming_the_file_and_offset() {
        use openraft::CommittedLeaderId;
        use openraft::EntryPayload;

        use crate::types::Entry;
        use crate::types::LogId;

        let id = |index| LogId::new(CommittedLeaderId::new(1, 1), index);
        let dir = tempfile::tempdir().unwrap();
        drop(open_storage(dir.path(), Bytes::default()).unwrap());
        let mut log = log_file::LogFile::open(dir.path(), None).unwrap();
        log.append((0..6).map(|i| Entry { log_id: id(i), payload: EntryPayload::Blank })).unwrap();
        let mut meta = meta::MetaFile::open(&dir.path().join("meta"), false).unwrap();
        meta.save_committed(Some(id(3))).unwrap();
        drop((log, meta));
        let path = dir.path().join("log");
        let used = |bytes: &[u8]| bytes.iter().rposition(|b| *b != 0).map_or(0, |i| i + 1);
        let whole = std::fs::read(&path).unwrap();
        let end = used(&whole);

        // Cut inside the last entry's frame: a torn tail, above the committed entry.
        std::fs::write(&path, &whole[..end - 3]).unwrap();
        drop(open_storage(dir.path(), Bytes::default()).unwrap());

        // Cut inside the third entry: entry 3 was committed and is gone.
        let bytes = std::fs::read(&path).unwrap();
        let cut = &bytes[..used(&bytes) / 2];
        std::fs::write(&path, cut).unwrap();
        match open_storage(dir.path(), Bytes::default()) {
            Err(StoreError::Corrupt(m)) => {
                assert!(m.contains(&path.display().to_string()), "{m}");
                assert!(m.contains("ends at offset") && m.contains("was committed"), "{m}");
            }
            other => panic!("expected a corrupt log, got {other:?}"),
        }
        assert_eq!(std::fs::read(&path).unwrap(), cut, "nothing changed");
    }

    #[test]
    fn the_stored_snapshot_restores_the_state_and_a_rejected_one_stops_the_start() {
        let dir = tempfile::tempdir().unwrap();
        let (log, mut sm) = open_storage(dir.path(), Bytes(b"state".to_vec())).unwrap();
        rt().block_on(async { sm.get_snapshot_builder().await.build_snapshot().await }).unwrap();
        drop((log, sm));
        let (_log, sm) = open_storage(dir.path(), Bytes::default()).unwrap();
        assert_eq!(sm.replica().lock().unwrap().machine().0, b"state");

        let other = tempfile::tempdir().unwrap();
        let (log, mut sm) = open_storage(other.path(), Bytes(b"!not a snapshot of Bytes".to_vec())).unwrap();
        rt().block_on(async { sm.get_snapshot_builder().await.build_snapshot().await }).unwrap();
        drop((log, sm));
        assert!(matches!(open_storage(other.path(), Bytes::default()), Err(StoreError::Snapshot(_))));
    }
}
