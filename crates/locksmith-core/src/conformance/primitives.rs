//! The contract beyond the mutex (DESIGN.md §4b), one function per property: read/write locks,
//! semaphores with leased permits, multi-lock and leader election. A driver that offers a
//! primitive expands [`primitives_suite!`](crate::primitives_suite) for it. Multi-lock (written
//! once in the engine) and [`primitives_are_offered_or_refused_clearly`] are in every driver's
//! main suite.

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::{client, unique, Target, TTL};
use crate::{Error, HoldMode, LockOptions};

pub use super::holding::{
    a_cancelled_permit_waiter_leaves_no_entry_and_takes_no_permit,
    a_cancelled_reader_or_writer_leaves_no_entry_and_no_hold, a_name_is_a_lock_or_a_semaphore_never_both,
    a_write_unlock_admits_the_queued_readers_up_to_the_next_writer,
    every_grant_of_a_read_write_lock_takes_the_next_token, every_permit_takes_the_next_token,
    permit_waiters_get_whichever_permit_comes_free_in_arrival_order, status_shows_every_permit_holder_and_the_permits,
    status_shows_every_reader_then_the_writer_alone,
};

/// The next leader an observer reports, within 5 s.
async fn next(l: &mut crate::Observer) -> Option<crate::Leader> {
    match tokio::time::timeout(Duration::from_secs(5), l.next()).await {
        Ok(Some(Ok(leader))) => leader,
        other => panic!("no leader change observed: {other:?}"),
    }
}

async fn join_all(tasks: Vec<tokio::task::JoinHandle<()>>) {
    for task in tasks {
        if let Err(e) = task.await {
            std::panic::resume_unwind(e.into_panic());
        }
    }
}

/// Read/write lock: readers hold together, never with a writer; 6 readers and 2 writers
/// contending never overlap wrongly, and every grant's token is unique.
pub async fn readers_share_and_never_overlap_a_writer(t: &dyn Target) {
    let name = unique("rw");
    // Readers inside (≥ 0), or -1 while a writer is inside.
    let inside = Arc::new(AtomicI64::new(0));
    let max_readers = Arc::new(AtomicI64::new(0));
    let tokens = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 0..8 {
        let c = client(t, TTL).await;
        let writer = i < 2;
        let (name, inside, max_readers, tokens) = (name.clone(), inside.clone(), max_readers.clone(), tokens.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..6 {
                let opts = if writer { LockOptions::new() } else { LockOptions::new().shared() };
                let g = c.lock_with(&name, opts).await.unwrap_or_else(|e| panic!("lock: {e}"));
                tokens.lock().unwrap_or_else(|p| p.into_inner()).push(g.token());
                if writer {
                    let before = inside.swap(-1, Ordering::SeqCst);
                    assert_eq!(before, 0, "a writer got in while {before} (−1: a writer) held the lock");
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    inside.store(0, Ordering::SeqCst);
                } else {
                    let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                    assert!(now >= 1, "a reader got in while a writer held the lock");
                    max_readers.fetch_max(now, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    inside.fetch_sub(1, Ordering::SeqCst);
                }
                assert!(g.unlock().await.unwrap_or_else(|e| panic!("unlock: {e}")));
            }
            c.close().await;
        }));
    }
    join_all(tasks).await;
    assert!(max_readers.load(Ordering::SeqCst) >= 2, "readers never held the lock together");
    let mut all = tokens.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let n = all.len();
    all.sort_unstable();
    all.dedup();
    assert_eq!(all.len(), n, "a token was handed out twice");
}

/// A writer gets in while readers keep arriving: waiters are served in arrival order, so a
/// stream of readers cannot starve it.
pub async fn a_writer_gets_in_while_readers_keep_arriving(t: &dyn Target) {
    let name = unique("rw-starve");
    let stop = Arc::new(AtomicBool::new(false));
    let mut readers = Vec::new();
    for _ in 0..3 {
        let c = client(t, TTL).await;
        let (name, stop) = (name.clone(), stop.clone());
        readers.push(tokio::spawn(async move {
            while !stop.load(Ordering::SeqCst) {
                let g = c.lock_with(&name, LockOptions::new().shared()).await.unwrap_or_else(|e| panic!("read: {e}"));
                tokio::time::sleep(Duration::from_millis(20)).await;
                let _ = g.unlock().await;
            }
            c.close().await;
        }));
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let w = client(t, TTL).await;
    let g = w.lock_with(&name, LockOptions::new().timeout(Duration::from_secs(5))).await;
    stop.store(true, Ordering::SeqCst);
    let g = g.unwrap_or_else(|e| panic!("the writer was starved by readers: {e}"));
    assert!(g.unlock().await.unwrap_or(false));
    w.close().await;
    join_all(readers).await;
}

/// A semaphore of 3 permits: 8 clients never hold more than 3 at once, and all finish.
pub async fn a_semaphore_never_exceeds_its_permits(t: &dyn Target) {
    let name = unique("sem");
    let inside = Arc::new(AtomicI64::new(0));
    let most = Arc::new(AtomicI64::new(0));
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let c = client(t, TTL).await;
        let (name, inside, most) = (name.clone(), inside.clone(), most.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..4 {
                let g =
                    c.lock_with(&name, LockOptions::new().permits(3)).await.unwrap_or_else(|e| panic!("permit: {e}"));
                let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                assert!(now <= 3, "{now} holders of a 3-permit semaphore");
                most.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(3)).await;
                inside.fetch_sub(1, Ordering::SeqCst);
                assert!(g.unlock().await.unwrap_or_else(|e| panic!("unlock: {e}")));
            }
            c.close().await;
        }));
    }
    join_all(tasks).await;
    assert!(most.load(Ordering::SeqCst) >= 2, "permits were never held together");
}

/// A permit whose holder's session ends comes back at once (a closed session) — a crashed
/// holder's after its TTL (checked with real processes by the CLI's tests).
pub async fn a_permit_comes_back_when_its_holders_session_ends(t: &dyn Target) {
    let name = unique("sem-lease");
    let a = client(t, TTL).await;
    let b = client(t, TTL).await;
    let held = a.lock_with(&name, LockOptions::new().permits(1)).await.unwrap_or_else(|e| panic!("permit: {e}"));
    assert!(b.try_lock_with(&name, LockOptions::new().permits(1)).await.unwrap_or_else(|e| panic!("{e}")).is_none());
    a.close().await;
    let got = b.lock_with(&name, LockOptions::new().permits(1).timeout(Duration::from_secs(5))).await;
    let got = got.unwrap_or_else(|e| panic!("the closed holder's permit did not come back: {e}"));
    assert!(got.token() > held.token());
    drop(held);
    b.close().await;
}

/// §2.8 with the primitives: an owner's re-entry shares its hold only as the same kind of
/// hold with the same value; a write lock over its read lock, another number of permits or
/// another proposal is refused (the guard would claim what is not held), and the hold it has
/// stays as it was.
pub async fn reentering_with_a_different_mode_is_refused(t: &dyn Target) {
    let a = client(t, TTL).await;
    let b = client(t, TTL).await;
    let owner = || LockOptions::new().owner("worker-1").timeout(Duration::from_secs(2));
    let cases = [
        (owner().shared(), owner()),
        (owner(), owner().shared()),
        (owner().permits(3), owner().permits(5)),
        (owner().value("alpha:1"), owner().value("beta:2")),
    ];
    for (first, second) in cases {
        // A name per case: a semaphore's name keeps its number of permits while in use.
        let name = unique("reenter-mode");
        let mode = first.mode();
        let g = a.lock_with(&name, first).await.unwrap_or_else(|e| panic!("lock as {mode}: {e}"));
        let r = a.try_lock_with(&name, second).await;
        assert!(
            matches!(r, Err(Error::InvalidArgument(_))),
            "re-entry over a {mode} hold: expected a refusal, got {r:?}"
        );
        assert!(g.is_held(), "a refused re-entry lost the {mode} hold");
        if mode == HoldMode::Shared {
            // Still only a read lock: another reader gets in, a writer does not.
            let reader = b.try_lock_with(&name, LockOptions::new().shared()).await;
            let reader = reader.unwrap_or_else(|e| panic!("another reader: {e}"));
            let reader = reader.unwrap_or_else(|| panic!("another reader was refused next to a read lock"));
            assert!(reader.unlock().await.unwrap_or(false));
        }
        if mode == HoldMode::Exclusive {
            let busy = b.try_lock(&name).await.unwrap_or_else(|e| panic!("try_lock: {e}"));
            assert!(busy.is_none(), "the lock was freed by a refused re-entry");
        }
        assert!(g.unlock().await.unwrap_or(false), "release after a refused re-entry");
    }
    a.close().await;
    b.close().await;
}

/// Multi-lock: two clients taking overlapping sets in opposite orders never deadlock (the
/// engine takes names in one order), and each gets one token per name.
pub async fn lock_all_never_deadlocks_and_gives_a_token_per_name(t: &dyn Target) {
    let (x, y, z) = (unique("multi-x"), unique("multi-y"), unique("multi-z"));
    let a = client(t, TTL).await;
    let b = client(t, TTL).await;
    let rounds = Arc::new(AtomicU64::new(0));
    let run = |c: crate::Client, names: Vec<String>, rounds: Arc<AtomicU64>| {
        tokio::spawn(async move {
            for _ in 0..10 {
                let refs: Vec<&str> = names.iter().map(String::as_str).collect();
                let opts = LockOptions::new().timeout(Duration::from_secs(10));
                let all = c.lock_all(&refs, opts).await.unwrap_or_else(|e| panic!("lock_all: {e}"));
                assert_eq!(all.tokens().len(), refs.len());
                assert!(all.is_held());
                rounds.fetch_add(1, Ordering::SeqCst);
                assert!(all.unlock().await.unwrap_or(false));
            }
            c.close().await;
        })
    };
    let t1 = run(a, vec![x.clone(), y.clone(), z.clone()], rounds.clone());
    let t2 = run(b, vec![z, y, x], rounds.clone());
    join_all(vec![t1, t2]).await;
    assert_eq!(rounds.load(Ordering::SeqCst), 20);
}

/// Multi-lock is all or nothing: when one name stays held by someone else, a timed-out
/// `lock_all` leaves none of the others held.
pub async fn lock_all_that_times_out_holds_nothing(t: &dyn Target) {
    let (free, busy) = (unique("multi-free"), unique("multi-busy"));
    let a = client(t, TTL).await;
    let b = client(t, TTL).await;
    let held = a.lock(&busy).await.unwrap_or_else(|e| panic!("lock: {e}"));
    let r = b.lock_all(&[&free, &busy], LockOptions::new().timeout(Duration::from_millis(300))).await;
    assert!(matches!(r, Err(Error::Timeout)), "expected a timeout, got {r:?}");
    let g = a.try_lock(&free).await.unwrap_or_else(|e| panic!("{e}"));
    assert!(g.is_some(), "a name taken by the failed lock_all was left held");
    drop(g);
    drop(held);
    a.close().await;
    b.close().await;
}

/// Leader election: an observer sees the leader and its proposal; when it resigns, the next
/// candidate leads with a higher term, and the observer sees that too.
pub async fn the_next_leader_has_a_higher_term_and_observers_see_both(t: &dyn Target) {
    let name = unique("election");
    let (a, b, o) = (client(t, TTL).await, client(t, TTL).await, client(t, TTL).await);
    let first = a.campaign(&name, "alpha:1", LockOptions::new()).await.unwrap_or_else(|e| panic!("campaign: {e}"));
    let mut leaders = o.observe(&name).await.unwrap_or_else(|e| panic!("observe: {e}"));
    let now = next(&mut leaders).await.unwrap_or_else(|| panic!("no leader observed while alpha leads"));
    assert_eq!((now.value.as_deref(), now.term), (Some("alpha:1"), first.token()));
    let second = {
        let b = b.clone();
        let name = name.clone();
        tokio::spawn(async move { b.campaign(&name, "beta:2", LockOptions::new()).await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(first.unlock().await.unwrap_or(false), "resign");
    let second = second.await.unwrap_or_else(|e| panic!("{e}")).unwrap_or_else(|e| panic!("campaign: {e}"));
    assert!(second.token() > now.term, "term {} after {}", second.token(), now.term);
    // Between the two leaders the observer may see a moment without one.
    let mut seen = next(&mut leaders).await;
    if seen.is_none() {
        seen = next(&mut leaders).await;
    }
    let seen = seen.unwrap_or_else(|| panic!("the new leader was not observed"));
    assert_eq!((seen.value.as_deref(), seen.term), (Some("beta:2"), second.token()));
    drop(second);
    for c in [a, b, o] {
        c.close().await;
    }
}

/// Every primitive a backend does not offer is refused with [`Error::Unsupported`] before
/// anything happens; the ones it offers work.
pub async fn primitives_are_offered_or_refused_clearly(t: &dyn Target) {
    let c = client(t, TTL).await;
    let backend = c.backend().clone();
    for (mode, opts) in
        [(HoldMode::Shared, LockOptions::new().shared()), (HoldMode::Permit(2), LockOptions::new().permits(2))]
    {
        let name = unique("offered");
        let r = c.try_lock_with(&name, opts).await;
        if backend.supports(mode) {
            assert!(matches!(r, Ok(Some(_))), "{mode} is offered but failed: {r:?}");
        } else {
            assert!(matches!(&r, Err(Error::Unsupported(m)) if m.contains(&backend.describe())), "{mode}: {r:?}");
        }
    }
    let r = c.campaign(&unique("offered-election"), "me", LockOptions::new().timeout(Duration::from_secs(5))).await;
    if backend.supports_election() {
        assert!(r.is_ok(), "election is offered but failed: {r:?}");
    } else {
        assert!(matches!(r, Err(Error::Unsupported(_))), "election: {r:?}");
        assert!(matches!(c.observe("x").await, Err(Error::Unsupported(_))));
    }
    c.close().await;
}

/// The election properties alone, for a backend that offers elections but not read locks or
/// semaphores (etcd: Go's `concurrency.Election`).
#[macro_export]
macro_rules! election_suite {
    ($make:expr) => {
        $crate::primitives_suite!(@each $make; the_next_leader_has_a_higher_term_and_observers_see_both);
    };
}

/// The read/write lock properties alone, for a backend that offers read locks but not
/// semaphores or elections (PostgreSQL's advisory mode), or that expands the others one by one.
#[macro_export]
macro_rules! rwlock_suite {
    ($make:expr) => {
        $crate::primitives_suite!(@each $make;
            readers_share_and_never_overlap_a_writer,
            a_writer_gets_in_while_readers_keep_arriving,
            every_grant_of_a_read_write_lock_takes_the_next_token,
            status_shows_every_reader_then_the_writer_alone,
            a_cancelled_reader_or_writer_leaves_no_entry_and_no_hold,
            a_write_unlock_admits_the_queued_readers_up_to_the_next_writer
        );
    };
}

/// The semaphore properties alone, for a backend that offers semaphores but not elections
/// (Redis in every mode, the SQL databases' lease mode).
#[macro_export]
macro_rules! semaphore_suite {
    ($make:expr) => {
        $crate::primitives_suite!(@each $make;
            a_semaphore_never_exceeds_its_permits,
            a_permit_comes_back_when_its_holders_session_ends,
            every_permit_takes_the_next_token,
            status_shows_every_permit_holder_and_the_permits,
            a_cancelled_permit_waiter_leaves_no_entry_and_takes_no_permit,
            permit_waiters_get_whichever_permit_comes_free_in_arrival_order,
            a_name_is_a_lock_or_a_semaphore_never_both
        );
    };
}

/// Expands one `#[tokio::test]` per property of the primitives beyond the mutex for the
/// [`Target`] built by `$make` (a backend that offers read locks, semaphores and elections):
/// the read/write lock, semaphore and election suites, and re-entry across kinds.
#[macro_export]
macro_rules! primitives_suite {
    ($make:expr) => {
        $crate::rwlock_suite!($make);
        $crate::semaphore_suite!($make);
        $crate::election_suite!($make);
        $crate::primitives_suite!(@each $make; reentering_with_a_different_mode_is_refused);
    };
    (@each $make:expr; $($name:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                let target = $make;
                $crate::conformance::primitives::$name(&target).await;
            }
        )*
    };
}
