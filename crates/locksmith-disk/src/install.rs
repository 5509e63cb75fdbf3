//! Putting a whole file in place atomically.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;

use crate::space::preallocate_if_room;

/// Makes `bytes` the content of `dir/name`, atomically and durably: written to `dir/name.tmp`,
/// synced, renamed over `dir/name`, and the directory synced. A crash leaves either the old
/// file or the new one, whole.
///
/// With `room` above zero the new file is preallocated `room` bytes beyond `bytes` (for a log
/// that is appended to next), if the space is there: where it is not, the file holds `bytes`
/// only, so installing never needs more free space than `bytes` themselves (the old file's
/// space comes back at the rename). Returns the new file, open for reading and writing, and
/// how many bytes of it are allocated.
///
/// # Errors
/// I/O errors (no space left included: [`is_no_space`](crate::is_no_space)). The old file is
/// then still in place and the temporary one removed.
///
/// ```
/// let dir = tempfile::tempdir().unwrap();
/// locksmith_disk::install(dir.path(), "state", b"v1", 0).unwrap();
/// let (_file, allocated) = locksmith_disk::install(dir.path(), "state", b"v2", 0).unwrap();
/// assert_eq!((std::fs::read(dir.path().join("state")).unwrap(), allocated), (b"v2".to_vec(), 2));
/// assert!(!dir.path().join("state.tmp").exists());
/// ```
pub fn install(dir: &Path, name: &str, bytes: &[u8], room: u64) -> io::Result<(File, u64)> {
    let tmp = dir.join(format!("{name}.tmp"));
    let written = (|| {
        let f = OpenOptions::new().create(true).read(true).write(true).truncate(true).open(&tmp)?;
        let len = bytes.len() as u64;
        let allocated = if room > 0 && preallocate_if_room(&f, 0, len + room)? { len + room } else { len };
        f.write_all_at(bytes, 0)?;
        f.sync_all()?;
        std::fs::rename(&tmp, dir.join(name))?;
        Ok((f, allocated))
    })();
    let (f, allocated) = match written {
        Ok(done) => done,
        Err(e) => {
            // Best effort: the error that matters is the write's, and a leftover is truncated
            // by the next install anyway.
            let _ = std::fs::remove_file(&tmp);
            return Err(e);
        }
    };
    sync_dir(dir)?;
    Ok((f, allocated))
}

/// Syncs the directory `dir`, so that the entries created or renamed in it survive a crash.
///
/// # Errors
/// I/O errors.
///
/// ```
/// let dir = tempfile::tempdir().unwrap();
/// std::fs::write(dir.path().join("new"), b"x").unwrap();
/// locksmith_disk::sync_dir(dir.path()).unwrap();
/// ```
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_installed_log_is_preallocated_beyond_its_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let (f, allocated) = install(dir.path(), "log", b"header", 4096).unwrap();
        assert_eq!((allocated, f.metadata().unwrap().len()), (4102, 4102));
        let bytes = std::fs::read(dir.path().join("log")).unwrap();
        assert!(bytes.starts_with(b"header") && bytes[6..].iter().all(|b| *b == 0));
    }

    #[test]
    fn a_failed_install_leaves_the_old_file_and_no_temporary() {
        let dir = tempfile::tempdir().unwrap();
        install(dir.path(), "state", b"old", 0).unwrap();
        // The rename cannot replace a directory: the install fails after writing the tmp file.
        std::fs::create_dir(dir.path().join("other")).unwrap();
        std::fs::write(dir.path().join("other").join("x"), b"keep").unwrap();
        assert!(install(dir.path(), "other", b"new", 0).is_err());
        assert_eq!(std::fs::read(dir.path().join("state")).unwrap(), b"old");
        assert_eq!(std::fs::read(dir.path().join("other").join("x")).unwrap(), b"keep");
        assert!(!dir.path().join("other.tmp").exists());
    }
}
