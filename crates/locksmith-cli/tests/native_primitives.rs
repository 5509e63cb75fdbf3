//! Beyond the mutex with real processes on the native server: `locksmith run --permits`,
//! `--shared`, and `locksmith elect` (campaign, take-over, observe).

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use locksmith_testkit::{spawn, ChildProcess, NativeServer};
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

/// Reads a shared log of `start`/`end` lines (`start <id>` / `end <id>`) and returns the most
/// commands inside at once, checking that every one that started ended.
fn most_at_once(log: &str, kind: impl Fn(&str) -> i64) -> (i64, usize) {
    let (mut inside, mut most, mut ended) = (0i64, 0i64, 0usize);
    for line in log.lines() {
        let mut words = line.split_whitespace();
        match (words.next(), words.next()) {
            (Some("start"), Some(who)) => {
                inside += kind(who);
                most = most.max(inside);
            }
            (Some("end"), Some(who)) => {
                inside -= kind(who);
                ended += 1;
            }
            _ => panic!("bad log line {line:?}"),
        }
    }
    assert_eq!(inside, 0, "a command never ended:\n{log}");
    (most, ended)
}

/// Eight `locksmith run --permits 3` processes never run more than three commands at once (as
/// the commands' own shared log shows), and all of them run.
#[test]
fn eight_runs_with_three_permits_never_exceed_three_at_once() {
    let s = NativeServer::start(BIN.as_ref());
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let script = format!("echo start $$ >> {0}; sleep 0.3; echo end $$ >> {0}", log.display());
    let mut runs: Vec<ChildProcess> = (0..8)
        .map(|_| start(&["run", "exports", "--backend", &s.url(), "--permits", "3", "--", "sh", "-c", &script]).0)
        .collect();
    for r in &mut runs {
        assert_eq!(r.wait_timeout(Duration::from_secs(20)).and_then(|st| st.code()), Some(0));
    }
    let (most, ended) = most_at_once(&std::fs::read_to_string(&log).unwrap(), |_| 1);
    assert_eq!(ended, 8, "every command ran");
    assert!(most <= 3, "{most} commands at once under 3 permits");
    assert!(most >= 2, "the permits were never used together");
}

/// A permit holder killed with `kill -9` (no release) gets its permit back to the others within
/// its TTL plus a margin: permits are leased.
#[test]
fn a_killed_permit_holders_permit_returns_within_its_ttl() {
    let s = NativeServer::start(BIN.as_ref());
    let (mut holder, lines) = start(&[
        "run",
        "sem",
        "--backend",
        &s.url(),
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
    let children = std::fs::read_to_string(format!("/proc/{0}/task/{0}/children", holder.pid())).unwrap_or_default();
    holder.kill9();
    for pid in children.split_whitespace().filter_map(|p| p.parse::<i32>().ok()) {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), Signal::SIGKILL);
    }
    let killed = Instant::now();
    let (mut next, lines) = start(&[
        "run",
        "sem",
        "--backend",
        &s.url(),
        "--permits",
        "1",
        "--timeout",
        "10s",
        "--",
        "sh",
        "-c",
        "echo got",
    ]);
    assert_eq!(lines.recv_timeout(Duration::from_secs(10)).as_deref(), Ok("got"));
    let waited = killed.elapsed();
    assert!(waited < Duration::from_millis(2_500), "the permit came back after {waited:?}, TTL 1s");
    assert_eq!(next.wait_timeout(Duration::from_secs(5)).and_then(|st| st.code()), Some(0));
}

/// Readers (`--shared`) run together, never with a writer (no `--shared`), and everyone runs.
#[test]
fn shared_runs_overlap_each_other_but_never_a_writer() {
    let s = NativeServer::start(BIN.as_ref());
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let script = |who: &str| format!("echo start {who}$$ >> {0}; sleep 0.3; echo end {who}$$ >> {0}", log.display());
    let mut runs = Vec::new();
    for i in 0..6 {
        let writer = i % 3 == 0;
        let mut args = vec!["run", "catalog", "--backend"];
        let url = s.url();
        let sc = script(if writer { "w" } else { "r" });
        args.push(&url);
        if !writer {
            args.push("--shared");
        }
        args.extend(["--", "sh", "-c", &sc]);
        runs.push(start(&args).0);
    }
    for r in &mut runs {
        assert_eq!(r.wait_timeout(Duration::from_secs(20)).and_then(|st| st.code()), Some(0));
    }
    let text = std::fs::read_to_string(&log).unwrap();
    // A writer counts as "everyone": with it inside, nobody else may be.
    let (most, ended) = most_at_once(&text, |who| if who.starts_with('w') { 1_000 } else { 1 });
    assert_eq!(ended, 6);
    assert_eq!(most, 1_000, "a writer overlapped someone (or never ran):\n{text}");
    let (readers_most, _) = most_at_once(&text, |who| i64::from(who.starts_with('r')));
    assert!(readers_most >= 2, "readers never ran together:\n{text}");
}

/// `locksmith elect`: the leader runs its command with its term as LOCKSMITH_TOKEN; when it is
/// paused past its TTL it loses leadership (its command is stopped), a waiting candidate takes
/// over with a higher term, and an observer prints both leaders.
#[test]
fn a_paused_leader_is_replaced_and_the_observer_sees_both_terms() {
    let s = NativeServer::start(BIN.as_ref());
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
    // The deposed leader learns it lost and stops its command: exit 76.
    assert_eq!(alpha.wait_timeout(Duration::from_secs(10)).and_then(|st| st.code()), Some(76));
    beta.signal(Signal::SIGTERM);
    observer.signal(Signal::SIGINT);
    assert_eq!(observer.wait_timeout(Duration::from_secs(5)).and_then(|st| st.code()), Some(0));
    let _ = beta.wait_timeout(Duration::from_secs(5));
}

/// `locksmith status` shows each permit holder, the readers and an election's leader with its
/// proposal; JSON lists every holder with its kind.
#[test]
fn status_shows_permits_readers_and_the_leaders_value() {
    let s = NativeServer::start(BIN.as_ref());
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
    let json = Command::new(BIN).args(["status", "exports", "--backend", &url, "--json"]).output().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(v["permits"].as_u64(), Some(3));
    let holders = v["holders"].as_array().unwrap();
    assert_eq!(holders.len(), 2);
    assert!(holders.iter().all(|h| h["mode"] == "permit"));
}
