//! The shared contract suite over TLS: `rediss://user:pass@localhost:P?ca=…` against a TLS-only
//! redis-server (no plain port) whose `default` user is disabled, plain mode.

use locksmith_core::conformance::UrlTarget;
use locksmith_testkit::{RedisServer, TestCerts, TlsMode};

fn redis() -> UrlTarget {
    let server = RedisServer::start_tls(&TestCerts::generate(), TlsMode::ServerOnly);
    UrlTarget::new(server.tls_url(), locksmith::backend).fifo(true).reports_waiters(true).keeping(server)
}

locksmith_core::conformance_suite!(redis());
