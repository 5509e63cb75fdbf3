//! The chaos report: a JSON document (`--report`) and one verdict line for stdout.

use std::collections::BTreeMap;

use serde::Serialize;

use super::checker::Findings;
use super::nemesis::FaultRecord;

/// How the run was set up.
#[derive(Debug, Clone, Serialize)]
pub struct Setup {
    /// Backend URL as given, credentials removed; `locksmith://…` for the harness's own server.
    pub backend: String,
    /// The harness started the native server itself.
    pub own_server: bool,
    /// The lock.
    pub lock: String,
    /// Worker processes.
    pub workers: u32,
    /// Run length, ms.
    pub duration_ms: u64,
    /// Session TTL, ms.
    pub ttl_ms: u64,
    /// Longest sleep between read and write, ms.
    pub hold_ms: u64,
    /// Requested fault kinds.
    pub faults: Vec<String>,
    /// Who `kill`/`pause` hit.
    pub target: String,
    /// The register refused writes with a token below the highest seen.
    pub fenced: bool,
    /// Seed of the schedule and the workers' hold times.
    pub seed: u64,
}

/// The whole report.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// `SAFE` or `UNSAFE`.
    pub verdict: &'static str,
    /// How the run was set up.
    pub setup: Setup,
    /// What the checker found.
    pub findings: Findings,
    /// Faults injected, by kind.
    pub faults_by_kind: BTreeMap<String, usize>,
    /// Every fault with its start and end (`CLOCK_MONOTONIC` ns).
    pub faults: Vec<FaultRecord>,
    /// History files read (one per worker incarnation).
    pub history_files: usize,
    /// History lines that did not parse (a line cut by `kill -9`).
    pub unparsable_lines: usize,
    /// The run was cut short (Ctrl-C).
    pub interrupted: bool,
    /// Workers that ended on their own before the run did (a harness problem, not a finding).
    pub early_exits: Vec<String>,
}

impl Report {
    /// Builds the report.
    pub fn new(setup: Setup, findings: Findings, faults: Vec<FaultRecord>, history_files: usize, bad: usize) -> Self {
        let mut by_kind = BTreeMap::new();
        for f in &faults {
            *by_kind.entry(f.kind.name().to_string()).or_insert(0) += 1;
        }
        Self {
            verdict: if findings.safe() { "SAFE" } else { "UNSAFE" },
            setup,
            findings,
            faults_by_kind: by_kind,
            faults,
            history_files,
            unparsable_lines: bad,
            interrupted: false,
            early_exits: Vec::new(),
        }
    }

    /// `chaos: SAFE — 412 acquisitions, 398 writes accepted, 9 rejected (fenced), …`
    pub fn verdict_line(&self) -> String {
        let f = &self.findings;
        let faults = if self.faults_by_kind.is_empty() {
            "none".to_string()
        } else {
            self.faults_by_kind.iter().map(|(k, n)| format!("{k}×{n}")).collect::<Vec<_>>().join(" ")
        };
        format!(
            "chaos: {} — {} acquisitions, {} writes accepted, {} rejected ({}), {} stale writes accepted, \
             {} lost updates (final value {}), {} token regressions, {} overlapping holds ({} with both writes accepted), faults: {faults}",
            self.verdict,
            f.acquisitions,
            f.writes_accepted,
            f.writes_rejected,
            if self.setup.fenced { "fenced" } else { "unfenced" },
            f.stale_writes_accepted,
            f.lost_updates,
            f.final_value,
            f.token_regressions,
            f.overlapping_holds,
            f.overlaps_both_written,
        )
    }
}
