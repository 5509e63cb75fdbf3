//! Beyond the mutex in the lease mode (issue 19): read/write locks and semaphores with leased
//! permits on PostgreSQL 15, MariaDB 10.11 and a SQLite file, through the shared property
//! functions of `locksmith_core::conformance::primitives` (`rwlock_suite!` and
//! `semaphore_suite!`: the SQL driver offers no elections, so `primitives_suite!` does not fit),
//! then what is particular to SQL: status rows, cross-kind refusals, and the cleanup of abandoned
//! acquisitions. PostgreSQL's advisory mode offers read/write locks too (shared advisory locks):
//! the read/write properties run there as well.

use std::sync::OnceLock;
use std::time::Duration;

use locksmith::{HoldMode, LockOptions};
use locksmith_core::conformance::{eventually, UrlTarget};
use locksmith_testkit::{temp_dir_for_process, MySqlServer, PostgresServer, ProcessTempDir};

static PG: OnceLock<PostgresServer> = OnceLock::new();
static MY: OnceLock<MySqlServer> = OnceLock::new();

fn target(url: String) -> UrlTarget {
    UrlTarget::new(url, locksmith::backend).fifo(false).reports_waiters(false)
}

fn postgres_url() -> String {
    PG.get_or_init(PostgresServer::start).url()
}

fn mariadb_url() -> String {
    MY.get_or_init(MySqlServer::start).url()
}

fn sqlite_url() -> String {
    // One database for the whole binary, in a dir removed once the test process is gone.
    static DIR: OnceLock<ProcessTempDir> = OnceLock::new();
    let dir = DIR.get_or_init(|| {
        temp_dir_for_process(std::path::Path::new(env!("CARGO_TARGET_TMPDIR")), "locksmith-sql-primitives-")
    });
    let path = dir.path().join("locks.db");
    format!("sqlite://{}", path.display())
}

/// One `#[tokio::test]` per property and database.
macro_rules! properties {
    ($db:ident, $url:expr) => {
        mod $db {
            use super::*;

            locksmith_core::rwlock_suite!(target($url));
            locksmith_core::semaphore_suite!(target($url));

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn status_shows_every_reader_and_permit_with_its_kind() {
                super::status_shows_every_reader_and_permit_with_its_kind(&$url).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_lock_in_use_refuses_permits_and_a_semaphore_refuses_readers() {
                super::a_lock_in_use_refuses_permits_and_a_semaphore_refuses_readers(&$url).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_writer_that_gives_up_lets_waiting_readers_in_at_once() {
                super::a_writer_that_gives_up_lets_waiting_readers_in_at_once(&$url).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_dropped_acquisition_of_a_permit_or_read_lock_leaves_no_row() {
                super::a_dropped_acquisition_of_a_permit_or_read_lock_leaves_no_row(&$url).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn every_grant_of_every_kind_takes_the_next_token() {
                super::every_grant_of_every_kind_takes_the_next_token(&$url).await;
            }
        }
    };
}

properties!(postgres, postgres_url());

/// Read/write locks on PostgreSQL advisory locks (`?mode=advisory`); semaphores are refused there
/// (`primitives_are_offered_or_refused_clearly`, in the conformance suite).
mod postgres_advisory {
    use super::*;

    fn url() -> String {
        format!("{}?mode=advisory", postgres_url())
    }

    locksmith_core::rwlock_suite!(target(url()));

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_writer_that_gives_up_lets_waiting_readers_in_at_once() {
        super::a_writer_that_gives_up_lets_waiting_readers_in_at_once(&url()).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn every_grant_of_every_kind_takes_the_next_token() {
        let c = connect(&url()).await;
        let name = unique("tokens");
        writers_and_readers_take_the_next_token(&c, &name).await;
        let r = c.try_lock_with(&name, LockOptions::new().permits(2)).await;
        assert!(matches!(r, Err(locksmith::Error::Unsupported(_))), "{r:?}");
        c.close().await;
    }
}
properties!(mariadb, mariadb_url());
properties!(sqlite, sqlite_url());

fn unique(prefix: &str) -> String {
    format!("{prefix}-{:08x}", rand::random::<u32>())
}

/// A writer, two readers and a writer of `name` in turn: each grant's token is above the last.
async fn writers_and_readers_take_the_next_token(c: &locksmith::Client, name: &str) {
    let mut last = 0;
    for opts in [LockOptions::new(), LockOptions::new().shared(), LockOptions::new().shared(), LockOptions::new()] {
        let g = c.lock_with(name, opts).await.unwrap_or_else(|e| panic!("lock: {e}"));
        assert!(g.token() > last, "token {} after {last}", g.token());
        last = g.token();
        assert!(g.unlock().await.unwrap_or(false));
    }
}

async fn connect(url: &str) -> locksmith::Client {
    locksmith::connect(url).await.unwrap_or_else(|e| panic!("connect: {e}"))
}

/// Status lists every live holder with its kind: two readers (then a writer alone), or the
/// holders of a semaphore with its number of permits.
async fn status_shows_every_reader_and_permit_with_its_kind(url: &str) {
    let (a, b) = (connect(url).await, connect(url).await);
    let rw = unique("status-rw");
    let r1 = a.lock_with(&rw, LockOptions::new().shared()).await.unwrap_or_else(|e| panic!("read: {e}"));
    let r2 = b.lock_with(&rw, LockOptions::new().shared()).await.unwrap_or_else(|e| panic!("read: {e}"));
    let st = a.status(Some(&rw)).await.unwrap_or_else(|e| panic!("status: {e}"));
    let st = st.first().unwrap_or_else(|| panic!("no status for {rw}"));
    let seen: Vec<(u64, HoldMode)> = st.holders.iter().map(|h| (h.token, h.mode)).collect();
    assert_eq!(seen, vec![(r1.token(), HoldMode::Shared), (r2.token(), HoldMode::Shared)]);
    assert_eq!((st.permits, st.last_token), (None, r2.token()));
    assert!(st.holders.iter().all(|h| h.ttl_left.is_some_and(|t| t > Duration::ZERO)), "{st:?}");
    assert_eq!(st.holder.as_ref().map(|h| h.token), Some(r1.token()), "holder is the first of them");
    drop((r1.unlock().await, r2.unlock().await));
    let w = a.lock(&rw).await.unwrap_or_else(|e| panic!("write: {e}"));
    let st = a.status(Some(&rw)).await.unwrap_or_else(|e| panic!("status: {e}"));
    let modes: Vec<HoldMode> = st.iter().flat_map(|s| s.holders.iter().map(|h| h.mode)).collect();
    assert_eq!(modes, vec![HoldMode::Exclusive]);
    assert!(w.unlock().await.unwrap_or(false));

    let sem = unique("status-sem");
    let p1 = a.lock_with(&sem, LockOptions::new().permits(3)).await.unwrap_or_else(|e| panic!("permit: {e}"));
    let p2 = b.lock_with(&sem, LockOptions::new().permits(3)).await.unwrap_or_else(|e| panic!("permit: {e}"));
    let all = a.status(None).await.unwrap_or_else(|e| panic!("status: {e}"));
    let st = all.iter().find(|s| s.name == sem).unwrap_or_else(|| panic!("{sem} missing from {all:?}"));
    assert_eq!(st.permits, Some(3));
    let seen: Vec<(u64, HoldMode)> = st.holders.iter().map(|h| (h.token, h.mode)).collect();
    assert_eq!(seen, vec![(p1.token(), HoldMode::Permit(3)), (p2.token(), HoldMode::Permit(3))]);
    drop((p1.unlock().await, p2.unlock().await));
    let st = a.status(Some(&sem)).await.unwrap_or_else(|e| panic!("status: {e}"));
    assert!(st.iter().all(|s| s.holders.is_empty() && s.permits.is_none()), "released: {st:?}");
    a.close().await;
    b.close().await;
}

/// A name held as a lock (read or write) is not a semaphore, and a semaphore's name is not a
/// lock: both are refused clearly, even when waiting, and nothing is left behind.
async fn a_lock_in_use_refuses_permits_and_a_semaphore_refuses_readers(url: &str) {
    let (a, b) = (connect(url).await, connect(url).await);
    let wait = |o: LockOptions| o.timeout(Duration::from_secs(2));
    for holding in [LockOptions::new(), LockOptions::new().shared()] {
        let name = unique("as-lock");
        let g = a.lock_with(&name, holding).await.unwrap_or_else(|e| panic!("lock: {e}"));
        let r = b.lock_with(&name, wait(LockOptions::new().permits(2))).await;
        assert!(
            matches!(&r, Err(locksmith::Error::InvalidArgument(m)) if m.contains("in use as a lock")),
            "permit of a lock: {r:?}"
        );
        assert!(g.unlock().await.unwrap_or(false));
    }
    let name = unique("as-sem");
    let g = a.lock_with(&name, LockOptions::new().permits(4)).await.unwrap_or_else(|e| panic!("permit: {e}"));
    let r = b.lock_with(&name, wait(LockOptions::new().shared())).await;
    assert!(
        matches!(&r, Err(locksmith::Error::InvalidArgument(m)) if m.contains("semaphore of 4 permits")),
        "read lock of a semaphore: {r:?}"
    );
    assert!(g.unlock().await.unwrap_or(false));
    // Once nobody holds a permit, the name is free for anything.
    let g = b.lock_with(&name, LockOptions::new().permits(7)).await.unwrap_or_else(|e| panic!("new N: {e}"));
    assert!(g.unlock().await.unwrap_or(false));
    let g = b.lock(&name).await.unwrap_or_else(|e| panic!("as a lock now: {e}"));
    assert!(g.unlock().await.unwrap_or(false));
    a.close().await;
    b.close().await;
}

/// A writer waiting behind a reader keeps new readers out (writer preference); when it gives
/// up (its timeout) its announcement goes with it, and readers get in at once rather than after
/// the announcement's lease.
async fn a_writer_that_gives_up_lets_waiting_readers_in_at_once(url: &str) {
    let (a, w, c) = (connect(url).await, connect(url).await, connect(url).await);
    let name = unique("giving-up");
    let reader = a.lock_with(&name, LockOptions::new().shared()).await.unwrap_or_else(|e| panic!("read: {e}"));
    let writer = {
        let (w, name) = (w.clone(), name.clone());
        tokio::spawn(async move { w.lock_with(&name, LockOptions::new().timeout(Duration::from_millis(600))).await })
    };
    tokio::time::sleep(Duration::from_millis(250)).await;
    let kept_out = c.try_lock_with(&name, LockOptions::new().shared()).await.unwrap_or_else(|e| panic!("{e}"));
    assert!(kept_out.is_none(), "a new reader got in while a writer was waiting");
    let r = writer.await.unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()));
    assert!(matches!(r, Err(locksmith::Error::Timeout)), "{r:?}");
    let gave_up = std::time::Instant::now();
    let g = c
        .lock_with(&name, LockOptions::new().shared().timeout(Duration::from_secs(3)))
        .await
        .unwrap_or_else(|e| panic!("read after the writer gave up: {e}"));
    assert!(
        gave_up.elapsed() < Duration::from_millis(1000),
        "readers waited {:?} after the writer gave up (its announcement outlived it)",
        gave_up.elapsed()
    );
    drop((g.unlock().await, reader.unlock().await));
    for client in [a, w, c] {
        client.close().await;
    }
}

/// Dropping a waiting acquisition of a permit or a read lock, or of a writer behind readers,
/// leaves neither a hold nor an announcement: the slots stay free for others.
async fn a_dropped_acquisition_of_a_permit_or_read_lock_leaves_no_row(url: &str) {
    let (a, b) = (connect(url).await, connect(url).await);
    // A permit waiter behind a full semaphore of 1, dropped; then the holder leaves.
    let sem = unique("dropped-permit");
    let held = a.lock_with(&sem, LockOptions::new().permits(1)).await.unwrap_or_else(|e| panic!("permit: {e}"));
    let waiter = tokio::time::timeout(Duration::from_millis(300), b.lock_with(&sem, LockOptions::new().permits(1)));
    assert!(waiter.await.is_err(), "the semaphore of 1 was full");
    assert!(held.unlock().await.unwrap_or(false));
    // The dropped waiter's row goes in the background.
    eventually("a dropped permit waiter left a hold", || async {
        a.status(Some(&sem)).await.is_ok_and(|st| st.iter().all(|s| s.holders.is_empty()))
    })
    .await;
    let st = a.status(Some(&sem)).await.unwrap_or_else(|e| panic!("status: {e}"));
    assert!(st.iter().all(|s| s.holders.is_empty()), "a dropped permit waiter left a hold: {st:?}");
    let g = a.try_lock_with(&sem, LockOptions::new().permits(1)).await.unwrap_or_else(|e| panic!("{e}"));
    assert!(g.is_some(), "the permit was not free");
    drop(g);
    // A writer behind a reader, dropped: the reader's company may come in at once.
    let rw = unique("dropped-writer");
    let reader = a.lock_with(&rw, LockOptions::new().shared()).await.unwrap_or_else(|e| panic!("read: {e}"));
    let writer = tokio::time::timeout(Duration::from_millis(300), b.lock(&rw));
    assert!(writer.await.is_err(), "the writer got in beside a reader");
    // The dropped writer's announcement goes in the background.
    eventually("a dropped writer's announcement kept readers out", || async {
        matches!(b.try_lock_with(&rw, LockOptions::new().shared()).await, Ok(Some(_)))
    })
    .await;
    let g = b.try_lock_with(&rw, LockOptions::new().shared()).await.unwrap_or_else(|e| panic!("{e}"));
    assert!(g.is_some(), "a dropped writer's announcement kept readers out");
    drop(g);
    assert!(reader.unlock().await.unwrap_or(false));
    a.close().await;
    b.close().await;
}

/// Readers, writers and permit holders of one name each take the next fencing token: strictly
/// increasing per grant, whatever the kind (the counter is shared by every kind).
async fn every_grant_of_every_kind_takes_the_next_token(url: &str) {
    let c = connect(url).await;
    let name = unique("tokens");
    writers_and_readers_take_the_next_token(&c, &name).await;
    let sem = unique("tokens-sem");
    let g1 = c.lock_with(&sem, LockOptions::new().permits(2)).await.unwrap_or_else(|e| panic!("permit: {e}"));
    let g2 = c.lock_with(&sem, LockOptions::new().permits(2)).await.unwrap_or_else(|e| panic!("permit: {e}"));
    assert_eq!((g1.token(), g2.token()), (1, 2), "a busy attempt never takes a token");
    drop((g1.unlock().await, g2.unlock().await));
    c.close().await;
}
