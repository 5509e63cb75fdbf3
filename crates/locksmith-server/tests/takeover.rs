//! A cluster's takeover without processes: three real lock services (`Service::start_cluster`
//! over `RaftNode`s on temp dirs) on the in-process Raft network of `locksmith_raft::fixture`,
//! clients speaking the session protocol over in-process streams, on paused time (the fixture's
//! docs say how the log's syncs keep a paused clock honest).

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use locksmith_proto::client_message::Body as Ask;
use locksmith_proto::server_message::Body as Answer;
use locksmith_proto::{ClientMessage, ServerMessage};
use locksmith_raft::fixture::Router;
use locksmith_raft::RaftNode;
use locksmith_server::cluster::ReplicaMachine;
use locksmith_server::machine::Limits;
use locksmith_server::{serve_stream, Service};
use tokio::sync::mpsc;
use tokio::time::Instant;

const IDS: [u64; 3] = [1, 2, 3];
/// Long enough for any election here (the fixture's fail-over time is 650 ms).
const WITHIN: Duration = Duration::from_secs(10);
/// The clients' session TTL.
const TTL: Duration = Duration::from_millis(1_000);

struct Node {
    raft: Arc<RaftNode<ReplicaMachine>>,
    service: Service,
}

struct Cluster {
    router: Router,
    nodes: Vec<Node>,
    _dirs: tempfile::TempDir,
}

impl Cluster {
    async fn start() -> Self {
        let dirs = tempfile::tempdir().unwrap();
        let router = Router::new();
        let mut nodes = Vec::new();
        for id in IDS {
            let replica = ReplicaMachine::new(Limits::default());
            let raft = router.start(id, dirs.path().join(id.to_string()), &IDS, Router::config(), replica).await;
            let raft = Arc::new(raft.unwrap());
            let (service, _task) = Service::start_cluster(raft.clone(), Limits::default());
            nodes.push(Node { raft, service });
        }
        Self { router, nodes, _dirs: dirs }
    }

    fn node(&self, id: u64) -> &Node {
        &self.nodes[(id - 1) as usize]
    }

    /// Waits until one of `among` serves clients (leads, its machine built); returns it.
    async fn serving(&self, among: &[u64]) -> u64 {
        let deadline = Instant::now() + WITHIN;
        loop {
            if let Some(id) = among.iter().copied().find(|id| self.node(*id).service.serving().serving) {
                return id;
            }
            assert!(Instant::now() < deadline, "none of {among:?} served within {WITHIN:?}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Stops node `id` as a crash would look to the others: its Raft node ends, its service
    /// stops, the network forgets it.
    async fn crash(&self, id: u64) {
        self.router.remove(id);
        let node = self.node(id);
        node.raft.shutdown().await.unwrap();
        node.service.shutdown();
    }

    async fn shutdown(&self) {
        for n in &self.nodes {
            n.service.shutdown();
            let _ = n.raft.shutdown().await;
        }
    }
}

fn others(id: u64) -> Vec<u64> {
    IDS.into_iter().filter(|n| *n != id).collect()
}

/// One session stream to a service, as a client speaks it.
struct Client {
    tx: mpsc::Sender<Result<ClientMessage, Infallible>>,
    rx: mpsc::UnboundedReceiver<ServerMessage>,
    next: u64,
    session: u64,
    secret: Vec<u8>,
}

impl Client {
    /// Opens a session (or resumes `resume`: id and secret) on `service`.
    async fn open(service: &Service, resume: Option<(u64, Vec<u8>)>) -> Result<Self, ServerMessage> {
        let (tx, inbound) = mpsc::channel(64);
        let (out, rx) = mpsc::unbounded_channel();
        tokio::spawn(serve_stream(service.clone(), tokio_stream::wrappers::ReceiverStream::new(inbound), out));
        let mut c = Self { tx, rx, next: 1, session: 0, secret: Vec::new() };
        let (resume_session, resume_secret) = resume.clone().unwrap_or_default();
        let ttl_ms = TTL.as_millis() as u64;
        let id = c.send(Ask::Open(locksmith_proto::Open { ttl_ms, resume_session, resume_secret })).await;
        match c.answer(id, WITHIN).await {
            Some(ServerMessage { body: Some(Answer::Opened(o)), .. }) => {
                c.session = o.session;
                c.secret = if o.resume_secret.is_empty() { resume.unwrap_or_default().1 } else { o.resume_secret };
                Ok(c)
            }
            Some(other) => Err(other),
            None => panic!("no answer to open"),
        }
    }

    async fn send(&mut self, body: Ask) -> u64 {
        let id = self.next;
        self.next += 1;
        self.tx.send(Ok(ClientMessage { id, body: Some(body) })).await.unwrap();
        id
    }

    /// The answer to message `id` within `within` (other messages are dropped); `None` if none
    /// came or the stream ended.
    async fn answer(&mut self, id: u64, within: Duration) -> Option<ServerMessage> {
        let deadline = Instant::now() + within;
        loop {
            match tokio::time::timeout_at(deadline, self.rx.recv()).await {
                Ok(Some(m)) if m.id == id => return Some(m),
                Ok(Some(_)) => {}
                Ok(None) | Err(_) => return None,
            }
        }
    }

    async fn acquire(&mut self, name: &str, wait: bool) -> u64 {
        let acquire = locksmith_proto::Acquire { name: name.into(), owner: "o".into(), wait, ..Default::default() };
        self.send(Ask::Acquire(acquire)).await
    }

    /// Acquires `name` and returns its token, waiting up to `within` for it.
    async fn granted(&mut self, name: &str, wait: bool, within: Duration) -> u64 {
        let id = self.acquire(name, wait).await;
        match self.answer(id, within).await {
            Some(ServerMessage { body: Some(Answer::Granted(g)), .. }) => g.token,
            other => panic!("acquire {name}: {other:?}"),
        }
    }
}

/// After the leader is lost, the new leader grants the same lock with a token above every token
/// the old one handed out: tokens continue across the fail-over, never repeat.
#[tokio::test(start_paused = true)]
async fn a_new_leader_continues_the_fencing_tokens() {
    let cluster = Cluster::start().await;
    let old = cluster.serving(&IDS).await;
    let mut a = Client::open(&cluster.node(old).service, None).await.unwrap();
    let first = a.granted("fenced", false, WITHIN).await;
    let id =
        a.send(Ask::Release(locksmith_proto::Release { name: "fenced".into(), owner: "o".into(), token: first })).await;
    assert!(matches!(a.answer(id, WITHIN).await, Some(ServerMessage { body: Some(Answer::Released(_)), .. })));
    let second = a.granted("fenced", false, WITHIN).await;
    assert!(second > first);

    cluster.crash(old).await;
    let new = cluster.serving(&others(old)).await;
    let mut b = Client::open(&cluster.node(new).service, None).await.unwrap();
    // The old holder's session lives on through the grace period, then expires unrenewed.
    let third = b.granted("fenced", true, WITHIN).await;
    assert!(third > second, "the new leader granted token {third} after {second}");
    cluster.shutdown().await;
}

/// A leader cut off from the majority grants nothing: the grant cannot be committed, so its
/// client never hears of it, while the majority's new leader grants the lock.
#[tokio::test(start_paused = true)]
async fn a_partitioned_minority_leader_cannot_grant() {
    let cluster = Cluster::start().await;
    let old = cluster.serving(&IDS).await;
    let mut a = Client::open(&cluster.node(old).service, None).await.unwrap();
    cluster.router.isolate(old);
    let asked = a.acquire("contested", false).await;

    let new = cluster.serving(&others(old)).await;
    let mut b = Client::open(&cluster.node(new).service, None).await.unwrap();
    b.granted("contested", false, WITHIN).await;
    let answer = a.answer(asked, Duration::from_secs(1)).await;
    assert!(
        !matches!(answer, Some(ServerMessage { body: Some(Answer::Granted(_)), .. })),
        "the cut-off leader granted the lock the majority granted too"
    );
    cluster.shutdown().await;
}

/// A holder on a leader that is cut off gets no renewal answered from the moment of the cut
/// (the leader's barrier finds no quorum), so its own deadline — its last answered renewal's
/// send time + TTL — passes before the majority's new leader grants its lock to another.
#[tokio::test(start_paused = true)]
async fn a_cut_off_leaders_holder_sees_its_loss_before_the_majority_grants() {
    let cluster = Cluster::start().await;
    let old = cluster.serving(&IDS).await;
    let mut a = Client::open(&cluster.node(old).service, None).await.unwrap();
    let opened = Instant::now();
    a.granted("held", false, WITHIN).await;

    // Renew every TTL/4, remembering when each renewal was sent; cut the leader off midway.
    let mut sent = Vec::new();
    let mut cut_at = None;
    for i in 0..4 {
        sent.push((a.send(Ask::KeepAlive(locksmith_proto::KeepAlive {})).await, Instant::now()));
        if i == 1 {
            cluster.router.isolate(old);
            cut_at = Some(Instant::now());
        }
        tokio::time::sleep(TTL / 4).await;
    }
    let cut_at = cut_at.unwrap();

    let new = cluster.serving(&others(old)).await;
    let mut b = Client::open(&cluster.node(new).service, None).await.unwrap();
    b.granted("held", true, WITHIN).await;
    let granted_elsewhere = Instant::now();

    // Every answer the holder got, now that the lock is someone else's.
    let mut acked = Vec::new();
    while let Ok(m) = a.rx.try_recv() {
        if matches!(m.body, Some(Answer::KeepAlive(_))) {
            acked.push(m.id);
        }
    }
    assert!(acked.contains(&sent[0].0), "the renewal before the cut was not answered: {acked:?}");
    let last_acked = sent.iter().filter(|(id, _)| acked.contains(id)).map(|(_, at)| *at).max().unwrap_or(opened);
    for (id, at) in &sent {
        assert!(!(acked.contains(id) && *at > cut_at), "a renewal sent after the cut was answered");
    }
    assert!(
        last_acked + TTL <= granted_elsewhere,
        "the holder trusted its lock until {:?} after its last answered renewal, but another got it {:?} after",
        TTL,
        granted_elsewhere - last_acked
    );
    cluster.shutdown().await;
}

/// A session whose leader crashed resumes on the new leader within the grace period with its
/// holds: nobody else got its lock meanwhile, and its release finds it still held.
#[tokio::test(start_paused = true)]
async fn a_session_survives_a_failover_within_the_grace_period() {
    let cluster = Cluster::start().await;
    let old = cluster.serving(&IDS).await;
    let mut a = Client::open(&cluster.node(old).service, None).await.unwrap();
    let token = a.granted("kept", false, WITHIN).await;

    cluster.crash(old).await;
    let new = cluster.serving(&others(old)).await;
    let mut b = Client::open(&cluster.node(new).service, None).await.unwrap();
    let id = b.acquire("kept", false).await;
    assert!(matches!(b.answer(id, WITHIN).await, Some(ServerMessage { body: Some(Answer::Busy(_)), .. })));

    let mut resumed = Client::open(&cluster.node(new).service, Some((a.session, a.secret.clone()))).await.unwrap();
    assert_eq!(resumed.session, a.session);
    let release = locksmith_proto::Release { name: "kept".into(), owner: "o".into(), token };
    let id = resumed.send(Ask::Release(release)).await;
    match resumed.answer(id, WITHIN).await {
        Some(ServerMessage { body: Some(Answer::Released(r)), .. }) => assert!(r.was_held, "the hold was lost"),
        other => panic!("release: {other:?}"),
    }
    cluster.shutdown().await;
}

/// A follower serves no session: an open is refused with where the leader is.
#[tokio::test(start_paused = true)]
async fn a_follower_refuses_sessions_and_names_the_leader() {
    let cluster = Cluster::start().await;
    let leader = cluster.serving(&IDS).await;
    let follower = others(leader)[0];
    // The follower learns who leads from the leader's first heartbeat.
    let deadline = Instant::now() + WITHIN;
    while cluster.node(follower).service.serving().leader.is_none() {
        assert!(Instant::now() < deadline, "node {follower} never learned the leader");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let refused = Client::open(&cluster.node(follower).service, None).await.err().expect("a follower opened a session");
    match refused.body {
        Some(Answer::Error(e)) => {
            assert_eq!(e.code, locksmith_proto::error::Code::Unavailable as i32, "{e:?}");
            assert!(e.message.contains(&locksmith_raft::fixture::addr(leader)), "{}", e.message);
        }
        other => panic!("open on a follower: {other:?}"),
    }
    cluster.shutdown().await;
}

/// A leader that was cut off and hears of the new leader steps down: it stops serving and ends
/// its clients' streams, so they resume on the new leader.
#[tokio::test(start_paused = true)]
async fn a_deposed_leader_steps_down_and_ends_its_streams() {
    let cluster = Cluster::start().await;
    let old = cluster.serving(&IDS).await;
    let mut a = Client::open(&cluster.node(old).service, None).await.unwrap();
    cluster.router.isolate(old);
    cluster.serving(&others(old)).await;
    cluster.router.heal();

    let deadline = Instant::now() + WITHIN;
    while cluster.node(old).service.serving().serving {
        assert!(Instant::now() < deadline, "the deposed leader kept serving");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let ended = tokio::time::timeout(WITHIN, async { while a.rx.recv().await.is_some() {} }).await;
    assert!(ended.is_ok(), "the deposed leader's stream did not end");
    cluster.shutdown().await;
}
