//! The command's process tree: started in a process group of its own, signalled as a group,
//! and ended as a whole before the lock is released.
//!
//! Killing only the direct child is the classic lock-runner bug (`sh -c 'worker & wait'`, a
//! pipeline, or a script's own children keep running without the lock). Every process the
//! command starts stays in its group unless it moves itself out (`setsid`, daemons); those are
//! beyond reach, as with every runner that does not use cgroups.
//!
//! The group is the guardian's (`super::guardian`): it leads the group, ignores the signals
//! meant for the command, and SIGKILLs the group should `locksmith run` die. It does not count
//! as a process of the command.

use std::process::ExitStatus;
use std::time::Duration;

use locksmith_process::guardian::Guardian;
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use tokio::process::{Child, Command};
use tokio::time::Instant;

use super::terminal::Terminal;

/// How often [`Tree::terminate`] looks whether the group is empty.
const POLL: Duration = Duration::from_millis(20);

/// A running command and its process group.
#[derive(Debug)]
pub(crate) struct Tree {
    child: Child,
    group: Pid,
    status: Option<ExitStatus>,
    terminal: Option<Terminal>,
    /// Dropped last (fields drop in order): ends whatever is left in the group.
    guardian: Guardian,
}

impl Tree {
    /// Starts `command` in `guardian`'s process group, with the terminal's foreground when
    /// `terminal` is given. If it cannot start, the guardian is stood down.
    pub(crate) fn spawn(mut command: Command, terminal: Option<Terminal>, guardian: Guardian) -> std::io::Result<Self> {
        guardian.join(command.as_std_mut());
        command.kill_on_drop(false);
        if let Some(t) = terminal {
            // SAFETY: the closure runs in the child between fork and exec and only makes
            // async-signal-safe calls (pthread_sigmask, getpgrp, tcsetpgrp); it allocates nothing.
            unsafe {
                command.pre_exec(move || t.give_to_self_in_child());
            }
        }
        let child = command.spawn()?;
        let group = Pid::from_raw(guardian.pid());
        if let Some(t) = terminal {
            // Also from the parent, as shells do: whichever of the two runs first wins the race.
            t.give_to(group);
        }
        Ok(Self { child, group, status: None, terminal, guardian })
    }

    /// Waits for the command itself (not its children) to exit.
    ///
    /// # Cancel safety
    /// Cancel safe: the exit status is kept once seen.
    pub(crate) async fn wait(&mut self) -> std::io::Result<ExitStatus> {
        if let Some(s) = self.status {
            return Ok(s);
        }
        let s = self.child.wait().await?;
        self.status = Some(s);
        self.hand_back_terminal();
        Ok(s)
    }

    /// Sends `sig` to every process of the group (the guardian ignores what the command may
    /// be sent, and dies of SIGKILL with the rest).
    pub(crate) fn signal(&self, sig: Signal) {
        let _ = killpg(self.group, sig);
    }

    /// Whether any process of the command is still running in the group (zombies and the
    /// guardian do not count).
    pub(crate) fn running(&self) -> bool {
        group_running(self.group, Pid::from_raw(self.guardian.pid()))
    }

    /// Stands the guardian down once the command and its group are done (SIGKILL to anything
    /// that joined the group meanwhile) and hands the terminal back.
    pub(crate) fn finish(self) {
        drop(self);
    }

    /// Ends the whole group: SIGTERM, then SIGKILL to whatever still runs after `grace`.
    /// Returns once the command has exited and no process of the group runs.
    ///
    /// # Cancel safety
    /// Not cancel safe: stopping half-way leaves processes running.
    pub(crate) async fn terminate(&mut self, grace: Duration) -> std::io::Result<ExitStatus> {
        self.signal(Signal::SIGTERM);
        // A stopped process (Ctrl-Z, SIGSTOP) acts on SIGTERM only once continued.
        self.signal(Signal::SIGCONT);
        let deadline = Instant::now() + grace;
        let mut killed = false;
        loop {
            let exited = match self.status {
                Some(_) => true,
                None => tokio::time::timeout(POLL, self.wait()).await.is_ok(),
            };
            if exited && !self.running() {
                break;
            }
            if exited {
                tokio::time::sleep(POLL).await;
            }
            if !killed && Instant::now() >= deadline {
                self.signal(Signal::SIGKILL);
                killed = true;
            }
        }
        self.wait().await
    }

    fn hand_back_terminal(&mut self) {
        if let Some(t) = self.terminal.take() {
            t.take_back();
        }
    }
}

impl Drop for Tree {
    fn drop(&mut self) {
        self.hand_back_terminal();
    }
}

/// Whether a process of group `group` other than `except` runs: on Linux by reading `/proc`
/// (zombies, which run nothing and wait only to be reaped, do not count); elsewhere by signal 0
/// to the group, which cannot leave `except` out (so only SIGKILL ends the wait there).
fn group_running(group: Pid, except: Pid) -> bool {
    #[cfg(target_os = "linux")]
    if let Some(running) = proc_group_running(group, except) {
        return running;
    }
    let _ = except;
    killpg(group, None).is_ok()
}

/// `None` when `/proc` cannot be read.
#[cfg(target_os = "linux")]
fn proc_group_running(group: Pid, except: Pid) -> Option<bool> {
    let entries = std::fs::read_dir("/proc").ok()?;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().filter(|n| n.bytes().all(|b| b.is_ascii_digit())) else { continue };
        if pid.parse() == Ok(except.as_raw()) {
            continue;
        }
        // Gone between listing and reading: not running.
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { continue };
        if let Some((state, pgrp)) = state_and_group(&stat) {
            if pgrp == group.as_raw() && state != 'Z' && state != 'X' {
                return Some(true);
            }
        }
    }
    Some(false)
}

/// The state letter and the process group of a `/proc/PID/stat` line:
/// `pid (comm) state ppid pgrp …`, where comm may itself contain spaces and parentheses.
#[cfg(target_os = "linux")]
fn state_and_group(stat: &str) -> Option<(char, i32)> {
    let after = &stat[stat.rfind(')')? + 1..];
    let mut fields = after.split_ascii_whitespace();
    let state = fields.next()?.chars().next()?;
    let _ppid = fields.next()?;
    let pgrp = fields.next()?.parse().ok()?;
    Some((state, pgrp))
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    #[test]
    fn stat_lines_with_odd_command_names_parse() {
        assert_eq!(state_and_group("42 (sh) S 1 42 42 0 -1"), Some(('S', 42)));
        assert_eq!(state_and_group("7 (a) b (c)) Z 1 99 7"), Some(('Z', 99)));
        assert_eq!(state_and_group("garbage"), None);
    }

    #[test]
    fn this_process_group_runs() {
        assert!(group_running(nix::unistd::getpgrp(), Pid::from_raw(0)));
    }
}
