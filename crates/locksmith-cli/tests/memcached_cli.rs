//! `locksmith run` and `status` against a real memcached: no lock without `--unfenced` (exit 2,
//! saying why), no LOCKSMITH_TOKEN with it, and `-` for the waiters status cannot count.

use std::process::{Command, Stdio};

use locksmith_testkit::MemcachedServer;

const BIN: &str = env!("CARGO_BIN_EXE_locksmith");

/// `locksmith run` refuses without `--unfenced` and runs the command with it, without a token.
#[test]
fn run_on_memcached_needs_unfenced_and_gives_no_token() {
    let server = MemcachedServer::start();
    let run = |extra: &[&str]| {
        Command::new(BIN)
            .args(["run", "job", "--backend", &server.url()])
            .args(extra)
            .args(["--", "sh", "-c", "echo token=${LOCKSMITH_TOKEN-none}"])
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    let refused = run(&[]);
    assert_eq!(refused.status.code(), Some(2), "{}", String::from_utf8_lossy(&refused.stderr));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("fencing token"));
    assert!(refused.stdout.is_empty(), "the command ran");
    let ok = run(&["--unfenced"]);
    assert_eq!(ok.status.code(), Some(0), "{}", String::from_utf8_lossy(&ok.stderr));
    assert_eq!(String::from_utf8_lossy(&ok.stdout).trim(), "token=none");
}

/// `locksmith status NAME` shows the holder of a lock a `run` holds, with `-` for waiters.
#[test]
fn status_shows_the_holder_and_no_waiter_count() {
    let server = MemcachedServer::start();
    let mut holder = Command::new(BIN)
        .args(["run", "nightly", "--unfenced", "--backend", &server.url(), "--", "sleep", "30"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let started = std::time::Instant::now();
    let out = loop {
        let out = Command::new(BIN).args(["status", "nightly", "--backend", &server.url()]).output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        if text.contains("held") || started.elapsed() > std::time::Duration::from_secs(10) {
            break text;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    // The holder is a child of this test: ended by its PID.
    let _ = holder.kill();
    let _ = holder.wait();
    let row = out.lines().find(|l| l.contains("held")).unwrap_or_else(|| panic!("no holder shown: {out}"));
    // LOCK STATE HOLDER SESSION TOKEN WAITERS TTL-LEFT
    let cols: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(cols.get(4..6), Some(&["0", "-"][..]), "token 0, waiters unknown: {out}");
}
