//! The runner's side: start the guardian, put the command in its group, stand it down.

use std::io::{self, PipeWriter, Read};
use std::os::fd::AsFd;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, ExitStatus, Stdio};

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::unistd::{getpid, getppid};

use super::watch::READY;

/// How long a guardian has to say that it watches (milliseconds): it only has to start.
const READY_WITHIN_MS: u16 = 5_000;

/// A running guardian, seen from its runner: while this value lives (and the runner with it),
/// the guardian's process group lives; when it is dropped, or the runner dies, the guardian
/// SIGKILLs the group.
///
/// ```no_run
/// use std::process::Command;
/// use locksmith_process::guardian::Guardian;
///
/// // The guardian is a program whose `main` is `locksmith_process::guardian::watch`.
/// let mut guardian_cmd = Command::new("/proc/self/exe");
/// guardian_cmd.args(["run-guardian", "--runner", &std::process::id().to_string()]);
/// let guardian = Guardian::start(guardian_cmd)?;
///
/// let mut job = Command::new("sh");
/// job.args(["-c", "worker & worker; wait"]);
/// guardian.join(&mut job);
/// let status = job.spawn()?.wait()?;
/// // Ends whatever the job left in the group, and the guardian.
/// guardian.stand_down()?;
/// # let _ = status;
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug)]
pub struct Guardian {
    child: Child,
    pid: i32,
    /// The only write end of the guardian's pipe; closing it is the order to end the group.
    alarm: Option<PipeWriter>,
    status: Option<ExitStatus>,
}

impl Guardian {
    /// Starts `cmd` (a program that runs [`watch`](super::watch) with this process's PID as
    /// the runner) as the leader of a new process group, with the group's signals ignored from
    /// before its `exec`, and waits until it says it watches. Its stdin and stdout are taken
    /// for the pipes; its stderr is left as `cmd` has it.
    ///
    /// # Errors
    /// The pipe or the process cannot be created (e.g. too many open files), or the guardian
    /// exited or stayed silent instead of saying it watches; no guardian is left running.
    pub fn start(mut cmd: Command) -> io::Result<Self> {
        let (watched, alarm) = io::pipe()?;
        cmd.stdin(watched).stdout(Stdio::piped()).process_group(0);
        // SAFETY: `ignore_group_signals` only calls sigaction, async-signal-safe; it allocates
        // nothing and touches no lock between fork and exec.
        unsafe {
            cmd.pre_exec(super::ignore_group_signals);
        }
        let spawned = cmd.spawn();
        // The command keeps our copy of the read end until dropped: only the guardian keeps one.
        drop(cmd);
        let mut child = spawned?;
        let pid = match i32::try_from(child.id()) {
            Ok(pid) => pid,
            Err(e) => {
                // Not expected on Linux (PIDs fit in an i32); it must not outlive us.
                let _ = child.kill();
                let _ = child.wait();
                return Err(io::Error::other(format!("the guardian's PID is out of range: {e}")));
            }
        };
        let mut guardian = Self { child, pid, alarm: Some(alarm), status: None };
        guardian.await_ready()?;
        Ok(guardian)
    }

    /// The guardian's PID, which is also its process group's id.
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// Makes `cmd` start in the guardian's process group, and makes the child check, once it
    /// is in the group, that this process (its runner) is still its parent: a child forked as
    /// the runner dies must not run on unwatched.
    pub fn join(&self, cmd: &mut Command) {
        let runner = getpid();
        cmd.process_group(self.pid);
        // SAFETY: the closure only calls getppid, async-signal-safe, and builds an error value
        // from a constant without allocating.
        unsafe {
            cmd.pre_exec(
                move || {
                    if getppid() == runner {
                        Ok(())
                    } else {
                        Err(io::Error::from(io::ErrorKind::BrokenPipe))
                    }
                },
            );
        }
    }

    /// Ends the guardian's group (SIGKILL to whatever is left in it, and to the guardian) and
    /// waits for the guardian to exit. Call it once the command's processes were ended the
    /// gentle way; dropping the value does the same.
    ///
    /// # Errors
    /// Waiting for the guardian failed.
    pub fn stand_down(mut self) -> io::Result<ExitStatus> {
        self.end()
    }

    fn end(&mut self) -> io::Result<ExitStatus> {
        self.alarm = None;
        if let Some(s) = self.status {
            return Ok(s);
        }
        let s = self.child.wait()?;
        self.status = Some(s);
        Ok(s)
    }

    fn await_ready(&mut self) -> io::Result<()> {
        let Some(mut out) = self.child.stdout.take() else {
            return Err(self.failed("its stdout was not piped".into()));
        };
        let mut fds = [PollFd::new(out.as_fd(), PollFlags::POLLIN)];
        // A signal to the runner (forwarded later, not lost) interrupts the wait: wait again.
        let polled = loop {
            match poll(&mut fds, PollTimeout::from(READY_WITHIN_MS)) {
                Err(nix::errno::Errno::EINTR) => continue,
                other => break other,
            }
        };
        let mut byte = [0u8; 1];
        match polled {
            Ok(0) => Err(self.failed("it did not say it watches within 5 s".into())),
            Ok(_) => match out.read(&mut byte) {
                Ok(1) if byte[0] == READY => Ok(()),
                Ok(_) => {
                    // It closed its stdout: it exited (refused, or not a guardian at all).
                    let why = match self.end() {
                        Ok(status) => format!("the guardian exited ({status}) instead of watching"),
                        Err(e) => format!("the guardian exited instead of watching ({e})"),
                    };
                    Err(io::Error::other(why))
                }
                Err(e) => Err(self.failed(format!("reading its readiness: {e}"))),
            },
            Err(e) => Err(self.failed(format!("waiting for its readiness: {e}"))),
        }
    }

    /// Ends a guardian that failed to start properly, and the error saying why.
    fn failed(&mut self, why: String) -> io::Error {
        let _ = self.child.kill();
        let _ = self.end();
        io::Error::other(format!("the guardian did not start: {why}"))
    }
}

impl Drop for Guardian {
    fn drop(&mut self) {
        let _ = self.end();
    }
}
