//! The shared contract suite against a real redis-server, plain mode (redis-py layout): its
//! waiter queue is FIFO and `status` reports the live waiters.

use locksmith_core::conformance::UrlTarget;
use locksmith_testkit::RedisServer;

fn redis() -> UrlTarget {
    let server = RedisServer::start();
    UrlTarget::new(server.url(), locksmith::backend).fifo(true).reports_waiters(true).keeping(server)
}

locksmith_core::conformance_suite!(redis());

// Semaphores (Redisson's RPermitExpirableSemaphore layout) are offered in every mode.
locksmith_core::semaphore_suite!(redis());
