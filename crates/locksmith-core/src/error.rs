//! One error type for every backend, classified by what the caller can do about it.

use std::time::Duration;

/// Everything that can go wrong in locksmith, named by outcome.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The lock name is not acceptable (empty, too long, control characters).
    #[error("invalid lock name: {0}")]
    InvalidName(String),
    /// The TTL is zero, too small or above the maximum.
    #[error("invalid ttl {ttl:?}: must be between {min:?} and {max:?}")]
    InvalidTtl {
        /// The TTL asked for.
        ttl: Duration,
        /// Smallest accepted TTL.
        min: Duration,
        /// Largest accepted TTL.
        max: Duration,
    },
    /// Some other argument (a duration, an owner id, an option) is not acceptable.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// The backend URL cannot be parsed or names no known backend.
    #[error("invalid backend url {url:?}: {reason}")]
    InvalidUrl {
        /// The URL as given.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The backend cannot be reached (connection refused, reset, or no answer in time).
    #[error("backend {backend} unavailable: {message}")]
    Unavailable {
        /// Which backend, e.g. `locksmith://127.0.0.1:7531`.
        backend: String,
        /// Why.
        message: String,
    },
    /// The backend was reached but the connection's configuration is wrong: a certificate that
    /// does not verify, TLS required by one side and not offered by the other, an unreadable CA
    /// or key file. Retrying changes nothing: fix the configuration.
    #[error("backend {backend}: configuration error: {message}")]
    Config {
        /// Which backend (without credentials).
        backend: String,
        /// What is wrong (never a password or key).
        message: String,
    },
    /// The backend refused our credentials (wrong password, unknown user, a client certificate
    /// it does not accept) or our permissions. Retrying changes nothing. A `message` that
    /// starts with `permission denied` is an authorization refusal (the caller is known but
    /// may not do this) and is shown as it is; any other is shown as an authentication failure.
    #[error("backend {backend}: {}", auth_text(.message))]
    Auth {
        /// Which backend (without credentials).
        backend: String,
        /// What the backend said (never a password).
        message: String,
    },
    /// The backend cannot give a safe fencing token (Redlock) and the caller did not opt in to
    /// locking without one.
    #[error("{0} cannot give a safe fencing token; opt in with LockOptions::allow_unfenced (`locksmith run --unfenced`) to lock without one")]
    Unfenced(String),
    /// The backend cannot offer what was asked (a semaphore, a read lock, observing a lock)
    /// safely; the message says which backend, what, and why.
    #[error("{0}")]
    Unsupported(String),
    /// `lock()` gave up waiting; nothing is left behind on the server.
    #[error("timed out waiting for the lock")]
    Timeout,
    /// The session (lease) behind this client expired or was closed; its holds are gone.
    #[error("session expired or closed: its lease ran out before a renewal reached the backend, or the client closed it; any lock it held is lost")]
    SessionExpired,
    /// The lock was lost while a scoped critical section ran.
    #[error("lock {0} was lost")]
    Lost(String),
    /// A server limit was hit (waiters per lock, sessions, message size).
    #[error("limit exceeded: {0}")]
    LimitExceeded(String),
    /// The server's data directory cannot be read safely; nothing was changed.
    #[error("data directory is corrupt: {0}")]
    Corrupt(String),
    /// The server answered something this client does not understand.
    #[error("protocol error: {0}")]
    Protocol(String),
    /// An invariant of locksmith itself was broken (a bug, never the caller's input): a driver
    /// answered what its contract rules out. Please report it.
    #[error("internal error (a bug in locksmith): {0}")]
    Internal(String),
    /// A backend-specific failure, with the backend named in the message.
    #[error("{0}")]
    Backend(String),
    /// A local I/O error (data directory, files).
    #[error("i/o error: {0}")]
    Io(#[from] std::io::Error),
}

/// What an [`Error::Auth`] says: a permission refusal as it is, anything else as a failed
/// authentication.
fn auth_text(message: &str) -> std::borrow::Cow<'_, str> {
    if message.starts_with("permission denied") {
        message.into()
    } else {
        format!("authentication failed: {message}").into()
    }
}

impl Error {
    /// A refusal of permission (the backend knows who we are; we may not do this), as an
    /// [`Error::Auth`] that says so.
    ///
    /// ```
    /// let e = locksmith_core::Error::permission_denied("locksmith://h:7531", "ops may not lock \"jobs/x\"");
    /// assert_eq!(e.to_string(), "backend locksmith://h:7531: permission denied: ops may not lock \"jobs/x\"");
    /// ```
    pub fn permission_denied(backend: impl Into<String>, message: impl std::fmt::Display) -> Self {
        Error::Auth { backend: backend.into(), message: format!("permission denied: {message}") }
    }

    /// True when retrying the same call later may succeed (the backend was unreachable or slow).
    pub fn is_transient(&self) -> bool {
        matches!(self, Error::Unavailable { .. } | Error::Timeout)
    }
}

/// An error and its sources on one line, each cause said once: client libraries often repeat
/// their source's text in their own (`tcp connect error: tcp connect error: Connection
/// refused`), which tells a user nothing twice.
///
/// ```
/// let e = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "connection refused");
/// assert_eq!(locksmith_core::error_chain(&e), "connection refused");
/// ```
pub fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    message_with_causes(&e.to_string(), e.source())
}

/// `message`, then the text of each error in the `source` chain, each distinct segment once
/// (see [`error_chain`]); for errors whose `Display` is not their message (e.g. a gRPC status).
///
/// ```
/// let cause = std::io::Error::other("tcp connect error: connection refused");
/// assert_eq!(
///     locksmith_core::message_with_causes("transport error", Some(&cause)),
///     "transport error: tcp connect error: connection refused"
/// );
/// ```
pub fn message_with_causes(message: &str, source: Option<&(dyn std::error::Error + 'static)>) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut push = |text: String| {
        for part in text.split(": ") {
            if !part.is_empty() && !parts.iter().any(|p| p == part) {
                parts.push(part.to_string());
            }
        }
    };
    push(message.to_string());
    let mut source = source;
    while let Some(s) = source {
        push(s.to_string());
        source = s.source();
    }
    parts.join(": ")
}

/// Shorthand for `Result<T, locksmith_core::Error>`.
pub type Result<T, E = Error> = std::result::Result<T, E>;
