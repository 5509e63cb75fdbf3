//! Processes the harness starts (workers, the native server): each one owned by a [`Proc`] that
//! ends it by PID when dropped, so an error, a panic or Ctrl-C in the harness leaves nothing
//! running.

use std::net::SocketAddr;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

/// A child process, killed (SIGCONT, then SIGKILL, by PID) and reaped on drop.
#[derive(Debug)]
pub struct Proc {
    child: Option<Child>,
    pid: i32,
}

impl Proc {
    /// Starts `cmd` in a process group of its own, so a Ctrl-C at the terminal reaches only the
    /// harness, which then stops its children in order and still reports.
    ///
    /// # Errors
    /// The program cannot be started.
    pub fn spawn(cmd: &mut Command) -> std::io::Result<Self> {
        let child = cmd.process_group(0).spawn()?;
        let pid = i32::try_from(child.id()).map_err(std::io::Error::other)?;
        Ok(Self { child: Some(child), pid })
    }

    /// The process id.
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// Sends `sig` (ignored once the process was reaped).
    pub fn signal(&self, sig: Signal) {
        if self.child.is_some() {
            let _ = kill(Pid::from_raw(self.pid), sig);
        }
    }

    /// The exit status if the process has ended on its own (it is then reaped).
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        let status = self.child.as_mut()?.try_wait().ok()??;
        self.child = None;
        Some(status)
    }

    /// `kill -9` and reap.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            // A stopped process dies of SIGKILL too, but resuming first makes that immediate.
            let _ = kill(Pid::from_raw(self.pid), Signal::SIGCONT);
            let _ = kill(Pid::from_raw(self.pid), Signal::SIGKILL);
            let _ = c.wait();
        }
    }

    /// SIGTERM, then up to `grace` for the process to exit, then `kill -9`.
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the future leaves the process to [`Drop`], which kills it.
    pub async fn stop(&mut self, grace: Duration) {
        self.signal(Signal::SIGCONT);
        self.signal(Signal::SIGTERM);
        let until = tokio::time::Instant::now() + grace;
        while let Some(c) = self.child.as_mut() {
            if !matches!(c.try_wait(), Ok(None)) {
                self.child = None;
                return;
            }
            if tokio::time::Instant::now() >= until {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        self.kill9();
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// A native server started by the harness: `<this exe> serve` on a loopback port and a data dir
/// that survive restarts.
#[derive(Debug)]
pub struct Server {
    exe: PathBuf,
    addr: SocketAddr,
    data: PathBuf,
    log: PathBuf,
    durability: &'static str,
    proc: Option<Proc>,
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
    pub async fn start(exe: &Path, dir: &Path, durability: crate::serve::DurabilityArg) -> std::io::Result<Self> {
        let addr = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?;
        let durability = durability.as_str();
        let (data, log) = (dir.join("data"), dir.join("server.log"));
        let mut s = Self { exe: exe.to_path_buf(), addr, data, log, durability, proc: None };
        s.restart().await?;
        Ok(s)
    }

    /// `locksmith://127.0.0.1:<port>`
    pub fn url(&self) -> String {
        format!("locksmith://{}", self.addr)
    }

    /// The running process, for signals.
    pub fn proc(&self) -> Option<&Proc> {
        self.proc.as_ref()
    }

    /// `kill -9`; the data dir stays.
    pub fn kill9(&mut self) {
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
    pub async fn restart(&mut self) -> std::io::Result<()> {
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
        self.proc = Some(Proc::spawn(&mut cmd)?);
        let until = tokio::time::Instant::now() + Duration::from_secs(20);
        loop {
            if tokio::net::TcpStream::connect(self.addr).await.is_ok() {
                return Ok(());
            }
            let exited = self.proc.as_mut().and_then(|p| p.child.as_mut()).map(|c| c.try_wait());
            if let Some(Ok(Some(status))) = exited {
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
