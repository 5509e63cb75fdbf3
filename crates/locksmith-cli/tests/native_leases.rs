//! `locksmith serve --durability leases` as an operator sees it: no disk wait per grant, yet
//! after `kill -9` tokens still only go up, and nobody is granted a lock while a holder of the
//! crashed run may still trust its lease.

use std::time::{Duration, Instant};

use locksmith::LockOptions;
use locksmith_testkit::NativeServer;

const BIN: &str = env!("CARGO_BIN_EXE_locksmith");

fn server() -> NativeServer {
    NativeServer::start_with(BIN.as_ref(), &["--durability", "leases"])
}

/// The crashed run's holder keeps trusting its lease until its local deadline; the restarted
/// server grants nobody the lock before one TTL has passed, then grants it with a higher token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_crash_no_grant_before_the_old_lease_ended_and_tokens_continue_above() {
    let ttl = Duration::from_secs(2);
    let mut s = server();
    let holder = locksmith::connect_with_ttl(&s.url(), ttl).await.unwrap();
    let mut last = 0;
    for _ in 0..5 {
        let g = holder.lock("leases").await.unwrap();
        assert!(g.token() > last);
        last = g.token();
        g.unlock().await.unwrap();
    }
    let g = holder.lock("leases").await.unwrap();
    let held = g.token();

    s.kill9();
    s.restart();
    let restarted = Instant::now();

    let other = locksmith::connect_with_ttl(&s.url(), Duration::from_secs(5)).await.unwrap();
    let next = other.lock_with("leases", LockOptions::new().timeout(Duration::from_secs(10))).await.unwrap();
    let waited = restarted.elapsed();
    assert!(waited >= ttl - Duration::from_millis(100), "granted {waited:?} after the restart, TTL is {ttl:?}");
    assert!(next.token() > held, "token {} after the restart is not above {held}", next.token());
    assert!(!g.is_held(), "the old holder's deadline passed before the new grant");
    next.unlock().await.unwrap();
}

/// Tokens seen by a client hammering a lock never repeat or go backwards across repeated
/// `kill -9` + restart, although grants are not written to disk one by one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_never_go_backwards_across_repeated_crashes_without_per_grant_syncs() {
    let mut s = server();
    let c = locksmith::connect_with_ttl(&s.url(), Duration::from_millis(300)).await.unwrap();
    let mut seen = Vec::new();
    for round in 0..4 {
        let mut got = 0;
        while got < 20 {
            // The first call after a restart learns that the old session is gone; the next
            // opens a new one.
            match c.lock_with("hammer", LockOptions::new().timeout(Duration::from_secs(5))).await {
                Ok(g) => {
                    seen.push(g.token());
                    let _ = g.unlock().await;
                    got += 1;
                }
                Err(locksmith::Error::SessionExpired) => {}
                Err(e) => panic!("round {round}: {e}"),
            }
        }
        s.kill9();
        s.restart();
    }
    for w in seen.windows(2) {
        assert!(w[1] > w[0], "token {} came after {}", w[1], w[0]);
    }
}
