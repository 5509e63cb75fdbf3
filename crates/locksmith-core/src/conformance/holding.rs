//! The primitives' clauses beside the hold rules (`crate::holding`): tokens strictly increasing
//! per name, `status` showing each holder with its kind, a cancelled waiter leaving neither a
//! queue entry nor a hold, first come first served across kinds, and a name being a lock or a
//! semaphore, never both, refused with the shared text. Each read/write lock clause is in
//! [`rwlock_suite!`](crate::rwlock_suite), each semaphore clause in
//! [`semaphore_suite!`](crate::semaphore_suite), so a backend runs those of the primitives it
//! offers; a clause that needs a capability a backend does not promise ([`Caps`](super::Caps):
//! FIFO waiters, waiters or holders in `status`) checks the rest and says nothing of that part.

use std::time::Duration;

use super::{client, eventually, unique, until_status, until_waiters, Target, TTL};
use crate::{Client, Error, Guard, HoldMode, LockOptions, LockStatus};

/// Where waiter tasks report their grants: `(which waiter, what it got)`.
type Receiver<I> = tokio::sync::mpsc::UnboundedReceiver<(I, crate::Result<Guard>)>;

/// The status of `name`, which must be listed.
async fn status_of(c: &Client, name: &str) -> LockStatus {
    let all = c.status(Some(name)).await.unwrap_or_else(|e| panic!("status of {name}: {e}"));
    all.into_iter().next().unwrap_or_else(|| panic!("{name} is not listed while held"))
}

/// `(token, mode)` of every holder, by token.
fn holders(s: &LockStatus) -> Vec<(u64, HoldMode)> {
    let mut v: Vec<(u64, HoldMode)> = s.holders.iter().map(|h| (h.token, h.mode)).collect();
    v.sort_unstable_by_key(|(token, _)| *token);
    v
}

async fn lock(c: &Client, name: &str, opts: LockOptions) -> Guard {
    let mode = opts.mode();
    c.lock_with(name, opts).await.unwrap_or_else(|e| panic!("lock {name} as {mode}: {e}"))
}

/// Whether `c` gets `name` at once as `opts` says (then releases it).
async fn free_for(c: &Client, name: &str, opts: LockOptions) -> bool {
    match c.try_lock_with(name, opts).await {
        Ok(Some(g)) => g.unlock().await.unwrap_or(false),
        _ => false,
    }
}

/// A waiter of `name` as `opts` says that gives up by timeout, then one dropped while waiting.
async fn give_up_twice(c: &Client, name: &str, opts: LockOptions) {
    let mode = opts.mode();
    let r = c.lock_with(name, opts.clone().timeout(Duration::from_millis(200))).await;
    assert!(matches!(r, Err(Error::Timeout)), "a {mode} waiter behind a hold: expected a timeout, got {r:?}");
    let dropped = tokio::time::timeout(Duration::from_millis(150), c.lock_with(name, opts)).await;
    assert!(dropped.is_err(), "a {mode} waiter behind a hold was granted: {dropped:?}");
}

/// No waiter left on `name`, on a backend whose `status` reports them.
async fn no_waiter_left(t: &dyn Target, c: &Client, name: &str) {
    if t.caps().reports_waiters {
        eventually(&format!("{name}: cancelled waiters left entries"), || async { super::waiters(c, name).await == 0 })
            .await;
    }
}

/// Writer, reader, reader, writer of one name in turn, then two readers together: every grant
/// takes a token above every token before it, whatever its kind.
pub async fn every_grant_of_a_read_write_lock_takes_the_next_token(t: &dyn Target) {
    let (a, b) = (client(t, TTL).await, client(t, TTL).await);
    let name = unique("rw-tokens");
    let mut last = 0;
    for opts in [LockOptions::new(), LockOptions::new().shared(), LockOptions::new().shared(), LockOptions::new()] {
        let g = lock(&a, &name, opts).await;
        assert!(g.token() > last, "token {} after {last}", g.token());
        last = g.token();
        assert!(g.unlock().await.unwrap_or(false));
    }
    let r1 = lock(&a, &name, LockOptions::new().shared()).await;
    let r2 = lock(&b, &name, LockOptions::new().shared()).await;
    assert!(last < r1.token() && r1.token() < r2.token(), "readers together: {last}, {}, {}", r1.token(), r2.token());
    drop((r1.unlock().await, r2.unlock().await));
    a.close().await;
    b.close().await;
}

/// `status` shows every reader holding (each with its own token), a writer waiting behind them
/// (where waiters are reported), then that writer holding alone (where holders are reported).
pub async fn status_shows_every_reader_then_the_writer_alone(t: &dyn Target) {
    let (a, b, w) = (client(t, TTL).await, client(t, TTL).await, client(t, TTL).await);
    let name = unique("rw-status");
    let r1 = lock(&a, &name, LockOptions::new().shared()).await;
    let r2 = lock(&b, &name, LockOptions::new().shared()).await;
    let writer = {
        let (w, name) = (w.clone(), name.clone());
        tokio::spawn(async move { w.lock_with(&name, LockOptions::new().timeout(Duration::from_secs(10))).await })
    };
    if t.caps().reports_waiters {
        until_status(&a, &name, |s| s.waiters == Some(1)).await;
    }
    let reports = t.caps().reports_holders;
    if reports {
        let s = status_of(&a, &name).await;
        assert_eq!(holders(&s), [(r1.token(), HoldMode::Shared), (r2.token(), HoldMode::Shared)], "{s:?}");
        assert_eq!(s.permits, None, "{s:?}");
    }
    drop((r1.unlock().await, r2.unlock().await));
    let g = writer.await.unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()));
    let g = g.unwrap_or_else(|e| panic!("the writer behind the readers: {e}"));
    if reports {
        let s = status_of(&a, &name).await;
        assert_eq!(holders(&s), [(g.token(), HoldMode::Exclusive)], "{s:?}");
    }
    assert!(g.unlock().await.unwrap_or(false));
    for c in [a, b, w] {
        c.close().await;
    }
}

/// A reader behind a writer, and a writer behind a reader, that time out or are dropped leave
/// no queue entry and hold nothing: once the holder leaves, the name is free for either kind.
pub async fn a_cancelled_reader_or_writer_leaves_no_entry_and_no_hold(t: &dyn Target) {
    let (a, b, c) = (client(t, TTL).await, client(t, TTL).await, client(t, TTL).await);
    let name = unique("rw-cancel");
    for (held, waiting) in
        [(LockOptions::new(), LockOptions::new().shared()), (LockOptions::new().shared(), LockOptions::new())]
    {
        let held_mode = held.mode();
        let g = lock(&a, &name, held).await;
        give_up_twice(&b, &name, waiting).await;
        no_waiter_left(t, &a, &name).await;
        if held_mode == HoldMode::Shared {
            // A writer that gave up does not keep new readers out.
            eventually("a cancelled writer kept readers out", || free_for(&c, &name, LockOptions::new().shared()))
                .await;
        }
        assert!(g.unlock().await.unwrap_or(false));
        eventually("a cancelled waiter kept a hold", || free_for(&c, &name, LockOptions::new())).await;
    }
    for x in [a, b, c] {
        x.close().await;
    }
}

/// First come, first served across kinds: readers queued behind a writer all get in together
/// when it leaves, a writer queued after them waits for them, and a reader queued after that
/// writer waits for it. Only for backends that serve waiters in arrival order.
pub async fn a_write_unlock_admits_the_queued_readers_up_to_the_next_writer(t: &dyn Target) {
    if !t.caps().fifo {
        return;
    }
    let holder = client(t, TTL).await;
    let name = unique("rw-run");
    let w = lock(&holder, &name, LockOptions::new()).await;
    let shared = LockOptions::new().shared();
    let (mut rx, clients) =
        queue_waiters(t, &holder, &name, [shared.clone(), shared.clone(), LockOptions::new(), shared]).await;
    let next = |rx: &mut Receiver<usize>| {
        rx.try_recv().ok().map(|(i, g)| (i, g.unwrap_or_else(|e| panic!("waiter {i}: {e}"))))
    };
    assert!(w.unlock().await.unwrap_or(false));
    let mut readers = Vec::new();
    eventually("the two readers queued behind the writer did not both get in", || {
        if let Some((i, g)) = next(&mut rx) {
            assert!(i < 2, "waiter {i} got in before the readers queued ahead of it");
            readers.push(g);
        }
        let n = readers.len();
        async move { n == 2 }
    })
    .await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(rx.try_recv().is_err(), "the queued writer, or the reader behind it, got in with the readers");
    for g in readers {
        assert!(g.unlock().await.unwrap_or(false));
    }
    let (i, g) = next_grant(&mut rx).await;
    assert_eq!(i, 2, "the writer is next");
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(rx.try_recv().is_err(), "the last reader got in with the writer");
    assert!(g.unlock().await.unwrap_or(false));
    let (i, g) = next_grant(&mut rx).await;
    assert_eq!(i, 3);
    assert!(g.unlock().await.unwrap_or(false));
    holder.close().await;
    for c in clients {
        c.close().await;
    }
}

/// Queues one waiter of `name` per `asks`, each on a client of its own and in this order (each
/// is queued, where `status` shows it, before the next starts); waiter `i` reports its grant on
/// the receiver. The clients are returned for closing.
async fn queue_waiters<const N: usize>(
    t: &dyn Target,
    holder: &Client,
    name: &str,
    asks: [LockOptions; N],
) -> (Receiver<usize>, Vec<Client>) {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let mut clients = Vec::new();
    for (i, opts) in asks.into_iter().enumerate() {
        let c = client(t, TTL).await;
        clients.push(c.clone());
        let (n, tx) = (name.to_owned(), tx.clone());
        tokio::spawn(async move {
            let g = c.lock_with(&n, opts.timeout(Duration::from_secs(10))).await;
            let _ = tx.send((i, g));
        });
        until_waiters(t, holder, name, i as u64 + 1).await;
    }
    (rx, clients)
}

/// The next grant a waiter task reports, within 5 s.
async fn next_grant<I: std::fmt::Debug + Copy>(rx: &mut Receiver<I>) -> (I, Guard) {
    let got = tokio::time::timeout(Duration::from_secs(5), rx.recv()).await.ok().flatten();
    let (i, g) = got.unwrap_or_else(|| panic!("a hand-off stalled"));
    (i, g.unwrap_or_else(|e| panic!("waiter {i:?}: {e}")))
}

/// Permits held together, then one after a release: every grant takes a token above every
/// token before it.
pub async fn every_permit_takes_the_next_token(t: &dyn Target) {
    let (a, b) = (client(t, TTL).await, client(t, TTL).await);
    let name = unique("sem-tokens");
    let p1 = lock(&a, &name, LockOptions::new().permits(2)).await;
    let p2 = lock(&b, &name, LockOptions::new().permits(2)).await;
    assert!(p1.token() < p2.token(), "{} then {}", p1.token(), p2.token());
    assert!(p1.unlock().await.unwrap_or(false));
    let p3 = lock(&a, &name, LockOptions::new().permits(2)).await;
    assert!(p2.token() < p3.token(), "{} then {}", p2.token(), p3.token());
    drop((p2.unlock().await, p3.unlock().await));
    a.close().await;
    b.close().await;
}

/// `status` (of the name, and the list of every lock) shows a semaphore's number of permits
/// and each permit holder, a waiter for a full semaphore (where waiters are reported), and no
/// holder once every permit is released.
pub async fn status_shows_every_permit_holder_and_the_permits(t: &dyn Target) {
    let (a, b, w) = (client(t, TTL).await, client(t, TTL).await, client(t, TTL).await);
    let name = unique("sem-status");
    let p1 = lock(&a, &name, LockOptions::new().permits(2)).await;
    let p2 = lock(&b, &name, LockOptions::new().permits(2)).await;
    let waiter = {
        let (w, name) = (w.clone(), name.clone());
        tokio::spawn(
            async move { w.lock_with(&name, LockOptions::new().permits(2).timeout(Duration::from_secs(10))).await },
        )
    };
    if t.caps().reports_waiters {
        until_status(&a, &name, |s| s.waiters == Some(1)).await;
    }
    let all = a.status(None).await.unwrap_or_else(|e| panic!("status: {e}"));
    let listed = all.into_iter().find(|s| s.name == name).unwrap_or_else(|| panic!("{name} is not in the list"));
    for s in [status_of(&a, &name).await, listed] {
        assert_eq!(s.permits, Some(2), "{s:?}");
        assert_eq!(holders(&s), [(p1.token(), HoldMode::Permit(2)), (p2.token(), HoldMode::Permit(2))], "{s:?}");
    }
    drop((p1.unlock().await, p2.unlock().await));
    let g = waiter.await.unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()));
    let g = g.unwrap_or_else(|e| panic!("the waiter for a permit: {e}"));
    assert!(g.unlock().await.unwrap_or(false));
    eventually("released permits are still shown held", || async {
        a.status(Some(&name)).await.is_ok_and(|st| st.iter().all(|s| s.holders.is_empty()))
    })
    .await;
    for c in [a, b, w] {
        c.close().await;
    }
}

/// A permit waiter that times out or is dropped leaves no queue entry and takes no permit:
/// once the holder leaves, the semaphore's one permit is free.
pub async fn a_cancelled_permit_waiter_leaves_no_entry_and_takes_no_permit(t: &dyn Target) {
    let (a, b, c) = (client(t, TTL).await, client(t, TTL).await, client(t, TTL).await);
    let name = unique("sem-cancel");
    let g = lock(&a, &name, LockOptions::new().permits(1)).await;
    give_up_twice(&b, &name, LockOptions::new().permits(1)).await;
    no_waiter_left(t, &a, &name).await;
    assert!(g.unlock().await.unwrap_or(false));
    eventually("a cancelled permit waiter kept the permit", || free_for(&c, &name, LockOptions::new().permits(1)))
        .await;
    for x in [a, b, c] {
        x.close().await;
    }
}

/// With both permits of 2 held, the first waiter gets whichever permit comes free first (here
/// the newer holder's), and the waiters are served in arrival order with increasing tokens.
/// Only for backends that serve waiters in arrival order.
pub async fn permit_waiters_get_whichever_permit_comes_free_in_arrival_order(t: &dyn Target) {
    if !t.caps().fifo {
        return;
    }
    let opts = || LockOptions::new().permits(2).timeout(Duration::from_secs(10));
    let (a, b) = (client(t, TTL).await, client(t, TTL).await);
    let name = unique("sem-fifo");
    let older = lock(&a, &name, opts()).await;
    let newer = lock(&b, &name, opts()).await;
    let (mut granted, clients) = queue_waiters(t, &a, &name, [opts(), opts(), opts()]).await;
    assert!(newer.unlock().await.unwrap_or(false));
    let first = next_grant(&mut granted).await;
    assert_eq!(first.0, 0, "the first waiter did not get the newer holder's permit");
    assert!(older.is_held() && older.unlock().await.unwrap_or(false));
    let second = next_grant(&mut granted).await;
    assert_eq!(second.0, 1);
    let tokens = [first.1.token(), second.1.token()];
    assert!(first.1.unlock().await.unwrap_or(false));
    let third = next_grant(&mut granted).await;
    assert_eq!(third.0, 2);
    assert!(tokens[0] < tokens[1] && tokens[1] < third.1.token(), "tokens out of arrival order");
    drop((second.1.unlock().await, third.1.unlock().await));
    for c in clients.into_iter().chain([a, b]) {
        c.close().await;
    }
}

/// A name is a lock or a semaphore, never both at once: a permit is refused on a name held as a
/// lock (exclusive, or shared where offered), and a lock on a semaphore's name, even when the
/// acquisition would wait, with the one text every backend shares (Redis, whose Lua scripts
/// restate the rules, says the same words) — and a refusal leaves nothing behind.
pub async fn a_name_is_a_lock_or_a_semaphore_never_both(t: &dyn Target) {
    let (a, b) = (client(t, TTL).await, client(t, TTL).await);
    let shared = a.backend().supports(HoldMode::Shared);
    let locks = if shared { vec![LockOptions::new(), LockOptions::new().shared()] } else { vec![LockOptions::new()] };
    let wait = |o: LockOptions| o.timeout(Duration::from_secs(2));
    for holding in locks.clone() {
        let name = unique("as-lock");
        let mode = holding.mode();
        let g = lock(&a, &name, holding).await;
        let r = b.lock_with(&name, wait(LockOptions::new().permits(2))).await;
        assert!(
            matches!(&r, Err(Error::InvalidArgument(m)) if m.contains(&name) && m.contains("in use as a lock")),
            "a permit of a name held as a {mode} lock: {r:?}"
        );
        if t.caps().reports_holders {
            // What a refused acquisition wrote (ZooKeeper: a lease node) may go in the background.
            until_status(&a, &name, |s| holders(s) == [(g.token(), mode)]).await;
        }
        assert!(g.unlock().await.unwrap_or(false));
    }
    let name = unique("as-sem");
    let g = lock(&a, &name, LockOptions::new().permits(4)).await;
    for asked in locks {
        let mode = asked.mode();
        let r = b.lock_with(&name, wait(asked)).await;
        assert!(
            matches!(&r, Err(Error::InvalidArgument(m)) if m.contains(&name) && m.contains("is a semaphore") && m.contains("not a lock")),
            "a {mode} lock of a semaphore's name: {r:?}"
        );
    }
    let r = b.lock_with(&name, wait(LockOptions::new().permits(5))).await;
    assert!(
        matches!(&r, Err(Error::InvalidArgument(m)) if m.contains(&name) && m.contains("asked for one of 5")),
        "another number of permits: {r:?}"
    );
    if t.caps().reports_holders {
        until_status(&a, &name, |s| holders(s) == [(g.token(), HoldMode::Permit(4))]).await;
    }
    no_waiter_left(t, &a, &name).await;
    assert!(g.unlock().await.unwrap_or(false));
    a.close().await;
    b.close().await;
}
