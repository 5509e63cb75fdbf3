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

/// `locksmith run` over `rediss://` with an ACL user: the right password and CA run the command;
/// a wrong password exits 77 and a CA that signed nothing the server shows exits 78, both at once
/// although `--timeout` would let them wait, and neither password appears in what is printed.
#[test]
fn run_over_tls_says_auth_and_config_errors_by_exit_code() {
    use locksmith_testkit::{TestCerts, TlsMode, REDIS_TLS_USER};
    let certs = TestCerts::generate();
    let server = RedisServer::start_tls(&certs, TlsMode::ServerOnly);
    let run = |password: &str, ca: &std::path::Path| {
        let url = format!("rediss://{REDIS_TLS_USER}:{password}@localhost:{}?ca={}", server.port(), ca.display());
        let started = std::time::Instant::now();
        let out = Command::new(BIN)
            .args(["run", "tls-job", "--backend", &url, "--timeout", "30s", "--", "echo", "ran"])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        (out, started.elapsed())
    };
    let (ok, _) = run(server.password(), &server.ca());
    assert_eq!(ok.status.code(), Some(0), "{}", String::from_utf8_lossy(&ok.stderr));
    assert_eq!(String::from_utf8_lossy(&ok.stdout).trim(), "ran");

    let wrong = "wrong-pass-0c9d1e";
    for ((password, ca), code) in [((wrong, server.ca()), 77), ((server.password(), certs.other_ca()), 78)] {
        let (out, took) = run(password, &ca);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(code), "{stderr}");
        assert!(out.stdout.is_empty(), "the command ran");
        assert!(took < std::time::Duration::from_secs(10), "took {took:?}: {stderr}");
        for secret in [wrong, server.password()] {
            assert!(!stderr.contains(secret), "{stderr}");
        }
    }
}

/// Redlock with fewer than a quorum of instances answering: `run` exits 69 at once, naming how
/// many answered, instead of waiting for instances that are not there.
#[test]
fn redlock_run_without_a_quorum_exits_69_at_once() {
    let up = RedisServer::start();
    let down: Vec<String> = (0..2).map(|_| format!("127.0.0.1:{}", locksmith_testkit::free_port())).collect();
    let url = format!("redlock://{},{},{}", up.addr(), down[0], down[1]);
    let started = std::time::Instant::now();
    let out = Command::new(BIN)
        .args(["run", "quorum", "--unfenced", "--timeout", "60s", "--backend", &url, "--", "echo", "ran"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(69), "{stderr}");
    assert!(stderr.contains("only 1 of 3 instances reachable, need 2"), "{stderr}");
    assert!(out.stdout.is_empty(), "the command ran");
    assert!(started.elapsed() < std::time::Duration::from_secs(5), "took {:?}", started.elapsed());
}
