//! What the bench found, per round and per backend, and the `--json` document.

use hdrhistogram::Histogram;
use serde::Serialize;

use super::args::{BenchArgs, Workload};
use super::floor::Floor;
use super::herd::Herd;
use super::stats::{median, Run};
use super::workloads::WARMUP_CYCLES;

/// What one backend achieved in one round (or the medians over rounds). A figure is `null`
/// when its workload was not selected, failed, or (baseline) the backend has no raw recipe.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Figures {
    /// Uncontended lock→unlock cycle, median, µs.
    pub cycle_p50_us: Option<f64>,
    /// Uncontended lock→unlock cycle, 99th percentile, µs.
    pub cycle_p99_us: Option<f64>,
    /// Uncontended lock→unlock cycle, slowest, µs.
    pub cycle_max_us: Option<f64>,
    /// Uncontended lock→unlock cycles per second.
    pub cycles_per_sec: Option<f64>,
    /// Contended workload: acquisitions per second over all clients.
    pub contended_acq_per_sec: Option<f64>,
    /// Contended workload: fewest ÷ most acquisitions of one client (1.0 is perfectly fair).
    pub fairness: Option<f64>,
    /// Contended workload: wait for an acquisition, median, µs.
    pub wait_p50_us: Option<f64>,
    /// Contended workload: wait for an acquisition, 99th percentile, µs.
    pub wait_p99_us: Option<f64>,
    /// Many-locks workload: acquisitions per second over all clients.
    pub many_acq_per_sec: Option<f64>,
    /// Semaphore workload: permit acquisitions per second over all clients.
    pub semaphore_acq_per_sec: Option<f64>,
    /// Semaphore workload: fewest ÷ most acquisitions of one client.
    pub semaphore_fairness: Option<f64>,
    /// Read/write workload: acquisitions (reads and writes) per second over all clients.
    pub rw_acq_per_sec: Option<f64>,
    /// Read/write workload: fewest ÷ most acquisitions of one client (the writer included).
    pub rw_fairness: Option<f64>,
    /// Herd workload: waiter wake-ups counted by the driver per release (1 is herd-free).
    pub herd_wakeups_per_release: Option<f64>,
    /// Herd workload: release call start → next waiter's `lock()` returned, median, µs.
    pub herd_handoff_p50_us: Option<f64>,
    /// Herd workload: hand-off, 99th percentile, µs.
    pub herd_handoff_p99_us: Option<f64>,
    /// Raw recipe (no locksmith engine) on the same server: cycle median, µs.
    pub baseline_cycle_p50_us: Option<f64>,
    /// Raw recipe: cycle 99th percentile, µs.
    pub baseline_cycle_p99_us: Option<f64>,
    /// Raw recipe: cycles per second.
    pub baseline_cycles_per_sec: Option<f64>,
    /// Driver overhead: `cycle_p50_us ÷ baseline_cycle_p50_us`.
    pub baseline_overhead: Option<f64>,
    /// With `--floor-dir`, native backends only: `cycle_p50_us ÷` the floor's
    /// `single_node_cycle_us` (2 RTT + 1 fdatasync) measured in the same round (over rounds:
    /// the median cycle ÷ the median floor).
    pub cycle_x_floor: Option<f64>,
}

fn p(h: &Histogram<u64>, q: f64) -> Option<f64> {
    (!h.is_empty()).then(|| h.value_at_quantile(q) as f64)
}

impl Figures {
    /// Fills in the uncontended cycle figures.
    pub(crate) fn uncontended(&mut self, run: &Run) {
        self.cycle_p50_us = p(&run.cycle, 0.5);
        self.cycle_p99_us = p(&run.cycle, 0.99);
        self.cycle_max_us = (!run.cycle.is_empty()).then(|| run.cycle.max() as f64);
        self.cycles_per_sec = Some(run.rate());
    }

    /// Fills in the contended hand-off figures.
    pub(crate) fn contended(&mut self, run: &Run) {
        self.contended_acq_per_sec = Some(run.rate());
        self.fairness = Some(run.fairness());
        self.wait_p50_us = p(&run.wait, 0.5);
        self.wait_p99_us = p(&run.wait, 0.99);
    }

    /// Fills in the semaphore figures.
    pub(crate) fn semaphore(&mut self, run: &Run) {
        self.semaphore_acq_per_sec = Some(run.rate());
        self.semaphore_fairness = Some(run.fairness());
    }

    /// Fills in the read/write figures.
    pub(crate) fn read_write(&mut self, run: &Run) {
        self.rw_acq_per_sec = Some(run.rate());
        self.rw_fairness = Some(run.fairness());
    }

    /// Fills in the herd figures.
    pub(crate) fn herd(&mut self, herd: &Herd) {
        self.herd_wakeups_per_release = herd.wakeups_per_release;
        self.herd_handoff_p50_us = p(&herd.handoff, 0.5);
        self.herd_handoff_p99_us = p(&herd.handoff, 0.99);
    }

    /// Fills in the raw-recipe figures (after [`Figures::uncontended`], for the overhead).
    pub(crate) fn baseline(&mut self, run: &Run) {
        self.baseline_cycle_p50_us = p(&run.cycle, 0.5);
        self.baseline_cycle_p99_us = p(&run.cycle, 0.99);
        self.baseline_cycles_per_sec = Some(run.rate());
        self.baseline_overhead = overhead(self.cycle_p50_us, self.baseline_cycle_p50_us);
    }

    /// Each figure's median over the rounds that have it.
    pub(crate) fn median(rounds: &[Round]) -> Self {
        let m = |field: fn(&Figures) -> Option<f64>| median(rounds.iter().filter_map(|r| field(&r.figures)));
        let mut f = Self {
            cycle_p50_us: m(|f| f.cycle_p50_us),
            cycle_p99_us: m(|f| f.cycle_p99_us),
            cycle_max_us: m(|f| f.cycle_max_us),
            cycles_per_sec: m(|f| f.cycles_per_sec),
            contended_acq_per_sec: m(|f| f.contended_acq_per_sec),
            fairness: m(|f| f.fairness),
            wait_p50_us: m(|f| f.wait_p50_us),
            wait_p99_us: m(|f| f.wait_p99_us),
            many_acq_per_sec: m(|f| f.many_acq_per_sec),
            semaphore_acq_per_sec: m(|f| f.semaphore_acq_per_sec),
            semaphore_fairness: m(|f| f.semaphore_fairness),
            rw_acq_per_sec: m(|f| f.rw_acq_per_sec),
            rw_fairness: m(|f| f.rw_fairness),
            herd_wakeups_per_release: m(|f| f.herd_wakeups_per_release),
            herd_handoff_p50_us: m(|f| f.herd_handoff_p50_us),
            herd_handoff_p99_us: m(|f| f.herd_handoff_p99_us),
            baseline_cycle_p50_us: m(|f| f.baseline_cycle_p50_us),
            baseline_cycle_p99_us: m(|f| f.baseline_cycle_p99_us),
            baseline_cycles_per_sec: m(|f| f.baseline_cycles_per_sec),
            baseline_overhead: None,
            // Set by the caller, who has the floor.
            cycle_x_floor: None,
        };
        f.baseline_overhead = overhead(f.cycle_p50_us, f.baseline_cycle_p50_us);
        f
    }
}

fn overhead(driver: Option<f64>, raw: Option<f64>) -> Option<f64> {
    driver.zip(raw).and_then(|(d, r)| (r > 0.0).then(|| d / r))
}

/// One round on one backend, as printed by `--json`.
#[derive(Debug, Serialize)]
pub(crate) struct Round {
    #[serde(flatten)]
    pub(crate) figures: Figures,
    /// Contended workload: acquisitions of each client.
    pub(crate) contended_acquisitions: Vec<u64>,
    /// Why the herd workload failed on this backend this round (the other workloads ran).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) herd_error: Option<String>,
    /// Why the baseline failed on this backend this round.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) baseline_error: Option<String>,
    /// With `--floor-dir`: the floor measured before this round's workloads.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) floor: Option<Floor>,
    /// Uncontended cycle latencies, µs, for the plot.
    #[serde(skip)]
    pub(crate) cycles: Option<Histogram<u64>>,
}

impl Round {
    pub(crate) fn new() -> Self {
        Self {
            figures: Figures::default(),
            contended_acquisitions: Vec::new(),
            herd_error: None,
            baseline_error: None,
            floor: None,
            cycles: None,
        }
    }
}

/// Every round on one backend, and the medians.
#[derive(Debug, Serialize)]
pub(crate) struct BackendReport {
    pub(crate) backend: String,
    /// The raw recipe of the baseline figures, when the backend has one.
    pub(crate) baseline_recipe: Option<&'static str>,
    pub(crate) rounds: Vec<Round>,
    pub(crate) median: Figures,
    /// With `--floor-dir`: the floor's medians over the rounds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) floor: Option<Floor>,
}

impl BackendReport {
    /// The first herd failure over the rounds, if the herd never succeeded.
    pub(crate) fn herd_error(&self) -> Option<&str> {
        match self.median.herd_handoff_p50_us {
            Some(_) => None,
            None => self.rounds.iter().find_map(|r| r.herd_error.as_deref()),
        }
    }

    /// The first baseline failure over the rounds, if the baseline never succeeded.
    pub(crate) fn baseline_error(&self) -> Option<&str> {
        match self.median.baseline_cycle_p50_us {
            Some(_) => None,
            None => self.rounds.iter().find_map(|r| r.baseline_error.as_deref()),
        }
    }

    /// Uncontended cycle latencies of every round together.
    pub(crate) fn cycles(&self) -> Option<Histogram<u64>> {
        let mut all: Option<Histogram<u64>> = None;
        for h in self.rounds.iter().filter_map(|r| r.cycles.as_ref()) {
            match all.as_mut() {
                None => all = Some(h.clone()),
                // Same bounds everywhere, so adding cannot fail; if it did, the plot shows less.
                Some(a) => {
                    let _ = a.add(h);
                }
            }
        }
        all
    }
}

/// The `--json` document.
#[derive(Debug, Serialize)]
pub(crate) struct Report<'a> {
    duration_ms: u128,
    ttl_ms: u128,
    workloads: Vec<String>,
    clients: u32,
    locks: u32,
    waiters: u32,
    releases: u32,
    rounds: u32,
    warmup_cycles: u32,
    /// `--floor-dir`, when the floor was measured.
    #[serde(skip_serializing_if = "Option::is_none")]
    floor_dir: Option<String>,
    backends: &'a [BackendReport],
}

impl<'a> Report<'a> {
    pub(crate) fn new(args: &BenchArgs, backends: &'a [BackendReport]) -> Self {
        let workloads = args.workloads.iter().map(|w| workload_name(*w).to_string()).collect();
        Self {
            duration_ms: args.duration.as_millis(),
            ttl_ms: args.ttl.as_millis(),
            workloads,
            clients: args.clients,
            locks: args.locks,
            waiters: args.waiters,
            releases: args.releases,
            rounds: args.rounds,
            warmup_cycles: WARMUP_CYCLES,
            floor_dir: args.floor_dir.as_ref().map(|d| d.display().to_string()),
            backends,
        }
    }
}

/// The name of a workload as `--workloads` takes it.
pub(crate) fn workload_name(w: Workload) -> &'static str {
    match w {
        Workload::Uncontended => "uncontended",
        Workload::Contended => "contended",
        Workload::Many => "many",
        Workload::Semaphore => "semaphore",
        Workload::ReadWrite => "read-write",
        Workload::Herd => "herd",
        Workload::Baseline => "baseline",
    }
}
