//! Processes the harness starts (workers, the native server, the nodes of its cluster): each
//! one a [`ChildProcess`](locksmith_process::ChildProcess) that ends it by PID when dropped, so
//! an error, a panic or Ctrl-C in the harness leaves nothing running.

use std::net::SocketAddr;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use locksmith_cli_common::DurabilityArg;
use locksmith_process::ChildProcess;
use nix::sys::signal::Signal;

use locksmith_faultproxy::Links;

/// Starts `cmd` in a process group of its own, so a Ctrl-C at the terminal reaches only the
/// harness, which then stops its children in order and still reports.
///
/// # Errors
/// The program cannot be started.
pub(crate) fn spawn(name: &str, cmd: &mut Command) -> std::io::Result<ChildProcess> {
    ChildProcess::spawn(name, cmd.process_group(0))
}

/// SIGTERM, then up to `grace` for the process to exit, then `kill -9`.
///
/// # Cancel safety
/// Cancel safe: dropping the future leaves the process to its owner, which kills it on drop.
pub(crate) async fn stop(p: &mut ChildProcess, grace: Duration) {
    p.signal(Signal::SIGCONT);
    p.signal(Signal::SIGTERM);
    let until = tokio::time::Instant::now() + grace;
    while p.try_wait().is_none() {
        if tokio::time::Instant::now() >= until {
            p.kill9();
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A native server started by the harness: `<this exe> serve` on a loopback port and a data dir
/// that survive restarts.
#[derive(Debug)]
pub(crate) struct Server {
    exe: PathBuf,
    addr: SocketAddr,
    data: PathBuf,
    log: PathBuf,
    durability: &'static str,
    proc: Option<ChildProcess>,
}

impl Server {
    /// Starts `exe serve --listen <addr> --data-dir <dir>/data --durability <d>` and waits
    /// until it listens.
    ///
    /// # Cancel safety
    /// Cancel safe: a server already spawned is killed when the future is dropped.
    ///
    /// # Errors
    /// It could not be started or did not listen within 20 s.
    pub(crate) async fn start(exe: &Path, dir: &Path, durability: DurabilityArg) -> std::io::Result<Self> {
        let addr = free_addr()?;
        let durability = durability.as_str();
        let (data, log) = (dir.join("data"), dir.join("server.log"));
        let mut s = Self { exe: exe.to_path_buf(), addr, data, log, durability, proc: None };
        s.restart().await?;
        Ok(s)
    }

    /// `locksmith://127.0.0.1:<port>`
    pub(crate) fn url(&self) -> String {
        format!("locksmith://{}", self.addr)
    }

    /// The running process, for signals.
    pub(crate) fn proc(&self) -> Option<&ChildProcess> {
        self.proc.as_ref()
    }

    /// `kill -9`; the data dir stays.
    pub(crate) fn kill9(&mut self) {
        if let Some(mut p) = self.proc.take() {
            p.kill9();
        }
    }

    /// (Re)starts on the same port and data dir and waits until it listens.
    ///
    /// # Cancel safety
    /// Cancel safe, as [`Server::start`].
    ///
    /// # Errors
    /// As [`Server::start`].
    pub(crate) async fn restart(&mut self) -> std::io::Result<()> {
        self.kill9();
        let log = std::fs::OpenOptions::new().create(true).append(true).open(&self.log)?;
        let mut cmd = Command::new(&self.exe);
        cmd.arg("serve")
            .arg("--listen")
            .arg(self.addr.to_string())
            .arg("--data-dir")
            .arg(&self.data)
            .args(["--durability", self.durability])
            .env("LOCKSMITH_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log);
        self.proc = Some(spawn("locksmith serve", &mut cmd)?);
        wait_listening(&mut self.proc, self.addr, &self.log, "the native server").await
    }
}

/// Waits until the process in `proc` listens on `addr`, for up to 20 s. On failure the process
/// is killed and `proc` left empty.
///
/// # Cancel safety
/// Cancel safe: the process stays with its owner, which kills it on drop.
///
/// # Errors
/// The process exited (see `log`), or it did not listen within 20 s.
async fn wait_listening(
    proc: &mut Option<ChildProcess>,
    addr: SocketAddr,
    log: &Path,
    what: &str,
) -> std::io::Result<()> {
    let until = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        if tokio::net::TcpStream::connect(addr).await.is_ok() {
            return Ok(());
        }
        if let Some(status) = proc.as_mut().and_then(ChildProcess::try_wait) {
            *proc = None;
            return Err(std::io::Error::other(format!("{what} exited ({status}); see {}", log.display())));
        }
        if tokio::time::Instant::now() >= until {
            if let Some(mut p) = proc.take() {
                p.kill9();
            }
            return Err(std::io::Error::other(format!("{what} did not listen on {addr} within 20 s")));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A free loopback address (the port is free when this returns; the server binds it later).
///
/// # Errors
/// No port could be bound.
pub(crate) fn free_addr() -> std::io::Result<SocketAddr> {
    std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()
}

/// One node of the harness's cluster.
#[derive(Debug)]
struct Node {
    id: u64,
    /// Where it listens (its real address; the cluster's view, `--peers`, names its front proxy).
    addr: SocketAddr,
    /// Its data dir and log, `<dir>/node-<id>/`.
    dir: PathBuf,
    proc: Option<ChildProcess>,
}

/// Writes a fresh random cluster secret to `dir/cluster.secret` (this user only); its path.
fn write_secret(dir: &Path) -> std::io::Result<PathBuf> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::create_dir_all(dir)?;
    let path = dir.join("cluster.secret");
    let bytes: [u8; 32] = rand::random();
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    let mut file = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(&path)?;
    writeln!(file, "{hex}")?;
    Ok(path)
}

/// A cluster of native servers started by the harness: `<this exe> serve --node-id N --peers …
/// --routes … --cluster-secret-file …` on free loopback ports, each with a data dir and a log (`node.log`) of its own
/// under the run's directory.
///
/// `--peers` names each node by its front proxy (the address clients use), so that the
/// leader hint a follower gives is an address of the workers' URL; every node reaches every
/// other one through the proxy of that path (`--routes`), never at its `--peers` address.
#[derive(Debug)]
pub(crate) struct Cluster {
    exe: PathBuf,
    nodes: Vec<Node>,
    peers: String,
    links: Links,
    lock: String,
    /// The cluster secret every node is given, `<dir>/cluster.secret`.
    secret: PathBuf,
}

impl Cluster {
    /// Starts `nodes` (`(id, listen address, front proxy address)`) with a proxy on every path
    /// between two of them, and waits until one leads (up to 30 s). `lock` is the lock the
    /// leader probe asks about.
    ///
    /// # Cancel safety
    /// Cancel safe: nodes already started are killed when the future is dropped.
    ///
    /// # Errors
    /// A proxy cannot listen, a node cannot be started or does not listen within 20 s, or no
    /// node leads within 30 s.
    pub(crate) async fn start(
        exe: &Path,
        dir: &Path,
        nodes: &[(u64, SocketAddr, SocketAddr)],
        lock: &str,
    ) -> Result<Self, String> {
        let real: Vec<(u64, SocketAddr)> = nodes.iter().map(|(id, addr, _)| (*id, *addr)).collect();
        let links = Links::start(&real).await.map_err(|e| e.to_string())?;
        let peers = nodes.iter().map(|(id, _, front)| format!("{id}={front}")).collect::<Vec<_>>().join(",");
        let secret = write_secret(dir).map_err(|e| format!("cannot write the cluster secret: {e}"))?;
        let mut c = Self {
            exe: exe.to_path_buf(),
            nodes: real
                .iter()
                .map(|(id, addr)| Node { id: *id, addr: *addr, dir: dir.join(format!("node-{id}")), proc: None })
                .collect(),
            peers,
            links,
            lock: lock.to_string(),
            secret,
        };
        for (id, _) in &real {
            c.restart(*id).await.map_err(|e| format!("cannot start node {id}: {e}"))?;
        }
        if c.wait_for_leader(Duration::from_secs(30)).await.is_none() {
            return Err(format!(
                "no node of the cluster led within 30 s; see the node.log files under {}",
                dir.display()
            ));
        }
        Ok(c)
    }

    /// `locksmith://<node 1>,<node 2>,…` at the nodes' own addresses (for the report).
    pub(crate) fn url(&self) -> String {
        let hosts: Vec<String> = self.nodes.iter().map(|n| n.addr.to_string()).collect();
        format!("locksmith://{}", hosts.join(","))
    }

    /// Node ids, in order.
    pub(crate) fn ids(&self) -> Vec<u64> {
        self.nodes.iter().map(|n| n.id).collect()
    }

    /// The proxies between the nodes.
    pub(crate) fn links(&self) -> &Links {
        &self.links
    }

    fn node_mut(&mut self, id: u64) -> std::io::Result<&mut Node> {
        self.nodes.iter_mut().find(|n| n.id == id).ok_or_else(|| std::io::Error::other(format!("no node {id}")))
    }

    /// Sends `sig` to node `id`, if it runs.
    pub(crate) fn signal(&self, id: u64, sig: Signal) {
        if let Some(p) = self.nodes.iter().find(|n| n.id == id).and_then(|n| n.proc.as_ref()) {
            p.signal(sig);
        }
    }

    /// `kill -9` of node `id`; its data dir stays.
    pub(crate) fn kill9(&mut self, id: u64) {
        if let Ok(node) = self.node_mut(id) {
            if let Some(mut p) = node.proc.take() {
                p.kill9();
            }
        }
    }

    /// `kill -9` of every node.
    pub(crate) fn kill_all(&mut self) {
        for n in &mut self.nodes {
            if let Some(mut p) = n.proc.take() {
                p.kill9();
            }
        }
    }

    /// (Re)starts node `id` on its port and data dir and waits until it listens.
    ///
    /// # Cancel safety
    /// Cancel safe: a node already spawned is killed when its owner is dropped.
    ///
    /// # Errors
    /// It could not be started or did not listen within 20 s.
    pub(crate) async fn restart(&mut self, id: u64) -> std::io::Result<()> {
        self.kill9(id);
        let routes = self.links.routes(id);
        let (exe, peers, secret) = (self.exe.clone(), self.peers.clone(), self.secret.clone());
        let node = self.node_mut(id)?;
        std::fs::create_dir_all(&node.dir)?;
        let log_path = node.dir.join("node.log");
        let log = std::fs::OpenOptions::new().create(true).append(true).open(&log_path)?;
        let mut cmd = Command::new(&exe);
        cmd.arg("serve")
            .arg("--listen")
            .arg(node.addr.to_string())
            .arg("--data-dir")
            .arg(node.dir.join("data"))
            .arg("--node-id")
            .arg(id.to_string())
            .arg("--peers")
            .arg(&peers)
            .arg("--routes")
            .arg(&routes)
            .arg("--cluster-secret-file")
            .arg(&secret)
            .env("LOCKSMITH_LOG", "info,openraft=warn,h2=warn,tower=warn,hyper=warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log);
        node.proc = Some(spawn("locksmith serve (cluster node)", &mut cmd)?);
        wait_listening(&mut node.proc, node.addr, &log_path, &format!("node {id}")).await
    }

    /// The node that leads and serves clients now, if any: the one whose own address answers a
    /// status request (a follower refuses it, naming the leader; a paused or cut-off node does
    /// not answer within a second).
    ///
    /// # Cancel safety
    /// Cancel safe: read only.
    pub(crate) async fn leader(&self) -> Option<u64> {
        let mut asks = tokio::task::JoinSet::new();
        for n in self.nodes.iter().filter(|n| n.proc.is_some()) {
            // `follow=false`: a follower would otherwise send the call on to the leader.
            let (id, url, lock) = (n.id, format!("locksmith://{}?follow=false", n.addr), self.lock.clone());
            asks.spawn(async move {
                let client = locksmith::connect(&url).await.ok()?;
                let answer = tokio::time::timeout(Duration::from_secs(1), client.status(Some(&lock))).await;
                matches!(answer, Ok(Ok(_))).then_some(id)
            });
        }
        let mut leaders = Vec::new();
        while let Some(answer) = asks.join_next().await {
            if let Ok(Some(id)) = answer {
                leaders.push(id);
            }
        }
        // Two that answer: an old leader not yet told of the new term. Name neither.
        match leaders.as_slice() {
            [one] => Some(*one),
            _ => None,
        }
    }

    /// Waits up to `limit` for a node to lead; returns it.
    ///
    /// # Cancel safety
    /// Cancel safe: read only.
    pub(crate) async fn wait_for_leader(&self, limit: Duration) -> Option<u64> {
        let until = tokio::time::Instant::now() + limit;
        loop {
            if let Some(id) = self.leader().await {
                return Some(id);
            }
            if tokio::time::Instant::now() >= until {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}
