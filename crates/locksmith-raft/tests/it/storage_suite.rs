//! openraft's storage conformance suite against the log store and the state machine adapter.

use crate::common::Recorder;
use locksmith_raft::state_machine::StateMachine;
use locksmith_raft::store::open_storage;
use locksmith_raft::store::LogStore;
use locksmith_raft::types::StorageError;
use locksmith_raft::types::TypeConfig;
use openraft::testing::StoreBuilder;
use openraft::testing::Suite;
use openraft::StorageIOError;
use tempfile::TempDir;

/// A fresh data directory per case; the guard removes it.
struct DirBuilder;

impl StoreBuilder<TypeConfig, LogStore, StateMachine<Recorder>, TempDir> for DirBuilder {
    async fn build(&self) -> Result<(TempDir, LogStore, StateMachine<Recorder>), StorageError> {
        let dir = tempfile::tempdir().map_err(|e| StorageIOError::write(&e))?;
        let (log, sm) = open_storage(dir.path(), Recorder::default()).map_err(|e| StorageIOError::write(&e))?;
        Ok((dir, log, sm))
    }
}

/// Every case of openraft's suite passes. It builds its own runtime per case, so it runs in a
/// plain `#[test]`, not inside `#[tokio::test]`.
#[test]
fn openraft_storage_suite_passes() {
    if let Err(e) = Suite::test_all(DirBuilder) {
        panic!("{e}");
    }
}
