//! A child process ended by PID on drop.

use std::process::{Child, Command, ExitStatus};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

/// A child process that is killed (SIGKILL, by PID) and reaped when dropped.
#[derive(Debug)]
pub struct ChildProcess {
    child: Option<Child>,
    name: String,
}

impl ChildProcess {
    /// Spawns `cmd`.
    ///
    /// # Panics
    /// When the program cannot be started; the message names it.
    pub fn spawn(name: &str, cmd: &mut Command) -> Self {
        let child = cmd.spawn().unwrap_or_else(|e| panic!("cannot start {name} ({cmd:?}): {e}"));
        Self { child: Some(child), name: name.to_string() }
    }

    /// The process id.
    pub fn pid(&self) -> i32 {
        self.child.as_ref().map(|c| c.id() as i32).unwrap_or(0)
    }

    /// Sends `sig` to the process.
    pub fn signal(&self, sig: Signal) {
        if self.child.is_some() {
            let _ = kill(Pid::from_raw(self.pid()), sig);
        }
    }

    /// `kill -9` and reap.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = kill(Pid::from_raw(c.id() as i32), Signal::SIGKILL);
            let _ = c.wait();
        }
    }

    /// Waits up to `timeout` for the process to exit on its own.
    pub fn wait_timeout(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let until = Instant::now() + timeout;
        loop {
            let c = self.child.as_mut()?;
            if let Ok(Some(status)) = c.try_wait() {
                self.child = None;
                return Some(status);
            }
            if Instant::now() >= until {
                return None;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Takes the child's stdout/stderr handles, etc.
    pub fn inner(&mut self) -> Option<&mut Child> {
        self.child.as_mut()
    }

    /// The name given at spawn.
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl Drop for ChildProcess {
    fn drop(&mut self) {
        if let Some(c) = self.child.as_ref() {
            // Resume first in case a test left it stopped, so the kill is delivered at once.
            let _ = kill(Pid::from_raw(c.id() as i32), Signal::SIGCONT);
        }
        self.kill9();
    }
}

/// A shell that kills `pid` (SIGKILL) and removes `dir` once the current (test) process is gone:
/// a server shared by a whole test binary lives in a static and is never dropped.
pub(crate) fn watchdog(name: &str, pid: i32, dir: &std::path::Path) -> ChildProcess {
    let mut wd = Command::new("sh");
    wd.arg("-c")
        .arg(format!(
            "while kill -0 {} 2>/dev/null; do sleep 1; done; kill -9 {pid} 2>/dev/null; sleep 1; rm -rf '{}'",
            std::process::id(),
            dir.display()
        ))
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    ChildProcess::spawn(&format!("{name} watchdog"), &mut wd)
}

/// `(uid, gid)` of a system account, e.g. `postgres`, via `id`.
pub(crate) fn account(user: &str) -> Option<(u32, u32)> {
    let id = |flag: &str| -> Option<u32> {
        let out = Command::new("id").arg(flag).arg(user).output().ok()?;
        String::from_utf8_lossy(&out.stdout).trim().parse().ok()
    };
    Some((id("-u")?, id("-g")?))
}

/// Runs `cmd` to completion; panics with its output when it fails.
pub(crate) fn run_ok(what: &str, cmd: &mut Command) {
    let out = cmd.output().unwrap_or_else(|e| panic!("cannot run {what} ({cmd:?}): {e}"));
    assert!(
        out.status.success(),
        "{what} failed ({}): {}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
