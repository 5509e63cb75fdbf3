//! The contract suite against `memory://` (the server's logic in-process), a fresh space per test.

use std::sync::atomic::{AtomicU64, Ordering};

use locksmith_core::conformance::UrlTarget;

fn memory() -> UrlTarget {
    static N: AtomicU64 = AtomicU64::new(0);
    let url = format!("memory://conformance-{}-{}", std::process::id(), N.fetch_add(1, Ordering::Relaxed));
    UrlTarget::new(url, locksmith::backend)
}

locksmith_core::conformance_suite!(memory());
locksmith_core::primitives_suite!(memory());
