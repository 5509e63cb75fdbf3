//! The native server under careless or hostile load: every per-client resource is bounded and
//! an operator's view still works with many locks.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use locksmith::LockOptions;
use locksmith_proto::error::Code;
use locksmith_testkit::{new_token, NativeServer, RawRefusal, RawSession};

const BIN: &str = env!("CARGO_BIN_EXE_locksmith");

/// `locksmith status` lists 200,000 locks: the server answers a listing page by page (the one
/// task that serves every lock never builds it whole), and the client follows the pages.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_lists_200000_locks() {
    let s = NativeServer::start(BIN.as_ref());
    let mut raw = RawSession::open(s.port(), 60_000).await;
    let names: Vec<String> = (0..200_000).map(|i| format!("bulk/{i:06}")).collect();
    raw.touch_locks(&names, 500).await.unwrap();
    let out =
        Command::new(BIN).args(["status", "--backend", &s.url(), "--json"]).stdin(Stdio::null()).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let rows: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let listed: Vec<&str> = rows.as_array().unwrap().iter().map(|r| r["name"].as_str().unwrap()).collect();
    assert_eq!(listed.len(), 200_000);
    assert!(listed.iter().zip(&names).all(|(a, b)| a == b), "every lock once, in name order");
}

/// One session cannot queue more than its share (holds + waits, 10,000 by default): the
/// 10,001st acquire is refused with LIMIT_EXCEEDED, nothing else changes, other clients keep
/// working, and when the session ends its waits are gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_session_cannot_queue_more_than_its_limit() {
    let s = NativeServer::start(BIN.as_ref());
    let holder = locksmith::connect(&s.url()).await.unwrap();
    let held = holder.lock("queue").await.unwrap();
    let mut raw = RawSession::open(s.port(), 60_000).await;
    let (queued, refused) = raw.queue_waiters("queue", 10_001, 2_000).await;
    assert_eq!(queued, 10_000);
    match refused {
        Some(RawRefusal::Error(Code::LimitExceeded, why)) => {
            assert!(why.contains("10000 locks held and waited"), "{why}")
        }
        other => panic!("expected LIMIT_EXCEEDED, got {other:?}"),
    }
    let other = locksmith::connect(&s.url()).await.unwrap();
    let g = other.lock_with("elsewhere", LockOptions::new().timeout(Duration::from_secs(5))).await.unwrap();
    g.unlock().await.unwrap();

    raw.close();
    let until = Instant::now() + Duration::from_secs(5);
    loop {
        let status = holder.status(Some("queue")).await.unwrap();
        if status.first().and_then(|l| l.waiters) == Some(0) {
            break;
        }
        assert!(Instant::now() < until, "the closed session's waits are still queued: {status:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(held.unlock().await.unwrap());
}

/// The session table cannot be filled by one client: with `--max-sessions-per-client 3`, a
/// principal's fourth session is refused (LIMIT_EXCEEDED, wherever it connects from), while
/// another principal still opens sessions; a closed session makes room again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_client_cannot_fill_the_session_table() {
    let dir = tempfile::tempdir().unwrap();
    let (greedy, other) = (new_token(BIN.as_ref()), new_token(BIN.as_ref()));
    let policy = dir.path().join("policy.toml");
    std::fs::write(
        &policy,
        format!(
            "[principals.greedy]\ntokens = [\"{}\"]\nadmin = true\n[principals.other]\ntokens = [\"{}\"]\nadmin = true\n",
            greedy.1, other.1
        ),
    )
    .unwrap();
    for (who, (token, _)) in [("greedy", &greedy), ("other", &other)] {
        std::fs::write(dir.path().join(who), format!("{token}\n")).unwrap();
    }
    let s =
        NativeServer::start_with(BIN.as_ref(), &["--auth", policy.to_str().unwrap(), "--max-sessions-per-client", "3"]);
    let url = |who: &str| format!("{}?token_file={}", s.url(), dir.path().join(who).display());
    let mut held = Vec::new();
    for i in 0..3 {
        let c = locksmith::connect(&url("greedy")).await.unwrap();
        held.push((c.clone(), c.lock(&format!("greedy/{i}")).await.unwrap()));
    }
    let fourth = locksmith::connect(&url("greedy")).await.unwrap();
    match fourth.try_lock("greedy/3").await {
        Err(locksmith::Error::LimitExceeded(why)) => assert!(why.contains("3 sessions of one client"), "{why}"),
        other => panic!("expected LIMIT_EXCEEDED, got {other:?}"),
    }
    let polite = locksmith::connect(&url("other")).await.unwrap();
    let g = polite.lock_with("other/0", LockOptions::new().timeout(Duration::from_secs(5))).await.unwrap();
    g.unlock().await.unwrap();
    let (c, g) = held.pop().unwrap();
    g.unlock().await.unwrap();
    c.close().await;
    let g = fourth.lock_with("greedy/3", LockOptions::new().timeout(Duration::from_secs(5))).await;
    assert!(g.is_ok(), "a closed session made room: {g:?}");
}
