//! The guardian's side: check who started it, ignore the group's signals, say it watches, and
//! SIGKILL its own group when the runner's end of the pipe closes.

use std::convert::Infallible;
use std::io::{self, Read, Write};
use std::os::fd::AsFd;
use std::os::unix::fs::FileTypeExt;

use nix::sys::signal::{killpg, Signal};
use nix::unistd::{getpgrp, getpid, getppid, Pid};

/// The byte the guardian writes on stdout once it watches.
pub(super) const READY: u8 = b'R';

/// Why [`watch`] refused to act: it was not started by a runner as
/// [`Guardian::start`](super::Guardian::start) starts it. Acting then could end its caller's
/// process group.
#[derive(Debug)]
pub struct Refusal(String);

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Refusal {}

/// The whole life of a guardian process, started by [`Guardian::start`](super::Guardian::start)
/// in the runner with PID `runner`: it returns only with a refusal (or if it could not signal
/// its group); otherwise the process ends with its group.
///
/// It refuses — and touches nothing — unless it leads its own process group (so the kill can
/// reach no one else's), its parent is `runner`, and its stdin is a pipe. A person starting it
/// by hand gets the refusal.
///
/// ```no_run
/// // The `main` of a guardian program, started by `Guardian::start` with `--runner PID`:
/// # let runner = 1;
/// match locksmith_process::guardian::watch(runner) {
///     Err(refusal) => eprintln!("guardian: {refusal}"),
///     Ok(never) => match never {},
/// }
/// ```
///
/// # Errors
/// The refusal, or sending SIGKILL to the group failed (it cannot, for a group leader).
pub fn watch(runner: i32) -> Result<Infallible, Refusal> {
    let me = getpid();
    if getpgrp() != me {
        return Err(Refusal("not the leader of a process group of its own; it is started by `locksmith run`".into()));
    }
    if getppid() != Pid::from_raw(runner) {
        return Err(Refusal(format!("its parent is not the runner {runner}; it is started by `locksmith run`")));
    }
    let stdin = io::stdin().as_fd().try_clone_to_owned().map_err(|e| Refusal(format!("stdin: {e}")))?;
    let stdin_is_pipe = std::fs::File::from(stdin).metadata().is_ok_and(|m| m.file_type().is_fifo());
    if !stdin_is_pipe {
        return Err(Refusal("stdin is not the runner's pipe; it is started by `locksmith run`".into()));
    }
    // Already ignored since before exec (set by the runner); again here, for a runner that
    // did not (the guardian must not die of the signals meant for the command).
    super::ignore_group_signals().map_err(|e| Refusal(format!("cannot ignore the group's signals: {e}")))?;
    let mut out = io::stdout().lock();
    if out.write_all(&[READY]).and_then(|()| out.flush()).is_err() {
        return Err(Refusal("the runner is not listening on stdout".into()));
    }
    drop(out);
    wait_for_eof();
    // The runner is gone (or stood us down): the group goes, the guardian with it.
    killpg(me, Signal::SIGKILL).map_err(|e| Refusal(format!("cannot end its process group: {e}")))?;
    unreachable_end()
}

/// Reads stdin until its end: every write end (the runner's) is closed.
fn wait_for_eof() {
    let mut stdin = io::stdin().lock();
    let mut buf = [0u8; 64];
    loop {
        match stdin.read(&mut buf) {
            Ok(0) => return,
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return,
        }
    }
}

/// After SIGKILL to its own group the guardian is dead before `killpg` returns; should the
/// kernel take its time, it waits to be killed.
fn unreachable_end() -> Result<Infallible, Refusal> {
    loop {
        std::thread::sleep(std::time::Duration::from_secs(1));
    }
}
