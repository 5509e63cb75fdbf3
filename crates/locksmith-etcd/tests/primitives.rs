//! etcd specifics of the primitives beyond the mutex (the shared properties run in
//! `conformance.rs`): every hold is a key in the layout of Go's `recipe.RWMutex` /
//! `concurrency.Mutex` or of locksmith's semaphore, read back with `etcdctl`; keys another client
//! writes in the recipe's layout (`etcdctl put --lease`) and Go's own `concurrency.Mutex`
//! (`etcdctl lock`) contend with ours; a permit comes back with its holder's lease; a semaphore's
//! number of permits and the kind of a name are agreed; status shows every holder.
//!
//! No Go toolchain is installed, so the Go `recipe.RWMutex` itself is not run: interop with it
//! is shown at the layout level (its key shapes and waiting rules, played with `etcdctl`).
//!
//! A crashed holder is a real process killed with `kill -9`: this test binary run again as a
//! child in "holder" mode.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use locksmith::{Error, HoldMode, LockOptions};
use locksmith_core::conformance::until_status;
use locksmith_testkit::EtcdServer;

const TTL: Duration = Duration::from_secs(5);

async fn client(server: &EtcdServer, query: &str) -> locksmith::Client {
    locksmith::connect_with_ttl(&format!("{}{query}", server.url()), TTL).await.unwrap()
}

/// A client's lease, as etcd stores it (a decimal number).
async fn lease_of(c: &locksmith::Client) -> i64 {
    i64::from_str_radix(&c.session_id().await.unwrap(), 16).unwrap()
}

/// One key as `etcdctl get -w fields` prints it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Key {
    key: String,
    create_revision: u64,
    lease: i64,
    value: String,
}

/// `etcdctl` with `args`; its stdout, after checking it succeeded.
fn etcdctl(server: &EtcdServer, args: &[&str]) -> String {
    let out = server.etcdctl().args(args).stdin(Stdio::null()).output().unwrap();
    assert!(out.status.success(), "etcdctl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

/// Every key under `prefix`, read back with `etcdctl get --prefix -w fields`, by key.
fn keys_under(server: &EtcdServer, prefix: &str) -> BTreeMap<String, Key> {
    let out = etcdctl(server, &["get", "--prefix", prefix, "-w", "fields"]);
    let mut keys = BTreeMap::new();
    let mut current: Option<Key> = None;
    for line in out.lines() {
        let Some((field, value)) = line.split_once(" : ") else { continue };
        let text = || value.trim_matches('"').to_string();
        match field.trim_matches('"') {
            "Key" => {
                if let Some(k) = current.take() {
                    keys.insert(k.key.clone(), k);
                }
                current = Some(Key { key: text(), create_revision: 0, lease: 0, value: String::new() });
            }
            "CreateRevision" => current.as_mut().unwrap().create_revision = value.parse().unwrap(),
            "Lease" => current.as_mut().unwrap().lease = value.parse().unwrap(),
            "Value" => current.as_mut().unwrap().value = text(),
            _ => {}
        }
    }
    if let Some(k) = current {
        keys.insert(k.key.clone(), k);
    }
    keys
}

/// The one key under `prefix`.
fn only_key(server: &EtcdServer, prefix: &str) -> Key {
    let keys = keys_under(server, prefix);
    assert_eq!(keys.len(), 1, "{prefix}: {keys:?}");
    keys.into_values().next().unwrap()
}

/// Whether `suffix` is a Go `time.Now().UnixNano()` written with `%v`: decimal digits, and a
/// time near now.
fn is_unix_nanos(suffix: &str) -> bool {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos();
    suffix.parse::<u128>().is_ok_and(|n| n.abs_diff(now) < Duration::from_secs(60).as_nanos())
}

/// Polls until `prefix` has `n` keys (a dropped acquisition deletes its key in a spawned task).
async fn until_keys(server: &EtcdServer, prefix: &str, n: usize) -> BTreeMap<String, Key> {
    for _ in 0..100 {
        let keys = keys_under(server, prefix);
        if keys.len() == n {
            return keys;
        }
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    panic!("{prefix} never had {n} keys: {:?}", keys_under(server, prefix));
}

fn nanos_now() -> String {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos().to_string()
}

/// A lease granted by `etcdctl lease grant`, as etcdctl prints it (hex).
fn etcdctl_lease(server: &EtcdServer) -> String {
    let out = etcdctl(server, &["lease", "grant", "60"]);
    out.split_whitespace().nth(1).unwrap().to_string()
}

/// A reader is `NAME/read/<unix-nanos>` and a writer (`?exclusive=write-lock`)
/// `NAME/write/<unix-nanos>`, as the Go recipe's `newUniqueEphemeralKey` names them, with an
/// empty value; a plain exclusive hold is Go's `concurrency.Mutex` key `NAME/<lease-hex>`; a
/// permit of N is `NAME/permit/<unix-nanos>` whose value is N. Every key is on the holder's
/// lease and its create revision is the hold's token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kind_of_hold_is_a_key_in_the_go_recipes_layout() {
    let server = EtcdServer::start();
    let plain = client(&server, "").await;
    let writer = client(&server, "?exclusive=write-lock").await;
    let (plain_lease, writer_lease) = (lease_of(&plain).await, lease_of(&writer).await);

    let read = plain.lock_with("catalog", LockOptions::new().shared()).await.unwrap();
    let k = only_key(&server, "catalog/");
    let suffix = k.key.strip_prefix("catalog/read/").unwrap_or_else(|| panic!("not a reader key: {k:?}"));
    assert!(is_unix_nanos(suffix), "{k:?}");
    assert_eq!((k.lease, k.value.as_str(), k.create_revision), (plain_lease, "", read.token()));
    assert!(read.unlock().await.unwrap());

    let write = writer.lock("catalog").await.unwrap();
    let k = only_key(&server, "catalog/");
    let suffix = k.key.strip_prefix("catalog/write/").unwrap_or_else(|| panic!("not a writer key: {k:?}"));
    assert!(is_unix_nanos(suffix), "{k:?}");
    assert_eq!((k.lease, k.value.as_str(), k.create_revision), (writer_lease, "", write.token()));
    assert!(write.unlock().await.unwrap());

    let mutex = plain.lock("catalog").await.unwrap();
    let k = only_key(&server, "catalog/");
    assert_eq!(k.key, format!("catalog/{plain_lease:x}"), "Go's concurrency.Mutex key");
    assert_eq!((k.lease, k.create_revision), (plain_lease, mutex.token()));
    assert!(mutex.unlock().await.unwrap());

    let permit = writer.lock_with("exports", LockOptions::new().permits(3)).await.unwrap();
    let k = only_key(&server, "exports/");
    let suffix = k.key.strip_prefix("exports/permit/").unwrap_or_else(|| panic!("not a permit key: {k:?}"));
    assert!(is_unix_nanos(suffix), "{k:?}");
    assert_eq!((k.lease, k.value.as_str(), k.create_revision), (writer_lease, "3", permit.token()));
    assert!(permit.unlock().await.unwrap());
    assert!(keys_under(&server, "").is_empty(), "released holds leave no key");
}

/// Another client writes a writer key in the recipe's layout by hand (`etcdctl put --lease`):
/// our readers wait for it and get in once it is deleted. A reader key written by hand lets our
/// readers in and keeps our writers (either layout) out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_written_by_hand_in_the_recipes_layout_contend_with_ours() {
    let server = EtcdServer::start();
    let plain = client(&server, "").await;
    let writer = client(&server, "?exclusive=write-lock").await;
    let lease = etcdctl_lease(&server);

    let theirs = format!("shelf/write/{}", nanos_now());
    etcdctl(&server, &["put", "--lease", &lease, &theirs, ""]);
    assert!(plain.try_lock_with("shelf", LockOptions::new().shared()).await.unwrap().is_none());
    let waiting = {
        let plain = plain.clone();
        tokio::spawn(async move { plain.lock_with("shelf", LockOptions::new().shared()).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiting.is_finished(), "a reader got in past a writer key written by hand");
    let their_rev = only_key(&server, "shelf/write/").create_revision;
    etcdctl(&server, &["del", &theirs]);
    let read = tokio::time::timeout(Duration::from_secs(3), waiting).await.unwrap().unwrap().unwrap();
    assert!(read.token() > their_rev);
    assert!(read.unlock().await.unwrap());

    let theirs = format!("shelf/read/{}", nanos_now());
    etcdctl(&server, &["put", "--lease", &lease, &theirs, ""]);
    let read = plain.try_lock_with("shelf", LockOptions::new().shared()).await.unwrap();
    assert!(read.is_some(), "readers share with a reader key written by hand");
    assert!(plain.try_lock("shelf").await.unwrap().is_none(), "a mutex got in past a reader");
    assert!(writer.try_lock("shelf").await.unwrap().is_none(), "a writer got in past a reader");
    etcdctl(&server, &["lease", "revoke", &lease]);
    drop(read);
    let write = writer.lock_with("shelf", LockOptions::new().timeout(Duration::from_secs(3))).await.unwrap();
    assert!(write.unlock().await.unwrap());
}

/// Go's own `concurrency.Mutex` (`etcdctl lock`) and our readers exclude each other: etcdctl
/// waits while we read, and our reader waits while etcdctl holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_and_etcdctl_lock_exclude_each_other() {
    let server = EtcdServer::start();
    let c = client(&server, "").await;
    let log = std::env::temp_dir().join(format!("locksmith-etcd-order-{}-{}.log", std::process::id(), nanos_now()));
    let etcdctl_lock = |script: String| {
        let mut cmd: Command = server.etcdctl();
        cmd.args(["lock", "ledger", "--", "sh", "-c", &script]).stdin(Stdio::null()).stdout(Stdio::null());
        std::thread::spawn(move || cmd.status().unwrap())
    };

    let read = c.lock_with("ledger", LockOptions::new().shared()).await.unwrap();
    let go = etcdctl_lock(format!("echo etcdctl >> {}", log.display()));
    until_status(&c, "ledger", |s| s.waiters == Some(1)).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!log.exists(), "etcdctl lock got in while a reader held the lock");
    std::fs::write(&log, "reader released\n").unwrap();
    assert!(read.unlock().await.unwrap());
    assert!(tokio::task::spawn_blocking(move || go.join().unwrap()).await.unwrap().success());
    assert_eq!(std::fs::read_to_string(&log).unwrap(), "reader released\netcdctl\n");

    std::fs::remove_file(&log).unwrap();
    let go = etcdctl_lock(format!("sleep 1; echo etcdctl released >> {}", log.display()));
    until_status(&c, "ledger", |s| s.holder.as_ref().is_some_and(|h| h.mode == HoldMode::Exclusive)).await;
    assert!(c.try_lock_with("ledger", LockOptions::new().shared()).await.unwrap().is_none());
    let read = c.lock_with("ledger", LockOptions::new().shared().timeout(Duration::from_secs(10))).await.unwrap();
    let logged = std::fs::read_to_string(&log).unwrap_or_default();
    assert_eq!(logged, "etcdctl released\n", "the reader got in before etcdctl lock let go");
    assert!(tokio::task::spawn_blocking(move || go.join().unwrap()).await.unwrap().success());
    assert!(read.unlock().await.unwrap());
    let _ = std::fs::remove_file(&log);
}

/// A permit whose holder's lease is revoked (what etcd does when a crashed holder's lease
/// expires) comes back: the waiter gets it with a higher token, and the old holder learns it
/// lost it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permit_whose_holders_lease_is_revoked_comes_back() {
    let server = EtcdServer::start();
    let a = client(&server, "").await;
    let b = client(&server, "").await;
    let held = a.lock_with("exports", LockOptions::new().permits(1)).await.unwrap();
    let waiting = {
        let b = b.clone();
        tokio::spawn(async move { b.lock_with("exports", LockOptions::new().permits(1)).await })
    };
    until_status(&a, "exports", |s| s.waiters == Some(1)).await;
    etcdctl(&server, &["lease", "revoke", &a.session_id().await.unwrap()]);
    let got = tokio::time::timeout(Duration::from_secs(3), waiting).await.unwrap().unwrap().unwrap();
    assert!(got.token() > held.token());
    tokio::time::timeout(TTL, held.lost()).await.expect("the revoked holder never learned it lost its permit");
    assert!(got.unlock().await.unwrap());
}

/// Set in the environment of the child process that plays the holder killed with `kill -9`.
const HOLDER_URL: &str = "LOCKSMITH_ETCD_TEST_PERMIT_HOLDER_URL";

/// A permit holder killed with `kill -9` (no release, no revoke) gives its permit back when
/// etcd expires its lease: the queued waiter gets it within the holder's TTL plus a margin, with
/// a higher token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_permit_holders_permit_comes_back_within_its_ttl() {
    const HOLDER_TTL: Duration = Duration::from_secs(2);
    if let Ok(url) = std::env::var(HOLDER_URL) {
        // The child: take the permit, say so, and wait to be killed.
        let c = locksmith::connect_with_ttl(&url, HOLDER_TTL).await.unwrap();
        let g = c.lock_with("exports", LockOptions::new().permits(1)).await.unwrap();
        println!("holding {}", g.token());
        tokio::time::sleep(Duration::from_secs(60)).await;
        return;
    }
    let server = EtcdServer::start();
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", "a_killed_permit_holders_permit_comes_back_within_its_ttl", "--nocapture"])
        .env(HOLDER_URL, server.url())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let mut holder = locksmith_testkit::spawn("permit holder", &mut cmd);
    let out = holder.take_stdout().unwrap();
    let token = tokio::task::spawn_blocking(move || {
        BufReader::new(out).lines().map_while(Result::ok).find_map(|l| l.strip_prefix("holding ")?.parse::<u64>().ok())
    });
    let token = tokio::time::timeout(Duration::from_secs(10), token).await.unwrap().unwrap().unwrap();
    let b = client(&server, "").await;
    let waiting = {
        let b = b.clone();
        let opts = LockOptions::new().permits(1).timeout(Duration::from_secs(10));
        tokio::spawn(async move { b.lock_with("exports", opts).await })
    };
    until_status(&b, "exports", |s| s.waiters == Some(1)).await;
    holder.kill9();
    let killed = Instant::now();
    let got = waiting.await.unwrap().unwrap();
    let waited = killed.elapsed();
    assert!(got.token() > token);
    assert!(
        waited < HOLDER_TTL + Duration::from_millis(1_500),
        "the permit came back after {waited:?}, TTL {HOLDER_TTL:?}"
    );
    assert!(got.unlock().await.unwrap());
}

/// A waiter whose lease is revoked while it waits for a permit gets no phantom grant when one
/// comes free (etcd#11456): it fails, and the permit goes to the next waiter.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permit_waiter_whose_lease_expired_gets_no_phantom_grant() {
    let server = EtcdServer::start();
    let (a, b, c) = (client(&server, "").await, client(&server, "").await, client(&server, "").await);
    let held = a.lock_with("exports", LockOptions::new().permits(1)).await.unwrap();
    let b_waits = {
        let b = b.clone();
        tokio::spawn(async move { b.lock_with("exports", LockOptions::new().permits(1)).await })
    };
    until_status(&a, "exports", |s| s.waiters == Some(1)).await;
    let c_waits = {
        let c = c.clone();
        tokio::spawn(async move { c.lock_with("exports", LockOptions::new().permits(1)).await })
    };
    until_status(&a, "exports", |s| s.waiters == Some(2)).await;
    etcdctl(&server, &["lease", "revoke", &b.session_id().await.unwrap()]);
    assert!(held.unlock().await.unwrap());
    let got = tokio::time::timeout(Duration::from_secs(3), c_waits).await.unwrap().unwrap().unwrap();
    if let Ok(r) = tokio::time::timeout(Duration::from_secs(3), b_waits).await {
        let r = r.unwrap();
        assert!(r.is_err(), "a waiter without a lease reported holding a permit: {r:?}");
    }
    assert!(got.unlock().await.unwrap());
}

/// Two first users asking for different numbers of permits at the same moment: etcd decides
/// one create after the other, and the later sees the earlier's key saying another N, so exactly
/// one gets a permit and the other is refused. Once the semaphore is free, another N is fine.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_first_users_of_a_semaphore_never_use_two_numbers_of_permits() {
    let server = EtcdServer::start();
    let (a, b) = (client(&server, "").await, client(&server, "").await);
    for round in 0..10 {
        let name = format!("race-{round}");
        let (ra, rb) = tokio::join!(
            a.try_lock_with(&name, LockOptions::new().permits(2)),
            b.try_lock_with(&name, LockOptions::new().permits(3))
        );
        let refused = |r: &locksmith::Result<Option<locksmith::Guard>>| matches!(r, Err(Error::InvalidArgument(m)) if m.contains("permits"));
        match (&ra, &rb) {
            (Ok(Some(_)), r) | (r, Ok(Some(_))) if refused(r) => {}
            _ => panic!("round {round}: expected one permit and one refusal, got {ra:?} and {rb:?}"),
        }
        drop((ra, rb));
        until_keys(&server, &format!("{name}/"), 0).await;
        let other = a.try_lock_with(&name, LockOptions::new().permits(5)).await.unwrap();
        assert!(other.is_some(), "a free semaphore refused a new number of permits");
    }
}

/// A refusal because the name is in use the other way (the shared suite's
/// `a_name_is_a_lock_or_a_semaphore_never_both`) also names the key in the way, for the
/// operator: a reader's key, a permit's key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_names_the_key_in_the_way() {
    let server = EtcdServer::start();
    let (a, b) = (client(&server, "").await, client(&server, "?exclusive=write-lock").await);
    let read = a.lock_with("shelf", LockOptions::new().shared()).await.unwrap();
    let r = b.try_lock_with("shelf", LockOptions::new().permits(2)).await;
    assert!(matches!(&r, Err(Error::InvalidArgument(m)) if m.contains("(seen at key shelf/read/")), "{r:?}");
    let permit = a.lock_with("pool", LockOptions::new().permits(2)).await.unwrap();
    let r = b.try_lock("pool").await;
    assert!(matches!(&r, Err(Error::InvalidArgument(m)) if m.contains("(seen at key pool/permit/")), "{r:?}");
    assert!(
        keys_under(&server, "pool/").len() == 1 && keys_under(&server, "shelf/").len() == 1,
        "a refusal left a key"
    );
    assert!(read.unlock().await.unwrap());
    assert!(permit.unlock().await.unwrap());
}

/// A `concurrency.Mutex` key (the default) and a writer key (`?exclusive=write-lock`) on one
/// name exclude each other, and a reader waits for either: locksmith clients with different
/// layouts still share one lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutex_and_writer_keys_exclude_each_other_and_readers_wait_for_both() {
    let server = EtcdServer::start();
    let m = client(&server, "").await;
    let w = client(&server, "?exclusive=write-lock").await;
    for (holder, other) in [(&m, &w), (&w, &m)] {
        let g = holder.lock("inventory").await.unwrap();
        assert!(other.try_lock("inventory").await.unwrap().is_none());
        for c in [&m, &w] {
            assert!(c.try_lock_with("inventory", LockOptions::new().shared()).await.unwrap().is_none());
        }
        assert!(g.unlock().await.unwrap());
    }
}
