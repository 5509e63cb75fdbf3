//! The locksmith lock contract in code (see `DESIGN.md` §2): validated names and options, one
//! error type, the [`Backend`]/[`Session`] driver traits, and the engine every backend shares
//! ([`Client`] and [`Guard`]: session keep-alive, loss signal, reentrancy, timeouts, cancel
//! safety).
//!
//! Module map:
//! - `name`, `options`, `error`: the vocabulary, validated at the edge;
//! - `backend`: the few primitives a driver implements;
//! - `mode`, `holding`: the kinds of hold and which go together (written once for every backend);
//! - `keeper`: a session kept alive and its local deadline;
//! - `client`, `guard`: the engine users hold;
//! - `metrics`: counters on the `metrics` facade (grants, releases, losses, waiter wake-ups);
//! - `conformance` (feature): the shared contract suite each driver runs against a real server.
#![warn(missing_docs, missing_debug_implementations, unreachable_pub, rust_2018_idioms)]

mod backend;
mod client;
pub mod driver;
mod election;
mod error;
mod guard;
mod holding;
mod keeper;
pub mod metrics;
mod mode;
mod multi;
mod name;
mod options;

#[cfg(feature = "conformance")]
pub mod conformance;

pub use backend::{AcquireRequest, Acquired, Backend, HolderStatus, KeepAlive, LockStatus, LostHold, Session};
pub use client::Client;
pub use driver::Backoff;
pub use election::{Leader, Observer};
pub use error::{error_chain, message_with_causes, Error, Result};
pub use guard::Guard;
pub use holding::{holders_of, ConflictKind, ModeConflict};
pub use mode::{HoldMode, WireModeError, MAX_PERMITS, MAX_VALUE_LEN};
pub use multi::MultiGuard;
pub use name::{LockName, MAX_NAME_LEN};
pub use options::{
    format_duration, parse_duration, validate_ttl, LockOptions, DEFAULT_TTL, MAX_LOCK_DELAY, MAX_OWNER_LEN, MAX_TTL,
    MIN_TTL,
};
