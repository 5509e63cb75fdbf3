//! The contract suite against a real `locksmith serve` process (one per test).

use locksmith_core::conformance::UrlTarget;
use locksmith_testkit::NativeServer;

fn native() -> UrlTarget {
    let bin = env!("CARGO_BIN_EXE_locksmith");
    let server = NativeServer::start(bin.as_ref());
    UrlTarget::new(server.url(), locksmith::backend).cli(bin).keeping(server)
}

locksmith_core::conformance_suite!(native());
locksmith_core::process_conformance_suite!(native());
