//! A job that must run once at a time, fenced: the token goes with every write, and the work is
//! cancelled if the lock is lost.
//!
//! ```text
//! cargo run -p locksmith --example fenced_job                       # in-process backend
//! cargo run -p locksmith --example fenced_job -- locksmith://127.0.0.1:7531
//! ```
use std::time::Duration;

use locksmith::LockOptions;

#[tokio::main]
async fn main() -> locksmith::Result<()> {
    let url = std::env::args().nth(1).unwrap_or_else(|| "memory://example".to_string());
    let client = locksmith::connect_with_ttl(&url, Duration::from_secs(5)).await?;

    // Explicit: acquire, check, use the token, release.
    let guard = client.lock_with("nightly-report", LockOptions::new().timeout(Duration::from_secs(10))).await?;
    println!("acquired nightly-report with fencing token {}", guard.token());
    write_report(guard.token()).await;
    println!("released, still ours until now: {}", guard.unlock().await?);

    // Scoped: the closure is cancelled if the lock is lost before it finishes.
    let rows = client
        .with_lock("nightly-report", LockOptions::new(), |token| async move {
            write_report(token).await;
            42
        })
        .await?;
    println!("scoped run wrote {rows} rows");
    client.close().await;
    Ok(())
}

/// Stands in for a write to storage that rejects tokens lower than the highest it has seen.
async fn write_report(token: u64) {
    tokio::time::sleep(Duration::from_millis(50)).await;
    println!("  wrote the report with token {token}");
}
