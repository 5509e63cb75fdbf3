//! The shared contract suite against a real redis-server in rwlock mode (Redisson's
//! `RReadWriteLock` layout: exclusive holds are its write lock, shared holds its read lock), and
//! the read/write lock and semaphore properties of the primitives suite.
//!
//! `primitives_suite!` also holds the election property, which Redis does not offer, so the
//! properties that apply are expanded one by one here.

use locksmith_core::conformance::{primitives, UrlTarget};
use locksmith_testkit::RedisServer;

fn redis() -> UrlTarget {
    let server = RedisServer::start();
    let url = format!("{}?mode=rwlock", server.url());
    UrlTarget::new(url, locksmith::backend).keeping(server)
}

locksmith_core::conformance_suite!(redis());

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_share_and_never_overlap_a_writer() {
    primitives::readers_share_and_never_overlap_a_writer(&redis()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_gets_in_while_readers_keep_arriving() {
    primitives::a_writer_gets_in_while_readers_keep_arriving(&redis()).await;
}

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
