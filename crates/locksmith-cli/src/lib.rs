//! The `locksmith` command line: `serve`, `run`, `lock`, `elect`, `status`, `cluster`, `admin`,
//! `token`, `dashboard`, `bench`, `chaos`, `sql`. Each command is one module (`bench` is the `locksmith-bench` crate, `chaos` the
//! `locksmith-chaos` crate); this file only parses arguments and sets up logging and the runtime.
//!
//! # Features
//!
//! All on by default. Backends, each turning on the `locksmith` facade's driver: `redis`,
//! `redlock`, `memcached`, `etcd`, `zk`, `sql` (which also brings the `sql` subcommand). Subcommands:
//! `dashboard`, `bench` and `chaos` (with the hidden `chaos-worker`). Without default features the binary is
//! native-only (`serve`, `run`, `status`, `cluster` over `locksmith://` and `memory://`); a subcommand
//! left out is not offered, and asking for it says which feature it needs.
#![warn(missing_docs, missing_debug_implementations, rust_2018_idioms)]

use std::process::ExitCode;

use clap::{Parser, Subcommand};

pub mod acquire;
pub mod admin;
pub mod cluster;
#[cfg(feature = "dashboard")]
pub mod dashboard;
pub mod elect;
mod feed;
pub mod lock;
pub mod run;
pub mod serve;
mod serve_config;
mod serve_metrics;
#[cfg(feature = "sql")]
pub mod sql;
pub mod status;
mod status_watch;
mod table;

#[cfg(feature = "bench")]
pub use locksmith_bench as bench;
#[cfg(feature = "chaos")]
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
    Serve(Box<serve::ServeArgs>),
    /// Acquire a lock, run a command under it, release it when the command exits.
    Run(run::RunArgs),
    /// Acquire a lock, print its token, hold it until interrupted (like `etcdctl lock NAME`).
    Lock(lock::LockArgs),
    /// Campaign in a leader election and run a command while leading, or observe the leader.
    Elect(elect::ElectArgs),
    /// Show holder, token, waiters and TTL left of one lock or of all.
    Status(status::StatusArgs),
    /// A native server cluster's membership: `status`, `add ID HOST:PORT`, `remove ID`.
    Cluster(cluster::ClusterArgs),
    /// Administer the native server: `release NAME [--session ID]` frees a stuck lock.
    Admin(admin::AdminArgs),
    /// Print a new bearer token for the native server, and the line its policy file lists.
    #[command(after_help = "Example:
  locksmith token > jobs.token      # stdout: the token; stderr: the policy line to add
  locksmith run nightly --backend 'locksmith://locks:7531?token_file=jobs.token' -- ./job.sh")]
    Token,
    /// Serve a read-only web page showing the locks live: holders, time left, waiters, a
    /// timeline, and a native cluster's nodes.
    #[cfg(feature = "dashboard")]
    Dashboard(dashboard::DashboardArgs),
    /// Measure lock latency and throughput against a backend.
    #[cfg(feature = "bench")]
    Bench(bench::BenchArgs),
    /// SQL backends: create the schema on a database (`init URL`) or print its DDL (`schema`).
    #[cfg(feature = "sql")]
    Sql(sql::SqlArgs),
    /// Safety harness: workers under the lock increment a fenced register while faults are
    /// injected; a checker reports stale writes, token regressions and overlapping holds.
    #[cfg(feature = "chaos")]
    Chaos(chaos::ChaosArgs),
    /// One worker process of `chaos` (started by the harness).
    #[cfg(feature = "chaos")]
    #[command(hide = true)]
    ChaosWorker(chaos::WorkerArgs),
    /// The guardian of `run`'s command group (started by `run`; refuses to act otherwise).
    #[command(hide = true)]
    RunGuardian(run::guardian::GuardianArgs),
}

impl Command {
    /// What is logged without `LOCKSMITH_LOG`. A server logs; a client command speaks in its
    /// own `locksmith X:` lines only, and shows the libraries' warnings with `-v`.
    fn default_log_filter(&self) -> String {
        let verbose = match self {
            // openraft narrates every vote at info and a peer's routine absence at ERROR/WARN: a
            // cluster node logs its own view of both.
            Command::Serve(_) => return format!("info,{}", locksmith_server::QUIET_OPENRAFT),
            Command::Run(a) => a.acquire.verbose,
            Command::Lock(a) => a.acquire.verbose,
            Command::Elect(a) => a.acquire.verbose,
            Command::Status(_) => false,
            // Operators' tools (cluster, bench, chaos, sql) show the libraries' warnings.
            _ => true,
        };
        if verbose { "warn" } else { "off" }.to_string()
    }
}

/// The cargo feature a subcommand this build left out needs; `None` for any other word.
fn left_out(subcommand: &str) -> Option<&'static str> {
    match subcommand {
        "bench" if !cfg!(feature = "bench") => Some("bench"),
        "sql" if !cfg!(feature = "sql") => Some("sql"),
        "dashboard" if !cfg!(feature = "dashboard") => Some("dashboard"),
        "chaos" | "chaos-worker" if !cfg!(feature = "chaos") => Some("chaos"),
        _ => None,
    }
}

/// Prints a command-line error (or the help text clap answers with) and returns its exit code;
/// `run` without `--` before its command gets a tip saying so, and a subcommand this build
/// left out one naming the feature it needs.
fn usage_error(e: &clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    let _ = e.print();
    let first = std::env::args().nth(1);
    if let (ErrorKind::InvalidSubcommand, Some(feature)) = (e.kind(), first.as_deref().and_then(left_out)) {
        eprintln!("\ntip: this locksmith was built without the `{feature}` feature; build it with: cargo build -p locksmith-cli --features {feature}");
    }
    let is_run = matches!(first.as_deref(), Some("run" | "elect"));
    let missing_dashes = !std::env::args().any(|a| a == "--");
    if is_run && missing_dashes && matches!(e.kind(), ErrorKind::UnknownArgument | ErrorKind::MissingRequiredArgument) {
        let sub = first.as_deref().unwrap_or("run");
        eprintln!("\ntip: put `--` before the command: locksmith {sub} NAME [OPTIONS] -- CMD [ARGS]...");
    }
    ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(exit::USAGE))
}

/// Entry point of the binary.
pub fn main() -> ExitCode {
    let mut cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return usage_error(&e),
    };
    // No runtime, no logging: it only waits on a pipe, and must start fast and small.
    if let Command::RunGuardian(args) = &cli.command {
        return run::guardian::main(args);
    }
    if let Command::Serve(args) = &mut cli.command {
        let argv: Vec<_> = std::env::args_os().skip(2).collect();
        match serve_config::with_config_file(&argv) {
            Ok(Some(merged)) => **args = merged,
            Ok(None) => {}
            Err(e) => {
                eprintln!("locksmith serve: {e}");
                return ExitCode::from(exit::CONFIG);
            }
        }
    }
    let filter = tracing_subscriber::EnvFilter::try_from_env("LOCKSMITH_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(cli.command.default_log_filter()));
    // Colour codes only for a person at a terminal, never into log files or pipes.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let logs = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    match &cli.command {
        Command::Serve(a) if a.log_format == serve::LogFormat::Json => logs.json().init(),
        _ => logs.with_ansi(ansi).init(),
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("locksmith: cannot start the async runtime: {e}");
            return ExitCode::from(exit::SOFTWARE);
        }
    };
    runtime.block_on(async move {
        match cli.command {
            Command::Serve(a) => serve::serve(*a).await,
            Command::Run(a) => run::run(a).await,
            Command::Lock(a) => lock::lock(a).await,
            Command::Elect(a) => elect::elect(a).await,
            Command::Status(a) => status::status(a).await,
            Command::Cluster(a) => cluster::cluster(a).await,
            Command::Admin(a) => admin::admin(a).await,
            Command::Token => token(),
            #[cfg(feature = "dashboard")]
            Command::Dashboard(a) => dashboard::dashboard(a).await,
            #[cfg(feature = "bench")]
            Command::Bench(a) => bench::bench(a).await,
            #[cfg(feature = "sql")]
            Command::Sql(a) => sql::sql(a).await,
            #[cfg(feature = "chaos")]
            Command::Chaos(a) => chaos::chaos(a).await,
            #[cfg(feature = "chaos")]
            Command::ChaosWorker(a) => chaos::chaos_worker(a).await,
            Command::RunGuardian(a) => run::guardian::main(&a),
        }
    })
}

/// `locksmith token`: a fresh token on stdout (for a file), its SHA-256 for the policy on stderr.
fn token() -> ExitCode {
    match locksmith_server::auth::new_token() {
        Some((token, digest)) => {
            println!("{token}");
            eprintln!("add to the server's policy file (--auth), under a principal:\n  tokens = [\"{digest}\"]");
            ExitCode::SUCCESS
        }
        None => {
            eprintln!("locksmith token: the OS random number generator failed");
            ExitCode::from(exit::SOFTWARE)
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    /// `locksmith --help` names every subcommand it offers in its first line too, not only in
    /// the list below it: the description must not fall behind the commands.
    #[test]
    fn top_level_help_names_every_subcommand() {
        let cli = Cli::command();
        let about = cli.get_about().map(ToString::to_string).unwrap_or_default();
        let help = cli.clone().render_help().to_string();
        for sub in cli.get_subcommands().filter(|s| !s.is_hide_set()) {
            let name = sub.get_name();
            assert!(
                about.split(|c: char| !c.is_ascii_alphanumeric() && c != '-').any(|w| w == name),
                "{name} is not in {about:?}"
            );
            assert!(help.contains(&format!("\n  {name} ")), "{name} is not listed in:\n{help}");
        }
        assert!(
            !help.contains("run-guardian") && !help.contains("chaos-worker"),
            "hidden subcommands are listed:\n{help}"
        );
    }
}
