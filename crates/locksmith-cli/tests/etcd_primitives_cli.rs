//! Beyond the mutex with real processes on etcd (the Go recipes' layouts): `locksmith run
//! --permits` (a killed holder's permit comes back with its lease), `--shared`, `locksmith
//! elect` (`concurrency.Election`), and `status` (the shared process suite of
//! `locksmith_testkit::primitives_process`).

use locksmith_core::conformance::UrlTarget;
use locksmith_testkit::{CliTarget, EtcdServer};

const BIN: &str = env!("CARGO_BIN_EXE_locksmith");

fn etcd() -> CliTarget {
    let server = EtcdServer::start();
    CliTarget::new(BIN, UrlTarget::new(server.url(), locksmith::backend).keeping(server))
}

locksmith_testkit::primitives_process_suite!(etcd());
