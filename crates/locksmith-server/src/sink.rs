//! Where the service's output goes: records to the log, then the messages that depend on them.
//!
//! The durable sink runs the log writer on its own OS thread (file I/O blocks) and commits in
//! groups: while one `fdatasync` runs, new batches queue up, and the next write covers them all
//! with one sync. A batch's messages go out only after its records are on disk when any of them
//! needs it (a grant), so a token a client has seen is never issued again after a crash.
//! A batch that needs no sync, submitted while no earlier batch's messages are still waiting in
//! the writer, is delivered at once and only its records go to the writer: the answer to a
//! release or a keep-alive does not wait for a thread hop.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use locksmith_proto::ServerMessage;
use tokio::sync::mpsc;

use crate::error::ServerError;
use crate::machine::Record;
use crate::outbox::Outbox;
use crate::wal::{encode_into, DataDir, LogFile};

/// An answer that is not a stream message (a status page): sent once the batch it goes out
/// with may be told (see [`Sink::submit`]).
pub(crate) type Reply = Box<dyn FnOnce() + Send>;

/// One flush of the service to a cluster's leader sink: records to replicate and the answers
/// that wait for them (see `crate::cluster::committer`).
pub(crate) type Batch = (Vec<Record>, Vec<(Outbox, ServerMessage)>, Vec<Reply>);

/// Log size after which the service writes a snapshot and starts a new log.
const COMPACT_AT: u64 = 64 * 1024 * 1024;

pub(crate) enum Job {
    /// Records, the messages that wait for them, and when the batch was submitted (only
    /// timed with a metrics recorder, see [`crate::telemetry::recording`]).
    Batch(Vec<Record>, Vec<(Outbox, ServerMessage)>, Option<Instant>),
    Compact(Vec<Record>),
}

pub(crate) enum Sink {
    /// In memory: nothing to persist, deliver at once.
    Direct,
    Durable {
        tx: Option<mpsc::UnboundedSender<Job>>,
        thread: Option<std::thread::JoinHandle<Result<(), ServerError>>>,
        failed: Arc<AtomicBool>,
        compact: Arc<AtomicBool>,
        /// Batches whose messages the writer has not delivered yet.
        in_flight: Arc<AtomicUsize>,
    },
    /// A cluster's leader: through the Raft log (see `crate::cluster::committer`).
    #[cfg_attr(not(feature = "cluster"), allow(dead_code))]
    Cluster(mpsc::UnboundedSender<Batch>),
}

impl Sink {
    pub(crate) fn durable(dir: DataDir, file: LogFile) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        let failed = Arc::new(AtomicBool::new(false));
        let compact = Arc::new(AtomicBool::new(false));
        let in_flight = Arc::new(AtomicUsize::new(0));
        let (f, c, n) = (failed.clone(), compact.clone(), in_flight.clone());
        let thread = std::thread::Builder::new().name("locksmith-wal".into()).spawn(move || {
            let r = write_loop(dir, file, rx, &c, &n);
            if let Err(e) = &r {
                tracing::error!(error = %e, "write-ahead log failed; no further grants will be acknowledged");
                f.store(true, Ordering::SeqCst);
            }
            r
        });
        match thread {
            Ok(t) => Sink::Durable { tx: Some(tx), thread: Some(t), failed, compact, in_flight },
            Err(e) => {
                tracing::error!(error = %e, "cannot start the log writer thread");
                failed.store(true, Ordering::SeqCst);
                Sink::Durable { tx: None, thread: None, failed, compact, in_flight }
            }
        }
    }

    /// Sends `records` to the log and `msgs` after them. `replies` describe the state these
    /// records lead to: a single node answers them at once (as before the records are synced,
    /// like any read); a cluster's leader only once the records are committed, or a quorum
    /// confirmed it still leads.
    pub(crate) fn submit(
        &mut self,
        records: Vec<Record>,
        msgs: Vec<(Outbox, ServerMessage)>,
        replies: Vec<Reply>,
    ) -> Result<(), ServerError> {
        let replies = match self {
            Sink::Cluster(_) => replies,
            _ => {
                replies.into_iter().for_each(|r| r());
                Vec::new()
            }
        };
        match self {
            Sink::Direct => {
                for (out, m) in msgs {
                    out.deliver(m);
                }
                Ok(())
            }
            Sink::Cluster(tx) => tx.send((records, msgs, replies)).map_err(|_| ServerError::WriterStopped),
            Sink::Durable { tx, thread, failed, in_flight, .. } => {
                let mut msgs = msgs;
                // Only this task increments, so a zero here means every earlier message is out.
                if !msgs.is_empty() && in_flight.load(Ordering::Acquire) == 0 && !records.iter().any(Record::needs_sync)
                {
                    for (out, m) in msgs.drain(..) {
                        out.deliver(m);
                    }
                }
                if records.is_empty() && msgs.is_empty() {
                    return Ok(());
                }
                if !msgs.is_empty() {
                    in_flight.fetch_add(1, Ordering::AcqRel);
                }
                let submitted = crate::telemetry::recording().then(Instant::now);
                let sent = tx.as_ref().is_some_and(|tx| tx.send(Job::Batch(records, msgs, submitted)).is_ok());
                if !sent || failed.load(Ordering::SeqCst) {
                    // The writer's own error says why (a full disk is an exit code of its own).
                    return Err(match thread.take().map(std::thread::JoinHandle::join) {
                        Some(Ok(Err(e))) => e,
                        _ => ServerError::WriterStopped,
                    });
                }
                Ok(())
            }
        }
    }

    pub(crate) fn wants_compaction(&self) -> bool {
        match self {
            Sink::Direct | Sink::Cluster(_) => false,
            Sink::Durable { compact, .. } => compact.load(Ordering::Relaxed),
        }
    }

    pub(crate) fn compact(&mut self, snapshot: Vec<Record>) {
        if let Sink::Durable { tx: Some(tx), compact, .. } = self {
            compact.store(false, Ordering::Relaxed);
            let _ = tx.send(Job::Compact(snapshot));
        }
    }

    /// Waits until everything submitted is written.
    pub(crate) fn finish(&mut self) -> Result<(), ServerError> {
        if let Sink::Durable { tx, thread, .. } = self {
            tx.take();
            if let Some(t) = thread.take() {
                return t.join().unwrap_or_else(|_| Err(ServerError::Failed("log writer panicked".into())));
            }
        }
        Ok(())
    }
}

fn write_loop(
    mut dir: DataDir,
    mut file: LogFile,
    mut rx: mpsc::UnboundedReceiver<Job>,
    compact: &AtomicBool,
    in_flight: &AtomicUsize,
) -> Result<(), ServerError> {
    let mut buf = Vec::with_capacity(64 * 1024);
    let mut jobs = Vec::new();
    // The messages of one round, kept across rounds with their capacity.
    let mut out = Vec::new();
    while let Some(first) = rx.blocking_recv() {
        jobs.push(first);
        while let Ok(more) = rx.try_recv() {
            jobs.push(more);
        }
        let mut sync = false;
        // A new token floor in this round: written to `tokens` once the log is synced, before
        // any answer that may carry a token above the old floor goes out.
        let mut floor = None;
        let mut delivered = 0;
        let mut records = 0;
        // The oldest batch whose messages wait for this write: how long the disk held them up.
        let mut oldest: Option<Instant> = None;
        for job in jobs.drain(..) {
            match job {
                Job::Batch(batch, msgs, submitted) => {
                    records += batch.len();
                    for r in &batch {
                        sync |= r.needs_sync();
                        if let Record::Floor { upto } = r {
                            floor = floor.max(Some(*upto));
                        }
                        encode_into(r, &mut buf);
                    }
                    if !msgs.is_empty() {
                        delivered += 1;
                        out.extend(msgs);
                        if oldest.is_none() {
                            oldest = submitted;
                        }
                    }
                }
                Job::Compact(snapshot) => {
                    // Everything before the snapshot point must reach the old log first.
                    file.append(&buf)?;
                    buf.clear();
                    file = dir.rewrite(&snapshot)?;
                    sync = false;
                }
            }
        }
        if !buf.is_empty() {
            file.append(&buf)?;
            buf.clear();
        }
        // A compaction in this round cleared `sync` for what came before it; a new floor still
        // needs the log synced, because the floor file records how much of it is durable.
        if sync || floor.is_some() {
            let started = crate::telemetry::recording().then(Instant::now);
            file.sync()?;
            if let Some(started) = started {
                crate::telemetry::wal_sync(started.elapsed().as_secs_f64(), records);
            }
        }
        if let Some(upto) = floor {
            dir.raise_floor(upto, file.len())?;
        }
        // Never waits for a client: a full outbox ends its stream instead (see `outbox`).
        for (o, m) in out.drain(..) {
            o.deliver(m);
        }
        if let (true, Some(oldest)) = (sync, oldest) {
            crate::telemetry::durable_delivery(oldest.elapsed().as_secs_f64());
        }
        in_flight.fetch_sub(delivered, Ordering::AcqRel);
        if file.len() > COMPACT_AT {
            compact.store(true, Ordering::Relaxed);
        }
    }
    file.sync()?;
    Ok(())
}
