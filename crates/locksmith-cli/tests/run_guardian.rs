//! The command dies with its runner: whatever kills `locksmith run` or `locksmith elect` without
//! a word (SIGKILL here; the OOM killer and a supervisor's `KillMode=process` alike), the
//! guardian ends the command's whole process group within milliseconds — long before the lease
//! runs out and anyone else can be granted the lock — and the next holder's command finds
//! nothing of it running. Real processes and signals; the measured times are printed.

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use locksmith_testkit::{spawn, ChildProcess, NativeServer};
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;

#[path = "support/groups.rs"]
mod groups;
use groups::{group_members, group_of, proc_stat, wait_for_file, wait_for_members, GroupGuard, COUNT_OLD_GROUP};

const BIN: &str = env!("CARGO_BIN_EXE_locksmith");

/// The runners' lease: the group must be gone well before it runs out.
const TTL: Duration = Duration::from_secs(1);

/// A command that keeps forking: a new background `sleep` every 10 ms, so children are being
/// created as the runner dies.
const FORKING: &str = "echo $$ > shell; while :; do sleep 30 & sleep 0.01; done";

/// `locksmith SUB NAME --ttl 1s -- sh -c SCRIPT` (SUB: `run` or `elect`) as a job of its own.
fn runner(server: &NativeServer, sub: &str, name: &str, dir: &Path, script: &str) -> ChildProcess {
    let mut cmd = Command::new(BIN);
    cmd.args([sub, name, "--ttl", "1s", "--backend", &server.url(), "--", "sh", "-c", script]);
    cmd.current_dir(dir).process_group(0).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null());
    spawn(sub, &mut cmd)
}

/// `kill -9` of the runner, then the time until no process of `group` runs.
///
/// # Panics
/// When the group still runs 5 s later.
fn kill_runner_and_time_the_group(runner: &mut ChildProcess, group: i32) -> Duration {
    let killed = Instant::now();
    runner.kill9();
    loop {
        let left = group_members(group);
        if left.is_empty() {
            return killed.elapsed();
        }
        assert!(
            killed.elapsed() < Duration::from_secs(5),
            "the command's group {group} still runs 5 s after its runner was killed: {} processes, {:?}…",
            left.len(),
            &left[..left.len().min(8)]
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// The next holder of `name`, which waits for the lock and then counts the processes of the
/// old group still running: it must find none.
fn next_holder_finds_nothing_of(server: &NativeServer, sub: &str, name: &str, group: i32) {
    let o = Command::new(BIN)
        .args([sub, name, "--backend", &server.url(), "--", "sh", "-c", COUNT_OLD_GROUP])
        .env("OLD_GROUP", group.to_string())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "the next holder failed: {}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(stdout.trim(), "0", "the next holder's command found processes of the old group running");
}

/// SIGKILL of a runner (`run` or `elect`) whose command keeps forking: its whole group is gone
/// within a fraction of the TTL, and the next holder's command sees none of it.
fn sigkill_of_the_runner_ends_the_forking_command(sub: &str) {
    let server = NativeServer::start(BIN.as_ref());
    let dir = tempfile::tempdir().unwrap();
    let name = format!("{sub}-kill9");
    let mut job = runner(&server, sub, &name, dir.path(), FORKING);
    let shell: i32 = wait_for_file(&dir.path().join("shell"), Duration::from_secs(10)).trim().parse().unwrap();
    let group = group_of(shell);
    let _cleanup = GroupGuard(vec![group]);
    assert_ne!(group, job.pid(), "{sub} must not be in its command's group");
    wait_for_members(group, 4, Duration::from_secs(5));

    let took = kill_runner_and_time_the_group(&mut job, group);
    println!("locksmith {sub}: SIGKILL of the runner to an empty command group: {took:?} (TTL {TTL:?})");
    assert!(took < TTL / 2, "the group outlived its runner by {took:?}");
    next_holder_finds_nothing_of(&server, sub, &name, group);
}

#[test]
fn sigkill_of_run_ends_the_commands_group_while_it_forks() {
    sigkill_of_the_runner_ends_the_forking_command("run");
}

#[test]
fn sigkill_of_elect_ends_the_leaders_group_while_it_forks() {
    sigkill_of_the_runner_ends_the_forking_command("elect");
}

/// A command stopped as a whole (Ctrl-Z, `kill -STOP -PGID`) and deaf to SIGHUP: when its runner
/// is killed, the kernel continues the orphaned group, and the guardian ends it.
#[test]
fn sigkill_of_run_ends_a_stopped_group() {
    let server = NativeServer::start(BIN.as_ref());
    let dir = tempfile::tempdir().unwrap();
    let script = "trap '' HUP; sleep 30 & sleep 30 & echo $$ > shell; wait";
    let mut job = runner(&server, "run", "stopped", dir.path(), script);
    let shell: i32 = wait_for_file(&dir.path().join("shell"), Duration::from_secs(10)).trim().parse().unwrap();
    let group = group_of(shell);
    let _cleanup = GroupGuard(vec![group]);
    let members = wait_for_members(group, 4, Duration::from_secs(5));
    killpg(Pid::from_raw(group), Signal::SIGSTOP).unwrap();
    let until = Instant::now() + Duration::from_secs(5);
    while !members.iter().all(|&p| proc_stat(p).is_some_and(|(s, _)| s == 'T')) {
        assert!(Instant::now() < until, "the group did not stop");
        std::thread::sleep(Duration::from_millis(5));
    }

    let took = kill_runner_and_time_the_group(&mut job, group);
    println!("locksmith run: SIGKILL of the runner to an empty, stopped command group: {took:?}");
    assert!(took < TTL / 2, "the stopped group outlived its runner by {took:?}");
    next_holder_finds_nothing_of(&server, "run", "stopped", group);
}

/// Started by hand, the guardian refuses (exit 2) and ends nothing: not leading a group of its
/// own, not the child of the runner it names, or without the runner's pipe on stdin.
#[test]
fn the_guardian_refuses_to_act_when_started_by_hand() {
    let me = std::process::id().to_string();
    // Inside a shell's group (it would end the shell): the shell survives to print the code.
    let o = Command::new("sh")
        .args(["-c", &format!("{BIN} run-guardian --runner $$ < /dev/null; echo \"code $?\"")])
        .process_group(0)
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), "code 2", "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stderr).contains("process group of its own"), "{o:?}");

    // Leading its group, but its parent is not the runner it names.
    let o = Command::new(BIN).args(["run-guardian", "--runner", "1"]).process_group(0).output().unwrap();
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    assert!(String::from_utf8_lossy(&o.stderr).contains("not the runner"), "{o:?}");

    // Our child and leading its group, but its stdin is no pipe of ours.
    let o = Command::new(BIN)
        .args(["run-guardian", "--runner", &me])
        .process_group(0)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    assert!(String::from_utf8_lossy(&o.stderr).contains("stdin"), "{o:?}");
}

/// Without a guardian nothing runs: with too few file descriptors left to start one (the open
/// file limit lowered step by step), `run` releases the lock it took and exits 70, and the
/// command never ran. At no limit does the command run without its lock and its guardian.
#[test]
fn run_exits_70_and_releases_the_lock_when_the_guardian_cannot_start() {
    let server = NativeServer::start(BIN.as_ref());
    let dir = tempfile::tempdir().unwrap();
    let mut refused = None;
    for limit in 8..=48 {
        let marker = dir.path().join(format!("ran-{limit}"));
        let run = format!(
            "ulimit -n {limit}; exec {BIN} run no-guardian --ttl 30s --backend {} -- sh -c 'echo ran > {}'",
            server.url(),
            marker.display()
        );
        let o = Command::new("sh").args(["-c", &run]).output().unwrap();
        let stderr = String::from_utf8_lossy(&o.stderr).to_string();
        let ran = marker.exists();
        assert_eq!(o.status.code() == Some(0), ran, "limit {limit}: exit {:?}, ran {ran}: {stderr}", o.status.code());
        if o.status.code() == Some(70) && stderr.contains("cannot start the guardian") {
            // Released at once, not left for the 30 s lease to run out.
            let free = Command::new(BIN)
                .args(["run", "no-guardian", "--no-wait", "--backend", &server.url(), "--", "true"])
                .output()
                .unwrap();
            assert_eq!(
                free.status.code(),
                Some(0),
                "the lock was not released: {}",
                String::from_utf8_lossy(&free.stderr)
            );
            refused = Some(limit);
        }
        if ran {
            break;
        }
    }
    let Some(limit) = refused else { panic!("no open-file limit made the guardian fail to start") };
    println!("locksmith run: the guardian could not start under `ulimit -n {limit}`: exit 70, nothing ran");
}
