//! Frames of the log file: `len: u32 LE | crc32(payload): u32 LE | payload`, the framing of the
//! server's write-ahead log (`crates/locksmith-server/src/wal.rs`), with the same torn-write
//! rules.
//!
//! The file is preallocated with zeros, so an all-zero frame header ends the log. A frame that
//! does not check out is the torn last write of a crash only if nothing but zeros follows it:
//! then it is dropped. Anything else is damage and is reported, never skipped over: dropping a
//! frame in the middle would silently lose acknowledged entries.
//!
//! What that rule cannot tell apart: after a power loss (not a process crash, which leaves the
//! page cache intact) the kernel may have written a later unsynced page but not an earlier one.
//! That leaves a hole inside the unsynced tail, which reads as damage. The node then refuses to
//! start, and is wiped and re-added (it catches up from the leader); nothing acknowledged is
//! lost either way.

/// Bytes before a frame's payload.
pub(crate) const FRAME_HEADER: usize = 8;

/// Appends one frame holding `payload` to `buf`.
pub(crate) fn encode(payload: &[u8], buf: &mut Vec<u8>) {
    // Callers keep payloads below `MAX_FRAME`, far below `u32::MAX`.
    let len = u32::try_from(payload.len()).unwrap_or(u32::MAX);
    buf.extend_from_slice(&len.to_le_bytes());
    buf.extend_from_slice(&crc32fast::hash(payload).to_le_bytes());
    buf.extend_from_slice(payload);
}

/// One intact frame found by [`scan`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Found {
    /// Offset of the frame (its header) in the scanned bytes.
    pub(crate) at: usize,
    /// Length of its payload.
    pub(crate) len: usize,
}

impl Found {
    /// Offset just past the frame.
    pub(crate) fn end(&self) -> usize {
        self.at + FRAME_HEADER + self.len
    }

    /// The payload within the scanned bytes.
    pub(crate) fn payload<'a>(&self, bytes: &'a [u8]) -> &'a [u8] {
        &bytes[self.at + FRAME_HEADER..self.end()]
    }
}

/// What [`scan`] found.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Scan {
    /// The intact frames, in order.
    pub(crate) frames: Vec<Found>,
    /// Offset just past the last intact frame.
    pub(crate) valid: usize,
    /// Whether a torn last frame was dropped (non-zero bytes follow `valid`).
    pub(crate) torn: bool,
}

/// The payload length and checksum in the frame header at the start of `bytes`, if all of the
/// header is there.
fn header(bytes: &[u8]) -> Option<(usize, u32)> {
    let h = bytes.get(..FRAME_HEADER)?;
    let len = u32::from_le_bytes([h[0], h[1], h[2], h[3]]) as usize;
    let crc = u32::from_le_bytes([h[4], h[5], h[6], h[7]]);
    Some((len, crc))
}

/// The payload of the frame at the start of `bytes`, if that frame is complete and its checksum
/// matches. Bytes after the frame are not looked at.
///
/// For reading back a frame whose place is already known; finding frames (and telling a torn
/// tail from damage) is [`scan`]'s job.
pub(crate) fn decode_one(bytes: &[u8]) -> Option<&[u8]> {
    let (len, crc) = header(bytes)?;
    if len == 0 && crc == 0 {
        // Preallocated zeros, not a frame (even though an empty payload's CRC is 0 as well).
        return None;
    }
    let payload = bytes.get(FRAME_HEADER..)?.get(..len)?;
    (crc32fast::hash(payload) == crc).then_some(payload)
}

/// Reads the frames of `bytes` from offset `from` on. Frames longer than `max_frame` are damage.
///
/// # Errors
/// A description of the damage, with its offset.
pub(crate) fn scan(bytes: &[u8], from: usize, max_frame: usize) -> Result<Scan, String> {
    let zeros_from = |at: usize| bytes.get(at..).is_none_or(|rest| rest.iter().all(|b| *b == 0));
    let mut frames = Vec::new();
    let mut at = from;
    while at < bytes.len() {
        let rest = &bytes[at..];
        let Some((len, crc)) = header(rest) else {
            // A header cut short: torn if anything but zeros is there.
            return Ok(Scan { frames, valid: at, torn: !zeros_from(at) });
        };
        if len == 0 && crc == 0 {
            // Preallocated space: the log ends here, and only zeros may follow.
            if zeros_from(at) {
                return Ok(Scan { frames, valid: at, torn: false });
            }
            return Err(format!("data after an empty frame at offset {at}"));
        }
        if len > max_frame {
            // Never written by us; but a header torn across two sectors can read as anything.
            if zeros_from(at + FRAME_HEADER) {
                return Ok(Scan { frames, valid: at, torn: true });
            }
            return Err(format!("frame at offset {at} claims {len} bytes"));
        }
        let end = at + FRAME_HEADER + len;
        if decode_one(rest).is_none() {
            // Cut short or failing its checksum.
            if zeros_from(end) {
                return Ok(Scan { frames, valid: at, torn: true });
            }
            return Err(format!("checksum mismatch at offset {at}"));
        }
        frames.push(Found { at, len });
        at = end;
    }
    Ok(Scan { frames, valid: at, torn: false })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn log(payloads: &[&[u8]]) -> Vec<u8> {
        let mut buf = Vec::new();
        for p in payloads {
            encode(p, &mut buf);
        }
        buf
    }

    fn payloads(bytes: &[u8]) -> Result<Vec<Vec<u8>>, String> {
        let s = scan(bytes, 0, 1 << 20)?;
        Ok(s.frames.iter().map(|f| f.payload(bytes).to_vec()).collect())
    }

    const SAMPLE: [&[u8]; 3] = [b"one", b"second frame", b"3"];

    #[test]
    fn frames_round_trip() {
        let bytes = log(&SAMPLE);
        assert_eq!(payloads(&bytes).unwrap(), SAMPLE.map(|p| p.to_vec()));
        let s = scan(&bytes, 0, 1 << 20).unwrap();
        assert_eq!((s.valid, s.torn), (bytes.len(), false));
    }

    #[test]
    fn a_last_frame_cut_short_is_dropped_as_torn() {
        let bytes = log(&SAMPLE);
        let last = bytes.len() - log(&SAMPLE[..2]).len();
        for cut in 1..last {
            let s = scan(&bytes[..bytes.len() - cut], 0, 1 << 20).unwrap();
            assert_eq!(s.frames.len(), 2, "cut {cut}");
            assert!(s.torn, "cut {cut}");
        }
    }

    #[test]
    fn zeros_end_the_log_and_a_torn_frame_before_them_is_dropped() {
        let mut bytes = log(&SAMPLE);
        let full = bytes.len();
        bytes.extend([0u8; 4096]);
        let s = scan(&bytes, 0, 1 << 20).unwrap();
        assert_eq!((s.frames.len(), s.valid, s.torn), (3, full, false));
        // The last payload only partly reached the disk.
        bytes[full - 1] = 0;
        let s = scan(&bytes, 0, 1 << 20).unwrap();
        assert_eq!((s.frames.len(), s.torn), (2, true));
    }

    #[test]
    fn damage_followed_by_data_is_reported() {
        let mut bytes = log(&SAMPLE);
        bytes[FRAME_HEADER] ^= 0xff;
        assert!(payloads(&bytes).is_err());
        let mut bytes = log(&SAMPLE);
        bytes[..FRAME_HEADER + 3].fill(0);
        assert!(payloads(&bytes).is_err(), "a zeroed frame before data is not the end of the log");
    }

    #[test]
    fn decode_one_reads_one_intact_frame_only() {
        let bytes = log(&SAMPLE);
        assert_eq!(decode_one(&bytes), Some(SAMPLE[0]), "bytes after the frame are ignored");
        let first = log(&SAMPLE[..1]);
        assert_eq!(decode_one(&first), Some(SAMPLE[0]));
        for cut in 0..first.len() {
            assert_eq!(decode_one(&first[..cut]), None, "cut to {cut}");
        }
        let mut damaged = first.clone();
        damaged[FRAME_HEADER] ^= 0xff;
        assert_eq!(decode_one(&damaged), None);
        assert_eq!(decode_one(&[0u8; 64]), None, "preallocated zeros are not a frame");
    }

    #[test]
    fn an_oversized_length_followed_by_data_is_reported() {
        let mut bytes = log(&SAMPLE);
        bytes[..4].copy_from_slice(&(1u32 << 30).to_le_bytes());
        assert!(scan(&bytes, 0, 1 << 20).is_err());
    }
}
