//! The native locksmith lock server.
//!
//! - [`machine`]: the pure lock state machine (sessions, holders, FIFO waiters, fencing
//!   counters, lock-delay, expiry; time passed in), driven by typed commands; every change it
//!   makes is a [`Record`](machine::Record) applied through one `apply`, live and on replay;
//! - [`pb_impl`]: the protobuf boundary: client messages decoded and validated into requests,
//!   answers into messages, records to and from the log's messages;
//! - `wal` and `sink`: the data directory and group-committed durability;
//! - [`Service`]: the task that drives the machine;
//! - `connection` and [`grpc`]: transports that forward session streams to it, each stream's
//!   messages going out through a bounded [`Outbox`];
//! - [`serve`]: the server main loop, `run(listener, data_dir, shutdown)` style, failing with
//!   a [`ServerError`]; `accept` keeps its connections within [`NetLimits`];
//! - [`telemetry`]: the server's metrics (names and the calls that record them).
//!
//! The network server (`serve`, `grpc`, `accept`, `ServeOptions`, `NetLimits`, the auth policy
//! file `auth::Auth`) and the Raft cluster (`cluster`: `ReplicaMachine`,
//! `Service::start_cluster`) are the `cluster` feature
//! (default; the CLI's `locksmith serve`). Without it the crate is the lock service in this
//! process, as `memory://` runs it ([`Service::start_in_memory`], [`serve_stream`]), and links
//! no openraft.
//!
//! Durability and restarts come in two modes ([`Durability`], `locksmith serve --durability`).
//!
//! `grants` (the default): a grant is on disk before its holder hears of it, so fencing tokens
//! never repeat or go backwards, also after `kill -9`. On restart every session in the log is
//! restored with its holds and gets one full TTL to reconnect and resume (Chubby's grace
//! period); a client that cannot reach the server in that time has already stopped trusting its
//! holds, because its own deadline ran from its last renewal *before* the crash. So there are
//! never two holders across a restart. Queued waiters are not persisted: clients re-send them
//! when they resume.
//!
//! `leases`: only reserved blocks of fencing tokens ([`machine::RESERVE_BLOCK`] per sync) and the
//! longest TTL and lock-delay in use are synced, so a grant or hand-off waits for no disk at all.
//! Tokens still never repeat (a restart continues above the last reservation), but holders are
//! unknown after a restart: every lock ever granted stays unavailable for that longest TTL +
//! lock-delay from the restart (DESIGN.md §4's rule for state that is not persisted), and
//! resuming clients learn that their sessions are gone.
#![warn(missing_docs, missing_debug_implementations, unreachable_pub, rust_2018_idioms)]

#[cfg(feature = "cluster")]
mod accept;
pub mod auth;
#[cfg(feature = "cluster")]
mod budget;
mod clients;
pub mod cluster;
mod connection;
mod error;
#[cfg(feature = "cluster")]
pub mod grpc;
pub mod machine;
#[cfg(feature = "cluster")]
mod net_limits;
#[cfg(feature = "cluster")]
mod options;
mod outbox;
pub mod pb_impl;
mod secret;
#[cfg(feature = "cluster")]
mod serve;
mod service;
mod sink;
pub mod telemetry;
mod tokens;
mod wal;

pub use connection::serve_stream;
pub use error::ServerError;
/// The cluster secret and node proofs (from `locksmith-proto`).
pub use locksmith_proto::node_proof;
#[cfg(feature = "cluster")]
/// `tracing` filter directives that keep openraft's routine noise out of a node's log (see
/// [`locksmith_raft::QUIET_OPENRAFT`]): add them to the default filter of `locksmith serve`.
pub use locksmith_raft::QUIET_OPENRAFT;
pub use machine::Durability;
#[cfg(feature = "cluster")]
pub use net_limits::NetLimits;
#[cfg(feature = "cluster")]
pub use options::{ServeOptions, ServerTls};
pub use outbox::{Outbox, OutboxStream, StreamEnd};
#[cfg(feature = "cluster")]
pub use serve::serve;
pub use service::{Service, Serving};
