//! The timed workloads: uncontended cycle, contended hand-off, many locks, semaphore permits and
//! a read/write lock. Each is a set of clients hammering lock→unlock cycles on names (each with
//! its kind of hold) until a deadline.

use std::time::Duration;

use locksmith::{Client, LockOptions};
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::stats::{record, Failure, Run, Tally};

/// Unrecorded lock→unlock cycles before the uncontended workload starts measuring.
pub const WARMUP_CYCLES: u32 = 200;

/// One lock→unlock cycle; returns how long the acquisition waited. Tokens are not used, so
/// backends without fencing (Redlock) are measured too.
async fn cycle(client: &Client, name: &str, opts: &LockOptions) -> Result<Duration, locksmith::Error> {
    let asked = Instant::now();
    let guard = client.lock_with(name, opts.clone().allow_unfenced()).await?;
    let waited = asked.elapsed();
    if guard.unlock().await? {
        Ok(waited)
    } else {
        Err(locksmith::Error::Lost(name.to_string()))
    }
}

/// Lock→unlock cycles on `name` until `deadline`, checked after each cycle.
async fn hammer(client: Client, (name, opts): (String, LockOptions), deadline: Instant) -> Result<Tally, Failure> {
    let mut tally = Tally::new()?;
    loop {
        let started = Instant::now();
        let waited = cycle(&client, &name, &opts).await?;
        record(&mut tally.cycle, started.elapsed());
        record(&mut tally.wait, waited);
        tally.acquisitions += 1;
        if Instant::now() >= deadline {
            return Ok(tally);
        }
    }
}

/// Runs one workload: a client per name in `names`, each hammering its name (with its kind of
/// hold) for `duration`.
/// Every client first opens its session and runs `warmup` unrecorded cycles; every client is
/// closed at the end, whatever happened.
pub(crate) async fn workload(
    url: &str,
    ttl: Duration,
    duration: Duration,
    names: Vec<(String, LockOptions)>,
    warmup: u32,
) -> Result<Run, Failure> {
    let mut clients = Vec::with_capacity(names.len());
    let result = match prepare(url, ttl, &names, warmup, &mut clients).await {
        Ok(()) => drive(&clients, names, duration).await,
        Err(e) => Err(e),
    };
    close_all(clients).await;
    result
}

/// Connects a client per name, opens its session (so the clock does not count it) and warms it.
async fn prepare(
    url: &str,
    ttl: Duration,
    names: &[(String, LockOptions)],
    warmup: u32,
    clients: &mut Vec<Client>,
) -> Result<(), Failure> {
    for (name, opts) in names {
        let client = locksmith::connect_with_ttl(url, ttl).await?;
        clients.push(client.clone());
        client.session_id().await?;
        for _ in 0..warmup {
            cycle(&client, name, opts).await?;
        }
    }
    Ok(())
}

/// Starts the clock and one worker per client; stops every worker on the first failure.
async fn drive(clients: &[Client], names: Vec<(String, LockOptions)>, duration: Duration) -> Result<Run, Failure> {
    let start = Instant::now();
    let deadline = start + duration;
    let mut workers = JoinSet::new();
    for (client, name) in clients.iter().cloned().zip(names) {
        workers.spawn(hammer(client, name, deadline));
    }
    let mut run = Run::new()?;
    while let Some(joined) = workers.join_next().await {
        let added = joined
            .map_err(|e| Failure::Internal(format!("a worker task failed: {e}")))
            .and_then(|tally| run.add(tally?));
        if let Err(failure) = added {
            // Wait until every other worker has dropped its guard before the clients close.
            workers.shutdown().await;
            return Err(failure);
        }
    }
    run.elapsed = start.elapsed();
    Ok(run)
}

/// Closes every client, at most `CLOSING_AT_ONCE` at a time (each close is bounded by the TTL).
pub(crate) async fn close_all(clients: Vec<Client>) {
    const CLOSING_AT_ONCE: usize = 64;
    let mut closing = JoinSet::new();
    for client in clients {
        if closing.len() >= CLOSING_AT_ONCE {
            closing.join_next().await;
        }
        closing.spawn(async move { client.close().await });
    }
    while closing.join_next().await.is_some() {}
}
