//! The data directory's `tokens` file: the server-wide token floor, kept apart from the log.
//!
//! A fencing token that repeats is the one failure a lock server must never have, and the log
//! alone cannot promise it: a log cut at a frame boundary, emptied, or replaced by an older copy
//! still decodes cleanly and would start counters too low. So every token issued is covered by a
//! floor synced here first ([`Record::Floor`](crate::machine::Record::Floor): one write per
//! `FLOOR_BLOCK` tokens of the busiest lock), and every start continues every lock above it.
//!
//! The file also names the log it goes with (its generation, written in the log's header) and
//! how many bytes of that log were synced when the floor was last written. A log that is missing,
//! of another generation, or shorter than that is damage the server can see: it refuses to start
//! (`ServerError::Corrupt`, exit 65) and changes nothing. A cut it cannot see (beyond the synced
//! length, at a frame boundary) only loses releases and grants the floor covers.
//!
//! Layout: a [`TwoSlotFile`] (like a cluster node's vote file): two 4 KiB slots, each
//! `magic (8) | seq (8) | floor (8) | log generation (8) | synced log length (8) | crc32 of the
//! 40 bytes before (4)`, little endian. A write goes to the slot the newest valid one is not in
//! and is synced, so a torn write leaves the other slot intact; the valid slot with the higher
//! `seq` wins.

use std::fs::{File, OpenOptions};
use std::path::Path;

use locksmith_disk::{Body, SlotFormat, TwoSlotFile};

use crate::error::ServerError;

const FORMAT: SlotFormat = SlotFormat { magic: *b"LSTOKEN1", body: Body::Fixed(24) };

/// What the file says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Floor {
    /// Highest token any lock may have issued.
    pub(crate) floor: u64,
    /// Generation of the log this goes with.
    pub(crate) log_generation: u64,
    /// Bytes of that log known synced when this was written.
    pub(crate) log_synced: u64,
}

impl Floor {
    fn encode(&self) -> [u8; 24] {
        let mut buf = [0u8; 24];
        for (i, v) in [self.floor, self.log_generation, self.log_synced].into_iter().enumerate() {
            buf[8 * i..8 * i + 8].copy_from_slice(&v.to_le_bytes());
        }
        buf
    }

    fn decode(body: &[u8]) -> Option<Self> {
        let word = |i: usize| Some(u64::from_le_bytes(body.get(8 * i..8 * i + 8)?.try_into().ok()?));
        Some(Self { floor: word(0)?, log_generation: word(1)?, log_synced: word(2)? })
    }
}

/// The open file and the newest state written to it.
#[derive(Debug)]
pub(crate) struct TokensFile {
    slots: TwoSlotFile,
    current: Floor,
}

impl TokensFile {
    /// Reads `path`: `Ok(None)` when there is no file yet.
    ///
    /// # Errors
    /// [`ServerError::Corrupt`] when neither slot checks out; I/O errors.
    pub(crate) fn read(path: &Path) -> Result<Option<(u64, Floor)>, ServerError> {
        let file = match File::open(path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        match TwoSlotFile::read_newest(&file, &FORMAT, Floor::decode)? {
            Some(newest) => Ok(Some((newest.seq, newest.value))),
            None => Err(ServerError::Corrupt(format!(
                "{}: the token floor file is damaged (no slot checks out); without it the server cannot \
                 prove that fencing tokens will not repeat. Restore the data directory from a backup",
                path.display()
            ))),
        }
    }

    /// Creates (or takes over) the file at `path`, whose newest write had sequence number
    /// `seq`, and writes `state` into it, synced.
    ///
    /// # Errors
    /// I/O errors.
    pub(crate) fn create(path: &Path, seq: u64, state: Floor) -> std::io::Result<Self> {
        let file = OpenOptions::new().create(true).truncate(false).read(true).write(true).open(path)?;
        // Every write is synced, so the newest record is in the slot its `seq` names.
        let mut t = Self { slots: TwoSlotFile::new(file, FORMAT, seq, seq % 2), current: state };
        t.write(state)?;
        if let Some(dir) = path.parent() {
            // The file's own entry in the directory must survive a crash too.
            locksmith_disk::sync_dir(dir)?;
        }
        Ok(t)
    }

    /// The newest state written.
    pub(crate) fn current(&self) -> Floor {
        self.current
    }

    /// Writes `state` into the other slot and syncs it.
    ///
    /// # Errors
    /// I/O errors: the caller must not hand out tokens above the old floor then.
    pub(crate) fn write(&mut self, state: Floor) -> std::io::Result<()> {
        self.slots.write(&state.encode(), true)?;
        self.current = state;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(floor: u64) -> Floor {
        Floor { floor, log_generation: 3, log_synced: 100 }
    }

    /// The previous release's file (the fixture data directory) reads, and writing what it
    /// says with the same sequence number gives the same bytes: the format did not change.
    #[test]
    fn a_file_of_the_previous_release_reads_and_is_written_byte_for_byte_the_same() {
        let old = include_bytes!("../../locksmith-cli/tests/fixtures/data-dirs/single/tokens");
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tokens");
        std::fs::write(&path, old).unwrap();
        let (seq, floor) = TokensFile::read(&path).unwrap().unwrap();
        assert!(floor.floor >= 3, "{floor:?}");
        let again = dir.path().join("again");
        TokensFile::create(&again, seq - 1, floor).unwrap();
        let slot = (seq % 2) as usize * 4096;
        assert_eq!(std::fs::read(&again).unwrap()[slot..slot + 44], old[slot..slot + 44]);
    }

    #[test]
    fn the_newest_write_wins_after_reopening() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tokens");
        assert_eq!(TokensFile::read(&path).unwrap(), None);
        let mut t = TokensFile::create(&path, 0, state(1024)).unwrap();
        t.write(state(2048)).unwrap();
        drop(t);
        let (seq, read) = TokensFile::read(&path).unwrap().unwrap();
        assert_eq!(read, state(2048));
        let mut t = TokensFile::create(&path, seq, state(4096)).unwrap();
        t.write(state(8192)).unwrap();
        assert_eq!(TokensFile::read(&path).unwrap().map(|r| r.1), Some(state(8192)));
    }

    #[test]
    fn a_file_with_no_valid_slot_is_corrupt() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tokens");
        std::fs::write(&path, vec![7u8; 8192]).unwrap();
        assert!(matches!(TokensFile::read(&path), Err(ServerError::Corrupt(_))));
        std::fs::write(&path, b"").unwrap();
        assert!(matches!(TokensFile::read(&path), Err(ServerError::Corrupt(_))));
    }
}
