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
//! Layout: two 4 KiB slots, each `magic (8) | seq (8) | floor (8) | log generation (8) |
//! synced log length (8) | crc32 of the 40 bytes before (4)`, little endian. A write goes to the
//! slot the newest valid one is not in and is synced, so a torn write leaves the other slot
//! intact; the valid slot with the higher `seq` wins.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::Path;

use crate::error::ServerError;

const MAGIC: &[u8; 8] = b"LSTOKEN1";
const SLOT: u64 = 4096;
const LEN: usize = 44;

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

/// The open file and the newest state written to it.
#[derive(Debug)]
pub(crate) struct TokensFile {
    file: File,
    seq: u64,
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
        let mut best: Option<(u64, Floor)> = None;
        for slot in 0..2 {
            let mut buf = [0u8; LEN];
            if file.read_exact_at(&mut buf, slot * SLOT).is_err() {
                continue;
            }
            if let Some((seq, floor)) = decode(&buf) {
                if best.is_none_or(|(s, _)| seq > s) {
                    best = Some((seq, floor));
                }
            }
        }
        best.map(Some).ok_or_else(|| {
            ServerError::Corrupt(format!(
                "{}: the token floor file is damaged (no slot checks out); without it the server cannot \
                 prove that fencing tokens will not repeat. Restore the data directory from a backup",
                path.display()
            ))
        })
    }

    /// Creates (or takes over) the file at `path` and writes `state` into it, synced.
    ///
    /// # Errors
    /// I/O errors.
    pub(crate) fn create(path: &Path, seq: u64, state: Floor) -> Result<Self, ServerError> {
        let file = OpenOptions::new().create(true).truncate(false).read(true).write(true).open(path)?;
        let mut t = Self { file, seq, current: state };
        t.write(state)?;
        if let Some(dir) = path.parent() {
            // The file's own entry in the directory must survive a crash too.
            File::open(dir)?.sync_all()?;
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
    pub(crate) fn write(&mut self, state: Floor) -> Result<(), ServerError> {
        self.seq += 1;
        let buf = encode(self.seq, state);
        self.file.write_all_at(&buf, (self.seq % 2) * SLOT)?;
        self.file.sync_data()?;
        self.current = state;
        Ok(())
    }
}

fn encode(seq: u64, s: Floor) -> [u8; LEN] {
    let mut buf = [0u8; LEN];
    buf[..8].copy_from_slice(MAGIC);
    for (i, v) in [seq, s.floor, s.log_generation, s.log_synced].into_iter().enumerate() {
        buf[8 + 8 * i..16 + 8 * i].copy_from_slice(&v.to_le_bytes());
    }
    let crc = crc32fast::hash(&buf[..40]);
    buf[40..].copy_from_slice(&crc.to_le_bytes());
    buf
}

fn decode(buf: &[u8; LEN]) -> Option<(u64, Floor)> {
    if &buf[..8] != MAGIC || crc32fast::hash(&buf[..40]).to_le_bytes() != buf[40..] {
        return None;
    }
    let word = |i: usize| {
        let mut w = [0u8; 8];
        w.copy_from_slice(&buf[8 + 8 * i..16 + 8 * i]);
        u64::from_le_bytes(w)
    };
    Some((word(0), Floor { floor: word(1), log_generation: word(2), log_synced: word(3) }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(floor: u64) -> Floor {
        Floor { floor, log_generation: 3, log_synced: 100 }
    }

    #[test]
    fn the_newest_write_wins_and_survives_a_torn_write_of_the_next() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tokens");
        assert_eq!(TokensFile::read(&path).unwrap(), None);
        let mut t = TokensFile::create(&path, 0, state(1024)).unwrap();
        t.write(state(2048)).unwrap();
        assert_eq!(TokensFile::read(&path).unwrap().map(|r| r.1), Some(state(2048)));
        // The next write is torn: its slot holds garbage; the previous state still reads.
        let next_slot = ((t.seq + 1) % 2) * SLOT;
        t.file.write_all_at(&[0xAB; 20], next_slot).unwrap();
        assert_eq!(TokensFile::read(&path).unwrap().map(|r| r.1), Some(state(2048)));
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
