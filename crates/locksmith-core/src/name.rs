//! Lock names: validated once, at the edge, so no backend ever sees a bad one.

use std::fmt;

use crate::Error;

/// Longest lock name accepted, in bytes (DESIGN.md §1).
pub const MAX_NAME_LEN: usize = 256;

/// A validated lock name: UTF-8, 1..=256 bytes, no control characters.
///
/// ```
/// use locksmith_core::LockName;
/// let name = LockName::new("nightly-report")?;
/// assert_eq!(name.as_str(), "nightly-report");
/// assert!(LockName::new("").is_err());
/// assert!(LockName::new("bad\nname").is_err());
/// # Ok::<(), locksmith_core::Error>(())
/// ```
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LockName(String);

impl LockName {
    /// Validates `name`.
    ///
    /// # Errors
    /// [`Error::InvalidName`] when the name is empty, longer than [`MAX_NAME_LEN`] bytes, or
    /// contains a control character.
    pub fn new(name: impl Into<String>) -> Result<Self, Error> {
        let name = name.into();
        if name.is_empty() {
            return Err(Error::InvalidName("lock name is empty".into()));
        }
        if name.len() > MAX_NAME_LEN {
            return Err(Error::InvalidName(format!(
                "lock name is {} bytes, the maximum is {MAX_NAME_LEN}",
                name.len()
            )));
        }
        if let Some(c) = name.chars().find(|c| c.is_control()) {
            return Err(Error::InvalidName(format!("lock name contains the control character {:?}", c)));
        }
        Ok(Self(name))
    }

    /// The name as a string slice.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for LockName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for LockName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

impl TryFrom<&str> for LockName {
    type Error = Error;
    fn try_from(value: &str) -> Result<Self, Error> {
        Self::new(value)
    }
}

impl TryFrom<String> for LockName {
    type Error = Error;
    fn try_from(value: String) -> Result<Self, Error> {
        Self::new(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_the_longest_allowed_name() {
        assert!(LockName::new("x".repeat(MAX_NAME_LEN)).is_ok());
    }

    #[test]
    fn rejects_oversized_empty_and_control_character_names() {
        assert!(matches!(LockName::new("x".repeat(MAX_NAME_LEN + 1)), Err(Error::InvalidName(_))));
        assert!(matches!(LockName::new(""), Err(Error::InvalidName(_))));
        assert!(matches!(LockName::new("a\u{7f}b"), Err(Error::InvalidName(_))));
        assert!(matches!(LockName::new("a\0b"), Err(Error::InvalidName(_))));
    }

    #[test]
    fn accepts_unicode_and_slashes() {
        assert!(LockName::new("jobs/ünïcode/☃").is_ok());
    }
}
