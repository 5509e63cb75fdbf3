//! What kind of hold an acquisition asks for: the mutex, a read (shared) lock, or one permit of
//! a semaphore. One engine serves them all (DESIGN.md §4b): leases, renewal, the loss signal,
//! owner-checked release, cancel safety and a fencing token per grant are the same for each.

use std::fmt;

/// Most permits a semaphore may have.
pub const MAX_PERMITS: u32 = 10_000;

/// Longest value (an election's proposal) carried by a hold, in bytes.
pub const MAX_VALUE_LEN: usize = 1024;

/// The kind of hold.
///
/// On one lock name, exclusive and shared holds form a read/write lock (many readers or one
/// writer); a semaphore's name takes only permits, all with the same number of permits while
/// anyone holds or waits for one. A waiting writer is never starved by readers that keep
/// coming: most backends serve waiters first come, first served whatever their kind (a writer
/// queued behind readers gets in before readers that arrive after it); the SQL backends, whose
/// waiters poll, give waiting writers preference instead (each driver's docs say which).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum HoldMode {
    /// The mutex, or the writer of a read/write lock: nobody else holds the name.
    #[default]
    Exclusive,
    /// A reader of a read/write lock: other readers may hold the name at the same time, no
    /// writer.
    Shared,
    /// One of `n` permits of a semaphore: at most `n` holders at a time.
    Permit(u32),
}

impl HoldMode {
    /// Short name for messages and status: `exclusive`, `shared`, `permit of N`.
    pub fn describe(&self) -> String {
        self.to_string()
    }
}

impl fmt::Display for HoldMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HoldMode::Exclusive => f.write_str("exclusive"),
            HoldMode::Shared => f.write_str("shared"),
            HoldMode::Permit(n) => write!(f, "permit of {n}"),
        }
    }
}
