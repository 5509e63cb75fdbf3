//! The contract suite against a real `locksmith serve` process (one per test).

use std::path::PathBuf;
use std::time::Duration;

use locksmith_core::conformance::Target;
use locksmith_testkit::NativeServer;

struct Native {
    server: NativeServer,
}

impl Native {
    fn start() -> Self {
        Self { server: NativeServer::start(env!("CARGO_BIN_EXE_locksmith").as_ref()) }
    }
}

#[async_trait::async_trait]
impl Target for Native {
    fn url(&self) -> String {
        self.server.url()
    }
    async fn client(&self, ttl: Duration) -> locksmith::Result<locksmith::Client> {
        locksmith::connect_with_ttl(&self.server.url(), ttl).await
    }
    fn cli(&self) -> Option<PathBuf> {
        Some(env!("CARGO_BIN_EXE_locksmith").into())
    }
}

locksmith_core::conformance_suite!(Native::start());
locksmith_core::process_conformance_suite!(Native::start());
