//! The herd workload: W waiters, each with its own session (a separate process, as far as the
//! backend can tell), blocked on one lock; then R hand-offs, each granted waiter releasing at
//! once. Herd-freedom is measured as the drivers' waiter wake-ups per release: 1 is a perfect
//! hand-off (only the next waiter hears of it), W is a thundering herd.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use hdrhistogram::Histogram;
use locksmith::{Client, Guard, LockOptions};
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::counters;
use super::progress::Progress;
use super::stats::{histogram, record, Failure};
use super::workloads::close_all;

/// Sessions opened at once: enough to be quick, few enough not to flood a server's accept queue.
const OPENING_AT_ONCE: usize = 32;

/// Longest wait for one hand-off before the herd is reported as failed.
const HANDOFF_LIMIT: Duration = Duration::from_secs(10);

/// Longest time for all hand-offs together: a slow (polling) backend fails its herd row rather
/// than stretching a run over every backend by minutes.
const HANDOFFS_LIMIT: Duration = Duration::from_secs(60);

/// What the herd workload measured.
#[derive(Debug)]
pub(crate) struct Herd {
    /// Waiter wake-ups counted by the driver over the R hand-offs, divided by R; `None` when
    /// another `metrics` recorder was installed before the bench's.
    pub(crate) wakeups_per_release: Option<f64>,
    /// From the start of each release call until the next waiter's `lock()` returned, µs.
    pub(crate) handoff: Histogram<u64>,
}

/// Runs the herd on `name` with `waiters` waiters and `releases` hand-offs; every session is
/// closed at the end, whatever happened.
pub(crate) async fn herd(
    url: &str,
    ttl: Duration,
    name: &str,
    waiters: u32,
    releases: u32,
    progress: &Progress,
) -> Result<Herd, Failure> {
    let mut clients = Vec::with_capacity(waiters as usize + 1);
    let result = match open_sessions(url, ttl, waiters as usize + 1, &mut clients, progress).await {
        Ok(()) => run(&clients, name, releases, progress).await,
        Err(e) => Err(e),
    };
    progress.say(format!("herd on {}: closing {} sessions", locksmith::driver::redact(url), clients.len()));
    close_all(clients).await;
    result
}

/// Opens `n` sessions, [`OPENING_AT_ONCE`] at a time, into `clients`. On the first failure the
/// sessions still opening are awaited (and kept, so that they are closed) and the failure names
/// how many sessions the backend took.
async fn open_sessions(
    url: &str,
    ttl: Duration,
    n: usize,
    clients: &mut Vec<Client>,
    progress: &Progress,
) -> Result<(), Failure> {
    let mut opening = JoinSet::new();
    let mut failure = None;
    let mut asked = 0;
    loop {
        while failure.is_none() && asked < n && opening.len() < OPENING_AT_ONCE {
            let url = url.to_string();
            opening.spawn(async move {
                let client = locksmith::connect_with_ttl(&url, ttl).await?;
                client.session_id().await?;
                Ok::<_, locksmith::Error>(client)
            });
            asked += 1;
        }
        let Some(joined) = opening.join_next().await else { break };
        match joined {
            Ok(Ok(client)) => clients.push(client),
            Ok(Err(e)) => {
                failure.get_or_insert_with(|| format!("{e}"));
            }
            Err(e) => {
                failure.get_or_insert_with(|| format!("a task opening a session failed: {e}"));
            }
        }
        if clients.len().is_multiple_of(OPENING_AT_ONCE) {
            progress.say(format!("herd on {}: {}/{n} sessions open", locksmith::driver::redact(url), clients.len()));
        }
    }
    match failure {
        None => Ok(()),
        Some(e) => Err(Failure::Internal(format!("could not open {n} sessions (opened {}): {e}", clients.len()))),
    }
}

/// The holder takes the lock, every other client waits on it, then the hand-offs run; the
/// waiters still waiting are cancelled (their `lock()` futures dropped) at the end.
async fn run(clients: &[Client], name: &str, releases: u32, progress: &Progress) -> Result<Herd, Failure> {
    let Some((holder, waiters)) = clients.split_first() else {
        return Err(Failure::Internal("no sessions".into()));
    };
    let opts = LockOptions::new().allow_unfenced();
    let held = holder.lock_with(name, opts.clone()).await?;
    let (tx, mut rx) = mpsc::unbounded_channel();
    let started = Arc::new(AtomicU32::new(0));
    let mut tasks = JoinSet::new();
    for client in waiters {
        let (client, tx, started) = (client.clone(), tx.clone(), started.clone());
        let (name, opts) = (name.to_string(), opts.clone());
        tasks.spawn(async move {
            started.fetch_add(1, Ordering::Relaxed);
            let granted = client.lock_with(&name, opts).await.map(|g| (g, Instant::now()));
            let _ = tx.send(granted);
        });
    }
    drop(tx);
    progress.say(format!("herd: {} waiters queueing", waiters.len()));
    // Every waiter has asked once and is waiting (pushed, watching or polling) before the first
    // release; the settle time grows with the herd so that the slowest first attempts land.
    while (started.load(Ordering::Relaxed) as usize) < waiters.len() {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::time::sleep(Duration::from_millis(200) + Duration::from_millis(waiters.len() as u64)).await;
    let measured = handoffs(held, &mut rx, releases, progress).await;
    // Cancel the rest first, then give back any grant that slipped in meanwhile.
    tasks.shutdown().await;
    rx.close();
    while let Some(Ok((guard, _))) = rx.recv().await {
        let _ = guard.unlock().await;
    }
    let (herd, last) = measured?;
    last.unlock().await?;
    Ok(herd)
}

/// Releases `held`, then hands the lock on `releases` times; returns the figures and the last
/// waiter's guard (released by the caller once the others are cancelled).
async fn handoffs(
    held: Guard,
    rx: &mut mpsc::UnboundedReceiver<Result<(Guard, Instant), locksmith::Error>>,
    releases: u32,
    progress: &Progress,
) -> Result<(Herd, Guard), Failure> {
    let mut handoff = histogram()?;
    let before = counters::read(locksmith::metrics::WAKEUPS);
    let started = Instant::now();
    let mut released_at = started;
    held.unlock().await?;
    for i in 1..=releases {
        let limit = HANDOFF_LIMIT.min((started + HANDOFFS_LIMIT).saturating_duration_since(Instant::now()));
        let (guard, granted_at) = match tokio::time::timeout(limit, rx.recv()).await {
            Err(_) => {
                let (done, spent) = (i - 1, started.elapsed());
                return Err(Failure::Internal(format!(
                    "{done} of {releases} hand-offs in {spent:.1?}, then none within {limit:.1?}"
                )));
            }
            Ok(None) => return Err(Failure::Internal("every waiter stopped".into())),
            Ok(Some(Err(e))) => return Err(e.into()),
            Ok(Some(Ok(granted))) => granted,
        };
        record(&mut handoff, granted_at.saturating_duration_since(released_at));
        if i == releases {
            let after = counters::read(locksmith::metrics::WAKEUPS);
            let wakeups_per_release = before.zip(after).map(|(b, a)| a.saturating_sub(b) as f64 / f64::from(releases));
            return Ok((Herd { wakeups_per_release, handoff }, guard));
        }
        if i % 10 == 0 {
            progress.say(format!("herd: {i}/{releases} hand-offs"));
        }
        released_at = Instant::now();
        guard.unlock().await?;
    }
    Err(Failure::Internal("no hand-off measured".into()))
}
