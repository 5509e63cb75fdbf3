//! The terminal's foreground while the command runs.
//!
//! The command runs in a process group of its own (so that everything it starts can be
//! signalled and ended together). When `locksmith run` itself is the terminal's foreground job,
//! that group is made the terminal's foreground while the command runs — as a shell does for a
//! job — so Ctrl-C, Ctrl-\ and terminal reads reach the command directly and once, and
//! `locksmith run` (then in the background) is not signalled by the terminal at all. When the
//! command is done, the terminal is handed back.

use std::os::fd::{AsRawFd, BorrowedFd, RawFd};

use nix::sys::signal::{SigSet, SigmaskHow, Signal};
use nix::unistd::{getpgrp, isatty, tcgetpgrp, tcsetpgrp, Pid};

/// A terminal whose foreground job `locksmith run` is, and the group to hand it back to.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Terminal {
    fd: RawFd,
    ours: Pid,
}

impl Terminal {
    /// The controlling terminal on stdin, stderr or stdout, if this process's group is its
    /// foreground group now; `None` under cron, in pipelines without a terminal, in the
    /// background, and in tests.
    pub(crate) fn foreground() -> Option<Self> {
        let ours = getpgrp();
        [std::io::stdin().as_raw_fd(), std::io::stderr().as_raw_fd(), std::io::stdout().as_raw_fd()]
            .into_iter()
            .find(|&fd| {
                let f = borrow(fd);
                isatty(f).unwrap_or(false) && tcgetpgrp(f).is_ok_and(|g| g == ours)
            })
            .map(|fd| Self { fd, ours })
    }

    /// Makes `group` the terminal's foreground group (best effort).
    pub(crate) fn give_to(self, group: Pid) {
        set_foreground(self.fd, group);
    }

    /// Makes `locksmith run`'s own group the foreground group again (best effort).
    pub(crate) fn take_back(self) {
        set_foreground(self.fd, self.ours);
    }

    /// For the child between fork and exec: makes its own (new) group the foreground group, so
    /// it never reads the terminal as a background job before the parent's hand-over lands.
    /// Only async-signal-safe calls: a signal mask change and `tcsetpgrp`.
    pub(crate) fn give_to_self_in_child(self) -> std::io::Result<()> {
        set_foreground(self.fd, getpgrp());
        Ok(())
    }
}

/// `tcsetpgrp` with SIGTTOU blocked in this thread: a background group that changes the
/// foreground would otherwise be stopped by SIGTTOU.
fn set_foreground(fd: RawFd, group: Pid) {
    let mut ttou = SigSet::empty();
    ttou.add(Signal::SIGTTOU);
    let mut old = SigSet::empty();
    if nix::sys::signal::pthread_sigmask(SigmaskHow::SIG_BLOCK, Some(&ttou), Some(&mut old)).is_err() {
        return;
    }
    let _ = tcsetpgrp(borrow(fd), group);
    let _ = nix::sys::signal::pthread_sigmask(SigmaskHow::SIG_SETMASK, Some(&old), None);
}

/// One of the standard descriptors, which stay open for the life of the process.
fn borrow(fd: RawFd) -> BorrowedFd<'static> {
    // SAFETY: `fd` is 0, 1 or 2, which this process never closes.
    unsafe { BorrowedFd::borrow_raw(fd) }
}
