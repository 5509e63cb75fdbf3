//! The `meta` file: the vote and the committed log id, apart from the log.
//!
//! Layout (like the server's `tokens` file): two 4 KiB slots, each `magic (8) | seq (8) |
//! len (4) | postcard payload | crc32 of everything before (4)`, little endian. The valid slot
//! with the higher `seq` wins, so a torn write leaves the other slot to read.
//!
//! A vote must be on disk before openraft acts on it (a node that forgot its vote could vote
//! twice in one term): [`MetaFile::save_vote`] syncs. The committed log id only saves re-applying
//! entries after a restart, and an older one is always safe (the leader tells the committed index
//! again), so [`MetaFile::save_committed`] does not sync: it costs no disk wait per commit. To
//! keep the last synced vote readable whatever happens to unsynced writes, those never go to the
//! slot holding it; the next synced write goes to the other slot and then becomes the one kept.

use std::fs::File;
use std::fs::OpenOptions;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;

use serde::Deserialize;
use serde::Serialize;

use crate::error::StoreError;
use crate::types::LogId;
use crate::types::Vote;

const MAGIC: &[u8; 8] = b"LSRAFTM1";
const SLOT: u64 = 4096;
const HEAD: usize = 20;
const MAX_PAYLOAD: usize = SLOT as usize - HEAD - 4;

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
    file: File,
    /// Sequence number of the newest write.
    seq: u64,
    /// The slot holding the newest synced state; unsynced writes go to the other one.
    synced_slot: u64,
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
            let mut m = Self { file, seq: 0, synced_slot: 1, current: Meta::default() };
            m.write(true)?;
            if let Some(dir) = path.parent() {
                File::open(dir)?.sync_all()?;
            }
            return Ok(m);
        }
        let mut best: Option<(u64, u64, Meta)> = None;
        for slot in 0..2 {
            let mut buf = vec![0u8; SLOT as usize];
            let n = read_up_to(&file, &mut buf, slot * SLOT)?;
            if let Some((seq, meta)) = decode(&buf[..n]) {
                if best.as_ref().is_none_or(|(s, _, _)| seq > *s) {
                    best = Some((seq, slot, meta));
                }
            }
        }
        let (seq, slot, current) = best.ok_or_else(|| {
            StoreError::Corrupt(format!(
                "{}: no slot of the vote file checks out; without its vote the node could vote twice in a term",
                path.display()
            ))
        })?;
        // The slot read may be an unsynced write that made it; sync it so it is the one kept.
        file.sync_data()?;
        Ok(Self { file, seq, synced_slot: slot, current })
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
        let slot = 1 - self.synced_slot;
        let buf = encode(self.seq + 1, &self.current)?;
        self.file.write_all_at(&buf, slot * SLOT)?;
        self.seq += 1;
        if sync {
            self.file.sync_data()?;
            self.synced_slot = slot;
        }
        Ok(())
    }
}

fn read_up_to(file: &File, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match file.read_at(&mut buf[n..], offset + n as u64)? {
            0 => break,
            k => n += k,
        }
    }
    Ok(n)
}

fn encode(seq: u64, meta: &Meta) -> io::Result<Vec<u8>> {
    let payload = postcard::to_stdvec(meta).map_err(io::Error::other)?;
    if payload.len() > MAX_PAYLOAD {
        return Err(io::Error::other("vote record too large"));
    }
    let mut buf = Vec::with_capacity(HEAD + payload.len() + 4);
    buf.extend_from_slice(MAGIC);
    buf.extend_from_slice(&seq.to_le_bytes());
    buf.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    buf.extend_from_slice(&payload);
    let crc = crc32fast::hash(&buf);
    buf.extend_from_slice(&crc.to_le_bytes());
    Ok(buf)
}

fn decode(buf: &[u8]) -> Option<(u64, Meta)> {
    if buf.len() < HEAD || &buf[..8] != MAGIC {
        return None;
    }
    let seq = u64::from_le_bytes(buf[8..16].try_into().ok()?);
    let len = u32::from_le_bytes(buf[16..20].try_into().ok()?) as usize;
    if len > MAX_PAYLOAD || buf.len() < HEAD + len + 4 {
        return None;
    }
    let crc = u32::from_le_bytes(buf[HEAD + len..HEAD + len + 4].try_into().ok()?);
    if crc32fast::hash(&buf[..HEAD + len]) != crc {
        return None;
    }
    postcard::from_bytes(&buf[HEAD..HEAD + len]).ok().map(|m| (seq, m))
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

    #[test]
    fn torn_unsynced_writes_never_lose_the_last_synced_vote() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("meta");
        let mut m = MetaFile::open(&path, true).unwrap();
        m.save_vote(&vote(5)).unwrap();
        let kept = m.synced_slot;
        // Unsynced writes, however many, go to the other slot.
        for i in 0..3 {
            m.save_committed(Some(log_id(i))).unwrap();
        }
        // A crash tore the last of them.
        m.file.write_all_at(&[0xAB; 30], (1 - kept) * SLOT).unwrap();
        drop(m);
        let m = MetaFile::open(&path, true).unwrap();
        assert_eq!(m.current().vote, Some(vote(5)));
    }

    #[test]
    fn a_file_with_no_valid_slot_is_corrupt() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("meta");
        std::fs::write(&path, vec![7u8; 8192]).unwrap();
        assert!(matches!(MetaFile::open(&path, false), Err(StoreError::Corrupt(_))));
    }
}
