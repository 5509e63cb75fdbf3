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
    /// The kind of hold as the native protocol carries it, `(shared, permits)`: both unset for
    /// the exclusive hold.
    ///
    /// ```
    /// use locksmith_core::HoldMode;
    /// assert_eq!(HoldMode::Exclusive.to_wire(), (false, 0));
    /// assert_eq!(HoldMode::Shared.to_wire(), (true, 0));
    /// assert_eq!(HoldMode::Permit(3).to_wire(), (false, 3));
    /// ```
    pub fn to_wire(self) -> (bool, u32) {
        match self {
            HoldMode::Exclusive => (false, 0),
            HoldMode::Shared => (true, 0),
            HoldMode::Permit(n) => (false, n),
        }
    }

    /// The kind of hold a `(shared, permits)` pair of the native protocol says, or why it says
    /// none. Strict: a server refuses what this refuses; a client reading a status may choose to
    /// be lenient with the error.
    ///
    /// ```
    /// use locksmith_core::{HoldMode, WireModeError, MAX_PERMITS};
    /// assert_eq!(HoldMode::from_wire(false, 0), Ok(HoldMode::Exclusive));
    /// assert_eq!(HoldMode::from_wire(true, 0), Ok(HoldMode::Shared));
    /// assert_eq!(HoldMode::from_wire(false, 3), Ok(HoldMode::Permit(3)));
    /// assert_eq!(HoldMode::from_wire(true, 3), Err(WireModeError::SharedPermit));
    /// assert_eq!(HoldMode::from_wire(false, MAX_PERMITS + 1), Err(WireModeError::TooManyPermits(MAX_PERMITS + 1)));
    /// ```
    ///
    /// # Errors
    /// [`WireModeError`] when both are set, or for more than [`MAX_PERMITS`] permits.
    pub fn from_wire(shared: bool, permits: u32) -> Result<HoldMode, WireModeError> {
        match (shared, permits) {
            (false, 0) => Ok(HoldMode::Exclusive),
            (true, 0) => Ok(HoldMode::Shared),
            (false, n) if n <= MAX_PERMITS => Ok(HoldMode::Permit(n)),
            (false, n) => Err(WireModeError::TooManyPermits(n)),
            (true, _) => Err(WireModeError::SharedPermit),
        }
    }
}

/// Why a `(shared, permits)` pair of the native protocol names no kind of hold
/// ([`HoldMode::from_wire`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum WireModeError {
    /// Both a shared hold and a number of permits were asked for.
    #[error("a hold is either shared or a permit, not both")]
    SharedPermit,
    /// More permits than [`MAX_PERMITS`].
    #[error("a semaphore has at most {MAX_PERMITS} permits, not {0}")]
    TooManyPermits(u32),
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
