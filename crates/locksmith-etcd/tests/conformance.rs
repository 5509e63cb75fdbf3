//! The shared contract suite against a real single-node etcd.

use std::time::Duration;

use locksmith_core::conformance::{Caps, Target};
use locksmith_testkit::EtcdServer;

struct Etcd {
    server: EtcdServer,
}

#[async_trait::async_trait]
impl Target for Etcd {
    fn url(&self) -> String {
        self.server.url()
    }
    async fn client(&self, ttl: Duration) -> locksmith::Result<locksmith::Client> {
        locksmith::connect_with_ttl(&self.url(), ttl).await
    }
    fn caps(&self) -> Caps {
        let mut c = Caps::default();
        c.fifo = true;
        c.reports_waiters = true;
        c
    }
}

locksmith_core::conformance_suite!(Etcd { server: EtcdServer::start() });
