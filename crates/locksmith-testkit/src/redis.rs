//! Redis servers (Debian's `redis-server`) as real processes: plain, durable, or TLS-only with an
//! ACL user.

use nix::sys::signal::Signal;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::certs::TestCerts;
use crate::port::free_port;
use crate::process::{spawn_listening, ChildProcess};

/// How to get `redis-server` when it is missing.
pub const REDIS_SETUP: &str = "bash scripts/setup.sh (installs Debian's redis-server)";

/// A `redis-server` on 127.0.0.1 with its own port and temp dir; killed by PID on drop.
#[derive(Debug)]
pub struct RedisServer {
    port: u16,
    dir: tempfile::TempDir,
    durable: bool,
    tls: Option<Tls>,
    process: Option<ChildProcess>,
}

/// Whether a TLS test server asks clients for a certificate (`--tls-auth-clients`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlsMode {
    /// The server proves who it is; clients need no certificate (`--tls-auth-clients no`).
    ServerOnly,
    /// Mutual TLS: a client without a certificate signed by the test CA is refused
    /// (`--tls-auth-clients yes`).
    ClientCert,
}

/// The TLS side of a server: its files (copied into the server's dir, so they outlive the
/// [`TestCerts`] they came from), the mode, and the ACL user clients log in as.
#[derive(Debug)]
struct Tls {
    mode: TlsMode,
    password: String,
}

/// The ACL user of a TLS test server (the `default` user is disabled there).
pub const REDIS_TLS_USER: &str = "locksmith";

impl RedisServer {
    /// A server without persistence (`--save '' --appendonly no`), like most lock deployments.
    ///
    /// # Panics
    /// When `redis-server` is missing (the message names the setup command) or does not listen.
    pub fn start() -> Self {
        Self::start_with(false)
    }

    /// A server with `--appendonly yes --appendfsync always`: acknowledged writes survive a crash.
    ///
    /// # Panics
    /// As [`RedisServer::start`].
    pub fn start_durable() -> Self {
        Self::start_with(true)
    }

    /// A TLS-only server (`--port 0 --tls-port P`): its certificate is [`TestCerts::server_cert`]
    /// (for `localhost` and `127.0.0.1`), it trusts [`TestCerts::ca`] for client certificates,
    /// and with [`TlsMode::ClientCert`] it demands one. The `default` user is disabled; clients
    /// log in as [`REDIS_TLS_USER`] with [`RedisServer::password`] (random per server, so a test
    /// can search messages for it).
    ///
    /// # Panics
    /// As [`RedisServer::start`], and when the certificates cannot be copied.
    pub fn start_tls(certs: &TestCerts, mode: TlsMode) -> Self {
        Self::start_tls_with_password(certs, mode, &random_password())
    }

    /// As [`RedisServer::start_tls`], with the ACL user's password given: for a set of servers
    /// that one URL with one password reaches (Redlock).
    ///
    /// # Panics
    /// As [`RedisServer::start_tls`].
    pub fn start_tls_with_password(certs: &TestCerts, mode: TlsMode, password: &str) -> Self {
        let dir = tempfile::Builder::new().prefix("locksmith-redis-tls-").tempdir().expect("create a temp dir");
        for (from, to) in
            [(certs.ca(), "ca.pem"), (certs.server_cert(), "server.pem"), (certs.server_key(), "server.key")]
        {
            std::fs::copy(&from, dir.path().join(to)).unwrap_or_else(|e| panic!("copy {}: {e}", from.display()));
        }
        let tls = Tls { mode, password: password.to_string() };
        let mut s = Self { port: free_port(), dir, durable: false, tls: Some(tls), process: None };
        s.restart();
        s
    }

    fn start_with(durable: bool) -> Self {
        let dir = tempfile::Builder::new().prefix("locksmith-redis-").tempdir().expect("create a temp dir");
        let mut s = Self { port: free_port(), dir, durable, tls: None, process: None };
        s.restart();
        s
    }

    /// `redis://127.0.0.1:PORT` (a TLS server speaks only TLS on this port: see
    /// [`RedisServer::tls_url`]).
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// A TLS server's URL with its user, password and CA:
    /// `rediss://locksmith:PW@localhost:PORT?ca=DIR/ca.pem`.
    ///
    /// # Panics
    /// On a server started without TLS.
    pub fn tls_url(&self) -> String {
        format!("rediss://{REDIS_TLS_USER}:{}@localhost:{}?ca={}", self.password(), self.port, self.ca().display())
    }

    /// The ACL user's password of a TLS server.
    ///
    /// # Panics
    /// On a server started without TLS.
    pub fn password(&self) -> &str {
        &self.tls.as_ref().unwrap_or_else(|| panic!("not a TLS server")).password
    }

    /// The CA a TLS server's certificate is signed by (a copy of [`TestCerts::ca`]).
    pub fn ca(&self) -> PathBuf {
        self.dir.path().join("ca.pem")
    }

    /// `127.0.0.1:PORT`
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// The port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The server's PID (0 when stopped).
    pub fn pid(&self) -> i32 {
        self.process.as_ref().map(ChildProcess::pid).unwrap_or(0)
    }

    /// `kill -9`; the data dir stays (it holds data only for a durable server).
    pub fn kill9(&mut self) {
        if let Some(mut p) = self.process.take() {
            p.kill9();
        }
    }

    /// SIGSTOP: the server stops answering but keeps its connections.
    pub fn pause(&self) {
        if let Some(p) = &self.process {
            p.signal(Signal::SIGSTOP);
        }
    }

    /// SIGCONT after [`RedisServer::pause`].
    pub fn resume(&self) {
        if let Some(p) = &self.process {
            p.signal(Signal::SIGCONT);
        }
    }

    /// (Re)starts on the same port and dir.
    ///
    /// # Panics
    /// As [`RedisServer::start`].
    pub fn restart(&mut self) {
        self.kill9();
        let bin = find_redis_server().unwrap_or_else(|| panic!("redis-server is not installed; run: {REDIS_SETUP}"));
        let mut cmd = Command::new(bin);
        // A TLS server listens on `--tls-port` only: no plain port at all.
        let plain_port = if self.tls.is_some() { 0 } else { self.port };
        cmd.arg("--port")
            .arg(plain_port.to_string())
            .arg("--bind")
            .arg("127.0.0.1")
            .arg("--dir")
            .arg(self.dir.path())
            .arg("--save")
            .arg("")
            .arg("--daemonize")
            .arg("no")
            .arg("--protected-mode")
            .arg("no")
            .stdin(Stdio::null())
            .stdout(Stdio::null());
        if self.durable {
            cmd.args(["--appendonly", "yes", "--appendfsync", "always"]);
        } else {
            cmd.args(["--appendonly", "no"]);
        }
        if let Some(tls) = &self.tls {
            tls_args(&mut cmd, self.port, self.dir.path(), tls);
        }
        self.process = Some(spawn_listening("redis-server", &mut cmd, self.port));
    }
}

/// Turns the plain port off and the TLS port on, disables `default` and adds the ACL user.
fn tls_args(cmd: &mut Command, port: u16, dir: &Path, tls: &Tls) {
    let auth_clients = match tls.mode {
        TlsMode::ServerOnly => "no",
        TlsMode::ClientCert => "yes",
    };
    cmd.args(["--tls-port", &port.to_string()])
        .arg("--tls-cert-file")
        .arg(dir.join("server.pem"))
        .arg("--tls-key-file")
        .arg(dir.join("server.key"))
        .arg("--tls-ca-cert-file")
        .arg(dir.join("ca.pem"))
        .args(["--tls-auth-clients", auth_clients])
        .args(["--user", "default", "off"])
        // `&*`: Redis 7 gives new users no pub/sub channels, and the driver's waiters subscribe
        // and its release scripts publish.
        .args(["--user", REDIS_TLS_USER, "on", &format!(">{}", tls.password), "~*", "&*", "+@all"]);
}

/// 32 hex digits from the standard library's random hash keys: a password no message of the
/// code under test can contain by accident.
pub fn random_password() -> String {
    use std::hash::{BuildHasher, Hasher};
    let half = || {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos()));
        h.finish()
    };
    format!("{:016x}{:016x}", half(), half())
}

fn find_redis_server() -> Option<PathBuf> {
    ["/usr/bin/redis-server", "/usr/local/bin/redis-server"].into_iter().map(PathBuf::from).find(|p| p.exists())
}

/// A Python with redis-py, in the venv `scripts/setup.sh` creates at `<workspace>/.venv-interop`.
///
/// # Panics
/// When the venv is missing; the message names the setup command.
pub fn interop_python() -> PathBuf {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let py = root.join(".venv-interop/bin/python");
    assert!(
        py.exists(),
        "{} is missing; run: bash scripts/setup.sh (creates the interop venv with redis-py)",
        py.display()
    );
    py
}
