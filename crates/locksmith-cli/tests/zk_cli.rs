//! `locksmith run` against a real ZooKeeper: the process properties of the contract (kill -9,
//! SIGSTOP past the TTL = session expiry, Ctrl-C while waiting, exit codes) on `zk://`.

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

use locksmith_core::conformance::{Caps, Target};
use locksmith_testkit::ZkServer;

const BIN: &str = env!("CARGO_BIN_EXE_locksmith");

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
    fn cli(&self) -> Option<PathBuf> {
        Some(BIN.into())
    }
}

locksmith_core::process_conformance_suite!(Zk::shared());
