//! The shared contract suite against a real redis-server, plain mode (redis-py layout).

use locksmith_core::conformance::UrlTarget;
use locksmith_testkit::RedisServer;

fn redis() -> UrlTarget {
    let server = RedisServer::start();
    UrlTarget::new(server.url(), locksmith::backend).fifo(false).reports_waiters(false).keeping(server)
}

locksmith_core::conformance_suite!(redis());
