//! A child process owned by its parent: [`ChildProcess`] spawns it, signals it by PID, and kills
//! and reaps it when dropped, so an error, a panic or a Ctrl-C in the parent leaves nothing
//! running.
//!
//! It is the one owner of child processes in the workspace: the `locksmith chaos` harness
//! (`locksmith-chaos`: its workers and its native server) and the test helpers
//! (`locksmith-testkit`: real servers, `locksmith run` processes) both use it. It lives in a
//! crate of its own because the harness ships inside the `locksmith` binary and must not depend
//! on the test helpers (they panic by design and pull in the conformance suite).
//!
//! [`guardian`]: a process group that dies with its runner (`locksmith run`'s command, when
//! `locksmith run` is killed with SIGKILL).
#![warn(missing_docs, missing_debug_implementations, rust_2018_idioms, unreachable_pub)]

pub mod guardian;

use std::io;
use std::process::{Child, ChildStderr, ChildStdin, ChildStdout, Command, ExitStatus};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

/// A child process that is killed (SIGCONT, then SIGKILL, by PID) and reaped when dropped.
///
/// The PID is remembered from the start: after the process was reaped no signal is sent to it
/// any more, because the kernel may have given the number to another process.
///
/// ```no_run
/// use std::process::Command;
/// use std::time::Duration;
/// use locksmith_process::ChildProcess;
///
/// let mut cmd = Command::new("sleep");
/// cmd.arg("60");
/// let mut p = ChildProcess::spawn("sleep", &mut cmd)?;
/// p.signal(nix::sys::signal::Signal::SIGTERM);
/// let status = p.wait_timeout(Duration::from_secs(5));
/// assert!(status.is_some());
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug)]
pub struct ChildProcess {
    child: Child,
    pid: i32,
    name: String,
    /// Set once the process was reaped.
    status: Option<ExitStatus>,
}

impl ChildProcess {
    /// Spawns `cmd`; `name` is what [`name`](Self::name) and `Debug` call it. Whatever `cmd` was
    /// set up with (stdio, environment, process group) applies.
    ///
    /// # Errors
    /// The program cannot be started: the error of [`Command::spawn`], as it is (callers word
    /// their own messages).
    pub fn spawn(name: &str, cmd: &mut Command) -> io::Result<Self> {
        let child = cmd.spawn()?;
        let pid = match i32::try_from(child.id()) {
            Ok(pid) => pid,
            Err(e) => {
                // Not expected on Linux (PIDs fit in an i32); the process must not outlive us.
                let mut orphan = child;
                let _ = orphan.kill();
                let _ = orphan.wait();
                return Err(io::Error::other(format!("{name}: PID out of range: {e}")));
            }
        };
        Ok(Self { child, pid, name: name.to_string(), status: None })
    }

    /// The process id (also after the process has ended).
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// The name given at spawn.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Sends `sig` to the process; nothing once it has been reaped.
    pub fn signal(&self, sig: Signal) {
        if self.status.is_none() {
            let _ = kill(Pid::from_raw(self.pid), sig);
        }
    }

    /// The exit status if the process has ended (it is then reaped); `None` while it runs.
    /// Does not wait.
    pub fn try_wait(&mut self) -> Option<ExitStatus> {
        if self.status.is_none() {
            self.status = self.child.try_wait().ok().flatten();
        }
        self.status
    }

    /// Waits up to `timeout` for the process to exit on its own, polling every 10 ms (it blocks
    /// the thread). `None` if it still runs.
    pub fn wait_timeout(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let until = Instant::now() + timeout;
        loop {
            if let Some(status) = self.try_wait() {
                return Some(status);
            }
            if Instant::now() >= until {
                return None;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// `kill -9` and reap; nothing if it was already reaped.
    pub fn kill9(&mut self) {
        if self.status.is_some() {
            return;
        }
        // A stopped process dies of SIGKILL too, but resuming it first makes that immediate.
        let _ = kill(Pid::from_raw(self.pid), Signal::SIGCONT);
        let _ = kill(Pid::from_raw(self.pid), Signal::SIGKILL);
        self.status = self.child.wait().ok();
    }

    /// The child's stdin, if it was piped and not taken yet.
    pub fn take_stdin(&mut self) -> Option<ChildStdin> {
        self.child.stdin.take()
    }

    /// The child's stdout, if it was piped and not taken yet (also after the process ended).
    pub fn take_stdout(&mut self) -> Option<ChildStdout> {
        self.child.stdout.take()
    }

    /// The child's stderr, if it was piped and not taken yet (also after the process ended).
    pub fn take_stderr(&mut self) -> Option<ChildStderr> {
        self.child.stderr.take()
    }
}

impl Drop for ChildProcess {
    fn drop(&mut self) {
        self.kill9();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A dropped process is gone: killed and reaped, not left as a zombie.
    #[test]
    fn drop_kills_and_reaps() {
        let p = ChildProcess::spawn("sleep", Command::new("sleep").arg("60")).unwrap();
        let pid = p.pid();
        drop(p);
        assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists(), "process {pid} still exists");
    }

    /// A stopped process is killed at once, and its status says SIGKILL.
    #[test]
    fn kill9_ends_a_stopped_process() {
        use std::os::unix::process::ExitStatusExt;
        let mut p = ChildProcess::spawn("sleep", Command::new("sleep").arg("60")).unwrap();
        p.signal(Signal::SIGSTOP);
        p.kill9();
        assert_eq!(p.try_wait().and_then(|s| s.signal()), Some(Signal::SIGKILL as i32));
    }

    /// The exit status of a process that ended on its own, and its output after it ended.
    #[test]
    fn status_and_output_after_exit() {
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "echo hi; exit 3"]).stdout(std::process::Stdio::piped());
        let mut p = ChildProcess::spawn("sh", &mut cmd).unwrap();
        assert_eq!(p.wait_timeout(Duration::from_secs(5)).and_then(|s| s.code()), Some(3));
        let mut out = String::new();
        std::io::Read::read_to_string(&mut p.take_stdout().unwrap(), &mut out).unwrap();
        assert_eq!(out, "hi\n");
    }

    /// A program that does not exist is the OS's error, as `Command::spawn` gives it.
    #[test]
    fn missing_program_is_an_error() {
        let e = ChildProcess::spawn("nothing", &mut Command::new("/nonexistent/program")).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound, "{e}");
    }
}
