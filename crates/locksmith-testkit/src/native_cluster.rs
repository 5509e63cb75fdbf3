//! A cluster of native servers as real processes: `locksmith serve --node-id N --peers …
//! --cluster-secret-file …` on free loopback ports, each with its own temp data dir, the cluster
//! with a secret of its own; every process killed by PID on drop.
//! A node can also be restarted with `--join` (after [`NativeCluster::wipe`]: a lost disk) and
//! added back with `locksmith cluster add`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use crate::cluster_links::Paths;
use crate::port::{free_port, wait_listening};
use crate::process::{spawn, watchdog, ChildProcess};

/// A cluster of `locksmith serve` processes.
#[derive(Debug)]
pub struct NativeCluster {
    bin: PathBuf,
    nodes: Vec<Node>,
    peers: String,
    /// Fault proxies on every path, when started with [`NativeCluster::start_with_links`].
    links: Option<Paths>,
    /// More `serve` arguments for every node (e.g. `--auth FILE`).
    serve_args: Vec<String>,
    /// Options for the URLs this hands out and its own checks (e.g. `token_file=…`).
    query: Option<String>,
    /// The cluster secret every node is given (a fresh one per cluster), in its own temp dir.
    secret: PathBuf,
    _secret_dir: tempfile::TempDir,
    /// Node certificates: each node serves with its own and `--peer-ca`
    /// ([`NativeCluster::start_with_node_certs`]).
    node_certs: Option<NodeCerts>,
}

/// Where the node certificates of a cluster are, and whether the secret is given too.
#[derive(Debug, Clone)]
struct NodeCerts {
    peer_ca: PathBuf,
    /// `node-ID.pem` / `node-ID.key` (see [`TestCerts::with_nodes`](crate::TestCerts::with_nodes)).
    dir: PathBuf,
    with_secret: bool,
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
        Self::start_inner(bin, size, &[], None, false, None)
    }

    /// Like [`start`](Self::start), with a fault proxy on every path: between each ordered pair
    /// of nodes (each node reaches the others through its own proxies, given as `--routes`) and
    /// in front of each node for clients ([`front_url`](Self::front_url)), so that a test can
    /// [`isolate`](Self::isolate) a node.
    ///
    /// # Panics
    /// As [`start`](Self::start), or when a proxy cannot bind a loopback port.
    pub fn start_with_links(bin: &Path, size: usize) -> Self {
        Self::start_inner(bin, size, &[], None, true, None)
    }

    /// [`NativeCluster::start`] with more `serve` arguments for every node (kept for restarts),
    /// e.g. `["--auth", "policy.toml"]`, and `query` (e.g. `token_file=admin.token`) added to
    /// the URLs it hands out and used for its own checks (finding the leader).
    ///
    /// # Panics
    /// As [`NativeCluster::start`].
    pub fn start_with(bin: &Path, size: usize, serve_args: &[&str], query: Option<&str>) -> Self {
        Self::start_inner(bin, size, serve_args, query, false, None)
    }

    /// [`NativeCluster::start_with`] over TLS with node certificates: node ID serves and dials
    /// its peers with `certs`' node certificate of ID (`certs` from
    /// [`TestCerts::with_nodes`](crate::TestCerts::with_nodes) with every id), `--peer-ca` its
    /// peer CA; with `secret` the cluster secret too (both checked), without it none. `query`
    /// must make the cluster's own checks trust the peer CA (`tls=true&ca=PEER_CA…`).
    ///
    /// # Panics
    /// As [`NativeCluster::start`].
    pub fn start_with_node_certs(
        bin: &Path,
        size: usize,
        certs: &crate::TestCerts,
        secret: bool,
        serve_args: &[&str],
        query: &str,
    ) -> Self {
        let node_certs = NodeCerts { peer_ca: certs.peer_ca(), dir: certs.dir().to_path_buf(), with_secret: secret };
        Self::start_inner(bin, size, serve_args, Some(query), false, Some(node_certs))
    }

    fn start_inner(
        bin: &Path,
        size: usize,
        serve_args: &[&str],
        query: Option<&str>,
        with_links: bool,
        node_certs: Option<NodeCerts>,
    ) -> Self {
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
        let links = with_links.then(|| Paths::start(&nodes.iter().map(|n| (n.id, n.port)).collect()));
        let secret_dir = tempfile::Builder::new().prefix("locksmith-secret-").tempdir().expect("create a temp dir");
        let secret = write_cluster_secret(secret_dir.path());
        let mut c = Self {
            bin: bin.to_path_buf(),
            nodes,
            peers,
            links,
            serve_args: serve_args.iter().map(|a| a.to_string()).collect(),
            query: query.map(str::to_string),
            secret,
            _secret_dir: secret_dir,
            node_certs,
        };
        for id in 1..=size as u64 {
            c.restart(id);
        }
        c.wait_for_leader(Duration::from_secs(20));
        c
    }

    /// `locksmith://127.0.0.1:P1,127.0.0.1:P2,…`: every node, so clients find the leader (with
    /// the query of [`NativeCluster::start_with`], if any).
    pub fn url(&self) -> String {
        self.with_query(format!("locksmith://{}", self.hosts()))
    }

    /// `127.0.0.1:P1,127.0.0.1:P2,…`: every node, for a URL with options of one's own.
    pub fn hosts(&self) -> String {
        let hosts: Vec<String> = self.nodes.iter().map(|n| format!("127.0.0.1:{}", n.port)).collect();
        hosts.join(",")
    }

    /// `locksmith://…?follow=false` through the client proxies of nodes `ids` (a cluster
    /// started with links): a client keeps to these paths, also when a node names a leader
    /// elsewhere, so that a partition cuts it off as it would be.
    ///
    /// # Panics
    /// When the cluster has no links.
    pub fn front_url(&self, ids: &[u64]) -> String {
        let links = self.links();
        let hosts: Vec<String> = ids.iter().map(|id| links.front(*id).to_string()).collect();
        format!("locksmith://{}?follow=false", hosts.join(","))
    }

    /// Cuts node `id` off from the other nodes, both ways (connections stall as over a real
    /// partition); clients' paths stay.
    ///
    /// # Panics
    /// When the cluster has no links.
    pub fn isolate(&self, id: u64) {
        self.links().isolate(id);
    }

    /// Ends every partition made with [`isolate`](Self::isolate).
    ///
    /// # Panics
    /// When the cluster has no links.
    pub fn heal(&self) {
        self.links().heal();
    }

    fn links(&self) -> &Paths {
        self.links.as_ref().expect("a cluster started with NativeCluster::start_with_links")
    }

    /// The URL of node `id` alone (a client follows the leader it names).
    pub fn node_url(&self, id: u64) -> String {
        self.with_query(format!("locksmith://{}", self.addr(id)))
    }

    /// The URL of node `id` alone, not following the leader it names (`follow=false`): what
    /// that node itself answers.
    pub fn only_node_url(&self, id: u64) -> String {
        let url = self.node_url(id);
        let sep = if url.contains('?') { '&' } else { '?' };
        format!("{url}{sep}follow=false")
    }

    /// Node `id`'s address, `127.0.0.1:PORT` (as `locksmith cluster add` takes it).
    pub fn addr(&self, id: u64) -> String {
        format!("127.0.0.1:{}", self.node(id).port)
    }

    fn with_query(&self, url: String) -> String {
        match &self.query {
            Some(q) => format!("{url}?{q}"),
            None => url,
        }
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

    /// The node that serves clients now (the leader), if any: the one whose `status` answers.
    pub fn leader(&self) -> Option<u64> {
        self.nodes.iter().filter(|n| n.process.is_some()).find_map(|n| {
            let out = Command::new(&self.bin)
                .args(["status", "--backend", &self.only_node_url(n.id)])
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
                .args(["status", "--backend", &format!("locksmith://127.0.0.1:{}?follow=false", n.port)])
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

    /// The process id of node `id` (0 when it is not running): e.g. to read its CPU time.
    pub fn pid(&self, id: u64) -> i32 {
        self.node(id).process.as_ref().map_or(0, ChildProcess::pid)
    }

    /// SIGSTOP of node `id`: it keeps its connections and answers nothing (a hung host).
    pub fn pause(&self, id: u64) {
        if let Some(p) = &self.node(id).process {
            p.signal(Signal::SIGSTOP);
        }
    }

    /// SIGCONT after [`pause`](Self::pause).
    pub fn resume(&self, id: u64) {
        if let Some(p) = &self.node(id).process {
            p.signal(Signal::SIGCONT);
        }
    }

    /// Waits up to `limit` for node `id` to exit by itself; its exit status, or `None` while it
    /// still runs (or was not started).
    pub fn wait_exit(&mut self, id: u64, limit: Duration) -> Option<std::process::ExitStatus> {
        let node = self.node_mut(id);
        let status = node.process.as_mut()?.wait_timeout(limit)?;
        node.process = None;
        if let Some(mut w) = node.watchdog.take() {
            w.kill9();
        }
        Some(status)
    }

    /// What node `id` logged so far.
    pub fn log(&self, id: u64) -> String {
        std::fs::read_to_string(self.node(id).dir.path().join("node.log")).unwrap_or_default()
    }

    /// `kill -9` of node `id` (continued first, if paused); its data dir stays.
    pub fn kill9(&mut self, id: u64) {
        let node = self.node_mut(id);
        if let Some(mut p) = node.process.take() {
            p.signal(Signal::SIGCONT);
            p.kill9();
        }
        // Its watchdog goes with it: it must never kill a later process that got the same PID.
        if let Some(mut w) = node.watchdog.take() {
            w.kill9();
        }
    }

    /// Replaces the extra `serve` arguments nodes get from their next (re)start on: nodes
    /// restarted one at a time change their configuration as in a rolling upgrade.
    pub fn set_serve_args(&mut self, serve_args: &[&str]) {
        self.serve_args = serve_args.iter().map(|a| a.to_string()).collect();
    }

    /// From the next (re)start on, nodes serve with their node certificates of `certs`, as with
    /// [`NativeCluster::start_with_node_certs`] (with `secret`, the cluster secret too).
    pub fn set_node_certs(&mut self, certs: &crate::TestCerts, secret: bool) {
        self.node_certs =
            Some(NodeCerts { peer_ca: certs.peer_ca(), dir: certs.dir().to_path_buf(), with_secret: secret });
    }

    /// The cluster secret file every node was given (`--cluster-secret-file`).
    pub fn secret_file(&self) -> &Path {
        &self.secret
    }

    /// Runs `locksmith cluster ARGS --backend URL` (this cluster's [`url`](Self::url) unless
    /// `backend` is given) and returns what it did. `add` and `remove` are proven with the
    /// cluster secret, unless the cluster was started with a `query` (its credentials decide).
    ///
    /// # Panics
    /// When the command cannot be started.
    pub fn cluster_command(&self, args: &[&str], backend: Option<&str>) -> std::process::Output {
        let url = backend.map_or_else(|| self.url(), str::to_string);
        let changes = matches!(args.first(), Some(&"add" | &"remove"));
        let secret: Vec<&std::ffi::OsStr> = if changes && self.query.is_none() {
            vec!["--cluster-secret-file".as_ref(), self.secret.as_os_str()]
        } else {
            vec![]
        };
        Command::new(&self.bin)
            .arg("cluster")
            .args(args)
            .args(secret)
            .args(["--backend", &url])
            .env_remove("LOCKSMITH_TOKEN_FILE")
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("running locksmith cluster {args:?}: {e}"))
    }

    /// Deletes node `id`'s data (it must be stopped).
    pub fn wipe(&mut self, id: u64) {
        let dir = self.node(id).dir.path().join("data");
        let _ = std::fs::remove_dir_all(dir);
    }

    /// (Re)starts node `id` on its port and data dir, with `--peers` (every node of the
    /// cluster as started): a new node forms the cluster, one with cluster state restarts.
    ///
    /// # Panics
    /// When it does not listen within 20 s.
    pub fn restart(&mut self, id: u64) {
        let membership = ["--peers".to_string(), self.peers.clone()];
        self.launch(id, &membership);
    }

    /// (Re)starts node `id` on its port and data dir with `--join`: with an empty data dir
    /// (after [`NativeCluster::wipe`]) it waits to be added with `locksmith cluster add`; one
    /// with cluster state restarts as that member.
    ///
    /// # Panics
    /// When it does not listen within 20 s.
    pub fn restart_joining(&mut self, id: u64) {
        self.launch(id, &["--join".to_string()]);
    }

    /// Starts node `id` with `membership` (`--peers …` or `--join`).
    fn launch(&mut self, id: u64, membership: &[String]) {
        self.kill9(id);
        let bin = self.bin.clone();
        let routes = self.links.as_ref().map(|l| l.routes(id));
        let serve_args = self.serve_args.clone();
        let mut auth = vec![];
        if self.node_certs.as_ref().is_none_or(|c| c.with_secret) {
            auth.extend(["--cluster-secret-file".into(), self.secret.clone().into_os_string()]);
        }
        if let Some(c) = &self.node_certs {
            let file = |ext: &str| c.dir.join(format!("node-{id}.{ext}")).into_os_string();
            auth.extend(["--tls-cert".into(), file("pem"), "--tls-key".into(), file("key")]);
            auth.extend(["--peer-ca".into(), c.peer_ca.clone().into_os_string()]);
        }
        let node = self.node_mut(id);
        let mut cmd = Command::new(&bin);
        cmd.arg("serve")
            .arg("--listen")
            .arg(format!("127.0.0.1:{}", node.port))
            .arg("--data-dir")
            .arg(node.dir.path().join("data"))
            .arg("--node-id")
            .arg(id.to_string())
            .args(membership)
            .args(&auth)
            .args(&serve_args)
            .env("LOCKSMITH_LOG", node_log_filter())
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

/// The nodes' `LOCKSMITH_LOG`: `LOCKSMITH_TEST_NODE_LOG` when set (e.g. openraft's election
/// lines for a fail-over's breakdown: `info,openraft::engine=info,openraft::core=info`, or
/// `info,locksmith::timing=trace` for the replicated path's per-stage timings), else
/// the server's info lines without openraft's routine noise.
fn node_log_filter() -> String {
    std::env::var("LOCKSMITH_TEST_NODE_LOG")
        .unwrap_or_else(|_| "info,openraft=warn,h2=warn,tower=warn,hyper=warn".to_string())
}

/// Writes a fresh random cluster secret to `dir/cluster.secret`, readable by this user only, and
/// returns its path (for `locksmith serve --cluster-secret-file`).
///
/// # Panics
/// When the file cannot be written.
pub fn write_cluster_secret(dir: &Path) -> PathBuf {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let path = dir.join("cluster.secret");
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
        .unwrap_or_else(|e| panic!("creating {}: {e}", path.display()));
    writeln!(file, "{}", crate::random_password()).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
    path
}

impl Drop for NativeCluster {
    fn drop(&mut self) {
        for id in self.ids() {
            self.kill9(id);
        }
    }
}
