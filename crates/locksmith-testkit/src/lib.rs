//! Real servers for tests: each started as its own process on 127.0.0.1 with a free port and a
//! temp dir, and ended (by PID) on drop. A server that cannot start fails the test with the
//! command that installs what is missing; nothing is skipped silently.
//!
//! Also the process properties of the contract ([`process_conformance`]): real `locksmith run`
//! processes killed, paused and interrupted, for the CLI's tests.
#![warn(missing_docs, missing_debug_implementations, rust_2018_idioms)]

mod certs;
mod cluster_links;
mod etcd;
mod etcd_cluster;
mod faketime;
mod memcached;
mod mysql;
mod native;
mod native_cluster;
mod native_raw;
mod port;
mod postgres;
pub mod primitives_process;
mod process;
pub mod process_conformance;
mod redis;
mod run_process;
mod zk;

pub use certs::TestCerts;
pub use etcd::{EtcdServer, EtcdServerBuilder};
pub use etcd_cluster::EtcdCluster;
pub use faketime::{skew_clock, FAKETIME_SETUP};
pub use memcached::{MemcachedServer, MEMCACHED_SETUP};
pub use mysql::{MySqlServer, MYSQL_SETUP};
pub use native::{new_token, NativeServer};
pub use native_cluster::{write_cluster_secret, NativeCluster};
pub use native_raw::{RawRefusal, RawSession};
pub use port::{free_port, wait_listening};
pub use postgres::{PostgresServer, POSTGRES_SETUP};
pub use process::{spawn, stdout_lines, temp_dir_for_process, ChildProcess, ProcessTempDir};
pub use process_conformance::CliTarget;
pub use redis::{interop_python, random_password, RedisServer, TlsMode, REDIS_SETUP, REDIS_TLS_USER};
pub use zk::ZkServer;
