//! `locksmith bench` measures every backend the suite can start, in one table.

use std::process::{Command, Stdio};

use locksmith_testkit::{
    EtcdServer, MemcachedServer, MySqlServer, NativeServer, PostgresServer, RedisServer, ZkServer,
};

const BIN: &str = env!("CARGO_BIN_EXE_locksmith");

/// One run over the native server, Redis, Redlock, memcached, etcd, ZooKeeper, PostgreSQL, MariaDB and
/// SQLite prints one table row per backend and one ratio line per backend after the first, and
/// a raw-recipe baseline row, with the driver's overhead, for every backend that has a recipe.
#[test]
fn bench_prints_one_table_for_every_backend_with_raw_recipe_baselines() {
    let native = NativeServer::start(BIN.as_ref());
    let redis = RedisServer::start();
    let instances: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let redlock = format!("redlock://{}", instances.iter().map(RedisServer::addr).collect::<Vec<_>>().join(","));
    let memcached = MemcachedServer::start();
    let etcd = EtcdServer::start();
    let zk = ZkServer::start();
    let pg = PostgresServer::start();
    let my = MySqlServer::start();
    let dir = tempfile::tempdir().unwrap();
    let sqlite = format!("sqlite://{}", dir.path().join("bench.db").display());
    let backends =
        [native.url(), redis.url(), redlock, memcached.url(), etcd.url(), zk.url(), pg.url(), my.url(), sqlite];
    let mut cmd = Command::new(BIN);
    cmd.args(["bench", "--duration", "200ms", "--clients", "3", "--locks", "4"])
        .args(["--workloads", "uncontended,contended,many,baseline"])
        .stdin(Stdio::null());
    for b in &backends {
        cmd.args(["--backend", b]);
    }
    let out = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{}\n{stdout}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("cycle p50") && stdout.contains("fairness"), "{stdout}");
    for b in &backends {
        let row =
            stdout.lines().find(|l| l.starts_with(b.as_str())).unwrap_or_else(|| panic!("no row for {b}:\n{stdout}"));
        assert!(row.split('|').count() >= 8, "{row}");
    }
    assert_eq!(stdout.matches('÷').count(), backends.len() - 1, "one ratio line per extra backend:\n{stdout}");
    let (_, baselines) = stdout.split_once("raw recipes").unwrap_or_else(|| panic!("no baseline table:\n{stdout}"));
    for (b, recipe) in [
        (&backends[1], "SET NX PX"),
        (&backends[4], "txn create_revision"),
        (&backends[5], "ephemeral"),
        (&backends[6], "pg_try_advisory_lock"),
        (&backends[7], "GET_LOCK"),
    ] {
        let row =
            baselines.lines().find(|l| l.starts_with(b.as_str())).unwrap_or_else(|| panic!("no baseline for {b}"));
        assert!(row.contains(recipe) && row.contains('×') && !row.contains("failed"), "{row}");
    }
    for none in [&backends[0], &backends[3]] {
        let row = baselines.lines().find(|l| l.starts_with(none.as_str())).unwrap();
        assert!(row.contains("(none)"), "no raw recipe for {none}: {row}");
    }
}

/// `--floor-dir` measures the floor in the same run: a floor row with the loopback round trip,
/// the fdatasync and 2 RTT + fdatasync, the native row's cycle also as × floor (memory://, not
/// native, gets "-"), the same figures in `--json`, and no probe file left in the directory.
#[test]
fn floor_dir_prints_a_floor_row_and_native_cycles_as_times_floor() {
    let native = NativeServer::start(BIN.as_ref());
    let dir = tempfile::tempdir().unwrap();
    let floor_dir = dir.path().to_str().unwrap();
    let run = |json: bool| {
        let mut cmd = Command::new(BIN);
        cmd.args(["bench", "--backend", &native.url(), "--backend", "memory://floor", "--floor-dir", floor_dir])
            .args(["--duration", "200ms", "--rounds", "1", "--workloads", "uncontended"])
            .stdin(Stdio::null());
        if json {
            cmd.arg("--json");
        }
        let out = cmd.output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert_eq!(out.status.code(), Some(0), "{}\n{stdout}", String::from_utf8_lossy(&out.stderr));
        stdout
    };
    let stdout = run(false);
    let numbers = |row: &str| -> Vec<f64> { row.split('|').skip(1).filter_map(|c| c.trim().parse().ok()).collect() };
    assert!(stdout.lines().any(|l| l.starts_with("backend") && l.contains("| × floor |")), "{stdout}");
    let floor =
        stdout.lines().find(|l| l.starts_with("floor 127.0.0.1")).unwrap_or_else(|| panic!("no floor row:\n{stdout}"));
    let [rtt, sync, cycle_floor] = numbers(floor)[..] else { panic!("three figures expected: {floor}") };
    assert!(rtt > 0.0 && sync > 0.0 && cycle_floor >= 2.0 * rtt + sync - 1.0, "{floor}");
    let row = stdout.lines().find(|l| l.starts_with(native.url().as_str())).unwrap();
    let times: f64 = row
        .split('|')
        .nth(2)
        .and_then(|c| c.trim().strip_prefix('×'))
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("no × floor: {row}"));
    assert!(times > 0.0, "{row}");
    let memory = stdout.lines().find(|l| l.starts_with("memory://floor")).unwrap();
    assert_eq!(memory.split('|').nth(2).map(str::trim), Some("-"), "{memory}");
    let doc: serde_json::Value = serde_json::from_str(&run(true)).unwrap();
    let backend = &doc["backends"][0];
    assert!(backend["median"]["cycle_x_floor"].as_f64().is_some_and(|v| v > 0.0), "{backend}");
    assert!(backend["floor"]["single_node_cycle_us"].as_f64().is_some_and(|v| v > 0.0), "{backend}");
    assert!(doc["backends"][1]["median"]["cycle_x_floor"].is_null(), "{doc}");
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0, "the probe file is removed");
}

/// A `--floor-dir` that is not a directory is refused before anything runs.
#[test]
fn floor_dir_that_is_not_a_directory_is_refused() {
    let out = Command::new(BIN)
        .args(["bench", "--backend", "memory://x", "--floor-dir", "/nonexistent/locksmith-floor"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--floor-dir"));
}

/// The native server hands a lock to the next of 50 waiters with one pushed message: wake-ups
/// per release stay at one (a polling or broadcasting herd would show up to 50), and `--json`
/// carries the herd's and every other workload's figures.
#[test]
fn native_herd_wakes_one_waiter_per_release() {
    let native = NativeServer::start(BIN.as_ref());
    let doc = herd_of_50(&native.url(), "uncontended,herd");
    assert_eq!((doc["waiters"].as_u64(), doc["releases"].as_u64()), (Some(50), Some(10)), "{doc}");
    let median = &doc["backends"][0]["median"];
    assert!(median["herd_handoff_p99_us"].as_f64().is_some_and(|v| v > 0.0), "{median}");
    assert!(median["cycle_p50_us"].as_f64().is_some_and(|v| v > 0.0), "{median}");
    for field in ["many_acq_per_sec", "baseline_cycle_p50_us", "baseline_overhead"] {
        assert!(median.get(field).is_some_and(serde_json::Value::is_null), "{field} not run: {median}");
    }
}

/// Redis plain mode wakes only the head of its waiter queue: 50 waiters (a session and
/// connections each), one wake-up per release (the broadcast it replaced woke all 50).
#[test]
fn redis_herd_wakes_one_waiter_per_release() {
    let redis = RedisServer::start();
    herd_of_50(&redis.url(), "herd");
}

/// Runs `workloads` (herd among them: 50 waiters, 10 releases) on `url` with `--json`, checks
/// that the herd woke about one waiter per release and measured its hand-offs, and answers the
/// JSON document.
fn herd_of_50(url: &str, workloads: &str) -> serde_json::Value {
    let out = Command::new(BIN)
        .args(["bench", "--backend", url, "--duration", "100ms", "--json"])
        .args(["--workloads", workloads, "--waiters", "50", "--releases", "10"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{}\n{stdout}", String::from_utf8_lossy(&out.stderr));
    let doc: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let median = &doc["backends"][0]["median"];
    let wakeups = median["herd_wakeups_per_release"].as_f64().unwrap_or_else(|| panic!("no wake-ups: {median}"));
    assert!((0.9..=1.5).contains(&wakeups), "wake-ups per release {wakeups}: {median}");
    assert!(median["herd_handoff_p50_us"].as_f64().is_some_and(|v| v > 0.0), "{median}");
    doc
}

/// `--plot out.svg` writes one SVG with a curve and bars for every backend, named in it.
#[test]
fn plot_writes_an_svg_naming_every_backend() {
    let native = NativeServer::start(BIN.as_ref());
    let dir = tempfile::tempdir().unwrap();
    let svg = dir.path().join("out.svg");
    let backends = [native.url(), "memory://plot".to_string()];
    let out = Command::new(BIN)
        .args(["bench", "--backend", &backends[0], "--backend", &backends[1], "--duration", "100ms"])
        .args(["--workloads", "uncontended,contended,many", "--clients", "2", "--locks", "2"])
        .arg("--plot")
        .arg(&svg)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let text = std::fs::read_to_string(&svg).unwrap();
    assert!(text.starts_with("<svg") && text.trim_end().ends_with("</svg>"), "not an SVG document");
    assert!(text.contains("latency CDF") && text.contains("acquisitions/s"), "both charts are drawn");
    for b in &backends {
        assert!(text.contains(b.as_str()), "{b} is not named in the plot");
    }
    assert!(text.matches("<polyline").count() >= backends.len(), "one CDF curve per backend");
}

/// `--plot out.png` writes a PNG image of the same charts.
#[test]
fn plot_writes_a_png_when_the_file_ends_in_png() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("out.png");
    let out = Command::new(BIN)
        .args(["bench", "--backend", "memory://png", "--duration", "50ms", "--workloads", "uncontended,contended,many"])
        .arg("--plot")
        .arg(&path)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let bytes = std::fs::read(&path).unwrap();
    assert!(bytes.starts_with(b"\x89PNG\r\n\x1a\n"), "not a PNG file");
    // IHDR: width and height big-endian right after the chunk header.
    assert_eq!(&bytes[16..24], &[0, 0, 5, 0, 0, 0, 2, 8], "1280×520 image");
}

/// A plot file of another type is refused up front, before any workload runs, with a usage
/// error.
#[test]
fn plot_to_an_unknown_image_type_is_refused_before_running() {
    let out = Command::new(BIN)
        .args(["bench", "--backend", "memory://gif", "--plot", "out.gif"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("must end in .svg or .png"));
    assert!(out.stdout.is_empty());
}

/// A backend that cannot hold `--waiters` sessions (ZooKeeper takes 60 connections from one
/// address by default) gets a failed herd row naming the reason; the other workloads still run
/// and the bench exits 0.
#[test]
fn herd_beyond_a_backends_session_limit_fails_only_its_row() {
    let zk = ZkServer::start();
    let out = Command::new(BIN)
        .args(["bench", "--backend", &zk.url(), "--duration", "100ms"])
        .args(["--workloads", "herd,uncontended", "--waiters", "100", "--releases", "5"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{}\n{stdout}", String::from_utf8_lossy(&out.stderr));
    let (main, herd) = stdout.split_once("herd:").unwrap_or_else(|| panic!("no herd table:\n{stdout}"));
    let row = herd.lines().find(|l| l.starts_with(zk.url().as_str())).unwrap();
    assert!(row.contains("failed"), "{row}");
    let reason = format!("{}: failed: could not open 101 sessions", zk.url());
    assert!(herd.lines().any(|l| l.starts_with(&reason)), "the reason follows the table:\n{herd}");
    let cycle = main.lines().find(|l| l.starts_with(zk.url().as_str())).unwrap();
    let p50: f64 = cycle.split('|').nth(1).unwrap().trim().parse().unwrap();
    assert!(p50 > 0.0, "{cycle}");
}

/// The raw `SET NX PX` + Lua delete recipe runs on the same Redis as the driver, and `--json`
/// names the recipe and gives its cycle and the driver's overhead over it.
#[test]
fn redis_baseline_measures_the_raw_recipe_on_the_same_server() {
    let redis = RedisServer::start();
    let out = Command::new(BIN)
        .args(["bench", "--backend", &redis.url(), "--duration", "100ms", "--json"])
        .args(["--workloads", "uncontended,baseline"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{}\n{stdout}", String::from_utf8_lossy(&out.stderr));
    let doc: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let backend = &doc["backends"][0];
    assert!(backend["baseline_recipe"].as_str().is_some_and(|r| r.contains("SET NX PX")), "{backend}");
    let median = &backend["median"];
    for field in ["baseline_cycle_p50_us", "baseline_cycle_p99_us", "baseline_cycles_per_sec", "baseline_overhead"] {
        assert!(median[field].as_f64().is_some_and(|v| v > 0.0), "{field}: {median}");
    }
    assert!(backend["rounds"][0].get("baseline_error").is_none(), "{backend}");
}
