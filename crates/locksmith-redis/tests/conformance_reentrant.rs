//! The shared contract suite against a real redis-server, reentrant mode (Redisson layout).

use std::time::Duration;

use locksmith_core::conformance::{Caps, Target};
use locksmith_testkit::RedisServer;

struct Redis {
    server: RedisServer,
}

#[async_trait::async_trait]
impl Target for Redis {
    fn url(&self) -> String {
        format!("{}?mode=reentrant", self.server.url())
    }
    async fn client(&self, ttl: Duration) -> locksmith::Result<locksmith::Client> {
        locksmith::connect_with_ttl(&self.url(), ttl).await
    }
    fn caps(&self) -> Caps {
        let mut c = Caps::default();
        c.fifo = false;
        c.reports_waiters = false;
        c
    }
}

locksmith_core::conformance_suite!(Redis { server: RedisServer::start() });
