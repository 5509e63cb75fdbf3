//! Changing a native server cluster's membership with `locksmith cluster status|add|remove` and
//! `locksmith serve --join`, on real processes: a follower whose disk is lost is removed, wiped,
//! restarted with `--join` and added back, and then has to carry the cluster (it is part of
//! every quorum after that) without a fencing token ever going backwards; status shows the
//! voters and the leader from any node; a learner that cannot catch up, removing the leader,
//! a single server, and who may change the membership under an auth policy.

use std::collections::HashMap;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use locksmith::LockOptions;
use locksmith_testkit::{new_token, NativeCluster, NativeServer};
use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_locksmith");

/// The locks every round takes.
const NAMES: [&str; 4] = ["fence/a", "fence/b", "fence/c", "fence/d"];

fn text(o: &Output) -> (Option<i32>, String, String) {
    (o.status.code(), String::from_utf8_lossy(&o.stdout).into_owned(), String::from_utf8_lossy(&o.stderr).into_owned())
}

/// `cluster ARGS` must succeed; its stdout.
fn ok(c: &NativeCluster, args: &[&str], backend: Option<&str>) -> String {
    let (code, out, err) = text(&c.cluster_command(args, backend));
    assert_eq!(code, Some(0), "locksmith cluster {args:?}: {err}{out}");
    out
}

/// `cluster status --json` as the given backend sees it.
fn status_json(c: &NativeCluster, backend: Option<&str>) -> Value {
    let out = ok(c, &["status", "--json"], backend);
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"))
}

/// (voters, leaders) in a JSON status.
fn voters_and_leaders(s: &Value) -> (Vec<u64>, Vec<u64>) {
    let nodes = s["nodes"].as_array().cloned().unwrap_or_default();
    let ids = |f: &dyn Fn(&Value) -> bool| nodes.iter().filter(|n| f(n)).filter_map(|n| n["id"].as_u64()).collect();
    (ids(&|n| n["voter"] == true), ids(&|n| n["role"] == "leader"))
}

/// Every token granted so far, per lock, in order.
#[derive(Default)]
struct Tokens(HashMap<String, Vec<u64>>);

impl Tokens {
    /// Takes and releases each of [`NAMES`] once through `url` (retrying through a fail-over
    /// for up to 30 s) and checks that each token is above every earlier one of its lock.
    async fn round(&mut self, url: &str, when: &str) {
        let until = Instant::now() + Duration::from_secs(30);
        let client = loop {
            match locksmith::connect_with_ttl(url, Duration::from_secs(5)).await {
                Ok(c) => break c,
                Err(e) => assert!(Instant::now() < until, "{when}: no connection in 30 s: {e}"),
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        for name in NAMES {
            let guard = loop {
                match client.lock_with(name, LockOptions::new().timeout(Duration::from_secs(10))).await {
                    Ok(g) => break g,
                    Err(e) => assert!(Instant::now() < until, "{when}: {name} not granted in 30 s: {e}"),
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            };
            let token = guard.token();
            let seen = self.0.entry(name.to_string()).or_default();
            if let Some(last) = seen.last() {
                assert!(token > *last, "{when}: {name} granted token {token} after {last}: tokens went backwards");
            }
            seen.push(token);
            let _ = guard.unlock().await;
        }
        client.close().await;
    }
}

/// A follower's disk is lost: it is removed, wiped, restarted with `--join` and added back
/// (status on it meanwhile says it waits to be added). Then the leader is killed, so the new
/// leader is elected and grants with the re-added node in its quorum; then the other original
/// follower is killed and the old leader restarted (with `--join`, on its directory), whose log
/// lacks those grants, so only the re-added node can lead. Every lock's tokens increase across
/// all of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wiped_follower_re_added_carries_the_quorum_and_tokens_never_go_backwards() {
    let started = Instant::now();
    let mut c = NativeCluster::start(BIN.as_ref(), 3);
    let url = c.url();
    let mut tokens = Tokens::default();
    tokens.round(&url, "first round").await;

    let first = c.wait_for_leader(Duration::from_secs(10));
    let followers: Vec<u64> = c.ids().into_iter().filter(|id| *id != first).collect();
    let (wiped, other) = (followers[0], followers[1]);

    // The disk of `wiped` is lost: kill it, remove it, wipe it.
    c.kill9(wiped);
    let out = ok(&c, &["remove", &wiped.to_string()], None);
    assert!(out.contains(&format!("node {wiped} removed")), "{out}");
    let (voters, _) = voters_and_leaders(&status_json(&c, None));
    assert_eq!(voters.len(), 2, "{voters:?}");
    tokens.round(&url, "while two voters run").await;
    c.wipe(wiped);

    // It joins again with an empty directory and waits to be added.
    c.restart_joining(wiped);
    let alone = c.node_url(wiped);
    let out = ok(&c, &["status"], Some(&alone));
    assert!(out.contains("waits to be added"), "{out}");
    let t = Instant::now();
    let out = ok(&c, &["add", &wiped.to_string(), &c.addr(wiped)], None);
    assert!(out.contains("added: it caught up with the log and votes"), "{out}");
    println!("node {wiped} re-added in {:?}", t.elapsed());
    let s = status_json(&c, None);
    let (voters, leaders) = voters_and_leaders(&s);
    assert_eq!((voters.len(), leaders.len()), (3, 1), "{s}");
    assert_eq!(s["leader_view"], true, "{s}");
    tokens.round(&url, "after the re-add").await;

    // The leader dies: the next one is elected, and commits, with the re-added node's vote.
    c.kill9(first);
    let second = c.wait_for_leader(Duration::from_secs(15));
    assert_ne!(second, first);
    tokens.round(&url, "after the first leader died").await;

    // Only `wiped` and `other` hold those grants. `other` dies and the old leader comes back
    // with a log that lacks them (started with --join: a directory with cluster state restarts
    // as the member it was): the re-added node must lead.
    c.kill9(other);
    c.restart_joining(first);
    let third = c.wait_for_leader(Duration::from_secs(20));
    assert_eq!(third, wiped, "the old leader, whose log is behind, cannot lead");
    tokens.round(&url, "led by the re-added node").await;
    let s = status_json(&c, None);
    assert_eq!(s["leader"], wiped, "{s}");
    for (name, seen) in &tokens.0 {
        assert_eq!(seen.len(), 5, "{name}: {seen:?}");
    }
    println!("tokens {:?}; whole test {:?}", tokens.0, started.elapsed());
}

/// Status shows three voters and one leader, from any node (a follower alone gives its own
/// view and says so); a learner that cannot catch up times out (exit 75) and is removed; a
/// member cannot be added at another address; removing a node that is no member changes
/// nothing; the leader can be removed (a new one is elected) and added back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_add_and_remove_from_any_node() {
    let c = NativeCluster::start(BIN.as_ref(), 3);
    let leader = c.wait_for_leader(Duration::from_secs(10));
    let s = status_json(&c, None);
    let (voters, leaders) = voters_and_leaders(&s);
    assert_eq!((voters, leaders), (vec![1, 2, 3], vec![leader]), "{s}");
    assert_eq!(s["leader_view"], true, "{s}");
    // The leader knows how far each node's log is once the node has answered it.
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        let s = status_json(&c, None);
        let nodes = s["nodes"].as_array().cloned().unwrap_or_default();
        if nodes.len() == 3 && nodes.iter().all(|n| n["matched_index"].as_u64().is_some()) {
            break;
        }
        assert!(Instant::now() < until, "the leader does not know how far each log is after 10 s: {s}");
        std::thread::sleep(Duration::from_millis(50));
    }
    let table = ok(&c, &["status"], None);
    assert!(table.starts_with("NODE  ADDRESS"), "{table}");
    assert!(table.contains(&format!("leader: node {leader} at {}", c.addr(leader))), "{table}");

    // A follower's URL: the client follows the leader it names, and shows the leader's view.
    let follower = c.ids().into_iter().find(|id| *id != leader).unwrap_or(leader);
    let s = status_json(&c, Some(&c.node_url(follower)));
    assert_eq!((s["node_id"].as_u64(), s["leader_view"].as_bool()), (Some(leader), Some(true)), "{s}");
    // The follower alone (follow=false): its own view, without matched indexes.
    let s = status_json(&c, Some(&c.only_node_url(follower)));
    assert_eq!((s["node_id"].as_u64(), s["leader_view"].as_bool()), (Some(follower), Some(false)), "{s}");
    assert_eq!(s["leader"], leader, "{s}");
    let table = ok(&c, &["status"], Some(&c.only_node_url(follower)));
    assert!(table.contains("only the leader knows"), "{table}");

    // Nobody listens at node 9's address: it stays a learner, and is removed again.
    let nowhere = format!("127.0.0.1:{}", locksmith_testkit::free_port());
    let (code, _, err) = text(&c.cluster_command(&["add", "9", &nowhere, "--timeout", "2s"], None));
    assert_eq!(code, Some(75), "{err}");
    assert!(err.contains("did not catch up") && err.contains("stays a learner"), "{err}");
    let s = status_json(&c, None);
    let learner = s["nodes"].as_array().into_iter().flatten().find(|n| n["id"] == 9).cloned();
    assert!(learner.is_some_and(|n| n["role"] == "learner" && n["voter"] == false), "{s}");
    let out = ok(&c, &["remove", "9"], None);
    assert!(out.contains("node 9 removed"), "{out}");
    let out = ok(&c, &["remove", "9"], None);
    assert!(out.contains("not a member; nothing changed"), "{out}");

    // A member at another address is refused; at its own address nothing changes.
    let (code, _, err) = text(&c.cluster_command(&["add", &follower.to_string(), &nowhere], None));
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("remove it first"), "{err}");
    let out = ok(&c, &["add", &follower.to_string(), &c.addr(follower)], None);
    assert!(out.contains("a voter at") && out.contains("nothing changed"), "{out}");

    // The leader removes itself, steps down, and the other two elect a new leader.
    let out = ok(&c, &["remove", &leader.to_string()], None);
    assert!(out.contains("was the leader"), "{out}");
    let until = Instant::now() + Duration::from_secs(15);
    let next = loop {
        let s = status_json(&c, None);
        match s["leader"].as_u64() {
            Some(l) if l != leader && s["leader_view"] == true => break l,
            _ => assert!(Instant::now() < until, "no new leader 15 s after the leader removed itself: {s}"),
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let (voters, _) = voters_and_leaders(&status_json(&c, None));
    assert!(voters.len() == 2 && !voters.contains(&leader), "{voters:?}");
    // It kept its log and its vote, so it can be added back as it is.
    let out = ok(&c, &["add", &leader.to_string(), &c.addr(leader)], None);
    assert!(out.contains("added"), "{out}");
    let (voters, leaders) = voters_and_leaders(&status_json(&c, None));
    assert_eq!((voters, leaders), (vec![1, 2, 3], vec![next]));
    let client = locksmith::connect(&c.url()).await.unwrap_or_else(|e| panic!("{e}"));
    let g = client.lock("membership/after").await.unwrap_or_else(|e| panic!("{e}"));
    assert!(g.unlock().await.unwrap_or(false));
}

/// A server started without `--node-id` is not a cluster: exit 2, saying so.
#[test]
fn a_single_server_is_not_a_cluster() {
    let server = NativeServer::start(BIN.as_ref());
    for args in [vec!["status"], vec!["add", "2", "127.0.0.1:1"], vec!["remove", "2"]] {
        let out = Command::new(BIN).arg("cluster").args(&args).args(["--backend", &server.url()]).output();
        let (code, _, err) = text(&out.unwrap_or_else(|e| panic!("{e}")));
        assert_eq!(code, Some(2), "{args:?}: {err}");
        assert!(err.contains("is not a cluster") && err.contains("--node-id"), "{args:?}: {err}");
        assert_eq!(err.matches("not a cluster").count(), 1, "said twice: {err}");
    }
    let out = Command::new(BIN).args(["cluster", "status", "--backend", "redis://127.0.0.1:6379"]).output();
    let (code, _, err) = text(&out.unwrap_or_else(|e| panic!("{e}")));
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("cluster commands are for the native server"), "{err}");
}

/// Under an auth policy, status needs a known principal and a membership change an admin one:
/// a principal that may lock is refused (exit 77, never "unreachable") and nothing changes.
#[test]
fn with_auth_only_an_admin_changes_the_membership() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let (jobs, admin) = (new_token(BIN.as_ref()), new_token(BIN.as_ref()));
    let file = |name: &str, token: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, format!("{token}\n")).unwrap_or_else(|e| panic!("{e}"));
        path.display().to_string()
    };
    let (jobs_file, admin_file) = (file("jobs.token", &jobs.0), file("admin.token", &admin.0));
    let policy = dir.path().join("policy.toml");
    let text_policy = format!(
        "[principals.jobs]\ntokens = [\"{}\"]\nlock = [\"jobs/\"]\n\n[principals.ops]\ntokens = [\"{}\"]\nadmin = true\n",
        jobs.1, admin.1
    );
    std::fs::write(&policy, text_policy).unwrap_or_else(|e| panic!("{e}"));
    let policy = policy.display().to_string();
    let admin_query = format!("token_file={admin_file}");
    let c = NativeCluster::start_with(BIN.as_ref(), 3, &["--auth", &policy], Some(&admin_query));
    let hosts = c.hosts();
    let as_jobs = format!("locksmith://{hosts}?token_file={jobs_file}");
    let nobody = format!("locksmith://{hosts}");

    let (code, _, err) = text(&c.cluster_command(&["status"], Some(&nobody)));
    assert_eq!(code, Some(77), "{err}");
    let (voters, _) = voters_and_leaders(&status_json(&c, Some(&as_jobs)));
    assert_eq!(voters, vec![1, 2, 3]);
    for args in [vec!["remove", "3"], vec!["add", "3", "127.0.0.1:1"]] {
        let (code, _, err) = text(&c.cluster_command(&args, Some(&as_jobs)));
        assert_eq!(code, Some(77), "{args:?}: {err}");
        assert!(err.contains("jobs may not change the cluster's membership"), "{args:?}: {err}");
        assert!(!err.contains(&jobs.0), "the token was printed: {err}");
    }
    let (voters, _) = voters_and_leaders(&status_json(&c, None));
    assert_eq!(voters, vec![1, 2, 3], "a refused change changed something");
    let out = ok(&c, &["add", "3", &c.addr(3)], None);
    assert!(out.contains("nothing changed"), "{out}");
}
