//! The command line of `locksmith bench`.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, ValueEnum};

/// Arguments of `locksmith bench`.
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  locksmith bench                                        # the native server on 127.0.0.1:7531
  locksmith bench --backend locksmith://127.0.0.1:7531 --backend redis://127.0.0.1:6379 --rounds 3
  locksmith bench --workloads uncontended,contended --json --plot bench.svg
  locksmith bench --workloads semaphore,read-write --clients 8 --permits 3
  locksmith bench --floor-dir /var/lib/locksmith --rounds 3   # with the floor, on the server's disk")]
pub struct BenchArgs {
    /// Backend URL; repeat to compare backends (ratios are given to the first).
    #[arg(
        long = "backend",
        value_name = "URL",
        env = "LOCKSMITH_BACKEND",
        default_value = locksmith_cli_common::DEFAULT_BACKEND
    )]
    pub backends: Vec<String>,
    /// Which workloads to run (comma-separated); by default all but `semaphore` and
    /// `read-write`, which only backends that offer them can run (the others show "-").
    #[arg(long, value_enum, value_delimiter = ',', default_value = "uncontended,contended,many,herd,baseline")]
    pub workloads: Vec<Workload>,
    /// Semaphore workload: permits of the semaphore the `--clients` clients share.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub permits: u32,
    /// How long each workload runs, per backend and round.
    #[arg(long, default_value = "3s", value_parser = positive_duration)]
    pub duration: Duration,
    /// Clients contending for one lock in the contended workload (at most 10000).
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub clients: u32,
    /// Clients, each with a lock of its own, in the many-locks workload (at most 10000).
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub locks: u32,
    /// Herd workload: waiters, each with its own session, blocked on one lock (at most 100000).
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(2..=100_000))]
    pub waiters: u32,
    /// Herd workload: hand-offs measured (fewer than `--waiters`).
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub releases: u32,
    /// Session lease of every client.
    #[arg(long, default_value = "10s", value_parser = locksmith_cli_common::duration_arg)]
    pub ttl: Duration,
    /// Print one JSON document instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Also draw the results: a latency CDF and a throughput chart, as SVG or PNG (by the
    /// file's extension).
    #[arg(long, value_name = "FILE.svg|FILE.png")]
    pub plot: Option<PathBuf>,
    /// How many times to run every workload on every backend; figures are medians over rounds.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub rounds: u32,
    /// Also measure the floor, once per round before the workloads: fdatasync of a small
    /// append to a file in DIR (removed after; name the disk the server's data directory is on)
    /// and the TCP round trip to each backend's host (on a loopback host, ping-pongs over a
    /// listener the bench opens on that address; elsewhere, TCP connects to the backend's port).
    /// Prints a floor row (RTT, fdatasync, 2 RTT + fdatasync: a single node's durable cycle at
    /// best) and every native (`locksmith://`) row's cycle p50 also as "× floor".
    #[arg(long, value_name = "DIR")]
    pub floor_dir: Option<PathBuf>,
}

impl BenchArgs {
    /// Whether `w` was selected.
    pub(crate) fn runs(&self, w: Workload) -> bool {
        self.workloads.contains(&w)
    }
}

/// One workload of `locksmith bench`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Workload {
    /// One client takes and releases one lock in a loop.
    Uncontended,
    /// `--clients` clients hand one lock around.
    Contended,
    /// `--locks` clients, each on a lock of its own.
    Many,
    /// `--clients` clients sharing a semaphore of `--permits` permits.
    Semaphore,
    /// `--clients` clients on one read/write lock: one writer, the others readers.
    ReadWrite,
    /// `--waiters` waiters on one lock, `--releases` hand-offs: wake-ups per release.
    Herd,
    /// The uncontended cycle of the plain recipe on the same server, without locksmith.
    Baseline,
}

/// Parses a duration for clap and refuses zero.
fn positive_duration(s: &str) -> Result<Duration, String> {
    match locksmith_cli_common::duration_arg(s)? {
        d if d.is_zero() => Err("must be longer than zero".into()),
        d => Ok(d),
    }
}
