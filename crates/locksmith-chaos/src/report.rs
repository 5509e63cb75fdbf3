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
    /// Nodes of the harness's own cluster (`--cluster`), if it started one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster: Option<u32>,
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
    /// Node faults that hit the node leading the cluster, by kind (a cluster run only).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub faults_on_leader: BTreeMap<String, usize>,
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
    /// The run's directory, kept after a fenced run found unsafe (the server's or the nodes'
    /// logs and data dirs).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kept_dir: Option<String>,
}

impl Report {
    /// Builds the report.
    pub fn new(setup: Setup, findings: Findings, faults: Vec<FaultRecord>, history_files: usize, bad: usize) -> Self {
        let mut by_kind = BTreeMap::new();
        let mut on_leader = BTreeMap::new();
        for f in &faults {
            *by_kind.entry(f.kind.name().to_string()).or_insert(0) += 1;
            if f.kind.needs_cluster() {
                *on_leader.entry(f.kind.name().to_string()).or_insert(0) += usize::from(f.leader == Some(true));
            }
        }
        Self {
            verdict: if findings.safe() { "SAFE" } else { "UNSAFE" },
            setup,
            findings,
            faults_by_kind: by_kind,
            faults_on_leader: on_leader,
            faults,
            history_files,
            unparsable_lines: bad,
            interrupted: false,
            early_exits: Vec::new(),
            kept_dir: None,
        }
    }

    /// `chaos: SAFE — 412 acquisitions, 398 writes accepted, 9 rejected (fenced), …`; node
    /// faults say how many hit the leader: `node-kill×4 (3 on the leader)`.
    pub fn verdict_line(&self) -> String {
        let f = &self.findings;
        let count = |(k, n): (&String, &usize)| match self.faults_on_leader.get(k) {
            Some(l) => format!("{k}×{n} ({l} on the leader)"),
            None => format!("{k}×{n}"),
        };
        let faults = if self.faults_by_kind.is_empty() {
            "none".to_string()
        } else {
            self.faults_by_kind.iter().map(count).collect::<Vec<_>>().join(" ")
        };
        let on = match self.setup.cluster {
            Some(n) => format!(" ({n}-node cluster)"),
            None => String::new(),
        };
        format!(
            "chaos: {}{on} — {} acquisitions, {} writes accepted, {} rejected ({}), {} stale writes accepted, \
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
