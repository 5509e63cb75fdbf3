//! The `log` file: Raft log entries appended as frames, with truncation and purge written as
//! markers, compacted by a rewrite once dead frames dominate.
//!
//! Layout: a 16-byte magic, then frames (see [`locksmith_disk::frame`], the framing and
//! torn-tail rule of the server's write-ahead log too) whose payload is a postcard-encoded
//! [`Record`], then preallocated zeros. Replaying the records in order gives
//! the live entries: an `Entry` appends, `Truncate { since }` drops the entries from `since` on
//! (a follower's conflicting suffix), `Purge { upto }` drops those up to `upto` (covered by a
//! snapshot) and remembers `upto` as the last purged log id.
//!
//! Markers are not synced on their own: a marker lost in a crash brings back entries that were
//! about to be dropped, which is the state before the truncate or purge and safe for Raft (a
//! truncated suffix was never committed; purged entries are also in the snapshot). Entries
//! appended after a marker are synced with it, since one `fdatasync` covers the whole file.
//!
//! The file is preallocated in [`CHUNK`]s ([`locksmith_disk::AppendFile`]; without room for a
//! chunk it grows by what is written).
//!
//! Compaction writes the purge point and the live frames to a new file installed in place
//! ([`locksmith_disk::install`]): a crash leaves either file whole. It needs room for the live
//! frames only (the preallocation is skipped when space is short). It runs when dead bytes
//! exceed both the live ones and 1 MiB, and on start after a torn tail (so the garbage is gone
//! before new frames are written next to it).

use std::collections::BTreeMap;
use std::fs::File;
use std::fs::OpenOptions;
use std::io;
use std::io::Read;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::path::PathBuf;
use std::sync::Arc;

use locksmith_disk::frame;
use locksmith_disk::AppendFile;
use serde::Deserialize;
use serde::Serialize;

use crate::error::StoreError;
use crate::types::Entry;
use crate::types::LogId;

const MAGIC: &[u8; 16] = b"LOCKSMITH-RAFT1\n";
/// Preallocation step of the log file.
const CHUNK: u64 = 4 << 20;
/// Largest frame accepted: far above any command (see [`crate::MAX_COMMAND`]) or membership.
pub(crate) const MAX_FRAME: usize = 16 << 20;
/// Dead bytes below this never trigger a compaction: rewriting a small file buys nothing.
const COMPACT_MIN_DEAD: u64 = 1 << 20;

/// A record as written (borrowing the entry).
#[derive(Serialize)]
enum RecordRef<'a> {
    Entry(&'a Entry),
    Truncate { since: u64 },
    Purge { upto: LogId },
}

/// A record as read; the same variants in the same order as [`RecordRef`].
#[derive(Deserialize)]
enum Record {
    Entry(Entry),
    Truncate { since: u64 },
    Purge { upto: LogId },
}

/// Where a live entry's frame is.
#[derive(Debug, Clone, Copy)]
struct Slot {
    log_id: LogId,
    /// Offset of the frame in the file.
    at: u64,
    /// Length of the whole frame.
    len: u64,
}

/// The open log: the file and the index of its live entries.
#[derive(Debug)]
pub(crate) struct LogFile {
    dir: PathBuf,
    /// The file; its end is where the next frame goes.
    file: AppendFile,
    /// The live entries by index.
    entries: BTreeMap<u64, Slot>,
    purged: Option<LogId>,
    /// Bytes of the live entries' frames.
    live: u64,
    compact_min_dead: u64,
}

impl LogFile {
    /// Opens (or creates) `dir/log` and indexes its live entries. With `must_reach`, the log
    /// must hold that entry (or have purged it): an entry known to be committed that the log
    /// lost means it was cut.
    ///
    /// # Errors
    /// [`StoreError::Corrupt`] for damage other than a torn last frame, or a log that ends
    /// before `must_reach`; nothing is changed then. I/O errors.
    pub(crate) fn open(dir: &Path, must_reach: Option<LogId>) -> Result<Self, StoreError> {
        match std::fs::remove_file(dir.join("log.tmp")) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e.into()),
            _ => {}
        }
        let path = dir.join("log");
        let mut bytes = Vec::new();
        match File::open(&path) {
            Ok(mut f) => f.read_to_end(&mut bytes)?,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                let (file, allocated) = locksmith_disk::install(dir, "log", MAGIC, CHUNK)?;
                return Ok(Self::empty(dir, AppendFile::new(file, MAGIC.len() as u64, allocated, CHUNK)));
            }
            Err(e) => return Err(e.into()),
        };
        let corrupt = |what: String| StoreError::Corrupt(format!("{}: {what}", path.display()));
        if !bytes.starts_with(MAGIC) {
            // The file is only ever created whole (by a rename), so a short header is damage too.
            return Err(corrupt("not a locksmith raft log (bad header)".into()));
        }
        let scan = frame::scan(&bytes, MAGIC.len(), MAX_FRAME).map_err(|d| corrupt(d.to_string()))?;
        let file = OpenOptions::new().read(true).write(true).open(&path)?;
        let mut log = Self::empty(dir, AppendFile::new(file, scan.valid as u64, bytes.len() as u64, CHUNK));
        for found in &scan.frames {
            let record: Record = postcard::from_bytes(found.payload(&bytes))
                .map_err(|e| corrupt(format!("undecodable record at offset {}: {e}", found.at)))?;
            let slot =
                Slot { log_id: LogId::default(), at: found.at as u64, len: found.end() as u64 - found.at as u64 };
            match record {
                Record::Entry(entry) => log.insert(Slot { log_id: entry.log_id, ..slot }),
                Record::Truncate { since } => log.drop_since(since),
                Record::Purge { upto } => log.drop_upto(upto),
            }
        }
        if let Some(needed) = must_reach.filter(|n| log.last_log_id().map(|l| l.index) < Some(n.index)) {
            return Err(corrupt(format!(
                "the log ends at offset {} after entry {}, but entry {needed} was committed: the file was cut \
                 (entries this node acknowledged are missing). Remove the node from the cluster, move its data \
                 directory aside and add it back: it catches up from the leader",
                scan.valid,
                log.last_log_id().map_or("none".to_string(), |l| l.to_string()),
            )));
        }
        if scan.torn {
            tracing::warn!(path = %path.display(), offset = scan.valid, "raft log: dropping a torn last frame");
            log.rewrite()?;
        } else {
            log.maybe_compact()?;
        }
        Ok(log)
    }

    fn empty(dir: &Path, file: AppendFile) -> Self {
        Self {
            dir: dir.to_path_buf(),
            file,
            entries: BTreeMap::new(),
            purged: None,
            live: 0,
            compact_min_dead: COMPACT_MIN_DEAD,
        }
    }

    /// The file, to sync after a write.
    pub(crate) fn file(&self) -> Arc<File> {
        self.file.file().clone()
    }

    /// The last purged log id.
    pub(crate) fn purged(&self) -> Option<LogId> {
        self.purged
    }

    /// The last live entry's log id, or the last purged one when there is none.
    pub(crate) fn last_log_id(&self) -> Option<LogId> {
        self.entries.last_key_value().map(|(_, s)| s.log_id).or(self.purged)
    }

    /// Writes `entries` (not yet durable) and indexes them. An entry replaces a live one of
    /// the same index (openraft truncates first; its storage test suite does not always).
    /// Holes are openraft's to prevent: it checks for them before storage sees the entries.
    ///
    /// # Errors
    /// An entry too large; I/O errors. Nothing is indexed then.
    pub(crate) fn append(&mut self, entries: impl IntoIterator<Item = Entry>) -> io::Result<()> {
        let mut buf = Vec::new();
        let mut slots = Vec::new();
        for entry in entries {
            let at = self.file.len() + buf.len() as u64;
            encode_record(&RecordRef::Entry(&entry), &mut buf)?;
            slots.push(Slot { log_id: entry.log_id, at, len: self.file.len() + buf.len() as u64 - at });
        }
        self.file.append(&buf)?;
        for s in slots {
            self.insert(s);
        }
        Ok(())
    }

    /// Drops the entries from index `since` on.
    ///
    /// # Errors
    /// I/O errors.
    pub(crate) fn truncate(&mut self, since: u64) -> io::Result<()> {
        let mut buf = Vec::new();
        encode_record(&RecordRef::Truncate { since }, &mut buf)?;
        self.file.append(&buf)?;
        self.drop_since(since);
        self.maybe_compact()
    }

    /// Drops the entries up to `upto`, which becomes the last purged log id.
    ///
    /// # Errors
    /// I/O errors.
    pub(crate) fn purge(&mut self, upto: LogId) -> io::Result<()> {
        let mut buf = Vec::new();
        encode_record(&RecordRef::Purge { upto }, &mut buf)?;
        self.file.append(&buf)?;
        self.drop_upto(upto);
        self.maybe_compact()
    }

    /// The live entries with an index in `start..end`, stopping early (after at least one) once
    /// their frames add up to `max_bytes`.
    ///
    /// # Errors
    /// I/O errors, or a frame that no longer checks out.
    pub(crate) fn read(&self, start: u64, end: u64, max_bytes: u64) -> io::Result<Vec<Entry>> {
        if start >= end {
            return Ok(Vec::new());
        }
        let mut total = 0;
        let mut slots = Vec::new();
        for s in self.entries.range(start..end).map(|(_, s)| *s) {
            if !slots.is_empty() && total + s.len > max_bytes {
                break;
            }
            total += s.len;
            slots.push(s);
        }
        // One read for the batch: live frames lie in increasing offsets (an entry that replaced
        // another is written later), with only dead frames or markers between them.
        let (Some(head), Some(tail)) = (slots.iter().map(|s| s.at).min(), slots.iter().map(|s| s.at + s.len).max())
        else {
            return Ok(Vec::new());
        };
        let mut span = vec![0u8; (tail - head) as usize];
        self.file.file().read_exact_at(&mut span, head)?;
        slots
            .iter()
            .map(|s| {
                let frame = &span[(s.at - head) as usize..(s.at - head + s.len) as usize];
                decode_entry(frame)
                    .ok_or_else(|| io::Error::other(format!("log entry {} does not check out", s.log_id)))
            })
            .collect()
    }

    fn insert(&mut self, slot: Slot) {
        self.live += slot.len;
        if let Some(old) = self.entries.insert(slot.log_id.index, slot) {
            self.live -= old.len;
        }
    }

    fn drop_since(&mut self, since: u64) {
        for (_, s) in self.entries.split_off(&since) {
            self.live -= s.len;
        }
    }

    fn drop_upto(&mut self, upto: LogId) {
        let kept = self.entries.split_off(&upto.index.saturating_add(1));
        for s in std::mem::replace(&mut self.entries, kept).into_values() {
            self.live -= s.len;
        }
        if self.purged < Some(upto) {
            self.purged = Some(upto);
        }
    }

    fn maybe_compact(&mut self) -> io::Result<()> {
        let dead = self.file.len().saturating_sub(MAGIC.len() as u64 + self.live);
        if dead > self.live && dead >= self.compact_min_dead {
            self.rewrite()?;
        }
        Ok(())
    }

    /// Replaces the file with one holding only the purge point and the live entries.
    fn rewrite(&mut self) -> io::Result<()> {
        let mut buf = MAGIC.to_vec();
        if let Some(upto) = self.purged {
            encode_record(&RecordRef::Purge { upto }, &mut buf)?;
        }
        let mut slots = BTreeMap::new();
        for (index, s) in &self.entries {
            // Frame by frame: a rewrite is rare, and live frames may lie far apart.
            let mut frame = vec![0u8; s.len as usize];
            self.file.file().read_exact_at(&mut frame, s.at)?;
            slots.insert(*index, Slot { at: buf.len() as u64, ..*s });
            buf.extend_from_slice(&frame);
        }
        let (f, allocated) = locksmith_disk::install(&self.dir, "log", &buf, CHUNK)?;
        self.file = AppendFile::new(f, buf.len() as u64, allocated, CHUNK);
        self.entries = slots;
        Ok(())
    }

    #[cfg(test)]
    fn file_len(&self) -> u64 {
        self.file.len()
    }
}

fn encode_record(record: &RecordRef<'_>, buf: &mut Vec<u8>) -> io::Result<()> {
    let payload = postcard::to_stdvec(record).map_err(io::Error::other)?;
    if payload.len() > MAX_FRAME {
        return Err(io::Error::other(format!("log record of {} bytes exceeds {MAX_FRAME}", payload.len())));
    }
    frame::encode(&payload, buf);
    Ok(())
}

fn decode_entry(bytes: &[u8]) -> Option<Entry> {
    match postcard::from_bytes(frame::decode_one(bytes, MAX_FRAME).ok()?.0).ok()? {
        Record::Entry(e) => Some(e),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use openraft::CommittedLeaderId;
    use openraft::EntryPayload;

    use super::*;
    use crate::types::Command;

    fn entry(term: u64, index: u64) -> Entry {
        Entry {
            log_id: LogId::new(CommittedLeaderId::new(term, 1), index),
            payload: EntryPayload::Normal(Command(format!("command {index}").into_bytes())),
        }
    }

    fn indexes(log: &LogFile) -> Vec<(u64, u64)> {
        log.read(0, u64::MAX, u64::MAX).unwrap().iter().map(|e| (e.log_id.leader_id.term, e.log_id.index)).collect()
    }

    #[test]
    fn entries_truncation_and_purge_survive_reopening() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = LogFile::open(dir.path(), None).unwrap();
        log.append((0..10).map(|i| entry(1, i))).unwrap();
        log.truncate(7).unwrap();
        log.append((7..9).map(|i| entry(2, i))).unwrap();
        log.purge(LogId::new(CommittedLeaderId::new(1, 1), 2)).unwrap();
        let want: Vec<_> = (3..7).map(|i| (1, i)).chain((7..9).map(|i| (2, i))).collect();
        assert_eq!(indexes(&log), want);
        drop(log);
        let log = LogFile::open(dir.path(), None).unwrap();
        assert_eq!(indexes(&log), want);
        assert_eq!(log.purged().map(|p| p.index), Some(2));
        assert_eq!(log.last_log_id().map(|l| (l.leader_id.term, l.index)), Some((2, 8)));
    }

    #[test]
    fn a_purge_past_the_last_entry_sets_the_next_index() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = LogFile::open(dir.path(), None).unwrap();
        log.append((0..3).map(|i| entry(1, i))).unwrap();
        log.purge(LogId::new(CommittedLeaderId::new(1, 1), 20)).unwrap();
        assert_eq!(log.last_log_id().map(|l| l.index), Some(20));
        log.append([entry(1, 21)]).unwrap();
        drop(log);
        let log = LogFile::open(dir.path(), None).unwrap();
        assert_eq!(indexes(&log), vec![(1, 21)]);
    }

    #[test]
    fn a_torn_last_frame_is_dropped_and_appending_goes_on_cleanly() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = LogFile::open(dir.path(), None).unwrap();
        log.append((0..5).map(|i| entry(1, i))).unwrap();
        let end = log.file_len();
        drop(log);
        // A crash tore the frame of entry 5: half of it reached the disk.
        let mut torn = Vec::new();
        encode_record(&RecordRef::Entry(&entry(1, 5)), &mut torn).unwrap();
        let file = OpenOptions::new().write(true).open(dir.path().join("log")).unwrap();
        file.write_all_at(&torn[..torn.len() / 2], end).unwrap();
        drop(file);
        let mut log = LogFile::open(dir.path(), None).unwrap();
        assert_eq!(indexes(&log).len(), 5);
        // A shorter frame goes where the torn one was; no garbage is left after it.
        log.append([Entry { log_id: entry(1, 5).log_id, payload: EntryPayload::Blank }]).unwrap();
        drop(log);
        let log = LogFile::open(dir.path(), None).unwrap();
        assert_eq!(indexes(&log).len(), 6);
    }

    #[test]
    fn damage_before_intact_frames_is_reported_and_nothing_is_changed() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = LogFile::open(dir.path(), None).unwrap();
        log.append((0..5).map(|i| entry(1, i))).unwrap();
        drop(log);
        let path = dir.path().join("log");
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[MAGIC.len() + frame::HEADER + 1] ^= 0x40;
        std::fs::write(&path, &bytes).unwrap();
        assert!(matches!(LogFile::open(dir.path(), None), Err(StoreError::Corrupt(_))));
        assert_eq!(std::fs::read(&path).unwrap(), bytes);
        std::fs::write(&path, b"something else entirely").unwrap();
        assert!(matches!(LogFile::open(dir.path(), None), Err(StoreError::Corrupt(_))));
    }

    #[test]
    fn the_file_is_compacted_once_purged_entries_dominate() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = LogFile::open(dir.path(), None).unwrap();
        log.compact_min_dead = 1024;
        log.append((0..100).map(|i| entry(1, i))).unwrap();
        let full = log.file_len();
        log.purge(LogId::new(CommittedLeaderId::new(1, 1), 89)).unwrap();
        assert!(log.file_len() < full / 5, "{} of {full} bytes left", log.file_len());
        assert_eq!(indexes(&log), (90..100).map(|i| (1, i)).collect::<Vec<_>>());
        log.append([entry(1, 100)]).unwrap();
        drop(log);
        let log = LogFile::open(dir.path(), None).unwrap();
        assert_eq!(log.purged().map(|p| p.index), Some(89));
        assert_eq!(indexes(&log), (90..101).map(|i| (1, i)).collect::<Vec<_>>());
    }

    /// The log of the previous release's cluster node (the CLI's fixture) opens, and every
    /// frame in it is what today's encoder writes for its record: no byte changed on disk.
    #[test]
    fn a_log_of_the_previous_release_is_encoded_byte_for_byte_the_same() {
        let old = include_bytes!("../../../locksmith-cli/tests/fixtures/data-dirs/cluster-node/raft/log");
        let scan = frame::scan(old, MAGIC.len(), MAX_FRAME).unwrap();
        assert!(!scan.torn && scan.frames.len() > 5, "{scan:?}");
        for found in &scan.frames {
            let record: Record = postcard::from_bytes(found.payload(old)).unwrap();
            let mut again = Vec::new();
            let as_written = match &record {
                Record::Entry(e) => RecordRef::Entry(e),
                Record::Truncate { since } => RecordRef::Truncate { since: *since },
                Record::Purge { upto } => RecordRef::Purge { upto: *upto },
            };
            encode_record(&as_written, &mut again).unwrap();
            assert_eq!(again, old[found.at..found.end()], "frame at {}", found.at);
        }
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("log"), old).unwrap();
        let log = LogFile::open(dir.path(), None).unwrap();
        assert_eq!(log.last_log_id().map(|l| l.index), Some(26));
    }

    #[test]
    fn a_limited_read_stops_at_the_byte_budget_but_returns_one_entry_at_least() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = LogFile::open(dir.path(), None).unwrap();
        log.append((0..10).map(|i| entry(1, i))).unwrap();
        let one = log.entries[&0].len;
        assert_eq!(log.read(2, 10, 3 * one).unwrap().len(), 3);
        assert_eq!(log.read(2, 10, 1).unwrap().len(), 1);
        assert_eq!(log.read(12, 20, u64::MAX).unwrap().len(), 0);
    }
}
