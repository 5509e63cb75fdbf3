//! The shared contract suite against a real ZooKeeper (one server shared by the tests of this
//! binary; every test uses its own lock names).

use std::sync::OnceLock;
use std::time::Duration;

use locksmith_core::conformance::{Caps, Target};
use locksmith_testkit::ZkServer;

static SERVER: OnceLock<ZkServer> = OnceLock::new();

struct Zk {
    url: String,
}

impl Zk {
    fn shared() -> Self {
        Self { url: SERVER.get_or_init(ZkServer::start).url() }
    }
}

#[async_trait::async_trait]
impl Target for Zk {
    fn url(&self) -> String {
        self.url.clone()
    }
    async fn client(&self, ttl: Duration) -> locksmith::Result<locksmith::Client> {
        locksmith::connect_with_ttl(&self.url, ttl).await
    }
    fn caps(&self) -> Caps {
        let mut c = Caps::default();
        c.fifo = true;
        c.reports_waiters = true;
        c
    }
}

locksmith_core::conformance_suite!(Zk::shared());
