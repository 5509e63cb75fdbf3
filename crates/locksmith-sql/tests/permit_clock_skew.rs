//! A permit's lease is decided by the database's clock, never a client's: a client whose wall
//! clock is an hour off (libfaketime, monotonic clock left alone so tokio's timers work) takes a
//! semaphore's only permit and crashes; its permit comes back exactly when its lease ends by the
//! database clock — not at once (as a lease computed from a clock an hour behind would), not an
//! hour later (an hour ahead).
//!
//! The skewed client is this test binary run again with libfaketime preloaded (the helper test below does
//! nothing unless its environment variable is set), so no other binary is needed.
//!
//! PostgreSQL and MariaDB only: SQLite has no server, `julianday('now')` is each client's own
//! clock (documented in the crate).

use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use locksmith::{HoldMode, LockOptions};
use locksmith_testkit::{skew_clock, MySqlServer, PostgresServer};

const TTL: Duration = Duration::from_secs(2);
const NAME: &str = "skewed-sem";
/// `<url> <output file>`: set only for the helper, in the child process.
const CHILD: &str = "LOCKSMITH_SQL_SKEWED_PERMIT_HOLDER";

/// Run in the child under `faketime`: takes the one permit, writes its token and the child's
/// wall clock (seconds) to the output file, and exits without releasing (a crash: no `Drop`, no
/// cleanup). A no-op in an ordinary test run.
#[test]
fn helper_a_skewed_client_takes_the_permit_and_crashes() {
    let Ok(spec) = std::env::var(CHILD) else { return };
    let (url, out) = spec.split_once(' ').unwrap_or_else(|| panic!("{CHILD}: {spec:?}"));
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap_or_else(|e| panic!("{e}"));
    rt.block_on(async {
        let c = locksmith::connect_with_ttl(url, TTL).await.unwrap_or_else(|e| panic!("connect: {e}"));
        let opts = LockOptions::new().permits(1).timeout(Duration::from_secs(5));
        let g = c.lock_with(NAME, opts).await.unwrap_or_else(|e| panic!("permit: {e}"));
        let now = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
        std::fs::write(out, format!("{} {now}", g.token())).unwrap_or_else(|e| panic!("{e}"));
        std::process::exit(0);
    });
}

/// Runs the helper under `faketime -f skew`; returns its token and its wall clock.
fn skewed_holder(url: &str, skew: &str) -> (u64, i64) {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let out = dir.path().join("granted");
    let exe = std::env::current_exe().unwrap_or_else(|e| panic!("{e}"));
    let mut cmd = Command::new(exe);
    let status = skew_clock(&mut cmd, skew)
        .args(["--exact", "helper_a_skewed_client_takes_the_permit_and_crashes", "--test-threads=1", "--quiet"])
        .env(CHILD, format!("{url} {}", out.display()))
        .stdout(Stdio::null())
        .status()
        .unwrap_or_else(|e| panic!("cannot run the skewed holder: {e}"));
    assert!(status.success(), "the skewed holder failed: {status}");
    let text = std::fs::read_to_string(&out).unwrap_or_else(|e| panic!("the skewed holder wrote nothing: {e}"));
    let mut parts = text.split_whitespace().map(|p| p.parse::<i64>().unwrap_or_else(|e| panic!("{text:?}: {e}")));
    let (token, clock) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    (u64::try_from(token).unwrap_or(0), clock)
}

/// The skewed holder's permit comes back when its lease ends by the database clock.
async fn the_permit_comes_back_by_the_database_clock(url: &str, skew: &str, expect_secs: i64) {
    let (token, clock) = skewed_holder(url, skew);
    let exited = Instant::now();
    let now = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs() as i64).unwrap_or(0);
    assert!((clock - now - expect_secs).abs() < 30, "faketime {skew}: the child's clock was {clock}, ours {now}");
    let c = locksmith::connect_with_ttl(url, TTL).await.unwrap_or_else(|e| panic!("connect: {e}"));
    let st = c.status(Some(NAME)).await.unwrap_or_else(|e| panic!("status: {e}"));
    let holder = st.first().and_then(|s| s.holder.clone()).unwrap_or_else(|| {
        panic!("holder {skew}: no live permit right after its grant (a lease from a clock an hour behind): {st:?}")
    });
    assert_eq!((holder.token, holder.mode), (token, HoldMode::Permit(1)));
    let left = holder.ttl_left.unwrap_or_default();
    // A lease from a clock an hour ahead would have about an hour left.
    assert!(left > Duration::from_millis(500) && left <= TTL, "holder {skew}: {left:?} left by the database clock");
    let g = c
        .lock_with(NAME, LockOptions::new().permits(1).timeout(Duration::from_secs(5)))
        .await
        .unwrap_or_else(|e| panic!("the crashed holder's permit did not come back: {e}"));
    let after = exited.elapsed();
    assert!(after + Duration::from_millis(100) >= left, "holder {skew}: granted after {after:?}, {left:?} were left");
    assert!(after <= left + Duration::from_millis(1500), "holder {skew}: granted only after {after:?} ({left:?} left)");
    assert!(g.token() > token, "token {} after {token}", g.token());
    assert!(g.unlock().await.unwrap_or(false));
    c.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_permit_of_a_client_an_hour_off_expires_by_the_database_clock() {
    let server = PostgresServer::start();
    the_permit_comes_back_by_the_database_clock(&server.url(), "-1h", -3600).await;
    the_permit_comes_back_by_the_database_clock(&server.url(), "+1h", 3600).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_a_permit_of_a_client_an_hour_off_expires_by_the_database_clock() {
    let server = MySqlServer::start();
    the_permit_comes_back_by_the_database_clock(&server.url(), "-1h", -3600).await;
    the_permit_comes_back_by_the_database_clock(&server.url(), "+1h", 3600).await;
}
