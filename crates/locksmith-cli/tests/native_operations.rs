//! Operating `locksmith serve`: Prometheus metrics over plain HTTP, the standard gRPC health
//! check, and configuration from a file, the environment and flags, in that order of strength.

#[path = "support/scrape.rs"]
mod scrape;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use locksmith_testkit::{free_port, spawn, NativeServer};
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;

const BIN: &str = env!("CARGO_BIN_EXE_locksmith");

/// A few `locksmith run` invocations show up in `/metrics` as grants, releases and sessions.
#[test]
fn metrics_count_the_grants_of_locksmith_run() {
    let metrics = free_port();
    let server = NativeServer::start_with(BIN.as_ref(), &["--metrics-listen", &format!("127.0.0.1:{metrics}")]);
    let grants = r#"locksmith_server_grants_total{kind="immediate"}"#;
    let before = scrape::metrics(metrics);
    for _ in 0..3 {
        let out = Command::new(BIN)
            .args(["run", "nightly", "--backend", &server.url(), "--", "true"])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }
    let after = scrape::metrics(metrics);
    assert_eq!(scrape::sample(&after, grants) - scrape::sample(&before, grants), 3.0, "{after}");
    assert_eq!(scrape::sample(&after, "locksmith_server_releases_total"), 3.0, "{after}");
    assert!(scrape::sample(&after, r#"locksmith_server_sessions_opened_total{kind="new"}"#) >= 3.0, "{after}");
    assert!(after.contains("# TYPE locksmith_server_wal_sync_seconds histogram"), "{after}");
    assert!(after.contains("locksmith_server_connections "), "{after}");
}

/// The standard gRPC health service answers SERVING for the lock service and for the server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_grpc_health_check_answers_serving() {
    let server = NativeServer::start(BIN.as_ref());
    let channel = tonic::transport::Channel::from_shared(format!("http://127.0.0.1:{}", server.port()))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut health = HealthClient::new(channel);
    for service in ["locksmith.v1.Locksmith", ""] {
        let answer = health.check(HealthCheckRequest { service: service.into() }).await.unwrap().into_inner();
        assert_eq!(answer.status(), ServingStatus::Serving, "{service:?}");
    }
    let unknown = health.check(HealthCheckRequest { service: "no.such.Service".into() }).await.unwrap_err();
    assert_eq!(unknown.code(), tonic::Code::NotFound);
}

/// Starts `locksmith serve --config FILE` with `env` and `args`; the port it listens on among
/// `ports`, or `None`.
fn listening_port(config: &Path, env: &[(&str, String)], args: &[String], ports: &[u16]) -> Option<u16> {
    let mut cmd = Command::new(BIN);
    cmd.arg("serve").arg("--config").arg(config).args(args).env("LOCKSMITH_LOG", "warn").stdin(Stdio::null());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut p = spawn("locksmith serve", &mut cmd);
    let until = Instant::now() + Duration::from_secs(20);
    while Instant::now() < until {
        if let Some(&port) = ports.iter().find(|&&port| std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()) {
            p.kill9();
            return Some(port);
        }
        if p.try_wait().is_some() {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

/// `listen` from the config file applies alone; `LOCKSMITH_LISTEN` overrides it; `--listen`
/// overrides both.
#[test]
fn a_flag_beats_the_environment_which_beats_the_config_file() {
    let dir = tempfile::tempdir().unwrap();
    let (file_port, env_port, flag_port) = (free_port(), free_port(), free_port());
    let ports = [file_port, env_port, flag_port];
    let config = dir.path().join("serve.toml");
    let data = dir.path().join("data");
    std::fs::write(
        &config,
        format!("listen = \"127.0.0.1:{file_port}\"\ndata-dir = {:?}\n", data.display().to_string()),
    )
    .unwrap();
    let env = [("LOCKSMITH_LISTEN", format!("127.0.0.1:{env_port}"))];
    let flag = [format!("--listen=127.0.0.1:{flag_port}")];
    assert_eq!(listening_port(&config, &[], &[], &ports), Some(file_port), "the file alone");
    assert_eq!(listening_port(&config, &env, &[], &ports), Some(env_port), "the environment over the file");
    assert_eq!(listening_port(&config, &env, &flag, &ports), Some(flag_port), "the flag over both");
    assert!(data.exists(), "the data directory of the file was not used");
}

/// A config file with an unknown key, or a value its option refuses, stops the server before it
/// starts with exit code 78 (EX_CONFIG) and a message naming the file and the key.
#[test]
fn a_bad_config_file_exits_78_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("serve.toml");
    for (text, says) in [
        ("max-conections = 10\n", "unknown key `max-conections`"),
        ("max-connections = \"many\"\n", "key `max-connections`"),
    ] {
        std::fs::write(&config, text).unwrap();
        let out = Command::new(BIN).arg("serve").arg("--config").arg(&config).stdin(Stdio::null()).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(78), "{stderr}");
        assert!(stderr.contains(says) && stderr.contains("serve.toml"), "{stderr}");
    }
}
