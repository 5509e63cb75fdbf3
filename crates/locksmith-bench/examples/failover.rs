//! Unavailability across leader fail-overs (issue 18): `kill -9` of the leader, again and
//! again, while 8 clients hand one lock around; for each kill, the time from the kill to the
//! first grant of an acquisition started after it (so a grant already on its way when the
//! leader died does not count). The killed node is restarted and given time to catch up before
//! the next kill. Prints each fail-over and the median and maximum, for the native cluster and,
//! with `--etcd`, for a 3-member etcd cluster through the etcd driver:
//!
//! ```text
//! cargo build --release -p locksmith-cli
//! cargo run --release -p locksmith-bench --example failover -- target/release/locksmith 20 --etcd
//! ```
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use locksmith::LockOptions;
use locksmith_testkit::{EtcdCluster, NativeCluster};

/// Acquisitions that succeeded: (started, granted), since the run's start.
type Grants = Arc<Mutex<Vec<(Duration, Duration)>>>;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(bin) = args.first().cloned() else {
        eprintln!(
            "usage: failover PATH-TO-locksmith [KILLS] [--etcd] [--heartbeat D] [--election-timeout MIN..MAX] \
             [--steady SECS] [--logs DIR]"
        );
        std::process::exit(2);
    };
    let kills: usize = args.get(1).and_then(|k| k.parse().ok()).unwrap_or(20);
    let etcd = args.iter().any(|a| a == "--etcd");
    let value = |flag: &str| args.iter().position(|a| a == flag).and_then(|i| args.get(i + 1)).cloned();
    let mut serve_args = Vec::new();
    for flag in ["--heartbeat", "--election-timeout"] {
        if let Some(v) = value(flag) {
            serve_args.extend([flag.to_string(), v]);
        }
    }
    let steady: u64 = value("--steady").and_then(|s| s.parse().ok()).unwrap_or(0);
    let logs = value("--logs").map(std::path::PathBuf::from);
    let timings = if serve_args.is_empty() { "default timings".to_string() } else { serve_args.join(" ") };
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    let serve_args: Vec<&str> = serve_args.iter().map(String::as_str).collect();
    let mut cluster = NativeCluster::start_with(bin.as_ref(), 3, &serve_args, None);
    let url = cluster.url();
    if steady > 0 {
        let before = leader_changes(&cluster);
        let _ = rt.block_on(measure(&url, 0, Duration::from_secs(steady), &mut cluster));
        let changes = leader_changes(&cluster) - before;
        println!("native cluster ({timings}): {changes} leader changes during {steady} s of load without faults");
    }
    let native = rt.block_on(measure(&url, kills, Duration::ZERO, &mut cluster));
    report(&format!("native cluster (3 nodes, {timings})"), &native);
    if let Some(dir) = logs {
        std::fs::create_dir_all(&dir).expect("--logs directory");
        for id in cluster.ids() {
            std::fs::write(dir.join(format!("node-{id}.log")), cluster.log(id)).expect("writing a node's log");
        }
    }
    drop(cluster);
    if etcd {
        let mut ec = EtcdCluster::start(3);
        let url = ec.url();
        let e = rt.block_on(measure(&url, kills, Duration::ZERO, &mut ec));
        report("etcd (3 members, election timeout 500 ms)", &e);
    }
}

/// A cluster whose leader can be killed and brought back.
trait Cluster {
    /// Kills the leader (`kill -9`); returns it.
    fn kill_leader(&mut self) -> usize;
    /// Restarts member `i` on its data and waits for it to rejoin.
    fn revive(&mut self, i: usize);
}

impl Cluster for NativeCluster {
    fn kill_leader(&mut self) -> usize {
        let leader = self.wait_for_leader(Duration::from_secs(30));
        self.kill9(leader);
        leader as usize
    }

    fn revive(&mut self, i: usize) {
        self.restart(i as u64);
    }
}

impl Cluster for EtcdCluster {
    fn kill_leader(&mut self) -> usize {
        let until = Instant::now() + Duration::from_secs(30);
        let leader = loop {
            if let Some(l) = self.leader() {
                break l;
            }
            assert!(Instant::now() < until, "no etcd leader within 30 s");
            std::thread::sleep(Duration::from_millis(50));
        };
        self.kill9(leader);
        leader
    }

    fn revive(&mut self, i: usize) {
        self.restart(i);
        self.wait_healthy(Duration::from_secs(30));
    }
}

/// Terms led so far, over all nodes' logs (a node logs `leading: serving clients` each time).
fn leader_changes(cluster: &NativeCluster) -> usize {
    cluster.ids().iter().map(|id| cluster.log(*id).matches("leading: serving clients").count()).sum()
}

/// Runs 8 clients on one lock through `url` (for `steady` first, without faults), kills the
/// leader `kills` times (bringing it back each time) and returns each kill's unavailability.
async fn measure(url: &str, kills: usize, steady: Duration, cluster: &mut impl Cluster) -> Vec<Duration> {
    let start = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let grants: Grants = Arc::default();
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let (url, stop, grants) = (url.to_string(), stop.clone(), grants.clone());
        tasks.push(tokio::spawn(async move {
            let c = match locksmith::connect_with_ttl(&url, Duration::from_secs(5)).await {
                Ok(c) => c,
                Err(e) => panic!("connect {url}: {e}"),
            };
            while !stop.load(Ordering::SeqCst) {
                let began = start.elapsed();
                if let Ok(g) = c.lock_with("failover", LockOptions::new().timeout(Duration::from_secs(20))).await {
                    grants.lock().unwrap_or_else(|p| p.into_inner()).push((began, start.elapsed()));
                    let _ = g.unlock().await;
                }
            }
            c.close().await;
        }));
    }
    tokio::time::sleep(steady).await;
    let mut out = Vec::new();
    for i in 0..kills {
        tokio::time::sleep(Duration::from_millis(1500)).await;
        // The leader is found first, then killed: the clock starts at the kill.
        let leader = tokio::task::block_in_place(|| cluster.kill_leader());
        let killed_at = start.elapsed();
        let unix = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        let until = Instant::now() + Duration::from_secs(30);
        let first = loop {
            let first = grants
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .iter()
                .filter(|(b, _)| *b > killed_at)
                .map(|(_, g)| *g)
                .min();
            if let Some(g) = first {
                break g;
            }
            assert!(Instant::now() < until, "no grant within 30 s of kill {i}");
            tokio::time::sleep(Duration::from_millis(5)).await;
        };
        out.push(first - killed_at);
        eprintln!(
            "fail-over {:2}: {:4} ms (node {leader} killed at {:.6})",
            i + 1,
            (first - killed_at).as_millis(),
            unix.as_secs_f64()
        );
        tokio::task::block_in_place(|| cluster.revive(leader));
    }
    stop.store(true, Ordering::SeqCst);
    for t in tasks {
        let _ = t.await;
    }
    out
}

fn report(what: &str, d: &[Duration]) {
    let mut ms: Vec<u128> = d.iter().map(Duration::as_millis).collect();
    ms.sort_unstable();
    let median = ms.get(ms.len() / 2).copied().unwrap_or(0);
    let max = ms.last().copied().unwrap_or(0);
    let min = ms.first().copied().unwrap_or(0);
    println!("{what}: {} fail-overs, kill → first new grant: median {median} ms, min {min} ms, max {max} ms", ms.len());
}
