//! Beyond the mutex with real processes on ZooKeeper (Curator's layouts): `locksmith run
//! --permits` (a killed holder's lease ends with its session), `locksmith elect` (a paused
//! leader's session expires, the next candidate takes over, an observer sees both), and
//! `locksmith status` of permits, readers and a leader's proposal.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use locksmith_testkit::{spawn, ChildProcess, ZkServer};
use nix::sys::signal::Signal;

const BIN: &str = env!("CARGO_BIN_EXE_locksmith");

/// `locksmith ARGS…` with stdout lines delivered as they come.
fn start(args: &[&str]) -> (ChildProcess, mpsc::Receiver<String>) {
    let mut cmd = Command::new(BIN);
    cmd.args(args).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::null());
    let mut p = spawn("locksmith", &mut cmd);
    let (tx, rx) = mpsc::channel();
    if let Some(out) = p.take_stdout() {
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
    }
    (p, rx)
}

/// `kill -9` of `p` and of its children (the command `locksmith run` started).
fn kill9_with_children(p: &mut ChildProcess) {
    let children = std::fs::read_to_string(format!("/proc/{0}/task/{0}/children", p.pid())).unwrap_or_default();
    p.kill9();
    for pid in children.split_whitespace().filter_map(|p| p.parse::<i32>().ok()) {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), Signal::SIGKILL);
    }
}

/// A permit holder killed with `kill -9` (no release, no session close) gives its permit back
/// when ZooKeeper expires its session: within its TTL (the session timeout) plus a margin.
#[test]
fn a_killed_permit_holders_permit_returns_within_its_ttl() {
    let s = ZkServer::start();
    let url = s.url();
    let (mut holder, lines) = start(&[
        "run",
        "sem",
        "--backend",
        &url,
        "--permits",
        "1",
        "--ttl",
        "1s",
        "--",
        "sh",
        "-c",
        "echo in; exec sleep 60",
    ]);
    assert_eq!(lines.recv_timeout(Duration::from_secs(10)).as_deref(), Ok("in"));
    kill9_with_children(&mut holder);
    let killed = Instant::now();
    let (mut next, lines) =
        start(&["run", "sem", "--backend", &url, "--permits", "1", "--timeout", "10s", "--", "sh", "-c", "echo got"]);
    assert_eq!(lines.recv_timeout(Duration::from_secs(10)).as_deref(), Ok("got"));
    let waited = killed.elapsed();
    assert!(waited < Duration::from_millis(2_500), "the permit came back after {waited:?}, TTL 1s");
    assert_eq!(next.wait_timeout(Duration::from_secs(5)).and_then(|st| st.code()), Some(0));
}

/// `locksmith elect` on ZooKeeper (a `LeaderLatch` participant): a leader paused past its TTL
/// loses its session and its latch node, the waiting candidate takes over with a higher term
/// (a later czxid), an observer prints both, and the deposed leader, resumed, exits 76.
#[test]
fn a_paused_leader_is_replaced_and_the_observer_sees_both_terms() {
    let s = ZkServer::start();
    let url = s.url();
    let script = "echo term $LOCKSMITH_TOKEN; exec sleep 60";
    let (mut alpha, alpha_out) =
        start(&["elect", "scheduler", "--backend", &url, "--value", "alpha", "--ttl", "1s", "--", "sh", "-c", script]);
    let first: u64 =
        alpha_out.recv_timeout(Duration::from_secs(10)).unwrap().trim_start_matches("term ").parse().unwrap();
    let (mut observer, seen) = start(&["elect", "scheduler", "--backend", &url, "--observe", "--json"]);
    let line = seen.recv_timeout(Duration::from_secs(10)).unwrap();
    let now: serde_json::Value = serde_json::from_str(&line).unwrap();
    assert_eq!((now["term"].as_u64(), now["value"].as_str()), (Some(first), Some("alpha")), "{line}");

    let (mut beta, beta_out) =
        start(&["elect", "scheduler", "--backend", &url, "--value", "beta", "--ttl", "1s", "--", "sh", "-c", script]);
    assert!(beta_out.recv_timeout(Duration::from_millis(500)).is_err(), "beta led while alpha did");
    alpha.signal(Signal::SIGSTOP);
    let second: u64 =
        beta_out.recv_timeout(Duration::from_secs(10)).unwrap().trim_start_matches("term ").parse().unwrap();
    assert!(second > first, "term {second} after {first}");
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        let line = seen.recv_timeout(until.saturating_duration_since(Instant::now())).unwrap();
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        if v["term"].as_u64() == Some(second) {
            assert_eq!(v["value"].as_str(), Some("beta"));
            break;
        }
    }
    alpha.signal(Signal::SIGCONT);
    assert_eq!(alpha.wait_timeout(Duration::from_secs(10)).and_then(|st| st.code()), Some(76));
    beta.signal(Signal::SIGTERM);
    observer.signal(Signal::SIGINT);
    assert_eq!(observer.wait_timeout(Duration::from_secs(5)).and_then(|st| st.code()), Some(0));
    let _ = beta.wait_timeout(Duration::from_secs(5));
}

/// `locksmith status` on ZooKeeper shows each lease holder with the semaphore's permits, the
/// readers, and an election's leader with its proposal; JSON lists every holder with its kind.
#[test]
fn status_shows_permits_readers_and_the_leaders_value() {
    let s = ZkServer::start();
    let url = s.url();
    let hold = |args: &[&str]| {
        let mut all = vec!["run"];
        all.extend_from_slice(args);
        all.extend(["--backend", &url, "--", "sh", "-c", "echo in; exec sleep 60"]);
        let (p, out) = start(&all);
        assert_eq!(out.recv_timeout(Duration::from_secs(10)).as_deref(), Ok("in"));
        p
    };
    let _p1 = hold(&["exports", "--permits", "3"]);
    let _p2 = hold(&["exports", "--permits", "3"]);
    let _r1 = hold(&["catalog", "--shared"]);
    let (_leader, out) = start(&[
        "elect",
        "scheduler",
        "--backend",
        &url,
        "--value",
        "10.0.0.7:80",
        "--",
        "sh",
        "-c",
        "echo in; exec sleep 60",
    ]);
    assert_eq!(out.recv_timeout(Duration::from_secs(10)).as_deref(), Ok("in"));
    let table = Command::new(BIN).args(["status", "--backend", &url]).output().unwrap();
    let table = String::from_utf8_lossy(&table.stdout);
    assert_eq!(table.lines().filter(|l| l.starts_with("exports") && l.contains("permit 2/3")).count(), 2, "{table}");
    assert!(table.lines().any(|l| l.starts_with("catalog") && l.contains("read (1)")), "{table}");
    assert!(table.lines().any(|l| l.starts_with("scheduler") && l.contains("10.0.0.7:80")), "{table}");
    assert!(!table.contains("exports/l"), "a semaphore's parts listed as locks:\n{table}");
    let json = Command::new(BIN).args(["status", "exports", "--backend", &url, "--json"]).output().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(v["permits"].as_u64(), Some(3), "{v}");
    let holders = v["holders"].as_array().unwrap();
    assert_eq!(holders.len(), 2, "{v}");
    assert!(holders.iter().all(|h| h["mode"] == "permit"), "{v}");
}
