//! The native server's security features against their cost, in one `locksmith bench` run: the
//! plain server, the same over TLS, and over TLS with an auth policy (a bearer token checked on
//! every call, prefix rights on every acquire). For `docs/benchmarks.md`:
//!
//! ```text
//! cargo build --release -p locksmith-cli
//! cargo run --release -p locksmith-bench --example bench_native_security -- target/release/locksmith \
//!     --duration 2s --rounds 3 --workloads cycle,8x1,32x32
//! ```
use std::process::Command;

use locksmith_testkit::{NativeServer, TestCerts};

fn main() {
    // The servers are dropped (killed by PID) when `run` returns, before the process exits.
    std::process::exit(run());
}

fn run() -> i32 {
    let mut args = std::env::args().skip(1);
    let Some(bin) = args.next() else {
        eprintln!("usage: bench_native_security PATH-TO-locksmith [bench options…]");
        return 2;
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let token = Command::new(&bin).arg("token").output().expect("run locksmith token");
    let (secret, stderr) =
        (String::from_utf8_lossy(&token.stdout).trim().to_string(), String::from_utf8_lossy(&token.stderr).to_string());
    let Some(digest) = stderr.split('"').nth(1) else {
        eprintln!("locksmith token printed no digest: {stderr}");
        return 1;
    };
    let token_file = dir.path().join("bench.token");
    let policy = dir.path().join("policy.toml");
    std::fs::write(&token_file, &secret).expect("write the token");
    std::fs::write(&policy, format!("[principals.bench]\ntokens = [\"{digest}\"]\nlock = [\"\"]\nobserve = [\"\"]\n"))
        .expect("write the policy");
    let certs = TestCerts::generate();
    let plain = NativeServer::start(bin.as_ref());
    let tls = NativeServer::start_tls(bin.as_ref(), &certs, false);
    let secured =
        NativeServer::start_tls_with(bin.as_ref(), &certs, false, &["--auth", policy.to_str().unwrap_or_default()]);
    let mut cmd = Command::new(&bin);
    cmd.arg("bench").args(args);
    for url in [plain.url(), tls.url(), format!("{}&token_file={}", secured.url(), token_file.display())] {
        cmd.args(["--backend", &url]);
    }
    let status = cmd.status().expect("run locksmith bench");
    status.code().unwrap_or(1)
}
