//! The process properties of the contract (DESIGN.md §2.2, §2.5) and of `locksmith run`: real
//! `locksmith run` processes killed with `kill -9`, paused past their TTL, interrupted while
//! waiting; their exit codes and signal forwarding. The in-process properties are
//! `locksmith_core::conformance`; these need the binary, so they live with the test helpers
//! rather than in the lowest layer.
//!
//! A test file builds a [`CliTarget`] (a `conformance::Target` plus the `locksmith` binary) and
//! expands [`process_conformance_suite!`](crate::process_conformance_suite):
//!
//! ```no_run
//! # fn backend(_: &str) -> locksmith_core::Result<std::sync::Arc<dyn locksmith_core::Backend>> { unimplemented!() }
//! use locksmith_core::conformance::UrlTarget;
//! use locksmith_testkit::{CliTarget, RedisServer};
//!
//! // In a test of locksmith-cli: `locksmith::backend` and `env!("CARGO_BIN_EXE_locksmith")`.
//! fn redis() -> CliTarget {
//!     let server = RedisServer::start();
//!     let target = UrlTarget::new(server.url(), backend).keeping(server);
//!     CliTarget::new("target/debug/locksmith", target)
//! }
//! // … then, at the top level of the test file: locksmith_testkit::process_conformance_suite!(redis());
//! ```
//!
//! Functions panic with a message naming the broken property; they are test code.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use locksmith_core::conformance::{unique, until_waiters, waiters, Target};
use locksmith_core::{Client, LockOptions};
use nix::sys::signal::Signal;

use crate::run_process::RunProcess;

/// A backend under test and the `locksmith` binary that reaches it.
pub struct CliTarget {
    bin: PathBuf,
    target: Box<dyn Target>,
}

impl std::fmt::Debug for CliTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CliTarget").field("bin", &self.bin).field("url", &self.target.url()).finish()
    }
}

impl CliTarget {
    /// `target` reached by the `locksmith` binary `bin` (a test's `env!("CARGO_BIN_EXE_locksmith")`).
    pub fn new(bin: impl Into<PathBuf>, target: impl Target + 'static) -> Self {
        Self { bin: bin.into(), target: Box::new(target) }
    }

    /// The backend, for in-process clients.
    pub fn target(&self) -> &dyn Target {
        self.target.as_ref()
    }

    /// The `locksmith` binary.
    pub fn bin(&self) -> &Path {
        &self.bin
    }

    /// `locksmith run NAME --backend URL ARGS… -- sh -c SCRIPT`
    fn run(&self, name: &str, args: &[&str], script: &str) -> RunProcess {
        RunProcess::spawn(&self.bin, &self.target.url(), name, args, script)
    }
}

/// Lease of the in-process clients.
const TTL: Duration = Duration::from_secs(5);
/// Lease of the `locksmith run` holders the properties kill or pause (`--ttl 1s`).
const SHORT_TTL: Duration = Duration::from_secs(1);

async fn client(t: &CliTarget, ttl: Duration) -> Client {
    match t.target.client(ttl).await {
        Ok(c) => c,
        Err(e) => panic!("cannot create a client for {}: {e}", t.target.url()),
    }
}

fn unix_ms() -> u128 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis()).unwrap_or(0)
}

/// The instant (Unix ms) in `locksmith run`'s loss line: `… held safely until 2026-11-27
/// 16:02:51.123 UTC, 0.4 s ago …`.
fn safe_until_ms(stderr: &str) -> Option<u128> {
    let date = stderr.split("held safely until ").nth(1)?.split(" UTC").next()?;
    let t = humantime::parse_rfc3339(&format!("{}Z", date.replacen(' ', "T", 1))).ok()?;
    t.duration_since(UNIX_EPOCH).ok().map(|d| d.as_millis())
}

fn kill_pid(pid: i32) {
    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), Signal::SIGKILL);
}

fn alive(pid: i32) -> bool {
    // Signal 0 checks existence; a zombie counts as gone for our purpose only once reaped, so
    // also look at /proc state.
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    !stat.is_empty() && !stat.contains(") Z ")
}

/// `(pid, token)` from the first line a holder's command prints (`echo $$ $LOCKSMITH_TOKEN`).
fn pid_and_token(line: &str) -> (i32, u64) {
    let mut parts = line.split_whitespace();
    let child_pid: i32 = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
    let token: u64 = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
    (child_pid, token)
}

/// §2.2: a holder killed with `kill -9` frees the lock for a waiter within TTL + margin, and
/// the waiter's token is higher.
pub async fn holder_killed_with_sigkill_frees_the_lock_within_ttl(t: &CliTarget) {
    let name = unique("kill9");
    let mut holder = t.run(&name, &["--ttl", "1s"], "echo $$ $LOCKSMITH_TOKEN; exec sleep 60");
    let first = holder.line(Duration::from_secs(10));
    let (child_pid, token) = pid_and_token(&first);
    assert!(token > 0, "LOCKSMITH_TOKEN missing: {first:?}");
    holder.kill9();
    let killed = tokio::time::Instant::now();
    let waiter = client(t, TTL).await;
    let g = waiter
        .lock_with(&name, LockOptions::new().timeout(Duration::from_secs(5)))
        .await
        .unwrap_or_else(|e| panic!("waiter did not get the lock after the holder died: {e}"));
    let waited = killed.elapsed();
    kill_pid(child_pid);
    assert!(waited < SHORT_TTL + Duration::from_millis(1500), "waited {waited:?} for a dead holder's lock");
    assert!(g.token() > token, "token {} not above the dead holder's {token}", g.token());
    let _ = g.unlock().await;
    waiter.close().await;
}

/// §2.5: a holder paused (SIGSTOP) past its TTL stopped trusting its hold before the next
/// holder was granted; after SIGCONT it stops its command and exits 76; the next token is higher.
pub async fn holder_paused_past_ttl_knows_it_lost_before_the_next_grant(t: &CliTarget) {
    let name = unique("pause");
    let mut holder = t.run(&name, &["--ttl", "1s", "--kill-grace", "1s"], "echo $$ $LOCKSMITH_TOKEN; exec sleep 60");
    let first = holder.line(Duration::from_secs(10));
    let (child_pid, token) = pid_and_token(&first);
    holder.signal(Signal::SIGSTOP);
    let waiter = client(t, TTL).await;
    let g = waiter
        .lock_with(&name, LockOptions::new().timeout(Duration::from_secs(5)))
        .await
        .unwrap_or_else(|e| panic!("waiter did not get the lock from a paused holder: {e}"));
    let granted_ms = unix_ms();
    assert!(g.token() > token, "token {} not above the paused holder's {token}", g.token());
    holder.signal(Signal::SIGCONT);
    let status = holder.wait(Duration::from_secs(5));
    kill_pid(child_pid);
    let stderr = holder.stderr_with("held safely until ", Duration::from_secs(5));
    assert_eq!(status.code(), Some(76), "a holder that lost its lock must exit 76; stderr: {stderr}");
    let safe_until =
        safe_until_ms(&stderr).unwrap_or_else(|| panic!("no \"held safely until DATE UTC\" in stderr: {stderr}"));
    assert!(safe_until <= granted_ms, "holder trusted its hold until {safe_until}, next grant seen at {granted_ms}");
    assert!(!alive(child_pid), "the command of a holder that lost its lock is still running");
    let _ = g.unlock().await;
    waiter.close().await;
}

/// `locksmith run`: Ctrl-C while waiting stops waiting and leaves no waiter behind.
pub async fn interrupted_run_leaves_no_waiter(t: &CliTarget) {
    let name = unique("sigint");
    let a = client(t, TTL).await;
    let g = a.lock(&name).await.unwrap_or_else(|e| panic!("lock: {e}"));
    let mut waiting = t.run(&name, &[], "echo ran");
    until_waiters(t.target(), &a, &name, 1).await;
    waiting.signal(Signal::SIGINT);
    let status = waiting.wait(Duration::from_secs(5));
    assert_eq!(status.code(), Some(130), "stderr: {}", waiting.stderr());
    assert!(!waiting.has_line(), "the command ran although the lock was never acquired");
    if t.target.caps().reports_waiters {
        assert_eq!(waiters(&a, &name).await, 0, "an interrupted run left its waiter");
    }
    let _ = g.unlock().await;
    a.close().await;
}

/// `locksmith run`: exit codes — CMD's own, 75 when not acquired (`--no-wait`, `--timeout`),
/// and signals forwarded to CMD.
pub async fn run_reports_exit_codes_and_forwards_signals(t: &CliTarget) {
    let name = unique("codes");
    let mut ok = t.run(&name, &[], "exit 7");
    assert_eq!(ok.wait(Duration::from_secs(10)).code(), Some(7), "stderr: {}", ok.stderr());
    let a = client(t, TTL).await;
    let g = a.lock(&name).await.unwrap_or_else(|e| panic!("lock: {e}"));
    let mut no_wait = t.run(&name, &["--no-wait"], "echo ran");
    assert_eq!(no_wait.wait(Duration::from_secs(10)).code(), Some(75), "stderr: {}", no_wait.stderr());
    let mut timeout = t.run(&name, &["--timeout", "300ms"], "echo ran");
    assert_eq!(timeout.wait(Duration::from_secs(10)).code(), Some(75), "stderr: {}", timeout.stderr());
    let _ = g.unlock().await;
    let mut fwd = t.run(&name, &[], "trap 'exit 42' TERM; echo ready; while true; do sleep 0.05; done");
    fwd.line(Duration::from_secs(10));
    fwd.signal(Signal::SIGTERM);
    assert_eq!(fwd.wait(Duration::from_secs(10)).code(), Some(42), "stderr: {}", fwd.stderr());
    let mut counts = HashMap::new();
    for l in a.status(Some(&name)).await.unwrap_or_default() {
        counts.insert(l.name.clone(), l.waiters_or_zero());
    }
    assert_eq!(counts.get(&name).copied().unwrap_or(0), 0);
    a.close().await;
}

/// Expands one `#[tokio::test]` per process property (real `locksmith run` processes, kill -9,
/// SIGSTOP, SIGINT) for the [`CliTarget`] built by `$make` (an expression, evaluated once per
/// test).
#[macro_export]
macro_rules! process_conformance_suite {
    ($make:expr) => {
        $crate::process_conformance_suite!(@each $make;
            holder_killed_with_sigkill_frees_the_lock_within_ttl,
            holder_paused_past_ttl_knows_it_lost_before_the_next_grant,
            interrupted_run_leaves_no_waiter,
            run_reports_exit_codes_and_forwards_signals
        );
    };
    (@each $make:expr; $($name:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                let target: $crate::CliTarget = $make;
                $crate::process_conformance::$name(&target).await;
            }
        )*
    };
}
