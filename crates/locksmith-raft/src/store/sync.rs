//! The log's syncs: `fdatasync` of the log file before openraft hears an append is durable.
//!
//! openraft's contract for [`RaftLogStorage::append`](openraft::storage::RaftLogStorage::append)
//! is "return once the entries are readable, call the callback once they are on disk". openraft
//! 0.9's core task awaits that callback right after `append` and does nothing else meanwhile (it
//! sends the entries to the followers only after the leader's own flush). A node therefore syncs
//! in the appending task itself ([`SyncMode::Inline`]): handing the sync to a thread of its own
//! cost two thread wake-ups per entry on every node (to the thread and back to the core) and
//! bought nothing, since no other append can be queued behind it. Issue 27 measured a 3-node
//! cluster with one client cycling a lock (docs/benchmarks.md): context switches per cycle, all
//! nodes together, 111–141 with the thread, 72–86 inline; CPU per cycle 3.4–4.1 ms → 2.8 ms.
//! The sync blocks the runtime worker that runs openraft's core (which waits for it anyway);
//! the runtime's other workers keep serving the node's other tasks. A runtime with one worker
//! (a current-thread runtime, or a one-CPU machine or container, where tokio's default is one
//! worker) has no other: there each sync goes to tokio's blocking pool instead, so client
//! sessions and the gRPC server are not stopped for every `fdatasync`.

use std::fs::File;
use std::io;
use std::sync::Arc;
use std::sync::Mutex;

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

/// Where the log's syncs run.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) enum SyncMode {
    /// In the appending task, before it returns: what a node runs. On a runtime with a single
    /// worker, on the blocking pool instead ([`alone_on_runtime`]).
    #[default]
    Inline,
    /// Each sync on tokio's blocking pool, unbatched: for the in-process test fixture only.
    /// Tokio cannot see a thread of our own, so under paused time a sync in flight on it looks
    /// like an idle runtime and the clock jumps to the next timer (elections that only the
    /// jump caused); a `spawn_blocking` task holds a paused clock still while it runs.
    #[cfg(feature = "test-fixture")]
    BlockingPool,
}

/// The log's syncs.
#[derive(Debug)]
pub(crate) struct Syncer {
    mode: SyncMode,
    /// After a failed fdatasync the kernel may have dropped the dirty pages and a later sync can
    /// succeed without them on disk: every later sync fails too (openraft then stops the node).
    failed: Arc<Mutex<Option<(io::ErrorKind, String)>>>,
}

impl Syncer {
    /// Syncs in `mode`.
    pub(crate) fn new(mode: SyncMode) -> Self {
        Self { mode, failed: Arc::default() }
    }

    /// Runs `done` once `file` is synced. Call it after the write to cover.
    pub(crate) fn submit(&self, file: Arc<File>, done: Done) {
        match self.mode {
            SyncMode::Inline if alone_on_runtime() => {
                let failed = self.failed.clone();
                tokio::task::spawn_blocking(move || done.complete(sync(&failed, &file)));
            }
            SyncMode::Inline => done.complete(sync(&self.failed, &file)),
            // The test fixture: one sync per job on the blocking pool, no sticky failure.
            #[cfg(feature = "test-fixture")]
            SyncMode::BlockingPool => {
                tokio::task::spawn_blocking(move || done.complete(file.sync_data()));
            }
        }
    }
}

/// `fdatasync` of `file`, failing for good once one has failed (`failed`).
fn sync(failed: &Mutex<Option<(io::ErrorKind, String)>>, file: &File) -> io::Result<()> {
    // Poisoned only by a panic in this function's short critical sections: treat as failed.
    let Ok(mut failed) = failed.lock() else {
        return Err(io::Error::other("the log's sync state is poisoned"));
    };
    if let Some((kind, msg)) = &*failed {
        return Err(io::Error::new(*kind, msg.clone()));
    }
    file.sync_data().inspect_err(|e| *failed = Some((e.kind(), e.to_string())))
}

/// Whether blocking the calling task's worker would stop every other task of its runtime: a
/// runtime with a single worker. Outside a runtime there is nothing else to stop.
fn alone_on_runtime() -> bool {
    tokio::runtime::Handle::try_current().is_ok_and(|h| h.metrics().num_workers() < 2)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn barrier(syncer: &Syncer, file: &Arc<File>) -> io::Result<()> {
        let (tx, mut rx) = tokio::sync::oneshot::channel();
        syncer.submit(file.clone(), Done::Barrier(tx));
        rx.try_recv().expect("an inline sync answers before submit returns")
    }

    #[test]
    fn a_runtime_with_one_worker_syncs_off_it() {
        assert!(!alone_on_runtime(), "no runtime: nothing to stop");
        let runtime = |workers| tokio::runtime::Builder::new_multi_thread().worker_threads(workers).build().unwrap();
        assert!(runtime(1).block_on(async { alone_on_runtime() }));
        assert!(!runtime(2).block_on(async { alone_on_runtime() }));
        let current = tokio::runtime::Builder::new_current_thread().build().unwrap();
        assert!(current.block_on(async { alone_on_runtime() }));
    }

    #[tokio::test]
    async fn off_the_only_worker_a_sync_answers_and_a_failure_still_sticks() {
        let null = Arc::new(File::open("/dev/null").unwrap());
        let file = Arc::new(tempfile::tempfile().unwrap());
        let syncer = Syncer::new(SyncMode::Inline);
        let sync = |f: &Arc<File>| {
            let (tx, rx) = tokio::sync::oneshot::channel();
            syncer.submit(f.clone(), Done::Barrier(tx));
            rx
        };
        sync(&file).await.unwrap().unwrap();
        let first = sync(&null).await.unwrap().unwrap_err();
        let later = sync(&file).await.unwrap().unwrap_err();
        assert_eq!(later.kind(), first.kind());
    }

    #[test]
    fn an_inline_sync_is_done_when_submit_returns() {
        let file = Arc::new(tempfile::tempfile().unwrap());
        let syncer = Syncer::new(SyncMode::Inline);
        barrier(&syncer, &file).unwrap();
        barrier(&syncer, &file).unwrap();
    }

    #[test]
    fn after_a_failed_sync_every_later_sync_fails() {
        // fdatasync of /dev/null fails (EINVAL): a stand-in for a disk error.
        let null = Arc::new(File::open("/dev/null").unwrap());
        let file = Arc::new(tempfile::tempfile().unwrap());
        let syncer = Syncer::new(SyncMode::Inline);
        let first = barrier(&syncer, &null).unwrap_err();
        let later = barrier(&syncer, &file).unwrap_err();
        assert_eq!(later.kind(), first.kind());
    }
}
