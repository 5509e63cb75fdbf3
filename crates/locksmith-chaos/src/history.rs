//! Worker histories: one JSON object per line, appended and flushed as each event happens, so a
//! worker killed with `kill -9` loses nothing it had already written. Times are
//! `CLOCK_MONOTONIC` nanoseconds, one clock for every process on the machine (workers, the
//! register and the nemesis), so events of different processes can be ordered.

use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;

use nix::time::{clock_gettime, ClockId};
use serde::{Deserialize, Serialize};

/// Now on `CLOCK_MONOTONIC`, in nanoseconds.
pub fn now_ns() -> u64 {
    // CLOCK_MONOTONIC cannot fail on Linux (it exists and the pointer is ours); 0 would only
    // make a broken clock visible as events at time zero.
    clock_gettime(ClockId::CLOCK_MONOTONIC)
        .map(|t| {
            let secs = u64::try_from(t.tv_sec()).unwrap_or(0);
            let nanos = u64::try_from(t.tv_nsec()).unwrap_or(0);
            secs.saturating_mul(1_000_000_000).saturating_add(nanos)
        })
        .unwrap_or(0)
}

/// One line of a worker's history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    /// The worker's id (stable across restarts).
    pub worker: u32,
    /// Which start of that worker (1 for the first; every restart after a kill adds one).
    pub incarnation: u32,
    /// When it happened (`CLOCK_MONOTONIC` ns).
    pub t: u64,
    /// What happened.
    #[serde(flatten)]
    pub event: Event,
}

/// What a worker did. `hold` names one attempt to take the lock: `worker.incarnation.seq`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "kebab-case")]
pub enum Event {
    /// `lock()` is about to be called (logged before the call).
    Invoke {
        /// The attempt.
        hold: String,
    },
    /// `lock()` returned a guard (logged after the call returned).
    Acquired {
        /// The attempt, now a hold.
        hold: String,
        /// The fencing token, `None` on a backend without one (Redlock).
        token: Option<u64>,
    },
    /// The register answered a read.
    Read {
        /// The hold.
        hold: String,
        /// The value read.
        value: u64,
    },
    /// The register answered a write.
    Write {
        /// The hold.
        hold: String,
        /// The value the write was based on (what the hold read).
        expected: u64,
        /// The value written.
        new: u64,
        /// Whether the register took it.
        accepted: bool,
    },
    /// `unlock()` is about to be called (logged before the call).
    ReleaseStart {
        /// The hold.
        hold: String,
    },
    /// `unlock()` returned: `ok` when it said the hold was still ours.
    Released {
        /// The hold.
        hold: String,
        /// `unlock()` returned `Ok(true)`.
        ok: bool,
    },
    /// The attempt failed: `lock()` timed out or failed, or the register could not be reached.
    Failed {
        /// The attempt.
        hold: String,
        /// Why.
        error: String,
    },
}

impl Event {
    /// The attempt this event belongs to.
    pub fn hold(&self) -> &str {
        match self {
            Event::Invoke { hold }
            | Event::Acquired { hold, .. }
            | Event::Read { hold, .. }
            | Event::Write { hold, .. }
            | Event::ReleaseStart { hold }
            | Event::Released { hold, .. }
            | Event::Failed { hold, .. } => hold,
        }
    }
}

/// Appends records to one history file, one `write` per line.
#[derive(Debug)]
pub struct HistoryWriter {
    file: File,
    worker: u32,
    incarnation: u32,
}

impl HistoryWriter {
    /// Opens (creates) `path` for appending.
    ///
    /// # Errors
    /// The file cannot be opened.
    pub fn open(path: &Path, worker: u32, incarnation: u32) -> std::io::Result<Self> {
        let file = std::fs::OpenOptions::new().create(true).append(true).open(path)?;
        Ok(Self { file, worker, incarnation })
    }

    /// Writes one event stamped with the current time. A `File` is unbuffered: once this returns
    /// the line is in the kernel and survives `kill -9` of this process.
    ///
    /// # Errors
    /// The write failed.
    pub fn log(&mut self, event: Event) -> std::io::Result<()> {
        let record = Record { worker: self.worker, incarnation: self.incarnation, t: now_ns(), event };
        let mut line = serde_json::to_vec(&record).map_err(std::io::Error::other)?;
        line.push(b'\n');
        self.file.write_all(&line)
    }
}

/// Reads one history file. A line that does not parse is counted, not fatal: only the last
/// line of a killed writer could be cut, and one write per line makes even that unlikely.
///
/// # Errors
/// The file cannot be read.
pub fn read_history(path: &Path) -> std::io::Result<(Vec<Record>, usize)> {
    let mut records = Vec::new();
    let mut bad = 0;
    for line in BufReader::new(File::open(path)?).lines() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str(&line) {
            Ok(r) => records.push(r),
            Err(_) => bad += 1,
        }
    }
    Ok((records, bad))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_through_a_file_line_by_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("w.jsonl");
        let mut w = HistoryWriter::open(&path, 3, 2).unwrap();
        w.log(Event::Invoke { hold: "3.2.1".into() }).unwrap();
        w.log(Event::Acquired { hold: "3.2.1".into(), token: Some(7) }).unwrap();
        w.log(Event::Write { hold: "3.2.1".into(), expected: 4, new: 5, accepted: true }).unwrap();
        std::fs::OpenOptions::new().append(true).open(&path).unwrap().write_all(b"{\"worker\":3,\"inc").unwrap();
        let (records, bad) = read_history(&path).unwrap();
        assert_eq!(bad, 1);
        assert_eq!(records.len(), 3);
        assert_eq!(records[1].event, Event::Acquired { hold: "3.2.1".into(), token: Some(7) });
        assert!(records[0].t <= records[2].t && records[0].t > 0);
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.starts_with("{\"worker\":3,\"incarnation\":2,\"t\":"), "{text}");
        assert!(text.contains("\"event\":\"acquired\""), "{text}");
    }
}
