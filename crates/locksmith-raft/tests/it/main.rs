//! Integration tests, in one binary so that they share one link and run concurrently (the
//! storage suite mostly sleeps; the clusters mostly wait on timers and fdatasync).

mod cluster;
mod common;
mod fixture;
mod golden_disk;
mod golden_wire;
mod node;
mod node_auth;
mod storage_suite;
mod stream;
