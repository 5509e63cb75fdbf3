//! The shared contract suite against a real redis-server, plain mode (redis-py layout): its
//! waiter queue is FIFO and `status` reports the live waiters.

use locksmith_core::conformance::{primitives, UrlTarget};
use locksmith_testkit::RedisServer;

fn redis() -> UrlTarget {
    let server = RedisServer::start();
    UrlTarget::new(server.url(), locksmith::backend).fifo(true).reports_waiters(true).keeping(server)
}

locksmith_core::conformance_suite!(redis());

// Semaphores (Redisson's RPermitExpirableSemaphore layout) are offered in every mode.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_semaphore_never_exceeds_its_permits() {
    primitives::a_semaphore_never_exceeds_its_permits(&redis()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permit_comes_back_when_its_holders_session_ends() {
    primitives::a_permit_comes_back_when_its_holders_session_ends(&redis()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_semaphore_in_use_refuses_another_number_of_permits() {
    primitives::a_semaphore_in_use_refuses_another_number_of_permits(&redis()).await;
}
