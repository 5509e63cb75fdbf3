//! Lease expiry is decided by the database's clock, never a client's: a `locksmith run` holder
//! whose wall clock is skewed by ±1 h (libfaketime, monotonic clock left alone so tokio's timers
//! work) and that stops renewing (SIGSTOP) is taken over exactly when its lease ends by the
//! database clock — not earlier, not later — by a contender with a normal clock or one skewed
//! the other way.
//!
//! PostgreSQL and MariaDB only. SQLite has no server: `julianday('now')` is evaluated by each
//! client process with its own clock, so on SQLite expiry is by the host's clock, which every
//! process on the one host shares (SQLite files are one-host only). A client whose clock is faked
//! does skew SQLite leases — a property of SQLite, documented in the crate, not tested here.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use locksmith_testkit::{skew_clock, spawn, ChildProcess, MySqlServer, PostgresServer};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

const BIN: &str = env!("CARGO_BIN_EXE_locksmith");
const TTL: &str = "2s";
const NAME: &str = "skewed";

/// `program` with its wall clock skewed by `skew` (libfaketime), the monotonic clock unfaked.
fn faketime(skew: &str, program: &str) -> Command {
    let mut c = Command::new(program);
    skew_clock(&mut c, skew);
    c
}

/// The skew is real: `date` under faketime is about `expect` seconds off ours. Without this the
/// test could pass with faketime doing nothing.
fn assert_skews(skew: &str, expect: i64) {
    let out = faketime(skew, "date").arg("+%s").output().unwrap_or_else(|e| panic!("cannot run date: {e}"));
    assert!(out.status.success(), "date under libfaketime failed: {}", String::from_utf8_lossy(&out.stderr));
    let faked: i64 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() as i64;
    assert!((faked - now - expect).abs() < 30, "faketime {skew}: {faked} vs {now}, expected {expect:+} s");
}

/// Processes to end by PID on drop (also when an assertion fails): `locksmith run` (a
/// `ChildProcess`, killed when dropped) and its command.
struct Procs {
    _locksmith: ChildProcess,
    pids: Vec<i32>,
}

impl Drop for Procs {
    fn drop(&mut self) {
        for &pid in &self.pids {
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
        }
    }
}

/// Starts `locksmith run` under `skew`, waits until it holds the lock, and returns it with the
/// PIDs of the `locksmith` process and of its command.
fn start_holder(url: &str, skew: &str, dir: &Path) -> (Procs, i32) {
    let marker = dir.join(format!("holder{skew}"));
    // The command records its parent (locksmith itself) and its own pid.
    let script = format!("echo $PPID $$ > '{}.tmp' && mv '{0}.tmp' '{0}' && exec sleep 30", marker.display());
    let mut cmd = faketime(skew, BIN);
    cmd.args(["run", NAME, "--backend", url, "--ttl", TTL, "--timeout", "10s", "--", "sh", "-c", &script])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let mut procs = Procs { _locksmith: spawn("skewed locksmith run", &mut cmd), pids: vec![] };
    let until = Instant::now() + Duration::from_secs(10);
    let text = loop {
        if let Ok(t) = std::fs::read_to_string(&marker) {
            break t;
        }
        assert!(Instant::now() < until, "the skewed holder did not get the lock");
        std::thread::sleep(Duration::from_millis(20));
    };
    let pids: Vec<i32> = text.split_whitespace().map(|p| p.parse().unwrap()).collect();
    procs.pids = pids.clone();
    (procs, pids[0])
}

/// The lease's time left by the database clock, as `status` computes it server-side.
async fn ttl_left(url: &str) -> Duration {
    let c = locksmith::connect(url).await.unwrap();
    let st = c.status(Some(NAME)).await.unwrap();
    c.close().await;
    let holder = st.first().and_then(|s| s.holder.clone()).unwrap_or_else(|| panic!("no holder in {st:?}"));
    holder.ttl_left.unwrap_or_else(|| panic!("the lease table knows the time left: {holder:?}"))
}

/// A holder skewed by `holder_skew` stops renewing; a contender (in this process, or a
/// `locksmith run` under `contender_skew`) gets the lock only when the lease ends by the
/// database clock.
async fn takeover_is_by_the_database_clock(url: &str, holder_skew: &str, contender_skew: Option<&str>) {
    let dir = tempfile::tempdir().unwrap();
    let (_procs, locksmith_pid) = start_holder(url, holder_skew, dir.path());
    // Let one renewal pass under the skewed clock before freezing the holder.
    std::thread::sleep(Duration::from_millis(800));
    kill(Pid::from_raw(locksmith_pid), Signal::SIGSTOP).unwrap();
    let stopped = Instant::now();
    let left = ttl_left(url).await;
    // A lease computed from the holder's clock would be an hour off (expired, or 1 h long).
    assert!(
        left > Duration::from_millis(900) && left <= Duration::from_secs(2),
        "holder skewed {holder_skew}: the lease has {left:?} left by the database clock"
    );
    let granted_after = match contender_skew {
        None => {
            let c = locksmith::connect(url).await.unwrap();
            let g = c
                .lock_with(NAME, locksmith::LockOptions::new().timeout(Duration::from_secs(5)))
                .await
                .unwrap_or_else(|e| panic!("contender: {e}"));
            let at = stopped.elapsed();
            assert!(g.unlock().await.unwrap());
            c.close().await;
            at
        }
        Some(skew) => {
            // The command runs at the grant and exits at once: the process's exit is the grant
            // (plus its start-up, which only adds to the measured wait).
            let out = faketime(skew, BIN)
                .args(["run", NAME, "--backend", url, "--ttl", TTL, "--timeout", "5s", "--", "true"])
                .stdin(Stdio::null())
                .output()
                .unwrap();
            let at = stopped.elapsed();
            assert!(out.status.success(), "contender skewed {skew}: {}", String::from_utf8_lossy(&out.stderr));
            at
        }
    };
    let label = format!("holder {holder_skew}, contender {}", contender_skew.unwrap_or("unskewed"));
    assert!(
        granted_after + Duration::from_millis(100) >= left,
        "{label}: granted after {granted_after:?}, lease had {left:?} left"
    );
    assert!(
        granted_after <= left + Duration::from_millis(1500),
        "{label}: granted only after {granted_after:?} ({left:?} left)"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_takeover_waits_for_the_database_clock_whatever_the_clients_clocks() {
    assert_skews("-1h", -3600);
    assert_skews("+1h", 3600);
    let server = PostgresServer::start();
    takeover_is_by_the_database_clock(&server.url(), "-1h", None).await;
    takeover_is_by_the_database_clock(&server.url(), "-1h", Some("+1h")).await;
    takeover_is_by_the_database_clock(&server.url(), "+1h", None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_takeover_waits_for_the_database_clock_whatever_the_clients_clocks() {
    assert_skews("-1h", -3600);
    assert_skews("+1h", 3600);
    let server = MySqlServer::start();
    takeover_is_by_the_database_clock(&server.url(), "-1h", None).await;
    takeover_is_by_the_database_clock(&server.url(), "-1h", Some("+1h")).await;
    takeover_is_by_the_database_clock(&server.url(), "+1h", None).await;
}
