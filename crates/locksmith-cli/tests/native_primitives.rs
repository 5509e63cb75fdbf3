//! Beyond the mutex with real processes on the native server: `locksmith run --permits`,
//! `--shared`, `locksmith elect` (campaign, take-over, observe) and `status` (the shared process
//! suite of `locksmith_testkit::primitives_process`).

use locksmith_core::conformance::UrlTarget;
use locksmith_testkit::{CliTarget, NativeServer};

const BIN: &str = env!("CARGO_BIN_EXE_locksmith");

fn native() -> CliTarget {
    let server = NativeServer::start(BIN.as_ref());
    CliTarget::new(BIN, UrlTarget::new(server.url(), locksmith::backend).keeping(server))
}

locksmith_testkit::primitives_process_suite!(native());
