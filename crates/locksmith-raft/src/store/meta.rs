//! The `meta` file: the vote and the committed log id, apart from the log.
//!
//! Layout: a [`TwoSlotFile`] (like the server's `tokens` file): two 4 KiB slots, each
//! `magic (8) | seq (8) | len (4) | postcard payload | crc32 of everything before (4)`, little
//! endian. The valid slot with the higher `seq` wins, so a torn write leaves the other slot to
//! read.
//!
//! A vote must be on disk before openraft acts on it (a node that forgot its vote could vote
//! twice in one term): [`MetaFile::save_vote`] syncs. The committed log id only saves re-applying
//! entries after a restart, and an older one is always safe (the leader tells the committed index
//! again), so [`MetaFile::save_committed`] does not sync: it costs no disk wait per commit. To
//! keep the last synced vote readable whatever happens to unsynced writes, those never go to the
//! slot holding it; the next synced write goes to the other slot and then becomes the one kept.

use std::fs::OpenOptions;
use std::io;
use std::path::Path;

use locksmith_disk::Body;
use locksmith_disk::SlotFormat;
use locksmith_disk::TwoSlotFile;
use serde::Deserialize;
use serde::Serialize;

use crate::error::StoreError;
use crate::types::LogId;
use crate::types::Vote;

const FORMAT: SlotFormat = SlotFormat { magic: *b"LSRAFTM1", body: Body::Prefixed };

/// What the file holds.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Meta {
    /// The last vote saved.
    pub(crate) vote: Option<Vote>,
    /// The last committed log id saved.
    pub(crate) committed: Option<LogId>,
}

/// The open file.
#[derive(Debug)]
pub(crate) struct MetaFile {
    slots: TwoSlotFile,
    current: Meta,
}

impl MetaFile {
    /// Reads `path`, or creates it (synced, with its directory entry) holding nothing. With
    /// `fresh`, the directory has no log yet, so an empty file is one whose creation a crash
    /// interrupted; otherwise it is damage.
    ///
    /// # Errors
    /// [`StoreError::Corrupt`] when neither slot checks out; I/O errors.
    pub(crate) fn open(path: &Path, fresh: bool) -> Result<Self, StoreError> {
        let file = OpenOptions::new().create(true).truncate(false).read(true).write(true).open(path)?;
        if fresh && file.metadata()?.len() == 0 {
            let mut m = Self { slots: TwoSlotFile::new(file, FORMAT, 0, 1), current: Meta::default() };
            m.write(true)?;
            if let Some(dir) = path.parent() {
                locksmith_disk::sync_dir(dir)?;
            }
            return Ok(m);
        }
        let newest = TwoSlotFile::read_newest(&file, &FORMAT, |body| postcard::from_bytes::<Meta>(body).ok())?;
        let newest = newest.ok_or_else(|| {
            StoreError::Corrupt(format!(
                "{}: no slot of the vote file checks out; without its vote the node could vote twice in a term",
                path.display()
            ))
        })?;
        // The slot read may be an unsynced write that made it; sync it so it is the one kept.
        file.sync_data()?;
        Ok(Self { slots: TwoSlotFile::new(file, FORMAT, newest.seq, newest.slot), current: newest.value })
    }

    /// What the file holds.
    pub(crate) fn current(&self) -> &Meta {
        &self.current
    }

    /// Saves `vote`, synced before returning.
    ///
    /// # Errors
    /// I/O errors: the vote must not be acted upon then.
    pub(crate) fn save_vote(&mut self, vote: &Vote) -> io::Result<()> {
        let old = self.current.vote.replace(*vote);
        self.write(true).inspect_err(|_| self.current.vote = old)
    }

    /// Saves `committed` without waiting for the disk (see the module docs).
    ///
    /// # Errors
    /// I/O errors.
    pub(crate) fn save_committed(&mut self, committed: Option<LogId>) -> io::Result<()> {
        self.current.committed = committed;
        self.write(false)
    }

    fn write(&mut self, sync: bool) -> io::Result<()> {
        let payload = postcard::to_stdvec(&self.current).map_err(io::Error::other)?;
        self.slots.write(&payload, sync)
    }
}

#[cfg(test)]
mod tests {
    use openraft::CommittedLeaderId;

    use super::*;

    fn vote(term: u64) -> Vote {
        Vote::new_committed(term, 2)
    }

    fn log_id(index: u64) -> LogId {
        LogId::new(CommittedLeaderId::new(1, 2), index)
    }

    #[test]
    fn votes_and_committed_survive_reopening() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("meta");
        let mut m = MetaFile::open(&path, true).unwrap();
        assert_eq!(m.current(), &Meta::default());
        m.save_vote(&vote(3)).unwrap();
        m.save_committed(Some(log_id(7))).unwrap();
        drop(m);
        let m = MetaFile::open(&path, true).unwrap();
        assert_eq!(m.current(), &Meta { vote: Some(vote(3)), committed: Some(log_id(7)) });
    }

    /// The vote file of the previous release's cluster node (the CLI's fixture) reads, and
    /// writing what it holds with the same sequence number gives the same bytes.
    #[test]
    fn a_vote_file_of_the_previous_release_is_written_again_byte_for_byte() {
        let old = include_bytes!("../../../locksmith-cli/tests/fixtures/data-dirs/cluster-node/raft/meta");
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("meta");
        std::fs::write(&path, old).unwrap();
        let m = MetaFile::open(&path, false).unwrap();
        assert!(m.current().vote.is_some() && m.current().committed.is_some(), "{:?}", m.current());
        let newest = TwoSlotFile::read_newest(&std::fs::File::open(&path).unwrap(), &FORMAT, |b| Some(b.len()))
            .unwrap()
            .unwrap();
        // The same record, with the same sequence number, into the same slot of a new file.
        let again = dir.path().join("again");
        let file = OpenOptions::new().create(true).truncate(false).read(true).write(true).open(&again).unwrap();
        let slots = TwoSlotFile::new(file, FORMAT, newest.seq - 1, 1 - newest.slot);
        MetaFile { slots, current: m.current().clone() }.write(true).unwrap();
        let written = std::fs::read(&again).unwrap();
        let slot = newest.slot as usize * locksmith_disk::SLOT as usize;
        let len = written.len() - slot;
        assert!(len > 24, "{len}");
        assert_eq!(written[slot..slot + len], old[slot..slot + len]);
    }

    #[test]
    fn a_file_with_no_valid_slot_is_corrupt() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("meta");
        std::fs::write(&path, vec![7u8; 8192]).unwrap();
        assert!(matches!(MetaFile::open(&path, false), Err(StoreError::Corrupt(_))));
    }
}
