//! Read/write locks and semaphores beyond the shared properties: leases (a killed holder's read
//! lock or permit comes back after its TTL; a live one keeps it past the TTL; one taken away is
//! reported lost), FIFO hand-off with one wake-up per admitted waiter, cancel safety, status.

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{cmd, raw, unique, until_waiters, wakeups};
use locksmith::{HoldMode, LockOptions};
use locksmith_testkit::{spawn, stdout_lines, RedisServer};
use tokio::sync::mpsc;

const TTL: Duration = Duration::from_secs(2);

/// Run by [`killed_holder`] in a child process: takes the hold named in the environment, prints
/// `holding`, and sleeps until killed. Does nothing when run on its own.
#[test]
#[ignore = "the child process of the lease tests"]
fn holder_process() {
    let Ok(spec) = std::env::var("LOCKSMITH_REDIS_HOLDER") else { return };
    let mut parts = spec.splitn(3, '|');
    let (url, name, kind) = (parts.next().unwrap(), parts.next().unwrap(), parts.next().unwrap());
    let opts = match kind {
        "shared" => LockOptions::new().shared(),
        permits => LockOptions::new().permits(permits.parse().unwrap()),
    };
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let client = locksmith::connect_with_ttl(url, Duration::from_secs(1)).await.unwrap();
        let _g = client.lock_with(name, opts).await.unwrap();
        // On a line of its own: the test harness has printed `test holder_process ... `.
        println!("\nholding");
        tokio::time::sleep(Duration::from_secs(60)).await;
    });
}

/// Starts [`holder_process`] holding `name` (`kind`: `shared`, or a number of permits) with a
/// 1 s TTL, waits until it holds, kills it with SIGKILL (no release, no cleanup) and returns
/// when it is dead.
fn killed_holder(url: &str, name: &str, kind: &str) -> Instant {
    let exe = std::env::current_exe().unwrap();
    let mut cmd = Command::new(exe);
    cmd.args(["holder_process", "--exact", "--ignored", "--nocapture", "--test-threads", "1"])
        .env("LOCKSMITH_REDIS_HOLDER", format!("{url}|{name}|{kind}"))
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let mut child = spawn("redis holder", &mut cmd);
    let rx = stdout_lines(&mut child);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) if line.trim() == "holding" => break,
            Ok(_) => continue,
            Err(e) => {
                child.kill9();
                panic!("the holder process never held {name}: {e}");
            }
        }
    }
    // SIGKILL by PID, and reaped: dead when this returns.
    child.kill9();
    Instant::now()
}

/// A permit holder killed with SIGKILL gets its permit back to the others within its 1 s TTL
/// plus a margin: the next acquisition reclaims the expired permit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_permit_holders_permit_comes_back_after_its_ttl() {
    let server = RedisServer::start();
    let name = unique("killed-permit");
    let killed = killed_holder(&server.url(), &name, "1");
    let client = locksmith::connect_with_ttl(&server.url(), TTL).await.unwrap();
    let g = client.lock_with(&name, LockOptions::new().permits(1).timeout(Duration::from_secs(10))).await.unwrap();
    let waited = killed.elapsed();
    assert!(waited < Duration::from_millis(2_500), "the permit came back after {waited:?}, TTL 1s");
    assert!(g.unlock().await.unwrap());
    client.close().await;
}

/// A reader killed with SIGKILL keeps a writer out for at most its 1 s TTL plus a margin.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_readers_read_lock_ends_after_its_ttl() {
    let server = RedisServer::start();
    let url = format!("{}?mode=rwlock", server.url());
    let name = unique("killed-reader");
    let killed = killed_holder(&url, &name, "shared");
    let client = locksmith::connect_with_ttl(&url, TTL).await.unwrap();
    let g = client.lock_with(&name, LockOptions::new().timeout(Duration::from_secs(10))).await.unwrap();
    let waited = killed.elapsed();
    assert!(waited < Duration::from_millis(2_500), "the writer got in after {waited:?}, TTL 1s");
    assert!(g.unlock().await.unwrap());
    client.close().await;
}

/// A live reader and a live permit holder keep their holds well past the TTL (the keep-alive
/// extends the reader's timeout key and the permit's lease end), and still hold them after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_reader_and_permit_holder_keep_their_holds_past_the_ttl() {
    let server = RedisServer::start();
    let url = format!("{}?mode=rwlock", server.url());
    let ttl = Duration::from_secs(1);
    let a = locksmith::connect_with_ttl(&url, ttl).await.unwrap();
    let b = locksmith::connect_with_ttl(&url, ttl).await.unwrap();
    let (rw, sem) = (unique("live-reader"), unique("live-permit"));
    let reader = a.lock_with(&rw, LockOptions::new().shared()).await.unwrap();
    let permit = a.lock_with(&sem, LockOptions::new().permits(1)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    assert!(reader.is_held() && permit.is_held());
    assert!(b.try_lock(&rw).await.unwrap().is_none(), "a writer got in past the reader's TTL");
    assert!(b.try_lock_with(&sem, LockOptions::new().permits(1)).await.unwrap().is_none(), "the permit was reclaimed");
    assert!(reader.unlock().await.unwrap());
    assert!(permit.unlock().await.unwrap());
    a.close().await;
    b.close().await;
}

/// A reader's timeout key or a permit taken away behind locksmith's back (an operator, a
/// reclaim) is reported lost by the next keep-alive.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_lock_or_permit_taken_away_is_reported_lost() {
    let server = RedisServer::start();
    let url = format!("{}?mode=rwlock", server.url());
    let mut r = raw(&server.url()).await;
    let client = locksmith::connect_with_ttl(&url, Duration::from_secs(1)).await.unwrap();
    let (rw, sem) = (unique("lost-reader"), unique("lost-permit"));
    let reader = client.lock_with(&rw, LockOptions::new().shared().owner("r")).await.unwrap();
    let permit = client.lock_with(&sem, LockOptions::new().permits(2)).await.unwrap();
    let field = format!("{}:r", client.session_id().await.unwrap());
    let _: i64 = cmd(&mut r, &["DEL", &format!("{{{rw}}}:{field}:rwlock_timeout:1")]).await;
    let _: i64 = cmd(&mut r, &["DEL", &format!("{{{sem}}}:timeout")]).await;
    for (what, g) in [("reader", &reader), ("permit", &permit)] {
        tokio::time::timeout(Duration::from_secs(3), g.lost()).await.unwrap_or_else(|_| panic!("{what} not lost"));
        assert!(!g.is_held(), "{what}");
    }
    client.close().await;
}

/// Five waiters for a 2-permit semaphore, over two clients, queue one after the other behind
/// two holders; as permits are released one by one, the waiters get them in queue order, with
/// at most 1.5 wake-ups per release counted by the driver.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permits_are_handed_on_in_fifo_order_waking_one_waiter_each() {
    let server = RedisServer::start();
    let holder = locksmith::connect_with_ttl(&server.url(), TTL).await.unwrap();
    let clients = [
        locksmith::connect_with_ttl(&server.url(), TTL).await.unwrap(),
        locksmith::connect_with_ttl(&server.url(), TTL).await.unwrap(),
    ];
    let name = unique("sem-fifo");
    let opts = || LockOptions::new().permits(2);
    let first = holder.lock_with(&name, opts()).await.unwrap();
    let second = holder.lock_with(&name, opts()).await.unwrap();
    let (tx, mut rx) = mpsc::unbounded_channel();
    for i in 0..5usize {
        let (c, n, tx) = (clients[i % 2].clone(), name.clone(), tx.clone());
        tokio::spawn(async move {
            let g = c.lock_with(&n, LockOptions::new().permits(2)).await.unwrap();
            tx.send((i, g)).unwrap();
        });
        until_waiters(&holder, &name, i as u64 + 1).await;
    }
    let before = wakeups();
    let mut order = Vec::new();
    let mut held = vec![first, second];
    while order.len() < 5 {
        assert!(held.remove(0).unlock().await.unwrap());
        let (i, g) =
            tokio::time::timeout(Duration::from_secs(5), rx.recv()).await.expect("a hand-off stalled").unwrap();
        order.push(i);
        held.push(g);
    }
    let per_release = (wakeups() - before) as f64 / 5.0;
    assert_eq!(order, vec![0, 1, 2, 3, 4], "not served in queue order");
    assert!(per_release <= 1.5, "{per_release} wake-ups per release");
    for g in held {
        assert!(g.unlock().await.unwrap());
    }
    assert_eq!(common::waiters(&holder, &name).await, 0, "entries left in the queue");
}

/// A permit waiter that times out or is dropped (the shared suite's
/// `a_cancelled_permit_waiter_leaves_no_entry_and_takes_no_permit`) leaves Redis as it found it:
/// Redisson's count of available permits whole, and no queue keys.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_permit_waiter_leaves_the_count_whole_and_no_queue_keys() {
    let server = RedisServer::start();
    let mut r = raw(&server.url()).await;
    let holder = locksmith::connect_with_ttl(&server.url(), TTL).await.unwrap();
    let client = locksmith::connect_with_ttl(&server.url(), TTL).await.unwrap();
    let name = unique("sem-cancel");
    let g = holder.lock_with(&name, LockOptions::new().permits(1)).await.unwrap();
    let timed_out = client.lock_with(&name, LockOptions::new().permits(1).timeout(Duration::from_millis(300))).await;
    assert!(matches!(timed_out, Err(locksmith::Error::Timeout)), "{timed_out:?}");
    let (c, n) = (client.clone(), name.clone());
    let dropped = tokio::spawn(async move { c.lock_with(&n, LockOptions::new().permits(1)).await });
    until_waiters(&holder, &name, 1).await;
    dropped.abort();
    let _ = dropped.await;
    until_waiters(&holder, &name, 0).await;
    assert!(g.unlock().await.unwrap());
    let available: String = cmd(&mut r, &["GET", &name]).await;
    assert_eq!(available, "1");
    let queue = format!("locksmith:waiters:{{{name}}}");
    let exists: i64 = cmd(&mut r, &["EXISTS", &queue, &format!("{queue}:deadlines")]).await;
    assert_eq!(exists, 0, "queue keys left behind");
    holder.close().await;
    client.close().await;
}

/// `status` shows every reader (shared, with its own token and lease), a semaphore's permits
/// and each permit holder; a Java permit shows its id as the owner; listing finds both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_shows_readers_permit_holders_and_permits() {
    let server = RedisServer::start();
    let url = format!("{}?mode=rwlock", server.url());
    let mut r = raw(&server.url()).await;
    let a = locksmith::connect_with_ttl(&url, TTL).await.unwrap();
    let b = locksmith::connect_with_ttl(&url, TTL).await.unwrap();
    let (rw, sem) = (unique("status-rw"), unique("status-sem"));
    let ra = a.lock_with(&rw, LockOptions::new().shared().owner("ra")).await.unwrap();
    let rb = b.lock_with(&rw, LockOptions::new().shared().owner("rb")).await.unwrap();
    let pa = a.lock_with(&sem, LockOptions::new().permits(3).owner("pa")).await.unwrap();
    let java: [u8; 16] = rand::random();
    let _: i64 = redis::cmd("DECRBY").arg(&sem).arg(1).query_async(&mut r).await.unwrap();
    let far = common::server_ms(&mut r).await + 60_000;
    let _: i64 =
        redis::cmd("ZADD").arg(format!("{{{sem}}}:timeout")).arg(far).arg(&java[..]).query_async(&mut r).await.unwrap();

    let s = a.status(Some(&rw)).await.unwrap().remove(0);
    let mut readers: Vec<_> = s.holders.iter().map(|h| (h.owner.clone(), h.token, h.mode)).collect();
    readers.sort_by(|x, y| x.0.cmp(&y.0));
    assert_eq!(readers, vec![("ra".into(), ra.token(), HoldMode::Shared), ("rb".into(), rb.token(), HoldMode::Shared)]);
    assert!(s.holders.iter().all(|h| h.ttl_left.is_some_and(|t| t > Duration::ZERO && t <= TTL)), "{s:?}");
    assert_eq!(s.holders[0].session.len(), 36, "the session uuid: {s:?}");
    assert_eq!(s.last_token, rb.token());
    assert_eq!(s.permits, None);

    let s = a.status(Some(&sem)).await.unwrap().remove(0);
    assert_eq!(s.permits, Some(3));
    let mut holders: Vec<_> = s.holders.iter().map(|h| (h.owner.clone(), h.token, h.mode)).collect();
    holders.sort_by(|x, y| x.0.cmp(&y.0));
    let java_hex: String = java.iter().map(|b| format!("{b:02x}")).collect();
    let mut expected = vec![("pa".to_string(), pa.token(), HoldMode::Permit(3)), (java_hex, 0, HoldMode::Permit(3))];
    expected.sort_by(|x, y| x.0.cmp(&y.0));
    assert_eq!(holders, expected);

    let listed: Vec<String> = a.status(None).await.unwrap().into_iter().map(|s| s.name).collect();
    assert!(listed.contains(&rw) && listed.contains(&sem), "{listed:?}");
    drop((ra, rb, pa));
    a.close().await;
    b.close().await;
}
