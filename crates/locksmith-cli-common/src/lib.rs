//! What the `locksmith` subcommands share, wherever they are built: `serve`, `run`, `status`
//! and `sql` in `locksmith-cli`, `bench` in `locksmith-bench`, `chaos` and `chaos-worker` in
//! `locksmith-chaos`. One place for the exit codes and the argument parsers, so that every
//! subcommand answers alike however the binary was put together.
//!
//! - [`exit`]: exit codes (sysexits where one fits) and the mapping from library errors;
//! - [`duration_arg`], [`ttl_arg`]: clap parsers for durations and session TTLs;
//! - [`DEFAULT_BACKEND`]: the backend when neither `--backend` nor `LOCKSMITH_BACKEND` is given;
//! - [`DurabilityArg`]: the `--durability` values of the native server;
//! - [`shutdown_signal`]: SIGTERM or SIGINT, for the subcommands that run until stopped.
#![warn(missing_docs, missing_debug_implementations, rust_2018_idioms, unreachable_pub)]

mod args;
pub mod exit;
mod signal;

pub use args::{duration_arg, ttl_arg, DurabilityArg, DEFAULT_BACKEND};
pub use signal::shutdown_signal;
