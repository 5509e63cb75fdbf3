//! A raw protocol client of the native server, for tests that need what the library never does:
//! many requests in flight on one session stream (filling a server with locks or a queue with
//! waiters quickly), or a client that behaves badly on purpose.

use locksmith_proto::client_message::Body as In;
use locksmith_proto::locksmith_client::LocksmithClient;
use locksmith_proto::server_message::Body as Out;
use locksmith_proto::{error::Code, Acquire, ClientMessage, Open, Release, ServerMessage};
use tokio::sync::mpsc;
use tokio_stream::wrappers::UnboundedReceiverStream;

/// One session stream on a plain `locksmith://127.0.0.1:PORT` server.
#[derive(Debug)]
pub struct RawSession {
    tx: mpsc::UnboundedSender<ClientMessage>,
    answers: tonic::Streaming<ServerMessage>,
    next_id: u64,
    /// The session id the server gave.
    pub session: u64,
}

/// How a raw request was answered, when not as hoped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RawRefusal {
    /// An `Error` message: its code and text.
    Error(Code, String),
    /// Another answer than expected (debug text).
    Unexpected(String),
    /// The stream ended (with this status, if any).
    Ended(String),
}

impl RawSession {
    /// Opens a session with `ttl_ms` on the server listening at `127.0.0.1:port`.
    ///
    /// # Panics
    /// When the server cannot be reached or refuses the session (test code).
    pub async fn open(port: u16, ttl_ms: u64) -> Self {
        let mut client = LocksmithClient::connect(format!("http://127.0.0.1:{port}"))
            .await
            .unwrap_or_else(|e| panic!("cannot connect to 127.0.0.1:{port}: {e}"));
        let (tx, rx) = mpsc::unbounded_channel();
        let open = ClientMessage { id: 1, body: Some(In::Open(Open { ttl_ms, ..Default::default() })) };
        tx.send(open).unwrap_or_else(|_| panic!("stream closed"));
        let mut answers = client
            .session(UnboundedReceiverStream::new(rx))
            .await
            .unwrap_or_else(|e| panic!("session refused: {e}"))
            .into_inner();
        let session = match answers.message().await {
            Ok(Some(ServerMessage { body: Some(Out::Opened(o)), .. })) => o.session,
            other => panic!("expected opened, got {other:?}"),
        };
        Self { tx, answers, next_id: 2, session }
    }

    fn send(&mut self, body: In) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        // A closed stream shows in the answers.
        let _ = self.tx.send(ClientMessage { id, body: Some(body) });
        id
    }

    async fn answer(&mut self) -> Result<Out, RawRefusal> {
        match self.answers.message().await {
            Ok(Some(ServerMessage { body: Some(Out::Error(e)), .. })) => {
                Err(RawRefusal::Error(Code::try_from(e.code).unwrap_or(Code::Unknown), e.message))
            }
            Ok(Some(ServerMessage { body: Some(b), .. })) => Ok(b),
            Ok(Some(other)) => Err(RawRefusal::Unexpected(format!("{other:?}"))),
            Ok(None) => Err(RawRefusal::Ended("end of stream".into())),
            Err(status) => Err(RawRefusal::Ended(status.to_string())),
        }
    }

    /// Takes and releases each of `names` once (no-wait acquires; the locks must be free),
    /// `chunk` requests in flight at a time (below the server's `--max-queued-messages`, 1,024 by
    /// default: a client that sends more before reading its answers is cut off): afterwards the
    /// server remembers every name for its fencing counter.
    ///
    /// # Errors
    /// The first refusal or unexpected answer.
    pub async fn touch_locks(&mut self, names: &[String], chunk: usize) -> Result<(), RawRefusal> {
        for part in names.chunks(chunk.max(1)) {
            for name in part {
                self.send(In::Acquire(Acquire {
                    name: name.clone(),
                    owner: "raw".into(),
                    wait: false,
                    ..Default::default()
                }));
            }
            let mut tokens = Vec::with_capacity(part.len());
            for _ in part {
                match self.answer().await? {
                    Out::Granted(g) => tokens.push(g.token),
                    other => return Err(RawRefusal::Unexpected(format!("{other:?}"))),
                }
            }
            for (name, token) in part.iter().zip(tokens) {
                self.send(In::Release(Release { name: name.clone(), owner: "raw".into(), token }));
            }
            for _ in part {
                self.answer().await?;
            }
        }
        Ok(())
    }

    /// Queues `n` waiting acquires of the held lock `name` (owners `w0`, `w1`, …), `chunk` in
    /// flight at a time. A queued acquire has no answer until its grant, so each chunk ends with a
    /// keep-alive: its answer comes after every refusal of the chunk. Returns how many were queued
    /// before the first refusal, and that refusal.
    pub async fn queue_waiters(&mut self, name: &str, n: usize, chunk: usize) -> (usize, Option<RawRefusal>) {
        let mut queued = 0;
        while queued < n {
            let batch = chunk.max(1).min(n - queued);
            for i in 0..batch {
                let owner = format!("w{}", queued + i);
                self.send(In::Acquire(Acquire { name: name.into(), owner, wait: true, ..Default::default() }));
            }
            self.send(In::KeepAlive(locksmith_proto::KeepAlive {}));
            let mut refused = None;
            let mut refusals = 0;
            loop {
                match self.answer().await {
                    Ok(Out::KeepAlive(_)) => break,
                    Ok(other) => return (queued, Some(RawRefusal::Unexpected(format!("{other:?}")))),
                    Err(e @ RawRefusal::Ended(_)) => return (queued, Some(e)),
                    Err(e) => {
                        refusals += 1;
                        refused.get_or_insert(e);
                    }
                }
            }
            queued += batch - refusals;
            if refused.is_some() {
                return (queued, refused);
            }
        }
        (queued, None)
    }

    /// Acquires `name` once, waiting if needed.
    ///
    /// # Errors
    /// A refusal or another answer than a grant.
    pub async fn lock(&mut self, name: &str) -> Result<u64, RawRefusal> {
        self.send(In::Acquire(Acquire { name: name.into(), owner: "raw".into(), wait: true, ..Default::default() }));
        match self.answer().await? {
            Out::Granted(g) => Ok(g.token),
            other => Err(RawRefusal::Unexpected(format!("{other:?}"))),
        }
    }

    /// Ends the session (`Close`) without waiting for anything.
    pub fn close(&mut self) {
        self.send(In::Close(locksmith_proto::Close {}));
    }
}
