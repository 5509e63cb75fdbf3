//! Frames: `len: u32 LE | crc32(payload): u32 LE | payload`, back to back.
//!
//! Logs are preallocated with zeros, so an all-zero frame header ends a log. A frame that does
//! not check out is the torn last write of a crash only if nothing but zeros follows it: then
//! [`scan`] drops it. Anything else is [`Damage`], never skipped over: dropping a frame in the
//! middle would silently lose acknowledged records.
//!
//! What that rule cannot tell apart: after a power loss (not a process crash, which leaves the
//! page cache intact) the kernel may have written a later unsynced page but not an earlier one.
//! That leaves a hole inside the unsynced tail, which reads as damage; nothing acknowledged is
//! lost, but the program refuses the file.

use std::fmt;

/// Bytes before a frame's payload.
pub const HEADER: usize = 8;

/// Appends one frame holding `payload` to `buf`.
///
/// Payloads are expected to stay far below `u32::MAX` bytes (callers enforce a `max_frame`).
///
/// ```
/// let mut buf = Vec::new();
/// locksmith_disk::frame::encode(b"abc", &mut buf);
/// assert_eq!(buf.len(), locksmith_disk::frame::HEADER + 3);
/// ```
pub fn encode(payload: &[u8], buf: &mut Vec<u8>) {
    encode_with(buf, |buf| buf.extend_from_slice(payload));
}

/// Appends one frame to `buf` whose payload `write` appends: the same bytes as [`encode`], for
/// a payload encoded in place (no buffer of its own first). The header is reserved before
/// `write` runs and filled in after it, so `write` must only append.
///
/// ```
/// let (mut framed, mut direct) = (Vec::new(), Vec::new());
/// locksmith_disk::frame::encode_with(&mut framed, |buf| buf.extend_from_slice(b"abc"));
/// locksmith_disk::frame::encode(b"abc", &mut direct);
/// assert_eq!(framed, direct);
/// ```
pub fn encode_with(buf: &mut Vec<u8>, write: impl FnOnce(&mut Vec<u8>)) {
    let at = buf.len();
    buf.extend_from_slice(&[0; HEADER]);
    write(buf);
    let payload = &buf[at + HEADER..];
    let len = u32::try_from(payload.len()).unwrap_or(u32::MAX);
    let crc = crc32fast::hash(payload);
    buf[at..at + 4].copy_from_slice(&len.to_le_bytes());
    buf[at + 4..at + HEADER].copy_from_slice(&crc.to_le_bytes());
}

/// Why the bytes at some offset are not one whole frame.
///
/// ```
/// use locksmith_disk::frame::{decode_one, FrameError};
/// assert!(matches!(decode_one(&[0u8; 16], 1024), Err(FrameError::Zero)));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameError {
    /// Fewer bytes than a frame header.
    ShortHeader,
    /// A header of zeros: preallocated space, where a log ends.
    Zero,
    /// A header claiming more than the largest frame accepted.
    TooLarge(usize),
    /// A frame running past the bytes there are (`cut`), or failing its checksum; it would end
    /// `end` bytes from where it starts.
    Torn {
        /// The payload length its header claims.
        len: usize,
        /// Where the frame would end, from its start.
        end: usize,
        /// Whether the bytes end before the frame does.
        cut: bool,
    },
}

impl fmt::Display for FrameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::ShortHeader => f.write_str("frame header cut short"),
            Self::Zero => f.write_str("empty frame"),
            Self::TooLarge(len) | Self::Torn { len, cut: true, .. } => write!(f, "frame of {len} bytes does not fit"),
            Self::Torn { cut: false, .. } => f.write_str("checksum mismatch"),
        }
    }
}

impl std::error::Error for FrameError {}

/// The payload of the whole frame at the start of `bytes`, and the bytes the frame takes.
/// Bytes after the frame are not looked at: for a frame whose place is known, or a buffer that
/// must hold only whole frames (a replicated command). Telling a torn tail from damage is
/// [`scan`]'s job.
///
/// # Errors
/// A frame cut short, of zeros, longer than `max_frame`, or failing its checksum.
///
/// ```
/// let mut buf = Vec::new();
/// locksmith_disk::frame::encode(b"one", &mut buf);
/// locksmith_disk::frame::encode(b"two", &mut buf);
/// let (payload, used) = locksmith_disk::frame::decode_one(&buf, 1024).unwrap();
/// assert_eq!((payload, used), (&b"one"[..], 11));
/// ```
pub fn decode_one(bytes: &[u8], max_frame: usize) -> Result<(&[u8], usize), FrameError> {
    let Some(h) = bytes.get(..HEADER) else {
        return Err(FrameError::ShortHeader);
    };
    let len = u32::from_le_bytes([h[0], h[1], h[2], h[3]]) as usize;
    let crc = u32::from_le_bytes([h[4], h[5], h[6], h[7]]);
    if len == 0 && crc == 0 {
        // Preallocated zeros, not a frame (even though an empty payload's CRC is 0 as well).
        return Err(FrameError::Zero);
    }
    if len > max_frame {
        return Err(FrameError::TooLarge(len));
    }
    let end = HEADER + len;
    let Some(payload) = bytes.get(HEADER..end) else {
        return Err(FrameError::Torn { len, end, cut: true });
    };
    if crc32fast::hash(payload) != crc {
        return Err(FrameError::Torn { len, end, cut: false });
    }
    Ok((payload, end))
}

/// One intact frame found by [`scan`].
///
/// ```
/// let mut buf = Vec::new();
/// locksmith_disk::frame::encode(b"x", &mut buf);
/// let found = locksmith_disk::frame::scan(&buf, 0, 16).unwrap().frames[0];
/// assert_eq!((found.at, found.len, found.end()), (0, 1, 9));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Found {
    /// Offset of the frame (its header) in the scanned bytes.
    pub at: usize,
    /// Length of its payload.
    pub len: usize,
}

impl Found {
    /// Offset just past the frame.
    ///
    /// ```
    /// let f = locksmith_disk::frame::Found { at: 10, len: 2 };
    /// assert_eq!(f.end(), 20);
    /// ```
    pub fn end(&self) -> usize {
        self.at + HEADER + self.len
    }

    /// The payload within the scanned bytes.
    ///
    /// ```
    /// let f = locksmith_disk::frame::Found { at: 0, len: 2 };
    /// assert_eq!(f.payload(b"\x02\0\0\0crc!ok"), b"ok");
    /// ```
    pub fn payload<'a>(&self, bytes: &'a [u8]) -> &'a [u8] {
        &bytes[self.at + HEADER..self.end()]
    }
}

/// What [`scan`] found.
///
/// ```
/// let scan = locksmith_disk::frame::scan(&[0u8; 64], 0, 16).unwrap();
/// assert_eq!((scan.frames.len(), scan.valid, scan.torn), (0, 0, false));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scan {
    /// The intact frames, in order.
    pub frames: Vec<Found>,
    /// Offset just past the last intact frame: where the next frame goes.
    pub valid: usize,
    /// Whether a torn last frame was dropped (bytes other than zeros follow `valid`).
    pub torn: bool,
}

/// Bytes that are neither frames nor a torn last frame followed by zeros.
///
/// ```
/// let d = locksmith_disk::frame::Damage { offset: 24, what: locksmith_disk::frame::Harm::Checksum };
/// assert_eq!(d.to_string(), "checksum mismatch at offset 24");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Damage {
    /// Where the damaged frame starts.
    pub offset: usize,
    /// What is wrong there.
    pub what: Harm,
}

/// What [`Damage`] found.
///
/// ```
/// let h = locksmith_disk::frame::Harm::TooLarge(1 << 30);
/// assert_ne!(h, locksmith_disk::frame::Harm::Checksum);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Harm {
    /// A header of zeros with data after it.
    DataAfterEmpty,
    /// A header claiming more than the largest frame, with data after it.
    TooLarge(usize),
    /// A frame failing its checksum (or cut short) with data after it.
    Checksum,
}

impl fmt::Display for Damage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let at = self.offset;
        match self.what {
            Harm::DataAfterEmpty => write!(f, "data after an empty frame at offset {at}"),
            Harm::TooLarge(len) => write!(f, "frame at offset {at} claims {len} bytes"),
            Harm::Checksum => write!(f, "checksum mismatch at offset {at}"),
        }
    }
}

impl std::error::Error for Damage {}

/// Reads the frames of `bytes` from offset `from` on (the file's header before it is the
/// caller's), applying the torn-tail rule of the module docs. Frames longer than `max_frame`
/// are damage, unless only zeros follow their header (a header torn across two sectors can
/// read as anything).
///
/// # Errors
/// [`Damage`], with its offset.
///
/// ```
/// use locksmith_disk::frame::{encode, scan};
/// let mut log = Vec::new();
/// encode(b"first", &mut log);
/// encode(b"second", &mut log);
/// let whole = log.len();
/// log.truncate(whole - 2); // a crash tore the last write
/// log.extend([0u8; 100]); // preallocated space
/// let s = scan(&log, 0, 1024).unwrap();
/// assert_eq!((s.frames.len(), s.torn), (1, true));
///
/// log[3] = 0xff; // damage before intact data is never dropped
/// assert!(scan(&log, 0, 1024).is_err());
/// ```
pub fn scan(bytes: &[u8], from: usize, max_frame: usize) -> Result<Scan, Damage> {
    let zeros_from = |at: usize| bytes.get(at..).is_none_or(|rest| rest.iter().all(|b| *b == 0));
    let damage = |offset, what| Err(Damage { offset, what });
    let mut frames = Vec::new();
    let mut at = from;
    while at < bytes.len() {
        let torn = match decode_one(&bytes[at..], max_frame) {
            Ok((payload, used)) => {
                frames.push(Found { at, len: payload.len() });
                at += used;
                continue;
            }
            Err(FrameError::ShortHeader) => !zeros_from(at),
            // Preallocated space: the log ends here, and only zeros may follow.
            Err(FrameError::Zero) if zeros_from(at) => false,
            Err(FrameError::Zero) => return damage(at, Harm::DataAfterEmpty),
            Err(FrameError::TooLarge(_)) if zeros_from(at + HEADER) => true,
            Err(FrameError::TooLarge(len)) => return damage(at, Harm::TooLarge(len)),
            // Only the last frame may be torn: a crash interrupted its write.
            Err(FrameError::Torn { end, .. }) if zeros_from(at + end) => true,
            Err(FrameError::Torn { .. }) => return damage(at, Harm::Checksum),
        };
        return Ok(Scan { frames, valid: at, torn });
    }
    Ok(Scan { frames, valid: at, torn: false })
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAX: usize = 1 << 20;
    const SAMPLE: [&[u8]; 4] = [b"one", b"second frame", b"3", b"a longer fourth frame, to tear"];

    fn log(payloads: &[&[u8]]) -> Vec<u8> {
        let mut buf = Vec::new();
        for p in payloads {
            encode(p, &mut buf);
        }
        buf
    }

    fn payloads(bytes: &[u8]) -> Result<Vec<Vec<u8>>, Damage> {
        let s = scan(bytes, 0, MAX)?;
        Ok(s.frames.iter().map(|f| f.payload(bytes).to_vec()).collect())
    }

    fn last_dropped() -> Vec<Vec<u8>> {
        SAMPLE[..3].iter().map(|p| p.to_vec()).collect()
    }

    #[test]
    fn frames_round_trip() {
        let bytes = log(&SAMPLE);
        assert_eq!(payloads(&bytes).unwrap(), SAMPLE.map(|p| p.to_vec()));
        let s = scan(&bytes, 0, MAX).unwrap();
        assert_eq!((s.valid, s.torn), (bytes.len(), false));
    }

    #[test]
    fn a_last_frame_cut_anywhere_is_dropped_as_torn() {
        let bytes = log(&SAMPLE);
        let last = bytes.len() - log(&SAMPLE[..3]).len();
        for cut in 1..last {
            let s = scan(&bytes[..bytes.len() - cut], 0, MAX).unwrap();
            assert_eq!(s.frames.len(), 3, "cut {cut}");
            assert_eq!(s.valid, log(&SAMPLE[..3]).len(), "cut {cut}");
            assert!(s.torn, "cut {cut}");
        }
        // Cut exactly at the frame boundary: nothing torn, the cut is invisible.
        let s = scan(&bytes[..bytes.len() - last], 0, MAX).unwrap();
        assert_eq!((s.frames.len(), s.torn), (3, false));
    }

    #[test]
    fn zeros_end_the_log_and_a_torn_frame_before_them_is_dropped() {
        let mut bytes = log(&SAMPLE);
        let full = bytes.len();
        bytes.extend([0u8; 4096]);
        let s = scan(&bytes, 0, MAX).unwrap();
        assert_eq!((s.frames.len(), s.valid, s.torn), (4, full, false));
        // The last payload only partly reached the disk: zeros where the rest should be.
        bytes[full - 1] = 0;
        bytes[full - 2] = 0;
        assert_eq!(payloads(&bytes).unwrap(), last_dropped());
        assert!(scan(&bytes, 0, MAX).unwrap().torn);
    }

    #[test]
    fn a_torn_header_claiming_a_huge_frame_before_zeros_is_a_torn_tail() {
        let mut bytes = log(&SAMPLE[..3]);
        let end = bytes.len();
        bytes.extend((1u32 << 30).to_le_bytes());
        bytes.extend([0u8; 64]);
        let s = scan(&bytes, 0, MAX).unwrap();
        assert_eq!((s.frames.len(), s.valid, s.torn), (3, end, true));
    }

    #[test]
    fn damage_followed_by_data_is_reported_with_its_offset() {
        let mut bytes = log(&SAMPLE);
        bytes[HEADER] ^= 0xff;
        assert_eq!(payloads(&bytes), Err(Damage { offset: 0, what: Harm::Checksum }));
        let mut bytes = log(&SAMPLE);
        bytes[..HEADER + 3].fill(0);
        assert_eq!(payloads(&bytes), Err(Damage { offset: 0, what: Harm::DataAfterEmpty }));
        let mut bytes = log(&SAMPLE);
        let second = log(&SAMPLE[..1]).len();
        bytes[second..second + 4].copy_from_slice(&(1u32 << 30).to_le_bytes());
        assert_eq!(payloads(&bytes), Err(Damage { offset: second, what: Harm::TooLarge(1 << 30) }));
    }

    #[test]
    fn a_scan_starts_after_the_callers_header() {
        let mut bytes = b"HEADER!!".to_vec();
        bytes.extend(log(&SAMPLE));
        let s = scan(&bytes, 8, MAX).unwrap();
        assert_eq!((s.frames.len(), s.frames[0].at, s.valid), (4, 8, bytes.len()));
    }

    #[test]
    fn decode_one_reads_one_intact_frame_only() {
        let bytes = log(&SAMPLE);
        assert_eq!(decode_one(&bytes, MAX).map(|(p, _)| p), Ok(SAMPLE[0]), "bytes after the frame are ignored");
        let first = log(&SAMPLE[..1]);
        assert_eq!(decode_one(&first, MAX), Ok((SAMPLE[0], first.len())));
        for cut in 0..first.len() {
            assert!(decode_one(&first[..cut], MAX).is_err(), "cut to {cut}");
        }
        let mut damaged = first.clone();
        damaged[HEADER] ^= 0xff;
        assert!(matches!(decode_one(&damaged, MAX), Err(FrameError::Torn { cut: false, .. })));
        assert_eq!(decode_one(&[0u8; 64], MAX), Err(FrameError::Zero), "preallocated zeros are not a frame");
        assert_eq!(decode_one(&first, 2), Err(FrameError::TooLarge(3)));
    }
}
