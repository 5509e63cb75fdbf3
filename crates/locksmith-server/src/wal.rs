//! The data directory: one write-ahead log of [`Record`]s, compacted into a snapshot on start,
//! and the token floor apart from it (`tokens`, see `crate::tokens`).
//!
//! Layout: `<dir>/LOCK` (held with an exclusive file lock while a server runs), `<dir>/tokens`
//! and `<dir>/wal`: a 16-byte magic and the log's 8-byte generation (a number the `tokens` file
//! names too; logs of the first release have the magic `LOCKSMITH-WAL-1` and no generation),
//! then frames ([`locksmith_disk::frame`]: `len: u32 LE | crc32(payload): u32 LE | payload`,
//! the Raft log's framing too) where payload is a protobuf `locksmith.wal.v1.Record`
//! (`proto/wal.proto`), then zeros: the file is preallocated in chunks
//! ([`locksmith_disk::AppendFile`]). An all-zero frame header ends the log. A frame that does
//! not check out is a torn write from a crash only if nothing but zeros follows it; then it is
//! dropped. Anything else is reported as [`ServerError::Corrupt`] and the directory is left
//! exactly as it was.
//!
//! Disk space: a start writes the compacted log (its live records, without preallocation when
//! the space for it is short) beside the old one before replacing it; running, the log grows
//! in 16 MiB steps, or by what is written when less is free. Without room for what must be
//! written the server stops with [`ServerError::NoSpace`] and acknowledges nothing more.
//!
//! redb was measured at ~0.7 ms per durable commit here; a plain write + `fdatasync` lets one
//! sync cover every grant that arrived meanwhile (group commit).

use std::fs::{File, OpenOptions};
use std::io::Read;
use std::path::{Path, PathBuf};

use locksmith_disk::frame;
use locksmith_disk::AppendFile;
use locksmith_proto::wal;
use prost::Message;

use crate::error::ServerError;
use crate::machine::Record;
use crate::pb_impl;
use crate::tokens::{Floor, TokensFile};

/// The first release's header: no generation follows it.
const MAGIC_V1: &[u8; 16] = b"LOCKSMITH-WAL-1\n";
/// Today's header, followed by the log's generation (u64 LE).
const MAGIC: &[u8; 16] = b"LOCKSMITH-WAL-2\n";
const HEADER: usize = MAGIC.len() + 8;
/// Largest frame accepted: a record holds at most a name, an owner and a few numbers.
const MAX_FRAME: usize = 64 * 1024;
/// Preallocation step of the log file.
const CHUNK: u64 = 16 * 1024 * 1024;

/// The open log: appends go at its end, inside preallocated space.
#[derive(Debug)]
pub(crate) struct LogFile {
    file: AppendFile,
    /// The data directory, for the message when its disk is full.
    dir: PathBuf,
}

impl LogFile {
    /// Writes `buf` at the end of the log (not yet durable).
    pub(crate) fn append(&mut self, buf: &[u8]) -> Result<(), ServerError> {
        self.file.append(buf).map_err(|e| disk_error(&self.dir, e))
    }

    /// Makes everything appended so far durable.
    pub(crate) fn sync(&self) -> Result<(), ServerError> {
        self.file.sync().map_err(|e| disk_error(&self.dir, e))
    }

    /// Bytes of log written.
    pub(crate) fn len(&self) -> u64 {
        self.file.len()
    }
}

/// An I/O error on the data directory `dir`: [`ServerError::NoSpace`] when it is out of space.
pub(crate) fn disk_error(dir: &Path, source: std::io::Error) -> ServerError {
    if locksmith_disk::is_no_space(&source) {
        ServerError::NoSpace { path: dir.to_path_buf(), source }
    } else {
        ServerError::Io(source)
    }
}

/// An open, locked data directory.
#[derive(Debug)]
pub(crate) struct DataDir {
    path: PathBuf,
    _lock: File,
    /// The generation of the current log (0 before the first [`DataDir::rewrite`]).
    generation: u64,
    /// What the `tokens` file said at open: `(seq, state)`.
    found: Option<(u64, Floor)>,
    /// Open once the first log of this run is written.
    tokens: Option<TokensFile>,
}

impl DataDir {
    /// Opens (creating if needed) and locks `path`, and reads every record in its log, the
    /// token floor first: a restart that replays them starts every lock above every token
    /// issued, also when the log lost records it cannot tell it lost.
    ///
    /// # Errors
    /// [`ServerError::Corrupt`] for a log or token floor that does not check out, or a log that
    /// is missing, of another generation or shorter than the floor file says was synced;
    /// [`ServerError::InUse`] when another server holds the directory,
    /// [`ServerError::DataDir`] when it cannot be created or opened ([`ServerError::NoSpace`]
    /// when that is for want of space), [`ServerError::Io`] for other I/O failures. Nothing in
    /// the directory is changed then.
    pub(crate) fn open(path: &Path) -> Result<(Self, Vec<Record>), ServerError> {
        let unusable = |source: std::io::Error| {
            if locksmith_disk::is_no_space(&source) {
                return disk_error(path, source);
            }
            ServerError::DataDir { path: path.to_path_buf(), source }
        };
        std::fs::create_dir_all(path).map_err(unusable)?;
        let lock =
            OpenOptions::new().create(true).truncate(false).write(true).open(path.join("LOCK")).map_err(unusable)?;
        lock.try_lock().map_err(|_| ServerError::InUse(path.to_path_buf()))?;
        let found = TokensFile::read(&path.join("tokens"))?;
        let bytes = match File::open(path.join("wal")) {
            Ok(mut f) => {
                let mut bytes = Vec::new();
                f.read_to_end(&mut bytes)?;
                Some(bytes)
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(e.into()),
        };
        let damaged = |what: String| {
            ServerError::Corrupt(format!(
                "wal: {what}; fencing tokens could repeat if the server went on from it. Restore the data \
                 directory from a backup (or, to start empty on purpose, move it aside: every lock's tokens \
                 then restart from 1)"
            ))
        };
        let (mut records, generation) = match (bytes, found) {
            (None, None) => (Vec::new(), 0),
            (None, Some((_, t))) => {
                return Err(damaged(format!("the log is missing (generation {} was written)", t.log_generation)))
            }
            (Some(bytes), found) => {
                let log = decode_log(&bytes)?;
                match (log.generation, found) {
                    // A first-release log (upgrade), or a first start that crashed before its
                    // first log was complete: nothing to check it against.
                    (None, None) => {}
                    (None, Some(_)) => {
                        return Err(damaged("the log has no generation but a token floor exists".into()))
                    }
                    (Some(_), None) => {
                        return Err(damaged("the token floor file `tokens` is missing beside the log".into()))
                    }
                    (Some(g), Some((_, t))) => {
                        if g == t.log_generation {
                            if log.valid < t.log_synced {
                                return Err(damaged(format!(
                                    "the log holds {} intact bytes, but {} were synced: it was truncated",
                                    log.valid, t.log_synced
                                )));
                            }
                        } else if g != t.log_generation + 1 {
                            // One ahead: a compaction that crashed before it updated `tokens`.
                            return Err(damaged(format!(
                                "the log is generation {g}, the token floor names generation {}: it is not the \
                                 log this directory last wrote",
                                t.log_generation
                            )));
                        }
                    }
                }
                (log.records, log.generation.unwrap_or(0))
            }
        };
        if let Some((_, t)) = found {
            records.insert(0, Record::Floor { upto: t.floor });
        }
        Ok((Self { path: path.to_path_buf(), _lock: lock, generation, found, tokens: None }, records))
    }

    /// Raises the token floor to `upto` in the `tokens` file (synced), noting that `synced`
    /// bytes of the current log are durable. Call it after syncing the log.
    ///
    /// # Errors
    /// I/O failures: no token above the old floor may be handed out then.
    pub(crate) fn raise_floor(&mut self, upto: u64, synced: u64) -> Result<(), ServerError> {
        let tokens = self.tokens.as_mut().ok_or_else(|| ServerError::Failed("token floor file not open".into()))?;
        let current = tokens.current();
        let floor = current.floor.max(upto);
        let state = Floor { floor, log_generation: self.generation, log_synced: synced.max(current.log_synced) };
        tokens.write(state).map_err(|e| disk_error(&self.path, e))
    }

    /// Atomically replaces the log with `records` (durable before returning), in the next
    /// generation, points the `tokens` file at it, and returns the new log, preallocated,
    /// ready for appending. The token floor written is the highest of the floor in force and
    /// any [`Record::Floor`] among `records`.
    ///
    /// The new log needs room for `records` only: its preallocation is skipped when the space
    /// is short.
    ///
    /// # Errors
    /// I/O failures ([`ServerError::NoSpace`] when the disk is full); the old log is then still
    /// in place.
    pub(crate) fn rewrite(&mut self, records: &[Record]) -> Result<LogFile, ServerError> {
        let generation = self.generation + 1;
        let mut buf = MAGIC.to_vec();
        buf.extend_from_slice(&generation.to_le_bytes());
        for r in records {
            encode_into(r, &mut buf);
        }
        let end = buf.len() as u64;
        let (file, allocated) =
            locksmith_disk::install(&self.path, "wal", &buf, CHUNK).map_err(|e| disk_error(&self.path, e))?;
        self.generation = generation;
        let in_records = records.iter().filter_map(|r| match r {
            Record::Floor { upto } => Some(*upto),
            _ => None,
        });
        let floor = in_records
            .chain(self.tokens.as_ref().map(|t| t.current().floor))
            .chain(self.found.map(|(_, t)| t.floor))
            .max()
            .unwrap_or(0);
        let state = Floor { floor, log_generation: generation, log_synced: end };
        let written = match &mut self.tokens {
            Some(tokens) => tokens.write(state),
            None => {
                let seq = self.found.map_or(0, |(seq, _)| seq);
                TokensFile::create(&self.path.join("tokens"), seq, state).map(|t| self.tokens = Some(t))
            }
        };
        written.map_err(|e| disk_error(&self.path, e))?;
        Ok(LogFile { file: AppendFile::new(file, end, allocated, CHUNK), dir: self.path.clone() })
    }
}

/// What a log holds.
#[derive(Debug, PartialEq)]
struct Log {
    records: Vec<Record>,
    /// `None` for a first-release log (or an empty file).
    generation: Option<u64>,
    /// Bytes up to the end of the last intact frame.
    valid: u64,
}

/// Appends one framed record to `buf`: the payload is encoded in place ([`frame::encode_with`]),
/// not into a buffer of its own first.
pub(crate) fn encode_into(record: &Record, buf: &mut Vec<u8>) {
    frame::encode_with(buf, |buf| {
        if !pb_impl::encode_hot(record, buf) {
            pb_impl::to_wal(record).encode_raw(buf);
        }
    });
}

/// Why the bytes at some offset are not one whole record. The log and a replicated command
/// read frames with the same [`decode_frame`] and differ only in what they make of these: the
/// log forgives a torn tail (a crash mid-write, see [`frame::scan`]), a command forgives
/// nothing.
#[derive(Debug)]
pub(crate) enum FrameError {
    /// Not one whole frame.
    #[cfg_attr(not(feature = "cluster"), allow(dead_code))]
    Frame(frame::FrameError),
    /// An intact frame whose payload is not a record.
    Undecodable(prost::DecodeError),
    /// An intact frame holding a record of no known kind.
    EmptyRecord,
}

impl std::fmt::Display for FrameError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Frame(e) => e.fmt(f),
            Self::Undecodable(e) => write!(f, "undecodable record: {e}"),
            Self::EmptyRecord => f.write_str("empty record"),
        }
    }
}

/// The record in an intact frame's payload.
fn decode_record(payload: &[u8]) -> Result<Record, FrameError> {
    let msg = wal::Record::decode(payload).map_err(FrameError::Undecodable)?;
    pb_impl::from_wal(msg).ok_or(FrameError::EmptyRecord)
}

/// One whole frame at the start of `bytes`: the record and the bytes it took.
///
/// # Errors
/// A frame cut short, too large, failing its checksum or not a record.
// The replicas' commands (`cluster`) and this module's tests read single frames.
#[cfg_attr(not(feature = "cluster"), allow(dead_code))]
pub(crate) fn decode_frame(bytes: &[u8]) -> Result<(Record, usize), FrameError> {
    let (payload, used) = frame::decode_one(bytes, MAX_FRAME).map_err(FrameError::Frame)?;
    Ok((decode_record(payload)?, used))
}

fn decode_log(bytes: &[u8]) -> Result<Log, ServerError> {
    let (generation, header) = if bytes.starts_with(MAGIC) && bytes.len() >= HEADER {
        let mut g = [0u8; 8];
        g.copy_from_slice(&bytes[MAGIC.len()..HEADER]);
        (Some(u64::from_le_bytes(g)), HEADER)
    } else if bytes.starts_with(MAGIC_V1) {
        (None, MAGIC_V1.len())
    } else if MAGIC.starts_with(bytes) || MAGIC_V1.starts_with(bytes) || bytes.starts_with(MAGIC) {
        // A crash while the very first header was written leaves a short file.
        return Ok(Log { records: Vec::new(), generation: None, valid: 0 });
    } else if bytes.len() < MAGIC.len() {
        return Err(ServerError::Corrupt("wal: file is too short and has no locksmith header".into()));
    } else {
        return Err(ServerError::Corrupt("wal: not a locksmith log (bad header)".into()));
    };
    let scan = frame::scan(bytes, header, MAX_FRAME).map_err(|d| ServerError::Corrupt(format!("wal: {d}")))?;
    let mut records = Vec::with_capacity(scan.frames.len());
    for found in &scan.frames {
        let at = found.at;
        let what = match decode_record(found.payload(bytes)) {
            Ok(record) => {
                records.push(record);
                continue;
            }
            Err(FrameError::Undecodable(e)) => format!("undecodable record at offset {at}: {e}"),
            Err(e) => format!("{e} at offset {at}"),
        };
        return Err(ServerError::Corrupt(format!("wal: {what}")));
    }
    if scan.torn {
        tracing::warn!(offset = scan.valid, "wal: dropping a torn last frame");
    }
    Ok(Log { records, generation, valid: scan.valid as u64 })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::machine::HoldMode;

    fn records(bytes: &[u8]) -> Option<Vec<Record>> {
        decode_log(bytes).ok().map(|l| l.records)
    }

    fn sample() -> Vec<Record> {
        vec![
            Record::Boot { epoch: 3 },
            Record::Session { id: 7, ttl: Duration::from_secs(1), secret: Some([1; 32]) },
            Record::Grant {
                name: "a".into(),
                session: 7,
                owner: "o".into(),
                token: 9,
                lock_delay: Duration::ZERO,
                mode: HoldMode::Exclusive,
                value: None,
            },
            Record::Grant {
                name: "r".into(),
                session: 7,
                owner: "o".into(),
                token: 3,
                lock_delay: Duration::ZERO,
                mode: HoldMode::Shared,
                value: Some("leader-1".into()),
            },
            Record::Grant {
                name: "s".into(),
                session: 7,
                owner: "p".into(),
                token: 4,
                lock_delay: Duration::ZERO,
                mode: HoldMode::Permit(3),
                value: None,
            },
            Record::Release { name: "a".into(), token: 9, delay: Duration::from_millis(5) },
            Record::Counter { name: "b".into(), token: 4, delay: Duration::ZERO },
            Record::SessionEnd { id: 7 },
            Record::Reserve { name: "c".into(), upto: 2048 },
            Record::Horizon { ttl: Duration::from_secs(3), lock_delay: Duration::from_millis(250) },
            Record::Floor { upto: 4096 },
        ]
    }

    fn log(records: &[Record]) -> Vec<u8> {
        let mut buf = MAGIC.to_vec();
        buf.extend_from_slice(&7u64.to_le_bytes());
        for r in records {
            encode_into(r, &mut buf);
        }
        buf
    }

    /// Records are framed in place exactly as `locksmith-disk` frames a payload, and grants and
    /// releases, encoded without their log message, exactly as their log message encodes:
    /// zero fields left out, a length over one varint byte, an empty value as none.
    #[test]
    fn a_record_is_framed_as_the_disk_crate_frames_it() {
        let long = "n".repeat(300);
        let edge = [
            Record::Grant {
                name: long.clone(),
                session: 0,
                owner: String::new(),
                token: 0,
                lock_delay: Duration::from_millis(u64::MAX / 1_000_000),
                mode: HoldMode::Permit(u32::MAX),
                value: Some(String::new()),
            },
            Record::Grant {
                name: "x".into(),
                session: u64::MAX,
                owner: "o".repeat(200),
                token: u64::MAX,
                lock_delay: Duration::from_micros(1_500),
                mode: HoldMode::Shared,
                value: Some("v".repeat(150)),
            },
            Record::Release { name: long, token: 0, delay: Duration::ZERO },
            Record::Release { name: String::new(), token: 1, delay: Duration::from_millis(1) },
        ];
        for r in sample().into_iter().chain(fixture_records()).chain(edge) {
            let mut framed = vec![7u8];
            frame::encode(&pb_impl::to_wal(&r).encode_to_vec(), &mut framed);
            let mut direct = vec![7u8];
            encode_into(&r, &mut direct);
            assert_eq!(direct, framed, "{r:?}");
        }
    }

    #[test]
    fn records_round_trip_through_the_log() {
        assert_eq!(records(&log(&sample())), Some(sample()));
    }

    // The torn-tail rule itself (cuts, zeros, damage before intact frames) is tested once, in
    // locksmith-disk's `frame`; these check what the log makes of it.

    #[test]
    fn a_damaged_frame_in_the_middle_is_reported_as_corrupt() {
        let mut bytes = log(&sample());
        let mid = HEADER + 12;
        bytes[mid] ^= 0xff;
        assert!(matches!(decode_log(&bytes), Err(ServerError::Corrupt(_))));
    }

    /// What `tests/fixtures/wal-locksmith-v1.log` holds: every record kind with every field
    /// non-zero (proto3 leaves zero fields out, so a zero would not pin its field number).
    fn fixture_records() -> Vec<Record> {
        let (s1, s2) = ((3 << 32) | 1, (3 << 32) | 2);
        let ms = Duration::from_millis;
        vec![
            Record::Boot { epoch: 3 },
            Record::Session { id: s1, ttl: ms(10_000), secret: None },
            Record::Session { id: s2, ttl: ms(2_500), secret: None },
            Record::Grant {
                name: "jobs/nightly".into(),
                session: s1,
                owner: "host/42/0badcafe-1".into(),
                token: 7,
                lock_delay: ms(1_500),
                mode: HoldMode::Exclusive,
                value: None,
            },
            Record::Release { name: "jobs/nightly".into(), token: 7, delay: ms(1_500) },
            Record::Grant {
                name: "jobs/nightly".into(),
                session: s2,
                owner: "host/43/0badcafe-2".into(),
                token: 8,
                lock_delay: ms(250),
                mode: HoldMode::Exclusive,
                value: None,
            },
            Record::Counter { name: "ünïcode/☃".into(), token: 41, delay: ms(900) },
            Record::SessionEnd { id: s1 },
            Record::Reserve { name: "leased".into(), upto: 2048 },
            Record::Horizon { ttl: ms(30_000), lock_delay: ms(5_000) },
        ]
    }

    /// A log written by the first release's encoder (the WAL messages then lived in the wire
    /// package `locksmith.v1`) still decodes to the same records: data dirs survive upgrades.
    #[test]
    fn a_log_written_by_the_first_release_still_decodes() {
        let bytes = include_bytes!("../tests/fixtures/wal-locksmith-v1.log");
        let old = decode_log(bytes).unwrap();
        assert_eq!((old.records.as_slice(), old.generation), (fixture_records().as_slice(), None));
        let frames = &bytes[MAGIC_V1.len()..];
        assert_eq!(&log(&fixture_records())[HEADER..], frames, "today's encoder writes the same frames");
    }

    /// The log of the previous release's data directory (the CLI's fixture) decodes, and
    /// today's encoder writes it again byte for byte: the toolkit changed no byte on disk.
    #[test]
    fn a_log_of_the_previous_release_is_written_again_byte_for_byte() {
        let bytes = include_bytes!("../../locksmith-cli/tests/fixtures/data-dirs/single/wal");
        let old = decode_log(bytes).unwrap();
        assert!(old.records.iter().any(|r| matches!(r, Record::Grant { token: 3, .. })), "{:?}", old.records);
        let mut again = MAGIC.to_vec();
        again.extend_from_slice(&old.generation.unwrap().to_le_bytes());
        for r in &old.records {
            encode_into(r, &mut again);
        }
        assert_eq!(again, bytes.to_vec());
    }

    #[test]
    fn the_header_carries_the_generation_and_the_intact_length() {
        let bytes = log(&sample());
        let l = decode_log(&bytes).unwrap();
        assert_eq!((l.generation, l.valid), (Some(7), bytes.len() as u64));
        let mut padded = bytes.clone();
        padded.extend([0u8; 100]);
        assert_eq!(decode_log(&padded).unwrap().valid, bytes.len() as u64);
        // Cut inside the header: nothing to read, no generation.
        for cut in [0, 10, MAGIC.len(), HEADER - 1] {
            let l = decode_log(&bytes[..cut]).unwrap();
            assert_eq!((l.records.len(), l.generation), (0, None), "cut at {cut}");
        }
    }

    #[test]
    fn a_foreign_file_is_reported_as_corrupt() {
        assert!(matches!(decode_log(b"hello, this is not a log at all"), Err(ServerError::Corrupt(_))));
        assert!(matches!(decode_log(b"\xff\xfe"), Err(ServerError::Corrupt(_))));
    }
}
