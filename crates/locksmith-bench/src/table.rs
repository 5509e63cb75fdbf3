//! The tables on stdout: the timed workloads with ratios to the first backend, the herd, and
//! the raw-recipe baselines.

use super::args::{BenchArgs, Workload};
use super::floor::{self, times_cell};
use super::report::{BackendReport, Figures};

/// One column of the table: its title, the figure, and its decimals.
struct Column {
    title: String,
    value: fn(&Figures) -> Option<f64>,
    decimals: usize,
    /// A multiple (`×2.20`), not compared across backends in the ratio lines.
    times: bool,
}

fn col(title: &str, value: fn(&Figures) -> Option<f64>, decimals: usize) -> Column {
    Column { title: title.into(), value, decimals, times: false }
}

/// Columns of the main table for the selected timed workloads.
fn columns(args: &BenchArgs) -> Vec<Column> {
    let mut cols = Vec::new();
    if args.runs(Workload::Uncontended) {
        cols.push(col("cycle p50 µs", |f| f.cycle_p50_us, 0));
        if args.floor_dir.is_some() {
            cols.push(Column { times: true, ..col("× floor", |f| f.cycle_x_floor, 2) });
        }
        cols.push(col("cycle p99 µs", |f| f.cycle_p99_us, 0));
        cols.push(col("cycle max µs", |f| f.cycle_max_us, 0));
        cols.push(col("cycles/s", |f| f.cycles_per_sec, 0));
    }
    if args.runs(Workload::Contended) {
        cols.push(col(&format!("{}×1 acq/s", args.clients), |f| f.contended_acq_per_sec, 0));
        cols.push(col("fairness", |f| f.fairness, 2));
        cols.push(col("wait p50 µs", |f| f.wait_p50_us, 0));
        cols.push(col("wait p99 µs", |f| f.wait_p99_us, 0));
    }
    if args.runs(Workload::Many) {
        cols.push(col(&format!("{0}×{0} acq/s", args.locks), |f| f.many_acq_per_sec, 0));
    }
    if args.runs(Workload::Semaphore) {
        cols.push(col(&format!("sem {}×{} acq/s", args.clients, args.permits), |f| f.semaphore_acq_per_sec, 0));
        cols.push(col("sem fairness", |f| f.semaphore_fairness, 2));
    }
    if args.runs(Workload::ReadWrite) {
        let readers = args.clients.saturating_sub(1);
        cols.push(col(&format!("rw {readers}r+1w acq/s"), |f| f.rw_acq_per_sec, 0));
        cols.push(col("rw fairness", |f| f.rw_fairness, 2));
    }
    cols
}

fn cell(value: Option<f64>, decimals: usize) -> String {
    value.map_or_else(|| "-".into(), |v| format!("{v:.decimals$}"))
}

fn column_cell(c: &Column, f: &Figures) -> String {
    match c.times {
        true => times_cell((c.value)(f)),
        false => cell((c.value)(f), c.decimals),
    }
}

/// Prints every table for the selected workloads.
pub(crate) fn print(args: &BenchArgs, reports: &[BackendReport]) {
    let what = if args.rounds > 1 { format!(", medians of {} rounds", args.rounds) } else { String::new() };
    println!("{:?} per workload, TTL {:?}{what}", args.duration, args.ttl);
    let columns = columns(args);
    if !columns.is_empty() {
        print_main(&columns, reports);
    }
    if let Some(dir) = &args.floor_dir {
        println!();
        println!(
            "floor, measured before each round's workloads: TCP round trip to the backend's host, \
             fdatasync of a {}-byte append in {} ({} samples)",
            floor::APPEND_BYTES,
            dir.display(),
            floor::SYNC_SAMPLES
        );
        print_floor(reports);
    }
    if args.runs(Workload::Herd) {
        println!();
        println!("herd: {} waiters (a session each) on one lock, {} hand-offs", args.waiters, args.releases);
        print_herd(reports);
    }
    if args.runs(Workload::Baseline) {
        println!();
        println!("raw recipes on the same servers (uncontended cycle without locksmith's engine):");
        print_baseline(reports);
    }
}

fn print_main(columns: &[Column], reports: &[BackendReport]) {
    let mut rows =
        vec![std::iter::once("backend".to_string()).chain(columns.iter().map(|c| c.title.clone())).collect()];
    for r in reports {
        let cells = columns.iter().map(|c| column_cell(c, &r.median));
        rows.push(std::iter::once(r.backend.clone()).chain(cells).collect());
    }
    print_rows(&rows);
    let Some((first, others)) = reports.split_first() else {
        return;
    };
    for r in others {
        let ratios: Vec<String> = columns
            .iter()
            .filter(|c| !c.times)
            .map(|c| format!("{} {}", c.title, ratio((c.value)(&r.median), (c.value)(&first.median))))
            .collect();
        println!("{} ÷ {}: {}", r.backend, first.backend, ratios.join(", "));
    }
}

/// One floor row per distinct host (the fdatasync is the same for all), or one row without a
/// round trip when no backend has a host.
fn print_floor(reports: &[BackendReport]) {
    let mut rows =
        vec![vec![String::new(), "RTT p50 µs".into(), "fdatasync p50 µs".into(), "2 RTT + fdatasync µs".into()]];
    let mut seen: Vec<String> = Vec::new();
    for r in reports {
        let Some(f) = r.floor else { continue };
        let label = match floor::host_of(&r.backend) {
            Some((host, _)) => format!("floor {host}"),
            // Its fdatasync is already in the rows of the hosts.
            None if reports.iter().any(|o| floor::host_of(&o.backend).is_some()) => continue,
            None => "floor".into(),
        };
        if seen.contains(&label) {
            continue;
        }
        rows.push(vec![
            label.clone(),
            cell(f.rtt_p50_us, 0),
            cell(f.fdatasync_p50_us, 0),
            cell(f.single_node_cycle_us, 0),
        ]);
        seen.push(label);
    }
    print_rows(&rows);
}

fn print_herd(reports: &[BackendReport]) {
    let mut rows = vec![vec![
        "backend".to_string(),
        "wake-ups/release".into(),
        "hand-off p50 µs".into(),
        "hand-off p99 µs".into(),
    ]];
    let mut failures = Vec::new();
    for r in reports {
        let f = &r.median;
        match r.herd_error() {
            Some(e) => {
                // The reason goes under the table: it is longer than any figure.
                rows.push(vec![r.backend.clone(), "failed".into(), "-".into(), "-".into()]);
                failures.push(format!("{}: failed: {e}", r.backend));
            }
            None => rows.push(vec![
                r.backend.clone(),
                cell(f.herd_wakeups_per_release, 2),
                cell(f.herd_handoff_p50_us, 0),
                cell(f.herd_handoff_p99_us, 0),
            ]),
        }
    }
    print_rows(&rows);
    for f in failures {
        println!("{f}");
    }
}

fn print_baseline(reports: &[BackendReport]) {
    let mut rows = vec![vec![
        "backend".to_string(),
        "raw recipe".into(),
        "raw p50 µs".into(),
        "raw p99 µs".into(),
        "raw cycles/s".into(),
        "driver/raw p50".into(),
    ]];
    for r in reports {
        let Some(recipe) = r.baseline_recipe else {
            rows.push(vec![r.backend.clone(), "(none)".into(), "-".into(), "-".into(), "-".into(), "-".into()]);
            continue;
        };
        let f = &r.median;
        match r.baseline_error() {
            Some(e) => rows.push(vec![r.backend.clone(), format!("{recipe}: failed: {e}")]),
            None => rows.push(vec![
                r.backend.clone(),
                recipe.to_string(),
                cell(f.baseline_cycle_p50_us, 0),
                cell(f.baseline_cycle_p99_us, 0),
                cell(f.baseline_cycles_per_sec, 0),
                f.baseline_overhead.map_or_else(|| "-".into(), |o| format!("×{o:.2}")),
            ]),
        }
    }
    print_rows(&rows);
}

/// Prints `rows` as aligned columns: the first to the left, the others to the right.
fn print_rows(rows: &[Vec<String>]) {
    let mut widths: Vec<usize> = Vec::new();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            let w = cell.chars().count();
            match widths.get_mut(i) {
                Some(width) => *width = (*width).max(w),
                None => widths.push(w),
            }
        }
    }
    for row in rows {
        let cells: Vec<String> = row
            .iter()
            .zip(&widths)
            .enumerate()
            .map(|(i, (cell, &w))| if i == 0 { format!("{cell:<w$}") } else { format!("{cell:>w$}") })
            .collect();
        println!("{}", cells.join(" | ").trim_end());
    }
}

/// `×a/base`, or `-` when either is missing or the base is zero.
fn ratio(value: Option<f64>, base: Option<f64>) -> String {
    match (value, base) {
        (Some(v), Some(b)) if b > 0.0 && v.is_finite() => format!("×{:.2}", v / b),
        _ => "-".into(),
    }
}
