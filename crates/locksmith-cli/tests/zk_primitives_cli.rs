//! Beyond the mutex with real processes on ZooKeeper (Curator's layouts): `locksmith run
//! --permits` (a killed holder's lease ends with its session), `--shared`, `locksmith elect` (a
//! paused leader's session expires, the next candidate takes over, an observer sees both), and
//! `locksmith status` of permits, readers and a leader's proposal (the shared process suite of
//! `locksmith_testkit::primitives_process`).

use locksmith_core::conformance::UrlTarget;
use locksmith_testkit::{CliTarget, ZkServer};

const BIN: &str = env!("CARGO_BIN_EXE_locksmith");

fn zk() -> CliTarget {
    let server = ZkServer::start();
    CliTarget::new(BIN, UrlTarget::new(server.url(), locksmith::backend).keeping(server))
}

locksmith_testkit::primitives_process_suite!(zk());
