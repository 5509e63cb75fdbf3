//! The shared contract suite against a real PostgreSQL 15 in row-lock mode (`SELECT … FOR UPDATE`
//! in an open transaction; one server shared by the tests of this binary, every test uses its
//! own lock names).

use std::sync::OnceLock;
use std::time::Duration;

use locksmith_core::conformance::{Caps, Target};
use locksmith_testkit::PostgresServer;

static SERVER: OnceLock<PostgresServer> = OnceLock::new();

struct Pg {
    url: String,
}

impl Pg {
    fn shared() -> Self {
        Self { url: format!("{}?mode=row_lock", SERVER.get_or_init(PostgresServer::start).url()) }
    }
}

#[async_trait::async_trait]
impl Target for Pg {
    fn url(&self) -> String {
        self.url.clone()
    }
    async fn client(&self, ttl: Duration) -> locksmith::Result<locksmith::Client> {
        locksmith::connect_with_ttl(&self.url, ttl).await
    }
    fn caps(&self) -> Caps {
        let mut c = Caps::default();
        c.fifo = false;
        c.reports_waiters = false;
        c
    }
}

locksmith_core::conformance_suite!(Pg::shared());
