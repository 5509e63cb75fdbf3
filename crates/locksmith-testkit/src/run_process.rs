//! A `locksmith run` process under test, with its output captured: stdout line by line (to
//! read what the command printed while it runs), stderr whole (for messages and the loss line).

use std::io::Read;
use std::path::Path;
use std::process::{Command, ExitStatus, Stdio};
use std::sync::mpsc::Receiver;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nix::sys::signal::Signal;

use crate::process::{spawn, stdout_lines, ChildProcess};

/// `locksmith run NAME --backend URL ARGS… -- sh -c SCRIPT`, killed on drop.
#[derive(Debug)]
pub(crate) struct RunProcess {
    process: ChildProcess,
    lines: Receiver<String>,
    stderr: Arc<Mutex<String>>,
}

impl RunProcess {
    /// Starts `bin run NAME --backend URL ARGS… -- sh -c SCRIPT`.
    ///
    /// # Panics
    /// When the binary cannot be started.
    pub(crate) fn spawn(bin: &Path, url: &str, name: &str, args: &[&str], script: &str) -> Self {
        let mut cmd = Command::new(bin);
        cmd.arg("run")
            .arg(name)
            .arg("--backend")
            .arg(url)
            .args(args)
            .args(["--", "sh", "-c", script])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut process = spawn("locksmith run", &mut cmd);
        let lines = stdout_lines(&mut process);
        let stderr = Arc::new(Mutex::new(String::new()));
        if let Some(mut err) = process.take_stderr() {
            let sink = stderr.clone();
            // Chunk by chunk, not to the end: the command's own processes inherit the pipe, so
            // its end may come long after `locksmith run` wrote its last line and exited.
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                while let Ok(n) = err.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    sink.lock().unwrap_or_else(|p| p.into_inner()).push_str(&String::from_utf8_lossy(&buf[..n]));
                }
            });
        }
        Self { process, lines, stderr }
    }

    /// Sends `sig` to `locksmith run` itself.
    pub(crate) fn signal(&self, sig: Signal) {
        self.process.signal(sig);
    }

    /// `kill -9` and reap.
    pub(crate) fn kill9(&mut self) {
        self.process.kill9();
    }

    /// The next line of stdout.
    ///
    /// # Panics
    /// When none comes within `timeout`; the message has stderr.
    pub(crate) fn line(&self, timeout: Duration) -> String {
        self.lines
            .recv_timeout(timeout)
            .unwrap_or_else(|_| panic!("no output from locksmith run; stderr: {}", self.stderr()))
    }

    /// Whether stdout has a line that was not read yet.
    pub(crate) fn has_line(&self) -> bool {
        self.lines.try_recv().is_ok()
    }

    /// Stderr so far.
    pub(crate) fn stderr(&self) -> String {
        self.stderr.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Stderr once it holds `needle`, or as it is after `timeout`. The reader thread may be
    /// behind the exit (its pipe's end comes only when every process holding it is gone), so
    /// a line written just before exiting is waited for, not assumed.
    pub(crate) fn stderr_with(&self, needle: &str, timeout: Duration) -> String {
        let until = std::time::Instant::now() + timeout;
        loop {
            let text = self.stderr();
            if text.contains(needle) || std::time::Instant::now() >= until {
                return text;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits for the exit.
    ///
    /// # Panics
    /// When it does not exit within `timeout`; the message has stderr.
    pub(crate) fn wait(&mut self, timeout: Duration) -> ExitStatus {
        let Some(status) = self.process.wait_timeout(timeout) else {
            panic!("locksmith run did not exit; stderr: {}", self.stderr());
        };
        // Let the stderr reader finish.
        std::thread::sleep(Duration::from_millis(50));
        status
    }
}
