//! `locksmith chaos`: a Jepsen-style safety harness, bounded in time and loopback only.
//!
//! The `locksmith` binary parses [`ChaosArgs`] and calls [`chaos`]; the harness starts worker
//! processes, which are the same binary's hidden `chaos-worker` subcommand ([`WorkerArgs`],
//! [`chaos_worker`]), and, without `--backend`, its own native server (`locksmith serve`), or,
//! with `--cluster N`, its own cluster of N native servers (Raft) with a fault proxy on every
//! path between two nodes and one in front of each node for the workers.
//! `locksmith-cli` turns this crate on with its `chaos` feature.
//!
//! Worker processes (`worker.rs`, `workers.rs`) contend for one lock and, under it, increment a
//! fenced register (`register.rs`) that the harness serves; a nemesis (`nemesis.rs`) kills and
//! pauses workers and the server or the cluster's nodes (`procs.rs`; every process is a
//! `locksmith_process::ChildProcess`), cuts a node off from the others, and partitions or slows
//! the network through fault proxies (`proxy.rs`, over
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
  locksmith chaos --cluster 3 --duration 60s           # its own 3-node cluster, node faults too
  locksmith chaos --backend redis://127.0.0.1:6379 --duration 60s --report chaos.json
  locksmith chaos --faults kill,pause --workers 8")]
pub struct ChaosArgs {
    /// Backend to test (loopback only). Without it the harness starts its own native server,
    /// which the `server-kill` and `server-pause` faults can then hit (or, with `--cluster`, its
    /// own cluster, for the `node-` faults).
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
    /// Lock without fencing (needed for redlock:// and memcached://): workers send token 0 and the register
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
    /// `locksmith serve --help`); refused with `--backend` and `--cluster`.
    #[arg(long, value_enum)]
    pub durability: Option<DurabilityArg>,
    /// Start a cluster of this many native servers (3, 5 or 7) instead of one, with a fault
    /// proxy between every two nodes and one in front of each node for the workers; the
    /// `node-kill`, `node-pause` and `node-partition` faults hit its nodes, the leader at least
    /// half the time. Refused with `--backend`.
    #[arg(long, value_name = "N", value_parser = cluster_size)]
    pub cluster: Option<u32>,
}

/// Parses the cluster size: 3, 5 or 7 (odd, so that one node down leaves a majority).
fn cluster_size(s: &str) -> Result<u32, String> {
    match s.parse::<u32>().map_err(|e| e.to_string())? {
        n @ (3 | 5 | 7) => Ok(n),
        _ => Err("3, 5 or 7 nodes".into()),
    }
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
fn default_faults(own_server: bool, networked: bool, cluster: bool) -> Vec<FaultKind> {
    let mut kinds = vec![FaultKind::Kill, FaultKind::Pause];
    if cluster {
        kinds.extend([FaultKind::NodeKill, FaultKind::NodePause, FaultKind::NodePartition]);
    } else if own_server {
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
    if let Some(k) = faults.iter().find(|k| k.needs_cluster()) {
        return Err(Stop::usage(format!(
            "the {} fault needs the harness's own cluster; drop --backend and add --cluster 3, or drop the fault",
            k.name()
        )));
    }
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

/// Checks the options against the harness's own cluster.
fn check_cluster(args: &ChaosArgs, kinds: &[FaultKind]) -> Result<(), Stop> {
    match args.cluster {
        Some(_) => {
            if args.backend.is_some() {
                return Err(Stop::usage("--cluster starts the harness's own cluster: not with --backend"));
            }
            if args.durability.is_some() {
                return Err(Stop::usage("--durability: a cluster replicates every grant (grants); not with --cluster"));
            }
            if let Some(k) = kinds.iter().find(|k| k.needs_own_server()) {
                let instead = if *k == FaultKind::ServerKill { "node-kill" } else { "node-pause" };
                return Err(Stop::usage(format!(
                    "the {} fault hits the harness's single server; with --cluster use {instead}",
                    k.name()
                )));
            }
        }
        None => {
            if let Some(k) = kinds.iter().find(|k| k.needs_cluster()) {
                if args.backend.is_none() {
                    return Err(Stop::usage(format!(
                        "the {} fault hits a node of the harness's own cluster: add --cluster 3",
                        k.name()
                    )));
                }
            }
        }
    }
    Ok(())
}

/// What the harness started for the workers to use: one server, a cluster, or nothing
/// (`--backend`).
#[derive(Debug, Default)]
struct Own {
    server: Option<procs::Server>,
    cluster: Option<procs::Cluster>,
}

impl Own {
    /// `kill -9` of everything it started.
    fn kill(&mut self) {
        if let Some(s) = self.server.as_mut() {
            s.kill9();
        }
        if let Some(c) = self.cluster.as_mut() {
            c.kill_all();
        }
    }
}

/// Starts the harness's own server or cluster (nothing with `--backend`) and the proxies; returns
/// what it started, the backend URL (for the report), the workers' URL and the front proxies.
async fn start_backend(
    args: &ChaosArgs,
    kinds: &[FaultKind],
    exe: &std::path::Path,
    dir: &std::path::Path,
) -> Result<(Own, String, String, Option<proxy::Proxies>), Stop> {
    let mut own = Own::default();
    if let Some(n) = args.cluster {
        let mut nodes = Vec::new();
        for id in 1..=u64::from(n) {
            let addr = procs::free_addr().map_err(|e| Stop::software(format!("no free port: {e}")))?;
            nodes.push((id, addr));
        }
        // The fronts come first: the cluster's view of each node (--peers) is its front proxy.
        let (worker_url, fronts) = proxy::Proxies::nodes(&nodes).await.map_err(Stop::software)?;
        let mut with_fronts = Vec::new();
        for (i, (id, addr)) in nodes.iter().enumerate() {
            let front = fronts.addr(i).ok_or_else(|| Stop::software(format!("no front proxy for node {id}")))?;
            with_fronts.push((*id, *addr, front));
        }
        let cluster = procs::Cluster::start(exe, dir, &with_fronts, &args.lock)
            .await
            .map_err(|e| Stop::software(format!("cannot start the cluster: {e}")))?;
        let url = cluster.url();
        own.cluster = Some(cluster);
        return Ok((own, url, worker_url, Some(fronts)));
    }
    if args.backend.is_none() {
        own.server = Some(
            procs::Server::start(exe, dir, args.durability.unwrap_or(DurabilityArg::Grants))
                .await
                .map_err(|e| Stop::software(format!("cannot start the native server: {e}")))?,
        );
    }
    let url = match (&args.backend, &own.server) {
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
    Ok((own, url, worker_url, proxies))
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
    check_cluster(&args, &args.faults)?;
    let networked = match &args.backend {
        Some(url) => check_backend(url, &args.faults)?,
        None => true,
    };
    let mut kinds = if args.faults.is_empty() {
        default_faults(own_server, networked, args.cluster.is_some())
    } else {
        args.faults.clone()
    };
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

    // From here on Ctrl-C (or SIGTERM) is the harness's, no longer ending it at once and leaving
    // its children behind: during the start it ends everything started so far.
    let mut ctrl_c = std::pin::pin!(locksmith_cli_common::shutdown_signal());
    let started = async {
        let (own, url, worker_url, proxies) = start_backend(&args, &kinds, &exe, temp.path()).await?;
        probe(&worker_url, &args).await?;
        Ok::<_, Stop>((own, url, worker_url, proxies))
    };
    let (mut own, url, worker_url, proxies) = tokio::select! {
        r = started => r?,
        _ = &mut ctrl_c => return Err(Stop(130, "interrupted while starting".into())),
    };

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
            server: own.server.as_mut(),
            cluster: own.cluster.as_mut(),
            proxies: proxies.as_ref(),
            register: register.shared(),
        };
        let mut nemesis = std::pin::pin!(nemesis::run(&plan, victims, stop_rx));
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
    own.kill();
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
        cluster: args.cluster,
    };
    let mut report = report::Report::new(setup, findings, faults, workers.histories().len(), bad);
    report.interrupted = was_interrupted;
    report.early_exits = early_exits;
    if !report.findings.safe() && !args.unfenced {
        // A fenced run found unsafe: keep the server's or the nodes' logs and data (and the
        // histories, when they are in the temp dir) for whoever digs in.
        let kept = temp.keep();
        eprintln!(
            "locksmith chaos: UNSAFE: the run's directory (server or node logs and data) is kept: {}",
            kept.display()
        );
        report.kept_dir = Some(kept.display().to_string());
    }
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
