//! Options for clients and acquisitions, and the one duration syntax every tool accepts.

use std::time::Duration;

use crate::{Error, HoldMode, MAX_PERMITS, MAX_VALUE_LEN};

/// Smallest session TTL accepted: below it a keep-alive every TTL/3 cannot survive a loopback hiccup.
pub const MIN_TTL: Duration = Duration::from_millis(100);
/// Largest session TTL accepted: a crashed holder blocks others for at most this long.
pub const MAX_TTL: Duration = Duration::from_secs(3600);
/// TTL used when none is given.
pub const DEFAULT_TTL: Duration = Duration::from_secs(10);
/// Longest lock-delay accepted.
pub const MAX_LOCK_DELAY: Duration = Duration::from_secs(60);
/// Longest explicit owner id accepted, in bytes.
pub const MAX_OWNER_LEN: usize = 128;

/// Checks that `ttl` lies in [`MIN_TTL`]..=[`MAX_TTL`].
///
/// ```
/// use std::time::Duration;
/// assert!(locksmith_core::validate_ttl(Duration::from_secs(10)).is_ok());
/// assert!(locksmith_core::validate_ttl(Duration::ZERO).is_err());
/// ```
///
/// # Errors
/// [`Error::InvalidTtl`] outside the range.
pub fn validate_ttl(ttl: Duration) -> Result<Duration, Error> {
    if ttl < MIN_TTL || ttl > MAX_TTL {
        return Err(Error::InvalidTtl { ttl, min: MIN_TTL, max: MAX_TTL });
    }
    Ok(ttl)
}

/// Parses a duration: a number and a unit, or several run together or spaced (`500ms`,
/// `10s`, `2m`, `1h`, `1m30s`, `1h 15m`, `250us`), as the `humantime` crate reads them.
///
/// ```
/// use std::time::Duration;
/// use locksmith_core::parse_duration;
/// assert_eq!(parse_duration("500ms")?, Duration::from_millis(500));
/// assert_eq!(parse_duration("2m")?, Duration::from_secs(120));
/// assert_eq!(parse_duration("1m30s")?, Duration::from_secs(90));
/// assert_eq!(parse_duration("0s")?, Duration::ZERO);
/// assert!(parse_duration("10").is_err());
/// # Ok::<(), locksmith_core::Error>(())
/// ```
///
/// # Errors
/// [`Error::InvalidArgument`] naming the text as given when it has no unit, an unknown unit or
/// no number.
pub fn parse_duration(text: &str) -> Result<Duration, Error> {
    humantime::parse_duration(text.trim()).map_err(|e| {
        Error::InvalidArgument(format!(
            "{text:?} is not a duration ({e}); write a number and a unit, e.g. 500ms, 10s, 2m, 1m30s"
        ))
    })
}

/// Writes a duration the way people read it: `250µs`, `100ms`, `9.5s`, `1m30s`, `1h`
/// (tenths of a second below a minute, whole seconds above).
///
/// ```
/// use std::time::Duration;
/// use locksmith_core::format_duration;
/// assert_eq!(format_duration(Duration::from_millis(9_498)), "9.4s");
/// assert_eq!(format_duration(Duration::from_millis(100)), "100ms");
/// assert_eq!(format_duration(Duration::from_secs(90)), "1m30s");
/// assert_eq!(format_duration(Duration::from_secs(3600)), "1h");
/// assert_eq!(format_duration(Duration::ZERO), "0s");
/// ```
pub fn format_duration(d: Duration) -> String {
    if d.is_zero() {
        return "0s".into();
    }
    if d < Duration::from_millis(1) {
        return format!("{}µs", d.as_micros());
    }
    if d < Duration::from_secs(1) {
        return format!("{}ms", d.as_millis());
    }
    if d < Duration::from_secs(60) {
        let tenths = d.as_millis() / 100;
        return match tenths % 10 {
            0 => format!("{}s", tenths / 10),
            t => format!("{}.{t}s", tenths / 10),
        };
    }
    let secs = d.as_secs();
    let mut out = String::new();
    for (n, unit) in [(secs / 3600, "h"), (secs / 60 % 60, "m"), (secs % 60, "s")] {
        if n > 0 {
            out.push_str(&format!("{n}{unit}"));
        }
    }
    out
}

/// How one acquisition behaves.
///
/// ```
/// use std::time::Duration;
/// use locksmith_core::LockOptions;
/// let opts = LockOptions::new().timeout(Duration::from_secs(5)).owner("job-42");
/// assert_eq!(opts.owner_id(), Some("job-42"));
/// ```
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct LockOptions {
    pub(crate) timeout: Option<Duration>,
    pub(crate) owner: Option<String>,
    pub(crate) lock_delay: Option<Duration>,
    pub(crate) allow_unfenced: bool,
    pub(crate) mode: HoldMode,
    pub(crate) value: Option<String>,
}

impl LockOptions {
    /// Defaults: wait forever, anonymous owner (not reentrant), no lock-delay.
    pub fn new() -> Self {
        Self::default()
    }

    /// Give up waiting after `timeout` with [`Error::Timeout`].
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Acquire as `owner`: a second acquisition of the same lock by the same owner on the same
    /// client succeeds at once and must be released as many times (reentrancy is opt-in and is
    /// never tied to a thread or task). The re-entry must ask for the same kind of hold and value
    /// as the hold it shares: another one (a write lock over a held read lock, another number of
    /// permits, another proposal) is refused with [`Error::InvalidArgument`].
    pub fn owner(mut self, owner: impl Into<String>) -> Self {
        self.owner = Some(owner.into());
        self
    }

    /// After this holder's session expires (not after a clean release), keep the lock
    /// unavailable for `delay`, for resources that do not check fencing tokens. Backends that
    /// cannot do this ignore it.
    pub fn lock_delay(mut self, delay: Duration) -> Self {
        self.lock_delay = Some(delay);
        self
    }

    /// Accept a hold without a safe fencing token on backends that cannot give one (Redlock).
    /// Without this, such backends refuse with [`Error::Unfenced`], so nobody relies on a token
    /// that only looks safe.
    pub fn allow_unfenced(mut self) -> Self {
        self.allow_unfenced = true;
        self
    }

    /// Acquire a read lock: many readers may hold the name at once, never together with a
    /// writer (an ordinary, exclusive acquisition of the same name). Waiters are served in
    /// arrival order, so a waiting writer is not starved by readers that keep coming.
    ///
    /// ```
    /// use locksmith_core::{HoldMode, LockOptions};
    /// assert_eq!(LockOptions::new().shared().mode(), HoldMode::Shared);
    /// ```
    pub fn shared(mut self) -> Self {
        self.mode = HoldMode::Shared;
        self
    }

    /// Acquire one of `permits` permits of a semaphore named like a lock: at most `permits`
    /// holders at a time, each with its own lease (a crashed holder's permit comes back when its
    /// session expires) and its own fencing token. Everyone using the name must ask for the same
    /// number while it is in use; a different number is refused.
    ///
    /// ```
    /// use locksmith_core::{HoldMode, LockOptions};
    /// assert_eq!(LockOptions::new().permits(3).mode(), HoldMode::Permit(3));
    /// ```
    pub fn permits(mut self, permits: u32) -> Self {
        self.mode = HoldMode::Permit(permits);
        self
    }

    /// Attach `value` to the hold, for others to read in `status` and observe: an election's
    /// proposal (who the leader is, where to reach it). At most 1,024 bytes.
    pub fn value(mut self, value: impl Into<String>) -> Self {
        self.value = Some(value.into());
        self
    }

    /// The kind of hold asked for.
    pub fn mode(&self) -> HoldMode {
        self.mode
    }

    /// The explicit owner id, if any.
    pub fn owner_id(&self) -> Option<&str> {
        self.owner.as_deref()
    }

    pub(crate) fn validate(&self) -> Result<(), Error> {
        if let Some(owner) = &self.owner {
            if owner.is_empty() || owner.len() > MAX_OWNER_LEN || owner.chars().any(char::is_control) {
                return Err(Error::InvalidArgument(format!(
                    "owner id must be 1..={MAX_OWNER_LEN} bytes without control characters"
                )));
            }
        }
        if let Some(d) = self.lock_delay {
            if d > MAX_LOCK_DELAY {
                return Err(Error::InvalidArgument(format!(
                    "lock delay {d:?} is above the maximum {MAX_LOCK_DELAY:?}"
                )));
            }
            if self.mode != HoldMode::Exclusive && !d.is_zero() {
                return Err(Error::InvalidArgument(format!(
                    "a lock-delay applies to exclusive holds only, not to a {} hold",
                    self.mode
                )));
            }
        }
        if let HoldMode::Permit(n) = self.mode {
            if n == 0 || n > MAX_PERMITS {
                return Err(Error::InvalidArgument(format!("a semaphore has 1..={MAX_PERMITS} permits, not {n}")));
            }
        }
        if let Some(v) = &self.value {
            if v.len() > MAX_VALUE_LEN || v.contains('\0') {
                return Err(Error::InvalidArgument(format!(
                    "a hold's value is at most {MAX_VALUE_LEN} bytes without NUL characters"
                )));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_need_a_known_unit() {
        assert_eq!(parse_duration("10s").ok(), Some(Duration::from_secs(10)));
        assert_eq!(parse_duration("1h").ok(), Some(Duration::from_secs(3600)));
        assert_eq!(parse_duration("1m30s").ok(), Some(Duration::from_secs(90)));
        assert_eq!(parse_duration("1.5s").ok(), Some(Duration::from_millis(1500)));
        for bad in ["", "s", "10", "10x", "-1s", "1m30", "99999999999999999999999s"] {
            assert!(parse_duration(bad).is_err(), "{bad:?} should be rejected");
        }
    }

    #[test]
    fn ttl_outside_the_documented_range_is_rejected() {
        assert!(validate_ttl(Duration::ZERO).is_err());
        assert!(validate_ttl(MAX_TTL + Duration::from_millis(1)).is_err());
        assert!(validate_ttl(MIN_TTL).is_ok());
    }

    #[test]
    fn semaphores_read_locks_and_values_are_checked() {
        assert!(LockOptions::new().permits(0).validate().is_err());
        assert!(LockOptions::new().permits(MAX_PERMITS + 1).validate().is_err());
        assert!(LockOptions::new().permits(3).validate().is_ok());
        let delayed = |o: LockOptions| o.lock_delay(Duration::from_secs(1)).validate();
        assert!(delayed(LockOptions::new().shared()).is_err(), "a lock-delay is for exclusive holds only");
        assert!(delayed(LockOptions::new().permits(2)).is_err());
        assert!(delayed(LockOptions::new()).is_ok());
        assert!(LockOptions::new().value("x".repeat(MAX_VALUE_LEN)).validate().is_ok());
        assert!(LockOptions::new().value("x".repeat(MAX_VALUE_LEN + 1)).validate().is_err());
        assert!(LockOptions::new().value("a\0b").validate().is_err());
    }

    #[test]
    fn owner_ids_are_checked() {
        assert!(LockOptions::new().owner("").validate().is_err());
        assert!(LockOptions::new().owner("a\nb").validate().is_err());
        assert!(LockOptions::new().owner("x".repeat(129)).validate().is_err());
        assert!(LockOptions::new().owner("worker-1").validate().is_ok());
    }
}
