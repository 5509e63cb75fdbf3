//! The `snapshot` file: the newest snapshot of the state machine, with the log id and
//! membership it covers, so a restarted node starts from it and can send it to lagging
//! followers.
//!
//! Layout: a 16-byte magic, `meta length: u32 LE | data length: u64 LE | crc32(meta ‖ data):
//! u32 LE`, the postcard-encoded [`SnapshotMeta`](crate::types::SnapshotMeta), the state
//! machine's bytes. It is installed with [`locksmith_disk::install`] (`snapshot.tmp`, synced,
//! renamed over `snapshot`, the directory synced), so `snapshot` is always whole: any mismatch
//! is damage, never a torn write.

use std::fs::File;
use std::io;
use std::io::Read;
use std::path::Path;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::Mutex;

use crate::error::StoreError;
use crate::types::SnapshotMeta;

const MAGIC: &[u8; 16] = b"LOCKSMITH-SNAP1\n";
const HEAD: usize = MAGIC.len() + 4 + 8 + 4;

/// A snapshot as kept.
#[derive(Debug)]
pub(crate) struct StoredSnapshot {
    pub(crate) meta: SnapshotMeta,
    pub(crate) data: Vec<u8>,
}

/// The directory's snapshot: the newest one in memory, and on disk.
#[derive(Debug)]
pub(crate) struct SnapshotStore {
    dir: PathBuf,
    /// Held while writing, so two saves (a build and an install) never interleave.
    current: Mutex<Option<Arc<StoredSnapshot>>>,
}

impl SnapshotStore {
    /// Reads `dir/snapshot`, if there is one.
    ///
    /// # Errors
    /// [`StoreError::Corrupt`] when the file does not check out; I/O errors.
    pub(crate) fn open(dir: &Path) -> Result<Self, StoreError> {
        match std::fs::remove_file(dir.join("snapshot.tmp")) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e.into()),
            _ => {}
        }
        let path = dir.join("snapshot");
        let current = match File::open(&path) {
            Ok(mut f) => {
                let mut bytes = Vec::new();
                f.read_to_end(&mut bytes)?;
                let s = decode(&bytes).map_err(|e| StoreError::Corrupt(format!("{}: {e}", path.display())))?;
                Some(Arc::new(s))
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => return Err(e.into()),
        };
        Ok(Self { dir: dir.to_path_buf(), current: Mutex::new(current) })
    }

    /// The newest snapshot.
    pub(crate) fn current(&self) -> Option<Arc<StoredSnapshot>> {
        self.current.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Makes `snapshot` the current one, durably, unless the current one covers more of the log
    /// (a build that finished after a newer snapshot was installed).
    ///
    /// # Errors
    /// I/O errors; the previous snapshot is then still current.
    pub(crate) fn save(&self, snapshot: Arc<StoredSnapshot>) -> io::Result<()> {
        // A poisoned lock only means a save failed half-way: the file is whole either way.
        let mut current = self.current.lock().unwrap_or_else(|p| p.into_inner());
        if current.as_ref().is_some_and(|c| c.meta.last_log_id > snapshot.meta.last_log_id) {
            return Ok(());
        }
        locksmith_disk::install(&self.dir, "snapshot", &encode(&snapshot)?, 0)?;
        *current = Some(snapshot);
        Ok(())
    }
}

fn encode(s: &StoredSnapshot) -> io::Result<Vec<u8>> {
    let meta = postcard::to_stdvec(&s.meta).map_err(io::Error::other)?;
    let meta_len = u32::try_from(meta.len()).map_err(io::Error::other)?;
    let mut crc = crc32fast::Hasher::new();
    crc.update(&meta);
    crc.update(&s.data);
    let mut buf = Vec::with_capacity(HEAD + meta.len() + s.data.len());
    buf.extend_from_slice(MAGIC);
    buf.extend_from_slice(&meta_len.to_le_bytes());
    buf.extend_from_slice(&(s.data.len() as u64).to_le_bytes());
    buf.extend_from_slice(&crc.finalize().to_le_bytes());
    buf.extend_from_slice(&meta);
    buf.extend_from_slice(&s.data);
    Ok(buf)
}

fn decode(bytes: &[u8]) -> Result<StoredSnapshot, String> {
    if bytes.len() < HEAD || !bytes.starts_with(MAGIC) {
        return Err("not a locksmith raft snapshot (bad header)".into());
    }
    let word = |at: usize, n: usize| bytes[at..at + n].iter().rev().fold(0u64, |acc, b| (acc << 8) | u64::from(*b));
    let meta_len = word(16, 4) as usize;
    let data_len = word(20, 8);
    let crc = word(28, 4) as u32;
    let rest = &bytes[HEAD..];
    if (meta_len as u64).checked_add(data_len) != Some(rest.len() as u64) {
        return Err(format!("holds {} bytes, its header says {meta_len} + {data_len}", rest.len()));
    }
    if crc32fast::hash(rest) != crc {
        return Err("checksum mismatch".into());
    }
    let meta = postcard::from_bytes(&rest[..meta_len]).map_err(|e| format!("undecodable metadata: {e}"))?;
    Ok(StoredSnapshot { meta, data: rest[meta_len..].to_vec() })
}

#[cfg(test)]
mod tests {
    use openraft::CommittedLeaderId;
    use openraft::LogId;

    use super::*;

    fn snapshot(index: u64, data: &[u8]) -> Arc<StoredSnapshot> {
        let meta = SnapshotMeta {
            last_log_id: Some(LogId::new(CommittedLeaderId::new(2, 1), index)),
            last_membership: Default::default(),
            snapshot_id: format!("s{index}"),
        };
        Arc::new(StoredSnapshot { meta, data: data.to_vec() })
    }

    #[test]
    fn the_newest_snapshot_survives_reopening_and_an_older_one_never_replaces_it() {
        let dir = tempfile::tempdir().unwrap();
        let store = SnapshotStore::open(dir.path()).unwrap();
        assert!(store.current().is_none());
        store.save(snapshot(10, b"ten")).unwrap();
        store.save(snapshot(5, b"five")).unwrap();
        let again = SnapshotStore::open(dir.path()).unwrap();
        let s = again.current().unwrap();
        assert_eq!((s.meta.snapshot_id.as_str(), s.data.as_slice()), ("s10", &b"ten"[..]));
    }

    #[test]
    fn a_damaged_snapshot_is_corrupt() {
        let dir = tempfile::tempdir().unwrap();
        SnapshotStore::open(dir.path()).unwrap().save(snapshot(3, b"state")).unwrap();
        let path = dir.path().join("snapshot");
        let mut bytes = std::fs::read(&path).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        std::fs::write(&path, &bytes).unwrap();
        assert!(matches!(SnapshotStore::open(dir.path()), Err(StoreError::Corrupt(_))));
        std::fs::write(&path, &bytes[..10]).unwrap();
        assert!(matches!(SnapshotStore::open(dir.path()), Err(StoreError::Corrupt(_))));
    }
}
