//! Disk space: reserving it ahead of appends, and recognising that there is none left.

use std::fs::File;
use std::io;

/// Allocates `len` bytes of `file` from `offset` (zeros, extending its size), so that later
/// writes there neither grow the file nor wait for block allocation.
///
/// On a file system without `fallocate` the size is set instead (writes then allocate blocks
/// themselves, and their `fdatasync` costs a little more).
///
/// # Errors
/// I/O errors; no space left is recognised by [`is_no_space`].
///
/// ```
/// let file = tempfile::tempfile().unwrap();
/// locksmith_disk::preallocate(&file, 0, 4096).unwrap();
/// assert_eq!(file.metadata().unwrap().len(), 4096);
/// ```
pub fn preallocate(file: &File, offset: u64, len: u64) -> io::Result<()> {
    let off = i64::try_from(offset).map_err(io::Error::other)?;
    let len = i64::try_from(len).map_err(io::Error::other)?;
    match nix::fcntl::posix_fallocate(file, off, len) {
        Ok(()) => Ok(()),
        // Filesystems without fallocate: a plain size change still works (just slower syncs).
        Err(nix::errno::Errno::EOPNOTSUPP) | Err(nix::errno::Errno::EINVAL) => file.set_len((off + len) as u64),
        Err(e) => Err(io::Error::from(e)),
    }
}

/// Whether `err` says the file system (or the process's file size limit, or a quota) has no
/// room for what was written: `ENOSPC`, `EDQUOT` or `EFBIG`.
///
/// ```
/// let full = std::io::Error::from_raw_os_error(28); // ENOSPC
/// assert!(locksmith_disk::is_no_space(&full));
/// assert!(!locksmith_disk::is_no_space(&std::io::Error::other("boom")));
/// ```
pub fn is_no_space(err: &io::Error) -> bool {
    use nix::errno::Errno;
    let no_space = [Errno::ENOSPC, Errno::EDQUOT, Errno::EFBIG];
    err.raw_os_error().is_some_and(|code| no_space.iter().any(|e| *e as i32 == code))
        || matches!(err.kind(), io::ErrorKind::StorageFull | io::ErrorKind::QuotaExceeded | io::ErrorKind::FileTooLarge)
}

/// Preallocates like [`preallocate`], but where there is no room for it, allocates nothing
/// and says so (`Ok(false)`): the writes that follow then grow the file themselves and fail
/// only if their own bytes do not fit.
pub(crate) fn preallocate_if_room(file: &File, offset: u64, len: u64) -> io::Result<bool> {
    match preallocate(file, offset, len) {
        Ok(()) => Ok(true),
        Err(e) if is_no_space(&e) => Ok(false),
        Err(e) => Err(e),
    }
}
