//! Issue 17's attack on the native server as a bench scenario: a session with a huge queue of
//! waiters on one lock ends while an unrelated client keeps locking; prints that client's
//! latency while the session ends.
//!
//! ```text
//! cargo build --release -p locksmith-cli --example hostile_load
//! target/release/examples/hostile_load target/release/locksmith [WAITERS]   # default 100,000
//! ```
//!
//! Two rounds: (a) one session with WAITERS queued acquires (the server started with its
//! per-session limit raised to allow it), closed; (b) the default limits: WAITERS / 10,000
//! sessions of 10,000 waiters each (one session cannot queue more), all closed at once.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use locksmith_testkit::{NativeServer, RawSession};

/// lock→unlock cycles of an unrelated client, with when each started.
async fn probe(url: String, stop: Arc<AtomicBool>, out: Arc<Mutex<Vec<(Instant, Duration)>>>) {
    let Ok(c) = locksmith::connect(&url).await else { return };
    while !stop.load(Ordering::SeqCst) {
        let t = Instant::now();
        let Ok(g) = c.lock("probe").await else { return };
        let _ = g.unlock().await;
        if let Ok(mut v) = out.lock() {
            v.push((t, t.elapsed()));
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    c.close().await;
}

fn quantile(sorted: &[Duration], q: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

async fn round(bin: &str, waiters: usize, sessions: usize, extra: &[&str]) {
    let s = NativeServer::start_with(bin.as_ref(), extra);
    let holder = locksmith::connect(&s.url()).await.expect("connect");
    let held = holder.lock("flood").await.expect("hold the flooded lock");
    let mut floods = Vec::new();
    for _ in 0..sessions {
        let mut raw = RawSession::open(s.port(), 60_000).await;
        let (queued, refused) = raw.queue_waiters("flood", waiters / sessions, 5_000).await;
        assert!(refused.is_none(), "queueing refused after {queued}: {refused:?}");
        floods.push(raw);
    }
    let stop = Arc::new(AtomicBool::new(false));
    let samples = Arc::new(Mutex::new(Vec::new()));
    let prober = tokio::spawn(probe(s.url(), stop.clone(), samples.clone()));
    tokio::time::sleep(Duration::from_millis(500)).await;
    let closed = Instant::now();
    for raw in &mut floods {
        raw.close();
    }
    // Until the server shows the queue empty, then one more second of probing.
    loop {
        let st = holder.status(Some("flood")).await.expect("status");
        if st.first().and_then(|l| l.waiters) == Some(0) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let emptied = closed.elapsed();
    tokio::time::sleep(Duration::from_secs(1)).await;
    stop.store(true, Ordering::SeqCst);
    let _ = prober.await;
    let all = samples.lock().map(|v| v.clone()).unwrap_or_default();
    let mut during: Vec<Duration> = all.iter().filter(|(t, _)| *t >= closed).map(|(_, d)| *d).collect();
    during.sort();
    let mut before: Vec<Duration> = all.iter().filter(|(t, _)| *t < closed).map(|(_, d)| *d).collect();
    before.sort();
    println!(
        "{waiters} waiters in {sessions} session(s): queue emptied {emptied:.1?} after the close; probe before \
         p50 {:?} p99 {:?} ({} cycles); from the close on p50 {:?} p99 {:?} max {:?} ({} cycles)",
        quantile(&before, 0.5),
        quantile(&before, 0.99),
        before.len(),
        quantile(&during, 0.5),
        quantile(&during, 0.99),
        during.last().copied().unwrap_or_default(),
        during.len()
    );
    let _ = held.unlock().await;
    holder.close().await;
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let mut args = std::env::args().skip(1);
    let bin = args.next().unwrap_or_else(|| "target/release/locksmith".into());
    let waiters: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(100_000);
    let raised = waiters.to_string();
    let per_lock = (waiters * 2).to_string();
    round(&bin, waiters, 1, &["--max-entries-per-session", &raised, "--max-waiters-per-lock", &per_lock]).await;
    round(&bin, waiters, waiters.div_ceil(10_000), &["--max-waiters-per-lock", &per_lock]).await;
}
