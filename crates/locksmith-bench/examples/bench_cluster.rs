//! The native server as a 3-node cluster against what a team would run instead, in one
//! `locksmith bench` run (issues 18 and 27): the same server as a single node (default
//! durability, and `--durability leases`: what a cluster mode without per-grant replication
//! could at best approach), etcd as a 3-member cluster, Redis without persistence and Redis with `appendfsync always` (the same
//! durability as a native grant). Options after the binary's path go to `locksmith bench` as
//! they are, `--floor-dir` too (give a directory on the disk the servers' data dirs are on, so
//! the floor's fdatasync is theirs):
//!
//! ```text
//! cargo build --release -p locksmith-cli
//! cargo run --release -p locksmith-bench --example bench_cluster -- target/release/locksmith \
//!     --workloads uncontended,contended --duration 2s --rounds 3 --floor-dir /tmp/floor
//! ```
//!
//! With `--before OTHER-locksmith` right after the path, a second 3-node cluster served by
//! another build joins the run, listed right after the first: a before/after comparison on the
//! same machine at the same time. Then the CPU time of each cluster's three node processes
//! (utime + stime from `/proc`) is also measured per uncontended cycle, in three alternating
//! runs of `--workloads uncontended --duration 2s` on each cluster alone; the medians are
//! printed last.
use std::process::Command;
use std::time::Duration;

use locksmith_bench::ExampleArgs;
use locksmith_testkit::{EtcdCluster, NativeCluster, NativeServer, RedisServer};

fn main() {
    // The servers are dropped (killed by PID) when `run` returns, before the process exits.
    std::process::exit(run());
}

fn run() -> i32 {
    let Some(ExampleArgs { bin, before, bench: args, .. }) = ExampleArgs::parse(std::env::args().skip(1)) else {
        eprintln!("usage: bench_cluster PATH-TO-locksmith [--before PATH-TO-OTHER-locksmith] [bench options…]");
        return 2;
    };
    let cluster = NativeCluster::start(bin.as_ref(), 3);
    let cluster_before = before.as_ref().map(|b| NativeCluster::start(b.as_ref(), 3));
    let single = NativeServer::start(bin.as_ref());
    let single_leases = NativeServer::start_with(bin.as_ref(), &["--durability", "leases"]);
    let etcd = EtcdCluster::start(3);
    let redis = RedisServer::start();
    let redis_durable = RedisServer::start_durable();
    let mut cmd = Command::new(&bin);
    cmd.arg("bench").args(&args);
    let urls = std::iter::once(cluster.url()).chain(cluster_before.as_ref().map(NativeCluster::url)).chain([
        single.url(),
        single_leases.url(),
        etcd.url(),
        redis.url(),
        redis_durable.url(),
    ]);
    for url in urls {
        cmd.args(["--backend", &url]);
    }
    let status = cmd.status().expect("run locksmith bench");
    let mut code = status.code().unwrap_or(1);
    if let Some(other) = &cluster_before {
        let (mut after, mut prior) = (Vec::new(), Vec::new());
        for _ in 0..3 {
            match (cpu_per_cycle(&bin, &cluster), cpu_per_cycle(&bin, other)) {
                (Ok(a), Ok(b)) => {
                    after.push(a);
                    prior.push(b);
                }
                (Err(e), _) | (_, Err(e)) => {
                    eprintln!("cpu per cycle: {e}");
                    code = 1;
                    break;
                }
            }
        }
        if let (Some(a), Some(b)) = (median(&mut after), median(&mut prior)) {
            println!(
                "CPU per uncontended cycle, 3 node processes (median of {} runs of 2 s): {a:.0} µs ({}) vs {b:.0} µs \
                 (--before {}): × {:.2}",
                after.len(),
                bin,
                before.as_deref().unwrap_or(""),
                a / b
            );
        }
    }
    code
}

/// CPU time (µs) the three nodes of `cluster` spend per cycle of one uncontended client, over
/// a 2 s run of `bin bench` on that cluster alone.
fn cpu_per_cycle(bin: &str, cluster: &NativeCluster) -> Result<f64, String> {
    let pids: Vec<i32> = cluster.ids().into_iter().map(|id| cluster.pid(id)).collect();
    let start = cpu_ticks(&pids)?;
    let duration = Duration::from_secs(2);
    let out = Command::new(bin)
        .args(["bench", "--workloads", "uncontended", "--duration", "2s", "--json", "--backend", &cluster.url()])
        .output()
        .map_err(|e| format!("run {bin} bench: {e}"))?;
    let end = cpu_ticks(&pids)?;
    if !out.status.success() {
        return Err(format!("{bin} bench: {}", String::from_utf8_lossy(&out.stderr)));
    }
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).map_err(|e| format!("bench --json: {e}"))?;
    let per_sec = report["backends"][0]["median"]["cycles_per_sec"]
        .as_f64()
        .ok_or_else(|| "bench --json has no cycles_per_sec".to_string())?;
    let cycles = per_sec * duration.as_secs_f64();
    let tick_us = 1e6 / clock_ticks_per_sec()?;
    Ok((end - start) as f64 * tick_us / cycles)
}

/// utime + stime of `pids`, in clock ticks (`/proc/PID/stat` fields 14 and 15).
fn cpu_ticks(pids: &[i32]) -> Result<u64, String> {
    let mut total = 0;
    for pid in pids {
        let stat =
            std::fs::read_to_string(format!("/proc/{pid}/stat")).map_err(|e| format!("/proc/{pid}/stat: {e}"))?;
        // Fields after the command name, which may hold spaces, start with the state (field 3).
        let fields: Vec<&str> = stat.rsplit_once(')').map(|(_, f)| f.split_whitespace().collect()).unwrap_or_default();
        let field =
            |i: usize| fields.get(i).and_then(|f| f.parse::<u64>().ok()).ok_or(format!("/proc/{pid}/stat: {stat}"));
        total += field(11)? + field(12)?;
    }
    Ok(total)
}

fn clock_ticks_per_sec() -> Result<f64, String> {
    let out = Command::new("getconf").arg("CLK_TCK").output().map_err(|e| format!("getconf CLK_TCK: {e}"))?;
    String::from_utf8_lossy(&out.stdout).trim().parse().map_err(|e| format!("getconf CLK_TCK: {e}"))
}

fn median(v: &mut [f64]) -> Option<f64> {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied()
}
