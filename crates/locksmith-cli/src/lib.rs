//! The `locksmith` command line: `serve`, `run`, `status`, `bench`, `chaos`, `sql`. Each command is one module;
//! this file only parses arguments and sets up logging and the runtime.
#![warn(missing_docs, missing_debug_implementations, rust_2018_idioms)]

use std::process::ExitCode;

use clap::{Parser, Subcommand};

pub mod run;
pub mod serve;
pub mod sql;
pub mod status;

pub use locksmith_bench as bench;
pub use locksmith_chaos as chaos;
pub use locksmith_cli_common::{duration_arg, exit, ttl_arg, DEFAULT_BACKEND};

/// Distributed locks with fencing tokens.
#[derive(Debug, Parser)]
#[command(name = "locksmith", version, about, long_about = None)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the native lock server in the foreground (stops cleanly on SIGINT/SIGTERM).
    Serve(serve::ServeArgs),
    /// Acquire a lock, run a command under it, release it when the command exits.
    Run(run::RunArgs),
    /// Show holder, token, waiters and TTL left of one lock or of all.
    Status(status::StatusArgs),
    /// Measure lock latency and throughput against a backend.
    Bench(bench::BenchArgs),
    /// SQL backends: create the schema on a database (`init URL`) or print its DDL (`schema`).
    Sql(sql::SqlArgs),
    /// Safety harness: workers under the lock increment a fenced register while faults are
    /// injected; a checker reports stale writes, token regressions and overlapping holds.
    Chaos(chaos::ChaosArgs),
    /// One worker process of `chaos` (started by the harness).
    #[command(hide = true)]
    ChaosWorker(chaos::WorkerArgs),
}

/// Prints a command-line error (or the help text clap answers with) and returns its exit code;
/// `run` without `--` before its command gets a tip saying so.
fn usage_error(e: &clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    let _ = e.print();
    let is_run = std::env::args().nth(1).as_deref() == Some("run");
    let missing_dashes = !std::env::args().any(|a| a == "--");
    if is_run && missing_dashes && matches!(e.kind(), ErrorKind::UnknownArgument | ErrorKind::MissingRequiredArgument) {
        eprintln!("\ntip: put `--` before the command: locksmith run NAME [OPTIONS] -- CMD [ARGS]...");
    }
    ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(exit::USAGE))
}

/// Entry point of the binary.
pub fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return usage_error(&e),
    };
    let filter = tracing_subscriber::EnvFilter::try_from_env("LOCKSMITH_LOG").unwrap_or_else(|_| {
        let default = if matches!(cli.command, Command::Serve(_)) { "info" } else { "warn" };
        tracing_subscriber::EnvFilter::new(default)
    });
    // Colour codes only for a person at a terminal, never into log files or pipes.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    tracing_subscriber::fmt().with_env_filter(filter).with_ansi(ansi).with_writer(std::io::stderr).init();
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("locksmith: cannot start the async runtime: {e}");
            return ExitCode::from(exit::SOFTWARE);
        }
    };
    runtime.block_on(async move {
        match cli.command {
            Command::Serve(a) => serve::serve(a).await,
            Command::Run(a) => run::run(a).await,
            Command::Status(a) => status::status(a).await,
            Command::Bench(a) => bench::bench(a).await,
            Command::Sql(a) => sql::sql(a).await,
            Command::Chaos(a) => chaos::chaos(a).await,
            Command::ChaosWorker(a) => chaos::chaos_worker(a).await,
        }
    })
}
