//! The protobuf boundary: every conversion between the server's own types and the generated
//! ones lives here, one file per conversion (openraft's `pb_impl` shape), so the rest of the
//! server speaks only its own vocabulary.
//!
//! - `impl_client_message`: a [`ClientMessage`](locksmith_proto::ClientMessage) into a
//!   validated [`Open`] or [`Request`], or [`Invalid`]: every name and owner is checked here,
//!   once, on the connection's task (not on the single task that drives the machine), and the
//!   machine receives typed commands it need not check again;
//! - `impl_server_message`: answers and effects into `ServerMessage`s;
//! - `impl_lock_info`: status requests and answers;
//! - `impl_wal_record`: [`Record`](crate::machine::Record)s to and from the write-ahead log's
//!   `locksmith.wal.v1` messages.
//!
//! What is checked where: the shape of each field here (a lock name's rules, an owner's
//! characters, a message that cannot come now); everything the server's
//! [`Limits`](crate::machine::Limits) bound (TTL, lock-delay, owner length, queue and session
//! counts) and everything that depends on state (is the session alive?) by the machine.

use std::time::Duration;

use crate::machine::{HoldMode, InvalidOwner, LockName, Owner, SessionId};

mod impl_client_message;
mod impl_lock_info;
mod impl_server_message;
mod impl_wal_record;

pub use impl_client_message::{decode_open, decode_request};
pub use impl_lock_info::{status_query, StatusQuery, DEFAULT_STATUS_PAGE, MAX_STATUS_PAGE};
pub(crate) use impl_server_message::{effect_message, Reply};
pub(crate) use impl_wal_record::{encode_hot, from_wal, to_wal};

/// The first message of a session stream: open a session, or resume one.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Open {
    /// The session's TTL (ignored on resume: a session keeps its TTL).
    pub ttl: Duration,
    /// The session to resume after a reconnect or a server restart.
    pub resume: Option<SessionId>,
    /// SHA-256 of the resume secret the client presented (of nothing, when it sent none).
    pub secret: crate::machine::SecretDigest,
    /// The authenticated principal opening the stream (`None` without an auth policy); set by
    /// the connection, not decoded.
    pub principal: Option<String>,
    /// The client's address and port (its connection), when the transport has one (gRPC over
    /// TCP); set by the connection, not decoded.
    pub peer: Option<std::net::SocketAddr>,
}

/// Any later message of a session stream, decoded and validated; the stream's session and the
/// message's id complete it into a machine command.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Request {
    /// Renew the session's lease.
    KeepAlive,
    /// Acquire a lock (see [`Acquire`](crate::machine::Acquire)).
    Acquire {
        /// The lock.
        name: LockName,
        /// The owner within the session.
        owner: Owner,
        /// Queue when the lock is not free.
        wait: bool,
        /// Lock-delay if the session expires while holding.
        lock_delay: Duration,
        /// The kind of hold.
        mode: HoldMode,
        /// A value shown with the hold (an election's proposal).
        value: Option<String>,
    },
    /// Release a hold (see [`Release`](crate::machine::Release)).
    Release {
        /// The lock.
        name: LockName,
        /// The owner within the session.
        owner: Owner,
        /// The hold's fencing token.
        token: u64,
    },
    /// Withdraw the queued acquire with this message id.
    Cancel {
        /// The acquire's message id.
        request: u64,
    },
    /// End the session now and free its holds.
    Close,
}

/// Why a client message was refused before it reached the machine. Answered with
/// `INVALID_ARGUMENT` and this text; the stream and the session carry on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Invalid {
    /// The message has no body.
    #[error("empty message")]
    Empty,
    /// A stream's first message is not `open`.
    #[error("the first message must be open")]
    NotOpen,
    /// `open` on a stream whose session is already open.
    #[error("session already open on this stream")]
    AlreadyOpen,
    /// The lock name breaks the rules of `locksmith_core::LockName` (the reason says which).
    #[error("invalid lock name: {0}")]
    Name(String),
    /// The owner id is empty or has a control character.
    #[error(transparent)]
    Owner(#[from] InvalidOwner),
    /// A hold's kind or value breaks the rules (both shared and permits, too many permits, a
    /// value too long).
    #[error("invalid hold: {0}")]
    Hold(String),
    /// The stream's principal may not do this (answered `PERMISSION_DENIED`).
    #[error("permission denied: {0}")]
    Forbidden(String),
}

/// The kind of hold `(shared, permits)` says, or why it says none: the server refuses both set
/// and more than `MAX_PERMITS` permits.
pub(crate) fn mode_from_wire(shared: bool, permits: u32) -> Result<HoldMode, Invalid> {
    HoldMode::from_wire(shared, permits).map_err(|e| Invalid::Hold(e.to_string()))
}
