//! The data directory: one write-ahead log of [`Record`]s, compacted into a snapshot on start.
//!
//! Layout: `<dir>/LOCK` (held with an exclusive file lock while a server runs) and `<dir>/wal`:
//! a 16-byte magic header, then frames of `len: u32 LE | crc32(payload): u32 LE | payload`,
//! where payload is a protobuf `WalRecord`. A frame cut short at the very end of the file (a
//! crash mid-write) is dropped; anything else that does not check out is reported as
//! [`Error::Corrupt`] and the directory is left exactly as it was.
//!
//! redb was measured at ~0.7 ms per durable commit here; a plain append + `fdatasync` costs
//! ~60 µs and lets one sync cover every grant that arrived meanwhile (group commit).

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use locksmith_core::Error;
use locksmith_proto::{wal_record::Body, WalCounter, WalGrant, WalRecord, WalRelease, WalSession};
use prost::Message;

use crate::machine::Record;

const MAGIC: &[u8; 16] = b"LOCKSMITH-WAL-1\n";
/// Largest frame accepted: a record holds at most a name, an owner and a few numbers.
const MAX_FRAME: usize = 64 * 1024;

/// An open, locked data directory.
#[derive(Debug)]
pub(crate) struct DataDir {
    path: PathBuf,
    _lock: File,
}

impl DataDir {
    /// Opens (creating if needed) and locks `path`, and reads every record in its log.
    ///
    /// # Errors
    /// [`Error::Corrupt`] for a log that does not check out, [`Error::Io`] for I/O failures or
    /// when another server holds the directory.
    pub(crate) fn open(path: &Path) -> Result<(Self, Vec<Record>), Error> {
        std::fs::create_dir_all(path)?;
        let lock = OpenOptions::new().create(true).truncate(false).write(true).open(path.join("LOCK"))?;
        lock.try_lock().map_err(|_| {
            Error::Io(std::io::Error::other(format!(
                "data directory {} is in use by another locksmith server",
                path.display()
            )))
        })?;
        let records = match File::open(path.join("wal")) {
            Ok(mut f) => {
                let mut bytes = Vec::new();
                f.read_to_end(&mut bytes)?;
                decode_log(&bytes)?
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(e.into()),
        };
        Ok((Self { path: path.to_path_buf(), _lock: lock }, records))
    }

    /// Atomically replaces the log with `records` (durable before returning) and returns the
    /// new log opened for appending.
    ///
    /// # Errors
    /// I/O failures; the old log is then still in place.
    pub(crate) fn rewrite(&self, records: &[Record]) -> Result<File, Error> {
        let tmp = self.path.join("wal.tmp");
        let mut f = OpenOptions::new().create(true).write(true).truncate(true).open(&tmp)?;
        let mut buf = MAGIC.to_vec();
        for r in records {
            encode_into(r, &mut buf);
        }
        f.write_all(&buf)?;
        f.sync_all()?;
        std::fs::rename(&tmp, self.path.join("wal"))?;
        File::open(&self.path)?.sync_all()?;
        Ok(OpenOptions::new().append(true).open(self.path.join("wal"))?)
    }
}

/// Appends one framed record to `buf`.
pub(crate) fn encode_into(record: &Record, buf: &mut Vec<u8>) {
    let payload = to_proto(record).encode_to_vec();
    buf.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    buf.extend_from_slice(&crc32fast::hash(&payload).to_le_bytes());
    buf.extend_from_slice(&payload);
}

fn decode_log(bytes: &[u8]) -> Result<Vec<Record>, Error> {
    if bytes.len() < MAGIC.len() {
        // A crash while the very first header was written leaves a short file.
        if MAGIC.starts_with(bytes) {
            return Ok(Vec::new());
        }
        return Err(Error::Corrupt("wal: file is too short and has no locksmith header".into()));
    }
    if &bytes[..MAGIC.len()] != MAGIC {
        return Err(Error::Corrupt("wal: not a locksmith log (bad header)".into()));
    }
    let mut records = Vec::new();
    let mut at = MAGIC.len();
    while at < bytes.len() {
        let rest = &bytes[at..];
        if rest.len() < 8 {
            tracing::warn!(offset = at, "wal: dropping a frame header cut short by a crash");
            break;
        }
        let len = u32::from_le_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
        let crc = u32::from_le_bytes([rest[4], rest[5], rest[6], rest[7]]);
        if len > MAX_FRAME {
            return Err(Error::Corrupt(format!("wal: frame at offset {at} claims {len} bytes")));
        }
        if rest.len() < 8 + len {
            tracing::warn!(offset = at, "wal: dropping a frame cut short by a crash");
            break;
        }
        let payload = &rest[8..8 + len];
        let last = rest.len() == 8 + len;
        if crc32fast::hash(payload) != crc {
            if last {
                tracing::warn!(offset = at, "wal: dropping a torn last frame");
                break;
            }
            return Err(Error::Corrupt(format!("wal: checksum mismatch at offset {at}")));
        }
        let msg = WalRecord::decode(payload)
            .map_err(|e| Error::Corrupt(format!("wal: undecodable record at offset {at}: {e}")))?;
        let record = from_proto(msg).ok_or_else(|| Error::Corrupt(format!("wal: empty record at offset {at}")))?;
        records.push(record);
        at += 8 + len;
    }
    Ok(records)
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

fn to_proto(r: &Record) -> WalRecord {
    let body = match r {
        Record::Boot { epoch } => Body::BootEpoch(*epoch),
        Record::Session { id, ttl } => Body::Session(WalSession { id: *id, ttl_ms: ms(*ttl) }),
        Record::Grant { name, session, owner, token, lock_delay } => Body::Grant(WalGrant {
            name: name.clone(),
            session: *session,
            owner: owner.clone(),
            token: *token,
            lock_delay_ms: ms(*lock_delay),
        }),
        Record::Release { name, token, delay } => {
            Body::Release(WalRelease { name: name.clone(), token: *token, delay_ms: ms(*delay) })
        }
        Record::SessionEnd { id } => Body::SessionEnd(*id),
        Record::Counter { name, token, delay } => {
            Body::Counter(WalCounter { name: name.clone(), token: *token, delay_ms: ms(*delay) })
        }
    };
    WalRecord { body: Some(body) }
}

fn from_proto(r: WalRecord) -> Option<Record> {
    let d = Duration::from_millis;
    Some(match r.body? {
        Body::BootEpoch(epoch) => Record::Boot { epoch },
        Body::Session(s) => Record::Session { id: s.id, ttl: d(s.ttl_ms) },
        Body::Grant(g) => Record::Grant {
            name: g.name,
            session: g.session,
            owner: g.owner,
            token: g.token,
            lock_delay: d(g.lock_delay_ms),
        },
        Body::Release(x) => Record::Release { name: x.name, token: x.token, delay: d(x.delay_ms) },
        Body::SessionEnd(id) => Record::SessionEnd { id },
        Body::Counter(c) => Record::Counter { name: c.name, token: c.token, delay: d(c.delay_ms) },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<Record> {
        vec![
            Record::Boot { epoch: 3 },
            Record::Session { id: 7, ttl: Duration::from_secs(1) },
            Record::Grant { name: "a".into(), session: 7, owner: "o".into(), token: 9, lock_delay: Duration::ZERO },
            Record::Release { name: "a".into(), token: 9, delay: Duration::from_millis(5) },
            Record::Counter { name: "b".into(), token: 4, delay: Duration::ZERO },
            Record::SessionEnd { id: 7 },
        ]
    }

    fn log(records: &[Record]) -> Vec<u8> {
        let mut buf = MAGIC.to_vec();
        for r in records {
            encode_into(r, &mut buf);
        }
        buf
    }

    #[test]
    fn records_round_trip_through_the_log() {
        assert_eq!(decode_log(&log(&sample())).ok(), Some(sample()));
    }

    #[test]
    fn a_frame_cut_short_at_the_end_is_dropped() {
        let bytes = log(&sample());
        let last_frame = bytes.len() - log(&sample()[..sample().len() - 1]).len();
        for cut in 1..=last_frame {
            let got = decode_log(&bytes[..bytes.len() - cut]).ok();
            assert_eq!(got.as_deref(), Some(&sample()[..sample().len() - 1]), "cut {cut}");
        }
    }

    #[test]
    fn a_damaged_frame_in_the_middle_is_reported_as_corrupt() {
        let mut bytes = log(&sample());
        let mid = MAGIC.len() + 12;
        bytes[mid] ^= 0xff;
        assert!(matches!(decode_log(&bytes), Err(Error::Corrupt(_))));
    }

    #[test]
    fn a_foreign_file_is_reported_as_corrupt() {
        assert!(matches!(decode_log(b"hello, this is not a log at all"), Err(Error::Corrupt(_))));
        assert!(matches!(decode_log(b"\xff\xfe"), Err(Error::Corrupt(_))));
    }
}
