//! The shared contract suite against a real single-node etcd (one per test).

use locksmith_core::conformance::UrlTarget;
use locksmith_testkit::EtcdServer;

fn etcd() -> UrlTarget {
    let server = EtcdServer::start();
    UrlTarget::new(server.url(), locksmith::backend).keeping(server)
}

locksmith_core::conformance_suite!(etcd());
locksmith_core::primitives_suite!(etcd());
