//! etcd servers (Debian's `etcd-server`) as real processes.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use crate::port::free_port;
use crate::process::{spawn, ChildProcess};

/// A single-node `etcd` on 127.0.0.1 with its own client and peer ports and temp data dir;
/// killed by PID on drop. Heartbeat 50 ms and election timeout 500 ms, so the server's minimum
/// lease TTL is 1 s (the default settings would raise 1 s leases to 2 s).
#[derive(Debug)]
pub struct EtcdServer {
    port: u16,
    peer_port: u16,
    dir: tempfile::TempDir,
    process: Option<ChildProcess>,
}

impl EtcdServer {
    /// Starts a fresh server.
    ///
    /// # Panics
    /// When `/usr/bin/etcd` is missing (the message names the setup command) or the server does
    /// not become healthy within 30 s.
    pub fn start() -> Self {
        let dir = tempfile::Builder::new().prefix("locksmith-etcd-").tempdir().expect("create a temp dir");
        let mut s = Self { port: free_port(), peer_port: free_port(), dir, process: None };
        s.restart();
        s
    }

    /// `etcd://127.0.0.1:PORT`
    pub fn url(&self) -> String {
        format!("etcd://127.0.0.1:{}", self.port)
    }

    /// `127.0.0.1:PORT`, for `etcdctl --endpoints=`.
    pub fn endpoint(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// The server's PID (0 when stopped).
    pub fn pid(&self) -> i32 {
        self.process.as_ref().map(ChildProcess::pid).unwrap_or(0)
    }

    /// `kill -9`; the data dir stays.
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

    /// SIGCONT after [`EtcdServer::pause`].
    pub fn resume(&self) {
        if let Some(p) = &self.process {
            p.signal(Signal::SIGCONT);
        }
    }

    /// An `etcdctl` command for this server (`ETCDCTL_API=3`, `--endpoints=` set).
    pub fn etcdctl(&self) -> Command {
        let mut cmd = Command::new("etcdctl");
        cmd.env("ETCDCTL_API", "3").arg(format!("--endpoints={}", self.endpoint()));
        cmd
    }

    /// (Re)starts on the same ports and data dir and waits until `etcdctl endpoint health`
    /// succeeds.
    ///
    /// # Panics
    /// As [`EtcdServer::start`].
    pub fn restart(&mut self) {
        self.kill9();
        let bin = PathBuf::from("/usr/bin/etcd");
        assert!(bin.exists(), "etcd is not installed; run: bash scripts/setup.sh (installs Debian's etcd-server)");
        let client = format!("http://127.0.0.1:{}", self.port);
        let peer = format!("http://127.0.0.1:{}", self.peer_port);
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join("etcd.log"))
            .expect("open the etcd log");
        let mut cmd = Command::new(bin);
        cmd.arg("--name")
            .arg("n1")
            .arg("--data-dir")
            .arg(self.dir.path().join("data"))
            .arg("--listen-client-urls")
            .arg(&client)
            .arg("--advertise-client-urls")
            .arg(&client)
            .arg("--listen-peer-urls")
            .arg(&peer)
            .arg("--initial-advertise-peer-urls")
            .arg(&peer)
            .arg("--initial-cluster")
            .arg(format!("n1={peer}"))
            .arg("--initial-cluster-state")
            .arg("new")
            .args(["--heartbeat-interval", "50", "--election-timeout", "500"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log);
        let p = spawn("etcd", &mut cmd);
        self.process = Some(p);
        let until = Instant::now() + Duration::from_secs(30);
        loop {
            let ok = self
                .etcdctl()
                .args(["endpoint", "health", "--command-timeout=1s"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .map(|s| s.success())
                .unwrap_or(false);
            if ok {
                return;
            }
            assert!(Instant::now() < until, "etcd did not become healthy on {} within 30 s", self.endpoint());
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}
