//! `locksmith run` against a real ZooKeeper: the process properties of the contract (kill -9,
//! SIGSTOP past the TTL = session expiry, Ctrl-C while waiting, exit codes) on `zk://`.

use std::sync::OnceLock;

use locksmith_core::conformance::UrlTarget;
use locksmith_testkit::{CliTarget, ZkServer};

const BIN: &str = env!("CARGO_BIN_EXE_locksmith");

static SERVER: OnceLock<ZkServer> = OnceLock::new();

fn zk() -> CliTarget {
    CliTarget::new(BIN, UrlTarget::new(SERVER.get_or_init(ZkServer::start).url(), locksmith::backend))
}

locksmith_testkit::process_conformance_suite!(zk());
