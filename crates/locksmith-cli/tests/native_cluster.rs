//! The native server as a 3-node cluster (`locksmith serve --node-id N --peers …`): the whole
//! contract (library and processes, the mutex and the primitives beyond it) through a URL naming
//! every node, and fail-overs: a leader killed under load never leaves two holders, tokens keep
//! increasing per lock, and clients that keep renewing keep their locks.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use locksmith::LockOptions;
use locksmith_core::conformance::UrlTarget;
use locksmith_testkit::NativeCluster;

const BIN: &str = env!("CARGO_BIN_EXE_locksmith");

/// One cluster shared by the suites (each test uses lock names of its own); never killed.
fn shared() -> &'static NativeCluster {
    static CLUSTER: OnceLock<NativeCluster> = OnceLock::new();
    CLUSTER.get_or_init(|| NativeCluster::start(BIN.as_ref(), 3))
}

fn target() -> UrlTarget {
    UrlTarget::new(shared().url(), locksmith::backend)
}

mod contract {
    locksmith_core::conformance_suite!(super::target());
    locksmith_core::primitives_suite!(super::target());
}

mod processes {
    locksmith_testkit::process_conformance_suite!(locksmith_testkit::CliTarget::new(super::BIN, super::target()));
    locksmith_testkit::primitives_process_suite!(locksmith_testkit::CliTarget::new(super::BIN, super::target()));
}

/// What the clients under load saw.
#[derive(Default)]
struct Seen {
    /// Grants per lock, in the order they were made.
    tokens: HashMap<String, Vec<u64>>,
    grants: u64,
    lost: u64,
}

/// Kills the leader with `kill -9` three times while 8 clients contend for one lock and 32 more
/// work on locks of their own: never two holders at once, every lock's tokens strictly
/// increasing, no client that kept renewing loses a lock, and a new leader grants within a few
/// election timeouts each time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_killed_under_load_never_leaves_two_holders_and_holds_survive() {
    let mut cluster = NativeCluster::start(BIN.as_ref(), 3);
    let url = cluster.url();
    let stop = Arc::new(AtomicBool::new(false));
    let seen = Arc::new(Mutex::new(Seen::default()));
    let inside: Arc<HashMap<String, AtomicBool>> = Arc::new(
        (0..33)
            .map(|i| (if i == 0 { "hot".to_string() } else { format!("own/{i}") }, AtomicBool::new(false)))
            .collect(),
    );
    // The start of the latest acquisition that was granted, in ms since `started`: a grant
    // already on its way when the leader died does not count as the new leader's.
    let last_grant = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for i in 0..40usize {
        let name = if i < 8 { "hot".to_string() } else { format!("own/{}", i - 7) };
        let (url, stop, seen, inside, last_grant) =
            (url.clone(), stop.clone(), seen.clone(), inside.clone(), last_grant.clone());
        tasks.push(tokio::spawn(async move {
            let c = locksmith::connect_with_ttl(&url, Duration::from_secs(5)).await.unwrap_or_else(|e| panic!("{e}"));
            while !stop.load(Ordering::SeqCst) {
                let began = started.elapsed().as_millis() as u64;
                let g = match c.lock_with(&name, LockOptions::new().timeout(Duration::from_secs(10))).await {
                    Ok(g) => g,
                    // The leader just went: the next attempt finds the new one.
                    Err(_) => continue,
                };
                let flag = &inside[&name];
                assert!(!flag.swap(true, Ordering::SeqCst), "two holders of {name} at once");
                {
                    let mut s = seen.lock().unwrap_or_else(|p| p.into_inner());
                    s.tokens.entry(name.clone()).or_default().push(g.token());
                    s.grants += 1;
                }
                last_grant.fetch_max(began, Ordering::SeqCst);
                // Hold across a moment: some holds span a fail-over.
                tokio::select! {
                    _ = g.lost() => {
                        seen.lock().unwrap_or_else(|p| p.into_inner()).lost += 1;
                    }
                    _ = tokio::time::sleep(Duration::from_millis(20)) => {}
                }
                flag.store(false, Ordering::SeqCst);
                let _ = g.unlock().await;
            }
            c.close().await;
        }));
    }
    let mut unavailable = Vec::new();
    for _ in 0..3 {
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let leader = cluster.wait_for_leader(Duration::from_secs(10));
        cluster.kill9(leader);
        let killed_at = started.elapsed().as_millis() as u64;
        // Unavailability: from the kill to the first grant of an acquisition begun after it.
        let until = Instant::now() + Duration::from_secs(15);
        while last_grant.load(Ordering::SeqCst) <= killed_at {
            assert!(Instant::now() < until, "no grant within 15 s of killing leader {leader}");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        unavailable.push(started.elapsed().as_millis() as u64 - killed_at);
        cluster.restart(leader);
    }
    tokio::time::sleep(Duration::from_millis(1000)).await;
    stop.store(true, Ordering::SeqCst);
    for t in tasks {
        if let Err(e) = t.await {
            std::panic::resume_unwind(e.into_panic());
        }
    }
    let s = seen.lock().unwrap_or_else(|p| p.into_inner());
    for (name, tokens) in &s.tokens {
        assert!(tokens.windows(2).all(|w| w[1] > w[0]), "{name}: tokens not increasing: {tokens:?}");
    }
    assert_eq!(s.lost, 0, "holders that kept renewing lost their locks across fail-overs");
    assert!(s.grants > 100, "too few grants to mean anything: {}", s.grants);
    println!("fail-overs: kill → next grant {unavailable:?} ms; {} grants", s.grants);
}

/// A URL naming one follower works: the client follows the leader that node names, as with a
/// DNS or load-balancer name that lands on any node; with `follow=false` it is told where the
/// leader is instead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_given_one_follower_is_sent_to_the_leader() {
    let c = shared();
    let leader = c.wait_for_leader(Duration::from_secs(10));
    let follower = c.ids().into_iter().find(|id| *id != leader).unwrap_or(leader);
    let out = std::process::Command::new(BIN)
        .args(["run", "cluster/one-follower", "--backend", &c.node_url(follower), "--"])
        .args(["sh", "-c", "echo token=$LOCKSMITH_TOKEN"])
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stdout.trim().strip_prefix("token=").is_some_and(|t| t.parse::<u64>().is_ok()), "{stdout}");
    // The library too, through the follower's address alone.
    let client = locksmith::connect(&c.node_url(follower)).await.unwrap_or_else(|e| panic!("{e}"));
    let g = client.lock("cluster/one-url").await.unwrap_or_else(|e| panic!("{e}"));
    assert!(g.unlock().await.unwrap_or(false));
    // follow=false keeps to that node, which says where the leader is.
    let out = std::process::Command::new(BIN)
        .args(["status", "--backend", &c.only_node_url(follower)])
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(69), "{stderr}");
    assert!(stderr.contains("does not lead the cluster; the leader is at 127.0.0.1:"), "{stderr}");
}

/// `locksmith cluster status --json` through `url` within `bound`: exit code, JSON, time taken.
fn cluster_status(url: &str, bound: &str) -> (Option<i32>, serde_json::Value, Duration, String) {
    let started = Instant::now();
    let out = std::process::Command::new(BIN)
        .args(["cluster", "status", "--json", "--connect-timeout", bound, "--backend", url])
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    let took = started.elapsed();
    let json = serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null);
    (out.status.code(), json, took, String::from_utf8_lossy(&out.stderr).into_owned())
}

/// The node `id` of a `cluster status --json` answer.
fn node(s: &serde_json::Value, id: u64) -> serde_json::Value {
    s["nodes"].as_array().into_iter().flatten().find(|n| n["id"] == id).cloned().unwrap_or_default()
}

/// Hung nodes (SIGSTOP: connections accepted, nothing answered) cost a client a fraction of a
/// second each, never its call: `run` with a paused node first in the URL acquires at once,
/// and `cluster status` with two of three nodes paused answers within its bound from the live
/// node and marks the others — unreachable in the leader's view, "no answer" otherwise.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hung_nodes_cost_a_fraction_of_a_second_and_cluster_status_marks_them() {
    let c = NativeCluster::start(BIN.as_ref(), 3);
    let leader = c.wait_for_leader(Duration::from_secs(10));
    let followers: Vec<u64> = c.ids().into_iter().filter(|id| *id != leader).collect();
    let (f1, f2) = (followers[0], followers[1]);
    let url = |ids: &[u64]| format!("locksmith://{}", ids.iter().map(|id| c.addr(*id)).collect::<Vec<_>>().join(","));

    // A paused follower listed first.
    c.pause(f1);
    let started = Instant::now();
    let out = std::process::Command::new(BIN)
        .args(["run", "hung/first", "--backend", &url(&[f1, leader, f2]), "--", "true"])
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    let took = started.elapsed();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(took < Duration::from_millis(2_000), "run took {took:?} with a paused first node");
    println!("run with a paused first node: {took:?}");

    // Both followers paused for longer than an election timeout: the leader marks them.
    c.pause(f2);
    std::thread::sleep(Duration::from_millis(1_200));
    let (code, s, took, err) = cluster_status(&url(&[f1, f2, leader]), "1s");
    assert_eq!(code, Some(0), "{err}");
    assert!(took < Duration::from_millis(1_800), "cluster status took {took:?}");
    assert_eq!((s["node_id"].as_u64(), s["leader_view"].as_bool()), (Some(leader), Some(true)), "{s}");
    for f in [f1, f2] {
        let n = node(&s, f);
        assert_eq!(n["unreachable"], true, "{s}");
        assert!(n["last_contact_ms"].as_u64().is_some_and(|ms| ms >= 1_000), "{s}");
    }
    assert_eq!(node(&s, leader)["unreachable"], false, "{s}");
    println!("cluster status, two followers paused: {took:?}");

    // The leader and one follower paused: the live follower answers within the bound, and the
    // client marks the two that did not answer it.
    c.resume(f1);
    c.resume(f2);
    std::thread::sleep(Duration::from_millis(500));
    // Resumed followers find their election timers long run out and may stand before the next
    // heartbeat reaches them (more likely with short timeouts): ask who leads now.
    let leader = c.wait_for_leader(Duration::from_secs(10));
    let followers: Vec<u64> = c.ids().into_iter().filter(|id| *id != leader).collect();
    let (f1, f2) = (followers[0], followers[1]);
    c.pause(leader);
    c.pause(f1);
    let (code, s, took, err) = cluster_status(&url(&[leader, f1, f2]), "1s");
    assert_eq!(code, Some(0), "{err}");
    assert!(took < Duration::from_millis(1_800), "cluster status took {took:?}");
    assert_eq!((s["node_id"].as_u64(), s["leader_view"].as_bool()), (Some(f2), Some(false)), "{s}");
    for id in [leader, f1] {
        assert_eq!(node(&s, id)["no_answer"], true, "{s}");
    }
    assert_eq!(node(&s, f2)["no_answer"], false, "{s}");
    let table = std::process::Command::new(BIN)
        .args(["cluster", "status", "--connect-timeout", "1s", "--backend", &url(&[leader, f1, f2])])
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    let table = String::from_utf8_lossy(&table.stdout);
    assert_eq!(table.matches("no answer").count(), 2, "{table}");
    println!("cluster status, leader and a follower paused: {took:?}");
    c.resume(leader);
    c.resume(f1);
}

/// The leader cut off from the other nodes (a blackhole both ways) while its clients still reach
/// it: it grants nothing; the majority elects a leader, which grants the old leader's lock only
/// after its holder — on the minority side — stopped trusting it; once healed, the old leader
/// steps down and catches up (with the third node stopped, grants need its acknowledgement).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitioned_leader_grants_nothing_and_the_majority_waits_out_its_holders() {
    // The clients' story, shown if the test fails.
    let _ = tracing_subscriber::fmt().with_env_filter("locksmith=debug").with_test_writer().try_init();
    let mut cluster = NativeCluster::start_with_links(BIN.as_ref(), 3);
    let old = cluster.wait_for_leader(Duration::from_secs(10));
    let others: Vec<u64> = cluster.ids().into_iter().filter(|id| *id != old).collect();
    let ttl = Duration::from_secs(3);
    // Holder A reaches the old leader only; B reaches the other two.
    let a = locksmith::connect_with_ttl(&cluster.front_url(&[old]), ttl).await.unwrap_or_else(|e| panic!("{e}"));
    let b = locksmith::connect_with_ttl(&cluster.front_url(&others), ttl).await.unwrap_or_else(|e| panic!("{e}"));
    let held = a.lock("partition/held").await.unwrap_or_else(|e| panic!("{e}"));
    let first_token = held.token();

    cluster.isolate(old);
    let started = Instant::now();
    // The minority side: its leader grants nothing, not even a free lock.
    let minority = tokio::spawn(async move {
        let r = a.lock_with("partition/free", LockOptions::new().timeout(Duration::from_secs(6))).await;
        r.map(|g| g.token()).map_err(|e| e.to_string())
    });
    let lost_at = tokio::spawn(async move {
        held.lost().await;
        started.elapsed()
    });
    let granted = b
        .lock_with("partition/held", LockOptions::new().timeout(Duration::from_secs(20)))
        .await
        .unwrap_or_else(|e| panic!("the majority never granted the lock: {e}\n{}", cluster.report()));
    let granted_at = started.elapsed();
    let lost_at = lost_at.await.unwrap_or_else(|e| panic!("{e}"));
    assert!(
        lost_at <= granted_at,
        "the majority granted the lock at {granted_at:?}, before its holder across the partition stopped trusting it \
         ({lost_at:?})"
    );
    assert!(granted.token() > first_token, "token went backwards: {} after {first_token}", granted.token());
    let minority = minority.await.unwrap_or_else(|e| panic!("{e}"));
    assert!(minority.is_err(), "the partitioned leader granted a lock: token {minority:?}");
    println!("partition: holder stopped trusting at {lost_at:?}, majority granted at {granted_at:?}");

    // Heal: the old leader steps down (it no longer answers as the leader) and catches up.
    cluster.heal();
    let until = Instant::now() + Duration::from_secs(10);
    let new_leader = loop {
        let leader = cluster.wait_for_leader(Duration::from_secs(10));
        if leader != old {
            break leader;
        }
        assert!(Instant::now() < until, "the healed old leader {old} still leads");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let third = others.into_iter().find(|id| *id != new_leader).unwrap_or(new_leader);
    cluster.kill9(third);
    // Only the new leader and the old one are left: every commit needs the old leader's log.
    let c = locksmith::connect(&cluster.url()).await.unwrap_or_else(|e| panic!("{e}"));
    let g = c
        .lock_with("partition/after", LockOptions::new().timeout(Duration::from_secs(10)))
        .await
        .unwrap_or_else(|e| panic!("no grant with the healed old leader as the only follower: {e}"));
    assert!(granted.is_held(), "B lost its lock after the heal");
    let _ = g.unlock().await;
    let _ = granted.unlock().await;
}

/// A leader paused for longer than the clients' TTL: the holder's `run` stops its command and
/// exits 76 with the loss line, and a waiter whose session expired meanwhile exits 76 or gets
/// the lock later — never 1 (issue 29, finding 6).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_paused_past_the_ttl_makes_its_holder_exit_76() {
    let c = NativeCluster::start(BIN.as_ref(), 3);
    let leader = c.wait_for_leader(Duration::from_secs(10));
    let start = |what: &str, cmd: &[&str]| {
        let mut command = std::process::Command::new(BIN);
        command
            .args(["run", "paused/leader", "--ttl", "1s", "--timeout", "20s", "--backend", &c.url(), "--"])
            .args(cmd)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped());
        locksmith_testkit::spawn(what, &mut command)
    };
    let mut holder = start("holder", &["sleep", "30"]);
    let until = Instant::now() + Duration::from_secs(10);
    let client = locksmith::connect(&c.url()).await.unwrap_or_else(|e| panic!("{e}"));
    while client.status(Some("paused/leader")).await.ok().and_then(|s| s.first()?.holder.clone()).is_none() {
        assert!(Instant::now() < until, "the holder never got the lock");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    client.close().await;
    let mut waiter = start("waiter", &["true"]);
    tokio::time::sleep(Duration::from_millis(300)).await;
    c.pause(leader);
    tokio::time::sleep(Duration::from_secs(4)).await;
    c.resume(leader);
    let stderr = |p: &mut locksmith_testkit::ChildProcess| {
        let mut text = String::new();
        if let Some(mut e) = p.take_stderr() {
            let _ = std::io::Read::read_to_string(&mut e, &mut text);
        }
        text
    };
    let code = holder.wait_timeout(Duration::from_secs(10)).and_then(|s| s.code());
    let text = stderr(&mut holder);
    assert_eq!(code, Some(76), "{text}");
    assert!(text.contains("lost lock"), "{text}");
    let code = waiter.wait_timeout(Duration::from_secs(25)).and_then(|s| s.code());
    let text = stderr(&mut waiter);
    assert!(matches!(code, Some(0 | 76)), "waiter exit {code:?}: {text}");
    println!("paused leader: holder 76; waiter {code:?}");
}

/// An administrator's release in a cluster, asked through a follower's address: committed like
/// every change, the holder learns of the loss, and the waiter is granted a greater token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admin_release_in_a_cluster_hands_the_lock_on() {
    let c = shared();
    let ttl = Duration::from_secs(2);
    let a = locksmith::connect_with_ttl(&c.url(), ttl).await.unwrap_or_else(|e| panic!("{e}"));
    let b = locksmith::connect_with_ttl(&c.url(), ttl).await.unwrap_or_else(|e| panic!("{e}"));
    let held = a.lock("admin/stuck").await.unwrap_or_else(|e| panic!("{e}"));
    let first = held.token();
    let waiter = tokio::spawn(async move {
        b.lock_with("admin/stuck", LockOptions::new().timeout(Duration::from_secs(10))).await.map(|g| g.token())
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let leader = c.wait_for_leader(Duration::from_secs(10));
    let follower = c.ids().into_iter().find(|id| *id != leader).unwrap_or(leader);
    let admin = locksmith_native::NativeBackend::from_url(&c.node_url(follower)).unwrap_or_else(|e| panic!("{e}"));
    let name = locksmith::LockName::new("admin/stuck").unwrap_or_else(|e| panic!("{e}"));
    let revoked = admin.admin_release(&name, None).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(revoked.iter().map(|h| h.token).collect::<Vec<_>>(), vec![first]);
    let granted = waiter.await.unwrap_or_else(|e| panic!("{e}")).unwrap_or_else(|e| panic!("{e}"));
    assert!(granted > first, "token {granted} after {first}");
    tokio::time::timeout(ttl * 2, held.lost()).await.unwrap_or_else(|_| panic!("the holder never learned of the loss"));
}

/// `serve` with timing flags and a fresh data directory: its exit code, its stderr, and whether
/// it created the data directory.
fn serve_with_timings(args: &[&str], config: Option<&str>) -> (Option<i32>, String, bool) {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let secret = locksmith_testkit::write_cluster_secret(dir.path());
    let data = dir.path().join("data");
    let mut cmd = std::process::Command::new(BIN);
    cmd.args(["serve", "--listen", "127.0.0.1:0", "--data-dir"]).arg(&data).args(args);
    if args.contains(&"--node-id") {
        cmd.arg("--cluster-secret-file").arg(&secret);
    }
    if let Some(text) = config {
        let file = dir.path().join("serve.toml");
        std::fs::write(&file, text).unwrap_or_else(|e| panic!("{e}"));
        cmd.arg("--config").arg(file);
    }
    let out = cmd.stdin(std::process::Stdio::null()).output().unwrap_or_else(|e| panic!("{e}"));
    (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned(), data.exists())
}

/// Timings outside their bounds are configuration errors (exit 78) naming the option, before
/// the data directory is created; a value that is no duration or range is a usage error (2),
/// as is a timing given to a single node (it has no elections; 78 from the config file).
#[test]
fn timings_outside_their_bounds_are_refused_naming_the_option() {
    let node = ["--node-id", "1", "--peers", "1=127.0.0.1:7531"];
    fn with<'a>(node: &[&'a str], extra: &[&'a str]) -> Vec<&'a str> {
        [node, extra].concat()
    }
    for (extra, option, why) in [
        (&["--heartbeat", "5ms"][..], "--heartbeat", "below the shortest heartbeat"),
        (&["--election-timeout", "100ms..400ms"][..], "--election-timeout", "at least 3 heartbeats"),
        (&["--election-timeout", "400ms..300ms"][..], "--election-timeout", "must be above the minimum"),
        (&["--heartbeat", "100ms", "--election-timeout", "300ms..350ms"][..], "--election-timeout", "one heartbeat"),
        (&["--election-timeout", "1s..2m"][..], "--election-timeout", "above 60s"),
    ] {
        let (code, stderr, created) = serve_with_timings(&with(&node, extra), None);
        assert_eq!(code, Some(78), "{extra:?}: {stderr}");
        assert!(stderr.contains(option) && stderr.contains(why), "{extra:?}: {stderr}");
        assert!(!created, "{extra:?}: the data directory was created");
    }
    // The same from the config file.
    let (code, stderr, _) = serve_with_timings(&node, Some("election-timeout = \"100ms..400ms\"\n"));
    assert_eq!(code, Some(78), "{stderr}");
    assert!(stderr.contains("--election-timeout"), "{stderr}");
    for (extra, want) in [
        (&["--election-timeout", "300ms"][..], "MIN..MAX"),
        (&["--heartbeat", "soon"][..], "--heartbeat"),
        (&["--heartbeat", "0s"][..], "above zero"),
    ] {
        let (code, stderr, _) = serve_with_timings(&with(&node, extra), None);
        assert_eq!(code, Some(2), "{extra:?}: {stderr}");
        assert!(stderr.contains(want), "{extra:?}: {stderr}");
    }
    let (code, stderr, created) = serve_with_timings(&["--heartbeat", "100ms"], None);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("--node-id"), "{stderr}");
    assert!(!created);
    // From the config file, as any value there its option refuses: 78.
    let (code, stderr, created) = serve_with_timings(&[], Some("heartbeat = \"100ms\"\n"));
    assert_eq!(code, Some(78), "{stderr}");
    assert!(stderr.contains("--node-id"), "{stderr}");
    assert!(!created);
}

/// A cluster replicates every grant: `--durability leases` (holders not on disk, a TTL-long
/// pause after every restart) is a single node's trade, refused on a cluster node before
/// anything is written (README: no `leases` durability for a cluster).
#[test]
fn a_cluster_node_refuses_leases_durability() {
    let (code, stderr, created) =
        serve_with_timings(&["--node-id", "1", "--peers", "1=127.0.0.1:7531", "--durability", "leases"], None);
    assert_eq!(code, Some(78), "{stderr}");
    assert!(stderr.contains("--durability leases is for a single node"), "{stderr}");
    assert!(!created, "the data directory was created");
}

/// A cluster started with other timings than the defaults elects a leader, replaces it after a
/// `kill -9`, and the lock's tokens keep increasing across the fail-over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_with_other_timings_fails_over_and_tokens_keep_increasing() {
    let timings = ["--heartbeat", "100ms", "--election-timeout", "300ms..600ms"];
    let mut cluster = NativeCluster::start_with(BIN.as_ref(), 3, &timings, None);
    let url = cluster.url();
    let client = locksmith::connect_with_ttl(&url, Duration::from_secs(5)).await.unwrap_or_else(|e| panic!("{e}"));
    let first = client.lock("timings/failover").await.unwrap_or_else(|e| panic!("{e}"));
    let before = first.token();
    assert!(first.unlock().await.unwrap_or(false));
    let leader = cluster.wait_for_leader(Duration::from_secs(10));
    cluster.kill9(leader);
    let killed = Instant::now();
    let opts = LockOptions::new().timeout(Duration::from_secs(15));
    let next = client.lock_with("timings/failover", opts).await.unwrap_or_else(|e| panic!("{e}"));
    let took = killed.elapsed();
    assert!(next.token() > before, "token {} after {before}", next.token());
    // 2 × 600 ms + 100 ms is the fail-over time these timings give; a loaded machine may add to it.
    assert!(took < Duration::from_secs(5), "a grant only {took:?} after the kill");
    assert!(next.unlock().await.unwrap_or(false));
    assert_ne!(cluster.wait_for_leader(Duration::from_secs(10)), leader);
    client.close().await;
}
