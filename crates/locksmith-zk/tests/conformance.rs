//! The shared contract suite, and the primitives beyond the mutex, against a real ZooKeeper (one
//! server shared by the tests of this binary; every test uses its own lock names).

use std::sync::OnceLock;

use locksmith_core::conformance::UrlTarget;
use locksmith_testkit::ZkServer;

static SERVER: OnceLock<ZkServer> = OnceLock::new();

fn zk() -> UrlTarget {
    UrlTarget::new(SERVER.get_or_init(ZkServer::start).url(), locksmith::backend)
}

locksmith_core::conformance_suite!(zk());

// Beyond the mutex, in Curator's layouts: InterProcessReadWriteLock, InterProcessSemaphoreV2,
// LeaderLatch.
locksmith_core::primitives_suite!(zk());
