//! `locksmith bench`: lock latency and throughput of one or more backends.
//!
//! Three workloads run against each backend:
//!
//! 1. *uncontended*: one client takes and releases one lock in a loop; the latency of each
//!    lock→unlock cycle (after [`WARMUP_CYCLES`] unrecorded ones) and cycles per second;
//! 2. *contended*: `--clients` clients, each with its own session, loop on one lock;
//!    acquisitions per second, fairness (fewest ÷ most acquisitions of one client, 1.0 is
//!    perfectly fair) and how long each acquisition waited;
//! 3. *many locks*: `--locks` clients loop each on a lock of its own; acquisitions per second.
//!
//! With several backends the workloads run backend by backend, `--rounds` times (every other
//! round in reverse order), so that a noisy machine disturbs every backend alike; each figure
//! reported is the median over the rounds.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::io::IsTerminal;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use hdrhistogram::Histogram;
use locksmith::Client;
use serde::Serialize;
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::exit;

/// Unrecorded lock→unlock cycles before the uncontended workload starts measuring.
pub const WARMUP_CYCLES: u32 = 200;

/// Largest latency the histograms tell apart (one hour, in µs); longer ones count as this.
const MAX_MICROS: u64 = 3_600_000_000;

/// Arguments of `locksmith bench`.
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Backend URL; repeat to compare backends (ratios are given to the first).
    #[arg(
        long = "backend",
        value_name = "URL",
        env = "LOCKSMITH_BACKEND",
        default_value = crate::DEFAULT_BACKEND
    )]
    pub backends: Vec<String>,
    /// How long each workload runs, per backend and round.
    #[arg(long, default_value = "3s", value_parser = positive_duration)]
    pub duration: Duration,
    /// Clients contending for one lock in the contended workload (at most 10000).
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub clients: u32,
    /// Clients, each with a lock of its own, in the many-locks workload (at most 10000).
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub locks: u32,
    /// Session lease of every client.
    #[arg(long, default_value = "10s", value_parser = crate::duration_arg)]
    pub ttl: Duration,
    /// Print one JSON document instead of a table.
    #[arg(long)]
    pub json: bool,
    /// How many times to run every workload on every backend; figures are medians over rounds.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub rounds: u32,
}

/// Parses a duration for clap and refuses zero.
fn positive_duration(s: &str) -> Result<Duration, String> {
    match crate::duration_arg(s)? {
        d if d.is_zero() => Err("must be longer than zero".into()),
        d => Ok(d),
    }
}

/// What one backend achieved in one round (or the medians over rounds).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Figures {
    /// Uncontended lock→unlock cycle, median, µs.
    pub cycle_p50_us: f64,
    /// Uncontended lock→unlock cycle, 99th percentile, µs.
    pub cycle_p99_us: f64,
    /// Uncontended lock→unlock cycle, slowest, µs.
    pub cycle_max_us: f64,
    /// Uncontended lock→unlock cycles per second.
    pub cycles_per_sec: f64,
    /// Contended workload: acquisitions per second over all clients.
    pub contended_acq_per_sec: f64,
    /// Contended workload: fewest ÷ most acquisitions of one client (1.0 is perfectly fair).
    pub fairness: f64,
    /// Contended workload: wait for an acquisition, median, µs.
    pub wait_p50_us: f64,
    /// Contended workload: wait for an acquisition, 99th percentile, µs.
    pub wait_p99_us: f64,
    /// Many-locks workload: acquisitions per second over all clients.
    pub many_acq_per_sec: f64,
}

impl Figures {
    /// The figures of one round from its three workloads.
    fn from_runs(uncontended: &Run, contended: &Run, many: &Run) -> Self {
        Self {
            cycle_p50_us: uncontended.cycle.value_at_quantile(0.5) as f64,
            cycle_p99_us: uncontended.cycle.value_at_quantile(0.99) as f64,
            cycle_max_us: uncontended.cycle.max() as f64,
            cycles_per_sec: uncontended.rate(),
            contended_acq_per_sec: contended.rate(),
            fairness: contended.fairness(),
            wait_p50_us: contended.wait.value_at_quantile(0.5) as f64,
            wait_p99_us: contended.wait.value_at_quantile(0.99) as f64,
            many_acq_per_sec: many.rate(),
        }
    }

    /// Each figure's median over `rounds`.
    fn median(rounds: &[Round]) -> Self {
        let m = |field: fn(&Figures) -> f64| median(rounds.iter().map(|r| field(&r.figures)));
        Self {
            cycle_p50_us: m(|f| f.cycle_p50_us),
            cycle_p99_us: m(|f| f.cycle_p99_us),
            cycle_max_us: m(|f| f.cycle_max_us),
            cycles_per_sec: m(|f| f.cycles_per_sec),
            contended_acq_per_sec: m(|f| f.contended_acq_per_sec),
            fairness: m(|f| f.fairness),
            wait_p50_us: m(|f| f.wait_p50_us),
            wait_p99_us: m(|f| f.wait_p99_us),
            many_acq_per_sec: m(|f| f.many_acq_per_sec),
        }
    }
}

/// One round on one backend, as printed by `--json`.
#[derive(Debug, Serialize)]
struct Round {
    #[serde(flatten)]
    figures: Figures,
    /// Contended workload: acquisitions of each client.
    contended_acquisitions: Vec<u64>,
}

/// Every round on one backend, and the medians.
#[derive(Debug, Serialize)]
struct BackendReport {
    backend: String,
    rounds: Vec<Round>,
    median: Figures,
}

/// The `--json` document.
#[derive(Debug, Serialize)]
struct Report {
    duration_ms: u128,
    ttl_ms: u128,
    clients: u32,
    locks: u32,
    rounds: u32,
    warmup_cycles: u32,
    backends: Vec<BackendReport>,
}

/// Why a workload stopped early.
#[derive(Debug)]
enum Failure {
    /// A backend call failed.
    Backend(locksmith::Error),
    /// The bench itself failed (a histogram, a worker task).
    Internal(String),
}

impl From<locksmith::Error> for Failure {
    fn from(e: locksmith::Error) -> Self {
        Self::Backend(e)
    }
}

/// What one worker did: its acquisitions and their latencies.
#[derive(Debug)]
struct Tally {
    acquisitions: u64,
    /// Wait for each acquisition, µs.
    wait: Histogram<u64>,
    /// Each whole lock→unlock cycle, µs.
    cycle: Histogram<u64>,
}

impl Tally {
    fn new() -> Result<Self, Failure> {
        Ok(Self { acquisitions: 0, wait: histogram()?, cycle: histogram()? })
    }
}

/// What all workers of one workload did together.
#[derive(Debug)]
struct Run {
    /// Acquisitions of each worker.
    acquisitions: Vec<u64>,
    wait: Histogram<u64>,
    cycle: Histogram<u64>,
    /// From the common start until the last worker stopped.
    elapsed: Duration,
}

impl Run {
    fn new() -> Result<Self, Failure> {
        Ok(Self { acquisitions: Vec::new(), wait: histogram()?, cycle: histogram()?, elapsed: Duration::ZERO })
    }

    fn add(&mut self, tally: Tally) -> Result<(), Failure> {
        let merge_failed = |e: hdrhistogram::AdditionError| Failure::Internal(format!("merging histograms: {e}"));
        self.wait.add(&tally.wait).map_err(merge_failed)?;
        self.cycle.add(&tally.cycle).map_err(merge_failed)?;
        self.acquisitions.push(tally.acquisitions);
        Ok(())
    }

    /// Acquisitions per second over all workers.
    fn rate(&self) -> f64 {
        let secs = self.elapsed.as_secs_f64();
        if secs > 0.0 {
            self.acquisitions.iter().sum::<u64>() as f64 / secs
        } else {
            0.0
        }
    }

    /// Fewest ÷ most acquisitions of one worker.
    fn fairness(&self) -> f64 {
        let min = self.acquisitions.iter().copied().min().unwrap_or(0);
        let max = self.acquisitions.iter().copied().max().unwrap_or(0);
        if max > 0 {
            min as f64 / max as f64
        } else {
            0.0
        }
    }
}

fn histogram() -> Result<Histogram<u64>, Failure> {
    Histogram::new_with_bounds(1, MAX_MICROS, 3).map_err(|e| Failure::Internal(format!("creating a histogram: {e}")))
}

fn record(histogram: &mut Histogram<u64>, d: Duration) {
    histogram.saturating_record(u64::try_from(d.as_micros()).unwrap_or(u64::MAX));
}

fn median(values: impl Iterator<Item = f64>) -> f64 {
    let mut v: Vec<f64> = values.collect();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    match (v.get(n / 2), n % 2) {
        (Some(&mid), 1) => mid,
        (Some(&high), _) => v.get(n / 2 - 1).map_or(high, |&low| (low + high) / 2.0),
        (None, _) => 0.0,
    }
}

/// One lock→unlock cycle; returns how long the acquisition waited. Tokens are not used, so
/// backends without fencing (Redlock) are measured too.
async fn cycle(client: &Client, name: &str) -> Result<Duration, locksmith::Error> {
    let asked = Instant::now();
    let guard = client.lock_with(name, locksmith::LockOptions::new().allow_unfenced()).await?;
    let waited = asked.elapsed();
    if guard.unlock().await? {
        Ok(waited)
    } else {
        Err(locksmith::Error::Lost(name.to_string()))
    }
}

/// Lock→unlock cycles on `name` until `deadline`, checked after each cycle.
async fn hammer(client: Client, name: String, deadline: Instant) -> Result<Tally, Failure> {
    let mut tally = Tally::new()?;
    loop {
        let started = Instant::now();
        let waited = cycle(&client, &name).await?;
        record(&mut tally.cycle, started.elapsed());
        record(&mut tally.wait, waited);
        tally.acquisitions += 1;
        if Instant::now() >= deadline {
            return Ok(tally);
        }
    }
}

/// Runs one workload: a client per name in `names`, each hammering its name for `duration`.
/// Every client first opens its session and runs `warmup` unrecorded cycles; every client is
/// closed at the end, whatever happened.
async fn workload(
    url: &str,
    ttl: Duration,
    duration: Duration,
    names: Vec<String>,
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
    names: &[String],
    warmup: u32,
    clients: &mut Vec<Client>,
) -> Result<(), Failure> {
    for name in names {
        let client = locksmith::connect_with_ttl(url, ttl).await?;
        clients.push(client.clone());
        client.session_id().await?;
        for _ in 0..warmup {
            cycle(&client, name).await?;
        }
    }
    Ok(())
}

/// Starts the clock and one worker per client; stops every worker on the first failure.
async fn drive(clients: &[Client], names: Vec<String>, duration: Duration) -> Result<Run, Failure> {
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

/// Closes every client at once (each close is bounded by the TTL).
async fn close_all(clients: Vec<Client>) {
    let mut closing = JoinSet::new();
    for client in clients {
        closing.spawn(async move { client.close().await });
    }
    while closing.join_next().await.is_some() {}
}

/// All three workloads on one backend; `tag` makes the lock names unique.
async fn measure(url: &str, args: &BenchArgs, tag: &str) -> Result<Round, (&'static str, Failure)> {
    let (ttl, duration) = (args.ttl, args.duration);
    let uncontended =
        workload(url, ttl, duration, vec![format!("{tag}-u")], WARMUP_CYCLES).await.map_err(|f| ("uncontended", f))?;
    let contended_names = vec![format!("{tag}-c"); args.clients as usize];
    let contended = workload(url, ttl, duration, contended_names, 0).await.map_err(|f| ("contended", f))?;
    let many_names = (0..args.locks).map(|i| format!("{tag}-m{i}")).collect();
    let many = workload(url, ttl, duration, many_names, 0).await.map_err(|f| ("many-locks", f))?;
    Ok(Round {
        figures: Figures::from_runs(&uncontended, &contended, &many),
        contended_acquisitions: contended.acquisitions,
    })
}

/// Prints what stopped the bench and returns the exit code for it.
fn report_failure(url: &str, workload: &str, failure: Failure) -> ExitCode {
    match failure {
        Failure::Backend(e) => exit::report(&format!("bench: {workload} workload on {url}"), &e),
        Failure::Internal(message) => {
            eprintln!("locksmith bench: {workload} workload on {url}: {message}");
            ExitCode::from(exit::SOFTWARE)
        }
    }
}

/// Runs the benchmark and prints a table (or `--json`). Exit codes: 0 done; 2 bad arguments;
/// 69 a backend unreachable; 1 (or the library error's code) for any other backend error.
///
/// # Cancel safety
/// Dropping it abandons the workloads; their sessions expire on the server after the TTL.
pub async fn bench(args: BenchArgs) -> ExitCode {
    // Refuse a bad URL or TTL before anything runs (no I/O happens here).
    for url in &args.backends {
        if let Err(e) = locksmith::connect_with_ttl(url, args.ttl).await {
            return exit::report("bench", &e);
        }
    }
    let run_id = RandomState::new().hash_one(std::process::id());
    let progress = std::io::stderr().is_terminal();
    let mut rounds: Vec<Vec<Round>> = args.backends.iter().map(|_| Vec::new()).collect();
    for round in 0..args.rounds {
        let mut order: Vec<usize> = (0..args.backends.len()).collect();
        if round % 2 == 1 {
            order.reverse();
        }
        for i in order {
            let url = &args.backends[i];
            if progress {
                eprintln!("locksmith bench: round {}/{} on {url}", round + 1, args.rounds);
            }
            match measure(url, &args, &format!("bench-{run_id:016x}-r{round}-b{i}")).await {
                Ok(r) => rounds[i].push(r),
                Err((workload, failure)) => return report_failure(url, workload, failure),
            }
        }
    }
    let reports: Vec<BackendReport> = args
        .backends
        .iter()
        .zip(rounds)
        .map(|(url, rounds)| BackendReport { backend: url.clone(), median: Figures::median(&rounds), rounds })
        .collect();
    if args.json {
        print_json(&args, reports)
    } else {
        print_table(&args, &reports);
        ExitCode::SUCCESS
    }
}

fn print_json(args: &BenchArgs, backends: Vec<BackendReport>) -> ExitCode {
    let report = Report {
        duration_ms: args.duration.as_millis(),
        ttl_ms: args.ttl.as_millis(),
        clients: args.clients,
        locks: args.locks,
        rounds: args.rounds,
        warmup_cycles: WARMUP_CYCLES,
        backends,
    };
    match serde_json::to_string_pretty(&report) {
        Ok(text) => {
            println!("{text}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("locksmith bench: cannot write JSON: {e}");
            ExitCode::from(exit::SOFTWARE)
        }
    }
}

/// One column of the table: its title, the figure, and its decimals.
struct Column {
    title: String,
    value: fn(&Figures) -> f64,
    decimals: usize,
}

fn columns(args: &BenchArgs) -> Vec<Column> {
    let col = |title: &str, value: fn(&Figures) -> f64, decimals| Column { title: title.into(), value, decimals };
    vec![
        col("cycle p50 µs", |f| f.cycle_p50_us, 0),
        col("cycle p99 µs", |f| f.cycle_p99_us, 0),
        col("cycle max µs", |f| f.cycle_max_us, 0),
        col("cycles/s", |f| f.cycles_per_sec, 0),
        col(&format!("{}×1 acq/s", args.clients), |f| f.contended_acq_per_sec, 0),
        col("fairness", |f| f.fairness, 2),
        col("wait p50 µs", |f| f.wait_p50_us, 0),
        col("wait p99 µs", |f| f.wait_p99_us, 0),
        col(&format!("{0}×{0} acq/s", args.locks), |f| f.many_acq_per_sec, 0),
    ]
}

fn print_table(args: &BenchArgs, reports: &[BackendReport]) {
    let columns = columns(args);
    let mut rows =
        vec![std::iter::once("backend".to_string()).chain(columns.iter().map(|c| c.title.clone())).collect()];
    for r in reports {
        let cells = columns.iter().map(|c| format!("{:.*}", c.decimals, (c.value)(&r.median)));
        rows.push(std::iter::once(r.backend.clone()).chain(cells).collect());
    }
    let what = if args.rounds > 1 { format!(", medians of {} rounds", args.rounds) } else { String::new() };
    println!("{:?} per workload, TTL {:?}{what}", args.duration, args.ttl);
    print_rows(&rows);
    let Some((first, others)) = reports.split_first() else {
        return;
    };
    for r in others {
        let ratios: Vec<String> = columns
            .iter()
            .map(|c| format!("{} {}", c.title, ratio((c.value)(&r.median), (c.value)(&first.median))))
            .collect();
        println!("{} ÷ {}: {}", r.backend, first.backend, ratios.join(", "));
    }
}

/// Prints `rows` as aligned columns: the first to the left, the others to the right.
fn print_rows(rows: &[Vec<String>]) {
    let mut widths: Vec<usize> = Vec::new();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            let w = cell.chars().count();
            match widths.get_mut(i) {
                Some(width) => *width = (*width).max(w),
                None => widths.push(w),
            }
        }
    }
    for row in rows {
        let cells: Vec<String> = row
            .iter()
            .zip(&widths)
            .enumerate()
            .map(|(i, (cell, &w))| if i == 0 { format!("{cell:<w$}") } else { format!("{cell:>w$}") })
            .collect();
        println!("{}", cells.join(" | "));
    }
}

/// `×a/base`, or `-` when the base is zero.
fn ratio(value: f64, base: f64) -> String {
    if base > 0.0 && value.is_finite() {
        format!("×{:.2}", value / base)
    } else {
        "-".into()
    }
}
