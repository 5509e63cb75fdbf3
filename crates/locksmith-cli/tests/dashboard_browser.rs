//! `locksmith dashboard` in headless Chromium: the page follows real `locksmith run` processes
//! without a reload — the lock appears with its holder within a second of the grant, a waiter
//! appears and leaves, the hand-off changes the holder, the time left counts down — on the
//! native server, etcd and ZooKeeper (observed) and Redis (polled), and says which.
//!
//! With `LOCKSMITH_SCREENSHOTS=DIR` the busy page of each backend is saved as
//! `DIR/dashboard-BACKEND.png` (the pictures in docs/).

#[path = "support/dashboard.rs"]
mod dashboard;
#[path = "support/webdriver.rs"]
mod webdriver;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use locksmith_testkit::{spawn, ChildProcess, EtcdServer, NativeCluster, NativeServer, RedisServer, ZkServer};
use webdriver::Browser;

const BIN: &str = env!("CARGO_BIN_EXE_locksmith");

/// `locksmith dashboard` for `url` and its page's address.
fn dashboard(url: &str, prefix: &str, more: &[&str]) -> (ChildProcess, String) {
    let (p, port) = dashboard::start_with(BIN, url, prefix, more);
    (p, format!("http://127.0.0.1:{port}/"))
}

/// `locksmith run NAME` holding for `secs` once granted; its command writes the wall-clock
/// time of the grant (ms) to `stamp`.
fn holder(url: &str, name: &str, secs: u32, stamp: &std::path::Path) -> ChildProcess {
    let mut cmd = Command::new(BIN);
    let script = format!("date +%s%3N > '{}'; sleep {secs}", stamp.display());
    cmd.args(["run", name, "--backend", url, "--", "sh", "-c", &script])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    spawn(&format!("locksmith run {name}"), &mut cmd)
}

/// The grant time a holder wrote, once it did.
fn granted_at(stamp: &std::path::Path) -> u128 {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(ms) = std::fs::read_to_string(stamp).ok().and_then(|s| s.trim().parse().ok()) {
            return ms;
        }
        assert!(Instant::now() < deadline, "the holder was not granted within 10 s");
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn now_ms() -> u128 {
    SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map(|d| d.as_millis()).unwrap_or_default()
}

/// A script returning `dash-job`'s first holder as `owner/token` when it is not `not` (owners
/// are the backends' own ids: Redis and etcd name a hold by a random id, not by the process).
fn holder_other_than(not: &str) -> String {
    format!(
        "const h = document.querySelector('[data-lock=\"dash-job\"] .holder');
         const id = h && (h.dataset.owner + '/' + h.dataset.token);
         return id && id !== '{not}' ? id : null;"
    )
}

/// A script returning whether `dash-job` shows `n` waiters.
fn waiters_are(n: u32) -> String {
    format!(
        "const c = document.querySelector('[data-lock=\"dash-job\"] .waiters .count');
         return c !== null && c.textContent === '{n}';"
    )
}

/// The page follows a lock on `url` through grant, wait, hand-off; `source` is what the page
/// must say about how it learns of changes (`observe` or `polling`).
fn the_page_follows_a_lock_live(url: &str, label: &str, source: &str, more: &[&str]) {
    let (_dashboard, page) = dashboard(url, "dash-", more);
    let browser = Browser::start(1280, 860);
    browser.open(&page);
    browser.wait_for(
        "the first state",
        Duration::from_secs(10),
        "return document.getElementById('source').className !== '';",
    );
    // Set once: still there at the end means the page was never reloaded.
    browser.eval("window.__loaded_once = true; return null;");

    let dir = tempfile::tempdir().expect("a temp dir");
    let (stamp_a, stamp_b) = (dir.path().join("a"), dir.path().join("b"));
    let _first = holder(url, "dash-job", 3, &stamp_a);
    let (owner, _) = browser.wait_for("the first holder", Duration::from_secs(10), &holder_other_than(""));
    let owner = owner.as_str().unwrap_or_default().to_string();
    let shown = now_ms();
    let lag = shown.saturating_sub(granted_at(&stamp_a));
    assert!(lag <= 1000, "{label}: the holder showed {lag} ms after the grant (at most 1 s)");
    eprintln!("{label}: grant shown after {lag} ms (holder {owner})");

    // The time left counts down between states; a backend that does not tell it (ZooKeeper)
    // is said to.
    let left = "const l = document.querySelector('[data-lock=\"dash-job\"] .left');
                return l ? Number(l.dataset.leftMs) : document.querySelector('[data-lock=\"dash-job\"] .holder').innerText;";
    let before = browser.eval(left);
    if let Some(text) = before.as_str() {
        assert!(text.contains("not told by this backend"), "{label}: {text}");
    } else {
        // Sampled every 100 ms: it goes down between states (a renewal read in between puts
        // it back up once).
        let mut samples = vec![before.as_f64().unwrap_or_default()];
        for _ in 0..6 {
            std::thread::sleep(Duration::from_millis(100));
            samples.push(browser.eval(left).as_f64().unwrap_or_default());
        }
        let downs = samples.windows(2).filter(|w| w[1] < w[0]).count();
        assert!(downs >= 3, "{label}: time left did not count down: {samples:?} ms");
    }

    let _second = holder(url, "dash-job", 30, &stamp_b);
    browser.wait_for("one waiter", Duration::from_secs(5), &waiters_are(1));
    if let Ok(dir) = std::env::var("LOCKSMITH_SCREENSHOTS") {
        std::thread::sleep(Duration::from_millis(600));
        let path = std::path::Path::new(&dir).join(format!("dashboard-{label}.png"));
        std::fs::write(&path, browser.screenshot()).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
    }
    // The first holder's command ends: the lock goes to the waiter, and nobody waits any more.
    browser.wait_for("the hand-off to the waiter", Duration::from_secs(8), &holder_other_than(&owner));
    browser.wait_for("no waiter", Duration::from_secs(3), &waiters_are(0));

    let said = browser.eval("return document.getElementById('source').className;");
    assert_eq!(said.as_str(), Some(source), "{label}: how the page says it learns of changes");
    let text = browser.eval("return document.getElementById('events').innerText;");
    let text = text.as_str().unwrap_or_default();
    assert!(text.contains("granted to") && text.contains("waiters: 1"), "{label}: the changes list:\n{text}");
    if !more.is_empty() {
        // The server's own figures: grants counted, a rate between two reads.
        browser.wait_for(
            "the server's figures",
            Duration::from_secs(6),
            r"const f = document.getElementById('figures');
             return f && /grants\/s \d/.test(f.innerText) && /grants [1-9]/.test(f.innerText);",
        );
    }
    // The lock's own view: its card alone and its history, the hand-off named as one.
    browser.eval("location.hash = '#lock=dash-job'; return null;");
    browser.wait_for(
        "the lock's history with the hand-off",
        Duration::from_secs(3),
        "return document.querySelectorAll('[data-lock]').length === 1
           && document.getElementById('events').innerText.includes('handed from');",
    );
    assert_eq!(
        browser.eval("return window.__loaded_once === true;").as_bool(),
        Some(true),
        "{label}: the page reloaded"
    );
}

#[test]
fn on_the_native_server_the_page_follows_grants_waiters_and_hand_offs_live() {
    let metrics = format!("127.0.0.1:{}", locksmith_testkit::free_port());
    let server = NativeServer::start_with(BIN.as_ref(), &["--metrics-listen", &metrics]);
    the_page_follows_a_lock_live(&server.url(), "native", "observe", &["--metrics", &metrics]);
}

#[test]
fn on_etcd_the_page_follows_grants_waiters_and_hand_offs_live() {
    let server = EtcdServer::start();
    the_page_follows_a_lock_live(&server.url(), "etcd", "observe", &[]);
}

#[test]
fn on_zookeeper_the_page_follows_grants_waiters_and_hand_offs_live() {
    let server = ZkServer::start();
    the_page_follows_a_lock_live(&server.url(), "zk", "observe", &[]);
}

#[test]
fn on_redis_the_page_follows_grants_waiters_and_hand_offs_by_polling() {
    let server = RedisServer::start();
    the_page_follows_a_lock_live(&server.url(), "redis", "polling", &[]);
}

/// `locksmith run NAME [OPTIONS] -- sleep SECS`.
fn run(url: &str, name: &str, options: &[&str], secs: f32) -> ChildProcess {
    let mut cmd = Command::new(BIN);
    cmd.args(["run", name, "--backend", url])
        .args(options)
        .args(["--", "sleep", &secs.to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    spawn(&format!("locksmith run {name}"), &mut cmd)
}

#[test]
fn on_a_native_cluster_the_page_shows_the_nodes_their_roles_the_term_and_the_leader() {
    let cluster = NativeCluster::start(BIN.as_ref(), 3);
    let url = cluster.url();
    let (_dashboard, page) = dashboard(&url, "", &[]);
    let browser = Browser::start(1280, 1000);
    browser.open(&page);
    // A busy server: a mutex handed along a queue, a read/write lock with readers, a semaphore,
    // and a mutex with waiters behind its holder.
    let mut work = Vec::new();
    for _ in 0..4 {
        work.push(run(&url, "nightly-report", &[], 1.5));
        std::thread::sleep(Duration::from_millis(100));
    }
    for _ in 0..2 {
        work.push(run(&url, "catalog", &["--shared"], 30.0));
        work.push(run(&url, "gpu-pool", &["--permits", "3"], 30.0));
    }
    work.push(run(&url, "deploy", &[], 30.0));
    std::thread::sleep(Duration::from_millis(300));
    work.push(run(&url, "deploy", &[], 30.0));
    work.push(run(&url, "deploy", &[], 30.0));

    let (leader, _) = browser.wait_for(
        "the cluster's leader",
        Duration::from_secs(10),
        "const rows = document.querySelectorAll('#cluster tr.node');
         const leader = document.querySelector('#cluster tr.node-leader .role');
         return rows.length === 3 && leader ? leader.textContent : null;",
    );
    assert_eq!(leader.as_str(), Some("leader"), "the leader's row names its role");
    let heading = browser.eval("return document.querySelector('#cluster h2').textContent;");
    assert!(heading.as_str().is_some_and(|h| h.contains("term ") && h.contains("leader node ")), "{heading}");
    browser.wait_for(
        "the kinds of the busy locks",
        Duration::from_secs(10),
        "const kind = (n) => document.querySelector(`[data-lock=\"${n}\"] .badge`)?.textContent;
         return kind('catalog') === 'read/write' && kind('gpu-pool') === 'semaphore 2/3' && kind('deploy') === 'mutex'
           && document.querySelector('[data-lock=\"deploy\"] .waiters .count')?.textContent === '2';",
    );
    if let Ok(dir) = std::env::var("LOCKSMITH_SCREENSHOTS") {
        // Some hand-offs of nightly-report on the timeline first.
        std::thread::sleep(Duration::from_secs(5));
        let path = std::path::Path::new(&dir).join("dashboard-cluster.png");
        std::fs::write(&path, browser.screenshot()).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
    }
}
