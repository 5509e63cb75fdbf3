//! The lock service: one task owns the [`Machine`], feeds it requests in arrival order with the
//! current time, and hands what it emits to a [`Sink`] that makes records durable before the
//! messages that depend on them go out. Transports (gRPC, in-process) only forward messages.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use locksmith_proto::client_message::Body as In;
use locksmith_proto::server_message::Body as Out;
use locksmith_proto::{error::Code, ClientMessage, ServerMessage};
use tokio::sync::{mpsc, oneshot};

use crate::error::ServerError;
use crate::machine::{AcquireOutcome, Durability, Effect, Limits, LockView, Machine, Record, Refusal, SessionId};
use crate::sink::Sink;

/// Where a session's outgoing messages go (its stream).
pub type Outbox = mpsc::UnboundedSender<ServerMessage>;

/// Commands from transports to the service task.
#[derive(Debug)]
pub(crate) enum Command {
    Open {
        conn: u64,
        request: u64,
        ttl: Duration,
        resume: Option<SessionId>,
        out: Outbox,
        reply: oneshot::Sender<Option<SessionId>>,
    },
    Request {
        session: SessionId,
        conn: u64,
        msg: ClientMessage,
    },
    Detach {
        session: SessionId,
        conn: u64,
    },
    Status {
        name: Option<String>,
        reply: oneshot::Sender<Vec<LockView>>,
    },
}

/// A handle to a running lock service; cheap to clone. The service stops when every handle and
/// every connection is gone, or on [`Service::shutdown`].
#[derive(Debug, Clone)]
pub struct Service {
    tx: mpsc::UnboundedSender<Command>,
    next_conn: Arc<AtomicU64>,
    stop: Arc<tokio::sync::Notify>,
}

impl Service {
    /// Starts a service whose state lives only in memory (for `memory://` and tests).
    pub fn start_in_memory(limits: Limits) -> Self {
        let machine = Machine::new(limits, 1);
        let (svc, task) = Self::spawn(machine, Sink::Direct);
        drop(task);
        svc
    }

    /// Opens `dir`, replays its log, compacts it, and starts a durable service. The returned
    /// task ends with the service (an error if the disk failed).
    ///
    /// # Errors
    /// A corrupt or locked data directory, or an I/O failure; the directory is left unchanged.
    pub fn start_durable(
        dir: &Path,
        limits: Limits,
        durability: Durability,
    ) -> Result<(Self, tokio::task::JoinHandle<Result<(), ServerError>>), ServerError> {
        let (data, records) = crate::wal::DataDir::open(dir)?;
        let restored = records.len();
        let mut machine = Machine::restore_with(limits, durability, records, now());
        let snapshot = machine.take_records();
        let file = data.rewrite(&snapshot)?;
        tracing::info!(dir = %dir.display(), records = restored, epoch = machine.epoch(), "data directory restored");
        let sink = Sink::durable(data, file);
        Ok(Self::spawn(machine, sink))
    }

    fn spawn(machine: Machine, sink: Sink) -> (Self, tokio::task::JoinHandle<Result<(), ServerError>>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let stop = Arc::new(tokio::sync::Notify::new());
        let actor = Actor { machine, sink, conns: HashMap::new(), msgs: Vec::new(), records: Vec::new() };
        let task = tokio::spawn(actor.run(rx, stop.clone()));
        (Self { tx, next_conn: Arc::new(AtomicU64::new(1)), stop }, task)
    }

    /// Asks the service task to stop after the work already queued.
    pub fn shutdown(&self) {
        self.stop.notify_one();
    }

    /// Whether the service task is still running.
    pub fn is_running(&self) -> bool {
        !self.tx.is_closed()
    }

    pub(crate) fn new_conn_id(&self) -> u64 {
        self.next_conn.fetch_add(1, Ordering::Relaxed)
    }

    pub(crate) fn send(&self, cmd: Command) -> bool {
        self.tx.send(cmd).is_ok()
    }

    /// Introspection: one lock or all.
    ///
    /// # Cancel safety
    /// Cancel safe: read only.
    ///
    /// # Errors
    /// [`ServerError::Stopped`]: the service has stopped.
    pub async fn status(&self, name: Option<String>) -> Result<Vec<LockView>, ServerError> {
        let (reply, rx) = oneshot::channel();
        if !self.send(Command::Status { name, reply }) {
            return Err(ServerError::Stopped);
        }
        rx.await.map_err(|_| ServerError::Stopped)
    }
}

fn now() -> Instant {
    tokio::time::Instant::now().into_std()
}

pub(crate) fn msg(id: u64, body: Out) -> ServerMessage {
    ServerMessage { id, body: Some(body) }
}

pub(crate) fn error_msg(id: u64, code: Code, message: impl Into<String>) -> ServerMessage {
    msg(id, Out::Error(locksmith_proto::Error { code: code as i32, message: message.into() }))
}

fn refusal_msg(id: u64, r: &Refusal) -> ServerMessage {
    let code = match r {
        Refusal::SessionExpired => Code::SessionExpired,
        Refusal::Invalid(_) => Code::InvalidArgument,
        Refusal::Limit(_) => Code::LimitExceeded,
    };
    error_msg(id, code, r.to_string())
}

/// Most commands handled before one flush to the sink; bounds the latency of the first.
const MAX_BATCH: usize = 512;

struct Actor {
    machine: Machine,
    sink: Sink,
    conns: HashMap<SessionId, (u64, Outbox)>,
    /// Messages for the current batch, in order.
    msgs: Vec<(Outbox, ServerMessage)>,
    records: Vec<Record>,
}

impl Actor {
    async fn run(
        mut self,
        mut rx: mpsc::UnboundedReceiver<Command>,
        stop: Arc<tokio::sync::Notify>,
    ) -> Result<(), ServerError> {
        let far = Duration::from_secs(86_400);
        loop {
            let wake = self.machine.next_deadline().unwrap_or_else(|| now() + far);
            tokio::select! {
                biased;
                _ = stop.notified() => break,
                cmd = rx.recv() => {
                    let Some(cmd) = cmd else { break };
                    self.handle(cmd);
                    let mut n = 1;
                    while n < MAX_BATCH {
                        match rx.try_recv() {
                            Ok(cmd) => self.handle(cmd),
                            Err(_) => break,
                        }
                        n += 1;
                    }
                }
                _ = tokio::time::sleep_until(tokio::time::Instant::from_std(wake)) => {
                    self.machine.tick(now());
                    self.collect();
                }
            }
            if self.sink.wants_compaction() {
                let snapshot = self.machine.snapshot(now());
                self.sink.compact(snapshot);
            }
            self.flush()?;
        }
        self.flush()?;
        self.sink.finish()
    }

    fn flush(&mut self) -> Result<(), ServerError> {
        if self.records.is_empty() && self.msgs.is_empty() {
            return Ok(());
        }
        self.sink.submit(std::mem::take(&mut self.records), std::mem::take(&mut self.msgs))
    }

    fn send(&mut self, session: SessionId, m: ServerMessage) {
        if let Some((_, out)) = self.conns.get(&session) {
            self.msgs.push((out.clone(), m));
        }
    }

    /// Moves what the machine emitted into the current batch, in order.
    fn collect(&mut self) {
        self.records.extend(self.machine.take_records());
        for e in self.machine.take_effects() {
            match e {
                Effect::Granted { session, request, token } => {
                    self.send(session, msg(request, Out::Granted(locksmith_proto::Granted { token, queued: true })));
                }
                Effect::Expired { session } => {
                    self.send(session, error_msg(0, Code::SessionExpired, "session expired"));
                    // Dropping the outbox ends the stream once the batch is delivered.
                    self.conns.remove(&session);
                }
            }
        }
    }

    fn handle(&mut self, cmd: Command) {
        let t = now();
        match cmd {
            Command::Open { conn, request, ttl, resume, out, reply } => match self.machine.open(t, ttl, resume) {
                Ok((session, ttl)) => {
                    // A resumed session's new stream replaces the old one.
                    self.conns.insert(session, (conn, out));
                    let ttl_ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX);
                    self.collect();
                    self.send(session, msg(request, Out::Opened(locksmith_proto::Opened { session, ttl_ms })));
                    let _ = reply.send(Some(session));
                }
                Err(r) => {
                    self.collect();
                    self.msgs.push((out, refusal_msg(request, &r)));
                    let _ = reply.send(None);
                }
            },
            Command::Detach { session, conn } => {
                if self.conns.get(&session).is_some_and(|(c, _)| *c == conn) {
                    self.conns.remove(&session);
                }
            }
            Command::Status { name, reply } => {
                self.machine.tick(t);
                self.collect();
                let _ = reply.send(self.machine.status(t, name.as_deref()));
            }
            Command::Request { session, conn, msg: m } => {
                if self.conns.get(&session).is_none_or(|(c, _)| *c != conn) {
                    // A superseded stream: its session now talks through a newer one.
                    return;
                }
                self.request(t, session, m);
            }
        }
    }

    fn request(&mut self, t: Instant, session: SessionId, m: ClientMessage) {
        let id = m.id;
        let reply = match m.body {
            Some(In::KeepAlive(_)) => match self.machine.keep_alive(t, session) {
                Ok(()) => Some(msg(id, Out::KeepAlive(locksmith_proto::KeepAliveAck {}))),
                Err(r) => Some(refusal_msg(id, &r)),
            },
            Some(In::Acquire(a)) => {
                let delay = Duration::from_millis(a.lock_delay_ms);
                match locksmith_core::LockName::new(a.name.as_str()) {
                    Err(e) => Some(error_msg(id, Code::InvalidArgument, e.to_string())),
                    Ok(_) if a.owner.is_empty() || a.owner.len() > 256 => {
                        Some(error_msg(id, Code::InvalidArgument, "owner must be 1..=256 bytes"))
                    }
                    Ok(_) => match self.machine.acquire(t, session, id, &a.name, &a.owner, a.wait, delay) {
                        Ok(AcquireOutcome::Granted(token)) => {
                            Some(msg(id, Out::Granted(locksmith_proto::Granted { token, queued: false })))
                        }
                        Ok(AcquireOutcome::Busy) => Some(msg(id, Out::Busy(locksmith_proto::Busy {}))),
                        Ok(AcquireOutcome::Queued) => None,
                        Err(r) => Some(refusal_msg(id, &r)),
                    },
                }
            }
            Some(In::Release(r)) => {
                let was_held = self.machine.release(t, session, &r.name, &r.owner, r.token);
                Some(msg(id, Out::Released(locksmith_proto::Released { was_held })))
            }
            Some(In::Cancel(c)) => {
                let was_waiting = self.machine.cancel(t, session, c.request);
                Some(msg(id, Out::Cancelled(locksmith_proto::Cancelled { was_waiting })))
            }
            Some(In::Close(_)) => {
                self.machine.close(t, session);
                self.collect();
                self.conns.remove(&session);
                return;
            }
            Some(In::Open(_)) => Some(error_msg(id, Code::InvalidArgument, "session already open on this stream")),
            None => Some(error_msg(id, Code::InvalidArgument, "empty message")),
        };
        // Effects first: a release's hand-off grant is written before the release's answer.
        self.collect();
        if let Some(r) = reply {
            self.send(session, r);
        }
    }
}
