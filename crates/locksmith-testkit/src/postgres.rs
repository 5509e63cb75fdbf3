//! PostgreSQL 15 servers (Debian's `postgresql`) as real processes.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::port::free_port;
use crate::process::{account, run_ok, spawn, watchdog, ChildProcess};

/// How to get PostgreSQL when it is missing.
pub const POSTGRES_SETUP: &str = "bash scripts/setup.sh (installs Debian's postgresql)";

const BIN: &str = "/usr/lib/postgresql/15/bin";

/// A PostgreSQL cluster on 127.0.0.1 with its own port and temp dir, run as the `postgres`
/// account (PostgreSQL refuses root), trust authentication, `fsync=off`; killed by PID on drop
/// (and by a watchdog when the test process ends, for servers shared through a static).
#[derive(Debug)]
pub struct PostgresServer {
    port: u16,
    dir: tempfile::TempDir,
    process: Option<ChildProcess>,
    watchdog: Option<ChildProcess>,
}

impl PostgresServer {
    /// Creates a cluster (`initdb`) and starts it; waits until `pg_isready` answers.
    ///
    /// # Panics
    /// When PostgreSQL 15 or the `postgres` account is missing (the message names the setup
    /// command), or the server is not ready within 30 s.
    pub fn start() -> Self {
        Self::start_with(None)
    }

    /// [`PostgresServer::start`] serving TLS (`ssl = on`) with the server certificate of
    /// `certs`, and a role `app` with the password [`PostgresServer::APP_PASSWORD`] that must
    /// log in with it (scram-sha-256); `postgres` keeps trust authentication.
    ///
    /// # Panics
    /// As [`PostgresServer::start`].
    pub fn start_tls(certs: &crate::TestCerts) -> Self {
        Self::start_with(Some(certs))
    }

    /// The password of the `app` role of [`PostgresServer::start_tls`].
    pub const APP_PASSWORD: &'static str = "app-s3cret";

    fn start_with(certs: Option<&crate::TestCerts>) -> Self {
        let bin = |b: &str| PathBuf::from(BIN).join(b);
        assert!(bin("postgres").exists(), "{} is missing; run: {POSTGRES_SETUP}", bin("postgres").display());
        let (uid, gid) = account("postgres").unwrap_or_else(|| panic!("no postgres account; run: {POSTGRES_SETUP}"));
        let dir = tempfile::Builder::new().prefix("locksmith-pg-").tempdir().expect("create a temp dir");
        run_ok("chown", Command::new("chown").arg("-R").arg(format!("{uid}:{gid}")).arg(dir.path()));
        let data = dir.path().join("data");
        run_ok(
            "initdb",
            Command::new(bin("initdb"))
                .arg("-D")
                .arg(&data)
                .args(["-U", "postgres", "-A", "trust", "--no-sync", "-E", "UTF8", "--locale=C"])
                .current_dir(dir.path())
                .uid(uid)
                .gid(gid),
        );
        let mut conf = format!(
            "\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = '{}'\n\
             max_connections = 400\nfsync = off\nsynchronous_commit = off\nfull_page_writes = off\n",
            dir.path().display()
        );
        if let Some(certs) = certs {
            // PostgreSQL reads them as its own user and refuses a key others can read.
            let (cert, key) = (dir.path().join("server.pem"), dir.path().join("server.key"));
            std::fs::copy(certs.server_cert(), &cert).expect("copy the server certificate");
            std::fs::copy(certs.server_key(), &key).expect("copy the server key");
            std::fs::set_permissions(&key, std::os::unix::fs::PermissionsExt::from_mode(0o600)).expect("chmod the key");
            run_ok("chown", Command::new("chown").arg(format!("{uid}:{gid}")).arg(&cert).arg(&key));
            conf.push_str(&format!(
                "ssl = on\nssl_cert_file = '{}'\nssl_key_file = '{}'\npassword_encryption = 'scram-sha-256'\n",
                cert.display(),
                key.display()
            ));
            // First match wins: the app role must use its password; everyone else stays trusted.
            let hba_path = data.join("pg_hba.conf");
            let hba = std::fs::read_to_string(&hba_path).expect("read pg_hba.conf");
            std::fs::write(&hba_path, format!("host all app 127.0.0.1/32 scram-sha-256\n{hba}"))
                .expect("write pg_hba.conf");
        }
        let conf_path = data.join("postgresql.conf");
        let mut text = std::fs::read_to_string(&conf_path).expect("read postgresql.conf");
        text.push_str(&conf);
        std::fs::write(&conf_path, text).expect("write postgresql.conf");
        // The port is chosen right before the server binds it, and a server that could not bind
        // (another process took the port meanwhile: outgoing connections draw from the same
        // ephemeral range) is started again on a new one.
        let mut attempt = 0;
        let (port, p, wd) = loop {
            attempt += 1;
            let port = free_port();
            let mut cmd = Command::new(bin("postgres"));
            cmd.arg("-D").arg(&data).arg("-p").arg(port.to_string()).current_dir(dir.path()).uid(uid).gid(gid);
            cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null());
            let mut p = spawn("postgres", &mut cmd);
            let mut wd = watchdog("postgres", p.pid(), dir.path());
            if wait_ready(port, &mut p) {
                break (port, p, wd);
            }
            assert!(attempt < 3, "postgres exited at start three times (last port {port})");
            p.kill9();
            wd.kill9();
        };
        let s = Self { port, dir, process: Some(p), watchdog: Some(wd) };
        if certs.is_some() {
            let psql = ["/usr/lib/postgresql/15/bin/psql", "/usr/bin/psql"]
                .iter()
                .map(PathBuf::from)
                .find(|p| p.exists())
                .unwrap_or_else(|| panic!("psql is missing; run: {POSTGRES_SETUP}"));
            run_ok(
                "create the app role",
                Command::new(psql)
                    .args(["-h", "127.0.0.1", "-p", &s.port.to_string(), "-U", "postgres", "-d", "postgres", "-c"])
                    .arg(format!("CREATE ROLE app LOGIN SUPERUSER PASSWORD '{}'", Self::APP_PASSWORD)),
            );
        }
        s
    }

    /// `postgres://postgres@127.0.0.1:PORT/postgres`
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// The port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The postmaster's PID (0 when stopped).
    pub fn pid(&self) -> i32 {
        self.process.as_ref().map(ChildProcess::pid).unwrap_or(0)
    }

    /// The temp dir (data in `data/`, the Unix socket in the dir itself).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for PostgresServer {
    fn drop(&mut self) {
        if let Some(mut p) = self.process.take() {
            p.kill9();
        }
        if let Some(mut w) = self.watchdog.take() {
            w.kill9();
        }
    }
}

/// Waits until the server answers; `false` if it exited first.
fn wait_ready(port: u16, process: &mut ChildProcess) -> bool {
    let until = Instant::now() + Duration::from_secs(60);
    loop {
        if process.try_wait().is_some() {
            return false;
        }
        let ok = Command::new(Path::new(BIN).join("pg_isready"))
            .args(["-h", "127.0.0.1", "-p", &port.to_string(), "-U", "postgres", "-t", "1"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if ok {
            return true;
        }
        assert!(Instant::now() < until, "postgres did not get ready on 127.0.0.1:{port} within 60 s");
        std::thread::sleep(Duration::from_millis(50));
    }
}
