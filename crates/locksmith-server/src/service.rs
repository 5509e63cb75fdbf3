//! The lock service: one task owns the [`Machine`], feeds it requests in arrival order with the
//! current time, and hands what it emits to a [`Sink`] that makes records durable before the
//! messages that depend on them go out. Transports (gRPC, in-process) forward what their
//! connection tasks decoded (`pb_impl`); the task completes each request with its session and
//! message id into a machine command, and turns the answer back into a message.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use locksmith_proto::ServerMessage;
use tokio::sync::{mpsc, oneshot, watch};

use crate::auth::Principal;
use crate::outbox::Outbox;

use crate::cluster::Role;
#[cfg(feature = "cluster")]
use crate::cluster::{Change, ReplicaMachine};
use crate::error::ServerError;
use crate::machine::ids::IdMap;
use crate::machine::{
    Acquire, AcquireOutcome, Durability, Effect, Limits, LockName, LockView, Machine, Record, Release, SessionId,
    StatusPage,
};
use crate::pb_impl::{self, Invalid, Open, Reply, Request, StatusQuery};
use crate::sink::Sink;

/// Commands from transports to the service task.
#[derive(Debug)]
pub(crate) enum Command {
    Open {
        conn: u64,
        /// The message id of the `open`.
        id: u64,
        open: Open,
        out: Outbox,
        reply: oneshot::Sender<Option<SessionId>>,
    },
    Request {
        session: SessionId,
        conn: u64,
        id: u64,
        request: Result<Request, Invalid>,
    },
    Detach {
        session: SessionId,
        conn: u64,
    },
    /// Follow `name`: its state now and after every change of its holders, on `out`.
    Observe {
        name: LockName,
        out: Outbox,
    },
    Status {
        query: StatusQuery,
        /// Only locks it may observe (with an auth policy).
        principal: Option<Principal>,
        reply: oneshot::Sender<StatusPage>,
    },
    /// An administrator's release of `name` (see [`Machine::revoke`]), by `by` (for the audit
    /// line).
    Revoke {
        name: LockName,
        session: Option<SessionId>,
        by: String,
        reply: oneshot::Sender<Vec<crate::machine::HolderView>>,
    },
}

/// A handle to a running lock service; cheap to clone. The service stops when every handle and
/// every connection is gone, or on [`Service::shutdown`].
#[derive(Debug, Clone)]
pub struct Service {
    tx: mpsc::Sender<Command>,
    next_conn: Arc<AtomicU64>,
    stop: Arc<tokio::sync::Notify>,
    serving: watch::Receiver<Serving>,
}

/// Whether this service answers clients: always for a single node; in a cluster only on the
/// leader, once its machine is built from the committed state.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Serving {
    /// It answers clients.
    pub serving: bool,
    /// Where the leader is (`host:port`), when known and elsewhere.
    pub leader: Option<String>,
}

impl Service {
    /// Starts a service whose state lives only in memory (for `memory://` and tests).
    pub fn start_in_memory(limits: Limits) -> Self {
        let machine = Machine::new(limits, 1);
        let (svc, task) = Self::spawn(machine, Sink::Direct, None);
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
        let (mut data, records) = crate::wal::DataDir::open(dir)?;
        let restored = records.len();
        let mut machine = Machine::restore_with(limits, durability, records, now());
        let snapshot = machine.take_records();
        crate::telemetry::restored(&snapshot);
        let file = data.rewrite(&snapshot)?;
        tracing::info!(dir = %dir.display(), records = restored, epoch = machine.epoch(), "data directory restored");
        let sink = Sink::durable(data, file);
        Ok(Self::spawn(machine, sink, None))
    }

    /// Starts the service of a cluster node over its Raft `node`: it serves clients while this
    /// node leads (see `crate::cluster`), and tells them where the leader is otherwise (the
    /// address the membership records for it).
    #[cfg(feature = "cluster")]
    pub fn start_cluster(
        node: Arc<locksmith_raft::RaftNode<ReplicaMachine>>,
        limits: Limits,
    ) -> (Self, tokio::task::JoinHandle<Result<(), ServerError>>) {
        let (role, sink) = Role::start(node);
        Self::spawn(Machine::new(limits, 0), sink, Some(role))
    }

    fn spawn(
        machine: Machine,
        sink: Sink,
        cluster: Option<Role>,
    ) -> (Self, tokio::task::JoinHandle<Result<(), ServerError>>) {
        let (tx, rx) = mpsc::channel(COMMAND_QUEUE);
        let stop = Arc::new(tokio::sync::Notify::new());
        let per_client = machine.limits().max_sessions_per_client;
        let (serving_tx, serving) = watch::channel(Serving { serving: cluster.is_none(), leader: None });
        let actor = Actor {
            machine,
            sink,
            conns: IdMap::default(),
            msgs: Vec::new(),
            replies: Vec::new(),
            records: Vec::new(),
            effects: Vec::new(),
            principals: IdMap::default(),
            observers: HashMap::new(),
            clients: crate::clients::Clients::new(per_client),
            telemetry: Default::default(),
            cluster,
            serving: serving_tx,
        };
        let task = tokio::spawn(actor.run(rx, stop.clone()));
        (Self { tx, next_conn: Arc::new(AtomicU64::new(1)), stop, serving }, task)
    }

    /// Whether it answers clients now, and where the leader is otherwise.
    pub fn serving(&self) -> Serving {
        self.serving.borrow().clone()
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

    /// Queues `cmd` for the service task, waiting while the queue is full: a client that sends
    /// faster than the service works waits on its own connection, not in the server's memory.
    pub(crate) async fn send(&self, cmd: Command) -> bool {
        self.tx.send(cmd).await.is_ok()
    }

    /// Follows lock `name`: its state now, then after every change of its holders (each once
    /// durable), as `ServerMessage`s whose body is `lock`, on `out`, until `out`'s receiver is
    /// dropped.
    ///
    /// # Errors
    /// [`ServerError::Stopped`]: the service has stopped.
    ///
    /// # Cancel safety
    /// Cancel safe: a dropped call may or may not have registered `out`; a registered outbox
    /// whose receiver is gone is forgotten at the next change.
    pub async fn observe(&self, name: LockName, out: impl Into<Outbox>) -> Result<(), ServerError> {
        if self.send(Command::Observe { name, out: out.into() }).await {
            Ok(())
        } else {
            Err(ServerError::Stopped)
        }
    }

    /// Introspection: one lock, or (`None`) every lock, fetched page by page so the service
    /// serves other requests between pages.
    ///
    /// # Cancel safety
    /// Cancel safe: read only.
    ///
    /// # Errors
    /// [`ServerError::Stopped`]: the service has stopped.
    pub async fn status(&self, name: Option<LockName>) -> Result<Vec<LockView>, ServerError> {
        if let Some(name) = name {
            return Ok(self.status_page(StatusQuery::One(name), None).await?.locks);
        }
        let mut all = Vec::new();
        let mut after = None;
        loop {
            let query = StatusQuery::Page { after, limit: pb_impl::MAX_STATUS_PAGE };
            let page = self.status_page(query, None).await?;
            all.extend(page.locks);
            match page.next {
                Some(next) => after = Some(next),
                None => return Ok(all),
            }
        }
    }

    /// An administrator's release of a stuck lock `name`: the session of each holder (only
    /// `session`'s, when given) is revoked as if its lease had run out, without lock-delay; the
    /// next waiters are granted with greater tokens. Answers once the change is durable (in a
    /// cluster, committed), with the holds revoked (none: nothing changed). Audited in the log
    /// at warn, naming `by`.
    ///
    /// # Cancel safety
    /// Not cancel safe: the release may happen although the answer is dropped.
    ///
    /// # Errors
    /// [`ServerError::NotServing`] on a node that does not lead; [`ServerError::Stopped`].
    pub async fn revoke(
        &self,
        name: LockName,
        session: Option<SessionId>,
        by: &str,
    ) -> Result<Vec<crate::machine::HolderView>, ServerError> {
        let (reply, rx) = oneshot::channel();
        if !self.send(Command::Revoke { name, session, by: by.to_string(), reply }).await {
            return Err(ServerError::Stopped);
        }
        rx.await.map_err(|_| match self.serving() {
            Serving { serving: false, leader } => ServerError::NotServing { leader },
            _ if !self.tx.is_closed() => ServerError::NotServing { leader: None },
            _ => ServerError::Stopped,
        })
    }

    /// Introspection: one lock or one page of locks (see [`Machine::status_page`]), of those
    /// `principal` may observe when it is `Some`.
    ///
    /// # Cancel safety
    /// Cancel safe: read only.
    ///
    /// # Errors
    /// [`ServerError::Stopped`]: the service has stopped.
    pub async fn status_page(
        &self,
        query: StatusQuery,
        principal: Option<Principal>,
    ) -> Result<StatusPage, ServerError> {
        let (reply, rx) = oneshot::channel();
        if !self.send(Command::Status { query, principal, reply }).await {
            return Err(ServerError::Stopped);
        }
        // A node that does not serve drops the reply, and so does a leader that could not
        // confirm it still leads.
        rx.await.map_err(|_| match self.serving() {
            Serving { serving: false, leader } => ServerError::NotServing { leader },
            _ if !self.tx.is_closed() => ServerError::NotServing { leader: None },
            _ => ServerError::Stopped,
        })
    }
}

/// What an observer of `name` is sent: the lock's state at `t` (an unknown lock as free).
fn lock_message(machine: &Machine, t: Instant, name: &str) -> ServerMessage {
    let info = machine
        .status(t, Some(name))
        .pop()
        .map(locksmith_proto::LockInfo::from)
        .unwrap_or_else(|| locksmith_proto::LockInfo { name: name.to_string(), ..Default::default() });
    ServerMessage { id: 0, body: Some(locksmith_proto::server_message::Body::Lock(info)) }
}

fn now() -> Instant {
    tokio::time::Instant::now().into_std()
}

/// Commands queued for the service task before senders wait (see [`Service::send`]).
const COMMAND_QUEUE: usize = 4096;

/// Most commands handled before one flush to the sink; bounds the latency of the first.
const MAX_BATCH: usize = 512;

struct Actor {
    machine: Machine,
    sink: Sink,
    conns: IdMap<(u64, Outbox)>,
    /// Messages for the current batch, in order.
    msgs: Vec<(Outbox, ServerMessage)>,
    /// Status pages for the current batch (see [`Sink::submit`]).
    replies: Vec<crate::sink::Reply>,
    records: Vec<Record>,
    /// What the machine did on its own, between [`Machine::move_effects_to`] and its
    /// messages (empty outside `collect`).
    effects: Vec<Effect>,
    /// Who opened each session (with an auth policy), for the event log.
    principals: IdMap<String>,
    /// Observe streams by lock.
    observers: HashMap<Box<str>, Vec<Outbox>>,
    /// Live sessions per client.
    clients: crate::clients::Clients,
    telemetry: crate::telemetry::Telemetry,
    /// A cluster node's role; `None` for a single node, which always serves.
    cluster: Option<Role>,
    serving: watch::Sender<Serving>,
}

impl Actor {
    async fn run(mut self, mut rx: mpsc::Receiver<Command>, stop: Arc<tokio::sync::Notify>) -> Result<(), ServerError> {
        // One timer and one stop wait for the task's life, moved only when the next deadline
        // does (a session opened or kept alive): made anew for each batch, they would join and
        // leave the timer wheel and the stop's waiter list (a lock each way) per request. With
        // no deadline the timer is left where it is and not waited on.
        let wake = tokio::time::sleep(Duration::from_secs(86_400));
        tokio::pin!(wake);
        let stopped = stop.notified();
        tokio::pin!(stopped);
        loop {
            let next = self.machine.next_deadline().map(tokio::time::Instant::from_std);
            if let Some(next) = next.filter(|&n| n != wake.deadline()) {
                wake.as_mut().reset(next);
            }
            tokio::select! {
                biased;
                () = &mut stopped => break,
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
                () = &mut wake, if next.is_some() => {
                    self.machine.tick(now());
                    self.collect();
                }
                _ = leadership_changed(&mut self.cluster) => self.follow_leadership().await,
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

    /// Without the `cluster` feature there is no leadership to follow.
    #[cfg(not(feature = "cluster"))]
    async fn follow_leadership(&mut self) {}

    /// Starts or stops serving as this node's leadership says (see `crate::cluster`).
    #[cfg(feature = "cluster")]
    async fn follow_leadership(&mut self) {
        let Some(role) = self.cluster.as_mut() else { return };
        match role.follow(self.machine.limits(), now).await {
            Change::Lead(machine) => {
                self.machine = *machine;
                self.serving.send_replace(Serving { serving: true, leader: None });
            }
            Change::StepDown(leader) => {
                self.step_down();
                self.serving.send_replace(Serving { serving: false, leader });
            }
            Change::Follow(leader) => {
                self.serving.send_replace(Serving { serving: false, leader });
            }
            Change::Stay => {}
        }
    }

    /// Forgets everything a leader knew beyond the committed state: its streams end (their
    /// clients resume on the new leader), its machine is dropped.
    #[cfg(feature = "cluster")]
    fn step_down(&mut self) {
        let limits = self.machine.limits().clone();
        self.machine = Machine::new(limits.clone(), 0);
        self.conns.clear();
        self.observers.clear();
        self.principals.clear();
        self.clients = crate::clients::Clients::new(limits.max_sessions_per_client);
        self.telemetry = Default::default();
        self.records.clear();
        self.msgs.clear();
        self.replies.clear();
    }

    /// Answers what a node that does not serve (a follower) cannot: an open is told where the
    /// leader is; a status call is dropped (its caller sees the node does not serve); the rest
    /// belongs to streams that ended when the node stopped leading.
    fn refuse(&mut self, cmd: Command) {
        if let Command::Open { id, out, reply, .. } = cmd {
            let r = crate::cluster::not_leader(self.serving.borrow().leader.clone());
            if let Some(m) = Reply::Refused(r).into_message(id) {
                out.deliver(m);
            }
            let _ = reply.send(None);
        }
    }

    /// Whether this node answers clients now.
    fn serves(&self) -> bool {
        self.cluster.as_ref().is_none_or(Role::serving)
    }

    fn flush(&mut self) -> Result<(), ServerError> {
        if self.records.is_empty() && self.msgs.is_empty() && self.replies.is_empty() {
            return Ok(());
        }
        self.sink.submit(
            std::mem::take(&mut self.records),
            std::mem::take(&mut self.msgs),
            std::mem::take(&mut self.replies),
        )
    }

    fn send(&mut self, session: SessionId, m: ServerMessage) {
        if let Some((_, out)) = self.conns.get(&session) {
            self.msgs.push((out.clone(), m));
        }
    }

    /// Moves what the machine emitted into the current batch, in order, and tells the observers
    /// of the locks whose holders changed (after the records, so once they are durable).
    fn collect(&mut self) {
        self.machine.move_records_to(&mut self.records);
        for name in self.machine.take_changed() {
            self.notify(&name);
        }
        // The effects pass through a buffer kept with its capacity across batches.
        let mut effects = std::mem::take(&mut self.effects);
        self.machine.move_effects_to(&mut effects);
        for e in effects.drain(..) {
            let (session, m) = pb_impl::effect_message(&e);
            self.telemetry.effect(&e);
            // The event log (an audit trail at debug level): who got which token, whose session
            // ran out.
            match e {
                Effect::Granted { token, .. } => {
                    if event_log() {
                        let principal = self.principals.get(&session).map(String::as_str).unwrap_or("-");
                        tracing::debug!(session, principal, token, "granted (queued)");
                    }
                }
                Effect::Expired { .. } => {
                    let principal = self.principals.get(&session).map(String::as_str).unwrap_or("-");
                    tracing::debug!(session, principal, "session expired");
                    self.principals.remove(&session);
                    self.clients.remove(session);
                }
            }
            self.send(session, m);
            if let Effect::Expired { session } = e {
                // Dropping the outbox ends the stream once the batch is delivered.
                self.conns.remove(&session);
            }
        }
        self.effects = effects;
    }

    /// Sends `name`'s state to each of its observers; forgets the ones that went away.
    fn notify(&mut self, name: &str) {
        let Some(outs) = self.observers.get_mut(name) else { return };
        outs.retain(|o| !o.is_closed());
        if outs.is_empty() {
            self.observers.remove(name);
            self.machine.watch(name, false);
            return;
        }
        let m = lock_message(&self.machine, now(), name);
        for out in outs.iter() {
            self.msgs.push((out.clone(), m.clone()));
        }
    }

    fn handle(&mut self, cmd: Command) {
        let t = now();
        if !self.serves() {
            self.refuse(cmd);
            return;
        }
        match cmd {
            Command::Observe { name, out } => {
                self.machine.tick(t);
                self.collect();
                let name: Box<str> = name.as_str().into();
                self.machine.watch(&name, true);
                // The state now, to this observer only: the others saw it already.
                self.msgs.push((out.clone(), lock_message(&self.machine, t, &name)));
                self.observers.entry(name).or_default().push(out);
            }
            Command::Open { conn, id, open, out, reply } => {
                // A new session gets a fresh secret; a resume presents the one it was given.
                let principal = open.principal.clone();
                let bind = |d| crate::secret::bind(d, principal.as_deref());
                let (secret, digest) = match open.resume {
                    Some(_) => (Vec::new(), bind(open.secret)),
                    None => match crate::secret::fresh() {
                        Some((secret, digest)) => (secret.to_vec(), bind(digest)),
                        None => {
                            let r = crate::machine::Refusal::Limit(
                                crate::machine::LimitKind::Other,
                                "the OS random number generator failed".into(),
                            );
                            if let Some(m) = Reply::Refused(r).into_message(id) {
                                self.msgs.push((out, m));
                            }
                            let _ = reply.send(None);
                            return;
                        }
                    },
                };
                self.open(t, conn, id, open, secret, digest, out, reply);
            }
            Command::Detach { session, conn } => {
                if self.conns.get(&session).is_some_and(|(c, _)| *c == conn) {
                    self.conns.remove(&session);
                    self.clients.attach(session, false);
                }
            }
            Command::Status { query, principal, reply } => {
                self.machine.tick(t);
                self.collect();
                let visible = |name: &str| principal.as_ref().is_none_or(|p| p.may_observe(name));
                let page = match query {
                    StatusQuery::One(name) => {
                        let locks = self.machine.status(t, Some(name.as_str()));
                        StatusPage { locks: locks.into_iter().filter(|v| visible(&v.name)).collect(), next: None }
                    }
                    // A principal's pages only ever look at names it may observe.
                    StatusQuery::Page { after, limit } => {
                        match principal.as_ref().and_then(Principal::observed_prefixes) {
                            Some(prefixes) => self.machine.status_page_within(t, after.as_deref(), limit, &prefixes),
                            None => self.machine.status_page(t, after.as_deref(), limit, &|_| true),
                        }
                    }
                };
                // A cluster's leader answers once what the page shows is committed (or a quorum
                // confirmed it still leads): one cut off from the majority must not describe
                // locks the majority may already have handed on.
                self.replies.push(Box::new(move || {
                    let _ = reply.send(page);
                }));
            }
            Command::Revoke { name, session, by, reply } => {
                let revoked = self.machine.revoke(t, name.as_str(), session);
                for h in &revoked {
                    let holder = self.principals.get(&h.session).map(String::as_str).unwrap_or("-");
                    tracing::warn!(
                        lock = name.as_str(),
                        session = format!("{:x}", h.session),
                        holder,
                        owner = h.owner,
                        token = h.token,
                        by,
                        "admin release: the holder's session was revoked"
                    );
                }
                if revoked.is_empty() {
                    tracing::warn!(lock = name.as_str(), by, "admin release: no holder matched; nothing changed");
                }
                self.collect();
                self.replies.push(Box::new(move || {
                    let _ = reply.send(revoked);
                }));
            }
            Command::Request { session, conn, id, request } => {
                if self.conns.get(&session).is_none_or(|(c, _)| *c != conn) {
                    // A superseded stream: its session now talks through a newer one.
                    return;
                }
                self.request(t, session, id, request);
            }
        }
    }

    /// Opens or resumes a session for connection `conn` (see [`Machine::open`]); `secret` goes
    /// to the client in `Opened` (new sessions only).
    #[allow(clippy::too_many_arguments)]
    fn open(
        &mut self,
        t: Instant,
        conn: u64,
        id: u64,
        open: crate::pb_impl::Open,
        secret: Vec<u8>,
        digest: crate::machine::SecretDigest,
        out: Outbox,
        reply: tokio::sync::oneshot::Sender<Option<SessionId>>,
    ) {
        let admitted = match open.resume {
            None => self.clients.admit(&open),
            Some(_) => Ok(()),
        };
        // A full table makes room for a new session that the machine will then accept: never
        // for one it refuses anyway (a TTL out of range), which would evict for nothing.
        let limits = self.machine.limits();
        if admitted.is_ok() && open.resume.is_none() && (limits.min_ttl..=limits.max_ttl).contains(&open.ttl) {
            // Sessions whose lease ran out leave first.
            self.machine.tick(t);
            self.collect();
            if self.machine.session_count() >= self.machine.limits().max_sessions {
                if let Some(victim) = self.clients.make_room(&open) {
                    self.evict(t, victim);
                }
            }
        }
        match admitted.and_then(|()| self.machine.open(t, open.ttl, open.resume, digest)) {
            Ok((session, ttl)) => {
                self.clients.add(session, &open);
                self.telemetry.opened(session, &open);
                if let Some(p) = &open.principal {
                    self.principals.insert(session, p.clone());
                }
                // A resumed session's new stream replaces the old one. If the old one is still
                // there, its client is told its session now lives elsewhere (it treats that as
                // the session's end), so two clients never both believe they hold its locks.
                if let Some((old, old_out)) = self.conns.insert(session, (conn, out)) {
                    if old != conn {
                        let m = ServerMessage {
                            id: 0,
                            body: Some(locksmith_proto::server_message::Body::Error(locksmith_proto::Error {
                                code: locksmith_proto::error::Code::SessionExpired as i32,
                                message: "session resumed by another connection".into(),
                            })),
                        };
                        self.msgs.push((old_out, m));
                    }
                }
                // `Opened` first: the client takes the stream's first message as the answer to
                // its `open`, and a resume can emit a grant for this very session (its expiry
                // pass ends another lease the session was queued behind). Both go out in one
                // batch, after its records.
                let opened = Reply::Opened { session, ttl, secret };
                if let Some(m) = opened.into_message(id) {
                    self.send(session, m);
                }
                self.collect();
                let _ = reply.send(Some(session));
            }
            Err(r) => {
                crate::telemetry::refused(&r);
                self.collect();
                if let Some(m) = Reply::Refused(r).into_message(id) {
                    self.msgs.push((out, m));
                }
                let _ = reply.send(None);
            }
        }
    }

    /// Ends `victim` to make room in a full session table for a client that holds fewer (see
    /// `crate::clients`): closed like a clean close (its holds handed on, with greater tokens),
    /// and its client told its session expired, as after an administrator's release.
    fn evict(&mut self, t: Instant, victim: SessionId) {
        let principal = self.principals.remove(&victim);
        self.telemetry.closing(victim, principal.as_deref(), self.machine.session_ttl_left(t, victim));
        crate::telemetry::limit_hit(crate::telemetry::Limit::SessionEvicted);
        if let Some(more_since_last) = self.clients.log_eviction() {
            tracing::warn!(
                session = victim,
                principal = principal.as_deref().unwrap_or("-"),
                more_since_last,
                "session table full (--max-sessions): ended a session of the client holding the most, to admit a \
                 client holding fewer"
            );
        }
        self.machine.close(t, victim);
        self.collect();
        self.clients.remove(victim);
        if let Some((_, out)) = self.conns.remove(&victim) {
            let m = ServerMessage {
                id: 0,
                body: Some(locksmith_proto::server_message::Body::Error(locksmith_proto::Error {
                    code: locksmith_proto::error::Code::SessionExpired as i32,
                    message: "session ended: the server's session table is full and this client holds more sessions \
                              than the one that needed a place"
                        .into(),
                })),
            };
            self.msgs.push((out, m));
        }
    }

    /// Runs one decoded request of `session` (message `id`) and queues its answer.
    fn request(&mut self, t: Instant, session: SessionId, id: u64, request: Result<Request, Invalid>) {
        let reply = match request {
            Err(e) => Reply::Invalid(e),
            Ok(Request::KeepAlive) => match self.machine.keep_alive(t, session) {
                Ok(()) => Reply::KeepAlive,
                Err(r) => Reply::Refused(r),
            },
            Ok(Request::Acquire { name, owner, wait, lock_delay, mode, value }) => {
                // The event log's copy of the name, only when the event log is on: the grant
                // path does not pay for a line nobody writes.
                let lock = event_log().then(|| name.as_str().to_string());
                let cmd = Acquire { session, request: id, name, owner, wait, lock_delay, mode, value };
                match self.machine.acquire(t, cmd) {
                    Ok(outcome) => {
                        self.telemetry.acquired(session, id, outcome);
                        if let (AcquireOutcome::Granted(token), Some(lock)) = (outcome, lock) {
                            let principal = self.principals.get(&session).map(String::as_str).unwrap_or("-");
                            tracing::debug!(session, principal, lock, token, "granted");
                        }
                        Reply::Acquired(outcome)
                    }
                    Err(r) => {
                        crate::telemetry::refused(&r);
                        Reply::Refused(r)
                    }
                }
            }
            Ok(Request::Release { name, owner, token }) => {
                let lock = event_log().then(|| name.as_str().to_string());
                let was_held = self.machine.release(t, Release { session, name, owner, token });
                if was_held {
                    self.telemetry.released();
                    if let Some(lock) = lock {
                        let principal = self.principals.get(&session).map(String::as_str).unwrap_or("-");
                        tracing::debug!(session, principal, lock, token, "released");
                    }
                }
                Reply::Released { was_held }
            }
            Ok(Request::Cancel { request }) => {
                self.telemetry.cancelled(session, request);
                Reply::Cancelled { was_waiting: self.machine.cancel(t, session, request) }
            }
            Ok(Request::Close) => {
                self.telemetry.closing(
                    session,
                    self.principals.get(&session).map(String::as_str),
                    self.machine.session_ttl_left(t, session),
                );
                self.machine.close(t, session);
                self.collect();
                self.conns.remove(&session);
                self.principals.remove(&session);
                self.clients.remove(session);
                return;
            }
        };
        // Effects first: a release's hand-off grant is written before the release's answer.
        self.collect();
        if let Some(m) = reply.into_message(id) {
            self.send(session, m);
        }
    }
}

/// Whether the event log (debug level, see `crate::telemetry`) is written: what only it needs
/// is not looked up or copied otherwise.
fn event_log() -> bool {
    tracing::enabled!(tracing::Level::DEBUG)
}

/// Resolves when a cluster node's leadership changes; never for a single node.
async fn leadership_changed(cluster: &mut Option<Role>) {
    match cluster {
        Some(role) => role.changed().await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use locksmith_proto::server_message::Body;

    use super::*;
    use crate::machine::Owner;

    fn actor() -> Actor {
        let machine = Machine::new(Limits::default(), 1);
        Actor {
            machine,
            sink: Sink::Direct,
            conns: IdMap::default(),
            msgs: Vec::new(),
            replies: Vec::new(),
            records: Vec::new(),
            effects: Vec::new(),
            principals: IdMap::default(),
            observers: HashMap::new(),
            clients: crate::clients::Clients::new(usize::MAX),
            telemetry: Default::default(),
            cluster: None,
            serving: watch::channel(Serving { serving: true, leader: None }).0,
        }
    }

    /// Opens a new session from `peer` with `ttl`: the session, or `None` when refused.
    fn open_from(actor: &mut Actor, peer: &str, ttl: Duration) -> Option<SessionId> {
        let (out, _rx) = mpsc::unbounded_channel();
        let (reply, mut opened) = oneshot::channel();
        let open = Open { ttl, resume: None, secret: [0; 32], principal: None, peer: Some(peer.parse().unwrap()) };
        actor.handle(Command::Open { conn: actor.conns.len() as u64 + 100, id: 1, open, out: out.into(), reply });
        actor.flush().unwrap();
        opened.try_recv().unwrap()
    }

    /// A full table makes room for a newcomer holding fewer sessions, but never for an open the
    /// machine refuses anyway: a TTL out of range evicts nobody.
    #[tokio::test]
    async fn a_full_table_evicts_only_for_an_open_it_then_accepts() {
        let limits = Limits { max_sessions: 2, ..Limits::default() };
        let mut actor = actor();
        actor.machine = Machine::new(limits, 1);
        let ttl = Duration::from_secs(10);
        assert!(open_from(&mut actor, "127.0.0.1:4000", ttl).is_some());
        assert!(open_from(&mut actor, "127.0.0.1:4000", ttl).is_some());
        assert_eq!(open_from(&mut actor, "127.0.0.1:4001", Duration::from_secs(100_000)), None);
        assert_eq!(actor.machine.session_count(), 2, "a refused open evicted a session");
        assert!(open_from(&mut actor, "127.0.0.1:4001", ttl).is_some(), "the newcomer on its own connection");
        assert_eq!(actor.machine.session_count(), 2);
        assert_eq!(open_from(&mut actor, "127.0.0.1:4000", ttl), None, "the largest holder cannot take it back");
    }

    /// Opens (or resumes) a session on connection `conn`; returns it and its stream's messages.
    /// Opens a session (or resumes one with the secret given) on connection `conn`: the session,
    /// its resume secret (new sessions; the `Opened` is taken off the stream for it) and the
    /// stream's messages.
    fn open(
        actor: &mut Actor,
        conn: u64,
        ttl: Duration,
        resume: Option<(SessionId, &[u8])>,
    ) -> (SessionId, Vec<u8>, mpsc::UnboundedReceiver<ServerMessage>) {
        let (out, mut rx) = mpsc::unbounded_channel();
        let (reply, mut opened) = oneshot::channel();
        let secret = crate::secret::digest(resume.map_or(&[][..], |r| r.1));
        let open = Open { ttl, resume: resume.map(|r| r.0), secret, principal: None, peer: None };
        actor.handle(Command::Open { conn, id: 1, open, out: out.into(), reply });
        actor.flush().unwrap();
        let session = opened.try_recv().unwrap().unwrap();
        let secret = match resume {
            Some(_) => Vec::new(),
            None => match rx.try_recv().unwrap().body {
                Some(Body::Opened(o)) => o.resume_secret,
                other => panic!("expected opened, got {other:?}"),
            },
        };
        (session, secret, rx)
    }

    fn acquire(actor: &mut Actor, session: SessionId, conn: u64, id: u64, owner: &str) {
        let request = Ok(Request::Acquire {
            name: LockName::new("x").unwrap(),
            owner: Owner::new(owner).unwrap(),
            wait: true,
            lock_delay: Duration::ZERO,
            mode: crate::machine::HoldMode::Exclusive,
            value: None,
        });
        actor.handle(Command::Request { session, conn, id, request });
        actor.flush().unwrap();
    }

    /// The first message on a resumed stream answers the `open`, also when resuming hands the
    /// session a lock (another session's lease ran out meanwhile): the grant follows it.
    #[tokio::test(start_paused = true)]
    async fn a_resumed_stream_starts_with_opened_even_when_the_resume_grants() {
        let mut actor = actor();
        let (b, _, _b_out) = open(&mut actor, 1, Duration::from_secs(1), None);
        acquire(&mut actor, b, 1, 2, "b");
        let (a, secret, _old) = open(&mut actor, 2, Duration::from_secs(10), None);
        acquire(&mut actor, a, 2, 5, "a");
        actor.handle(Command::Detach { session: a, conn: 2 });
        // b's lease runs out with nobody ticking the machine: the resume's expiry pass finds it.
        tokio::time::advance(Duration::from_millis(1_500)).await;

        let (resumed, _, mut out) = open(&mut actor, 3, Duration::from_secs(10), Some((a, &secret)));
        assert_eq!(resumed, a);
        let first = out.try_recv().unwrap();
        assert!(matches!(first.body, Some(Body::Opened(_))), "first message: {first:?}");
        let second = out.try_recv().unwrap();
        assert_eq!(second.id, 5);
        assert!(matches!(second.body, Some(Body::Granted(g)) if g.queued), "{second:?}");
    }

    /// A session id (which Status shows anyone) is not enough to resume a session: without its
    /// secret, or with another one, the resume is refused with PERMISSION_DENIED and the holder
    /// keeps its stream and its lock.
    #[tokio::test(start_paused = true)]
    async fn resuming_needs_the_sessions_secret() {
        let mut actor = actor();
        let (a, secret, mut a_out) = open(&mut actor, 1, Duration::from_secs(10), None);
        assert_eq!(secret.len(), 32);
        acquire(&mut actor, a, 1, 2, "a");
        assert!(matches!(a_out.try_recv().unwrap().body, Some(Body::Granted(_))));
        for guess in [&b""[..], &[0u8; 32][..], &secret[..31]] {
            let (out, mut rx) = mpsc::unbounded_channel();
            let (reply, mut opened) = oneshot::channel();
            let open = Open {
                ttl: Duration::from_secs(10),
                resume: Some(a),
                secret: crate::secret::digest(guess),
                principal: None,
                peer: None,
            };
            actor.handle(Command::Open { conn: 9, id: 1, open, out: out.into(), reply });
            actor.flush().unwrap();
            assert_eq!(opened.try_recv().unwrap(), None);
            match rx.try_recv().unwrap().body {
                Some(Body::Error(e)) => assert_eq!(e.code, locksmith_proto::error::Code::PermissionDenied as i32),
                other => panic!("{other:?}"),
            }
        }
        // The holder's stream is still the session's: a release through it works.
        let release =
            Ok(Request::Release { name: LockName::new("x").unwrap(), owner: Owner::new("a").unwrap(), token: 1 });
        actor.handle(Command::Request { session: a, conn: 1, id: 3, request: release });
        actor.flush().unwrap();
        assert!(matches!(a_out.try_recv().unwrap().body, Some(Body::Released(r)) if r.was_held));
    }

    /// With the secret, a resume from another connection takes the session over, and the old
    /// stream is told so (its client then treats the session as ended) instead of going quiet.
    #[tokio::test(start_paused = true)]
    async fn a_resume_elsewhere_tells_the_old_stream() {
        let mut actor = actor();
        let (a, secret, mut old) = open(&mut actor, 1, Duration::from_secs(10), None);
        let (resumed, _, _new) = open(&mut actor, 2, Duration::from_secs(10), Some((a, &secret)));
        assert_eq!(resumed, a);
        let told = old.try_recv().unwrap();
        assert_eq!(told.id, 0);
        assert!(
            matches!(&told.body, Some(Body::Error(e)) if e.code == locksmith_proto::error::Code::SessionExpired as i32 && e.message.contains("another connection")),
            "{told:?}"
        );
    }

    /// With an auth policy a session belongs to the principal that opened it: its secret in
    /// another principal's hands does not resume it.
    #[tokio::test(start_paused = true)]
    async fn another_principal_cannot_resume_a_session_even_with_its_secret() {
        let mut actor = actor();
        let (out, mut rx) = mpsc::unbounded_channel();
        let (reply, mut opened) = oneshot::channel();
        let open = Open {
            ttl: Duration::from_secs(10),
            resume: None,
            secret: [0; 32],
            principal: Some("jobs".into()),
            peer: None,
        };
        actor.handle(Command::Open { conn: 1, id: 1, open, out: out.into(), reply });
        actor.flush().unwrap();
        let a = opened.try_recv().unwrap().unwrap();
        let secret = match rx.try_recv().unwrap().body {
            Some(Body::Opened(o)) => o.resume_secret,
            other => panic!("{other:?}"),
        };
        for (who, conn, granted) in [("ops", 2, false), ("jobs", 3, true)] {
            let (out, _rx) = mpsc::unbounded_channel();
            let (reply, mut opened) = oneshot::channel();
            let open = Open {
                ttl: Duration::from_secs(10),
                resume: Some(a),
                secret: crate::secret::digest(&secret),
                principal: Some(who.into()),
                peer: None,
            };
            actor.handle(Command::Open { conn, id: 1, open, out: out.into(), reply });
            actor.flush().unwrap();
            assert_eq!(opened.try_recv().unwrap().is_some(), granted, "{who}");
        }
    }
}
