//! `locksmith::Error` as the exception classes of `locksmith.errors` (one class per kind; the
//! classes are defined in Python so that they can also derive from the built-in exceptions).

use pyo3::prelude::*;

/// The exception for `e`.
pub(crate) fn to_py(py: Python<'_>, e: locksmith::Error) -> PyErr {
    use locksmith::Error as E;
    let class = match &e {
        E::InvalidName(_) => "InvalidName",
        E::InvalidTtl { .. } => "InvalidTtl",
        E::InvalidArgument(_) => "InvalidArgument",
        E::InvalidUrl { .. } => "InvalidUrl",
        E::Unavailable { .. } => "Unavailable",
        E::Config { .. } => "ConfigError",
        E::Auth { .. } => "AuthError",
        E::Unfenced(_) => "Unfenced",
        E::Unsupported(_) => "Unsupported",
        E::Timeout => "LockTimeout",
        E::SessionExpired => "SessionExpired",
        E::Lost(_) => "LockLost",
        E::LimitExceeded(_) => "LimitExceeded",
        E::Corrupt(_) => "CorruptData",
        E::Protocol(_) => "ProtocolError",
        E::Internal(_) => "InternalError",
        E::Backend(_) => "BackendError",
        E::Io(_) => "LocalIOError",
        _ => "LocksmithError",
    };
    raise(py, class, locksmith::error_chain(&e))
}

/// An instance of `locksmith.errors.<class>` with `message`.
pub(crate) fn raise(py: Python<'_>, class: &str, message: String) -> PyErr {
    let made = py.import("locksmith.errors").and_then(|m| m.getattr(class)).and_then(|c| c.call1((message.clone(),)));
    match made {
        Ok(exc) => PyErr::from_value(exc),
        Err(_) => pyo3::exceptions::PyRuntimeError::new_err(message),
    }
}

/// `InvalidArgument` with `message`.
pub(crate) fn invalid(py: Python<'_>, message: String) -> PyErr {
    raise(py, "InvalidArgument", message)
}
