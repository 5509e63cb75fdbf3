//! The session table of a real `locksmith serve` without `--auth`, shared by every process of a
//! host (all of them connect from 127.0.0.1): one process filling its quota, or the whole
//! table, does not lock its neighbours out.

#[path = "support/raw_grpc.rs"]
mod raw_grpc;

use std::time::Duration;

use locksmith::LockOptions;
use locksmith_proto::error::Code;
use locksmith_proto::server_message::Body as Out;
use locksmith_testkit::NativeServer;
use raw_grpc::{open, Next, RawConn, RawStream};

const BIN: &str = env!("CARGO_BIN_EXE_locksmith");

/// Opens a session on `conn`: the stream, or the refusal's code and text.
async fn open_session(conn: &mut RawConn) -> Result<RawStream, (i32, String)> {
    let mut s = conn.session().await;
    s.send(&open(1));
    match s.next_within(Duration::from_secs(5)).await {
        Some(Next::Message(m)) => match m.body {
            Some(Out::Opened(_)) => Ok(s),
            Some(Out::Error(e)) => Err((e.code, e.message)),
            other => panic!("expected opened, got {other:?}"),
        },
        other => panic!("no answer to open: {other:?}"),
    }
}

/// A neighbour on the same address opens a session and takes and releases a lock.
async fn a_neighbour_locks(url: &str) {
    let c = locksmith::connect(url).await.expect("the neighbour's session");
    let g = c.lock_with("neighbour", LockOptions::new().timeout(Duration::from_secs(5))).await.expect("its lock");
    g.unlock().await.expect("its unlock");
    c.close().await;
}

/// Finding 7 of issue 29: without `--auth` the per-client limit was keyed by address, so one
/// local process holding `--max-sessions-per-client` sessions refused every other local client
/// for a TTL. Now a client is its connection: the attacker's fifth session on its connection is
/// refused, and a neighbour on 127.0.0.1 still opens a session and locks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_filling_its_session_quota_does_not_lock_out_its_neighbours() {
    let server = NativeServer::start_with(BIN.as_ref(), &["--max-sessions-per-client", "4"]);
    let mut attacker = RawConn::connect(server.port(), 65_535).await;
    let mut held = Vec::new();
    for _ in 0..4 {
        held.push(open_session(&mut attacker).await.expect("the attacker's sessions within its quota"));
    }
    match open_session(&mut attacker).await {
        Err((code, why)) => {
            assert_eq!(code, Code::LimitExceeded as i32, "{why}");
            assert!(why.contains("4 sessions of one client (connection 127.0.0.1:"), "{why}");
        }
        Ok(_) => panic!("the attacker's connection opened a fifth session"),
    }
    a_neighbour_locks(&server.url()).await;
}

/// The same attacker with several connections fills the whole table (`--max-sessions 8`, 4 per
/// connection): a neighbour still gets in, by ending one of the attacker's sessions (its stream
/// is told its session expired), and keeps its session and its lock while the attacker opens
/// more connections, which can only take room from the attacker's own sessions.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_filling_the_session_table_gives_way_to_a_newcomer() {
    let server = NativeServer::start_with(BIN.as_ref(), &["--max-sessions", "8", "--max-sessions-per-client", "4"]);
    let mut conns = Vec::new();
    let mut held = Vec::new();
    for _ in 0..2 {
        let mut conn = RawConn::connect(server.port(), 65_535).await;
        for _ in 0..4 {
            held.push(open_session(&mut conn).await.expect("the attacker's sessions"));
        }
        conns.push(conn);
    }
    let neighbour = locksmith::connect(&server.url()).await.expect("the neighbour's session in a full table");
    let guard = neighbour
        .lock_with("neighbour", LockOptions::new().timeout(Duration::from_secs(5)))
        .await
        .expect("the neighbour's lock");

    // Exactly one attacker session was ended, with SESSION_EXPIRED and the reason.
    let mut evicted = 0;
    for s in &mut held {
        if let Some(Next::Message(m)) = s.next_within(Duration::from_millis(200)).await {
            match m.body {
                Some(Out::Error(e)) if e.code == Code::SessionExpired as i32 => {
                    assert!(e.message.contains("session table is full"), "{}", e.message);
                    evicted += 1;
                }
                other => panic!("an attacker session got {other:?}"),
            }
        }
    }
    assert_eq!(evicted, 1, "one attacker session makes room for one newcomer");

    // The attacker comes back on new connections: each takes the place of one of its own
    // sessions (or is refused), never the neighbour's.
    for _ in 0..6 {
        let mut conn = RawConn::connect(server.port(), 65_535).await;
        if let Ok(s) = open_session(&mut conn).await {
            held.push(s);
        }
        conns.push(conn);
    }
    assert!(guard.unlock().await.expect("the neighbour's unlock"), "the neighbour lost its lock");
    let again = neighbour.lock_with("neighbour", LockOptions::new().timeout(Duration::from_secs(5))).await;
    assert!(again.is_ok(), "the neighbour's session lives on: {again:?}");
    neighbour.close().await;
}
