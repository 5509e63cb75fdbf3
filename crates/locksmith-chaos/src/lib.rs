//! `locksmith chaos`: a Jepsen-style safety harness, bounded in time and loopback only.
//!
//! The `locksmith` binary parses [`ChaosArgs`] and calls [`chaos`]; the harness starts worker
//! processes, which are the same binary's hidden `chaos-worker` subcommand ([`WorkerArgs`],
//! [`chaos_worker`]), and, without `--backend`, its own native server (`locksmith serve`).
//! `locksmith-cli` turns this crate on with its `chaos` feature.
//!
//! Worker processes (`worker.rs`, `workers.rs`) contend for one lock and, under it, increment a
//! fenced register (`register.rs`) that the harness serves; a nemesis (`nemesis.rs`) kills and
//! pauses workers and the server (`procs.rs`; every process is a `locksmith_process::ChildProcess`)
//! and partitions or slows the network through fault proxies (`proxy.rs`, over
//! `locksmith-faultproxy`); at the end a checker (`checker.rs`) reads every history
//! (`history.rs`) and the register's log and reports (`report.rs`) stale writes accepted, lost
//! updates, token order violations and overlapping holds.
//!
//! Exit codes: 0 safe; 1 unsafe (a stale write was accepted or a token went backwards); 2 bad
//! arguments; 69 backend unreachable at start; 70 the harness itself failed; 130 interrupted.
#![warn(missing_docs, missing_debug_implementations, rust_2018_idioms)]

mod checker;
mod history;
mod nemesis;
mod procs;
mod proxy;
mod register;
mod report;
mod worker;
mod workers;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use locksmith::LockOptions;
use tokio::sync::watch;

use locksmith_cli_common::{duration_arg, exit, DurabilityArg};

pub use nemesis::{FaultKind, Target};
pub use worker::{chaos_worker, WorkerArgs};

/// Arguments of `locksmith chaos`.
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  locksmith chaos                                      # its own native server, every fault, 30 s
  locksmith chaos --backend redis://127.0.0.1:6379 --duration 60s --report chaos.json
  locksmith chaos --faults kill,pause --workers 8")]
pub struct ChaosArgs {
    /// Backend to test (loopback only). Without it the harness starts its own native server,
    /// which the `server-kill` and `server-pause` faults can then hit.
    #[arg(long)]
    pub backend: Option<String>,
    /// Worker processes contending for the lock.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub workers: u32,
    /// How long the run lasts (faults included; at most 1 h).
    #[arg(long, default_value = "30s", value_parser = run_length)]
    pub duration: Duration,
    /// Session lease of every worker.
    #[arg(long, default_value = "1s", value_parser = duration_arg)]
    pub ttl: Duration,
    /// Longest sleep between reading and writing the register [default: TTL/5].
    #[arg(long, value_parser = duration_arg)]
    pub hold: Option<Duration>,
    /// Faults to inject, comma-separated [default: every kind that applies to the backend].
    #[arg(long, value_enum, value_delimiter = ',')]
    pub faults: Vec<FaultKind>,
    /// Seed of the fault schedule and the hold times [default: random; the report has it].
    #[arg(long)]
    pub seed: Option<u64>,
    /// Write the JSON report here.
    #[arg(long, value_name = "FILE.json")]
    pub report: Option<PathBuf>,
    /// Lock without fencing (needed for redlock://): workers send token 0 and the register
    /// takes every write, so only the lock itself protects it.
    #[arg(long)]
    pub unfenced: bool,
    /// The lock the workers contend for.
    #[arg(long, default_value = "chaos")]
    pub lock: String,
    /// Who the `kill` and `pause` faults hit: `holder` = the worker inside its critical section
    /// when there is one (where fencing matters), `random` = any worker.
    #[arg(long, value_enum, default_value = "holder")]
    pub target: Target,
    /// Keep the worker histories (JSON lines, one file per worker incarnation) in this directory
    /// [default: a temporary directory, removed at the end].
    #[arg(long)]
    pub history_dir: Option<PathBuf>,
    /// `--durability` of the harness's own native server (`grants` or `leases`, see
    /// `locksmith serve --help`); refused with `--backend`.
    #[arg(long, value_enum)]
    pub durability: Option<DurabilityArg>,
}

/// Parses the run length: more than zero, at most one hour (the harness is bounded in time).
fn run_length(s: &str) -> Result<Duration, String> {
    match duration_arg(s)? {
        d if d.is_zero() => Err("must be longer than zero".into()),
        d if d > Duration::from_secs(3600) => Err("at most 1h".into()),
        d => Ok(d),
    }
}

/// Why the harness stopped early: the exit code and what to print.
#[derive(Debug)]
struct Stop(u8, String);

impl Stop {
    fn usage(msg: impl Into<String>) -> Self {
        Stop(exit::USAGE, msg.into())
    }
    fn software(msg: impl Into<String>) -> Self {
        Stop(exit::SOFTWARE, msg.into())
    }
}

/// Runs the harness and prints the verdict. See the module docs for the exit codes.
///
/// # Cancel safety
/// Dropping it ends every process it started (by PID) but writes no report; Ctrl-C instead
/// stops the run early and still checks and reports.
pub async fn chaos(args: ChaosArgs) -> ExitCode {
    match run(args).await {
        Ok(code) => code,
        Err(Stop(code, msg)) => {
            eprintln!("locksmith chaos: {msg}");
            ExitCode::from(code)
        }
    }
}

/// The fault kinds that apply when none are named.
fn default_faults(own_server: bool, networked: bool) -> Vec<FaultKind> {
    let mut kinds = vec![FaultKind::Kill, FaultKind::Pause];
    if own_server {
        kinds.extend([FaultKind::ServerKill, FaultKind::ServerPause]);
    }
    if networked {
        kinds.extend([FaultKind::Partition, FaultKind::Latency]);
    }
    kinds
}

/// Checks the backend URL: loopback hosts only, a backend the workers can share, and faults
/// that apply to it. Returns whether it is reached over the network (can be proxied).
fn check_backend(url: &str, faults: &[FaultKind]) -> Result<bool, Stop> {
    if let Some(k) = faults.iter().find(|k| k.needs_own_server()) {
        return Err(Stop::usage(format!(
            "the {} fault needs the harness's own server; drop --backend to test the native server with it, or drop the fault",
            k.name()
        )));
    }
    if url.starts_with("memory://") {
        return Err(Stop::usage("memory:// lives inside one process; the workers are separate processes"));
    }
    let networked = match locksmith_faultproxy::hosts(url) {
        Ok(hosts) => {
            for host in hosts {
                proxy::resolve(&host).map_err(Stop::usage)?;
            }
            true
        }
        Err(locksmith_faultproxy::UrlError::NoHosts { .. }) => false,
        Err(e) => return Err(Stop::usage(format!("invalid backend url: {e}"))),
    };
    if !networked {
        if let Some(k) = faults.iter().find(|k| k.needs_proxy()) {
            return Err(Stop::usage(format!("the {} fault needs a backend reached over the network", k.name())));
        }
    }
    Ok(networked)
}

/// Takes and releases the lock once, so a backend that is down, a bad name or Redlock without
/// `--unfenced` is reported before any worker starts.
async fn probe(url: &str, args: &ChaosArgs) -> Result<(), Stop> {
    let client =
        locksmith::connect_with_ttl(url, args.ttl).await.map_err(|e| Stop(exit::code_for(&e), e.to_string()))?;
    let mut opts = LockOptions::new();
    if args.unfenced {
        opts = opts.allow_unfenced();
    }
    let bound = Duration::from_secs(10) + args.ttl;
    let got = tokio::time::timeout(bound, client.try_lock_with(&args.lock, opts)).await;
    let result = match got {
        Err(_) => Err(Stop(exit::UNAVAILABLE, format!("backend did not answer within {bound:?}"))),
        Ok(Err(e)) => {
            let code = exit::code_for(&e);
            Err(Stop(if code == 1 { exit::UNAVAILABLE } else { code }, format!("backend unusable: {e}")))
        }
        Ok(Ok(Some(g))) => {
            let _ = g.unlock().await;
            Ok(())
        }
        // Someone holds it: the backend answers, which is all the probe asks.
        Ok(Ok(None)) => Ok(()),
    };
    client.close().await;
    result
}

/// Resolves on SIGINT or SIGTERM.
async fn interrupted() {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut int), Ok(mut term)) = (signal(SignalKind::interrupt()), signal(SignalKind::terminate())) else {
        return std::future::pending().await;
    };
    tokio::select! {
        _ = int.recv() => {}
        _ = term.recv() => {}
    }
}

async fn run(args: ChaosArgs) -> Result<ExitCode, Stop> {
    locksmith::validate_ttl(args.ttl).map_err(|e| Stop::usage(e.to_string()))?;
    let hold = args.hold.unwrap_or(args.ttl / 5);
    if hold > Duration::from_secs(60) {
        return Err(Stop::usage("--hold is at most 60s"));
    }
    let own_server = args.backend.is_none();
    if !own_server && args.durability.is_some() {
        return Err(Stop::usage("--durability applies to the harness's own server: not with --backend"));
    }
    let networked = match &args.backend {
        Some(url) => check_backend(url, &args.faults)?,
        None => true,
    };
    let mut kinds = if args.faults.is_empty() { default_faults(own_server, networked) } else { args.faults.clone() };
    kinds.sort();
    kinds.dedup();
    let seed = args.seed.unwrap_or_else(rand::random);
    let exe = std::env::current_exe().map_err(|e| Stop::software(format!("cannot find this executable: {e}")))?;

    let temp = tempfile::Builder::new()
        .prefix("locksmith-chaos-")
        .tempdir()
        .map_err(|e| Stop::software(format!("cannot create a temp dir: {e}")))?;
    let dir = match &args.history_dir {
        Some(d) => {
            // Histories are appended to: old files would mix another run's holds into this one.
            if std::fs::read_dir(d).is_ok_and(|mut entries| entries.next().is_some()) {
                return Err(Stop::usage(format!("--history-dir {} is not empty", d.display())));
            }
            std::fs::create_dir_all(d).map_err(|e| Stop::software(format!("cannot create {}: {e}", d.display())))?;
            d.clone()
        }
        None => temp.path().to_path_buf(),
    };

    let mut server = match own_server {
        true => Some(
            procs::Server::start(&exe, temp.path(), args.durability.unwrap_or(DurabilityArg::Grants))
                .await
                .map_err(|e| Stop::software(format!("cannot start the native server: {e}")))?,
        ),
        false => None,
    };
    let url = match (&args.backend, &server) {
        (Some(u), _) => u.clone(),
        (None, Some(s)) => s.url(),
        (None, None) => return Err(Stop::software("no backend")),
    };
    let (worker_url, proxies) = if kinds.iter().any(|k| k.needs_proxy()) {
        // Hosts were checked above, so a failure here is the harness's own (a proxy cannot bind).
        let (u, p) = proxy::Proxies::front(&url).await.map_err(Stop::software)?;
        (u, Some(p))
    } else {
        (url.clone(), None)
    };
    probe(&worker_url, &args).await?;

    let register = register::RegisterServer::start(!args.unfenced)
        .await
        .map_err(|e| Stop::software(format!("cannot start the register: {e}")))?;
    let spec = workers::Spec {
        exe,
        url: worker_url,
        lock: args.lock.clone(),
        register: register.addr(),
        ttl: args.ttl,
        hold,
        unfenced: args.unfenced,
        seed,
        dir,
    };
    let mut workers = workers::Workers::start(spec, args.workers)
        .map_err(|e| Stop::software(format!("cannot start the workers: {e}")))?;

    let (stop_tx, stop_rx) = watch::channel(false);
    let plan =
        nemesis::Plan { kinds: kinds.clone(), duration: args.duration, ttl: args.ttl, target: args.target, seed };
    let deadline = tokio::time::Instant::now() + args.duration;
    let (faults, was_interrupted) = {
        let victims = nemesis::Victims {
            workers: &mut workers,
            server: server.as_mut(),
            proxies: proxies.as_ref(),
            register: register.shared(),
        };
        let mut nemesis = std::pin::pin!(nemesis::run(&plan, victims, stop_rx));
        let mut ctrl_c = std::pin::pin!(interrupted());
        let mut was_interrupted = false;
        let faults = loop {
            tokio::select! {
                r = &mut nemesis => break r,
                _ = &mut ctrl_c, if !was_interrupted => {
                    // The nemesis heals what it is doing and returns.
                    was_interrupted = true;
                    let _ = stop_tx.send(true);
                }
            }
        };
        if !was_interrupted {
            tokio::select! {
                _ = tokio::time::sleep_until(deadline) => {}
                _ = &mut ctrl_c => was_interrupted = true,
            }
        }
        (faults, was_interrupted)
    };
    let early_exits = workers.early_exits();
    for e in &early_exits {
        eprintln!("locksmith chaos: {e} ended before the run did");
    }
    // Workers finish their cycle (bounded by the hold time and one unlock), then are killed.
    workers.stop_all(args.ttl * 3 + hold + Duration::from_secs(2)).await;
    drop(proxies);
    if let Some(s) = server.as_mut() {
        s.kill9();
    }
    let faults = faults.map_err(Stop::software)?;

    let mut records = Vec::new();
    let mut bad = 0;
    for path in workers.histories() {
        match history::read_history(path) {
            Ok((r, b)) => {
                records.extend(r);
                bad += b;
            }
            // A worker killed before it opened its file wrote nothing.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(Stop::software(format!("cannot read {}: {e}", path.display()))),
        }
    }
    let (log, value) = {
        let reg = register::lock(register.shared());
        (reg.log().to_vec(), reg.value())
    };
    let findings = checker::check(&records, &log, value, !args.unfenced);
    let setup = report::Setup {
        backend: locksmith::driver::redact(&url),
        own_server,
        lock: args.lock.clone(),
        workers: args.workers,
        duration_ms: u64::try_from(args.duration.as_millis()).unwrap_or(u64::MAX),
        ttl_ms: u64::try_from(args.ttl.as_millis()).unwrap_or(u64::MAX),
        hold_ms: u64::try_from(hold.as_millis()).unwrap_or(u64::MAX),
        faults: kinds.iter().map(|k| k.name().to_string()).collect(),
        target: format!("{:?}", args.target).to_lowercase(),
        fenced: !args.unfenced,
        seed,
    };
    let mut report = report::Report::new(setup, findings, faults, workers.histories().len(), bad);
    report.interrupted = was_interrupted;
    report.early_exits = early_exits;
    if let Some(path) = &args.report {
        let json = serde_json::to_vec_pretty(&report).map_err(|e| Stop::software(e.to_string()))?;
        std::fs::write(path, json).map_err(|e| Stop::software(format!("cannot write {}: {e}", path.display())))?;
    }
    println!("{}", report.verdict_line());
    if was_interrupted {
        return Ok(ExitCode::from(130));
    }
    Ok(if report.findings.safe() { ExitCode::SUCCESS } else { ExitCode::from(1) })
}
