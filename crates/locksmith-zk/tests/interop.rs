//! Interop with third-party ZooKeeper lock clients (kazoo's `Lock`, Curator's
//! `InterProcessMutex`) on the same lock: they and locksmith never overlap.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{curator_classpath, log_line, wait_for};
use locksmith_testkit::{interop_python, ZkServer};

const ROUNDS: usize = 25;

/// Every `enter X` is followed by `exit X` before the next `enter`; returns entries per side.
fn check_no_overlap(file: &Path) -> std::collections::HashMap<String, usize> {
    let text = std::fs::read_to_string(file).unwrap();
    let mut inside: Option<String> = None;
    let mut count = std::collections::HashMap::new();
    for (i, line) in text.lines().enumerate() {
        let (what, who) = line.split_once(' ').unwrap();
        match what {
            "enter" => {
                assert!(inside.is_none(), "line {}: {who} entered while {inside:?} was inside:\n{text}", i + 1);
                inside = Some(who.to_string());
                *count.entry(who.split(':').next().unwrap().to_string()).or_insert(0) += 1;
            }
            "exit" => {
                assert_eq!(inside.as_deref(), Some(who), "line {}: bad exit:\n{text}", i + 1);
                inside = None;
            }
            _ => panic!("bad line {line:?}"),
        }
    }
    count
}

/// How often the log switches from one client family to another.
fn switches(file: &Path) -> usize {
    let text = std::fs::read_to_string(file).unwrap();
    let sides: Vec<&str> =
        text.lines().filter(|l| l.starts_with("enter")).map(|l| l[6..].split(':').next().unwrap()).collect();
    sides.windows(2).filter(|w| w[0] != w[1]).count()
}

async fn locksmith_rounds(url: String, name: String, file: PathBuf) {
    let client = locksmith::connect_with_ttl(&url, Duration::from_secs(5)).await.unwrap();
    for i in 0..ROUNDS {
        let g = client.lock(&name).await.unwrap();
        assert!(g.fencing_token().unwrap() > 0);
        log_line(&file, &format!("enter rust:{i}"));
        tokio::time::sleep(Duration::from_millis(5)).await;
        log_line(&file, &format!("exit rust:{i}"));
        g.unlock().await.unwrap();
    }
}

const KAZOO: &str = r#"
import sys, time
from kazoo.client import KazooClient
from kazoo.recipe.lock import Lock
hosts, path, out, rounds = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
zk = KazooClient(hosts=hosts)
zk.start(timeout=10)
def line(s):
    with open(out, "a") as f:
        f.write(s + "\n")
for i in range(rounds):
    lock = Lock(zk, path, "kazoo-%d" % i, extra_lock_patterns=["-lock-"])
    lock.acquire()
    line("enter kazoo:%d" % i)
    time.sleep(0.005)
    line("exit kazoo:%d" % i)
    lock.release()
zk.stop()
"#;

/// kazoo's `Lock` (with `extra_lock_patterns=["-lock-"]`) and locksmith contend for one lock
/// in loops: the shared enter/exit log shows no overlap either way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kazoo_and_locksmith_never_overlap() {
    let server = ZkServer::start();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("log");
    let script = dir.path().join("k.py");
    std::fs::write(&script, KAZOO).unwrap();
    let name = "interop/kazoo".to_string();
    let mut py = Command::new(interop_python())
        .arg(&script)
        .args([server.addr(), format!("/locksmith/{name}"), file.display().to_string(), ROUNDS.to_string()])
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    wait_for(&file, "enter kazoo:").await;
    let a = tokio::spawn(locksmith_rounds(server.url(), name.clone(), file.clone()));
    let b = tokio::spawn(locksmith_rounds(server.url(), name.clone(), file.clone()));
    a.await.unwrap();
    b.await.unwrap();
    let status = tokio::task::spawn_blocking(move || py.wait().unwrap()).await.unwrap();
    assert!(status.success(), "kazoo script failed: {status}");
    let count = check_no_overlap(&file);
    assert_eq!(count.get("rust"), Some(&(2 * ROUNDS)));
    assert_eq!(count.get("kazoo"), Some(&ROUNDS));
    assert!(switches(&file) >= 2, "the clients never alternated");
}

const CURATOR: &str = r#"
import java.nio.file.*;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.retry.RetryOneTime;

public class CuratorLock {
    static void line(String f, String s) throws Exception {
        Files.write(Paths.get(f), (s + "\n").getBytes(), StandardOpenOption.CREATE, StandardOpenOption.APPEND);
    }
    public static void main(String[] a) throws Exception {
        CuratorFramework c = CuratorFrameworkFactory.newClient(a[0], new RetryOneTime(100));
        c.start();
        c.blockUntilConnected();
        InterProcessMutex m = new InterProcessMutex(c, a[1]);
        int n = Integer.parseInt(a[3]);
        for (int i = 0; i < n; i++) {
            m.acquire();
            line(a[2], "enter curator:" + i);
            Thread.sleep(5);
            line(a[2], "exit curator:" + i);
            m.release();
        }
        c.close();
    }
}
"#;

/// Curator's `InterProcessMutex` (compiled here with `javac`) and locksmith contend for one
/// lock in loops: the shared enter/exit log shows no overlap either way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curator_and_locksmith_never_overlap() {
    let server = ZkServer::start();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("log");
    std::fs::write(dir.path().join("CuratorLock.java"), CURATOR).unwrap();
    let cp = curator_classpath();
    let javac = Command::new("javac")
        .args(["-cp", &cp, "-d"])
        .arg(dir.path())
        .arg(dir.path().join("CuratorLock.java"))
        .output()
        .unwrap();
    assert!(javac.status.success(), "javac failed: {}", String::from_utf8_lossy(&javac.stderr));
    let name = "interop/curator".to_string();
    let mut java = Command::new("java")
        .args(["-XX:TieredStopAtLevel=1", "-cp", &format!("{}:{cp}", dir.path().display()), "CuratorLock"])
        .args([server.addr(), format!("/locksmith/{name}"), file.display().to_string(), ROUNDS.to_string()])
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    wait_for(&file, "enter curator:").await;
    let a = tokio::spawn(locksmith_rounds(server.url(), name.clone(), file.clone()));
    let b = tokio::spawn(locksmith_rounds(server.url(), name.clone(), file.clone()));
    a.await.unwrap();
    b.await.unwrap();
    let status = tokio::task::spawn_blocking(move || java.wait().unwrap()).await.unwrap();
    assert!(status.success(), "curator client failed: {status}");
    let count = check_no_overlap(&file);
    assert_eq!(count.get("rust"), Some(&(2 * ROUNDS)));
    assert_eq!(count.get("curator"), Some(&ROUNDS));
    assert!(switches(&file) >= 2, "the clients never alternated");
}
