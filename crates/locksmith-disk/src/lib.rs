//! Durable files, written once for every log of locksmith: the server's write-ahead log and
//! token floor, and a cluster node's Raft log, vote and snapshots.
//!
//! "Never repeat a fencing token, never lose an acknowledged entry" rests on four small pieces:
//! - [`frame`]: `len | crc32 | payload` frames and the one rule that tells a torn last write
//!   (dropped) from damage (reported, never skipped);
//! - [`AppendFile`]: a file appended to inside preallocated space, so that `fdatasync` need not
//!   write the inode, falling back to plain growth where the file system or the free space
//!   does not allow preallocation;
//! - [`install`]: a whole file put in place atomically (tmp, fsync, rename, directory fsync);
//! - [`TwoSlotFile`]: a small record kept in two checksummed slots, so that a torn write always
//!   leaves the previous one readable.
//!
//! The crate knows nothing of what the bytes mean: record encodings, file headers and what a
//! damaged file means for the program stay with each user.
//!
//! ```
//! let mut buf = Vec::new();
//! locksmith_disk::frame::encode(b"grant", &mut buf);
//! let scan = locksmith_disk::frame::scan(&buf, 0, 1024).unwrap();
//! assert_eq!(scan.frames[0].payload(&buf), b"grant");
//! ```

pub mod frame;

mod append;
mod install;
mod space;
mod two_slot;

pub use append::AppendFile;
pub use install::{install, sync_dir};
pub use space::{is_no_space, preallocate};
pub use two_slot::{Body, Newest, SlotFormat, TwoSlotFile, SLOT};
