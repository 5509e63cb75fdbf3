//! The log's sync thread: `fdatasync` off the async runtime, one sync for every append that
//! queued up meanwhile.
//!
//! openraft's contract for [`RaftLogStorage::append`](openraft::storage::RaftLogStorage::append)
//! is "return once the entries are readable, call the callback once they are on disk". The
//! appending task writes the frames into the page cache itself (a few microseconds) and queues
//! a job here; this thread syncs the file and only then calls the callback. A job is queued
//! after its write completed, so one `fdatasync` started after dequeuing covers every job
//! dequeued with it (group commit, should openraft ever pipeline appends; 0.9 awaits each one).

use std::fs::File;
use std::io;
use std::sync::mpsc;
use std::sync::Arc;

use openraft::storage::LogFlushed;

use crate::types::TypeConfig;

/// What to do once the file is synced.
pub(crate) enum Done {
    /// Tell openraft that an append is durable.
    Flushed(LogFlushed<TypeConfig>),
    /// Wake a caller waiting for everything appended so far to be durable.
    Barrier(tokio::sync::oneshot::Sender<io::Result<()>>),
}

impl Done {
    fn complete(self, result: io::Result<()>) {
        match self {
            Done::Flushed(callback) => callback.log_io_completed(result),
            // The waiter may have gone away; nothing to tell then.
            Done::Barrier(tx) => drop(tx.send(result)),
        }
    }
}

/// One request to the thread: sync `file`, then `done`.
struct Job {
    file: Arc<File>,
    done: Done,
}

/// Where the log's syncs run.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) enum SyncMode {
    /// On the log's own sync thread, batched (group commit): what a node runs.
    #[default]
    Thread,
    /// Each sync on tokio's blocking pool, unbatched: for the in-process test fixture only.
    /// Tokio cannot see a thread of our own, so under paused time a sync in flight on it looks
    /// like an idle runtime and the clock jumps to the next timer (elections that only the
    /// jump caused); a `spawn_blocking` task holds a paused clock still while it runs.
    #[cfg(feature = "test-fixture")]
    BlockingPool,
}

/// The handle of the log's syncs; the sync thread ends when the handle is dropped.
#[derive(Debug)]
pub(crate) struct Syncer {
    /// `None` in [`SyncMode::BlockingPool`].
    tx: Option<mpsc::Sender<Job>>,
}

impl Syncer {
    /// Starts the syncs in `mode`: the thread, for [`SyncMode::Thread`].
    ///
    /// # Errors
    /// The OS refused to start a thread.
    pub(crate) fn start(mode: SyncMode) -> io::Result<Self> {
        match mode {
            SyncMode::Thread => {
                let (tx, rx) = mpsc::channel();
                std::thread::Builder::new().name("raft-log-sync".into()).spawn(move || run(&rx))?;
                Ok(Self { tx: Some(tx) })
            }
            #[cfg(feature = "test-fixture")]
            SyncMode::BlockingPool => Ok(Self { tx: None }),
        }
    }

    /// Queues `done` to run once `file` is synced. Call it after the write to cover.
    pub(crate) fn submit(&self, file: Arc<File>, done: Done) {
        let Some(tx) = &self.tx else {
            // SyncMode::BlockingPool (the test fixture): one sync per job, no sticky failure.
            tokio::task::spawn_blocking(move || done.complete(file.sync_data()));
            return;
        };
        if let Err(mpsc::SendError(job)) = tx.send(Job { file, done }) {
            // Only if the thread died (it does not panic by itself): report, never hang.
            job.done.complete(Err(io::Error::other("the log sync thread is gone")));
        }
    }
}

/// An `io::Result` that can be cloned to every job of a batch.
type SyncResult = Result<(), (io::ErrorKind, String)>;

fn run(rx: &mpsc::Receiver<Job>) {
    // After a failed fdatasync the kernel may have dropped the dirty pages and a later sync can
    // succeed without them on disk: every later job fails too (openraft then stops the node).
    let mut failed: Option<(io::ErrorKind, String)> = None;
    while let Ok(first) = rx.recv() {
        let mut batch = vec![first];
        batch.extend(rx.try_iter());
        // Usually one file; two around a compaction (jobs for the old file and the new one).
        let mut synced: Vec<(Arc<File>, SyncResult)> = Vec::new();
        for job in batch {
            let result = match (&failed, synced.iter().find(|(f, _)| Arc::ptr_eq(f, &job.file))) {
                (Some(e), _) => Err(e.clone()),
                (None, Some((_, r))) => r.clone(),
                (None, None) => {
                    let r = job.file.sync_data().map_err(|e| (e.kind(), e.to_string()));
                    synced.push((job.file.clone(), r.clone()));
                    r
                }
            };
            if let Err(e) = &result {
                failed = Some(e.clone());
            }
            job.done.complete(result.map_err(|(kind, msg)| io::Error::new(kind, msg)));
        }
    }
}
