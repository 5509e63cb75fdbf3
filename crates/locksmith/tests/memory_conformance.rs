//! The contract suite against `memory://` (the server's logic in-process).

use std::time::Duration;

use locksmith_core::conformance::Target;

struct Memory {
    url: String,
}

impl Memory {
    fn new() -> Self {
        Self { url: format!("memory://conformance-{:x}", std::process::id() as u64 * 1_000_003 + next()) }
    }
}

fn next() -> u64 {
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

#[async_trait::async_trait]
impl Target for Memory {
    fn url(&self) -> String {
        self.url.clone()
    }
    async fn client(&self, ttl: Duration) -> locksmith::Result<locksmith::Client> {
        locksmith::connect_with_ttl(&self.url, ttl).await
    }
}

locksmith_core::conformance_suite!(Memory::new());
