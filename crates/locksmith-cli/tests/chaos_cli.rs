//! `locksmith chaos` end to end: short fault-injected rounds against every backend whose server
//! the suite starts and against the harness's own 3-node cluster under node faults, asserting 0
//! stale writes accepted and 0 token regressions; unfenced runs under pauses, on one server and
//! on the cluster, that the checker must catch (proof that it can fail); and bad arguments.
//!
//! Every server is a testkit process killed by PID on drop; the harness ends its own workers,
//! server and proxies by PID before it exits.

use std::path::Path;
use std::process::{Command, Stdio};

use locksmith_testkit::{free_port, EtcdServer, MemcachedServer, MySqlServer, PostgresServer, RedisServer, ZkServer};
use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_locksmith");

/// The outcome of one `locksmith chaos` run.
struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
    report: Option<Value>,
}

impl Run {
    fn report(&self) -> &Value {
        self.report.as_ref().unwrap_or_else(|| panic!("no report; stdout: {} stderr: {}", self.stdout, self.stderr))
    }
    fn finding(&self, key: &str) -> u64 {
        self.report()["findings"][key].as_u64().unwrap_or_else(|| panic!("findings.{key} missing: {}", self.report()))
    }
    fn faults(&self, kind: &str) -> u64 {
        self.report()["faults_by_kind"][kind].as_u64().unwrap_or(0)
    }
    fn explain(&self) -> String {
        format!("exit {:?}\nstdout: {}\nstderr: {}", self.code, self.stdout, self.stderr)
    }
}

fn chaos(args: &[&str]) -> Run {
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("report.json");
    let out =
        Command::new(BIN).arg("chaos").args(args).arg("--report").arg(&report).stdin(Stdio::null()).output().unwrap();
    Run {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        report: read_report(&report),
    }
}

fn read_report(path: &Path) -> Option<Value> {
    serde_json::from_slice(&std::fs::read(path).ok()?).ok()
}

/// A fenced run must come out safe, with work done and the requested faults injected.
fn assert_safe(run: &Run, faults: &[&str]) {
    eprintln!("{}", run.stdout.trim());
    assert_eq!(run.report()["early_exits"], serde_json::json!([]), "{}", run.explain());
    assert_eq!(run.code, Some(0), "{}", run.explain());
    assert!(run.stdout.starts_with("chaos: SAFE"), "{}", run.explain());
    assert_eq!(run.finding("stale_writes_accepted"), 0, "{}", run.report());
    assert_eq!(run.finding("token_regressions"), 0, "{}", run.report());
    assert_eq!(run.report()["findings"]["lost_updates"], 0, "{}", run.report());
    assert!(run.finding("acquisitions") > 0, "{}", run.report());
    assert!(run.finding("writes_accepted") > 0, "{}", run.report());
    for kind in faults {
        assert!(run.faults(kind) >= 1, "no {kind} fault injected: {}", run.report());
    }
}

/// Processes whose command line mentions `dir` (the harness passes its history dir to every
/// worker it starts).
fn processes_mentioning(dir: &Path) -> Vec<String> {
    let needle = dir.to_string_lossy().into_owned();
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        if let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) {
            let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            if cmdline.contains(&needle) {
                found.push(format!("{}: {cmdline}", entry.file_name().to_string_lossy()));
            }
        }
    }
    found
}

/// The port of the harness's own server, from the report's backend URL.
fn own_server_port(run: &Run) -> u16 {
    let url = run.report()["setup"]["backend"].as_str().unwrap();
    url.rsplit(':').next().unwrap().parse().unwrap()
}

/// The native server the harness starts itself survives worker kills and pauses, its own
/// `kill -9` and SIGSTOP, and a partition, with no stale write accepted and no token going back;
/// afterwards no worker or server of the run is left.
#[test]
fn native_server_stays_safe_under_every_fault() {
    let histories = tempfile::tempdir().unwrap();
    let dir = histories.path().to_str().unwrap();
    let faults = ["kill", "pause", "server-kill", "server-pause", "partition"];
    let run = chaos(&[
        "--duration",
        "15s",
        "--ttl",
        "1s",
        "--faults",
        &faults.join(","),
        "--seed",
        "7",
        "--history-dir",
        dir,
    ]);
    assert_safe(&run, &faults);
    assert_eq!(run.report()["setup"]["own_server"], true);
    // One history file per worker incarnation: 5 first starts plus one per kill.
    let files = std::fs::read_dir(histories.path()).unwrap().flatten();
    let jsonl = files.filter(|e| e.file_name().to_string_lossy().ends_with(".jsonl")).count() as u64;
    assert_eq!(jsonl, 5 + run.faults("kill"), "{}", run.report());
    assert_eq!(run.report()["history_files"].as_u64(), Some(jsonl));
    assert!(processes_mentioning(histories.path()).is_empty(), "{:?}", processes_mentioning(histories.path()));
    let port = own_server_port(&run);
    assert!(std::net::TcpStream::connect(("127.0.0.1", port)).is_err(), "the harness's server still listens");
}

/// The native server with `--durability leases` (no disk wait per grant) stays safe under
/// `kill -9` and SIGSTOP of workers and of the server: after each restart the reserved token
/// blocks keep tokens going up, and the quiet period keeps the crashed run's holders alone.
#[test]
fn native_server_with_lease_durability_stays_safe_under_server_crashes() {
    let faults = ["kill", "pause", "server-kill", "server-pause"];
    let run = chaos(&[
        "--durability",
        "leases",
        "--duration",
        "12s",
        "--ttl",
        "1s",
        "--faults",
        &faults.join(","),
        "--seed",
        "5",
    ]);
    assert_safe(&run, &faults);
}

/// Ctrl-C stops the run early: the fault in progress is healed, every process ended, and the
/// histories so far are still checked and reported (exit 130).
#[test]
fn ctrl_c_stops_early_ends_every_process_and_still_reports() {
    let histories = tempfile::tempdir().unwrap();
    let report = histories.path().join("report.json");
    let child = Command::new(BIN)
        .args(["chaos", "--duration", "60s", "--faults", "pause,server-pause", "--seed", "1", "--report"])
        .arg(&report)
        .arg("--history-dir")
        .arg(histories.path())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_secs(4));
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).unwrap();
    let started = std::time::Instant::now();
    let out = child.wait_with_output().unwrap();
    assert!(started.elapsed() < std::time::Duration::from_secs(15), "took {:?} to stop", started.elapsed());
    assert_eq!(out.status.code(), Some(130));
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("chaos: SAFE"));
    let report = read_report(&report).expect("a report after Ctrl-C");
    assert_eq!(report["interrupted"], true);
    assert!(report["findings"]["acquisitions"].as_u64().unwrap() > 0, "{report}");
    assert!(processes_mentioning(histories.path()).is_empty(), "{:?}", processes_mentioning(histories.path()));
}

/// Proof that the checker can fail: without fencing, a worker paused inside its critical
/// section past its TTL writes on a stale read after another worker took the lock and wrote.
#[test]
fn an_unfenced_run_under_pauses_is_caught_as_unsafe() {
    unfenced_pauses_are_caught(&[], "8s", "chaos: UNSAFE");
}

/// A run without fencing whose holders are paused inside their critical section past their TTL
/// (`setup` first, e.g. `--cluster 3`; for `duration`): the checker calls it unsafe (stdout
/// starts with `verdict`), with stale writes accepted and overlaps both written, after at least
/// two pauses. Returns the run for checks of its own.
fn unfenced_pauses_are_caught(setup: &[&str], duration: &str, verdict: &str) -> Run {
    let mut args = setup.to_vec();
    args.extend([
        "--duration",
        duration,
        "--ttl",
        "1s",
        "--hold",
        "600ms",
        "--unfenced",
        "--faults",
        "pause",
        "--target",
        "holder",
        "--seed",
        "3",
    ]);
    let run = chaos(&args);
    eprintln!("{}", run.stdout.trim());
    assert_eq!(run.code, Some(1), "{}", run.explain());
    assert!(run.stdout.starts_with(verdict), "{}", run.explain());
    assert!(run.finding("stale_writes_accepted") > 0, "{}", run.report());
    assert!(run.finding("overlaps_both_written") > 0, "{}", run.report());
    assert!(run.faults("pause") >= 2, "{}", run.report());
    run
}

/// The harness's own 3-node cluster: safe under `kill -9`, SIGSTOP and isolation of a node, the
/// first of each kind on the leader, with the faults named in the report; afterwards no node
/// listens any more.
#[test]
fn a_three_node_cluster_stays_safe_under_node_faults() {
    let faults = ["node-kill", "node-pause", "node-partition"];
    let run =
        chaos(&["--cluster", "3", "--duration", "20s", "--ttl", "1s", "--faults", &faults.join(","), "--seed", "18"]);
    assert_safe(&run, &faults);
    assert!(run.stdout.starts_with("chaos: SAFE (3-node cluster)"), "{}", run.explain());
    assert_eq!(run.report()["setup"]["cluster"], 3);
    let records = run.report()["faults"].as_array().unwrap().clone();
    for kind in faults {
        let first = records.iter().find(|f| f["kind"] == kind).unwrap();
        assert_eq!(first["leader"], true, "the first {kind} did not hit the leader: {first}");
        let target = first["target"].as_str().unwrap();
        assert!(target.starts_with("node ") && target.ends_with("(leader)"), "{first}");
    }
    let on_leader: u64 = faults.iter().map(|k| run.report()["faults_on_leader"][k].as_u64().unwrap()).sum();
    let all: u64 = faults.iter().map(|k| run.faults(k)).sum();
    assert!(2 * on_leader >= all, "{on_leader} of {all} node faults on the leader: {}", run.report());
    // Every node was ended by the harness.
    let nodes = run.report()["setup"]["backend"].as_str().unwrap().trim_start_matches("locksmith://").to_string();
    for node in nodes.split(',') {
        assert!(std::net::TcpStream::connect(node).is_err(), "node {node} still listens");
    }
}

/// The control on the cluster: without fencing, a worker paused inside its critical section
/// past its TTL writes on a stale read after another worker took the lock and wrote, and the
/// checker says so, as on one server (worker pauses only: with node faults drawn as well, a
/// 10 s run is not sure to pause a holder past its TTL).
#[test]
fn an_unfenced_run_on_the_cluster_is_caught_as_unsafe() {
    let run = unfenced_pauses_are_caught(&["--cluster", "3"], "10s", "chaos: UNSAFE (3-node cluster)");
    assert!(run.report().get("kept_dir").is_none(), "an expected UNSAFE keeps nothing: {}", run.report());
}

fn backend_round(url: &str, faults: &[&str]) -> Run {
    chaos(&["--backend", url, "--duration", "8s", "--ttl", "1s", "--faults", &faults.join(","), "--seed", "11"])
}

/// One Redis (no persistence): safe under worker kills, pauses, partitions and added latency.
#[test]
fn redis_stays_safe_under_kills_pauses_partitions_and_latency() {
    let server = RedisServer::start();
    let faults = ["kill", "pause", "partition", "latency"];
    let run = chaos(&[
        "--backend",
        &server.url(),
        "--duration",
        "10s",
        "--ttl",
        "1s",
        "--faults",
        &faults.join(","),
        "--seed",
        "11",
    ]);
    assert_safe(&run, &faults);
}

/// etcd: safe under worker kills, pauses and partitions.
#[test]
fn etcd_stays_safe_under_kills_pauses_and_partitions() {
    let server = EtcdServer::start();
    let faults = ["kill", "pause", "partition"];
    assert_safe(&backend_round(&server.url(), &faults), &faults);
}

/// ZooKeeper: safe under worker kills, pauses and partitions.
#[test]
fn zookeeper_stays_safe_under_kills_pauses_and_partitions() {
    let server = ZkServer::start();
    let faults = ["kill", "pause", "partition"];
    assert_safe(&backend_round(&server.url(), &faults), &faults);
}

/// PostgreSQL lease table: safe under worker kills, pauses and partitions.
#[test]
fn postgres_stays_safe_under_kills_pauses_and_partitions() {
    let server = PostgresServer::start();
    let faults = ["kill", "pause", "partition"];
    assert_safe(&backend_round(&server.url(), &faults), &faults);
}

/// MariaDB lease table: safe under worker kills, pauses and partitions.
#[test]
fn mysql_stays_safe_under_kills_pauses_and_partitions() {
    let server = MySqlServer::start();
    let faults = ["kill", "pause", "partition"];
    assert_safe(&backend_round(&server.url(), &faults), &faults);
}

/// SQLite file shared by the worker processes: safe under worker kills and pauses (there is no
/// network to partition).
#[test]
fn sqlite_stays_safe_under_kills_and_pauses() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("locks.db").display());
    let faults = ["kill", "pause"];
    assert_safe(&backend_round(&url, &faults), &faults);
}

/// Redlock has no fencing token, so it runs unfenced; the harness completes and reports under
/// kills and partitions (its verdict is whatever Redlock achieved: see docs/safety.md).
#[test]
fn redlock_runs_unfenced_and_is_reported() {
    let servers = [RedisServer::start(), RedisServer::start(), RedisServer::start()];
    let url = format!("redlock://{},{},{}", servers[0].addr(), servers[1].addr(), servers[2].addr());
    let run = chaos(&[
        "--backend",
        &url,
        "--unfenced",
        "--duration",
        "8s",
        "--ttl",
        "1s",
        "--faults",
        "kill,partition",
        "--seed",
        "5",
    ]);
    eprintln!("{}", run.stdout.trim());
    assert!(matches!(run.code, Some(0) | Some(1)), "{}", run.explain());
    assert!(run.stdout.starts_with("chaos: "), "{}", run.explain());
    assert_eq!(run.report()["setup"]["fenced"], false);
    assert!(run.finding("acquisitions") > 0, "{}", run.report());
    assert!(run.faults("kill") >= 1 && run.faults("partition") >= 1, "{}", run.report());

    // Without --unfenced, Redlock is refused before any worker starts.
    let run = chaos(&["--backend", &url, "--duration", "2s", "--faults", "kill"]);
    assert_eq!(run.code, Some(2), "{}", run.explain());
    assert!(run.stderr.contains("fencing"), "{}", run.explain());
}

/// memcached has no fencing token either: under pauses of the holder past its TTL, the checker
/// catches the stale writes, as on Redlock; without --unfenced it is refused before any worker
/// starts.
#[test]
fn an_unfenced_run_on_memcached_under_pauses_is_caught_as_unsafe() {
    let server = MemcachedServer::start();
    let url = server.url();
    let run = unfenced_pauses_are_caught(&["--backend", &url], "10s", "chaos: UNSAFE");
    assert_eq!(run.report()["setup"]["fenced"], false);

    let run = chaos(&["--backend", &url, "--duration", "2s", "--faults", "kill"]);
    assert_eq!(run.code, Some(2), "{}", run.explain());
    assert!(run.stderr.contains("fencing"), "{}", run.explain());
}

/// Bad arguments exit 2 with a message naming the problem, before anything starts.
#[test]
fn bad_arguments_exit_2() {
    let redis = format!("redis://127.0.0.1:{}", free_port());
    for (args, needle) in [
        (vec!["--backend", &redis, "--faults", "server-kill"], "server-kill"),
        (vec!["--backend", &redis, "--faults", "kill,server-pause"], "server-pause"),
        (vec!["--backend", "redis://192.0.2.1:6379", "--faults", "kill"], "loopback"),
        (vec!["--backend", "etcd://127.0.0.1:2379,192.0.2.7:2379"], "loopback"),
        (vec!["--backend", "sqlite:///tmp/x.db", "--faults", "partition"], "network"),
        (vec!["--backend", "memory://x"], "memory"),
        (vec!["--backend", &redis, "--durability", "leases"], "durability"),
        (vec!["--faults", "meteor"], "meteor"),
        (vec!["--ttl", "0s"], "ttl"),
        (vec!["--duration", "0s"], "longer than zero"),
        (vec!["--history-dir", env!("CARGO_MANIFEST_DIR")], "not empty"),
        (vec!["--cluster", "2"], "3, 5 or 7"),
        (vec!["--cluster", "3", "--backend", &redis], "not with --backend"),
        (vec!["--cluster", "3", "--durability", "leases"], "durability"),
        (vec!["--cluster", "3", "--faults", "server-kill"], "node-kill"),
        (vec!["--faults", "node-pause"], "--cluster 3"),
        (vec!["--backend", &redis, "--faults", "node-partition"], "own cluster"),
    ] {
        let run = chaos(&args);
        assert_eq!(run.code, Some(2), "{args:?}: {}", run.explain());
        assert!(run.stderr.contains(needle), "{args:?}: {needle:?} not in {}", run.stderr);
        assert!(run.report.is_none(), "{args:?} wrote a report");
    }
}

/// A backend that is down at the start exits 69 quickly, with no report.
#[test]
fn an_unreachable_backend_exits_69() {
    let url = format!("redis://127.0.0.1:{}", free_port());
    let started = std::time::Instant::now();
    let run = chaos(&["--backend", &url, "--duration", "5s", "--faults", "kill"]);
    assert_eq!(run.code, Some(69), "{}", run.explain());
    assert!(started.elapsed() < std::time::Duration::from_secs(20));
    assert!(run.report.is_none());
}

/// The results table of docs/safety.md: every backend for `CHAOS_SECONDS` (default 60) with all
/// its applicable faults, one after another so the runs do not share the 2 cores. Not part of
/// CI (about 9 minutes); run it with a release binary:
///
/// ```sh
/// cargo build --release -p locksmith-cli
/// CHAOS_BIN=$PWD/target/release/locksmith cargo test -p locksmith-cli --test chaos_cli -- --ignored --nocapture
/// ```
#[test]
#[ignore = "about 9 minutes; produces the table in docs/safety.md"]
fn safety_matrix() {
    let seconds = std::env::var("CHAOS_SECONDS").unwrap_or_else(|_| "60".into());
    let duration = format!("{seconds}s");
    let bin = std::env::var("CHAOS_BIN").unwrap_or_else(|_| BIN.to_string());
    let run = |name: &str, extra: &[&str]| {
        let dir = tempfile::tempdir().unwrap();
        let report = dir.path().join("report.json");
        let out = Command::new(&bin)
            .arg("chaos")
            .args(["--duration", &duration, "--ttl", "1s", "--seed", "2026", "--report"])
            .arg(&report)
            .args(extra)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        println!("{name}: exit {:?}: {}", out.status.code(), stdout.trim());
        if !out.stderr.is_empty() {
            println!("  stderr: {}", String::from_utf8_lossy(&out.stderr).trim());
        }
        out.status.code()
    };
    let mut codes = Vec::new();
    codes.push(run("native", &[]));
    codes.push(run("native --durability leases", &["--durability", "leases"]));
    codes.push(run("native --unfenced", &["--unfenced", "--faults", "kill,pause,server-kill,server-pause"]));
    {
        let s = RedisServer::start();
        codes.push(run("redis", &["--backend", &s.url()]));
    }
    {
        let s = RedisServer::start_durable();
        codes.push(run("redis (appendfsync always)", &["--backend", &s.url()]));
    }
    {
        let s = [RedisServer::start(), RedisServer::start(), RedisServer::start()];
        let url = format!("redlock://{},{},{}", s[0].addr(), s[1].addr(), s[2].addr());
        run("redlock --unfenced", &["--backend", &url, "--unfenced"]);
    }
    {
        let s = MemcachedServer::start();
        run("memcached --unfenced", &["--backend", &s.url(), "--unfenced"]);
    }
    {
        let s = EtcdServer::start();
        codes.push(run("etcd", &["--backend", &s.url()]));
    }
    {
        let s = ZkServer::start();
        codes.push(run("zk", &["--backend", &s.url()]));
    }
    {
        let s = PostgresServer::start();
        codes.push(run("postgres", &["--backend", &s.url()]));
    }
    {
        let s = MySqlServer::start();
        codes.push(run("mysql", &["--backend", &s.url()]));
    }
    {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("locks.db").display());
        codes.push(run("sqlite", &["--backend", &url]));
    }
    // Every fenced run must be safe; the unfenced native run shows what fencing prevents.
    assert_eq!(codes[0], Some(0));
    assert!(codes[2..].iter().all(|c| *c == Some(0)), "{codes:?}");
}
