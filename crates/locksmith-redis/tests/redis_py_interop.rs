//! Plain mode against the real redis-py `Lock` on the same name: neither side ever sees the
//! other inside its critical section, and both make progress.

mod common;

use std::process::Stdio;
use std::time::Duration;

use common::{cmd, raw, unique};
use locksmith_testkit::{interop_python, RedisServer};

/// Each round: take the lock, claim `overlap-marker` with SET NX (fails if the other side is
/// inside), hold briefly, clear it, release; pause outside so the other side gets a turn.
const PY: &str = r#"
import sys, time, redis
port, name, rounds = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
r = redis.Redis(port=port)
done = 0
for _ in range(rounds):
    with r.lock(name, timeout=2, blocking_timeout=10):
        if not r.set("overlap-marker", "py", nx=True):
            print("OVERLAP inside py, marker held by", r.get("overlap-marker"), flush=True)
            sys.exit(3)
        time.sleep(0.005)
        r.delete("overlap-marker")
    done += 1
    time.sleep(0.02)
print(done, flush=True)
"#;

/// redis-py and locksmith exclude each other on one plain lock (0 overlaps either way), and each
/// side acquires at least 10 times.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_py_and_locksmith_exclude_each_other() {
    let server = RedisServer::start();
    let name = unique("interop");
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("contend.py");
    std::fs::write(&script, PY).unwrap();
    let python = tokio::process::Command::new(interop_python())
        .arg(&script)
        .arg(server.port().to_string())
        .arg(&name)
        .arg("15")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();

    let mut tasks = Vec::new();
    for _ in 0..2 {
        let (url, name) = (server.url(), name.clone());
        tasks.push(tokio::spawn(async move {
            let client = locksmith::connect_with_ttl(&url, Duration::from_secs(2)).await.unwrap();
            let mut r = raw(&url).await;
            let mut done = 0;
            for _ in 0..10 {
                let g = client.lock(&name).await.unwrap();
                let claimed: Option<String> = cmd(&mut r, &["SET", "overlap-marker", "rust", "NX"]).await;
                let holder: Option<String> = cmd(&mut r, &["GET", "overlap-marker"]).await;
                assert!(claimed.is_some(), "overlap inside locksmith: marker held by {holder:?}");
                tokio::time::sleep(Duration::from_millis(5)).await;
                let _: i64 = cmd(&mut r, &["DEL", "overlap-marker"]).await;
                assert!(g.unlock().await.unwrap(), "the hold was taken while held");
                done += 1;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            client.close().await;
            done
        }));
    }
    let mut rust_done = 0;
    for t in tasks {
        rust_done += t.await.unwrap();
    }
    let out = tokio::time::timeout(Duration::from_secs(60), python.wait_with_output()).await.unwrap().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "redis-py side failed: {stdout} {}", String::from_utf8_lossy(&out.stderr));
    let py_done: u32 = stdout.trim().parse().unwrap();
    assert!(py_done >= 10, "redis-py acquired only {py_done} times");
    assert!(rust_done >= 10, "locksmith acquired only {rust_done} times");
}
