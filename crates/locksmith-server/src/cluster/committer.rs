//! The cluster's sink: what the leader's service decided goes through Raft before anyone hears
//! of it. Batches queued while a write is under way are merged into the next write (group
//! commit: openraft syncs each write on its own). A batch of answers without records (a
//! keep-alive, a busy lock, a status page) waits for a barrier — a quorum confirming this node still leads —
//! so a leader cut off from the majority never tells a client its lease was renewed: the new
//! leader, which never heard of that renewal, may expire it.

use std::sync::Arc;

use locksmith_raft::{latency, RaftNode, MAX_COMMAND};
use tokio::sync::mpsc;

use super::replica::ReplicaMachine;
use crate::machine::Record;
use crate::sink::Batch;
use crate::wal;

/// Starts the task that commits batches in order; returns where to send them.
pub(crate) fn start(node: Arc<RaftNode<ReplicaMachine>>) -> mpsc::UnboundedSender<Batch> {
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(commit_loop(node, rx));
    tx
}

async fn commit_loop(node: Arc<RaftNode<ReplicaMachine>>, mut rx: mpsc::UnboundedReceiver<Batch>) {
    while let Some((mut records, mut msgs, mut replies)) = rx.recv().await {
        while let Ok((r, m, a)) = rx.try_recv() {
            records.extend(r);
            msgs.extend(m);
            replies.extend(a);
        }
        let started = latency::start();
        let committed =
            if records.is_empty() { node.barrier().await.map(|_| ()) } else { write(&node, &records).await };
        latency::done(started, if records.is_empty() { "barrier" } else { "commit" }, records.len());
        match committed {
            Ok(()) => {
                for (out, m) in msgs {
                    out.deliver(m);
                }
                replies.into_iter().for_each(|r| r());
            }
            // Leadership is lost (or the node stops): the answers are dropped; the service
            // ends their streams as it steps down, and clients resume on the new leader, which
            // answers again from the committed state.
            Err(e) => tracing::debug!(error = %e, records = records.len(), "not committed; answers dropped"),
        }
    }
}

/// Replicates `records` in as few commands as fit [`MAX_COMMAND`], in order.
async fn write(node: &RaftNode<ReplicaMachine>, records: &[Record]) -> Result<(), locksmith_raft::ClientWriteError> {
    let mut command = Vec::new();
    for r in records {
        // Framed straight into the command; only a frame that overflows it is moved to the next.
        let before = command.len();
        wal::encode_into(r, &mut command);
        if before > 0 && command.len() > MAX_COMMAND {
            let next = command.split_off(before);
            node.client_write(std::mem::replace(&mut command, next)).await?;
        }
    }
    if !command.is_empty() {
        node.client_write(command).await?;
    }
    Ok(())
}
