//! `locksmith run` against real Redis servers: the process properties of the contract
//! (kill -9, SIGSTOP past the TTL, Ctrl-C while waiting, exit codes) on `redis://`, and
//! Redlock's refusal to pretend it has fencing tokens.

use std::process::{Command, Stdio};

use locksmith_core::conformance::UrlTarget;
use locksmith_testkit::{CliTarget, RedisServer};

const BIN: &str = env!("CARGO_BIN_EXE_locksmith");

fn redis() -> CliTarget {
    let server = RedisServer::start();
    CliTarget::new(
        BIN,
        UrlTarget::new(server.url(), locksmith::backend).fifo(true).reports_waiters(true).keeping(server),
    )
}

locksmith_testkit::process_conformance_suite!(redis());

/// On Redlock, `locksmith run` refuses without `--unfenced` (exit 2, saying why), and with it
/// runs the command without a LOCKSMITH_TOKEN.
#[test]
fn redlock_run_needs_unfenced_and_gives_no_token() {
    let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let hosts: Vec<String> = servers.iter().map(RedisServer::addr).collect();
    let url = format!("redlock://{}", hosts.join(","));
    let run = |extra: &[&str]| {
        Command::new(BIN)
            .args(["run", "job", "--backend", &url])
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
