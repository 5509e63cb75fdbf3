//! Every row of `locksmith run`'s exit-code table, triggered: the README's table and `run --help`
//! list the same codes, and each code `run` itself decides comes out when its condition is met.
//! 70 (no guardian) is in run_guardian.rs; 77 (credentials) in native_auth.rs; 78 (TLS) in
//! native_tls.rs.

use std::collections::BTreeSet;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use locksmith_testkit::{spawn, NativeServer};
use nix::sys::signal::Signal;

const BIN: &str = env!("CARGO_BIN_EXE_locksmith");

/// The numbers in the first column of a table's rows (`126, 127` gives both).
fn codes<'a>(rows: impl Iterator<Item = &'a str>) -> BTreeSet<u32> {
    rows.flat_map(|cell| cell.split(|c: char| !c.is_ascii_digit()).filter_map(|n| n.parse().ok()).collect::<Vec<u32>>())
        .collect()
}

/// The README's table (rows of `run`; `serve`'s own rows left out) and `run --help` agree.
#[test]
fn readme_and_run_help_list_the_same_exit_codes() {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md")).unwrap();
    let table = readme.split("| exit code | meaning |").nth(1).expect("the README's exit-code table");
    let rows = table.lines().skip(2).take_while(|l| l.starts_with('|'));
    let in_readme = codes(
        rows.filter(|r| !r.split('|').nth(2).unwrap_or("").trim_start().starts_with("`serve`"))
            .map(|r| r.split('|').nth(1).unwrap_or("")),
    );
    let help = Command::new(BIN).args(["run", "--help"]).output().unwrap();
    let help = String::from_utf8_lossy(&help.stdout).into_owned();
    let section = help.split("Exit codes:").nth(1).expect("run --help lists exit codes");
    // The code column: a line's first 20 columns (wrapped meanings are indented past them).
    let in_help = codes(section.lines().map(|l| l.get(..20.min(l.len())).unwrap_or("")));
    assert_eq!(in_readme, in_help, "README: {in_readme:?}, run --help: {in_help:?}");
    for code in [2, 69, 70, 75, 76, 77, 78, 126, 127, 130, 143] {
        assert!(in_help.contains(&code), "{code} missing");
    }
}

fn run(server: &NativeServer, args: &[&str]) -> Output {
    Command::new(BIN).arg("run").args(args).env("LOCKSMITH_BACKEND", server.url()).output().unwrap()
}

fn code(o: &Output) -> Option<i32> {
    o.status.code()
}

/// The command's own code; 128+N when it was killed by signal N.
#[test]
fn the_commands_own_code_and_128_plus_its_signal() {
    let server = NativeServer::start(BIN.as_ref());
    assert_eq!(code(&run(&server, &["own", "--", "sh", "-c", "exit 7"])), Some(7));
    assert_eq!(code(&run(&server, &["own", "--", "sh", "-c", "kill -USR1 $$"])), Some(128 + 10));
}

/// 2: bad arguments; 69: backend unreachable; 126/127: the command cannot be executed / is not
/// found (and the lock was released: the next run gets it at once).
#[test]
fn bad_arguments_unreachable_and_unrunnable_commands() {
    let server = NativeServer::start(BIN.as_ref());
    for args in [
        &["", "--", "true"][..],
        &["x", "--ttl", "0s", "--", "true"],
        &["x", "--backend", "gopher://x", "--", "true"],
        &["x", "true"],
        &["x", "-E", "256", "--", "true"],
    ] {
        let o = run(&server, args);
        assert_eq!(code(&o), Some(2), "{args:?}: {}", String::from_utf8_lossy(&o.stderr));
    }
    let o = run(&server, &["x", "--backend", "locksmith://127.0.0.1:1", "--connect-timeout", "1s", "--", "true"]);
    assert_eq!(code(&o), Some(69), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(code(&run(&server, &["x", "--", "/dev/null"])), Some(126));
    assert_eq!(code(&run(&server, &["x", "--", "/nonexistent/program"])), Some(127));
    assert_eq!(code(&run(&server, &["x", "-n", "--", "true"])), Some(0), "the lock was not released");
}

/// 75 (or -E's code): not acquired; 76: lost while the command ran; 130/143: interrupted while
/// waiting.
#[test]
fn not_acquired_lost_and_interrupted() {
    let server = NativeServer::start(BIN.as_ref());
    let spawn_run = |args: &[&str]| {
        let mut cmd = Command::new(BIN);
        cmd.arg("run").args(args).env("LOCKSMITH_BACKEND", server.url());
        cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null());
        spawn("locksmith run", &mut cmd)
    };
    let mut holder = spawn_run(&["busy", "--ttl", "1s", "--kill-grace", "1s", "--", "sleep", "30"]);
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(code(&run(&server, &["busy", "-n", "--", "true"])), Some(75));
    assert_eq!(code(&run(&server, &["busy", "-n", "-E", "0", "--", "true"])), Some(0));
    for (sig, expected) in [(Signal::SIGINT, 130), (Signal::SIGTERM, 143)] {
        let mut waiter = spawn_run(&["busy", "--", "true"]);
        std::thread::sleep(Duration::from_millis(300));
        waiter.signal(sig);
        let status = waiter.wait_timeout(Duration::from_secs(10)).expect("the waiter did not stop");
        assert_eq!(status.code(), Some(expected), "{sig}");
    }
    holder.signal(Signal::SIGSTOP);
    std::thread::sleep(Duration::from_millis(2_000));
    holder.signal(Signal::SIGCONT);
    let status = holder.wait_timeout(Duration::from_secs(10)).expect("the paused holder did not exit");
    assert_eq!(status.code(), Some(76));
}
