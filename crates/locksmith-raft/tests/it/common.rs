//! Shared by the tests: a state machine that records what it applies, and nodes served over
//! real loopback gRPC.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::path::PathBuf;
use std::sync::Once;
use std::time::Duration;
use std::time::Instant;

use locksmith_raft::ClientWriteError;
use locksmith_raft::NodeConfig;
use locksmith_raft::NodeId;
use locksmith_raft::RaftNode;
use locksmith_raft::Replicated;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tonic::transport::ServerTlsConfig;

/// Logs with `RUST_LOG=locksmith_raft=debug,openraft=info` when a test needs explaining.
pub fn init_tracing() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_test_writer()
            .try_init();
    });
}

/// Records every command applied, with its index.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Recorder {
    pub applied: Vec<(u64, Vec<u8>)>,
}

impl Recorder {
    /// The commands applied, without their indexes.
    pub fn commands(&self) -> Vec<Vec<u8>> {
        self.applied.iter().map(|(_, c)| c.clone()).collect()
    }
}

impl Replicated for Recorder {
    fn apply(&mut self, index: u64, command: &[u8]) {
        if let Some((last, _)) = self.applied.last() {
            assert!(index > *last, "applied {index} after {last}");
        }
        self.applied.push((index, command.to_vec()));
    }

    fn snapshot(&self) -> Vec<u8> {
        let mut buf = Vec::new();
        for (index, command) in &self.applied {
            buf.extend_from_slice(&index.to_le_bytes());
            buf.extend_from_slice(&(command.len() as u32).to_le_bytes());
            buf.extend_from_slice(command);
        }
        buf
    }

    fn install(&mut self, mut snapshot: &[u8]) -> Result<(), String> {
        let mut applied = Vec::new();
        while !snapshot.is_empty() {
            if snapshot.len() < 12 {
                return Err("truncated snapshot".into());
            }
            let index = u64::from_le_bytes(snapshot[..8].try_into().unwrap());
            let len = u32::from_le_bytes(snapshot[8..12].try_into().unwrap()) as usize;
            let command = snapshot.get(12..12 + len).ok_or("truncated snapshot")?;
            applied.push((index, command.to_vec()));
            snapshot = &snapshot[12 + len..];
        }
        self.applied = applied;
        Ok(())
    }
}

/// Timings of the tests: openraft's defaults of this crate, and small snapshot intervals so
/// that snapshots are built, logs purged and followers caught up from snapshots.
pub fn config() -> NodeConfig {
    let mut c = NodeConfig::default();
    c.snapshot_after = 200;
    c.keep_after_snapshot = 50;
    c
}

/// A node and the gRPC server that serves it.
pub struct TestNode {
    pub node: RaftNode<Recorder>,
    pub addr: SocketAddr,
    pub dir: PathBuf,
    stop: Option<oneshot::Sender<()>>,
    server: Option<JoinHandle<()>>,
}

impl TestNode {
    /// Starts node `id` on `dir`, serving on `listener`, with the tests' [`config`].
    pub async fn start(id: NodeId, dir: &Path, listener: TcpListener, peers: BTreeMap<NodeId, String>) -> Self {
        Self::start_with(id, dir, listener, peers, config(), None).await
    }

    /// Starts node `id` on `dir` with `config`, serving on `listener` (with TLS if given).
    pub async fn start_with(
        id: NodeId,
        dir: &Path,
        listener: TcpListener,
        peers: BTreeMap<NodeId, String>,
        config: NodeConfig,
        tls: Option<ServerTlsConfig>,
    ) -> Self {
        let addr = listener.local_addr().unwrap();
        let node = RaftNode::start(id, dir, peers, config, Recorder::default()).await.unwrap();
        let (stop, stopped) = oneshot::channel::<()>();
        let mut builder = tonic::transport::Server::builder();
        if let Some(tls) = tls {
            builder = builder.tls_config(tls).unwrap();
        }
        let router = builder.add_service(node.service());
        let server = tokio::spawn(async move {
            // Without nodelay a reply's trailing HTTP/2 frames wait for the peer's delayed ACK.
            let incoming = tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true));
            let _ = router
                .serve_with_incoming_shutdown(incoming, async {
                    let _ = stopped.await;
                })
                .await;
        });
        Self { node, addr, dir: dir.to_path_buf(), stop: Some(stop), server: Some(server) }
    }

    /// Starts node `id` again on `addr` (the address the cluster knows it by).
    pub async fn restart(id: NodeId, dir: &Path, addr: SocketAddr, peers: BTreeMap<NodeId, String>) -> Self {
        let listener = bind(addr).await;
        Self::start(id, dir, listener, peers).await
    }

    /// Stops the node like a crash would, as far as its peers can tell: its Raft tasks end,
    /// its port closes.
    pub async fn stop(&mut self) {
        self.node.shutdown().await.unwrap();
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(mut server) = self.server.take() {
            // Graceful shutdown waits for open connections; a crash would not.
            if tokio::time::timeout(Duration::from_secs(1), &mut server).await.is_err() {
                server.abort();
            }
        }
    }

    /// What this node's state machine applied so far.
    pub fn applied(&self) -> Recorder {
        self.node.replica().lock().unwrap().machine().clone()
    }

    /// The index up to which this node's state machine applied.
    pub fn applied_index(&self) -> Option<u64> {
        self.node.replica().lock().unwrap().applied_index()
    }
}

impl Drop for TestNode {
    fn drop(&mut self) {
        if let Some(server) = self.server.take() {
            server.abort();
        }
    }
}

/// Binds `addr`, retrying while the previous server's socket is still closing.
pub async fn bind(addr: SocketAddr) -> TcpListener {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match TcpListener::bind(addr).await {
            Ok(l) => return l,
            Err(e) if Instant::now() < deadline => {
                eprintln!("bind {addr}: {e}; retrying");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("bind {addr}: {e}"),
        }
    }
}

/// `n` listeners on free loopback ports, and the peers map naming them (ids 1..=n).
pub async fn listeners(n: u64) -> (Vec<TcpListener>, BTreeMap<NodeId, String>) {
    let mut ls = Vec::new();
    let mut peers = BTreeMap::new();
    for id in 1..=n {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        peers.insert(id, l.local_addr().unwrap().to_string());
        ls.push(l);
    }
    (ls, peers)
}

/// Waits until one of `nodes` leads and is ready; returns its position.
pub async fn leader(nodes: &[Option<TestNode>], within: Duration) -> usize {
    let deadline = Instant::now() + within;
    loop {
        if let Some(i) = nodes.iter().position(|n| n.as_ref().is_some_and(|n| n.node.leadership().borrow().ready)) {
            return i;
        }
        assert!(Instant::now() < deadline, "no leader within {within:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Replicates `command` through whichever node leads, following leader hints; returns its
/// index. Only for commands proposed while no leader is lost (a retry after a lost leader
/// could apply a command twice).
pub async fn write(nodes: &[Option<TestNode>], command: Vec<u8>) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        for n in nodes.iter().flatten().filter(|n| n.node.is_leader()) {
            match n.node.client_write(command.clone()).await {
                Ok(index) => return index,
                Err(ClientWriteError::ForwardToLeader(_)) => {}
                Err(e) => panic!("write: {e}"),
            }
        }
        assert!(Instant::now() < deadline, "no leader took a write within 10 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits until `node` applied up to `index`.
pub async fn caught_up(node: &TestNode, index: u64, within: Duration) {
    let deadline = Instant::now() + within;
    while node.applied_index() < Some(index) {
        assert!(
            Instant::now() < deadline,
            "node at {} applied up to {:?}, not {index}, within {within:?}",
            node.addr,
            node.applied_index()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `bytes` as lower-case hex, two digits a byte.
pub fn to_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The bytes of golden hex `parts` (joined; whitespace ignored).
pub fn from_hex(parts: &[&str]) -> Vec<u8> {
    let digits: Vec<u8> = parts.concat().bytes().filter(|b| !b.is_ascii_whitespace()).collect();
    assert!(digits.len().is_multiple_of(2), "odd number of hex digits");
    let nibble = |d: u8| char::from(d).to_digit(16).expect("a hex digit") as u8;
    digits.chunks(2).map(|p| nibble(p[0]) << 4 | nibble(p[1])).collect()
}

/// Asserts that `bytes` are the golden `parts`; a mismatch prints what was written, in hex.
pub fn assert_golden(what: &str, bytes: &[u8], parts: &[&str]) {
    let golden = from_hex(parts);
    assert!(
        bytes == golden.as_slice(),
        "{what}: the bytes changed: a data-format or wire break (see docs/raft-format.md)\n  pinned:  {}\n  written: {}",
        to_hex(&golden),
        to_hex(bytes)
    );
}
