//! Beyond the mutex in the lease mode (issue 19): read/write locks and semaphores with leased
//! permits on PostgreSQL 15, MariaDB 10.11 and a SQLite file, through the shared property
//! functions of `locksmith_core::conformance::primitives` (`rwlock_suite!` and
//! `semaphore_suite!`: the SQL driver offers no elections, so `primitives_suite!` does not fit),
//! which hold every clause of the primitives (tokens, status, cancelled waiters, a name being a
//! lock or a semaphore); then what is particular to SQL: writer preference with announcements,
//! and a released semaphore's name free for any use (Redis keeps a semaphore's name one).
//! PostgreSQL's advisory mode offers read/write locks too (shared advisory locks): the
//! read/write properties run there as well.

use std::sync::OnceLock;
use std::time::Duration;

use locksmith::LockOptions;
use locksmith_core::conformance::UrlTarget;
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
            async fn a_released_semaphores_name_is_free_for_another_number_or_a_lock() {
                super::a_released_semaphores_name_is_free_for_another_number_or_a_lock(&$url).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_writer_that_gives_up_lets_waiting_readers_in_at_once() {
                super::a_writer_that_gives_up_lets_waiting_readers_in_at_once(&$url).await;
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

    // `status` shows no holder of an advisory lock (the database session holds it).
    locksmith_core::rwlock_suite!(target(url()).reports_holders(false));

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_writer_that_gives_up_lets_waiting_readers_in_at_once() {
        super::a_writer_that_gives_up_lets_waiting_readers_in_at_once(&url()).await;
    }
}

properties!(mariadb, mariadb_url());
properties!(sqlite, sqlite_url());

fn unique(prefix: &str) -> String {
    format!("{prefix}-{:08x}", rand::random::<u32>())
}

async fn connect(url: &str) -> locksmith::Client {
    locksmith::connect(url).await.unwrap_or_else(|e| panic!("connect: {e}"))
}

/// Once nobody holds a permit, a semaphore's name is free for anything: another number of
/// permits, or a lock.
async fn a_released_semaphores_name_is_free_for_another_number_or_a_lock(url: &str) {
    let c = connect(url).await;
    let name = unique("free-again");
    let g = c.lock_with(&name, LockOptions::new().permits(4)).await.unwrap_or_else(|e| panic!("permit: {e}"));
    assert!(g.unlock().await.unwrap_or(false));
    let g = c.lock_with(&name, LockOptions::new().permits(7)).await.unwrap_or_else(|e| panic!("new N: {e}"));
    assert!(g.unlock().await.unwrap_or(false));
    let g = c.lock(&name).await.unwrap_or_else(|e| panic!("as a lock now: {e}"));
    assert!(g.unlock().await.unwrap_or(false));
    c.close().await;
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
