//! The contract suite against a real `locksmith serve` process (one per test).

use locksmith_core::conformance::UrlTarget;
use locksmith_testkit::{CliTarget, NativeServer};

const BIN: &str = env!("CARGO_BIN_EXE_locksmith");

fn native() -> UrlTarget {
    let server = NativeServer::start(BIN.as_ref());
    UrlTarget::new(server.url(), locksmith::backend).keeping(server)
}

locksmith_core::conformance_suite!(native());
locksmith_testkit::process_conformance_suite!(CliTarget::new(BIN, native()));
locksmith_core::primitives_suite!(native());
