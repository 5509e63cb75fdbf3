//! A cluster of native servers as real processes: `locksmith serve --node-id N --peers …` on
//! free loopback ports, each with its own temp data dir; every process killed by PID on drop.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use crate::cluster_links::Links;
use crate::port::{free_port, wait_listening};
use crate::process::{spawn, watchdog, ChildProcess};

/// A cluster of `locksmith serve` processes.
#[derive(Debug)]
pub struct NativeCluster {
    bin: PathBuf,
    nodes: Vec<Node>,
    peers: String,
    /// Fault proxies on every path, when started with [`NativeCluster::start_with_links`].
    links: Option<Links>,
}

#[derive(Debug)]
struct Node {
    id: u64,
    port: u16,
    dir: tempfile::TempDir,
    process: Option<ChildProcess>,
    /// Kills the node when the test process is gone (a cluster kept in a `static`).
    watchdog: Option<ChildProcess>,
}

impl NativeCluster {
    /// Starts `size` nodes of `bin serve` (pass `env!("CARGO_BIN_EXE_locksmith")`) and waits
    /// until one of them leads.
    ///
    /// # Panics
    /// When a node does not listen within 20 s or no leader is elected within 20 s.
    pub fn start(bin: &Path, size: usize) -> Self {
        Self::start_inner(bin, size, false)
    }

    /// Like [`start`](Self::start), with a fault proxy on every path: between each ordered pair
    /// of nodes (each node reaches the others through its own proxies, given as `--routes`) and
    /// in front of each node for clients ([`front_url`](Self::front_url)), so that a test can
    /// [`isolate`](Self::isolate) a node or [`cut_front`](Self::cut_front) a client's path.
    ///
    /// # Panics
    /// As [`start`](Self::start), or when a proxy cannot bind a loopback port.
    pub fn start_with_links(bin: &Path, size: usize) -> Self {
        Self::start_inner(bin, size, true)
    }

    fn start_inner(bin: &Path, size: usize, with_links: bool) -> Self {
        let nodes: Vec<Node> = (1..=size as u64)
            .map(|id| Node {
                id,
                port: free_port(),
                dir: tempfile::Builder::new().prefix("locksmith-node-").tempdir().expect("create a temp dir"),
                process: None,
                watchdog: None,
            })
            .collect();
        let peers = nodes.iter().map(|n| format!("{}=127.0.0.1:{}", n.id, n.port)).collect::<Vec<_>>().join(",");
        let links = with_links.then(|| Links::start(&nodes.iter().map(|n| (n.id, n.port)).collect()));
        let mut c = Self { bin: bin.to_path_buf(), nodes, peers, links };
        for id in 1..=size as u64 {
            c.restart(id);
        }
        c.wait_for_leader(Duration::from_secs(20));
        c
    }

    /// `locksmith://127.0.0.1:P1,127.0.0.1:P2,…`: every node, so clients find the leader.
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self.nodes.iter().map(|n| format!("127.0.0.1:{}", n.port)).collect();
        format!("locksmith://{}", hosts.join(","))
    }

    /// `locksmith://…` through the client proxies of nodes `ids` (a cluster started with
    /// links).
    ///
    /// # Panics
    /// When the cluster has no links.
    pub fn front_url(&self, ids: &[u64]) -> String {
        let links = self.links();
        let hosts: Vec<String> = ids.iter().map(|id| links.front(*id).to_string()).collect();
        format!("locksmith://{}", hosts.join(","))
    }

    /// Cuts node `id` off from the other nodes, both ways (connections stall as over a real
    /// partition); clients' paths stay.
    ///
    /// # Panics
    /// When the cluster has no links.
    pub fn isolate(&self, id: u64) {
        self.links().isolate(id);
    }

    /// Cuts the clients' path to node `id` (through [`front_url`](Self::front_url)).
    ///
    /// # Panics
    /// When the cluster has no links.
    pub fn cut_front(&self, id: u64) {
        self.links().cut_front(id);
    }

    /// Ends every partition made with [`isolate`](Self::isolate) and
    /// [`cut_front`](Self::cut_front).
    ///
    /// # Panics
    /// When the cluster has no links.
    pub fn heal(&self) {
        self.links().heal();
    }

    fn links(&self) -> &Links {
        self.links.as_ref().expect("a cluster started with NativeCluster::start_with_links")
    }

    /// The URL of node `id` alone.
    pub fn node_url(&self, id: u64) -> String {
        format!("locksmith://127.0.0.1:{}", self.node(id).port)
    }

    /// Node ids, 1..=size.
    pub fn ids(&self) -> Vec<u64> {
        self.nodes.iter().map(|n| n.id).collect()
    }

    fn node(&self, id: u64) -> &Node {
        self.nodes.iter().find(|n| n.id == id).unwrap_or_else(|| panic!("no node {id}"))
    }

    fn node_mut(&mut self, id: u64) -> &mut Node {
        self.nodes.iter_mut().find(|n| n.id == id).unwrap_or_else(|| panic!("no node {id}"))
    }

    /// Node `id`'s PID (0 when stopped).
    pub fn pid(&self, id: u64) -> i32 {
        self.node(id).process.as_ref().map(ChildProcess::pid).unwrap_or(0)
    }

    /// The node that serves clients now (the leader), if any: the one whose `status` answers.
    pub fn leader(&self) -> Option<u64> {
        self.nodes.iter().filter(|n| n.process.is_some()).find_map(|n| {
            let out = Command::new(&self.bin)
                .args(["status", "--backend", &format!("locksmith://127.0.0.1:{}", n.port)])
                .stdin(Stdio::null())
                .stderr(Stdio::null())
                .output()
                .ok()?;
            out.status.success().then_some(n.id)
        })
    }

    /// Waits until a node leads and serves; returns it.
    ///
    /// # Panics
    /// When none does within `limit`.
    pub fn wait_for_leader(&self, limit: Duration) -> u64 {
        let until = Instant::now() + limit;
        loop {
            if let Some(id) = self.leader() {
                return id;
            }
            if Instant::now() >= until {
                panic!("no node of the cluster served clients within {limit:?}\n{}", self.report());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// What each node answers to `locksmith status` and the end of its log: for failure messages.
    pub fn report(&self) -> String {
        let mut out = String::new();
        for n in &self.nodes {
            let answer = Command::new(&self.bin)
                .args(["status", "--backend", &format!("locksmith://127.0.0.1:{}", n.port)])
                .stdin(Stdio::null())
                .output()
                .map(|o| format!("{}: {}", o.status, String::from_utf8_lossy(&o.stderr).trim()))
                .unwrap_or_else(|e| e.to_string());
            let log = std::fs::read_to_string(n.dir.path().join("node.log")).unwrap_or_default();
            let lines: Vec<&str> = log.lines().collect();
            let tail = lines[lines.len().saturating_sub(40)..].join("\n");
            let state = if n.process.is_some() { "running" } else { "stopped" };
            out.push_str(&format!("--- node {} ({state}, port {}): status {answer}\n{tail}\n", n.id, n.port));
        }
        out
    }

    /// `kill -9` of node `id`; its data dir stays.
    pub fn kill9(&mut self, id: u64) {
        let node = self.node_mut(id);
        if let Some(mut p) = node.process.take() {
            p.kill9();
        }
        // Its watchdog goes with it: it must never kill a later process that got the same PID.
        if let Some(mut w) = node.watchdog.take() {
            w.kill9();
        }
    }

    /// SIGSTOP (`true`) or SIGCONT (`false`) to node `id`.
    pub fn pause(&self, id: u64, paused: bool) {
        if let Some(p) = &self.node(id).process {
            p.signal(if paused { Signal::SIGSTOP } else { Signal::SIGCONT });
        }
    }

    /// Deletes node `id`'s data (it must be stopped).
    pub fn wipe(&mut self, id: u64) {
        let dir = self.node(id).dir.path().join("data");
        let _ = std::fs::remove_dir_all(dir);
    }

    /// (Re)starts node `id` on its port and data dir.
    ///
    /// # Panics
    /// When it does not listen within 20 s.
    pub fn restart(&mut self, id: u64) {
        self.kill9(id);
        let bin = self.bin.clone();
        let peers = self.peers.clone();
        let routes = self.links.as_ref().map(|l| l.routes(id));
        let node = self.node_mut(id);
        let mut cmd = Command::new(&bin);
        cmd.arg("serve")
            .arg("--listen")
            .arg(format!("127.0.0.1:{}", node.port))
            .arg("--data-dir")
            .arg(node.dir.path().join("data"))
            .arg("--node-id")
            .arg(id.to_string())
            .arg("--peers")
            .arg(&peers)
            .env("LOCKSMITH_LOG", "info,openraft=warn,h2=warn,tower=warn,hyper=warn")
            .stdin(Stdio::null());
        if let Some(routes) = routes {
            cmd.arg("--routes").arg(routes);
        }
        // A node's log goes to a file beside its data: openraft logs every failed call to a
        // stopped peer, which would bury the tests' own output.
        let log_path = node.dir.path().join("node.log");
        if let Ok(log) = std::fs::OpenOptions::new().create(true).append(true).open(&log_path) {
            cmd.stderr(log);
        }
        let mut p = spawn("locksmith serve (cluster node)", &mut cmd);
        if !wait_listening(node.port, Duration::from_secs(20)) {
            let status = p.wait_timeout(Duration::from_millis(10));
            let log = std::fs::read_to_string(&log_path).unwrap_or_default();
            let tail: String =
                log.lines().rev().take(20).collect::<Vec<_>>().into_iter().rev().collect::<Vec<_>>().join("\n");
            panic!(
                "node {id} did not listen on 127.0.0.1:{} within 20 s (exit: {status:?}); its log ends:\n{tail}",
                node.port
            );
        }
        node.watchdog = Some(watchdog("locksmith node", p.pid(), node.dir.path()));
        node.process = Some(p);
    }
}

impl Drop for NativeCluster {
    fn drop(&mut self) {
        for id in self.ids() {
            self.kill9(id);
        }
    }
}
