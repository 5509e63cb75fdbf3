//! What users of `flock(1)`, `etcdctl lock` and `consul lock` expect of `run`, `lock` and
//! `elect`: `-n`, `-w SECS`, `-E N`, `-q`, `-v`, `--owner`, `--lock-delay`; `locksmith lock NAME`
//! holding until interrupted; `elect` refusing what it cannot do; and one voice on stderr.

use std::io::{BufRead, BufReader};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use locksmith_testkit::{spawn, ChildProcess, NativeServer};
use nix::sys::signal::Signal;

const BIN: &str = env!("CARGO_BIN_EXE_locksmith");

fn locksmith(server: &NativeServer, args: &[&str]) -> Output {
    Command::new(BIN).args(args).env("LOCKSMITH_BACKEND", server.url()).env_remove("LOCKSMITH_LOG").output().unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// `locksmith lock NAME ARGS…` holding in the background, and the token it printed.
fn hold(server: &NativeServer, name: &str, args: &[&str]) -> (ChildProcess, u64) {
    let mut cmd = Command::new(BIN);
    cmd.args(["lock", name]).args(args).env("LOCKSMITH_BACKEND", server.url());
    cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut p = spawn("locksmith lock", &mut cmd);
    let mut line = String::new();
    BufReader::new(p.take_stdout().unwrap()).read_line(&mut line).unwrap();
    let token = line.trim().parse().unwrap_or_else(|_| panic!("locksmith lock printed {line:?}, not a token"));
    (p, token)
}

fn stderr_of(p: &mut ChildProcess) -> String {
    let mut s = String::new();
    let _ = std::io::Read::read_to_string(&mut p.take_stderr().unwrap(), &mut s);
    s
}

/// `locksmith lock NAME` prints the token, holds until SIGTERM (others cannot take it
/// meanwhile), releases and exits 0; the next holder's token is greater.
#[test]
fn lock_prints_the_token_and_holds_until_interrupted() {
    let server = NativeServer::start(BIN.as_ref());
    let (mut p, token) = hold(&server, "held", &[]);
    let o = locksmith(&server, &["run", "held", "-n", "--", "echo", "ran"]);
    assert_eq!(o.status.code(), Some(75), "{}", stderr(&o));
    assert!(o.stdout.is_empty(), "the command ran while `locksmith lock` held the lock");
    p.signal(Signal::SIGTERM);
    let status = p.wait_timeout(Duration::from_secs(10)).expect("locksmith lock did not exit on SIGTERM");
    assert_eq!(status.code(), Some(0), "{}", stderr_of(&mut p));
    let o = locksmith(&server, &["run", "held", "-n", "--", "sh", "-c", "echo $LOCKSMITH_TOKEN"]);
    let next: u64 = String::from_utf8_lossy(&o.stdout).trim().parse().unwrap();
    assert!(next > token, "token {next} after {token}");
}

/// A `locksmith lock` that loses its hold (paused past its TTL) exits 76, saying when the hold
/// stopped being safe as a UTC date and how long ago.
#[test]
fn lock_exits_76_when_the_hold_is_lost_and_says_when_in_utc() {
    let server = NativeServer::start(BIN.as_ref());
    let (mut p, _) = hold(&server, "lost", &["--ttl", "1s"]);
    p.signal(Signal::SIGSTOP);
    std::thread::sleep(Duration::from_millis(2_000));
    p.signal(Signal::SIGCONT);
    let status = p.wait_timeout(Duration::from_secs(10)).expect("locksmith lock did not exit after the loss");
    let err = stderr_of(&mut p);
    assert_eq!(status.code(), Some(76), "{err}");
    assert!(err.starts_with("locksmith lock: lost lock \"lost\" (held safely until 20"), "{err}");
    assert!(err.contains(" UTC, ") && err.contains(" s ago)"), "{err}");
    assert!(!err.contains("unix_ms"), "{err}");
}

/// flock's `-n` and `-E N`: a held lock answers at once with the chosen code, nothing runs;
/// `-w SECS` gives up after that many seconds (fractions too); `-q` says nothing.
#[test]
fn flock_style_no_wait_wait_seconds_and_conflict_exit_code() {
    let server = NativeServer::start(BIN.as_ref());
    let (_holder, _) = hold(&server, "busy", &[]);
    let o = locksmith(&server, &["run", "busy", "-n", "-E", "9", "--", "echo", "ran"]);
    assert_eq!(o.status.code(), Some(9), "{}", stderr(&o));
    assert!(o.stdout.is_empty());
    let started = Instant::now();
    let o = locksmith(&server, &["run", "busy", "-w", "0.5", "--", "echo", "ran"]);
    let waited = started.elapsed();
    assert_eq!(o.status.code(), Some(75), "{}", stderr(&o));
    assert!(waited >= Duration::from_millis(500) && waited < Duration::from_secs(5), "waited {waited:?}");
    assert!(stderr(&o).contains("timed out waiting for \"busy\"; nothing ran"), "{}", stderr(&o));
    let o = locksmith(&server, &["run", "busy", "-n", "-q", "--", "echo", "ran"]);
    assert_eq!(o.status.code(), Some(75));
    assert!(o.stderr.is_empty(), "-q printed: {}", stderr(&o));
    let o = locksmith(&server, &["lock", "busy", "-n", "-E", "3"]);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
}

/// `-v` says who holds the lock while waiting (the owner given with `--owner`), the token
/// acquired, and the release.
#[test]
fn verbose_says_who_holds_it_the_token_and_the_release() {
    let server = NativeServer::start(BIN.as_ref());
    let (holder, token) = hold(&server, "told", &["--owner", "nightly@host-a"]);
    let mut cmd = Command::new(BIN);
    cmd.args(["run", "told", "-v", "--", "true"]).env("LOCKSMITH_BACKEND", server.url());
    cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped());
    let mut waiter = spawn("locksmith run -v", &mut cmd);
    std::thread::sleep(Duration::from_millis(700));
    holder.signal(Signal::SIGTERM);
    let status = waiter.wait_timeout(Duration::from_secs(10)).expect("the waiter did not finish");
    let err = stderr_of(&mut waiter);
    assert_eq!(status.code(), Some(0), "{err}");
    let lines: Vec<&str> = err.lines().collect();
    assert!(lines[0].starts_with("locksmith run: waiting for \"told\", held by nightly@host-a (token"), "{err}");
    assert_eq!(lines[1], format!("locksmith run: acquired \"told\", token {}", token + 1), "{err}");
    assert_eq!(lines[2], "locksmith run: released \"told\"", "{err}");
    assert_eq!(lines.len(), 3, "{err}");
}

/// `--lock-delay`: after a holder dies without releasing, the lock stays unavailable for the
/// delay beyond its lease; a clean release frees it at once.
#[test]
fn lock_delay_keeps_a_crashed_holders_lock_unavailable() {
    let server = NativeServer::start(BIN.as_ref());
    let (mut holder, _) = hold(&server, "delayed", &["--ttl", "1s", "--lock-delay", "2s"]);
    holder.kill9();
    std::thread::sleep(Duration::from_millis(1_600));
    let o = locksmith(&server, &["run", "delayed", "-n", "--", "true"]);
    assert_eq!(o.status.code(), Some(75), "free during the lock-delay: {}", stderr(&o));
    let o = locksmith(&server, &["run", "delayed", "-w", "5", "--", "true"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
}

/// `elect --no-wait` / `-w` give up on an election someone leads (75); `--observe` with a
/// command is a contradiction (2).
#[test]
fn elect_gives_up_with_no_wait_or_timeout_and_refuses_observe_with_a_command() {
    let server = NativeServer::start(BIN.as_ref());
    let (_leader, _) = hold(&server, "scheduler", &[]);
    let o = locksmith(&server, &["elect", "scheduler", "-n", "--value", "b", "--", "echo", "ran"]);
    assert_eq!(o.status.code(), Some(75), "{}", stderr(&o));
    let o = locksmith(&server, &["elect", "scheduler", "-w", "300ms", "--", "echo", "ran"]);
    assert_eq!(o.status.code(), Some(75), "{}", stderr(&o));
    assert!(o.stdout.is_empty());
    let o = locksmith(&server, &["elect", "scheduler", "--observe", "--", "echo", "ran"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(o.stdout.is_empty());
}

/// `elect` on a backend without leader elections is refused (2), never run as a plain lock.
#[cfg(feature = "sql")]
#[test]
fn elect_refuses_a_backend_without_elections() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("x.db").display());
    let o = Command::new(BIN).args(["elect", "e", "--backend", &url, "--", "echo", "ran"]).output().unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(o.stdout.is_empty(), "the command ran as under a plain lock");
    assert!(stderr(&o).contains("offers no leader election"), "{}", stderr(&o));
}

/// Client commands speak in their own `locksmith X:` lines only: no library log lines unless
/// asked for (`-v`, `LOCKSMITH_LOG`).
#[test]
fn client_commands_print_only_their_own_lines() {
    let dead = "locksmith://127.0.0.1:1";
    for args in [
        vec!["run", "x", "--backend", dead, "--connect-timeout", "1s", "--", "true"],
        vec!["lock", "x", "--backend", dead, "--connect-timeout", "1s"],
        vec!["elect", "x", "--backend", dead, "--connect-timeout", "1s", "--", "true"],
        vec!["status", "--backend", dead],
    ] {
        let o = Command::new(BIN).args(&args).env_remove("LOCKSMITH_LOG").output().unwrap();
        assert_eq!(o.status.code(), Some(69), "{args:?}: {}", stderr(&o));
        let prefix = format!("locksmith {}: ", args[0]);
        for line in stderr(&o).lines() {
            assert!(line.starts_with(&prefix), "{args:?}: a line not of its own: {line:?}");
        }
    }
}
