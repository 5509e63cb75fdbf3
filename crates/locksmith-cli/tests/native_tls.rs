//! The native server over TLS (`locksmith serve --tls-cert --tls-key [--client-ca]`, clients on
//! `locksmiths://…?ca=`): the contract holds over TLS and mutual TLS; a CA that did not sign the
//! server, a missing client certificate, and TLS spoken to a plain server are configuration
//! errors said at once (exit 78), never "unreachable"; unusable server files stop `serve` with
//! exit 78 before it listens.

use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use locksmith_core::conformance::UrlTarget;
use locksmith_testkit::{NativeServer, TestCerts};

const BIN: &str = env!("CARGO_BIN_EXE_locksmith");
/// Refusals must come long before any lock timeout.
const FAST: Duration = Duration::from_secs(3);

static CERTS: OnceLock<TestCerts> = OnceLock::new();

fn certs() -> &'static TestCerts {
    CERTS.get_or_init(TestCerts::generate)
}

fn over_tls() -> UrlTarget {
    let server = NativeServer::start_tls(BIN.as_ref(), certs(), false);
    UrlTarget::new(server.url(), locksmith::backend).keeping(server)
}

/// The whole contract over TLS.
mod tls {
    locksmith_core::conformance_suite!(super::over_tls());
}

/// The error of one `try_lock` on `url`, and how long it took.
async fn failure(url: &str) -> (locksmith::Error, Duration) {
    let started = Instant::now();
    let client = locksmith::connect_with_ttl(url, Duration::from_secs(5)).await.unwrap_or_else(|e| panic!("{e}"));
    let e = client.try_lock("tls").await.map(|_| ()).expect_err("the connection should have been refused");
    (e, started.elapsed())
}

/// Mutual TLS: with the client certificate the lock works; without it the server refuses the
/// handshake, which is a configuration error naming `cert=`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_tls_locks_with_a_client_certificate_and_refuses_without() {
    let server = NativeServer::start_tls(BIN.as_ref(), certs(), true);
    let client = locksmith::connect_with_ttl(&server.url(), Duration::from_secs(5)).await.unwrap();
    let g = client.lock("mtls").await.unwrap();
    assert_eq!(g.token(), 1);
    assert!(g.unlock().await.unwrap());
    client.close().await;
    let url = format!("locksmiths://localhost:{}?ca={}", server.port(), certs().ca().display());
    let (e, took) = failure(&url).await;
    assert!(matches!(&e, locksmith::Error::Config { message, .. } if message.contains("cert=")), "{e}");
    assert!(took < FAST, "took {took:?}");
}

/// A CA that did not sign the server's certificate: `Error::Config`, at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_ca_is_a_configuration_error_at_once() {
    let server = NativeServer::start_tls(BIN.as_ref(), certs(), false);
    let url = format!("locksmiths://localhost:{}?ca={}", server.port(), certs().other_ca().display());
    let (e, took) = failure(&url).await;
    assert!(matches!(&e, locksmith::Error::Config { message, .. } if message.contains("not trusted")), "{e}");
    assert!(took < FAST, "took {took:?}");
    // The public roots did not sign it either.
    let (e, _) = failure(&format!("locksmiths://localhost:{}", server.port())).await;
    assert!(matches!(e, locksmith::Error::Config { .. }), "{e}");
}

/// TLS spoken to a plain server is a configuration error suggesting `locksmith://`; plain
/// HTTP/2 to a TLS server is one too (one probe says the server speaks TLS), suggesting
/// `locksmiths://`: one-sided TLS is never "unreachable", whichever side has it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_and_plain_mismatches_say_which_scheme_to_use() {
    let plain = NativeServer::start(BIN.as_ref());
    let url = format!("locksmiths://localhost:{}?ca={}", plain.port(), certs().ca().display());
    let (e, took) = failure(&url).await;
    assert!(matches!(&e, locksmith::Error::Config { message, .. } if message.contains("locksmith://")), "{e}");
    assert!(took < FAST, "took {took:?}");
    let tls = NativeServer::start_tls(BIN.as_ref(), certs(), false);
    let (e, took) = failure(&format!("locksmith://127.0.0.1:{}", tls.port())).await;
    assert!(matches!(&e, locksmith::Error::Config { message, .. } if message.contains("requires TLS")), "{e}");
    assert!(e.to_string().contains("locksmiths://"), "{e}");
    assert!(took < FAST, "took {took:?}");
}

/// `locksmith run` with one-sided TLS exits 78 both ways, and nothing runs.
#[test]
fn run_with_one_sided_tls_exits_78_both_ways() {
    let plain = NativeServer::start(BIN.as_ref());
    let tls = NativeServer::start_tls(BIN.as_ref(), certs(), false);
    let urls = [
        format!("locksmiths://localhost:{}?ca={}", plain.port(), certs().ca().display()),
        format!("locksmith://127.0.0.1:{}", tls.port()),
    ];
    for url in urls {
        let out = Command::new(BIN)
            .args(["run", "job", "--backend", &url, "--", "echo", "ran"])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(78), "{url}: {}", String::from_utf8_lossy(&out.stderr));
        assert!(out.stdout.is_empty(), "the command ran");
    }
}

/// `locksmith run` over TLS: the right CA runs the command; a wrong one exits 78 at once
/// although `--timeout` would let it wait.
#[test]
fn run_over_tls_exits_78_for_a_wrong_ca() {
    let server = NativeServer::start_tls(BIN.as_ref(), certs(), false);
    let run = |url: &str| {
        Command::new(BIN)
            .args(["run", "job", "--backend", url, "--timeout", "30s", "--", "sh", "-c", "echo token=$LOCKSMITH_TOKEN"])
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    let ok = run(&server.url());
    assert_eq!(ok.status.code(), Some(0), "{}", String::from_utf8_lossy(&ok.stderr));
    assert_eq!(String::from_utf8_lossy(&ok.stdout).trim(), "token=1");
    let started = Instant::now();
    let wrong = run(&format!("locksmiths://localhost:{}?ca={}", server.port(), certs().other_ca().display()));
    assert_eq!(wrong.status.code(), Some(78), "{}", String::from_utf8_lossy(&wrong.stderr));
    assert!(wrong.stdout.is_empty(), "the command ran");
    assert!(started.elapsed() < Duration::from_secs(10));
}

/// `serve` with a certificate it cannot read or a key that is not one exits 78 before
/// listening, saying which file, and leaves the data directory untouched.
#[test]
fn serve_refuses_unusable_tls_files_with_exit_78() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let garbage = dir.path().join("garbage.key");
    std::fs::write(&garbage, "-----BEGIN PRIVATE KEY-----\nbm90IGEga2V5\n-----END PRIVATE KEY-----\n").unwrap();
    let cert = certs().server_cert();
    let missing = dir.path().join("missing.pem");
    for (cert, key, says) in [(&missing, &garbage, "missing.pem"), (&cert, &garbage, "TLS")] {
        let out = Command::new(BIN)
            .arg("serve")
            .arg("--listen")
            .arg(format!("127.0.0.1:{}", locksmith_testkit::free_port()))
            .arg("--data-dir")
            .arg(&data)
            .arg("--tls-cert")
            .arg(cert)
            .arg("--tls-key")
            .arg(key)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(78), "{stderr}");
        assert!(stderr.contains(says), "{stderr}");
        assert!(!stderr.contains("bm90IGEga2V5"), "key bytes printed: {stderr}");
        assert!(!data.exists(), "the data directory was created");
    }
}
