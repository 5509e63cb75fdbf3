//! The shared contract suite against a real redis-server, reentrant mode (Redisson layout).

use locksmith_core::conformance::UrlTarget;
use locksmith_testkit::RedisServer;

fn redis() -> UrlTarget {
    let server = RedisServer::start();
    let url = format!("{}?mode=reentrant", server.url());
    UrlTarget::new(url, locksmith::backend).fifo(false).reports_waiters(false).keeping(server)
}

locksmith_core::conformance_suite!(redis());

// Semaphores (Redisson's RPermitExpirableSemaphore layout) are offered in every mode.
locksmith_core::semaphore_suite!(redis());
