//! The machine's typed commands: what a decoded client request becomes once its stream's
//! session and message id are known. Names and owners arrive validated, so the machine never
//! sees a malformed one and never validates twice.

use std::fmt;
use std::time::Duration;

use locksmith_core::{HoldMode, LockName};

use super::SessionId;

/// Acquire `name` for `(session, owner)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Acquire {
    /// The session asking.
    pub session: SessionId,
    /// The message id: a queued acquire is known by `(session, request)` (its grant is pushed
    /// with this id, and `cancel` names it).
    pub request: u64,
    /// The lock.
    pub name: LockName,
    /// Who holds it within the session; the same `(session, owner)` acquiring again is a no-op
    /// that returns the same token.
    pub owner: Owner,
    /// Queue (FIFO) when the lock is not free, instead of answering busy.
    pub wait: bool,
    /// Lock-delay to apply if the session expires while holding (exclusive holds only).
    pub lock_delay: Duration,
    /// The kind of hold: exclusive, shared (a reader), or one permit of a semaphore.
    pub mode: HoldMode,
    /// A value others see with the hold (an election's proposal).
    pub value: Option<String>,
}

impl Acquire {
    /// An exclusive acquire of `name` by `(session, owner)` as message `request`, waiting or
    /// not, without lock-delay or value.
    pub fn exclusive(session: SessionId, request: u64, name: LockName, owner: Owner, wait: bool) -> Self {
        Self { session, request, name, owner, wait, lock_delay: Duration::ZERO, mode: HoldMode::Exclusive, value: None }
    }
}

/// Release the hold `(session, owner, token)` on `name`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Release {
    /// The session holding.
    pub session: SessionId,
    /// The lock.
    pub name: LockName,
    /// The owner within the session.
    pub owner: Owner,
    /// The hold's fencing token.
    pub token: u64,
}

/// An owner id: not empty, no control characters (the character rules of lock names and of
/// `locksmith_core::LockOptions::owner`). Its length is a server limit
/// ([`Limits::max_owner_len`](super::Limits::max_owner_len)), checked by the machine.
///
/// ```
/// use locksmith_server::machine::Owner;
/// assert_eq!(Owner::new("host/4242/0badcafe-1")?.as_str(), "host/4242/0badcafe-1");
/// assert!(Owner::new("").is_err());
/// assert!(Owner::new("a\nb").is_err());
/// # Ok::<(), locksmith_server::machine::InvalidOwner>(())
/// ```
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Owner(String);

impl Owner {
    /// Validates `owner`.
    ///
    /// # Errors
    /// [`InvalidOwner`] when it is empty or contains a control character.
    pub fn new(owner: impl Into<String>) -> Result<Self, InvalidOwner> {
        let owner = owner.into();
        if owner.is_empty() || owner.chars().any(char::is_control) {
            return Err(InvalidOwner(()));
        }
        Ok(Self(owner))
    }

    /// The owner id as a string slice.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The owner id, without copying it.
    pub fn into_string(self) -> String {
        self.0
    }
}

impl fmt::Debug for Owner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

/// Why a string is not an [`Owner`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("owner id must not be empty or contain control characters")]
pub struct InvalidOwner(());
