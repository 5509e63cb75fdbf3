//! The shared contract suite against a real redis-server in rwlock mode (Redisson's
//! `RReadWriteLock` layout: exclusive holds are its write lock, shared holds its read lock), and
//! the read/write lock and semaphore properties of the primitives suite.
//!
//! `primitives_suite!` also holds the election property, which Redis does not offer, so the
//! read/write lock and semaphore suites are expanded on their own here.

use locksmith_core::conformance::UrlTarget;
use locksmith_testkit::RedisServer;

fn redis() -> UrlTarget {
    let server = RedisServer::start();
    let url = format!("{}?mode=rwlock", server.url());
    UrlTarget::new(url, locksmith::backend).keeping(server)
}

locksmith_core::conformance_suite!(redis());
locksmith_core::rwlock_suite!(redis());
locksmith_core::semaphore_suite!(redis());
