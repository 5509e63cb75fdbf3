//! Child processes of tests: [`ChildProcess`] (from `locksmith-process`, the workspace's one
//! owner of child processes) and what the servers need around it.

use std::process::Command;

pub use locksmith_process::ChildProcess;

/// Spawns `cmd` as a [`ChildProcess`] called `name`.
///
/// # Panics
/// When the program cannot be started; the message names it. Test code: a test that cannot
/// start its processes must fail, not skip.
pub fn spawn(name: &str, cmd: &mut Command) -> ChildProcess {
    ChildProcess::spawn(name, cmd).unwrap_or_else(|e| panic!("cannot start {name} ({cmd:?}): {e}"))
}

/// Spawns a server `name` with `cmd` and waits (≤ 20 s) until it accepts TCP connections on
/// `127.0.0.1:port`: the start of every single-process test server.
///
/// # Panics
/// When it cannot be started or does not listen in time (it is then killed by PID).
pub(crate) fn spawn_listening(name: &str, cmd: &mut Command, port: u16) -> ChildProcess {
    let p = spawn(name, cmd);
    assert!(
        crate::port::wait_listening(port, std::time::Duration::from_secs(20)),
        "{name} did not listen on 127.0.0.1:{port} within 20 s"
    );
    p
}

/// `p`'s stdout, line by line as it comes, read on a thread of its own (so a test can wait for
/// a line with a timeout while the process runs). Empty when its stdout was not piped or was
/// taken already.
pub fn stdout_lines(p: &mut ChildProcess) -> std::sync::mpsc::Receiver<String> {
    use std::io::BufRead;
    let (tx, rx) = std::sync::mpsc::channel();
    if let Some(out) = p.take_stdout() {
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(out).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
    }
    rx
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
    spawn(&format!("{name} watchdog"), &mut wd)
}

/// A shell that removes `dir` once the current (test) process is gone: for files shared by a
/// whole test binary through a static, which is never dropped.
pub(crate) fn remove_when_gone(name: &str, dir: &std::path::Path) -> ChildProcess {
    let mut wd = Command::new("sh");
    wd.arg("-c")
        .arg(format!("while kill -0 {} 2>/dev/null; do sleep 1; done; rm -rf '{}'", std::process::id(), dir.display()))
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    spawn(&format!("{name} cleanup"), &mut wd)
}

/// A temp dir that lives as long as the test process: [`temp_dir_for_process`].
#[derive(Debug)]
pub struct ProcessTempDir {
    dir: tempfile::TempDir,
    /// Removes `dir` once the test process is gone; kept in a `static`, this value never drops.
    _cleanup: ChildProcess,
}

impl ProcessTempDir {
    /// The dir's path.
    pub fn path(&self) -> &std::path::Path {
        self.dir.path()
    }
}

/// A fresh temp dir under `parent` (its name starts with `prefix`) that is removed when dropped
/// or, when kept in a `static` (never dropped), once the test process is gone: for files a whole
/// test binary shares, e.g. a SQLite database.
///
/// # Panics
/// When the dir cannot be created or the cleanup shell cannot be started.
pub fn temp_dir_for_process(parent: &std::path::Path, prefix: &str) -> ProcessTempDir {
    let dir = tempfile::Builder::new()
        .prefix(prefix)
        .tempdir_in(parent)
        .unwrap_or_else(|e| panic!("cannot create a temp dir in {}: {e}", parent.display()));
    let cleanup = remove_when_gone(prefix, dir.path());
    ProcessTempDir { dir, _cleanup: cleanup }
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
