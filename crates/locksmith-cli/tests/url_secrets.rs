//! No password from a backend URL ever shows: not in a parse error, not in an "unreachable"
//! error, not in a backend's `Debug`, not in what `locksmith run` or `status` print. Every scheme,
//! every kind of URL mistake, with credentials in every form a user might type them.

use std::process::{Command, Stdio};
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_locksmith");
const SECRET: &str = "s3cret";

/// URLs with the secret in them: well-formed but unreachable, and broken in every way a parser
/// can complain about.
fn urls() -> Vec<String> {
    let port = locksmith_testkit::free_port();
    let mut urls = Vec::new();
    for scheme in ["locksmith", "redis", "rediss", "etcd", "etcds", "zk", "postgres", "postgresql", "mysql"] {
        for creds in [format!("app:{SECRET}@"), format!(":{SECRET}@"), format!("app:{SECRET}%2Fx@")] {
            urls.push(format!("{scheme}://{creds}127.0.0.1:{port}/db"));
            urls.push(format!("{scheme}://{creds}127.0.0.1:notaport/db"));
            urls.push(format!("{scheme}://{creds}127.0.0.1:{port}/db?color=red"));
            urls.push(format!("{scheme}://{creds}127.0.0.1:{port}/db?mode=nonsense"));
            urls.push(format!("{scheme}://{creds}/db"));
        }
        // Reserved characters left unencoded in the password.
        for raw in [format!("app:{SECRET}/x@"), format!("app:{SECRET}?x@"), format!("app:{SECRET}#x@")] {
            urls.push(format!("{scheme}://{raw}127.0.0.1:{port}/db"));
        }
        urls.push(format!("{scheme}:/app:{SECRET}@127.0.0.1:{port}"));
        urls.push(format!("{scheme}://127.0.0.1:{port}/db?password={SECRET}"));
    }
    let hosts = format!("127.0.0.1:{port},127.0.0.1:{},127.0.0.1:{}", port + 1, port + 2);
    urls.push(format!("redlock://app:{SECRET}@{hosts}"));
    urls.push(format!("redlock://app:{SECRET}@127.0.0.1:{port}"));
    urls.push(format!("redlock://app:{SECRET}/x@{hosts}"));
    // TLS options that cannot be used: a missing CA file, a key without its certificate,
    // verification switched off next to a CA.
    for base in [format!("rediss://app:{SECRET}@127.0.0.1:{port}"), format!("redlock://app:{SECRET}@{hosts}?tls=true")]
    {
        let sep = if base.contains('?') { '&' } else { '?' };
        urls.push(format!("{base}{sep}ca=/nonexistent/ca.pem"));
        urls.push(format!("{base}{sep}key=/nonexistent/client.key"));
        urls.push(format!("{base}{sep}ca=/nonexistent/ca.pem#insecure"));
    }
    urls.push(format!("etcds://app:{SECRET}@127.0.0.1:{port}?ca=/nonexistent/ca.pem"));
    urls.push(format!(
        "postgres://app:{SECRET}@127.0.0.1:{port}/db?sslmode=verify-full&sslrootcert=/nonexistent/ca.pem"
    ));
    urls.push(format!("mysql://app:{SECRET}@127.0.0.1:{port}/db?ssl-mode=VERIFY_IDENTITY&ssl-ca=/nonexistent/ca.pem"));
    urls.push(format!("gopher://app:{SECRET}@127.0.0.1:{port}"));
    urls.push(format!("app:{SECRET}@127.0.0.1:{port}"));
    urls
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn library_errors_and_debug_never_show_a_password() {
    for url in urls() {
        match locksmith::backend(&url) {
            Err(e) => {
                let shown = format!("{e} {e:?}");
                assert!(!shown.contains(SECRET), "{url}: {shown}");
            }
            Ok(backend) => {
                let shown = format!("{} {backend:?}", backend.describe());
                assert!(!shown.contains(SECRET), "{url}: {shown}");
                // Unreachable: the error names the backend; it must be the described one.
                let client = locksmith::Client::new(backend, Duration::from_secs(1)).unwrap();
                let r = tokio::time::timeout(Duration::from_secs(8), client.try_lock("x")).await;
                let shown = format!("{r:?}");
                assert!(!shown.contains(SECRET), "{url}: {shown}");
                client.close().await;
            }
        }
    }
}

/// One URL of each kind per scheme (the library test above covers every combination; a process
/// per URL costs seconds where a database is unreachable).
fn some_urls() -> Vec<String> {
    urls().into_iter().filter(|u| !u.contains("%2F") && !u.contains(":@") && !u.contains("color=")).step_by(2).collect()
}

#[test]
fn command_line_output_never_shows_a_password() {
    for url in some_urls() {
        for args in [
            vec!["run", "x", "--backend", &url, "--timeout", "1s", "--connect-timeout", "4s", "--", "true"],
            vec!["status", "--backend", &url],
        ] {
            let o = Command::new(BIN).args(&args).stdin(Stdio::null()).output().unwrap();
            let out = format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
            assert!(!out.contains(SECRET), "{args:?}: {out}");
            assert_ne!(o.status.code(), Some(0), "{args:?} succeeded against nothing: {out}");
        }
    }
}
