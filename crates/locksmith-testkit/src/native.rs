//! The native server as a real process: `locksmith serve` on a free port and a temp data dir.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::port::{free_port, wait_listening};
use crate::process::{spawn, ChildProcess};

/// A `locksmith serve` process; killed by PID on drop, its temp data dir removed.
#[derive(Debug)]
pub struct NativeServer {
    bin: PathBuf,
    port: u16,
    dir: tempfile::TempDir,
    args: Vec<String>,
    /// `?ca=…[&cert=…&key=…]` for [`NativeServer::url`] when serving TLS.
    tls_query: Option<String>,
    process: Option<ChildProcess>,
}

impl NativeServer {
    /// Starts `bin serve` (pass `env!("CARGO_BIN_EXE_locksmith")`).
    ///
    /// # Panics
    /// When the server does not listen within 20 s.
    pub fn start(bin: &Path) -> Self {
        Self::start_with(bin, &[])
    }

    /// Starts `bin serve` with extra `serve` arguments (kept for restarts), e.g.
    /// `["--durability", "leases"]`.
    ///
    /// # Panics
    /// When the server does not listen within 20 s.
    pub fn start_with(bin: &Path, args: &[&str]) -> Self {
        let dir = tempfile::Builder::new().prefix("locksmith-test-").tempdir().expect("create a temp dir");
        let args = args.iter().map(|a| a.to_string()).collect();
        let mut s = Self { bin: bin.to_path_buf(), port: free_port(), dir, args, tls_query: None, process: None };
        s.restart();
        s
    }

    /// Starts `bin serve` over TLS with `certs`' server certificate (`--tls-cert`, `--tls-key`)
    /// and, with `client_certs`, demanding client certificates signed by `certs`' CA
    /// (`--client-ca`). The files are copied into the server's dir. [`NativeServer::url`] is
    /// then `locksmiths://localhost:PORT?ca=…` (with the client certificate when demanded).
    ///
    /// # Panics
    /// When the files cannot be copied or the server does not listen within 20 s.
    pub fn start_tls(bin: &Path, certs: &crate::TestCerts, client_certs: bool) -> Self {
        Self::start_tls_with(bin, certs, client_certs, &[])
    }

    /// [`NativeServer::start_tls`] with extra `serve` arguments, e.g. `["--auth", "policy.toml"]`.
    ///
    /// # Panics
    /// As [`NativeServer::start_tls`].
    pub fn start_tls_with(bin: &Path, certs: &crate::TestCerts, client_certs: bool, extra: &[&str]) -> Self {
        let dir = tempfile::Builder::new().prefix("locksmith-test-").tempdir().expect("create a temp dir");
        let copy = |from: PathBuf, name: &str| {
            let to = dir.path().join(name);
            std::fs::copy(&from, &to).unwrap_or_else(|e| panic!("copying {}: {e}", from.display()));
            to.display().to_string()
        };
        let (cert, key, ca) = (
            copy(certs.server_cert(), "server.pem"),
            copy(certs.server_key(), "server.key"),
            copy(certs.ca(), "ca.pem"),
        );
        let mut args = vec!["--tls-cert".to_string(), cert, "--tls-key".into(), key];
        args.extend(extra.iter().map(|a| a.to_string()));
        let mut query = format!("ca={ca}");
        if client_certs {
            args.extend(["--client-ca".to_string(), ca.clone()]);
            let (c, k) = (copy(certs.client_cert(), "client.pem"), copy(certs.client_key(), "client.key"));
            query.push_str(&format!("&cert={c}&key={k}"));
        }
        let mut s =
            Self { bin: bin.to_path_buf(), port: free_port(), dir, args, tls_query: Some(query), process: None };
        s.restart();
        s
    }

    /// The backend URL: `locksmith://127.0.0.1:PORT`, or for a TLS server
    /// `locksmiths://localhost:PORT?ca=…` (the certificate names `localhost`).
    pub fn url(&self) -> String {
        match &self.tls_query {
            None => format!("locksmith://127.0.0.1:{}", self.port),
            Some(q) => format!("locksmiths://localhost:{}?{q}", self.port),
        }
    }

    /// The port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The data directory.
    pub fn data_dir(&self) -> &Path {
        self.dir.path()
    }

    /// The server's PID (0 when stopped).
    pub fn pid(&self) -> i32 {
        self.process.as_ref().map(ChildProcess::pid).unwrap_or(0)
    }

    /// The process, for signals.
    pub fn process(&self) -> Option<&ChildProcess> {
        self.process.as_ref()
    }

    /// `kill -9` the server; the data dir stays.
    pub fn kill9(&mut self) {
        if let Some(mut p) = self.process.take() {
            p.kill9();
        }
    }

    /// (Re)starts the server on the same port and data dir.
    ///
    /// # Panics
    /// When it does not listen within 20 s.
    pub fn restart(&mut self) {
        self.kill9();
        let data = self.dir.path().join("data");
        let mut cmd = Command::new(&self.bin);
        cmd.arg("serve")
            .arg("--listen")
            .arg(format!("127.0.0.1:{}", self.port))
            .arg("--data-dir")
            .arg(&data)
            .args(&self.args)
            .env("LOCKSMITH_LOG", "warn")
            .stdin(Stdio::null());
        let mut p = spawn("locksmith serve", &mut cmd);
        if !wait_listening(self.port, Duration::from_secs(20)) {
            let status = p.wait_timeout(Duration::from_millis(10));
            panic!(
                "locksmith serve did not listen on 127.0.0.1:{} within 20 s (exit: {status:?}); build it with `cargo build -p locksmith-cli`",
                self.port
            );
        }
        self.process = Some(p);
    }
}

/// A fresh token from `BIN token` (`bin`: the `locksmith` binary under test): the token, and
/// the SHA-256 digest an auth policy lists for it (printed on stderr, quoted).
///
/// # Panics
/// When the binary cannot run, fails, or prints no digest (test code: the test must fail).
pub fn new_token(bin: &Path) -> (String, String) {
    let out = Command::new(bin).arg("token").output().unwrap_or_else(|e| panic!("{}: {e}", bin.display()));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{} token: {stderr}", bin.display());
    let token = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let digest = stderr.split('"').nth(1).unwrap_or_else(|| panic!("no digest in {stderr}")).to_string();
    (token, digest)
}
