//! MariaDB 10.11 servers (Debian's `mariadb-server`) as real processes.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::port::free_port;
use crate::process::{account, remove_when_gone, run_ok, spawn, watchdog, ChildProcess};

/// How to get MariaDB when it is missing.
pub const MYSQL_SETUP: &str = "bash scripts/setup.sh (installs Debian's mariadb-server)";

/// A MariaDB server on 127.0.0.1 with its own port and temp dir (`--no-defaults`), with a
/// database `locksmith` and a passwordless user `locksmith`; killed by PID on drop (and by a
/// watchdog when the test process ends, for servers shared through a static).
#[derive(Debug)]
pub struct MySqlServer {
    port: u16,
    dir: tempfile::TempDir,
    process: Option<ChildProcess>,
    watchdog: Option<ChildProcess>,
}

impl MySqlServer {
    /// Initialises a data dir, starts `mariadbd`, creates the database and the user.
    ///
    /// # Panics
    /// When MariaDB or the `mysql` account is missing (the message names the setup command), or
    /// the server is not ready within 30 s.
    pub fn start() -> Self {
        Self::start_with(None)
    }

    /// [`MySqlServer::start`] serving TLS with the server certificate of `certs`, and a user
    /// `app` with the password [`MySqlServer::APP_PASSWORD`] (all rights on the database).
    ///
    /// # Panics
    /// As [`MySqlServer::start`].
    pub fn start_tls(certs: &crate::TestCerts) -> Self {
        Self::start_with(Some(certs))
    }

    /// The password of the `app` user of [`MySqlServer::start_tls`].
    pub const APP_PASSWORD: &'static str = "app-s3cret";

    fn start_with(certs: Option<&crate::TestCerts>) -> Self {
        let find = |names: &[&str]| -> Option<PathBuf> { names.iter().map(PathBuf::from).find(|p| p.exists()) };
        let server = find(&["/usr/sbin/mariadbd", "/usr/sbin/mysqld"])
            .unwrap_or_else(|| panic!("mariadbd is not installed; run: {MYSQL_SETUP}"));
        let install = find(&["/usr/bin/mariadb-install-db", "/usr/bin/mysql_install_db"])
            .unwrap_or_else(|| panic!("mariadb-install-db is not installed; run: {MYSQL_SETUP}"));
        let client = find(&["/usr/bin/mariadb", "/usr/bin/mysql"])
            .unwrap_or_else(|| panic!("the mariadb client is not installed; run: {MYSQL_SETUP}"));
        let (uid, gid) = account("mysql").unwrap_or_else(|| panic!("no mysql account; run: {MYSQL_SETUP}"));
        let dir = tempfile::Builder::new().prefix("locksmith-mysql-").tempdir().expect("create a temp dir");
        run_ok("chown", Command::new("chown").arg("-R").arg(format!("{uid}:{gid}")).arg(dir.path()));
        let data = dir.path().join("data");
        let sock = dir.path().join("sock");
        let port = free_port();
        // `cp -a TEMPLATE DEST` copies the directory itself, owner included.
        run_ok(
            "copy the initialised data dir",
            Command::new("cp").arg("-a").arg(template(&install, uid, gid)).arg(&data),
        );
        let mut cmd = Command::new(server);
        cmd.arg("--no-defaults")
            .arg("--user=mysql")
            .arg(format!("--datadir={}", data.display()))
            .arg(format!("--socket={}", sock.display()))
            .arg(format!("--port={port}"))
            .arg(format!("--pid-file={}", dir.path().join("pid").display()))
            .args([
                "--bind-address=127.0.0.1",
                "--skip-name-resolve",
                "--max-connections=500",
                "--innodb-flush-log-at-trx-commit=2",
                "--innodb-buffer-pool-size=64M",
                "--skip-log-bin",
                INNODB_LOG_FILE_SIZE,
            ])
            .current_dir(dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        if let Some(certs) = certs {
            // Read by mariadbd after it switched to the mysql account.
            let files =
                [("server.pem", certs.server_cert()), ("server.key", certs.server_key()), ("ca.pem", certs.ca())];
            for (name, from) in &files {
                std::fs::copy(from, dir.path().join(name)).expect("copy a TLS file");
            }
            run_ok("chown", Command::new("chown").arg("-R").arg(format!("{uid}:{gid}")).arg(dir.path()));
            cmd.arg(format!("--ssl-cert={}", dir.path().join("server.pem").display()))
                .arg(format!("--ssl-key={}", dir.path().join("server.key").display()))
                .arg(format!("--ssl-ca={}", dir.path().join("ca.pem").display()));
        }
        let p = spawn("mariadbd", &mut cmd);
        let wd = watchdog("mariadbd", p.pid(), dir.path());
        let s = Self { port, dir, process: Some(p), watchdog: Some(wd) };
        let until = Instant::now() + Duration::from_secs(30);
        loop {
            let ok = Command::new(&client)
                .arg("--no-defaults")
                .arg(format!("--socket={}", sock.display()))
                .args(["-u", "root", "-e", "SELECT 1"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            if ok {
                break;
            }
            assert!(Instant::now() < until, "mariadbd did not get ready on 127.0.0.1:{port} within 30 s");
            std::thread::sleep(Duration::from_millis(50));
        }
        run_ok(
            "create the locksmith database and user",
            Command::new(&client).arg("--no-defaults").arg(format!("--socket={}", sock.display())).args([
                "-u",
                "root",
                "-e",
                "CREATE DATABASE locksmith; CREATE USER 'locksmith'@'%'; \
                 GRANT ALL ON locksmith.* TO 'locksmith'@'%'; FLUSH PRIVILEGES;",
            ]),
        );
        if certs.is_some() {
            run_ok(
                "create the app user",
                Command::new(&client).arg("--no-defaults").arg(format!("--socket={}", sock.display())).args([
                    "-u",
                    "root",
                    "-e",
                    &format!(
                        "CREATE USER 'app'@'%' IDENTIFIED BY '{}'; GRANT ALL ON locksmith.* TO 'app'@'%'; \
                         GRANT PROCESS, CONNECTION ADMIN ON *.* TO 'app'@'%'; FLUSH PRIVILEGES;",
                        Self::APP_PASSWORD
                    ),
                ]),
            );
        }
        s
    }

    /// `mysql://locksmith@127.0.0.1:PORT/locksmith`
    pub fn url(&self) -> String {
        format!("mysql://locksmith@127.0.0.1:{}/locksmith", self.port)
    }

    /// The port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The server's PID (0 when stopped).
    pub fn pid(&self) -> i32 {
        self.process.as_ref().map(ChildProcess::pid).unwrap_or(0)
    }

    /// The temp dir (data in `data/`, the socket at `sock`).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

/// The redo log's size, the same at bootstrap and at every start (a different size makes the
/// server rebuild it). The default 96 MiB made each server's copy 114 MiB of a CI machine's disk;
/// with 16 MiB it is 34 MiB.
const INNODB_LOG_FILE_SIZE: &str = "--innodb-log-file-size=16M";

/// A data dir initialised once per test process and copied for every server: the bootstrap costs
/// seconds, and Debian's MariaDB 10.11 bootstrap now and then dies of a segmentation fault in
/// `ha_maria::drop_table` (seen in CI), so it is tried up to three times, each in a fresh dir.
fn template(install: &Path, uid: u32, gid: u32) -> &'static Path {
    // (the data dir, its temp dir, the shell that removes it when the test process is gone)
    static TEMPLATE: OnceLock<(PathBuf, tempfile::TempDir, ChildProcess)> = OnceLock::new();
    let (data, _, _) = TEMPLATE.get_or_init(|| {
        let mut failures = Vec::new();
        for _ in 0..3 {
            let dir =
                tempfile::Builder::new().prefix("locksmith-mysql-template-").tempdir().expect("create a temp dir");
            run_ok("chown", Command::new("chown").arg("-R").arg(format!("{uid}:{gid}")).arg(dir.path()));
            let out = Command::new(install)
                .arg("--no-defaults")
                .arg(format!("--datadir={}", dir.path().join("data").display()))
                .args(["--user=mysql", "--auth-root-authentication-method=socket", "--skip-test-db"])
                .arg(INNODB_LOG_FILE_SIZE)
                .current_dir(dir.path())
                .output()
                .unwrap_or_else(|e| panic!("cannot run mariadb-install-db: {e}; run: {MYSQL_SETUP}"));
            if out.status.success() {
                let cleanup = remove_when_gone("mariadb template", dir.path());
                return (dir.path().join("data"), dir, cleanup);
            }
            let output = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
            failures.push(format!("{}: {}", out.status, output.trim()));
        }
        panic!("mariadb-install-db failed three times:\n{}", failures.join("\n\n"))
    });
    data
}

impl Drop for MySqlServer {
    fn drop(&mut self) {
        if let Some(mut p) = self.process.take() {
            p.kill9();
        }
        if let Some(mut w) = self.watchdog.take() {
            w.kill9();
        }
    }
}
