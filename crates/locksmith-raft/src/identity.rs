//! The cluster's identity: a random id that the first leader of a cluster draws, every member
//! keeps in its data directory (`cluster-id`), and every Raft call carries in its node proof.
//!
//! It tells two clusters with the same node ids apart — e.g. a majority whose data directories
//! were wiped and restarted with `--peers`, forming a new cluster beside a node that still has
//! the old one's log. Raft cannot see that (the new cluster's log simply conflicts with
//! committed entries); the id can:
//!
//! - a node without an id takes the one of the first leader that reaches it (a new member, a
//!   node of a cluster formed before ids existed), and so does a node with no history yet (it has
//!   applied nothing beyond a cluster's first entry: two nodes that both formed the cluster as it
//!   started);
//! - a node with history refuses every call from another cluster, and when a leader of another
//!   cluster reaches it, it stops with a clear error ([`RaftNode::foreign_cluster`]) instead of
//!   letting openraft meet a log it cannot accept.
//!
//! [`RaftNode::foreign_cluster`]: crate::RaftNode::foreign_cluster

use std::io::Write;
use std::path::Path;
use std::path::PathBuf;
use std::sync::Mutex;

use tokio::sync::watch;

use crate::error::StartError;
use crate::error::StoreError;

/// The file in the Raft data directory that holds the id (32 hex digits).
const FILE: &str = "cluster-id";

/// This node's cluster id (0: none yet), and what it found when it met another cluster.
#[derive(Debug)]
pub(crate) struct Identity {
    dir: PathBuf,
    id: Mutex<u128>,
    foreign: watch::Sender<Option<String>>,
}

impl Identity {
    /// The id kept in `dir`, if any.
    ///
    /// # Errors
    /// [`StoreError::Corrupt`] for a file that does not hold an id (the data directory is
    /// damaged), [`StartError::Raft`] for one that cannot be read.
    pub(crate) fn load(dir: &Path) -> Result<Self, StartError> {
        let path = dir.join(FILE);
        let id = match std::fs::read_to_string(&path) {
            Ok(text) => u128::from_str_radix(text.trim(), 16).map_err(|_| {
                StartError::Store(StoreError::Corrupt(format!("{} does not hold a cluster id", path.display())))
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => 0,
            Err(e) => return Err(StartError::Raft(format!("cannot read {}: {e}", path.display()))),
        };
        Ok(Self { dir: dir.to_path_buf(), id: Mutex::new(id), foreign: watch::channel(None).0 })
    }

    /// The id; 0 when none yet.
    pub(crate) fn get(&self) -> u128 {
        *self.id.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The id, drawn and kept now if there is none: called as this node sends a leader's message.
    pub(crate) fn get_or_draw(&self) -> u128 {
        let mut id = self.id.lock().unwrap_or_else(|p| p.into_inner());
        if *id == 0 {
            let mut bytes = [0u8; 16];
            // ring's generator reads the OS's; a failure leaves the node without an id, as before.
            if ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut bytes).is_ok() {
                let drawn = u128::from_be_bytes(bytes).max(1);
                match self.store(drawn) {
                    Ok(()) => {
                        tracing::info!(cluster = %format!("{drawn:032x}"), "raft: this cluster's id drawn");
                        *id = drawn;
                    }
                    Err(e) => tracing::warn!(error = %e, "raft: cannot keep the cluster id"),
                }
            }
        }
        *id
    }

    /// Takes `id`, the one of the leader that reached this node.
    pub(crate) fn adopt(&self, new: u128) {
        let mut id = self.id.lock().unwrap_or_else(|p| p.into_inner());
        if *id == new {
            return;
        }
        match self.store(new) {
            Ok(()) => {
                tracing::info!(cluster = %format!("{new:032x}"), was = %format!("{:032x}", *id), "raft: cluster id taken from the leader");
                *id = new;
            }
            Err(e) => tracing::warn!(error = %e, "raft: cannot keep the cluster id"),
        }
    }

    /// Records that a leader of another cluster reached this node: the node must stop.
    pub(crate) fn met_foreign(&self, message: String) {
        self.foreign.send_if_modified(|f| {
            if f.is_some() {
                return false;
            }
            *f = Some(message);
            true
        });
    }

    /// A watch of [`met_foreign`](Self::met_foreign).
    pub(crate) fn foreign(&self) -> watch::Receiver<Option<String>> {
        self.foreign.subscribe()
    }

    /// Writes `id` durably: a temporary file synced, renamed into place, the directory synced.
    fn store(&self, id: u128) -> std::io::Result<()> {
        let tmp = self.dir.join(format!("{FILE}.tmp"));
        let mut file = std::fs::File::create(&tmp)?;
        writeln!(file, "{id:032x}")?;
        file.sync_all()?;
        std::fs::rename(&tmp, self.dir.join(FILE))?;
        std::fs::File::open(&self.dir)?.sync_all()
    }
}

#[cfg(test)]
mod tests {
    use super::Identity;
    use crate::error::StartError;
    use crate::error::StoreError;

    #[test]
    fn an_id_drawn_or_adopted_is_kept_across_restarts() {
        let dir = tempfile::tempdir().unwrap();
        let identity = Identity::load(dir.path()).unwrap();
        assert_eq!(identity.get(), 0);
        let drawn = identity.get_or_draw();
        assert_ne!(drawn, 0);
        assert_eq!(identity.get_or_draw(), drawn);
        assert_eq!(Identity::load(dir.path()).unwrap().get(), drawn);
        identity.adopt(7);
        assert_eq!(Identity::load(dir.path()).unwrap().get(), 7);
        std::fs::write(dir.path().join("cluster-id"), "not hex\n").unwrap();
        let e = Identity::load(dir.path()).unwrap_err();
        assert!(
            matches!(&e, StartError::Store(StoreError::Corrupt(m)) if m.contains("does not hold a cluster id")),
            "{e}"
        );
    }
}
