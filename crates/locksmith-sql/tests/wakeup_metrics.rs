//! Waiters count their wake-ups (`locksmith_waiter_wakeups_total{backend=…}`): one per re-check
//! of a busy lock, none for a first attempt (a `try_lock` on a held lock counts nothing).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use locksmith_testkit::PostgresServer;
use metrics::{Counter, CounterFn, Gauge, Histogram, Key, KeyName, Metadata, Recorder, SharedString, Unit};

/// Wake-ups counted so far, by `backend` label.
type Counts = Arc<Mutex<HashMap<String, u64>>>;

struct Wakeups(Counts, String);

impl CounterFn for Wakeups {
    fn increment(&self, value: u64) {
        *self.0.lock().unwrap().entry(self.1.clone()).or_default() += value;
    }
    fn absolute(&self, value: u64) {
        self.0.lock().unwrap().insert(self.1.clone(), value);
    }
}

/// Records only the wake-up counter.
struct Rec(Counts);

impl Recorder for Rec {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        if key.name() != locksmith_core::metrics::WAKEUPS {
            return Counter::noop();
        }
        let backend = key.labels().find(|l| l.key() == "backend").map(|l| l.value().to_string()).unwrap_or_default();
        Counter::from_arc(Arc::new(Wakeups(self.0.clone(), backend)))
    }
    fn register_gauge(&self, _: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::noop()
    }
    fn register_histogram(&self, _: &Key, _: &Metadata<'_>) -> Histogram {
        Histogram::noop()
    }
}

fn wakeups(backend: &str) -> u64 {
    static COUNTS: OnceLock<Counts> = OnceLock::new();
    let counts = COUNTS.get_or_init(|| {
        let c = Counts::default();
        metrics::set_global_recorder(Rec(c.clone())).unwrap();
        c
    });
    counts.lock().unwrap().get(backend).copied().unwrap_or(0)
}

/// A holder keeps `name` for 400 ms while a try_lock fails (no wake-up) and a waiter waits
/// (wake-ups counted under `backend`).
async fn waiter_counts_its_rechecks(url: &str, backend: &str) {
    let before = wakeups(backend);
    let holder = locksmith::connect(url).await.unwrap();
    let other = locksmith::connect(url).await.unwrap();
    let g = holder.lock("woken").await.unwrap();
    assert!(other.try_lock("woken").await.unwrap().is_none());
    assert_eq!(wakeups(backend), before, "a first attempt counted as a wake-up");
    let waiter = tokio::spawn(async move {
        let g = other.lock("woken").await.unwrap();
        assert!(g.unlock().await.unwrap());
        other.close().await;
    });
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(g.unlock().await.unwrap());
    waiter.await.unwrap();
    let woken = wakeups(backend) - before;
    // Polling with a 5 ms..200 ms backoff over 400 ms: a handful, not hundreds.
    assert!((1..=40).contains(&woken), "{backend}: {woken} wake-ups");
    holder.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_lease_waiter_counts_wakeups() {
    let dir = tempfile::tempdir().unwrap();
    waiter_counts_its_rechecks(&format!("sqlite://{}", dir.path().join("l.db").display()), "sqlite").await;
}

/// The PostgreSQL tests count under one label: they take turns.
static POSTGRES_COUNT: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_advisory_waiter_counts_wakeups() {
    let _turn = POSTGRES_COUNT.lock().await;
    let server = PostgresServer::start();
    waiter_counts_its_rechecks(&format!("{}?mode=advisory", server.url()), "postgres").await;
}

/// Lease table: a release's NOTIFY reaches every waiting client, which re-checks once and then
/// waits for the next NOTIFY (or its slow fallback timer) — not a burst of fast polls per
/// release (it was 5–6 re-checks per waiter per release).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_lease_waiters_recheck_about_once_per_notify() {
    const WAITERS: u64 = 10;
    let _turn = POSTGRES_COUNT.lock().await;
    let server = PostgresServer::start();
    let holder = locksmith::connect(&server.url()).await.unwrap();
    let mut held = holder.lock("notified").await.unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let mut clients = Vec::new();
    for _ in 0..WAITERS {
        let c = locksmith::connect(&server.url()).await.unwrap();
        clients.push(c.clone());
        let tx = tx.clone();
        tokio::spawn(async move {
            if let Ok(g) = c.lock("notified").await {
                let _ = tx.send(g);
            }
        });
    }
    // Long enough for every waiter's fallback timer to reach its 1 s cap.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let mut per_release = Vec::new();
    for waiting in (WAITERS - 4..WAITERS).rev() {
        let before = wakeups("postgres");
        assert!(held.unlock().await.unwrap());
        held = tokio::time::timeout(Duration::from_secs(3), rx.recv()).await.unwrap().unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
        let woken = wakeups("postgres") - before;
        per_release.push(woken);
        // Each of the `waiting + 1` clients re-checks once on the NOTIFY; a fallback timer may
        // add one more here and there.
        assert!(woken <= 2 * (waiting + 1), "{woken} re-checks for {} waiters: {per_release:?}", waiting + 1);
    }
    assert!(held.unlock().await.unwrap());
    for c in clients {
        c.close().await;
    }
    holder.close().await;
}
