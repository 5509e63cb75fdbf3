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
/// `run`: the lock was lost while the command ran; the command was stopped.
pub const LOST: u8 = 76;

/// Prints `err` and returns the exit code that classifies it.
pub fn report(context: &str, err: &locksmith::Error) -> ExitCode {
    eprintln!("locksmith {context}: {err}");
    ExitCode::from(code_for(err))
}

/// Prints a failure of the server itself (`serve`) and returns its exit code.
pub fn report_server(context: &str, err: &locksmith_server::ServerError) -> ExitCode {
    eprintln!("locksmith {context}: {err}");
    ExitCode::from(server_code_for(err))
}

/// The exit code for a server failure: a corrupt data directory is [`DATA`]; a directory in
/// use, a failed disk or transport are 1, as when they arrived as library I/O errors.
pub fn server_code_for(err: &locksmith_server::ServerError) -> u8 {
    match err {
        locksmith_server::ServerError::Corrupt(_) => DATA,
        _ => 1,
    }
}

/// The exit code for a library error.
pub fn code_for(err: &locksmith::Error) -> u8 {
    use locksmith::Error as E;
    match err {
        E::InvalidName(_) | E::InvalidTtl { .. } | E::InvalidArgument(_) | E::InvalidUrl { .. } | E::Unfenced(_) => {
            USAGE
        }
        E::Unavailable { .. } => UNAVAILABLE,
        E::Timeout => NOT_ACQUIRED,
        E::Corrupt(_) => DATA,
        _ => 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use locksmith_server::ServerError;

    /// A corrupt data directory exits 65 (EX_DATAERR); the other server failures exit 1.
    #[test]
    fn server_failures_map_to_the_exit_codes_serve_always_used() {
        assert_eq!(server_code_for(&ServerError::Corrupt("wal: bad header".into())), DATA);
        assert_eq!(server_code_for(&ServerError::InUse("./locksmith-data".into())), 1);
        assert_eq!(server_code_for(&ServerError::WriterStopped), 1);
        assert_eq!(server_code_for(&ServerError::Io(std::io::Error::other("disk full"))), 1);
    }
}
