//! What `locksmith dashboard` costs the native server: the uncontended lock→unlock cycle of a
//! client, and the server's CPU time, on a server filled with LOCKS locks, (a) without a
//! dashboard, (b) with one nobody has open, (c) with PAGES pages open (each an SSE stream read
//! to the end, as a browser tab does; the page's drawing happens in the browser, not here).
//! The three alternate round by round, so a noisy machine affects them alike.
//!
//! ```text
//! cargo build -p locksmith-cli --example dashboard_cost
//! target/debug/examples/dashboard_cost target/debug/locksmith [LOCKS] [PAGES] [SECONDS] [ROUNDS]
//! ```
//! Defaults: 10,000 locks, 10 pages, 5 s per measurement, 3 rounds. Figures in docs/benchmarks.md.

#[path = "../tests/support/dashboard.rs"]
mod dashboard;

use std::path::Path;
use std::time::{Duration, Instant};

use locksmith_testkit::NativeServer;

/// The server's CPU time (user + system) in clock ticks (1/100 s).
fn cpu_ticks(pid: i32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let rest = stat.rsplit_once(") ").map(|(_, r)| r).unwrap_or_default();
    let f: Vec<u64> = rest.split_whitespace().skip(11).take(2).filter_map(|v| v.parse().ok()).collect();
    f.iter().sum()
}

/// Cycles for `secs`: (p50, p99) in µs.
async fn cycles(client: &locksmith::Client, secs: u64) -> (u128, u128) {
    let end = Instant::now() + Duration::from_secs(secs);
    let mut v = Vec::new();
    while Instant::now() < end {
        let t = Instant::now();
        let g = client.lock("probe").await.expect("lock");
        g.unlock().await.expect("unlock");
        v.push(t.elapsed().as_micros());
    }
    v.sort_unstable();
    (v[v.len() / 2], v[v.len() * 99 / 100])
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let bin = args.get(1).cloned().unwrap_or_else(|| "target/debug/locksmith".into());
    let num = |i: usize, d: u64| args.get(i).and_then(|a| a.parse().ok()).unwrap_or(d);
    let (locks, pages, secs, rounds) = (num(2, 10_000), num(3, 10), num(4, 5), num(5, 3));
    // Without an fsync per grant: the disk's noise would hide what the dashboard costs.
    let server = NativeServer::start_with(Path::new(&bin), &["--durability", "leases"]);
    let url = server.url();
    let client = locksmith::connect(&url).await.expect("connect");
    let fill = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for chunk in 0..16u64 {
        let c = client.clone();
        tasks.spawn(async move {
            for i in (chunk..locks).step_by(16) {
                c.lock(&format!("fill-{i:05}")).await.expect("fill lock").unlock().await.expect("fill unlock");
            }
        });
    }
    while tasks.join_next().await.is_some() {}
    let listed = client.status(None).await.map(|l| l.len()).unwrap_or(0);
    println!("server: {url}, {listed} locks listed (filled in {:?}); {secs} s per measurement", fill.elapsed());
    let _ = cycles(&client, 1).await; // warm up
    println!("| round | dashboard | cycle p50 | cycle p99 | server CPU | dashboard CPU | bytes to pages |");
    println!("|---|---|---|---|---|---|---|");
    for round in 1..=rounds {
        for mode in ["none", "idle", "pages"] {
            let dash = (mode != "none").then(|| dashboard::start(&bin, &url, ""));
            let open: Vec<_> = match (&dash, mode) {
                (Some((_, port)), "pages") => (0..pages).map(|_| dashboard::open_events(*port)).collect(),
                _ => Vec::new(),
            };
            tokio::time::sleep(Duration::from_millis(1500)).await; // pages connected, feed running
            let (s0, d0) = (cpu_ticks(server.pid()), dash.as_ref().map_or(0, |(p, _)| cpu_ticks(p.pid())));
            let (p50, p99) = cycles(&client, secs).await;
            let (s1, d1) = (cpu_ticks(server.pid()), dash.as_ref().map_or(0, |(p, _)| cpu_ticks(p.pid())));
            let mut bytes = 0;
            for (s, t) in open {
                let _ = s.shutdown(std::net::Shutdown::Both);
                bytes += t.join().map_or(0, |b| b.len());
            }
            let pct = |ticks: u64| format!("{:.0} %", ticks as f64 / secs as f64);
            let label = match mode {
                "none" => "none".to_string(),
                "idle" => "running, no page open".to_string(),
                _ => format!("{pages} pages open"),
            };
            let dash_cpu = if dash.is_some() { pct(d1 - d0) } else { "-".into() };
            println!("| {round} | {label} | {p50} µs | {p99} µs | {} | {dash_cpu} | {bytes} |", pct(s1 - s0));
        }
    }
}
