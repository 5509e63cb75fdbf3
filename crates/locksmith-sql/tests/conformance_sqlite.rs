//! The shared contract suite against SQLite: one database file (in cargo's per-target temp
//! dir) shared by the tests of this binary; every test uses its own lock names.

use std::sync::OnceLock;
use std::time::Duration;

use locksmith_core::conformance::{Caps, Target};

static URL: OnceLock<String> = OnceLock::new();

struct Lite {
    url: String,
}

impl Lite {
    fn shared() -> Self {
        let url = URL.get_or_init(|| {
            let path = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
                .join(format!("locksmith-sql-conformance-{}.db", std::process::id()));
            format!("sqlite://{}", path.display())
        });
        Self { url: url.clone() }
    }
}

#[async_trait::async_trait]
impl Target for Lite {
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

locksmith_core::conformance_suite!(Lite::shared());
