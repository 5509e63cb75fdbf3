//! Redis servers (Debian's `redis-server`) as real processes.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use nix::sys::signal::Signal;

use crate::port::{free_port, wait_listening};
use crate::process::{spawn, ChildProcess};

/// How to get `redis-server` when it is missing.
pub const REDIS_SETUP: &str = "bash scripts/setup.sh (installs Debian's redis-server)";

/// A `redis-server` on 127.0.0.1 with its own port and temp dir; killed by PID on drop.
#[derive(Debug)]
pub struct RedisServer {
    port: u16,
    dir: tempfile::TempDir,
    durable: bool,
    process: Option<ChildProcess>,
}

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

    fn start_with(durable: bool) -> Self {
        let dir = tempfile::Builder::new().prefix("locksmith-redis-").tempdir().expect("create a temp dir");
        let mut s = Self { port: free_port(), dir, durable, process: None };
        s.restart();
        s
    }

    /// `redis://127.0.0.1:PORT`
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
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
        cmd.arg("--port")
            .arg(self.port.to_string())
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
        let p = spawn("redis-server", &mut cmd);
        assert!(
            wait_listening(self.port, Duration::from_secs(20)),
            "redis-server did not listen on 127.0.0.1:{} within 20 s",
            self.port
        );
        self.process = Some(p);
    }
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
