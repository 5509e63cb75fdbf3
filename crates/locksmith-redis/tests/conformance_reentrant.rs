//! The shared contract suite against a real redis-server, reentrant mode (Redisson layout).

use locksmith_core::conformance::{primitives, UrlTarget};
use locksmith_testkit::RedisServer;

fn redis() -> UrlTarget {
    let server = RedisServer::start();
    let url = format!("{}?mode=reentrant", server.url());
    UrlTarget::new(url, locksmith::backend).fifo(false).reports_waiters(false).keeping(server)
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
