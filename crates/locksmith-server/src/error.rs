//! Why the server cannot start or cannot go on. A request a client got wrong is not an error
//! here: it is answered on its stream ([`Refusal`](crate::machine::Refusal),
//! [`Invalid`](crate::pb_impl::Invalid)) and the server carries on.

use std::path::PathBuf;

/// What stops the server (`locksmith serve` exits with it).
///
/// The messages are the ones `locksmith serve` printed before this type existed, when these
/// failures travelled as the client's `locksmith_core::Error` (hence the `i/o error:` prefix on
/// everything but corruption); the `From<ServerError>` impl for that type gives the same values
/// as then.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServerError {
    /// The data directory's log does not check out (not a torn last write): nothing was changed,
    /// so an operator can inspect or restore it.
    #[error("data directory is corrupt: {0}")]
    Corrupt(String),
    /// Another server holds the data directory's lock file.
    #[error("data directory {} is in use by another locksmith server (it holds the directory's LOCK file)", .0.display())]
    InUse(PathBuf),
    /// The data directory, or its lock file, cannot be created or opened (the path is a file,
    /// no permission, a read-only file system); nothing was started.
    #[error("cannot create or open the data directory {}: {source}", .path.display())]
    DataDir {
        /// The directory as given.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The data directory's file system has no room for what must be written (or a quota or
    /// the process's file size limit says so): at a start, the compacted log; running, a log
    /// append or the token floor. Nothing unsynced was acknowledged; start again once space
    /// is free (the README says how much a start needs).
    #[error(
        "no space left for the data directory {}: {source}; free some space and start the server again \
         (a start needs room for the log's live records)",
        .path.display()
    )]
    NoSpace {
        /// The data directory.
        path: PathBuf,
        /// The I/O error that said so.
        source: std::io::Error,
    },
    /// The write-ahead log writer failed (the cause was logged when it happened): no further
    /// grant can be made durable, so none is acknowledged.
    #[error("i/o error: write-ahead log writer has stopped")]
    WriterStopped,
    /// The lock service has stopped; it answers no more requests.
    #[error("lock service stopped")]
    Stopped,
    /// This cluster node does not serve clients (it does not lead).
    #[error("this node does not lead the cluster{}", .leader.as_ref().map(|l| format!("; the leader is at {l}")).unwrap_or_default())]
    NotServing {
        /// Where the leader is, when known.
        leader: Option<String>,
    },
    /// The lock service task or the log writer thread ended abnormally (a panic, or an end
    /// nobody asked for).
    #[error("i/o error: {0}")]
    Failed(String),
    /// A cluster node's Raft core stopped — a storage error when `storage`, else a panic or an
    /// end nobody asked for: the node can neither serve nor follow, so it reports
    /// `NOT_SERVING` and exits for its supervisor to restart it.
    #[error("the raft core stopped{}; restart the node (see the log above)", if *.storage { " on a storage error" } else { "" })]
    RaftStopped {
        /// A storage (disk) error stopped it.
        storage: bool,
    },
    /// The gRPC transport failed.
    #[cfg(feature = "cluster")]
    #[error("i/o error: {0}")]
    Transport(#[from] tonic::transport::Error),
    /// I/O on the data directory.
    #[error("i/o error: {0}")]
    Io(#[from] std::io::Error),
    /// The server's own settings cannot be used (a TLS certificate or key that does not
    /// load); nothing was started.
    #[error("configuration error: {0}")]
    Config(String),
}

/// For code that reports in the client's error type, e.g. the `memory://` driver: corruption
/// stays [`Corrupt`](locksmith_core::Error::Corrupt), a stopped service is
/// [`Unavailable`](locksmith_core::Error::Unavailable), everything else is
/// [`Io`](locksmith_core::Error::Io) with the same message as [`ServerError`]'s.
impl From<ServerError> for locksmith_core::Error {
    fn from(e: ServerError) -> Self {
        use locksmith_core::Error;
        let other = |m: String| Error::Io(std::io::Error::other(m));
        match e {
            ServerError::Corrupt(m) => Error::Corrupt(m),
            e @ (ServerError::InUse(_) | ServerError::DataDir { .. } | ServerError::NoSpace { .. }) => {
                other(e.to_string())
            }
            ServerError::WriterStopped => other("write-ahead log writer has stopped".into()),
            ServerError::Stopped => {
                Error::Unavailable { backend: "locksmith".into(), message: "lock service stopped".into() }
            }
            e @ ServerError::NotServing { .. } => {
                Error::Unavailable { backend: "locksmith".into(), message: e.to_string() }
            }
            ServerError::Failed(m) => other(m),
            e @ ServerError::RaftStopped { .. } => other(e.to_string()),
            #[cfg(feature = "cluster")]
            ServerError::Transport(e) => Error::Io(std::io::Error::other(e)),
            ServerError::Io(e) => Error::Io(e),
            ServerError::Config(message) => Error::Config { backend: "locksmith server".into(), message },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each failure converts to the client error it used to be, with the same message.
    #[test]
    fn converts_to_the_client_error_with_the_same_message() {
        let cases = [
            ServerError::Corrupt("wal: bad header".into()),
            ServerError::InUse(PathBuf::from("/data")),
            ServerError::WriterStopped,
            ServerError::Failed("lock service did not stop in 10 s".into()),
            ServerError::Io(std::io::Error::other("disk full")),
        ];
        for e in cases {
            let text = e.to_string();
            let converted = locksmith_core::Error::from(e).to_string();
            assert!(converted == text || converted == format!("i/o error: {text}"), "{converted}");
        }
        let stopped = locksmith_core::Error::from(ServerError::Stopped);
        assert!(matches!(stopped, locksmith_core::Error::Unavailable { .. }), "{stopped:?}");
        assert_eq!(stopped.to_string(), "backend locksmith unavailable: lock service stopped");
    }
}
