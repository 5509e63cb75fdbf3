//! A terminal for tests: a tmux server of the test's own (private socket), a command running in
//! its one pane, and the pane's text. On drop the pane's process is ended by PID and the tmux
//! server stopped.

#![allow(dead_code)]

use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// A detached tmux session running one command.
pub struct Tmux {
    socket: String,
    pane_pid: Option<i32>,
}

impl Tmux {
    /// Starts `command` (a shell command line) in a `cols`×`rows` terminal.
    ///
    /// # Panics
    /// When tmux is missing (`bash scripts/setup.sh` installs it) or does not start.
    pub fn start(command: &str, cols: u16, rows: u16) -> Self {
        let socket = format!("locksmith-test-{}-{}", std::process::id(), locksmith_testkit::free_port());
        let mut t = Self { socket, pane_pid: None };
        let out = t.tmux(&["new-session", "-d", "-s", "t", "-x", &cols.to_string(), "-y", &rows.to_string(), command]);
        assert!(out.status.success(), "tmux new-session: {}", String::from_utf8_lossy(&out.stderr));
        let pid = t.tmux(&["display-message", "-p", "-t", "t", "#{pane_pid}"]);
        t.pane_pid = String::from_utf8_lossy(&pid.stdout).trim().parse().ok();
        t
    }

    fn tmux(&self, args: &[&str]) -> Output {
        Command::new("tmux")
            .arg("-L")
            .arg(&self.socket)
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("cannot run tmux ({e}); install it with: bash scripts/setup.sh"))
    }

    /// The pane's text now.
    pub fn screen(&self) -> String {
        String::from_utf8_lossy(&self.tmux(&["capture-pane", "-p", "-t", "t"]).stdout).into_owned()
    }

    /// Waits up to `timeout` for a screen where `pred` holds, and returns it.
    ///
    /// # Panics
    /// When none came in time; the message shows the last screen.
    pub fn wait_for(&self, what: &str, timeout: Duration, pred: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            let screen = self.screen();
            if pred(&screen) {
                return screen;
            }
            assert!(Instant::now() < deadline, "{what}: not on screen within {timeout:?}; the screen:\n{screen}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        if let Some(pid) = self.pane_pid {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);
        }
        let _ = self.tmux(&["kill-server"]);
    }
}
