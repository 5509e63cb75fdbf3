//! `locksmith bench`: lock latency and throughput of one or more backends. The `locksmith`
//! binary parses [`BenchArgs`] and calls [`bench()`]; this crate keeps the measuring, the
//! raw-recipe baselines with their client crates, the tables, JSON and plots out of the
//! binary's crate (`locksmith-cli` turns it on with its `bench` feature).
//!
//! Five workloads (select with `--workloads`; all by default) run against each backend:
//!
//! 1. *uncontended*: one client takes and releases one lock in a loop; the latency of each
//!    lock→unlock cycle (after [`WARMUP_CYCLES`] unrecorded ones) and cycles per second;
//! 2. *contended*: `--clients` clients, each with its own session, loop on one lock;
//!    acquisitions per second, fairness (fewest ÷ most acquisitions of one client, 1.0 is
//!    perfectly fair) and how long each acquisition waited;
//! 3. *many*: `--locks` clients loop each on a lock of its own; acquisitions per second;
//! 4. *herd*: `--waiters` waiters, a session each, block on one lock, then `--releases`
//!    hand-offs: the drivers' waiter wake-ups per release (1 is herd-free) and the hand-off
//!    latency. A backend that cannot hold that many sessions gets a failed herd row; the other
//!    workloads still run;
//! 5. *baseline*: the uncontended cycle of the plain recipe (e.g. `SET NX PX` + Lua delete) on
//!    the same server without locksmith's engine, for backends that have one: the driver's
//!    overhead is the ratio of the two.
//!
//! With several backends the workloads run backend by backend, `--rounds` times (every other
//! round in reverse order), so that a noisy machine disturbs every backend alike; each figure
//! reported is the median over the rounds. A table goes to stdout (or one JSON document with
//! `--json`), `--plot FILE.svg` draws the results, and a progress bar shows on stderr when it is
//! a terminal.
//!
//! With `--floor-dir DIR` each round first measures the floor (see [`Floor`]): the TCP round
//! trip to each backend's host and `fdatasync` of a small append in `DIR`, printed as a floor
//! row, with every native row's cycle p50 also given as × floor (`2 × RTT + fdatasync`).
//!
//! # Features
//!
//! One per backend family, all on by default; each turns on the `locksmith` facade's driver
//! and, where the backend has a plain recipe, that baseline and its client crate:
//!
//! - `redis`: `redis://` (baseline `SET NX PX` + Lua delete, the `redis` crate);
//! - `redlock`: `redlock://` (no baseline);
//! - `memcached`: `memcached://` (no baseline);
//! - `etcd`: `etcd://` (baseline txn on a lease, the driver's raw client);
//! - `zk`: `zk://` (baseline ephemeral node, `zookeeper-client`);
//! - `sql`: `postgres://`, `mysql://`, `sqlite://` (baselines advisory lock and `GET_LOCK`,
//!   `sqlx`).
//!
//! The native server (`locksmith://`) and `memory://` are always measured.
#![warn(missing_docs, missing_debug_implementations, rust_2018_idioms)]

mod args;
mod baseline;
mod counters;
mod example_args;
mod floor;
mod herd;
mod plot;
mod progress;
mod report;
mod stats;
mod table;
mod workloads;

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::process::ExitCode;

pub use args::{BenchArgs, Workload};
pub use example_args::ExampleArgs;
pub use floor::Floor;
pub use report::Figures;
pub use workloads::WARMUP_CYCLES;

use locksmith::LockOptions;
use locksmith_cli_common::exit;
use progress::Progress;
use report::{workload_name, BackendReport, Report, Round};
use stats::Failure;

/// Runs the benchmark and prints a table (or `--json`). Exit codes: 0 done; 2 bad arguments;
/// 69 a backend unreachable; 1 (or the library error's code) for any other backend error; 70
/// when the plot cannot be written; 74 when the `--floor-dir` probe cannot write or sync its
/// file. A failed herd or baseline is reported in its row, not as an
/// exit code.
///
/// # Cancel safety
/// Dropping it abandons the workloads; their sessions expire on the server after the TTL.
pub async fn bench(args: BenchArgs) -> ExitCode {
    // Refuse a bad URL, TTL or plot file before anything runs (no I/O happens here).
    for url in &args.backends {
        if let Err(e) = locksmith::connect_with_ttl(url, args.ttl).await {
            return exit::report("bench", &e);
        }
    }
    if let Some(Err(e)) = args.plot.as_deref().map(plot::check_path) {
        eprintln!("locksmith bench: --plot: {e}");
        return ExitCode::from(exit::USAGE);
    }
    if let Some(dir) = args.floor_dir.as_deref().filter(|d| !d.is_dir()) {
        eprintln!("locksmith bench: --floor-dir {}: not a directory", dir.display());
        return ExitCode::from(exit::USAGE);
    }
    if args.runs(Workload::Herd) && args.releases >= args.waiters {
        eprintln!("locksmith bench: --releases must be fewer than --waiters");
        return ExitCode::from(exit::USAGE);
    }
    // The recorder costs every grant and release a little: install it before anything is
    // measured, so that no backend or round runs without it while others run with it.
    let _ = counters::read(locksmith::metrics::WAKEUPS);
    let run_id = RandomState::new().hash_one(std::process::id());
    let steps = u64::from(args.rounds) * args.backends.len() as u64 * args.workloads.len() as u64;
    let progress = Progress::new(steps);
    let mut rounds: Vec<Vec<Round>> = args.backends.iter().map(|_| Vec::new()).collect();
    for round in 0..args.rounds {
        let mut order: Vec<usize> = (0..args.backends.len()).collect();
        if round % 2 == 1 {
            order.reverse();
        }
        let floors = match &args.floor_dir {
            Some(dir) => {
                progress.say(format!("round {}/{}: floor", round + 1, args.rounds));
                match measure_floor(dir, &args.backends).await {
                    Ok(floors) => floors.into_iter().map(Some).collect(),
                    Err(e) => {
                        progress.finish();
                        eprintln!("locksmith bench: --floor-dir {}: {e}", dir.display());
                        return ExitCode::from(exit::IOERR);
                    }
                }
            }
            None => vec![None; args.backends.len()],
        };
        for i in order {
            let url = &args.backends[i];
            let tag = format!("bench-{run_id:016x}-r{round}-b{i}");
            match measure(url, &args, &tag, round, &progress).await {
                Ok(mut r) => {
                    r.floor = floors[i];
                    if floor::is_native(url) {
                        r.figures.cycle_x_floor = r.floor.and_then(|f| f.times(r.figures.cycle_p50_us));
                    }
                    rounds[i].push(r);
                }
                Err((workload, failure)) => {
                    progress.finish();
                    return report_failure(url, workload, failure);
                }
            }
        }
    }
    progress.finish();
    let reports: Vec<BackendReport> = args
        .backends
        .iter()
        .zip(rounds)
        .map(|(url, rounds)| {
            let floor = args.floor_dir.as_ref().map(|_| Floor::median(rounds.iter().filter_map(|r| r.floor.as_ref())));
            let mut median = Figures::median(&rounds);
            if floor::is_native(url) {
                median.cycle_x_floor = floor.and_then(|f| f.times(median.cycle_p50_us));
            }
            BackendReport {
                // Reports, tables, plots and their legends are shared: never with a password.
                backend: locksmith::driver::redact(url),
                baseline_recipe: baseline::recipe(url).filter(|_| args.runs(Workload::Baseline)),
                median,
                floor,
                rounds,
            }
        })
        .collect();
    let code = if args.json {
        print_json(&args, &reports)
    } else {
        table::print(&args, &reports);
        ExitCode::SUCCESS
    };
    if let Some(path) = &args.plot {
        if let Err(e) = plot::draw(path, &reports, args.clients, args.locks) {
            eprintln!("locksmith bench: {}: {e}", path.display());
            return ExitCode::from(exit::SOFTWARE);
        }
    }
    code
}

/// One round's floor for each backend: one `fdatasync` measurement in `dir` shared by all, and
/// the round trip to each distinct host (none for a backend without one). A round trip that
/// cannot be measured is reported on stderr and left out; a failing `fdatasync` is an error.
async fn measure_floor(dir: &std::path::Path, backends: &[String]) -> std::io::Result<Vec<Floor>> {
    let sync = floor::fdatasync(dir).await?;
    let mut rtts: Vec<((String, u16), Option<f64>)> = Vec::new();
    let mut floors = Vec::with_capacity(backends.len());
    for url in backends {
        let rtt = match floor::host_of(url) {
            None => None,
            Some(host) => match rtts.iter().find(|(h, _)| h.0 == host.0) {
                Some((_, rtt)) => *rtt,
                None => {
                    let rtt = match floor::rtt(&host.0, host.1).await {
                        Ok(rtt) => Some(rtt),
                        Err(e) => {
                            eprintln!("locksmith bench: round trip to {}: {e}", host.0);
                            None
                        }
                    };
                    rtts.push((host, rtt));
                    rtt
                }
            },
        };
        floors.push(Floor::new(rtt, Some(sync)));
    }
    Ok(floors)
}

/// Every selected workload on one backend, in order; `tag` makes the lock names unique. A
/// failed timed workload stops the bench; a failed herd or baseline is kept in the round.
async fn measure(
    url: &str,
    args: &BenchArgs,
    tag: &str,
    round: u32,
    progress: &Progress,
) -> Result<Round, (&'static str, Failure)> {
    let (ttl, duration) = (args.ttl, args.duration);
    let mut r = Round::new();
    for &w in &args.workloads {
        let shown = locksmith::driver::redact(url);
        progress.say(format!("round {}/{}: {} on {shown}", round + 1, args.rounds, workload_name(w)));
        match w {
            Workload::Uncontended => {
                let names = vec![(format!("{tag}-u"), LockOptions::new())];
                let run = workloads::workload(url, ttl, duration, names, WARMUP_CYCLES)
                    .await
                    .map_err(|f| ("uncontended", f))?;
                r.figures.uncontended(&run);
                r.cycles = Some(run.cycle);
            }
            Workload::Contended => {
                let names = vec![(format!("{tag}-c"), LockOptions::new()); args.clients as usize];
                let run = workloads::workload(url, ttl, duration, names, 0).await.map_err(|f| ("contended", f))?;
                r.figures.contended(&run);
                r.contended_acquisitions = run.acquisitions;
            }
            Workload::Many => {
                let names = (0..args.locks).map(|i| (format!("{tag}-m{i}"), LockOptions::new())).collect();
                let run = workloads::workload(url, ttl, duration, names, 0).await.map_err(|f| ("many-locks", f))?;
                r.figures.many_acq_per_sec = Some(run.rate());
            }
            Workload::Semaphore => {
                let opts = LockOptions::new().permits(args.permits);
                let names = vec![(format!("{tag}-s"), opts); args.clients as usize];
                match workloads::workload(url, ttl, duration, names, 0).await {
                    Ok(run) => r.figures.semaphore(&run),
                    // A backend without semaphores shows "-" in the table; the bench goes on.
                    Err(Failure::Backend(locksmith::Error::Unsupported(_))) => {}
                    Err(f) => return Err(("semaphore", f)),
                }
            }
            Workload::ReadWrite => {
                // One writer, the other clients readers.
                let names = (0..args.clients)
                    .map(|i| {
                        let opts = if i == 0 { LockOptions::new() } else { LockOptions::new().shared() };
                        (format!("{tag}-rw"), opts)
                    })
                    .collect();
                match workloads::workload(url, ttl, duration, names, 0).await {
                    Ok(run) => r.figures.read_write(&run),
                    Err(Failure::Backend(locksmith::Error::Unsupported(_))) => {}
                    Err(f) => return Err(("read-write", f)),
                }
            }
            Workload::Herd => {
                let name = format!("{tag}-h");
                match herd::herd(url, ttl, &name, args.waiters, args.releases, progress).await {
                    Ok(h) => r.figures.herd(&h),
                    Err(f) => r.herd_error = Some(f.to_string()),
                }
            }
            Workload::Baseline => match baseline::baseline(url, ttl, duration, tag).await {
                Ok(Some(run)) => r.figures.baseline(&run),
                Ok(None) => {}
                Err(f) => r.baseline_error = Some(f.to_string()),
            },
        }
        progress.step();
    }
    Ok(r)
}

/// Prints what stopped the bench and returns the exit code for it.
fn report_failure(url: &str, workload: &str, failure: Failure) -> ExitCode {
    match failure {
        Failure::Backend(e) => {
            exit::report(&format!("bench: {workload} workload on {}", locksmith::driver::redact(url)), &e)
        }
        Failure::Internal(message) => {
            eprintln!("locksmith bench: {workload} workload on {}: {message}", locksmith::driver::redact(url));
            ExitCode::from(exit::SOFTWARE)
        }
    }
}

fn print_json(args: &BenchArgs, backends: &[BackendReport]) -> ExitCode {
    match serde_json::to_string_pretty(&Report::new(args, backends)) {
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
