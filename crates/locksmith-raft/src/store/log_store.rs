//! openraft's [`RaftLogStorage`] over the [`LogFile`], the [`MetaFile`] and the [`Syncer`].

use std::fmt::Debug;
use std::fs::File;
use std::ops::Bound;
use std::ops::RangeBounds;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::MutexGuard;

use openraft::storage::LogFlushed;
use openraft::storage::LogState;
use openraft::storage::RaftLogStorage;
use openraft::OptionalSend;
use openraft::RaftLogReader;
use openraft::StorageIOError;

use super::log_file::LogFile;
use super::meta::MetaFile;
use super::sync::Done;
use super::sync::Syncer;
use crate::types::Entry;
use crate::types::LogId;
use crate::types::StorageError;
use crate::types::TypeConfig;
use crate::types::Vote;

/// Most bytes of entries one replication message carries (at least one entry is always sent):
/// keeps a message far below gRPC's size limit, and quick enough for the AppendEntries
/// deadline (the heartbeat interval), whatever the commands' sizes.
const MAX_BATCH_BYTES: u64 = 1 << 20;

/// The durable Raft log of a node's data directory (see the crate docs for the layout), handed
/// to openraft.
#[derive(Debug)]
pub struct LogStore {
    log: Arc<Mutex<LogFile>>,
    meta: MetaFile,
    syncer: Syncer,
    _lock: Arc<File>,
}

/// Reads entries of a [`LogStore`] for replication, concurrently with appends.
#[derive(Debug, Clone)]
pub struct LogReader {
    log: Arc<Mutex<LogFile>>,
}

impl LogStore {
    pub(super) fn new(log: LogFile, meta: MetaFile, syncer: Syncer, lock: Arc<File>) -> Self {
        Self { log: Arc::new(Mutex::new(log)), meta, syncer, _lock: lock }
    }

    /// Waits until everything appended so far is on disk.
    async fn flush(&self) -> Result<(), StorageError> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let file = lock(&self.log)?.file();
        self.syncer.submit(file, Done::Barrier(tx));
        match rx.await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(StorageIOError::write_logs(&e).into()),
            Err(e) => Err(StorageIOError::write_logs(&e).into()),
        }
    }
}

fn lock(log: &Mutex<LogFile>) -> Result<MutexGuard<'_, LogFile>, StorageError> {
    // Poisoned only if a panic interrupted an update of the index: do not trust it then.
    log.lock().map_err(|_| StorageIOError::read_logs(openraft::AnyError::error("log index poisoned")).into())
}

/// The entries of `log` in `range`, up to `max_bytes` of them (at least one).
fn read(log: &Mutex<LogFile>, range: &impl RangeBounds<u64>, max_bytes: u64) -> Result<Vec<Entry>, StorageError> {
    let start = match range.start_bound() {
        Bound::Included(i) => *i,
        Bound::Excluded(i) => i.saturating_add(1),
        Bound::Unbounded => 0,
    };
    let end = match range.end_bound() {
        Bound::Included(i) => i.saturating_add(1),
        Bound::Excluded(i) => *i,
        Bound::Unbounded => u64::MAX,
    };
    lock(log)?.read(start, end, max_bytes).map_err(|e| StorageIOError::read_logs(&e).into())
}

impl RaftLogReader<TypeConfig> for LogReader {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, StorageError> {
        read(&self.log, &range, u64::MAX)
    }

    async fn limited_get_log_entries(&mut self, start: u64, end: u64) -> Result<Vec<Entry>, StorageError> {
        read(&self.log, &(start..end), MAX_BATCH_BYTES)
    }
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, StorageError> {
        read(&self.log, &range, u64::MAX)
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogReader;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError> {
        let log = lock(&self.log)?;
        Ok(LogState { last_purged_log_id: log.purged(), last_log_id: log.last_log_id() })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        LogReader { log: self.log.clone() }
    }

    async fn save_vote(&mut self, vote: &Vote) -> Result<(), StorageError> {
        // Writes are serialized for openraft: appends queued before the vote are on disk first.
        self.flush().await?;
        self.meta.save_vote(vote).map_err(|e| StorageIOError::write_vote(&e).into())
    }

    async fn read_vote(&mut self) -> Result<Option<Vote>, StorageError> {
        Ok(self.meta.current().vote)
    }

    async fn save_committed(&mut self, committed: Option<LogId>) -> Result<(), StorageError> {
        self.meta.save_committed(committed).map_err(|e| StorageIOError::write(&e).into())
    }

    async fn read_committed(&mut self) -> Result<Option<LogId>, StorageError> {
        Ok(self.meta.current().committed)
    }

    async fn append<I>(&mut self, entries: I, callback: LogFlushed<TypeConfig>) -> Result<(), StorageError>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let started = crate::latency::start();
        let file = {
            let mut log = lock(&self.log)?;
            log.append(entries).map_err(|e| StorageIOError::write_logs(&e))?;
            log.file()
        };
        crate::latency::done(started, "log_write", 0);
        // Readable now; durable, and acknowledged to openraft, once synced (see `sync`).
        let started = crate::latency::start();
        self.syncer.submit(file, Done::Flushed(callback));
        crate::latency::done(started, "log_sync", 0);
        Ok(())
    }

    async fn truncate(&mut self, log_id: LogId) -> Result<(), StorageError> {
        lock(&self.log)?.truncate(log_id.index).map_err(|e| StorageIOError::write_logs(&e).into())
    }

    async fn purge(&mut self, log_id: LogId) -> Result<(), StorageError> {
        lock(&self.log)?.purge(log_id).map_err(|e| StorageIOError::write_logs(&e).into())
    }
}
