//! `locksmith run` against real Redis servers: the process properties of the contract
//! (kill -9, SIGSTOP past the TTL, Ctrl-C while waiting, exit codes) on `redis://`, and
//! Redlock's refusal to pretend it has fencing tokens.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use locksmith_core::conformance::{Caps, Target};
use locksmith_testkit::RedisServer;

const BIN: &str = env!("CARGO_BIN_EXE_locksmith");

struct Redis {
    server: RedisServer,
}

impl Redis {
    fn start() -> Self {
        Self { server: RedisServer::start() }
    }
}

#[async_trait::async_trait]
impl Target for Redis {
    fn url(&self) -> String {
        self.server.url()
    }
    async fn client(&self, ttl: Duration) -> locksmith::Result<locksmith::Client> {
        locksmith::connect_with_ttl(&self.server.url(), ttl).await
    }
    fn caps(&self) -> Caps {
        let mut c = Caps::default();
        c.fifo = false;
        c.reports_waiters = false;
        c
    }
    fn cli(&self) -> Option<PathBuf> {
        Some(BIN.into())
    }
}

locksmith_core::process_conformance_suite!(Redis::start());

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

/// `locksmith bench` prints the same table for the native server, Redis and Redlock in one run,
/// with a ratio line per backend against the first.
#[test]
fn bench_measures_native_redis_and_redlock_in_one_table() {
    let native = locksmith_testkit::NativeServer::start(BIN.as_ref());
    let redis = RedisServer::start();
    let instances: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let redlock = format!("redlock://{}", instances.iter().map(RedisServer::addr).collect::<Vec<_>>().join(","));
    let out = Command::new(BIN)
        .args(["bench", "--duration", "200ms", "--clients", "3", "--locks", "4"])
        .args(["--backend", &native.url(), "--backend", &redis.url(), "--backend", &redlock])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{}\n{stdout}", String::from_utf8_lossy(&out.stderr));
    for needle in ["cycle p50", "fairness", &native.url(), &redis.url(), "redlock://"] {
        assert!(stdout.contains(needle), "{needle:?} missing from:\n{stdout}");
    }
    assert_eq!(stdout.matches('÷').count(), 2, "one ratio line per extra backend:\n{stdout}");
}
