//! Drivers for the native locksmith server: `locksmith://host:port` over gRPC
//! ([`NativeBackend`]) and, with the `memory` feature, `memory://` ([`MemoryBackend`]): the
//! same server logic in-process, for tests.
//!
//! Both speak one session stream per session (see `locksmith-proto`): requests, keep-alives and
//! pushed grants share it, so waiting costs nothing and a release wakes exactly one waiter.
//!
//! A [`NativeBackend`] given a cluster's nodes also administers it:
//! [`NativeBackend::cluster_status`], [`NativeBackend::add_node`] and
//! [`NativeBackend::remove_node`] (`locksmith cluster status|add|remove`).
#![warn(missing_docs, missing_debug_implementations, unreachable_pub, rust_2018_idioms)]

mod admin;
mod cluster;
mod convert;
mod grpc;
#[cfg(feature = "memory")]
mod memory;
mod mux;
mod route;

pub use admin::RevokedHold;
pub use cluster::{ClusterError, ClusterNode, ClusterStatus, NodeAdded, NodeRemoved, NodeRole};
pub use grpc::{NativeBackend, TOKEN_FILE_ENV};
/// The cluster secret that proves membership changes ([`NativeBackend::add_node_with`]).
pub use locksmith_proto::node_proof::ClusterSecret;
#[cfg(feature = "memory")]
pub use memory::MemoryBackend;
#[cfg(feature = "test-transport")]
#[doc(hidden)]
pub mod testing;
