//! The contract suite (DESIGN.md §2), one function per property, run by every driver against a
//! real server. A driver's test file implements [`Target`] and expands
//! [`conformance_suite!`](crate::conformance_suite) (in-process properties) and, where a
//! `locksmith` binary can reach the backend from other processes,
//! [`process_conformance_suite!`](crate::process_conformance_suite) (crash, pause and signal
//! properties with real processes).
//!
//! Functions panic with a message naming the broken property; they are test code.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;

use crate::{Client, Error, LockOptions, Result};

/// What a backend under test can do, so the suite asks only what the backend promises.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct Caps {
    /// Waiters are served in arrival order.
    pub fifo: bool,
    /// `status` reports queued waiters.
    pub reports_waiters: bool,
}

impl Default for Caps {
    fn default() -> Self {
        Self { fifo: true, reports_waiters: true }
    }
}

/// A backend under test.
#[async_trait]
pub trait Target: Send + Sync {
    /// The backend URL (for `locksmith` processes).
    fn url(&self) -> String;
    /// A new client (its own session) with lease `ttl`.
    async fn client(&self, ttl: Duration) -> Result<Client>;
    /// What the backend promises.
    fn caps(&self) -> Caps {
        Caps::default()
    }
    /// The `locksmith` binary, for the process properties.
    fn cli(&self) -> Option<PathBuf> {
        None
    }
}

/// Makes a backend from a URL (`locksmith::backend` in the facade).
pub type BackendFactory = fn(&str) -> Result<Arc<dyn crate::Backend>>;

/// The usual [`Target`]: a backend reached by URL, built by `factory` (pass
/// `locksmith::backend`), with optional caps, `locksmith` binary and a resource (a test server)
/// kept alive as long as the target.
///
/// ```no_run
/// # fn backend(_: &str) -> locksmith_core::Result<std::sync::Arc<dyn locksmith_core::Backend>> { unimplemented!() }
/// use locksmith_core::conformance::UrlTarget;
/// let target = UrlTarget::new("redis://127.0.0.1:6379", backend).fifo(false).reports_waiters(false);
/// ```
pub struct UrlTarget {
    url: String,
    factory: BackendFactory,
    caps: Caps,
    cli: Option<PathBuf>,
    _keep: Option<Box<dyn std::any::Any + Send + Sync>>,
}

impl std::fmt::Debug for UrlTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UrlTarget").field("url", &self.url).field("caps", &self.caps).field("cli", &self.cli).finish()
    }
}

impl UrlTarget {
    /// A target for `url` with default caps (FIFO, reports waiters) and no binary.
    pub fn new(url: impl Into<String>, factory: BackendFactory) -> Self {
        Self { url: url.into(), factory, caps: Caps::default(), cli: None, _keep: None }
    }

    /// Whether the backend serves waiters in arrival order.
    pub fn fifo(mut self, fifo: bool) -> Self {
        self.caps.fifo = fifo;
        self
    }

    /// Whether `status` reports queued waiters.
    pub fn reports_waiters(mut self, reports: bool) -> Self {
        self.caps.reports_waiters = reports;
        self
    }

    /// The `locksmith` binary, which enables the process properties.
    pub fn cli(mut self, bin: impl Into<PathBuf>) -> Self {
        self.cli = Some(bin.into());
        self
    }

    /// Keeps `resource` (typically the test server) alive as long as the target.
    pub fn keeping<T: Send + Sync + 'static>(mut self, resource: T) -> Self {
        self._keep = Some(Box::new(resource));
        self
    }
}

#[async_trait]
impl Target for UrlTarget {
    fn url(&self) -> String {
        self.url.clone()
    }
    async fn client(&self, ttl: Duration) -> Result<Client> {
        Client::new((self.factory)(&self.url)?, ttl)
    }
    fn caps(&self) -> Caps {
        self.caps
    }
    fn cli(&self) -> Option<PathBuf> {
        self.cli.clone()
    }
}

const TTL: Duration = Duration::from_secs(5);
const SHORT_TTL: Duration = Duration::from_secs(1);

fn unique(prefix: &str) -> String {
    format!("conformance/{prefix}/{:08x}", rand::random::<u32>())
}

async fn client(t: &dyn Target, ttl: Duration) -> Client {
    match t.client(ttl).await {
        Ok(c) => c,
        Err(e) => panic!("cannot create a client for {}: {e}", t.url()),
    }
}

async fn waiters(c: &Client, name: &str) -> u64 {
    match c.status(Some(name)).await {
        Ok(s) => s.first().map(|l| l.waiters_or_zero()).unwrap_or(0),
        Err(e) => panic!("status failed: {e}"),
    }
}

/// Waits until `name` has `n` waiters (backends that report them) or a moment has passed.
async fn until_waiters(t: &dyn Target, c: &Client, name: &str, n: u64) {
    if !t.caps().reports_waiters {
        tokio::time::sleep(Duration::from_millis(200)).await;
        return;
    }
    for _ in 0..500 {
        if waiters(c, name).await >= n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("{name}: {n} waiters never showed in status");
}

/// §2.1 + §2.4: 32 clients hammering one lock never overlap, and every token is greater than
/// every token before it.
pub async fn thirty_two_clients_never_overlap_and_tokens_increase(t: &dyn Target) {
    let name = unique("exclusion");
    let inside = Arc::new(AtomicBool::new(false));
    let last = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for _ in 0..32 {
        let c = client(t, TTL).await;
        let (name, inside, last) = (name.clone(), inside.clone(), last.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..8 {
                let g = c.lock(&name).await.unwrap_or_else(|e| panic!("lock: {e}"));
                assert!(!inside.swap(true, Ordering::SeqCst), "two holders at once");
                let prev = last.swap(g.token(), Ordering::SeqCst);
                assert!(g.token() > prev, "token {} not above the previous {prev}", g.token());
                tokio::task::yield_now().await;
                inside.store(false, Ordering::SeqCst);
                assert!(g.unlock().await.unwrap_or_else(|e| panic!("unlock: {e}")), "unlock of a live hold");
            }
            c.close().await;
        }));
    }
    for task in tasks {
        if let Err(e) = task.await {
            std::panic::resume_unwind(e.into_panic());
        }
    }
    assert!(last.load(Ordering::SeqCst) >= 256, "256 grants must issue at least 256 tokens");
}

/// §2.7: waiters are served in the order they started waiting.
pub async fn waiters_are_served_in_fifo_order(t: &dyn Target) {
    if !t.caps().fifo {
        return;
    }
    let name = unique("fifo");
    let holder = client(t, TTL).await;
    let g = holder.lock(&name).await.unwrap_or_else(|e| panic!("lock: {e}"));
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 0..5u32 {
        let c = client(t, TTL).await;
        let (n, order) = (name.clone(), order.clone());
        tasks.push(tokio::spawn(async move {
            let g = c.lock(&n).await.unwrap_or_else(|e| panic!("lock: {e}"));
            order.lock().unwrap_or_else(|p| p.into_inner()).push(i);
            let _ = g.unlock().await;
            c.close().await;
        }));
        until_waiters(t, &holder, &name, u64::from(i) + 1).await;
    }
    let _ = g.unlock().await;
    for task in tasks {
        if let Err(e) = task.await {
            std::panic::resume_unwind(e.into_panic());
        }
    }
    assert_eq!(*order.lock().unwrap_or_else(|p| p.into_inner()), vec![0, 1, 2, 3, 4], "not FIFO");
    holder.close().await;
}

/// §2.7: `try_lock` on a held lock answers at once, and queues nothing.
pub async fn try_lock_never_waits(t: &dyn Target) {
    let name = unique("try");
    let a = client(t, TTL).await;
    let b = client(t, TTL).await;
    let g = a.try_lock(&name).await.unwrap_or_else(|e| panic!("try_lock: {e}"));
    let g = g.unwrap_or_else(|| panic!("a free lock must be granted to try_lock"));
    let started = tokio::time::Instant::now();
    let got = b.try_lock(&name).await.unwrap_or_else(|e| panic!("try_lock: {e}"));
    assert!(got.is_none(), "try_lock on a held lock must answer None");
    assert!(started.elapsed() < TTL / 2, "try_lock waited {:?}", started.elapsed());
    if t.caps().reports_waiters {
        assert_eq!(waiters(&a, &name).await, 0, "try_lock left a waiter");
    }
    let _ = g.unlock().await;
    a.close().await;
    b.close().await;
}

/// §2.7: a `lock()` that times out or is dropped leaves no waiter and no hold.
pub async fn cancelled_waiter_leaves_no_entry(t: &dyn Target) {
    let name = unique("cancel");
    let a = client(t, TTL).await;
    let b = client(t, TTL).await;
    let c = client(t, TTL).await;
    let g = a.lock(&name).await.unwrap_or_else(|e| panic!("lock: {e}"));
    let timed_out = b.lock_with(&name, LockOptions::new().timeout(Duration::from_millis(200))).await;
    assert!(matches!(timed_out, Err(Error::Timeout)), "expected Timeout, got {timed_out:?}");
    // A waiter dropped by select!, not by timeout.
    tokio::select! {
        r = b.lock(&name) => panic!("lock of a held lock returned {r:?}"),
        _ = tokio::time::sleep(Duration::from_millis(100)) => {}
    }
    if t.caps().reports_waiters {
        let mut left = u64::MAX;
        for _ in 0..100 {
            left = waiters(&a, &name).await;
            if left == 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(left, 0, "cancelled waiters left entries");
    }
    let _ = g.unlock().await;
    let got = c.try_lock(&name).await.unwrap_or_else(|e| panic!("try_lock: {e}"));
    assert!(got.is_some(), "a cancelled waiter kept a hold");
    for x in [a, b, c] {
        x.close().await;
    }
}

/// §2.8: an explicit owner re-acquires without waiting, shares the token, and the lock is
/// freed only by the last release.
pub async fn reentrant_acquisitions_are_counted(t: &dyn Target) {
    let name = unique("reentrant");
    let a = client(t, TTL).await;
    let b = client(t, TTL).await;
    let opts = || LockOptions::new().owner("worker-1").timeout(Duration::from_secs(2));
    let g1 = a.lock_with(&name, opts()).await.unwrap_or_else(|e| panic!("lock: {e}"));
    let g2 = a.lock_with(&name, opts()).await.unwrap_or_else(|e| panic!("reentrant lock: {e}"));
    assert_eq!(g1.token(), g2.token(), "reentrant guards share the token");
    assert!(g1.unlock().await.unwrap_or(false), "first release of a reentrant hold");
    assert!(g2.is_held(), "one count is still held");
    let busy = b.try_lock(&name).await.unwrap_or_else(|e| panic!("try_lock: {e}"));
    assert!(busy.is_none(), "lock freed while a reentrant count remained");
    assert!(g2.unlock().await.unwrap_or(false), "last release");
    let free = b.try_lock(&name).await.unwrap_or_else(|e| panic!("try_lock: {e}"));
    assert!(free.is_some(), "lock not freed by the last release");
    a.close().await;
    b.close().await;
}

/// §2.8: without an owner id, two acquisitions on one client are exclusive (reentrancy is
/// never implicit, never tied to a task or thread).
pub async fn anonymous_acquisitions_on_one_client_are_exclusive(t: &dyn Target) {
    let name = unique("anon");
    let a = client(t, TTL).await;
    let g = a.lock(&name).await.unwrap_or_else(|e| panic!("lock: {e}"));
    let second = a.try_lock(&name).await.unwrap_or_else(|e| panic!("try_lock: {e}"));
    assert!(second.is_none(), "a second anonymous acquisition on the same client was granted");
    let _ = g.unlock().await;
    a.close().await;
}

/// §2.3: `unlock` tells whether the hold was still ours; dropping a guard releases it.
pub async fn unlock_and_drop_release_the_lock(t: &dyn Target) {
    let name = unique("release");
    let a = client(t, TTL).await;
    let b = client(t, TTL).await;
    let g = a.lock(&name).await.unwrap_or_else(|e| panic!("lock: {e}"));
    assert!(g.unlock().await.unwrap_or(false), "unlock of a live hold returns true");
    let g = a.lock(&name).await.unwrap_or_else(|e| panic!("lock: {e}"));
    let token = g.token();
    drop(g);
    let g = b
        .lock_with(&name, LockOptions::new().timeout(TTL / 2))
        .await
        .unwrap_or_else(|e| panic!("a dropped guard was not released before the TTL: {e}"));
    assert!(g.token() > token);
    a.close().await;
    b.close().await;
}

/// §2.5: when the session ends, every guard knows (`lost()` resolves, `is_held()` is false),
/// `with_lock` cancels its critical section, and someone else can take the lock.
pub async fn closing_the_session_signals_loss(t: &dyn Target) {
    let name = unique("loss");
    let a = client(t, TTL).await;
    let b = client(t, TTL).await;
    let g = a.lock(&name).await.unwrap_or_else(|e| panic!("lock: {e}"));
    assert!(g.is_held() && g.remaining() > Duration::ZERO);
    a.close().await;
    tokio::time::timeout(Duration::from_secs(1), g.lost()).await.unwrap_or_else(|_| panic!("lost() did not fire"));
    assert!(!g.is_held());
    assert_eq!(g.remaining(), Duration::ZERO);
    let g2 = b.lock_with(&name, LockOptions::new().timeout(TTL / 2)).await.unwrap_or_else(|e| panic!("lock: {e}"));
    assert!(g2.token() > g.token());
    assert!(!g.unlock().await.unwrap_or(true), "unlock after loss must say the hold was not ours");
    assert!(g2.is_held(), "a stale unlock must not free the new holder");

    // The scoped form: the critical section is cancelled when the lock is lost.
    let name = unique("scoped");
    let c = client(t, TTL).await;
    let closer = c.clone();
    let run = c.with_lock(&name, LockOptions::new(), |_token| async move {
        closer.close().await;
        std::future::pending::<()>().await;
    });
    let r = tokio::time::timeout(Duration::from_secs(2), run).await.unwrap_or_else(|_| panic!("with_lock hung"));
    assert!(matches!(r, Err(Error::Lost(_))), "expected Lost, got {r:?}");
    b.close().await;
}

/// §2.6: a holder that keeps running keeps its lock across many TTLs (automatic renewal).
pub async fn a_live_holder_keeps_its_lock_past_the_ttl(t: &dyn Target) {
    let name = unique("renew");
    let a = client(t, SHORT_TTL).await;
    let b = client(t, SHORT_TTL).await;
    let g = a.lock(&name).await.unwrap_or_else(|e| panic!("lock: {e}"));
    tokio::time::sleep(SHORT_TTL * 3).await;
    assert!(g.is_held(), "renewal did not keep the hold");
    let busy = b.try_lock(&name).await.unwrap_or_else(|e| panic!("try_lock: {e}"));
    assert!(busy.is_none(), "the lock was handed out while its holder renewed");
    let _ = g.unlock().await;
    a.close().await;
    b.close().await;
}

/// §2.9: bad names and options are refused with typed errors and change nothing.
pub async fn bad_input_is_refused_with_typed_errors(t: &dyn Target) {
    let a = client(t, TTL).await;
    for bad in [String::new(), "x".repeat(257), "a\nb".into(), "nul\0".into()] {
        let r = a.try_lock(&bad).await;
        assert!(matches!(r, Err(Error::InvalidName(_))), "name {bad:?} gave {r:?}");
    }
    let r = a.lock_with("ok-name", LockOptions::new().owner("")).await;
    assert!(matches!(r, Err(Error::InvalidArgument(_))), "empty owner gave {r:?}");
    let r = t.client(Duration::ZERO).await;
    assert!(matches!(r, Err(Error::InvalidTtl { .. })), "zero TTL gave {r:?}");
    let r = t.client(Duration::from_secs(3601)).await;
    assert!(matches!(r, Err(Error::InvalidTtl { .. })), "TTL above the maximum gave {r:?}");
    a.close().await;
}

// ---- process properties -------------------------------------------------------------------

fn unix_ms() -> u128 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis()).unwrap_or(0)
}

struct RunProcess {
    child: std::process::Child,
    lines: std::sync::mpsc::Receiver<String>,
    stderr: Arc<Mutex<String>>,
}

impl RunProcess {
    /// `locksmith run NAME --backend URL ARGS… -- sh -c SCRIPT`
    fn spawn(t: &dyn Target, name: &str, args: &[&str], script: &str) -> Self {
        let bin = t.cli().unwrap_or_else(|| panic!("process properties need Target::cli()"));
        let mut child = Command::new(&bin)
            .arg("run")
            .arg(name)
            .arg("--backend")
            .arg(t.url())
            .args(args)
            .arg("--")
            .arg("sh")
            .arg("-c")
            .arg(script)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", bin.display()));
        let (tx, lines) = std::sync::mpsc::channel();
        if let Some(out) = child.stdout.take() {
            std::thread::spawn(move || {
                use std::io::BufRead;
                for line in std::io::BufReader::new(out).lines().map_while(std::result::Result::ok) {
                    let _ = tx.send(line);
                }
            });
        }
        let stderr = Arc::new(Mutex::new(String::new()));
        if let Some(mut err) = child.stderr.take() {
            let sink = stderr.clone();
            std::thread::spawn(move || {
                use std::io::Read;
                let mut s = String::new();
                let _ = err.read_to_string(&mut s);
                sink.lock().unwrap_or_else(|p| p.into_inner()).push_str(&s);
            });
        }
        Self { child, lines, stderr }
    }

    fn pid(&self) -> nix::unistd::Pid {
        nix::unistd::Pid::from_raw(self.child.id() as i32)
    }

    fn line(&self, timeout: Duration) -> String {
        self.lines
            .recv_timeout(timeout)
            .unwrap_or_else(|_| panic!("no output from locksmith run; stderr: {}", self.stderr()))
    }

    fn stderr(&self) -> String {
        self.stderr.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn wait(&mut self, timeout: Duration) -> std::process::ExitStatus {
        let until = std::time::Instant::now() + timeout;
        loop {
            if let Ok(Some(s)) = self.child.try_wait() {
                // Let the stderr reader finish.
                std::thread::sleep(Duration::from_millis(50));
                return s;
            }
            assert!(std::time::Instant::now() < until, "locksmith run did not exit; stderr: {}", self.stderr());
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for RunProcess {
    fn drop(&mut self) {
        let _ = nix::sys::signal::kill(self.pid(), nix::sys::signal::Signal::SIGCONT);
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn kill_pid(pid: i32) {
    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);
}

fn alive(pid: i32) -> bool {
    // Signal 0 checks existence; a zombie counts as gone for our purpose only once reaped, so
    // also look at /proc state.
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    !stat.is_empty() && !stat.contains(") Z ")
}

/// §2.2: a holder killed with `kill -9` frees the lock for a waiter within TTL + margin, and
/// the waiter's token is higher.
pub async fn holder_killed_with_sigkill_frees_the_lock_within_ttl(t: &dyn Target) {
    let name = unique("kill9");
    let mut holder = RunProcess::spawn(t, &name, &["--ttl", "1s"], "echo $$ $LOCKSMITH_TOKEN; exec sleep 60");
    let first = holder.line(Duration::from_secs(10));
    let mut parts = first.split_whitespace();
    let child_pid: i32 = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
    let token: u64 = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
    assert!(token > 0, "LOCKSMITH_TOKEN missing: {first:?}");
    let _ = holder.child.kill();
    let _ = holder.child.wait();
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
pub async fn holder_paused_past_ttl_knows_it_lost_before_the_next_grant(t: &dyn Target) {
    let name = unique("pause");
    let mut holder =
        RunProcess::spawn(t, &name, &["--ttl", "1s", "--kill-grace", "1s"], "echo $$ $LOCKSMITH_TOKEN; exec sleep 60");
    let first = holder.line(Duration::from_secs(10));
    let mut parts = first.split_whitespace();
    let child_pid: i32 = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
    let token: u64 = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
    let _ = nix::sys::signal::kill(holder.pid(), nix::sys::signal::Signal::SIGSTOP);
    let waiter = client(t, TTL).await;
    let g = waiter
        .lock_with(&name, LockOptions::new().timeout(Duration::from_secs(5)))
        .await
        .unwrap_or_else(|e| panic!("waiter did not get the lock from a paused holder: {e}"));
    let granted_ms = unix_ms();
    assert!(g.token() > token, "token {} not above the paused holder's {token}", g.token());
    let _ = nix::sys::signal::kill(holder.pid(), nix::sys::signal::Signal::SIGCONT);
    let status = holder.wait(Duration::from_secs(5));
    kill_pid(child_pid);
    assert_eq!(status.code(), Some(76), "a holder that lost its lock must exit 76; stderr: {}", holder.stderr());
    let stderr = holder.stderr();
    let safe_until: u128 = stderr
        .split("unix_ms=")
        .nth(1)
        .and_then(|s| s.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no unix_ms= in stderr: {stderr}"));
    assert!(safe_until <= granted_ms, "holder trusted its hold until {safe_until}, next grant seen at {granted_ms}");
    assert!(!alive(child_pid), "the command of a holder that lost its lock is still running");
    let _ = g.unlock().await;
    waiter.close().await;
}

/// `locksmith run`: Ctrl-C while waiting stops waiting and leaves no waiter behind.
pub async fn interrupted_run_leaves_no_waiter(t: &dyn Target) {
    let name = unique("sigint");
    let a = client(t, TTL).await;
    let g = a.lock(&name).await.unwrap_or_else(|e| panic!("lock: {e}"));
    let mut waiting = RunProcess::spawn(t, &name, &[], "echo ran");
    until_waiters(t, &a, &name, 1).await;
    let _ = nix::sys::signal::kill(waiting.pid(), nix::sys::signal::Signal::SIGINT);
    let status = waiting.wait(Duration::from_secs(5));
    assert_eq!(status.code(), Some(130), "stderr: {}", waiting.stderr());
    assert!(waiting.lines.try_recv().is_err(), "the command ran although the lock was never acquired");
    if t.caps().reports_waiters {
        assert_eq!(waiters(&a, &name).await, 0, "an interrupted run left its waiter");
    }
    let _ = g.unlock().await;
    a.close().await;
}

/// `locksmith run`: exit codes — CMD's own, 75 when not acquired (`--no-wait`, `--timeout`),
/// and signals forwarded to CMD.
pub async fn run_reports_exit_codes_and_forwards_signals(t: &dyn Target) {
    let name = unique("codes");
    let mut ok = RunProcess::spawn(t, &name, &[], "exit 7");
    assert_eq!(ok.wait(Duration::from_secs(10)).code(), Some(7), "stderr: {}", ok.stderr());
    let a = client(t, TTL).await;
    let g = a.lock(&name).await.unwrap_or_else(|e| panic!("lock: {e}"));
    let mut no_wait = RunProcess::spawn(t, &name, &["--no-wait"], "echo ran");
    assert_eq!(no_wait.wait(Duration::from_secs(10)).code(), Some(75), "stderr: {}", no_wait.stderr());
    let mut timeout = RunProcess::spawn(t, &name, &["--timeout", "300ms"], "echo ran");
    assert_eq!(timeout.wait(Duration::from_secs(10)).code(), Some(75), "stderr: {}", timeout.stderr());
    let _ = g.unlock().await;
    let mut fwd = RunProcess::spawn(t, &name, &[], "trap 'exit 42' TERM; echo ready; while true; do sleep 0.05; done");
    fwd.line(Duration::from_secs(10));
    let _ = nix::sys::signal::kill(fwd.pid(), nix::sys::signal::Signal::SIGTERM);
    assert_eq!(fwd.wait(Duration::from_secs(10)).code(), Some(42), "stderr: {}", fwd.stderr());
    let mut counts = HashMap::new();
    for l in a.status(Some(&name)).await.unwrap_or_default() {
        counts.insert(l.name.clone(), l.waiters_or_zero());
    }
    assert_eq!(counts.get(&name).copied().unwrap_or(0), 0);
    a.close().await;
}

/// Expands one `#[tokio::test]` per in-process contract property for the [`Target`] built by
/// `$make` (an expression, evaluated once per test).
#[macro_export]
macro_rules! conformance_suite {
    ($make:expr) => {
        $crate::conformance_suite!(@each $make;
            thirty_two_clients_never_overlap_and_tokens_increase,
            waiters_are_served_in_fifo_order,
            try_lock_never_waits,
            cancelled_waiter_leaves_no_entry,
            reentrant_acquisitions_are_counted,
            anonymous_acquisitions_on_one_client_are_exclusive,
            unlock_and_drop_release_the_lock,
            closing_the_session_signals_loss,
            a_live_holder_keeps_its_lock_past_the_ttl,
            bad_input_is_refused_with_typed_errors
        );
    };
    (@each $make:expr; $($name:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                let target = $make;
                $crate::conformance::$name(&target).await;
            }
        )*
    };
}

/// Expands one `#[tokio::test]` per process property (real `locksmith run` processes, kill -9,
/// SIGSTOP, SIGINT) for the [`Target`] built by `$make`, whose `cli()` must be set.
#[macro_export]
macro_rules! process_conformance_suite {
    ($make:expr) => {
        $crate::conformance_suite!(@each $make;
            holder_killed_with_sigkill_frees_the_lock_within_ttl,
            holder_paused_past_ttl_knows_it_lost_before_the_next_grant,
            interrupted_run_leaves_no_waiter,
            run_reports_exit_codes_and_forwards_signals
        );
    };
}
