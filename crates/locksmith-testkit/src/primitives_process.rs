//! Beyond the mutex with real processes (DESIGN.md §4b): `locksmith run --permits` and
//! `--shared`, `locksmith elect` (campaign, take-over, observe) and `locksmith status`, against
//! any backend that offers them. A test file of locksmith-cli builds a [`CliTarget`] and expands
//! [`primitives_process_suite!`](crate::primitives_process_suite).
//!
//! Functions panic with a message naming the broken property; they are test code.

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use locksmith_core::conformance::unique;

use crate::process::{spawn, stdout_lines, ChildProcess};
use crate::CliTarget;

/// `bin ARGS…` with its stdout lines delivered as they come.
fn start(bin: &Path, args: &[&str]) -> (ChildProcess, mpsc::Receiver<String>) {
    let mut cmd = Command::new(bin);
    cmd.args(args).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::null());
    let mut p = spawn("locksmith", &mut cmd);
    let rx = stdout_lines(&mut p);
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

/// The most commands inside at once in a shared log of `start <who>` / `end <who>` lines, each
/// weighing `weight(who)`; checks that every command that started ended, and returns how many
/// ended too.
fn most_at_once(log: &str, weight: impl Fn(&str) -> i64) -> (i64, usize) {
    let (mut inside, mut most, mut ended) = (0i64, 0i64, 0usize);
    for line in log.lines() {
        let mut words = line.split_whitespace();
        match (words.next(), words.next()) {
            (Some("start"), Some(who)) => {
                inside += weight(who);
                most = most.max(inside);
            }
            (Some("end"), Some(who)) => {
                inside -= weight(who);
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
pub async fn eight_runs_with_three_permits_never_exceed_three_at_once(t: &CliTarget) {
    let url = t.target().url();
    let name = unique("exports");
    let dir = tempfile::tempdir().expect("temp dir");
    let log = dir.path().join("log");
    let script = format!("echo start $$ >> {0}; sleep 0.3; echo end $$ >> {0}", log.display());
    let mut runs: Vec<ChildProcess> = (0..8)
        .map(|_| start(t.bin(), &["run", &name, "--backend", &url, "--permits", "3", "--", "sh", "-c", &script]).0)
        .collect();
    for r in &mut runs {
        assert_eq!(r.wait_timeout(Duration::from_secs(30)).and_then(|st| st.code()), Some(0));
    }
    let (most, ended) = most_at_once(&std::fs::read_to_string(&log).unwrap_or_default(), |_| 1);
    assert_eq!(ended, 8, "every command ran");
    assert!(most <= 3, "{most} commands at once under 3 permits");
    assert!(most >= 2, "the permits were never used together");
}

/// A permit holder killed with `kill -9` (no release) gets its permit back to the others within
/// its TTL plus a margin: permits are leased.
pub async fn a_killed_permit_holders_permit_returns_within_its_ttl(t: &CliTarget) {
    let url = t.target().url();
    let name = unique("sem");
    let hold =
        ["run", &name, "--backend", &url, "--permits", "1", "--ttl", "1s", "--", "sh", "-c", "echo in; exec sleep 60"];
    let (mut holder, lines) = start(t.bin(), &hold);
    assert_eq!(lines.recv_timeout(Duration::from_secs(10)).as_deref(), Ok("in"));
    kill9_with_children(&mut holder);
    let killed = Instant::now();
    let next = ["run", &name, "--backend", &url, "--permits", "1", "--timeout", "10s", "--", "sh", "-c", "echo got"];
    let (mut next, lines) = start(t.bin(), &next);
    assert_eq!(lines.recv_timeout(Duration::from_secs(10)).as_deref(), Ok("got"));
    let waited = killed.elapsed();
    assert!(waited < Duration::from_millis(2_500), "the permit came back after {waited:?}, TTL 1s");
    assert_eq!(next.wait_timeout(Duration::from_secs(5)).and_then(|st| st.code()), Some(0));
}

/// Readers (`--shared`) run together, never with a writer (no `--shared`), and everyone runs.
pub async fn shared_runs_overlap_each_other_but_never_a_writer(t: &CliTarget) {
    let url = t.target().url();
    let name = unique("catalog");
    let dir = tempfile::tempdir().expect("temp dir");
    let log = dir.path().join("log");
    let script = |who: &str| format!("echo start {who}$$ >> {0}; sleep 0.3; echo end {who}$$ >> {0}", log.display());
    let mut runs = Vec::new();
    for i in 0..6 {
        let writer = i % 3 == 0;
        let sc = script(if writer { "w" } else { "r" });
        let mut args = vec!["run", &name, "--backend", &url];
        if !writer {
            args.push("--shared");
        }
        args.extend(["--", "sh", "-c", &sc]);
        runs.push(start(t.bin(), &args).0);
    }
    for r in &mut runs {
        assert_eq!(r.wait_timeout(Duration::from_secs(30)).and_then(|st| st.code()), Some(0));
    }
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    // A writer weighs as much as everyone: with it inside, nobody else may be.
    let (most, ended) = most_at_once(&text, |who| if who.starts_with('w') { 1_000 } else { 1 });
    assert_eq!(ended, 6);
    assert_eq!(most, 1_000, "a writer overlapped someone (or never ran):\n{text}");
    let (readers_most, _) = most_at_once(&text, |who| i64::from(who.starts_with('r')));
    assert!(readers_most >= 2, "readers never ran together:\n{text}");
}

/// `locksmith elect`: the leader runs its command with its term as LOCKSMITH_TOKEN; when it is
/// paused past its TTL it loses leadership (its command is stopped, exit 76 once resumed), a
/// waiting candidate takes over with a higher term, and an observer prints both leaders.
pub async fn a_paused_leader_is_replaced_and_the_observer_sees_both_terms(t: &CliTarget) {
    let url = t.target().url();
    let name = unique("scheduler");
    let script = "echo term $LOCKSMITH_TOKEN; exec sleep 60";
    let candidate = |value: &'static str| {
        ["elect", &name, "--backend", &url, "--value", value, "--ttl", "1s", "--", "sh", "-c", script]
            .map(str::to_string)
    };
    let term = |line: String| -> u64 { line.trim_start_matches("term ").parse().unwrap_or(0) };
    let args = candidate("alpha");
    let (mut alpha, alpha_out) = start(t.bin(), &args.iter().map(String::as_str).collect::<Vec<_>>());
    let first = term(alpha_out.recv_timeout(Duration::from_secs(10)).expect("alpha leads"));
    let (mut observer, seen) = start(t.bin(), &["elect", &name, "--backend", &url, "--observe", "--json"]);
    let line = seen.recv_timeout(Duration::from_secs(10)).expect("the observer prints the leader");
    let now: serde_json::Value = serde_json::from_str(&line).unwrap_or_default();
    assert_eq!((now["term"].as_u64(), now["value"].as_str()), (Some(first), Some("alpha")), "{line}");

    let args = candidate("beta");
    let (mut beta, beta_out) = start(t.bin(), &args.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(beta_out.recv_timeout(Duration::from_millis(500)).is_err(), "beta led while alpha did");
    alpha.signal(Signal::SIGSTOP);
    let second = term(beta_out.recv_timeout(Duration::from_secs(10)).expect("beta takes over"));
    assert!(second > first, "term {second} after {first}");
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        let line = seen.recv_timeout(until.saturating_duration_since(Instant::now())).expect("beta observed");
        let v: serde_json::Value = serde_json::from_str(&line).unwrap_or_default();
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

/// `locksmith status` shows each permit holder with the semaphore's permits, the readers and an
/// election's leader with its proposal; JSON lists every holder with its kind.
pub async fn status_shows_permits_readers_and_the_leaders_value(t: &CliTarget) {
    let url = t.target().url();
    let (exports, catalog, scheduler) = (unique("exports"), unique("catalog"), unique("scheduler"));
    let hold = |args: &[&str]| {
        let mut all = vec!["run"];
        all.extend_from_slice(args);
        all.extend(["--backend", &url, "--", "sh", "-c", "echo in; exec sleep 60"]);
        let (p, out) = start(t.bin(), &all);
        assert_eq!(out.recv_timeout(Duration::from_secs(10)).as_deref(), Ok("in"));
        p
    };
    let _p1 = hold(&[&exports, "--permits", "3"]);
    let _p2 = hold(&[&exports, "--permits", "3"]);
    let _r1 = hold(&[&catalog, "--shared"]);
    let leader =
        ["elect", &scheduler, "--backend", &url, "--value", "10.0.0.7:80", "--", "sh", "-c", "echo in; exec sleep 60"];
    let (_leader, out) = start(t.bin(), &leader);
    assert_eq!(out.recv_timeout(Duration::from_secs(10)).as_deref(), Ok("in"));
    let status = |args: &[&str]| Command::new(t.bin()).args(args).output().map(|o| o.stdout).unwrap_or_default();
    let table = String::from_utf8_lossy(&status(&["status", "--backend", &url])).into_owned();
    let row = |l: &str, name: &str| l.split_whitespace().next() == Some(name);
    assert_eq!(table.lines().filter(|l| row(l, &exports) && l.contains("permit 2/3")).count(), 2, "{table}");
    assert!(table.lines().any(|l| row(l, &catalog) && l.contains("read (1)")), "{table}");
    assert!(table.lines().any(|l| row(l, &scheduler) && l.contains("10.0.0.7:80")), "{table}");
    let parts = format!("{exports}/");
    let listed_as_lock = |l: &str| l.split_whitespace().next().is_some_and(|n| n.starts_with(&parts));
    assert!(!table.lines().any(listed_as_lock), "a semaphore's parts listed as locks:\n{table}");
    let v: serde_json::Value =
        serde_json::from_slice(&status(&["status", &exports, "--backend", &url, "--json"])).unwrap_or_default();
    assert_eq!(v["permits"].as_u64(), Some(3), "{v}");
    let holders = v["holders"].as_array().cloned().unwrap_or_default();
    assert_eq!(holders.len(), 2, "{v}");
    assert!(holders.iter().all(|h| h["mode"] == "permit"), "{v}");
}

/// Expands one `#[tokio::test]` per process property of the primitives beyond the mutex for the
/// [`CliTarget`] built by `$make`.
#[macro_export]
macro_rules! primitives_process_suite {
    ($make:expr) => {
        $crate::primitives_process_suite!(@each $make;
            eight_runs_with_three_permits_never_exceed_three_at_once,
            a_killed_permit_holders_permit_returns_within_its_ttl,
            shared_runs_overlap_each_other_but_never_a_writer,
            a_paused_leader_is_replaced_and_the_observer_sees_both_terms,
            status_shows_permits_readers_and_the_leaders_value
        );
    };
    (@each $make:expr; $($name:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                let target: $crate::CliTarget = $make;
                $crate::primitives_process::$name(&target).await;
            }
        )*
    };
}
