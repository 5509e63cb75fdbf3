//! Nobody can act as another client's session on the native server. An attacker with a raw
//! protocol client reads the holder's session id from `Status` (ids are not secret) and tries
//! what once worked: resuming the session without its secret or with a guessed one, releasing
//! the holder's lock, closing sessions. Every attempt is refused or acts only on the attacker's
//! own session; the holder (a real `locksmith run` process) keeps its lock and its command keeps
//! running, and a second `locksmith run` cannot get the lock.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use locksmith_proto::client_message::Body as In;
use locksmith_proto::locksmith_client::LocksmithClient;
use locksmith_proto::server_message::Body as Out;
use locksmith_proto::{error::Code, ClientMessage, LockInfo, ServerMessage, StatusRequest};
use locksmith_testkit::{new_token, NativeServer};
use tokio::sync::mpsc;
use tokio_stream::wrappers::UnboundedReceiverStream;
use tonic::transport::Channel;

const BIN: &str = env!("CARGO_BIN_EXE_locksmith");

/// `msg` as a request, with `authorization: Bearer token` when there is a token.
fn request<T>(msg: T, token: Option<&str>) -> tonic::Request<T> {
    let mut req = tonic::Request::new(msg);
    if let Some(t) = token {
        req.metadata_mut().insert("authorization", format!("Bearer {t}").parse().unwrap());
    }
    req
}

async fn holder(client: &mut LocksmithClient<Channel>, name: &str, token: Option<&str>) -> Option<LockInfo> {
    let status = client
        .status(request(StatusRequest { name: name.into(), ..Default::default() }, token))
        .await
        .ok()?
        .into_inner();
    status.locks.into_iter().find(|l| l.name == name && l.held)
}

/// One session stream of the attacker: sends `first`, returns the first answer and the
/// sender for more.
async fn stream(
    client: &mut LocksmithClient<Channel>,
    first: In,
    token: Option<&str>,
) -> (ServerMessage, mpsc::UnboundedSender<ClientMessage>, tonic::Streaming<ServerMessage>) {
    let (tx, rx) = mpsc::unbounded_channel();
    tx.send(ClientMessage { id: 1, body: Some(first) }).unwrap();
    let mut answers = client.session(request(UnboundedReceiverStream::new(rx), token)).await.unwrap().into_inner();
    let first = answers.message().await.unwrap().expect("an answer to open");
    (first, tx, answers)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_id_from_status_is_not_enough_to_act_as_the_session() {
    let server = NativeServer::start(BIN.as_ref());
    takeover_fails(&server.url(), server.port(), None).await;
}

/// The same with an auth policy, the attacker holding a valid token of its own (allowed to lock
/// and observe everything): its token does not make the victim's session its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_auth_another_principal_cannot_act_as_the_session_either() {
    let dir = tempfile::tempdir().unwrap();
    let (tokens, digests): (Vec<String>, Vec<String>) = (0..2).map(|_| new_token(BIN.as_ref())).unzip();
    let policy = dir.path().join("policy.toml");
    std::fs::write(
        &policy,
        format!(
            "[principals.victim]\ntokens = [\"{}\"]\nadmin = true\n[principals.mallory]\ntokens = [\"{}\"]\nadmin = true\n",
            digests[0], digests[1]
        ),
    )
    .unwrap();
    let victim_token = dir.path().join("victim.token");
    std::fs::write(&victim_token, &tokens[0]).unwrap();
    let server = NativeServer::start_with(BIN.as_ref(), &["--auth", policy.to_str().unwrap()]);
    let url = format!("{}?token_file={}", server.url(), victim_token.display());
    takeover_fails(&url, server.port(), Some(&tokens[1])).await;
}

/// A `locksmith run` holder on `url`; an attacker on `port` (with `token`) tries to take over.
async fn takeover_fails(url: &str, port: u16, token: Option<&str>) {
    let mut run = locksmith_testkit::spawn(
        "locksmith run",
        Command::new(BIN)
            .args(["run", "nightly", "--backend", url, "--ttl", "2s", "--", "sleep", "30"])
            .stdin(Stdio::null()),
    );
    let endpoint = format!("http://127.0.0.1:{port}");
    let mut attacker = LocksmithClient::connect(endpoint).await.unwrap();
    let until = Instant::now() + Duration::from_secs(10);
    let victim = loop {
        if let Some(h) = holder(&mut attacker, "nightly", token).await {
            break h;
        }
        assert!(Instant::now() < until, "locksmith run never took the lock");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };

    // Resume the victim's session without a secret, and with guessed ones: refused.
    for guess in [Vec::new(), vec![0u8; 32], vec![0xffu8; 32]] {
        let open = locksmith_proto::Open { ttl_ms: 2_000, resume_session: victim.holder_session, resume_secret: guess };
        let (answer, _, _) = stream(&mut attacker, In::Open(open), token).await;
        assert!(
            matches!(&answer.body, Some(Out::Error(e)) if e.code == Code::PermissionDenied as i32),
            "a resume without the secret was not refused: {answer:?}"
        );
    }

    // Its own session can only release its own holds and close itself.
    let open = locksmith_proto::Open { ttl_ms: 2_000, ..Default::default() };
    let (opened, tx, mut answers) = stream(&mut attacker, In::Open(open), token).await;
    assert!(matches!(opened.body, Some(Out::Opened(_))), "{opened:?}");
    let release =
        locksmith_proto::Release { name: "nightly".into(), owner: victim.holder_owner.clone(), token: victim.token };
    tx.send(ClientMessage { id: 2, body: Some(In::Release(release)) }).unwrap();
    let answer = answers.message().await.unwrap().unwrap();
    assert!(matches!(answer.body, Some(Out::Released(r)) if !r.was_held), "released the victim's lock: {answer:?}");
    tx.send(ClientMessage { id: 3, body: Some(In::Close(locksmith_proto::Close {})) }).unwrap();

    // Past the TTL: the holder still holds with the same session and token, its command runs,
    // and nobody else gets the lock.
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    let now = holder(&mut attacker, "nightly", token).await.expect("the holder lost its lock");
    assert_eq!((now.holder_session, now.token), (victim.holder_session, victim.token));
    assert!(run.try_wait().is_none(), "the holder's command stopped");
    let second = Command::new(BIN)
        .args(["run", "nightly", "--backend", url, "--timeout", "1s", "--", "echo", "ran"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(second.status.code(), Some(75), "{}", String::from_utf8_lossy(&second.stderr));
    assert!(second.stdout.is_empty(), "a second holder ran its command");
    run.kill9();
}
