//! Processes the harness starts (workers, the native server): each one a
//! [`ChildProcess`](locksmith_process::ChildProcess) that ends it by PID when dropped, so an
//! error, a panic or Ctrl-C in the harness leaves nothing running.

use std::net::SocketAddr;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use locksmith_cli_common::DurabilityArg;
use locksmith_process::ChildProcess;
use nix::sys::signal::Signal;

/// Starts `cmd` in a process group of its own, so a Ctrl-C at the terminal reaches only the
/// harness, which then stops its children in order and still reports.
///
/// # Errors
/// The program cannot be started.
pub(crate) fn spawn(name: &str, cmd: &mut Command) -> std::io::Result<ChildProcess> {
    ChildProcess::spawn(name, cmd.process_group(0))
}

/// SIGTERM, then up to `grace` for the process to exit, then `kill -9`.
///
/// # Cancel safety
/// Cancel safe: dropping the future leaves the process to its owner, which kills it on drop.
pub(crate) async fn stop(p: &mut ChildProcess, grace: Duration) {
    p.signal(Signal::SIGCONT);
    p.signal(Signal::SIGTERM);
    let until = tokio::time::Instant::now() + grace;
    while p.try_wait().is_none() {
        if tokio::time::Instant::now() >= until {
            p.kill9();
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A native server started by the harness: `<this exe> serve` on a loopback port and a data dir
/// that survive restarts.
#[derive(Debug)]
pub(crate) struct Server {
    exe: PathBuf,
    addr: SocketAddr,
    data: PathBuf,
    log: PathBuf,
    durability: &'static str,
    proc: Option<ChildProcess>,
}

impl Server {
    /// Starts `exe serve --listen <addr> --data-dir <dir>/data --durability <d>` and waits
    /// until it listens.
    ///
    /// # Cancel safety
    /// Cancel safe: a server already spawned is killed when the future is dropped.
    ///
    /// # Errors
    /// It could not be started or did not listen within 20 s.
    pub(crate) async fn start(exe: &Path, dir: &Path, durability: DurabilityArg) -> std::io::Result<Self> {
        let addr = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?;
        let durability = durability.as_str();
        let (data, log) = (dir.join("data"), dir.join("server.log"));
        let mut s = Self { exe: exe.to_path_buf(), addr, data, log, durability, proc: None };
        s.restart().await?;
        Ok(s)
    }

    /// `locksmith://127.0.0.1:<port>`
    pub(crate) fn url(&self) -> String {
        format!("locksmith://{}", self.addr)
    }

    /// The running process, for signals.
    pub(crate) fn proc(&self) -> Option<&ChildProcess> {
        self.proc.as_ref()
    }

    /// `kill -9`; the data dir stays.
    pub(crate) fn kill9(&mut self) {
        if let Some(mut p) = self.proc.take() {
            p.kill9();
        }
    }

    /// (Re)starts on the same port and data dir and waits until it listens.
    ///
    /// # Cancel safety
    /// Cancel safe, as [`Server::start`].
    ///
    /// # Errors
    /// As [`Server::start`].
    pub(crate) async fn restart(&mut self) -> std::io::Result<()> {
        self.kill9();
        let log = std::fs::OpenOptions::new().create(true).append(true).open(&self.log)?;
        let mut cmd = Command::new(&self.exe);
        cmd.arg("serve")
            .arg("--listen")
            .arg(self.addr.to_string())
            .arg("--data-dir")
            .arg(&self.data)
            .args(["--durability", self.durability])
            .env("LOCKSMITH_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log);
        self.proc = Some(spawn("locksmith serve", &mut cmd)?);
        let until = tokio::time::Instant::now() + Duration::from_secs(20);
        loop {
            if tokio::net::TcpStream::connect(self.addr).await.is_ok() {
                return Ok(());
            }
            if let Some(status) = self.proc.as_mut().and_then(ChildProcess::try_wait) {
                self.proc = None;
                return Err(std::io::Error::other(format!(
                    "the native server exited ({status}); see {}",
                    self.log.display()
                )));
            }
            if tokio::time::Instant::now() >= until {
                self.kill9();
                return Err(std::io::Error::other(format!(
                    "the native server did not listen on {} within 20 s",
                    self.addr
                )));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}
