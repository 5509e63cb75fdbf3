//! Generated types and stubs for `locksmith.v1` (see `proto/locksmith.proto`, which documents
//! the wire semantics).
#![allow(missing_docs, unreachable_pub, clippy::all, clippy::pedantic)]

tonic::include_proto!("locksmith.v1");
