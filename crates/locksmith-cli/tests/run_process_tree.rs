//! `locksmith run` owns its command's whole process tree: a lost lock ends every process of it,
//! processes the command leaves behind are ended before the lock is released, a terminal's
//! Ctrl-C reaches the command once, and `--timeout` bounds only the wait for the lock.

use std::io::Write;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use locksmith_testkit::{spawn, ChildProcess, NativeServer};
use nix::sys::signal::{kill, killpg, Signal};
use nix::unistd::Pid;

#[path = "support/groups.rs"]
mod groups;
use groups::{group_of, proc_stat, running, wait_for_file, wait_for_members, GroupGuard};

const BIN: &str = env!("CARGO_BIN_EXE_locksmith");

/// `locksmith run` as a job of its own (its own process group, as a shell starts a job).
fn run_job(server: &NativeServer, args: &[&str], dir: &Path) -> ChildProcess {
    let mut cmd = Command::new(BIN);
    cmd.arg("run").args(args).env("LOCKSMITH_BACKEND", server.url()).current_dir(dir).process_group(0);
    cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped());
    spawn("locksmith run", &mut cmd)
}

fn stderr_of(p: &mut ChildProcess) -> String {
    let mut s = String::new();
    if let Some(mut e) = p.take_stderr() {
        let _ = std::io::Read::read_to_string(&mut e, &mut s);
    }
    s
}

fn temp() -> (tempfile::TempDir, PathBuf) {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().to_path_buf();
    (d, p)
}

/// A lock lost while the command runs (locksmith paused past its TTL) ends the command's whole
/// tree: the shell, its background job and both ends of its pipeline — checked by PID.
#[test]
fn a_lost_lock_ends_every_process_of_the_command() {
    let server = NativeServer::start(BIN.as_ref());
    let (_d, dir) = temp();
    let script = "sleep 60 & yes | head -c 100000000000 > /dev/null & echo $$ > leader; wait";
    let mut job = run_job(&server, &["tree", "--ttl", "1s", "--kill-grace", "1s", "--", "sh", "-c", script], &dir);
    let shell: i32 = wait_for_file(&dir.join("leader"), Duration::from_secs(10)).trim().parse().unwrap();
    let group = group_of(shell);
    let _cleanup = GroupGuard(vec![group]);
    // sh, sleep, yes, head, and the guardian leading the group.
    let members = wait_for_members(group, 5, Duration::from_secs(5));
    assert!(!members.contains(&job.pid()), "locksmith run must not be in its command's process group");

    job.signal(Signal::SIGSTOP);
    std::thread::sleep(Duration::from_millis(2_000));
    job.signal(Signal::SIGCONT);
    let status = job.wait_timeout(Duration::from_secs(10)).expect("locksmith run did not exit after the loss");
    assert_eq!(status.code(), Some(76), "{}", stderr_of(&mut job));
    let left: Vec<i32> = members.iter().copied().filter(|&p| running(p)).collect();
    assert!(left.is_empty(), "processes of the command still run after the loss: {left:?}");
}

/// A command that exits leaving a background job (which even ignores SIGTERM) has that job
/// ended before the lock is released: nobody can see the lock free while it still runs.
#[test]
fn processes_the_command_leaves_behind_are_ended_before_the_lock_is_released() {
    let server = NativeServer::start(BIN.as_ref());
    let (_d, dir) = temp();
    let script = "sh -c 'trap \"\" TERM; echo $$ > straggler; while :; do sleep 0.05; done' & \
                  while [ ! -s straggler ]; do sleep 0.02; done; exit 3";
    let mut job = run_job(&server, &["leftover", "--kill-grace", "1s", "--", "sh", "-c", script], &dir);
    let straggler: i32 = wait_for_file(&dir.join("straggler"), Duration::from_secs(10)).trim().parse().unwrap();
    let _cleanup = GroupGuard(vec![proc_stat(straggler).map_or(straggler, |(_, g)| g)]);
    let status_cmd = || {
        let o = Command::new(BIN).args(["status", "leftover", "--json", "--backend", &server.url()]).output().unwrap();
        String::from_utf8_lossy(&o.stdout).contains("\"held\":true")
    };
    let mut exited = None;
    while exited.is_none() {
        let held = status_cmd();
        let alive = running(straggler);
        assert!(held || !alive, "the lock was free while a process of the command still ran");
        exited = job.wait_timeout(Duration::from_millis(50));
    }
    assert_eq!(exited.and_then(|s| s.code()), Some(3), "the command's own exit code");
    assert!(!running(straggler), "the straggler survived locksmith run");
}

/// SIGINT sent to `locksmith run`'s job (a terminal's Ctrl-C without a terminal in between,
/// e.g. `kill -INT -PGID`) reaches the command exactly once: the command is not in that group,
/// and locksmith forwards the signal to the command's own group.
#[test]
fn sigint_to_the_job_reaches_the_command_once() {
    let server = NativeServer::start(BIN.as_ref());
    let (_d, dir) = temp();
    // A busy loop of builtins (no child to wait for) runs the trap as soon as each signal comes,
    // so two deliveries are counted as two, not merged into one pending signal.
    let script = "trap 'echo INT >> ints' INT; echo ready > ready; while [ ! -e stop ]; do :; done";
    let mut job = run_job(&server, &["ctrl-c", "--", "sh", "-c", script], &dir);
    let _cleanup = GroupGuard(vec![job.pid()]);
    wait_for_file(&dir.join("ready"), Duration::from_secs(10));
    killpg(Pid::from_raw(job.pid()), Signal::SIGINT).unwrap();
    wait_for_file(&dir.join("ints"), Duration::from_secs(5));
    std::thread::sleep(Duration::from_millis(300));
    std::fs::write(dir.join("stop"), "").unwrap();
    let status = job.wait_timeout(Duration::from_secs(10)).expect("locksmith run did not exit");
    assert_eq!(status.code(), Some(0), "{}", stderr_of(&mut job));
    let ints = std::fs::read_to_string(dir.join("ints")).unwrap();
    assert_eq!(ints.lines().count(), 1, "the command got SIGINT {} times", ints.lines().count());
}

/// On a real terminal (a pty from `script`), the command is the terminal's foreground job: a
/// typed Ctrl-C reaches it once (and not locksmith, which keeps the lock and exits with the
/// command's code), and the command can read what is typed.
#[test]
fn on_a_terminal_ctrl_c_and_input_reach_the_command_once() {
    let server = NativeServer::start(BIN.as_ref());
    let (_d, dir) = temp();
    let inner = "trap 'echo INT >> ints' INT; echo ready > ready; \
                 while [ ! -e go ]; do sleep 0.05; done; read line; echo \"got $line\" > got";
    let run = format!("{BIN} run tty-lock --backend {} -- sh -c {}", server.url(), shell_quote(inner));
    let mut cmd = Command::new("script");
    cmd.args(["-q", "-e", "-c", &run, "/dev/null"]).current_dir(&dir).process_group(0);
    cmd.stdin(Stdio::piped()).stdout(Stdio::null()).stderr(Stdio::null());
    let mut pty = spawn("script (pty)", &mut cmd);
    let _cleanup = GroupGuard(vec![pty.pid()]);
    let mut input = pty.take_stdin().expect("stdin of script");
    wait_for_file(&dir.join("ready"), Duration::from_secs(10));
    input.write_all(b"\x03").unwrap();
    input.flush().unwrap();
    wait_for_file(&dir.join("ints"), Duration::from_secs(5));
    std::thread::sleep(Duration::from_millis(300));
    std::fs::write(dir.join("go"), "").unwrap();
    input.write_all(b"hello\n").unwrap();
    input.flush().unwrap();
    let got = wait_for_file(&dir.join("got"), Duration::from_secs(5));
    assert_eq!(got.trim(), "got hello", "the command could not read the terminal");
    let status = pty.wait_timeout(Duration::from_secs(10)).expect("locksmith run did not exit");
    assert_eq!(status.code(), Some(0), "locksmith run (under script) failed");
    let ints = std::fs::read_to_string(dir.join("ints")).unwrap();
    assert_eq!(ints.lines().count(), 1, "the command got Ctrl-C {} times", ints.lines().count());
}

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// `--timeout 0s` tries once: a free lock is taken and the command runs; a held one answers 75
/// at once.
#[test]
fn timeout_zero_takes_a_free_lock_and_gives_up_at_once_on_a_held_one() {
    let server = NativeServer::start(BIN.as_ref());
    let (_d, dir) = temp();
    let o = Command::new(BIN)
        .args(["run", "zero", "--timeout", "0s", "--backend", &server.url(), "--", "sh", "-c", "echo ran"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), "ran");

    let mut holder = run_job(&server, &["zero", "--", "sh", "-c", "echo held > held; sleep 30"], &dir);
    let _cleanup = GroupGuard(vec![holder.pid()]);
    wait_for_file(&dir.join("held"), Duration::from_secs(10));
    let started = Instant::now();
    let o = Command::new(BIN)
        .args(["run", "zero", "--timeout", "0s", "--backend", &server.url(), "--", "sh", "-c", "echo ran"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(75), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(o.stdout.is_empty(), "the command ran while the lock was held");
    assert!(started.elapsed() < Duration::from_secs(3), "took {:?}", started.elapsed());
    let quiet = Command::new(BIN)
        .args(["run", "zero", "--no-wait", "--quiet", "--backend", &server.url(), "--", "true"])
        .output()
        .unwrap();
    assert_eq!(quiet.status.code(), Some(75));
    assert!(quiet.stderr.is_empty(), "--quiet printed: {}", String::from_utf8_lossy(&quiet.stderr));
    holder.signal(Signal::SIGTERM);
    let _ = kill(Pid::from_raw(holder.pid()), Signal::SIGCONT);
    assert!(holder.wait_timeout(Duration::from_secs(10)).is_some(), "the holder did not stop on SIGTERM");
}
