//! Interop beyond the mutex with Curator 5.4 itself (compiled here with `javac`): its
//! `LeaderLatch`, `InterProcessSemaphoreV2` and `InterProcessReadWriteLock` on the same paths as
//! locksmith's campaigns, permits and read/write locks. Both sides append to one log (one line
//! per event, atomic appends), whose order is the order of events; the checks replay it.

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use common::{curator_classpath, log_line, wait_for};
use locksmith::LockOptions;
use locksmith_testkit::ZkServer;

/// One Java program, one mode per test: `latch`, `semaphore`, `rwlock`. Each mode runs its whole
/// scenario in one JVM (start-up is the slow part).
const JAVA: &str = r#"
import java.nio.file.*;
import java.util.*;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.leader.LeaderLatch;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.framework.recipes.locks.InterProcessReadWriteLock;
import org.apache.curator.framework.recipes.locks.InterProcessSemaphoreV2;
import org.apache.curator.framework.recipes.locks.Lease;
import org.apache.curator.retry.RetryOneTime;

public class Primitives {
    static String log;

    static synchronized void line(String s) throws Exception {
        Files.write(Paths.get(log), (s + "\n").getBytes(), StandardOpenOption.CREATE, StandardOpenOption.APPEND);
    }

    interface Check { boolean ok() throws Exception; }

    static void until(Check c, String what) throws Exception {
        long end = System.currentTimeMillis() + 20000;
        while (!c.ok()) {
            if (System.currentTimeMillis() > end) throw new RuntimeException("timed out waiting for " + what);
            Thread.sleep(20);
        }
    }

    // Says the JVM is up, then waits for the Rust side's "go", so both sides start together.
    static void ready() throws Exception {
        line("java ready");
        until(() -> new String(Files.readAllBytes(Paths.get(log))).contains("\ngo\n"), "go");
    }

    public static void main(String[] a) throws Exception {
        CuratorFramework c = CuratorFrameworkFactory.newClient(a[1], new RetryOneTime(100));
        c.start();
        c.blockUntilConnected();
        log = a[3];
        switch (a[0]) {
            case "latch": latch(c, a[2]); break;
            case "semaphore": semaphore(c, a[2], Integer.parseInt(a[4])); break;
            case "rwlock": rwlock(c, a[2], Integer.parseInt(a[4])); break;
            default: throw new IllegalArgumentException(a[0]);
        }
        c.close();
    }

    static boolean participates(LeaderLatch l, String id) throws Exception {
        for (org.apache.curator.framework.recipes.leader.Participant p : l.getParticipants())
            if (p.getId().equals(id)) return true;
        return false;
    }

    // rust:1 leads; java:1 queues behind it and sees it lead; rust:1 resigns and java:1 leads
    // until rust:2 campaigns; then java:2 queues behind rust:2 and leads after it.
    static void latch(CuratorFramework c, String path) throws Exception {
        LeaderLatch l1 = new LeaderLatch(c, path, "java:1");
        l1.start();
        until(() -> participates(l1, "java:1") && !l1.hasLeadership() && l1.getLeader().getId().equals("rust:1"), "rust:1 to lead");
        line("java:1 waits for rust:1");
        l1.await();
        line("enter java:1");
        until(() -> participates(l1, "rust:2"), "rust:2 to campaign");
        line("java:1 sees rust:2 waiting");
        Thread.sleep(300);
        line("exit java:1");
        l1.close();
        LeaderLatch l2 = new LeaderLatch(c, path, "java:2");
        l2.start();
        until(() -> participates(l2, "java:2") && !l2.hasLeadership() && l2.getLeader().getId().equals("rust:2"), "rust:2 to lead");
        line("java:2 waits for rust:2");
        l2.await();
        line("enter java:2");
        Thread.sleep(100);
        line("exit java:2");
        l2.close();
    }

    // A lease next to locksmith's, then two threads, each with its own InterProcessSemaphoreV2 of 2
    // leases, in loops.
    static void semaphore(CuratorFramework c, String path, int rounds) throws Exception {
        ready();
        // Rust holds one permit now: the other one is ours at once.
        InterProcessSemaphoreV2 first = new InterProcessSemaphoreV2(c, path, 2);
        Lease held = first.acquire(10, java.util.concurrent.TimeUnit.SECONDS);
        if (held == null) throw new RuntimeException("no permit while locksmith held one of two");
        line("enter java:first");
        line("exit java:first");
        first.returnLease(held);
        List<Thread> ts = new ArrayList<>();
        List<Throwable> failed = Collections.synchronizedList(new ArrayList<>());
        for (int t = 0; t < 2; t++) {
            final int id = t;
            ts.add(new Thread(() -> {
                try {
                    InterProcessSemaphoreV2 s = new InterProcessSemaphoreV2(c, path, 2);
                    for (int i = 0; i < rounds; i++) {
                        Lease l = s.acquire();
                        line("enter java" + id + ":" + i);
                        Thread.sleep(10);
                        line("exit java" + id + ":" + i);
                        s.returnLease(l);
                    }
                } catch (Throwable e) { failed.add(e); }
            }));
        }
        for (Thread t : ts) t.start();
        for (Thread t : ts) t.join();
        if (!failed.isEmpty()) throw new RuntimeException(failed.get(0));
    }

    // A read lock next to locksmith's, then a reader thread and a writer thread of
    // InterProcessReadWriteLock, in loops.
    static void rwlock(CuratorFramework c, String path, int rounds) throws Exception {
        ready();
        // Rust holds a read lock now: ours is granted alongside.
        InterProcessReadWriteLock first = new InterProcessReadWriteLock(c, path);
        if (!first.readLock().acquire(10, java.util.concurrent.TimeUnit.SECONDS))
            throw new RuntimeException("no read lock while locksmith held one");
        line("enter read-java:first");
        line("exit read-java:first");
        first.readLock().release();
        List<Throwable> failed = Collections.synchronizedList(new ArrayList<>());
        Thread reader = new Thread(() -> {
            try {
                InterProcessReadWriteLock rw = new InterProcessReadWriteLock(c, path);
                for (int i = 0; i < rounds; i++) {
                    rw.readLock().acquire();
                    line("enter read-java:" + i);
                    Thread.sleep(10);
                    line("exit read-java:" + i);
                    rw.readLock().release();
                }
            } catch (Throwable e) { failed.add(e); }
        });
        Thread writer = new Thread(() -> {
            try {
                InterProcessReadWriteLock rw = new InterProcessReadWriteLock(c, path);
                for (int i = 0; i < rounds; i++) {
                    rw.writeLock().acquire();
                    line("enter write-java:" + i);
                    Thread.sleep(5);
                    line("exit write-java:" + i);
                    rw.writeLock().release();
                }
            } catch (Throwable e) { failed.add(e); }
        });
        reader.start();
        writer.start();
        reader.join();
        writer.join();
        if (!failed.isEmpty()) throw new RuntimeException(failed.get(0));
    }
}
"#;

/// Compiles the Java program once per test binary, into Cargo's temp dir for tests; returns the
/// classpath to run it with.
fn compiled() -> &'static str {
    static CP: OnceLock<String> = OnceLock::new();
    CP.get_or_init(|| {
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("zk-interop-primitives");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("Primitives.java"), JAVA).unwrap();
        let cp = curator_classpath();
        let javac =
            Command::new("javac").args(["-cp", &cp, "-d"]).arg(&dir).arg(dir.join("Primitives.java")).output().unwrap();
        assert!(javac.status.success(), "javac failed: {}", String::from_utf8_lossy(&javac.stderr));
        format!("{}:{cp}", dir.display())
    })
}

/// Starts the Java program in `mode` on `path` of `server`, logging to `log`.
fn java(mode: &str, server: &ZkServer, path: &str, log: &Path, extra: &[&str]) -> Child {
    Command::new("java")
        .args(["-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-cp", compiled(), "Primitives", mode])
        .args([server.addr(), path.to_string(), log.display().to_string()])
        .args(extra)
        .stdin(Stdio::null())
        .spawn()
        .unwrap()
}

async fn exit_ok(child: Child) {
    let out = tokio::task::spawn_blocking(move || child.wait_with_output().unwrap()).await.unwrap();
    assert!(out.status.success(), "the Curator side failed: {}", out.status);
}

/// Replays the log's `enter WHO` / `exit WHO` lines, calling `check(inside, who)` before each
/// enter with the set of those inside; other lines are ignored. Returns the entries.
fn replay(file: &Path, mut check: impl FnMut(&BTreeSet<String>, &str)) -> Vec<String> {
    let text = std::fs::read_to_string(file).unwrap();
    let mut inside = BTreeSet::new();
    let mut entered = Vec::new();
    for line in text.lines() {
        if let Some(who) = line.strip_prefix("enter ") {
            check(&inside, who);
            assert!(inside.insert(who.to_string()), "{who} entered twice:\n{text}");
            entered.push(who.to_string());
        } else if let Some(who) = line.strip_prefix("exit ") {
            assert!(inside.remove(who), "{who} left without entering:\n{text}");
        }
    }
    assert!(inside.is_empty(), "still inside at the end: {inside:?}");
    entered
}

/// Curator's `LeaderLatch` and locksmith's campaign share one election: each waits while the
/// other leads and takes over when it resigns; Curator reads locksmith's proposal as the
/// leader's participant id, and locksmith's observer sees Curator's participants lead, every
/// term higher than the one before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curator_leader_latch_and_locksmith_campaign_share_one_election() {
    let server = ZkServer::start();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let name = "interop/latch";
    let ttl = Duration::from_secs(5);
    let (a, o) = (
        locksmith::connect_with_ttl(&server.url(), ttl).await.unwrap(),
        locksmith::connect_with_ttl(&server.url(), ttl).await.unwrap(),
    );
    let mut leaders = o.observe(name).await.unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let observer = {
        let seen = seen.clone();
        tokio::spawn(async move {
            while let Some(leader) = leaders.next().await {
                let Some(l) = leader.unwrap() else { continue };
                let last = l.value.as_deref() == Some("java:2");
                seen.lock().unwrap().push((l.value.unwrap_or_default(), l.term));
                if last {
                    return;
                }
            }
        })
    };
    let first = a.campaign(name, "rust:1", LockOptions::new()).await.unwrap();
    let first_term = first.token();
    log_line(&log, "enter rust:1");
    let child = java("latch", &server, &format!("/locksmith/{name}"), &log, &[]);
    wait_for(&log, "java:1 waits for rust:1").await;
    log_line(&log, "exit rust:1");
    assert!(first.unlock().await.unwrap());
    wait_for(&log, "enter java:1").await;
    let second = {
        let (a, log) = (a.clone(), log.clone());
        tokio::spawn(async move {
            let g = a.campaign(name, "rust:2", LockOptions::new()).await.unwrap();
            log_line(&log, "enter rust:2");
            g
        })
    };
    wait_for(&log, "java:1 sees rust:2 waiting").await;
    let st = a.status(Some(name)).await.unwrap();
    let leader = st[0].holder.as_ref().unwrap();
    assert_eq!(leader.value.as_deref(), Some("java:1"), "status while Curator leads: {st:?}");
    assert_eq!(st[0].waiters, Some(1), "{st:?}");
    assert!(!second.is_finished(), "locksmith was elected while Curator's latch led");
    let second = second.await.unwrap();
    let second_term = second.token();
    assert!(second.token() > leader.token, "term {} after Curator's {}", second.token(), leader.token);
    wait_for(&log, "java:2 waits for rust:2").await;
    log_line(&log, "exit rust:2");
    assert!(second.unlock().await.unwrap());
    exit_ok(child).await;
    tokio::time::timeout(Duration::from_secs(10), observer).await.expect("the observer never saw java:2").unwrap();
    let seen = seen.lock().unwrap().clone();
    let values: Vec<&str> = seen.iter().map(|(v, _)| v.as_str()).collect();
    assert_eq!(values, ["rust:1", "java:1", "rust:2", "java:2"], "{seen:?}");
    assert!(seen.windows(2).all(|w| w[0].1 < w[1].1), "terms did not increase: {seen:?}");
    assert_eq!((seen[0].1, seen[2].1), (first_term, second_term), "{seen:?}");
    // Never two leaders, in the order above.
    let entered = replay(&log, |inside, who| assert!(inside.is_empty(), "{who} led while {inside:?} led"));
    assert_eq!(entered, ["rust:1", "java:1", "rust:2", "java:2"]);
}

const SEMAPHORE_ROUNDS: usize = 20;

/// Curator's `InterProcessSemaphoreV2` of 2 leases (two Java threads) and locksmith permits of 2
/// (two clients) on one semaphore: never more than 2 holders together, and each side holds
/// alongside the other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curator_semaphore_and_locksmith_permits_never_exceed_two_together() {
    let server = ZkServer::start();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let name = "interop/semaphore";
    let child = java("semaphore", &server, &format!("/locksmith/{name}"), &log, &[&SEMAPHORE_ROUNDS.to_string()]);
    let go = Arc::new(tokio::sync::Barrier::new(3));
    let mut tasks = Vec::new();
    for side in 0..2 {
        let (url, log, go) = (server.url(), log.clone(), go.clone());
        tasks.push(tokio::spawn(async move {
            let c = locksmith::connect_with_ttl(&url, Duration::from_secs(5)).await.unwrap();
            c.session_id().await.unwrap();
            go.wait().await;
            for i in 0..SEMAPHORE_ROUNDS {
                let g = c.lock_with(name, LockOptions::new().permits(2)).await.unwrap();
                log_line(&log, &format!("enter rust{side}:{i}"));
                tokio::time::sleep(Duration::from_millis(10)).await;
                log_line(&log, &format!("exit rust{side}:{i}"));
                assert!(g.unlock().await.unwrap());
            }
            c.close().await;
        }));
    }
    // One permit held while Curator takes the other: the two sides hold together at least once
    // whatever the schedule of the loops.
    let c = locksmith::connect_with_ttl(&server.url(), Duration::from_secs(5)).await.unwrap();
    let first = c.lock_with(name, LockOptions::new().permits(2)).await.unwrap();
    log_line(&log, "enter rust:first");
    wait_for(&log, "java ready").await;
    log_line(&log, "go");
    wait_for(&log, "exit java:first").await;
    log_line(&log, "exit rust:first");
    assert!(first.unlock().await.unwrap());
    go.wait().await;
    for t in tasks {
        t.await.unwrap();
    }
    exit_ok(child).await;
    let mut mixed = 0;
    let entered = replay(&log, |inside, who| {
        assert!(inside.len() < 2, "{who} entered while {inside:?} held both permits");
        let side = &who[..4];
        if inside.iter().any(|o| &o[..4] != side) {
            mixed += 1;
        }
    });
    assert_eq!(entered.len(), 4 * SEMAPHORE_ROUNDS + 2);
    assert!(mixed > 0, "Curator and locksmith never held permits together");
    // Every lease is returned: nothing holds, nothing waits.
    let st = c.status(Some(name)).await.unwrap();
    assert!(st[0].holders.is_empty() && st[0].waiters_or_zero() == 0, "{st:?}");
}

const RW_ROUNDS: usize = 15;

/// Curator's `InterProcessReadWriteLock` (a reader thread and a writer thread) and locksmith
/// readers and a writer (`?exclusive=write-lock`, so that Curator's readers see locksmith's
/// writer) on one lock: a writer is always alone, readers share.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curator_read_write_lock_and_locksmith_readers_and_writer_exclude_each_other() {
    let server = ZkServer::start();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let name = "interop/rw";
    let url = format!("{}?exclusive=write-lock", server.url());
    let child = java("rwlock", &server, &format!("/locksmith/{name}"), &log, &[&RW_ROUNDS.to_string()]);
    let go = Arc::new(tokio::sync::Barrier::new(4));
    let mut tasks = Vec::new();
    for (kind, n) in [("read", 0), ("read", 1), ("write", 2)] {
        let (url, log, go) = (url.clone(), log.clone(), go.clone());
        tasks.push(tokio::spawn(async move {
            let c = locksmith::connect_with_ttl(&url, Duration::from_secs(5)).await.unwrap();
            c.session_id().await.unwrap();
            go.wait().await;
            for i in 0..RW_ROUNDS {
                let opts = if kind == "read" { LockOptions::new().shared() } else { LockOptions::new() };
                let g = c.lock_with(name, opts).await.unwrap();
                log_line(&log, &format!("enter {kind}-rust{n}:{i}"));
                tokio::time::sleep(Duration::from_millis(if kind == "read" { 10 } else { 5 })).await;
                log_line(&log, &format!("exit {kind}-rust{n}:{i}"));
                assert!(g.unlock().await.unwrap());
            }
            c.close().await;
        }));
    }
    // A read lock held while Curator takes one: readers of both sides share at least once
    // whatever the schedule of the loops (FIFO hand-offs can settle into a lockstep).
    let c = locksmith::connect_with_ttl(&url, Duration::from_secs(5)).await.unwrap();
    let first = c.lock_with(name, LockOptions::new().shared()).await.unwrap();
    log_line(&log, "enter read-rust:first");
    wait_for(&log, "java ready").await;
    log_line(&log, "go");
    wait_for(&log, "exit read-java:first").await;
    log_line(&log, "exit read-rust:first");
    assert!(first.unlock().await.unwrap());
    go.wait().await;
    for t in tasks {
        t.await.unwrap();
    }
    exit_ok(child).await;
    let mut shared = 0;
    let entered = replay(&log, |inside, who| {
        if who.starts_with("write") {
            assert!(inside.is_empty(), "writer {who} entered while {inside:?} held the lock");
        } else {
            assert!(inside.iter().all(|o| o.starts_with("read")), "reader {who} entered while {inside:?} held it");
            if inside.iter().any(|o| o.contains("java") != who.contains("java")) {
                shared += 1;
            }
        }
    });
    assert_eq!(entered.len(), 5 * RW_ROUNDS + 2);
    assert!(
        shared > 0,
        "Curator's and locksmith's readers never held the lock together:\n{}",
        std::fs::read_to_string(&log).unwrap()
    );
}
