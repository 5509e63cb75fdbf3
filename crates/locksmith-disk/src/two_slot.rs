//! A small record kept in two checksummed slots.
//!
//! Layout: two [`SLOT`]-byte slots, each `magic (8) | seq (8) | body | crc32 of everything
//! before (4)`, little endian; the body is of a fixed length or `len: u32 | payload`
//! ([`Body`]). A write goes to the slot that does not hold the newest synced record, so a torn
//! write always leaves that one intact; on reading, the valid slot with the higher `seq` wins.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

/// Bytes per slot; the second slot starts at this offset.
pub const SLOT: u64 = 4096;
/// Magic and sequence number.
const HEAD: usize = 16;
const CRC: usize = 4;

/// What a slot's body looks like.
///
/// ```
/// let body = locksmith_disk::Body::Fixed(24);
/// assert_ne!(body, locksmith_disk::Body::Prefixed);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Body {
    /// Always this many bytes.
    Fixed(usize),
    /// A `u32 LE` length, then that many bytes (at most what fits the slot).
    Prefixed,
}

/// The format of a two-slot file: its magic and its body.
///
/// ```
/// let format = locksmith_disk::SlotFormat { magic: *b"EXAMPLE1", body: locksmith_disk::Body::Prefixed };
/// assert_eq!(format.max_body(), 4096 - 16 - 4 - 4);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlotFormat {
    /// The first 8 bytes of a slot.
    pub magic: [u8; 8],
    /// The body's shape.
    pub body: Body,
}

impl SlotFormat {
    /// The longest body that fits a slot.
    ///
    /// ```
    /// let format = locksmith_disk::SlotFormat { magic: *b"EXAMPLE1", body: locksmith_disk::Body::Fixed(24) };
    /// assert_eq!(format.max_body(), 24);
    /// ```
    pub fn max_body(&self) -> usize {
        match self.body {
            Body::Fixed(n) => n,
            Body::Prefixed => SLOT as usize - HEAD - 4 - CRC,
        }
    }

    fn encode(&self, seq: u64, body: &[u8]) -> io::Result<Vec<u8>> {
        let fits = match self.body {
            Body::Fixed(n) => body.len() == n,
            Body::Prefixed => body.len() <= self.max_body(),
        };
        if !fits {
            return Err(io::Error::other(format!("a record of {} bytes does not fit its slot", body.len())));
        }
        let mut buf = Vec::with_capacity(HEAD + 4 + body.len() + CRC);
        buf.extend_from_slice(&self.magic);
        buf.extend_from_slice(&seq.to_le_bytes());
        if self.body == Body::Prefixed {
            buf.extend_from_slice(&(body.len() as u32).to_le_bytes());
        }
        buf.extend_from_slice(body);
        let crc = crc32fast::hash(&buf);
        buf.extend_from_slice(&crc.to_le_bytes());
        Ok(buf)
    }

    /// The sequence number and body of a slot's bytes, if they check out.
    fn decode<'a>(&self, buf: &'a [u8]) -> Option<(u64, &'a [u8])> {
        if buf.get(..8)? != self.magic {
            return None;
        }
        let seq = u64::from_le_bytes(buf.get(8..HEAD)?.try_into().ok()?);
        let (start, len) = match self.body {
            Body::Fixed(n) => (HEAD, n),
            Body::Prefixed => (HEAD + 4, u32::from_le_bytes(buf.get(HEAD..HEAD + 4)?.try_into().ok()?) as usize),
        };
        if len > self.max_body() {
            return None;
        }
        let end = start + len;
        let crc = u32::from_le_bytes(buf.get(end..end + CRC)?.try_into().ok()?);
        (crc32fast::hash(&buf[..end]) == crc).then(|| (seq, &buf[start..end]))
    }
}

/// The record [`read_newest`](TwoSlotFile::read_newest) found.
///
/// ```
/// let newest = locksmith_disk::Newest { seq: 3, slot: 1, value: "state" };
/// assert_eq!(newest.slot, 1);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Newest<T> {
    /// Its sequence number.
    pub seq: u64,
    /// The slot it is in (0 or 1).
    pub slot: u64,
    /// Its body, as the caller decoded it.
    pub value: T,
}

/// An open two-slot file (see the module docs of the crate).
///
/// ```
/// use locksmith_disk::{Body, SlotFormat, TwoSlotFile};
/// let dir = tempfile::tempdir().unwrap();
/// let path = dir.path().join("state");
/// let format = SlotFormat { magic: *b"EXAMPLE1", body: Body::Fixed(8) };
/// let file = std::fs::OpenOptions::new().create(true).read(true).write(true).open(&path).unwrap();
/// let mut slots = TwoSlotFile::new(file, format, 0, 1);
/// slots.write(&41u64.to_le_bytes(), true).unwrap();
/// slots.write(&42u64.to_le_bytes(), true).unwrap();
///
/// let file = std::fs::File::open(&path).unwrap();
/// let newest = TwoSlotFile::read_newest(&file, &format, |b| Some(b.to_vec())).unwrap().unwrap();
/// assert_eq!((newest.seq, newest.value), (2, 42u64.to_le_bytes().to_vec()));
/// ```
#[derive(Debug)]
pub struct TwoSlotFile {
    file: File,
    format: SlotFormat,
    /// Sequence number of the newest write.
    seq: u64,
    /// The slot holding the newest synced record; writes go to the other one.
    synced_slot: u64,
}

impl TwoSlotFile {
    /// Writes to `file` (open for writing) in `format`; its newest record has sequence number
    /// `seq` and, synced, is in `synced_slot`, so the next write goes to the other slot. A new
    /// file: `seq` 0 and the slot the first write should not go to.
    ///
    /// ```
    /// use locksmith_disk::{Body, SlotFormat, TwoSlotFile};
    /// let format = SlotFormat { magic: *b"EXAMPLE1", body: Body::Prefixed };
    /// let slots = TwoSlotFile::new(tempfile::tempfile().unwrap(), format, 0, 1);
    /// assert_eq!(slots.seq(), 0);
    /// ```
    pub fn new(file: File, format: SlotFormat, seq: u64, synced_slot: u64) -> Self {
        Self { file, format, seq, synced_slot: synced_slot % 2 }
    }

    /// The newest record of `file` whose slot checks out and whose body `decode` accepts;
    /// `None` when neither does.
    ///
    /// # Errors
    /// I/O errors (a file shorter than two slots is not one).
    ///
    /// ```
    /// use locksmith_disk::{Body, SlotFormat, TwoSlotFile};
    /// let format = SlotFormat { magic: *b"EXAMPLE1", body: Body::Prefixed };
    /// let garbage = tempfile::tempfile().unwrap();
    /// std::io::Write::write_all(&mut &garbage, &[7u8; 8192]).unwrap();
    /// assert_eq!(TwoSlotFile::read_newest(&garbage, &format, |b| Some(b.len())).unwrap(), None);
    /// ```
    pub fn read_newest<T>(
        file: &File,
        format: &SlotFormat,
        mut decode: impl FnMut(&[u8]) -> Option<T>,
    ) -> io::Result<Option<Newest<T>>> {
        let mut best: Option<Newest<T>> = None;
        for slot in 0..2 {
            let mut buf = vec![0u8; SLOT as usize];
            let n = read_up_to(file, &mut buf, slot * SLOT)?;
            let Some((seq, body)) = format.decode(&buf[..n]) else { continue };
            if best.as_ref().is_some_and(|b| b.seq >= seq) {
                continue;
            }
            if let Some(value) = decode(body) {
                best = Some(Newest { seq, slot, value });
            }
        }
        Ok(best)
    }

    /// Writes `body` as the newest record into the slot not holding the last synced one, and
    /// with `sync` syncs it, which makes that slot the one kept. Unsynced writes, however many,
    /// all go to the same slot, so the last synced record stays readable whatever happens to
    /// them.
    ///
    /// # Errors
    /// A body that does not fit the format; I/O errors (the record must not be relied on then).
    ///
    /// ```
    /// use locksmith_disk::{Body, SlotFormat, TwoSlotFile};
    /// let format = SlotFormat { magic: *b"EXAMPLE1", body: Body::Fixed(1) };
    /// let mut slots = TwoSlotFile::new(tempfile::tempfile().unwrap(), format, 0, 1);
    /// slots.write(b"a", true).unwrap();
    /// assert!(slots.write(b"too long", true).is_err());
    /// ```
    pub fn write(&mut self, body: &[u8], sync: bool) -> io::Result<()> {
        let slot = 1 - self.synced_slot;
        let buf = self.format.encode(self.seq + 1, body)?;
        self.file.write_all_at(&buf, slot * SLOT)?;
        self.seq += 1;
        if sync {
            self.file.sync_data()?;
            self.synced_slot = slot;
        }
        Ok(())
    }

    /// Sequence number of the newest write.
    ///
    /// ```
    /// use locksmith_disk::{Body, SlotFormat, TwoSlotFile};
    /// let format = SlotFormat { magic: *b"EXAMPLE1", body: Body::Fixed(1) };
    /// let mut slots = TwoSlotFile::new(tempfile::tempfile().unwrap(), format, 5, 1);
    /// slots.write(b"a", false).unwrap();
    /// assert_eq!(slots.seq(), 6);
    /// ```
    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// The file (to sync it, or for tests that tear a write).
    ///
    /// ```
    /// use locksmith_disk::{Body, SlotFormat, TwoSlotFile};
    /// let format = SlotFormat { magic: *b"EXAMPLE1", body: Body::Fixed(1) };
    /// let slots = TwoSlotFile::new(tempfile::tempfile().unwrap(), format, 0, 1);
    /// slots.file().sync_data().unwrap();
    /// ```
    pub fn file(&self) -> &File {
        &self.file
    }

    /// The slot the next write goes to.
    #[cfg(test)]
    fn next_slot(&self) -> u64 {
        1 - self.synced_slot
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

#[cfg(test)]
mod tests {
    use std::fs::OpenOptions;

    use super::*;

    const FIXED: SlotFormat = SlotFormat { magic: *b"TESTFIX1", body: Body::Fixed(8) };
    const PREFIXED: SlotFormat = SlotFormat { magic: *b"TESTPRE1", body: Body::Prefixed };

    fn open(path: &std::path::Path) -> File {
        OpenOptions::new().create(true).truncate(false).read(true).write(true).open(path).unwrap()
    }

    fn newest(path: &std::path::Path, format: &SlotFormat) -> Option<(u64, Vec<u8>)> {
        TwoSlotFile::read_newest(&open(path), format, |b| Some(b.to_vec())).unwrap().map(|n| (n.seq, n.value))
    }

    #[test]
    fn the_newest_write_wins_and_survives_a_torn_write_of_the_next() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state");
        assert_eq!(newest(&path, &FIXED), None);
        let mut t = TwoSlotFile::new(open(&path), FIXED, 0, 0);
        t.write(&1024u64.to_le_bytes(), true).unwrap();
        t.write(&2048u64.to_le_bytes(), true).unwrap();
        assert_eq!(newest(&path, &FIXED), Some((2, 2048u64.to_le_bytes().to_vec())));
        // The next write is torn: its slot holds garbage; the previous record still reads.
        t.file().write_all_at(&[0xAB; 20], t.next_slot() * SLOT).unwrap();
        assert_eq!(newest(&path, &FIXED), Some((2, 2048u64.to_le_bytes().to_vec())));
    }

    #[test]
    fn torn_unsynced_writes_never_lose_the_last_synced_record() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state");
        let mut m = TwoSlotFile::new(open(&path), PREFIXED, 0, 1);
        m.write(b"vote 5", true).unwrap();
        let kept = m.synced_slot;
        for i in 0..3u8 {
            m.write(&[b'c', i], false).unwrap();
        }
        assert_eq!(m.next_slot(), 1 - kept, "unsynced writes all go to the other slot");
        m.file().write_all_at(&[0xAB; 30], (1 - kept) * SLOT).unwrap();
        assert_eq!(newest(&path, &PREFIXED), Some((1, b"vote 5".to_vec())));
    }

    #[test]
    fn a_body_the_caller_rejects_falls_back_to_the_other_slot() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state");
        let mut m = TwoSlotFile::new(open(&path), PREFIXED, 0, 1);
        m.write(b"good", true).unwrap();
        m.write(b"bad!", true).unwrap();
        let read = TwoSlotFile::read_newest(&open(&path), &PREFIXED, |b| (b != b"bad!").then(|| b.to_vec()));
        assert_eq!(read.unwrap().map(|n| n.value), Some(b"good".to_vec()));
    }

    #[test]
    fn a_file_with_no_valid_slot_reads_as_none() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state");
        std::fs::write(&path, vec![7u8; 8192]).unwrap();
        assert_eq!(newest(&path, &FIXED), None);
        std::fs::write(&path, b"").unwrap();
        assert_eq!(newest(&path, &PREFIXED), None);
        // A slot of another format does not check out either.
        let mut other = TwoSlotFile::new(open(&path), PREFIXED, 0, 1);
        other.write(b"12345678", true).unwrap();
        assert_eq!(newest(&path, &FIXED), None);
    }

    #[test]
    fn a_body_too_large_for_the_slot_is_refused() {
        let mut m = TwoSlotFile::new(tempfile::tempfile().unwrap(), PREFIXED, 0, 1);
        assert!(m.write(&vec![0u8; PREFIXED.max_body() + 1], true).is_err());
        m.write(&vec![0u8; PREFIXED.max_body()], true).unwrap();
    }
}
