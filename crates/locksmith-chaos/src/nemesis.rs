//! The nemesis: one fault at a time, each healed before the next, on a seeded schedule.
//!
//! A fault starts about every `duration / 10`. The first faults go through every requested kind
//! once, in a seeded random order (so a short run still sees each kind); after that each kind is
//! drawn at random. A fault is only started when it can be healed before the end of the run.
//!
//! The node faults (`node-kill`, `node-pause`, `node-partition`, with `--cluster`) hit the
//! current leader the first time each kind is drawn, and after that whenever fewer than half of
//! the node faults so far did, and otherwise with even odds; else a follower at random. One
//! fault at a time, so at most one node (a minority) is faulted at once.

use std::time::Duration;

use clap::ValueEnum;
use nix::sys::signal::Signal;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use serde::Serialize;
use tokio::sync::watch;
use tokio::time::Instant;

use super::history::now_ns;
use super::procs::{Cluster, Server};
use super::proxy::Proxies;
use super::register::{self, Shared};
use super::workers::Workers;

/// A kind of fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FaultKind {
    /// `kill -9` a worker, then start it again.
    Kill,
    /// SIGSTOP a worker for 1.5–3 × TTL, then SIGCONT.
    Pause,
    /// `kill -9` the harness-started server, restart it on the same port and data dir.
    ServerKill,
    /// SIGSTOP the harness-started server for 1.5–3 × TTL, then SIGCONT.
    ServerPause,
    /// Cut (reset) or blackhole (stall) the proxy of one backend host for 1.5–3 × TTL.
    Partition,
    /// Add 20–200 ms to every round trip through the proxy of one backend host for 2–4 × TTL
    /// (1.5–2 × TTL in the first pass).
    Latency,
    /// `kill -9` a node of the harness's cluster (the leader at least half the time), restart
    /// it on the same port and data dir after 0.25–3 × TTL (0.25–2 × TTL in the first pass).
    NodeKill,
    /// SIGSTOP a node of the harness's cluster (the leader at least half the time) for
    /// 1.5–3 × TTL, then SIGCONT.
    NodePause,
    /// Cut off a node of the harness's cluster (the leader at least half the time) from every
    /// other node, both ways (cut or blackhole), for 1.5–3 × TTL; its clients still reach it.
    NodePartition,
}

impl FaultKind {
    /// The name used on the command line and in the report.
    pub fn name(self) -> &'static str {
        match self {
            FaultKind::Kill => "kill",
            FaultKind::Pause => "pause",
            FaultKind::ServerKill => "server-kill",
            FaultKind::ServerPause => "server-pause",
            FaultKind::Partition => "partition",
            FaultKind::Latency => "latency",
            FaultKind::NodeKill => "node-kill",
            FaultKind::NodePause => "node-pause",
            FaultKind::NodePartition => "node-partition",
        }
    }

    /// Needs a server the harness started.
    pub fn needs_own_server(self) -> bool {
        matches!(self, FaultKind::ServerKill | FaultKind::ServerPause)
    }

    /// Needs fault proxies in front of the backend.
    pub fn needs_proxy(self) -> bool {
        matches!(self, FaultKind::Partition | FaultKind::Latency)
    }

    /// Hits a node of the harness's cluster (`--cluster`).
    pub fn needs_cluster(self) -> bool {
        matches!(self, FaultKind::NodeKill | FaultKind::NodePause | FaultKind::NodePartition)
    }
}

/// Which worker the `kill` and `pause` faults hit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Target {
    /// The worker inside its critical section (read done, write not yet) when there is one:
    /// the fault then lands where fencing matters. Otherwise a random worker.
    Holder,
    /// A random worker.
    Random,
}

/// One injected fault, for the report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FaultRecord {
    /// What.
    pub kind: FaultKind,
    /// Whom: `worker 3`, `server`, `proxy 127.0.0.1:6379`, `front proxy of node 2`,
    /// `node 1 (leader)`, `node 3 (follower)`.
    pub target: String,
    /// The node hit by a node fault.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node: Option<u64>,
    /// Whether that node led the cluster when the fault began (`None`: no node was seen to
    /// lead within a few seconds, so the node was drawn at random).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub leader: Option<bool>,
    /// Details: `blackhole`, `+120ms`, `down 300ms`.
    pub detail: String,
    /// Start (`CLOCK_MONOTONIC` ns).
    pub start_ns: u64,
    /// Healed (`CLOCK_MONOTONIC` ns).
    pub end_ns: u64,
}

/// How the nemesis behaves.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The kinds to draw from (non-empty for any fault to happen).
    pub kinds: Vec<FaultKind>,
    /// The whole run.
    pub duration: Duration,
    /// The session TTL (fault lengths scale with it).
    pub ttl: Duration,
    /// Who `kill`/`pause` hit.
    pub target: Target,
    /// Seed of the schedule.
    pub seed: u64,
}

/// What the nemesis can hit.
#[derive(Debug)]
pub struct Victims<'a> {
    /// The workers.
    pub workers: &'a mut Workers,
    /// The harness-started server, if any.
    pub server: Option<&'a mut Server>,
    /// The harness-started cluster, if any.
    pub cluster: Option<&'a mut Cluster>,
    /// The proxies, if any.
    pub proxies: Option<&'a Proxies>,
    /// The register (to find the worker in its critical section).
    pub register: &'a Shared,
}

/// Runs the plan until the run's end or until `stop` turns true, healing the fault in progress
/// before returning. Returns every fault injected.
///
/// # Cancel safety
/// Not cancel safe: a fault in progress stays in place (a paused process stays stopped until
/// its owner kills it, a proxy stays cut until it is dropped). Use `stop` instead.
///
/// # Errors
/// The server could not be restarted after `server-kill`, or a node after `node-kill` (the run
/// cannot go on).
pub async fn run(plan: &Plan, v: Victims<'_>, mut stop: watch::Receiver<bool>) -> Result<Vec<FaultRecord>, String> {
    let mut rng = StdRng::seed_from_u64(plan.seed);
    let start = Instant::now();
    let end = start + plan.duration;
    let period = plan.duration / 10;
    let mut first_pass = plan.kinds.clone();
    first_pass.sort();
    first_pass.dedup();
    first_pass.shuffle(&mut rng);
    first_pass.reverse(); // popped from the back
    let distinct = first_pass.len();
    let mut done = Vec::new();
    let mut next = start + period / 2;
    let mut v = v;
    let mut aim = Aim::default();
    loop {
        let kind = match first_pass.pop() {
            Some(k) => k,
            None if plan.kinds.is_empty() => break,
            None => plan.kinds[rng.random_range(0..plan.kinds.len())],
        };
        if sleep_until(next, &mut stop).await {
            break;
        }
        let length = length(kind, plan.ttl, &mut rng, done.len() < distinct);
        // Leave a TTL after healing for the system to settle before the workers are stopped.
        if Instant::now() + length + plan.ttl > end {
            break;
        }
        let began = Instant::now();
        let record = inject(kind, plan, &mut v, &mut rng, &mut aim, length, &mut stop).await?;
        done.push(record);
        next = (began + period).max(Instant::now() + period / 3);
        if *stop.borrow() {
            break;
        }
    }
    Ok(done)
}

/// How long a fault of `kind` lasts (0 for the instant ones). `short`: use the low end, so the
/// first pass over every kind fits a short run.
fn length(kind: FaultKind, ttl: Duration, rng: &mut StdRng, short: bool) -> Duration {
    let high = if short { 2.0 } else { 3.0 };
    match kind {
        FaultKind::Kill => Duration::ZERO,
        FaultKind::ServerKill => ttl.mul_f64(rng.random_range(0.0..0.5)),
        FaultKind::NodeKill => ttl.mul_f64(rng.random_range(0.25..high)),
        FaultKind::Pause
        | FaultKind::ServerPause
        | FaultKind::Partition
        | FaultKind::NodePause
        | FaultKind::NodePartition => ttl.mul_f64(rng.random_range(1.5..high)),
        FaultKind::Latency if short => ttl.mul_f64(rng.random_range(1.5..2.0)),
        FaultKind::Latency => ttl.mul_f64(rng.random_range(2.0..4.0)),
    }
}

/// Sleeps until `at`; true when `stop` turned true first.
async fn sleep_until(at: Instant, stop: &mut watch::Receiver<bool>) -> bool {
    let stopped = tokio::select! {
        _ = tokio::time::sleep_until(at) => false,
        _ = stop.wait_for(|s| *s) => true,
    };
    stopped || *stop.borrow()
}

/// Sleeps `d` or until `stop`.
async fn hold_fault(d: Duration, stop: &mut watch::Receiver<bool>) {
    sleep_until(Instant::now() + d, stop).await;
}

fn pick_worker(plan: &Plan, v: &Victims<'_>, rng: &mut StdRng) -> u32 {
    if plan.target == Target::Holder {
        if let Some(w) = register::lock(v.register).in_critical_section() {
            return w;
        }
    }
    rng.random_range(1..=v.workers.len().max(1))
}

/// How the node faults have been aimed so far.
#[derive(Debug, Default)]
struct Aim {
    /// Node fault kinds already drawn once (their first fault hits the leader).
    seen: Vec<FaultKind>,
    /// Node faults so far.
    faults: usize,
    /// Of those, the ones that hit the leader.
    on_leader: usize,
}

/// The node a node fault of `kind` hits, and whether it leads (`None`: no leader seen).
async fn pick_node(kind: FaultKind, cluster: &Cluster, rng: &mut StdRng, aim: &mut Aim) -> (u64, Option<bool>) {
    let ids = cluster.ids();
    let first = !aim.seen.contains(&kind);
    if first {
        aim.seen.push(kind);
    }
    aim.faults += 1;
    // The previous fault may have started an election: give it a few seconds to end.
    let Some(leader) = cluster.wait_for_leader(Duration::from_secs(5)).await else {
        let any = ids.get(rng.random_range(0..ids.len().max(1))).copied();
        return (any.unwrap_or(1), None);
    };
    let behind = 2 * aim.on_leader < aim.faults;
    if first || behind || rng.random_bool(0.5) {
        aim.on_leader += 1;
        return (leader, Some(true));
    }
    let followers: Vec<u64> = ids.into_iter().filter(|id| *id != leader).collect();
    match followers.get(rng.random_range(0..followers.len().max(1))) {
        Some(id) => (*id, Some(false)),
        None => (leader, Some(true)),
    }
}

fn node_name(id: u64, leader: Option<bool>) -> String {
    match leader {
        Some(true) => format!("node {id} (leader)"),
        Some(false) => format!("node {id} (follower)"),
        None => format!("node {id} (no leader seen)"),
    }
}

async fn inject(
    kind: FaultKind,
    plan: &Plan,
    v: &mut Victims<'_>,
    rng: &mut StdRng,
    aim: &mut Aim,
    length: Duration,
    stop: &mut watch::Receiver<bool>,
) -> Result<FaultRecord, String> {
    if kind.needs_cluster() {
        let cluster = v.cluster.as_deref_mut().ok_or("node faults need the harness's cluster")?;
        let (id, leader) = pick_node(kind, cluster, rng, aim).await;
        let start_ns = now_ns();
        let detail = match kind {
            FaultKind::NodeKill => {
                cluster.kill9(id);
                hold_fault(length, stop).await;
                cluster.restart(id).await.map_err(|e| format!("cannot restart node {id} after kill -9: {e}"))?;
                format!("kill -9, down {}ms, restarted", length.as_millis())
            }
            FaultKind::NodePause => {
                cluster.signal(id, Signal::SIGSTOP);
                hold_fault(length, stop).await;
                cluster.signal(id, Signal::SIGCONT);
                format!("SIGSTOP {}ms", length.as_millis())
            }
            _ => {
                let blackhole = rng.random_bool(0.5);
                cluster.links().isolate(id, blackhole);
                hold_fault(length, stop).await;
                cluster.links().heal();
                let how = if blackhole { "blackhole" } else { "cut" };
                format!("{how} from the other nodes both ways {}ms", length.as_millis())
            }
        };
        let target = node_name(id, leader);
        return Ok(FaultRecord { kind, target, node: Some(id), leader, detail, start_ns, end_ns: now_ns() });
    }
    let start_ns = now_ns();
    let (target, detail) = match kind {
        FaultKind::Kill => {
            let w = pick_worker(plan, v, rng);
            v.workers.kill_and_restart(w).map_err(|e| format!("cannot restart worker {w}: {e}"))?;
            (format!("worker {w}"), "kill -9, restarted".to_string())
        }
        FaultKind::Pause => {
            let w = pick_worker(plan, v, rng);
            v.workers.signal(w, Signal::SIGSTOP);
            hold_fault(length, stop).await;
            v.workers.signal(w, Signal::SIGCONT);
            (format!("worker {w}"), format!("SIGSTOP {}ms", length.as_millis()))
        }
        FaultKind::ServerKill => {
            let server = v.server.as_deref_mut().ok_or("server-kill needs the harness-started server")?;
            server.kill9();
            hold_fault(length, stop).await;
            server.restart().await.map_err(|e| format!("cannot restart the server after kill -9: {e}"))?;
            ("server".to_string(), format!("kill -9, down {}ms, restarted", length.as_millis()))
        }
        FaultKind::ServerPause => {
            let server = v.server.as_deref_mut().ok_or("server-pause needs the harness-started server")?;
            if let Some(p) = server.proc() {
                p.signal(Signal::SIGSTOP);
            }
            hold_fault(length, stop).await;
            if let Some(p) = server.proc() {
                p.signal(Signal::SIGCONT);
            }
            ("server".to_string(), format!("SIGSTOP {}ms", length.as_millis()))
        }
        FaultKind::Partition | FaultKind::Latency => {
            let proxies = v.proxies.ok_or("partition and latency need the fault proxies")?;
            let i = rng.random_range(0..proxies.len().max(1));
            let detail = if kind == FaultKind::Partition {
                let blackhole = rng.random_bool(0.5);
                proxies.partition(i, blackhole);
                format!("{} {}ms", if blackhole { "blackhole" } else { "cut" }, length.as_millis())
            } else {
                // Each direction: a round trip gets 20–200 ms more.
                let delay = Duration::from_millis(rng.random_range(10..=100));
                proxies.latency(i, delay);
                format!("+{}ms round trip for {}ms", 2 * delay.as_millis(), length.as_millis())
            };
            hold_fault(length, stop).await;
            proxies.heal_all();
            (proxies.name(i).to_string(), detail)
        }
        FaultKind::NodeKill | FaultKind::NodePause | FaultKind::NodePartition => {
            return Err("node faults need the harness's cluster".into())
        }
    };
    Ok(FaultRecord { kind, target, node: None, leader: None, detail, start_ns, end_ns: now_ns() })
}
