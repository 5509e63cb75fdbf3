//! A process group that dies with its runner.
//!
//! A lock runner (`locksmith run`) must not leave its command running once it can no longer
//! hold the lock, and that includes the runner's own sudden death: `kill -9`, the OOM killer, a
//! supervisor with `KillMode=process`. Nothing runs in a process killed that way, so the group
//! is watched from outside: the runner first starts a small *guardian* as the leader of a new
//! process group, and starts its command in the guardian's group. The guardian reads a pipe whose
//! only write end the runner holds (close-on-exec, so neither the guardian nor the command has
//! it); when the runner dies the kernel closes that end, the guardian's read returns, and it
//! sends SIGKILL to its own group at once — the command, everything it started, and itself.
//!
//! - The group id is the guardian's own PID, so the kill can never reach a stranger's group.
//! - The guardian ignores the signals a runner forwards to the group and a terminal sends to its
//!   foreground job (SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1/2, SIGTSTP, SIGTTIN, SIGTTOU):
//!   they are for the command. They are ignored from before its `exec`, so none is lost in a race.
//! - A process the runner is forking when it dies still holds a copy of the write end until its
//!   `exec`, so the guardian waits for it to join the group and then ends it too;
//!   [`Guardian::join`] also makes such a child check that its runner is still its parent.
//! - A group stopped as a whole (Ctrl-Z, `kill -STOP -PGID`) becomes an orphaned group when the
//!   runner dies, and the kernel continues it, so the guardian acts then too.
//!
//! Out of reach: the guardian itself killed first (then the command runs on, as without it), a
//! runner paused rather than killed (it is alive; the lease and its loss signal cover that), and
//! processes that leave the group on purpose (`setsid`, daemons).
//!
//! The runner's side is [`Guardian`]; the guardian's is [`watch`], the whole of a process's
//! `main` (the `locksmith` binary runs it as the hidden `run-guardian` subcommand).

mod runner;
mod watch;

pub use runner::Guardian;
pub use watch::{watch, Refusal};

use nix::sys::signal::Signal;

/// The signals the guardian ignores: those a runner forwards to the group and those a terminal
/// sends its foreground job. The command gets them; the guardian must outlive them.
const IGNORED: [Signal; 10] = [
    Signal::SIGINT,
    Signal::SIGTERM,
    Signal::SIGHUP,
    Signal::SIGQUIT,
    Signal::SIGUSR1,
    Signal::SIGUSR2,
    Signal::SIGTSTP,
    Signal::SIGTTIN,
    Signal::SIGTTOU,
    Signal::SIGPIPE,
];

/// Sets every signal of [`IGNORED`] to be ignored. Async-signal-safe (only `sigaction`), so it
/// may run between fork and exec; ignored dispositions survive `exec`.
fn ignore_group_signals() -> std::io::Result<()> {
    use nix::sys::signal::{signal, SigHandler};
    for sig in IGNORED {
        // SAFETY: installing SIG_IGN replaces no handler code of ours; `signal` calls only
        // sigaction, which is async-signal-safe.
        unsafe { signal(sig, SigHandler::SigIgn) }.map_err(std::io::Error::from)?;
    }
    Ok(())
}
