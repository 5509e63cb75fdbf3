//! Exit codes (sysexits where one fits), and the mapping from library errors.

use std::process::ExitCode;

/// Bad arguments (also what clap uses).
pub const USAGE: u8 = 2;
/// The backend could not be reached.
pub const UNAVAILABLE: u8 = 69;
/// Internal failure.
pub const SOFTWARE: u8 = 70;
/// The data directory is unusable.
pub const DATA: u8 = 65;
/// `run`: the lock was not acquired (timeout, or held and `--no-wait`); nothing ran.
pub const NOT_ACQUIRED: u8 = 75;
/// Try again later (sysexits `EX_TEMPFAIL`, the number of [`NOT_ACQUIRED`]): `cluster add` or
/// `cluster remove` did not complete in time, or the leader was busy with another change.
pub const TEMPFAIL: u8 = 75;
/// `run`: the lock was lost while the command ran (or the session expired under it); the
/// command was stopped.
pub const LOST: u8 = 76;
/// `serve`: the data directory cannot be created or opened (sysexits `EX_CANTCREAT`).
pub const CANTCREAT: u8 = 73;
/// `serve`: a disk error stopped the server or its Raft core, or no space is left for the data
/// directory (sysexits `EX_IOERR`): start again once the disk is fixed or some space is free.
pub const IOERR: u8 = 74;
/// The backend refused our credentials or permissions (sysexits `EX_NOPERM`).
pub const AUTH: u8 = 77;
/// The connection's configuration is wrong: TLS verification, TLS required, unreadable
/// certificate or key files (sysexits `EX_CONFIG`).
pub const CONFIG: u8 = 78;

/// Prints `err` and returns the exit code that classifies it.
pub fn report(context: &str, err: &locksmith_core::Error) -> ExitCode {
    eprintln!("locksmith {context}: {err}");
    ExitCode::from(code_for(err))
}

/// The exit code for a library error.
pub fn code_for(err: &locksmith_core::Error) -> u8 {
    use locksmith_core::Error as E;
    match err {
        E::InvalidName(_)
        | E::InvalidTtl { .. }
        | E::InvalidArgument(_)
        | E::InvalidUrl { .. }
        | E::Unfenced(_)
        | E::Unsupported(_) => USAGE,
        E::Unavailable { .. } => UNAVAILABLE,
        E::Auth { .. } => AUTH,
        E::Config { .. } => CONFIG,
        E::Timeout => NOT_ACQUIRED,
        // The lease ran out before a renewal reached the backend: whatever it held is lost.
        E::SessionExpired => LOST,
        E::Corrupt(_) => DATA,
        _ => 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use locksmith_core::Error;

    /// Configuration and authentication errors have codes of their own, never "unreachable".
    #[test]
    fn config_and_auth_errors_are_not_unreachable() {
        let b = || "postgres://app@db:5432/x".to_string();
        assert_eq!(code_for(&Error::Auth { backend: b(), message: "wrong password".into() }), AUTH);
        assert_eq!(code_for(&Error::Config { backend: b(), message: "invalid peer certificate".into() }), CONFIG);
        assert_eq!(code_for(&Error::Unavailable { backend: b(), message: "refused".into() }), UNAVAILABLE);
        assert!(!Error::Auth { backend: b(), message: String::new() }.is_transient());
        assert!(!Error::Config { backend: b(), message: String::new() }.is_transient());
    }

    /// A session that expired (a leader paused past the TTL) is a lost lock, not a bare 1.
    #[test]
    fn an_expired_session_is_a_lost_lock() {
        assert_eq!(code_for(&Error::SessionExpired), LOST);
    }
}
