//! The client side of one session stream, whatever carries it (a [`Connector`]: gRPC for
//! `locksmith://`, a channel pair into the in-process service for `memory://`): matches answers
//! to requests, makes dropped acquisitions leave nothing behind, and resumes the session on a new
//! stream when the old one breaks (re-sending what was in flight, which the server treats
//! idempotently).
//!
//! # Message ids
//! Every client message carries an id that the server echoes in its answer. `1` is `open`, on
//! every stream; everything else takes the next value of one counter per session (2, 3, …):
//! calls, `Cancel`s, and the releases this module sends on its own. A grant pushed to a queued
//! acquisition carries that acquisition's id; id `0` is a pushed session expiry. A re-sent
//! request keeps its id: the server knows a queued acquisition by `(session, id)`, so asking
//! again finds the same queue entry, or the same hold once granted.
//!
//! # State
//! One mutex-guarded [`State`] per session, shared by callers and the stream task (`drive`):
//! - `tx`: the current stream, `None` while reconnecting;
//! - `pending`: calls awaiting an answer (id → answer slot, the message to re-send after a
//!   resume, whether it was handed to a stream). Acquire and release are re-sent; keep-alive is
//!   not: it fails on a break and the engine retries it (the resume itself renewed the lease);
//! - `abandoned`: acquisitions whose caller dropped the future before the answer (id → name,
//!   owner). A grant that still arrives for one is released, unless a retry by the same owner
//!   awaits its answer (the server answers it with that same hold). The entry ends with the
//!   answer to the `Cancel` that withdraws it: on one stream nothing about that acquisition
//!   follows it;
//! - `cancels`: `Cancel` id → the acquisition it withdraws, for the current stream only;
//! - `expired` (the server said so, or reconnecting outlasted the TTL) and `closed`: every
//!   call fails with [`Error::SessionExpired`] from then on.
//!
//! Every change happens under the lock, sends included: a request is registered before its
//! answer can be dispatched, and a stream swap never splits a re-send from its registration.
//!
//! # The life of one call
//! ```text
//!  caller                         this module                              server
//!  acquire ──▶ call(): id 7, pending[7] ── Acquire{7} ──────────────────────▶ queues 7
//!                                          ◀─────────────────── Granted{7} ── its turn
//!  Granted ◀── dispatch: pending[7] ─▶ answer slot
//!
//!  dropped before the answer (the CancelGuard runs `withdraw`):
//!    pending[7] ─▶ abandoned[7]          ── Cancel{8, request 7} ────────────▶ unqueues 7
//!    cancels[8] = 7                      ◀─────────────── Granted{7} (crossed) ──
//!                   late grant: release ── Release{9} (tracked, re-sent) ────▶
//!                                          ◀──────────────────── Cancelled{8} ──
//!    abandoned[7], cancels[8] end
//!  dropped after the answer, unseen: a grant in the slot is released the same way.
//!
//!  the stream breaks (an error or its end):
//!    drive: tx = None; pending calls that are not re-sent fail (Unavailable)
//!    reconnect: backoff 5 ms doubling to TTL/10, until a TTL after the break
//!      connect ── Open{1, resume_session} ─────────────────────────────────▶ same session
//!              ◀──────────────────────────────────────────────── Opened{1} ──
//!      per abandoned a: Acquire{a, wait: false}, Cancel{new id, request a} ─▶ released if
//!      re-send pending acquires and releases as they were ─────────────────▶   granted;
//!      tx = the new stream                                                     same answers
//!    connections refused for a TTL: expired, pending calls fail (SessionExpired)
//!    close() meanwhile: stop at the next attempt; a resume that just succeeded gets Close
//! ```

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use futures_util::stream::BoxStream;
use futures_util::StreamExt;
use locksmith_core::driver::{millis, Backoff, CancelGuard, IdMap, Jitter};
use locksmith_core::{AcquireRequest, Acquired, Error, KeepAlive, LockName, Result, Session};
use locksmith_proto::client_message::Body as In;
use locksmith_proto::server_message::Body as Out;
use locksmith_proto::{error::Code, ClientMessage, ServerMessage};
use tokio::sync::{mpsc, oneshot};

/// Longest wait for the server's answer to `open`.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

/// One stream: messages out, messages in.
// `pub` so the `test-transport` feature can hand it to this crate's tests (`testing`); without
// that feature it stays unreachable from outside the crate.
#[cfg_attr(not(feature = "test-transport"), allow(unreachable_pub))]
pub struct Transport {
    /// Messages to the server, in order. A send that fails (the stream is gone) is noticed by
    /// the reader's end of the stream, not by the sender.
    pub tx: mpsc::UnboundedSender<ClientMessage>,
    /// Messages from the server; an error or the end of the stream breaks it.
    pub rx: BoxStream<'static, Result<ServerMessage>>,
}

impl std::fmt::Debug for Transport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Transport").field("open", &!self.tx.is_closed()).finish_non_exhaustive()
    }
}

/// Opens new streams to the server (gRPC, in-process, or a test's double).
// `pub` for the same reason as `Transport`.
#[cfg_attr(not(feature = "test-transport"), allow(unreachable_pub))]
#[async_trait]
pub trait Connector: Send + Sync + 'static {
    /// The backend's URL, for errors and logs.
    fn describe(&self) -> String;
    /// URL scheme, the `backend` label of the waiter wake-up counter.
    fn scheme(&self) -> &'static str;
    /// A new stream; the session's first message on it is `open`.
    async fn connect(&self) -> Result<Transport>;
}

struct Pending {
    reply: oneshot::Sender<Result<Out>>,
    /// Re-sent as is after a resume (acquire, release, cancel are idempotent on the server).
    resend: Option<ClientMessage>,
    /// Handed to a stream (it may have reached the server); `false` for a call queued while
    /// reconnecting, which a dropped caller can simply forget.
    sent: bool,
}

#[derive(Default)]
struct State {
    tx: Option<mpsc::UnboundedSender<ClientMessage>>,
    // Keyed by message ids this client made (`Shared::id`): no one else can choose them, so
    // they need no SipHash (see `IdMap`), looked up twice per call as they are.
    pending: IdMap<Pending>,
    /// Acquisitions dropped before their answer: a grant that still arrives is released. An
    /// entry ends with the answer to the `Cancel` that withdraws it, the last message the
    /// server sends about that acquisition.
    abandoned: IdMap<(String, String)>,
    /// Cancel message id → the acquisition it withdraws (on the current stream only).
    cancels: IdMap<u64>,
    expired: bool,
    closed: bool,
}

struct Shared {
    /// Set when the stream task has ended (the server has closed our stream after `Close`).
    done: tokio::sync::watch::Sender<bool>,
    /// Wakes a reconnect loop that waits between attempts when `close` is called.
    closing: tokio::sync::Notify,
    session: u64,
    /// The resume secret the server gave at the opening: sent with every resume, never shown
    /// (`Shared` has no `Debug`).
    secret: Vec<u8>,
    /// The lease the server granted at the opening.
    lease: Duration,
    /// When the opening was sent, once a stream to the leader was up.
    lease_started: tokio::time::Instant,
    ttl: Duration,
    next_id: AtomicU64,
    state: Mutex<State>,
    connector: Arc<dyn Connector>,
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        // A poisoned lock only means another task panicked mid-update; the maps stay usable.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    fn unavailable(&self, message: impl Into<String>) -> Error {
        Error::Unavailable { backend: self.connector.describe(), message: message.into() }
    }

    /// Gives back the hold `(name, owner, token)` that nobody waits for (a grant that came for
    /// a dropped acquisition). Tracked like a call whose caller has gone: re-sent after a resume
    /// until answered, so a break cannot leave the hold behind.
    ///
    /// Not if an acquisition of the same `(name, owner)` awaits its answer (a retry with an
    /// explicit owner): the server keeps one hold per owner in a session and answers a repeated
    /// acquire with it, so this grant is that call's hold too. The Cancel ending the dropped
    /// acquisition always goes out before such a retry, so a late grant never meets a retry
    /// that was already answered (see `reconnect` for the order after a resume).
    fn release_unwanted(&self, st: &mut State, name: String, owner: String, token: u64) {
        let retried = st.pending.values().any(|p| {
            matches!(&p.resend, Some(ClientMessage { body: Some(In::Acquire(a)), .. }) if a.name == name && a.owner == owner)
        });
        if retried {
            return;
        }
        let id = self.id();
        let msg = ClientMessage { id, body: Some(In::Release(locksmith_proto::Release { name, owner, token })) };
        let sent = st.tx.as_ref().is_some_and(|tx| tx.send(msg.clone()).is_ok());
        // The answer has nowhere to go; the entry only keeps the message until it is answered.
        let (reply, _) = oneshot::channel();
        st.pending.insert(id, Pending { reply, resend: Some(msg), sent });
    }
}

/// A [`Session`] over a session stream.
pub(crate) struct StreamSession {
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for StreamSession {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl StreamSession {
    /// Opens a session of `ttl` on a new stream.
    pub(crate) async fn open(connector: Arc<dyn Connector>, ttl: Duration) -> Result<Self> {
        let mut transport = connector.connect().await?;
        // The server starts the lease once it reads the opening, which is sent now: finding the
        // leader (an election, a round of refusals) took the time before.
        let lease_started = tokio::time::Instant::now();
        let (session, lease, secret) = handshake(&mut transport, &connector, ttl, 0, Vec::new()).await?;
        let shared = Arc::new(Shared {
            done: tokio::sync::watch::channel(false).0,
            closing: tokio::sync::Notify::new(),
            session,
            secret,
            ttl,
            lease,
            lease_started,
            next_id: AtomicU64::new(2),
            state: Mutex::new(State { tx: Some(transport.tx.clone()), ..State::default() }),
            connector,
        });
        let task = tokio::spawn(drive(shared.clone(), transport));
        Ok(Self { shared, task })
    }

    /// Sends `body` and waits for its answer. `resend`: re-sent as is after a resume (the server
    /// treats acquire, release and cancel idempotently). `acquire`: `(name, owner)` of an
    /// acquisition, withdrawn (and a grant that still arrives released) if this future is dropped.
    async fn call(&self, body: In, resend: bool, acquire: Option<(String, String)>) -> Result<Out> {
        let id = self.shared.id();
        let (tx, rx) = oneshot::channel();
        let msg = ClientMessage { id, body: Some(body) };
        {
            let mut st = self.shared.state();
            if st.expired || st.closed {
                return Err(Error::SessionExpired);
            }
            let sent = match &st.tx {
                Some(t) => t.send(msg.clone()).is_ok(),
                None if !resend => return Err(self.shared.unavailable("reconnecting")),
                None => false,
            };
            st.pending.insert(id, Pending { reply: tx, resend: resend.then_some(msg), sent });
        }
        // Synchronous on purpose: the Cancel must be queued under the state lock, before any
        // later message of this session, and also when no runtime is left.
        let mut call = CancelGuard::sync(
            "stream call",
            InFlight { shared: self.shared.clone(), id, acquire, answer: rx },
            withdraw,
        );
        let out = (&mut call.state_mut().answer).await;
        call.disarm();
        out.map_err(|_| self.shared.unavailable("session stream closed"))?
    }
}

/// What a dropped call leaves to clean up: its id, the `(name, owner)` of an acquisition, and
/// its answer slot, which may already hold an answer the caller never saw.
struct InFlight {
    shared: Arc<Shared>,
    id: u64,
    acquire: Option<(String, String)>,
    answer: oneshot::Receiver<Result<Out>>,
}

/// Cleans up after a call whose future was dropped. Not answered yet: the call is forgotten,
/// and an acquisition is withdrawn with a `Cancel` (a grant that still arrives is released,
/// see `dispatch`). Already answered (the answer waits, unseen, in its slot): a grant is
/// released, since nobody will ever hold it.
fn withdraw(call: InFlight) {
    let InFlight { shared, id, acquire, mut answer } = call;
    let mut st = shared.state();
    if let Some(p) = st.pending.remove(&id) {
        // An acquisition that never left this process has nothing to withdraw.
        if let (Some(key), true) = (acquire, p.sent) {
            st.abandoned.insert(id, key);
            // With no stream now, the resume withdraws it (see `reconnect`).
            if let Some(tx) = st.tx.clone() {
                send_cancel(&shared, &mut st, &tx, id);
            }
        }
        return;
    }
    // `dispatch` answers under the state lock we hold, so the slot is settled.
    if let (Some((name, owner)), Ok(Ok(Out::Granted(g)))) = (acquire, answer.try_recv()) {
        shared.release_unwanted(&mut st, name, owner, g.token);
    }
}

/// Withdraws the abandoned acquisition `request` with a `Cancel` on `tx`; its answer ends the
/// entry (see `dispatch`).
fn send_cancel(shared: &Shared, st: &mut State, tx: &mpsc::UnboundedSender<ClientMessage>, request: u64) {
    let id = shared.id();
    st.cancels.insert(id, request);
    let _ = tx.send(ClientMessage { id, body: Some(In::Cancel(locksmith_proto::Cancel { request })) });
}

/// Opens (or resumes, with its secret) the session on a fresh stream: its id, the lease the
/// server granted and (new sessions) the resume secret.
async fn handshake(
    t: &mut Transport,
    connector: &Arc<dyn Connector>,
    ttl: Duration,
    resume: u64,
    secret: Vec<u8>,
) -> Result<(u64, Duration, Vec<u8>)> {
    let ttl_ms = millis(ttl);
    let open = In::Open(locksmith_proto::Open { ttl_ms, resume_session: resume, resume_secret: secret });
    t.tx.send(ClientMessage { id: 1, body: Some(open) })
        .map_err(|_| Error::Unavailable { backend: connector.describe(), message: "stream closed".into() })?;
    // A server that accepted the stream but does not answer (paused, overloaded) must not hang
    // the caller forever.
    let first = tokio::time::timeout(HANDSHAKE_TIMEOUT, t.rx.next())
        .await
        .map_err(|_| Error::Unavailable { backend: connector.describe(), message: "no answer to open".into() })?;
    match first {
        Some(Ok(ServerMessage { body: Some(Out::Opened(o)), .. })) => {
            Ok((o.session, Duration::from_millis(o.ttl_ms), o.resume_secret))
        }
        Some(Ok(ServerMessage { body: Some(Out::Error(e)), .. })) => Err(server_error(&connector.describe(), &e)),
        Some(Ok(other)) => Err(Error::Protocol(format!("expected opened, got {other:?}"))),
        Some(Err(e)) => Err(e),
        None => Err(Error::Unavailable { backend: connector.describe(), message: "stream closed during open".into() }),
    }
}

/// The client error for a refusal `e` from the server at `backend`. The server's text may
/// already name its kind (`invalid argument: …`): said once, not twice.
fn server_error(backend: &str, e: &locksmith_proto::Error) -> Error {
    let unprefixed = |prefix: &str| e.message.strip_prefix(prefix).unwrap_or(&e.message).to_string();
    match Code::try_from(e.code).unwrap_or(Code::Unknown) {
        Code::SessionExpired => Error::SessionExpired,
        Code::InvalidArgument => Error::InvalidArgument(unprefixed("invalid argument: ")),
        Code::LimitExceeded => Error::LimitExceeded(unprefixed("limit exceeded: ")),
        Code::PermissionDenied => Error::permission_denied(backend, unprefixed("permission denied: ")),
        Code::Unavailable | Code::Unknown => Error::Backend(format!("{backend}: {}", e.message)),
    }
}

/// Reads answers and pushed grants; on a broken stream, resumes the session on a new one.
async fn drive(shared: Arc<Shared>, t: Transport) {
    drive_inner(&shared, t).await;
    shared.done.send_replace(true);
}

async fn drive_inner(shared: &Arc<Shared>, mut t: Transport) {
    loop {
        while let Some(item) = t.rx.next().await {
            match item {
                Ok(m) => dispatch(shared, m),
                Err(e) => {
                    tracing::debug!(session = shared.session, error = %e, "session stream error");
                    break;
                }
            }
            if shared.state().expired {
                return;
            }
        }
        {
            let mut st = shared.state();
            st.tx = None;
            if st.closed || st.expired {
                fail_all(&mut st, || Error::SessionExpired);
                return;
            }
            // Calls that cannot be re-sent fail now; their callers retry.
            let lost: Vec<u64> = st.pending.iter().filter(|(_, p)| p.resend.is_none()).map(|(id, _)| *id).collect();
            for id in lost {
                if let Some(p) = st.pending.remove(&id) {
                    let _ = p.reply.send(Err(shared.unavailable("session stream broke; resuming")));
                }
            }
        }
        match reconnect(shared).await {
            Some(next) => t = next,
            None => return,
        }
    }
}

fn fail_all(st: &mut State, err: impl Fn() -> Error) {
    for (_, p) in st.pending.drain() {
        let _ = p.reply.send(Err(err()));
    }
}

/// Resumes the session on a new stream until it works or the session's TTL has certainly run
/// out (then the server has expired it anyway).
async fn reconnect(shared: &Arc<Shared>) -> Option<Transport> {
    let give_up = tokio::time::Instant::now() + shared.ttl;
    // Unjittered: one client's own reconnect, nothing for others to collide with.
    let mut backoff = Backoff::custom(Duration::from_millis(5), shared.ttl / 10, Jitter::None);
    loop {
        if shared.state().closed {
            // Closed while no stream was up: nothing left to tell the server that its lease
            // will not say by itself; `close` returns now instead of after the TTL.
            return None;
        }
        if tokio::time::Instant::now() >= give_up {
            let mut st = shared.state();
            st.expired = true;
            fail_all(&mut st, || Error::SessionExpired);
            return None;
        }
        tokio::select! {
            _ = tokio::time::sleep(backoff.delay(None)) => {}
            // `notify_one` keeps a permit, so a `close` that came before this wait counts.
            _ = shared.closing.notified() => continue,
        }
        let mut t = match shared.connector.connect().await {
            Ok(t) => t,
            // Credentials the server no longer accepts (a revoked token): no retry makes them
            // right, and the server closed the session as it revoked them.
            Err(Error::Auth { .. }) => {
                let mut st = shared.state();
                st.expired = true;
                fail_all(&mut st, || Error::SessionExpired);
                return None;
            }
            Err(_) => continue,
        };
        match handshake(&mut t, &shared.connector, shared.ttl, shared.session, shared.secret.clone()).await {
            Ok(_) => {
                let mut st = shared.state();
                if st.closed {
                    // Closed while this attempt was under way, and the server has just resumed
                    // (renewed) the session: end it, so its holds are freed now rather than a
                    // TTL later. The server then ends the stream, which ends this task.
                    let body = In::Close(locksmith_proto::Close {});
                    let _ = t.tx.send(ClientMessage { id: shared.id(), body: Some(body) });
                    return Some(t);
                }
                // Cancels sent on the old stream are answered there or never.
                st.cancels.clear();
                // A dropped acquisition may still be queued (its Cancel never went out, or was
                // lost) or may have been granted with the grant lost: ask again without waiting
                // (a grant, old or new, is released when it arrives), then withdraw it. The
                // Cancel's answer comes after every other answer about it and ends the entry.
                // Before the re-sends below: a retry of the same owner among them must still be
                // waiting when a grant for the dropped one comes (see `release_unwanted`).
                let abandoned: Vec<(u64, (String, String))> =
                    st.abandoned.iter().map(|(id, key)| (*id, key.clone())).collect();
                for (id, (name, owner)) in abandoned {
                    // The hold, if it was granted, is found by (session, owner) whatever its kind;
                    // if not, an exclusive no-wait ask queues nothing (and a grant is released).
                    let body = In::Acquire(locksmith_proto::Acquire { name, owner, ..Default::default() });
                    let _ = t.tx.send(ClientMessage { id, body: Some(body) });
                    send_cancel(shared, &mut st, &t.tx, id);
                }
                for p in st.pending.values_mut() {
                    if let Some(m) = &p.resend {
                        // A waiting acquisition asks the server again: one wake-up.
                        if matches!(&m.body, Some(In::Acquire(a)) if a.wait) {
                            locksmith_core::metrics::wakeup(shared.connector.scheme());
                        }
                        p.sent = t.tx.send(m.clone()).is_ok();
                    }
                }
                st.tx = Some(t.tx.clone());
                tracing::info!(session = shared.session, "session resumed on a new stream");
                return Some(t);
            }
            // A refused secret cannot become right by retrying: the session is not ours to
            // resume (a server from before resume secrets, or a restored session without one).
            Err(Error::SessionExpired | Error::Auth { .. }) => {
                let mut st = shared.state();
                st.expired = true;
                fail_all(&mut st, || Error::SessionExpired);
                return None;
            }
            Err(e) => tracing::debug!(error = %e, "resume failed; retrying"),
        }
    }
}

fn dispatch(shared: &Shared, m: ServerMessage) {
    let Some(body) = m.body else { return };
    let mut st = shared.state();
    if m.id == 0 {
        if let Out::Error(e) = &body {
            if e.code == Code::SessionExpired as i32 {
                st.expired = true;
                fail_all(&mut st, || Error::SessionExpired);
            }
        }
        return;
    }
    if let Some(p) = st.pending.remove(&m.id) {
        let out = match body {
            Out::Error(e) => Err(server_error(&shared.connector.describe(), &e)),
            other => Ok(other),
        };
        let _ = p.reply.send(out);
        return;
    }
    match body {
        Out::Granted(g) => {
            // The entry stays: the re-ask after a resume may answer with this same grant again
            // (released twice: the second release changes nothing).
            if let Some((name, owner)) = st.abandoned.get(&m.id).cloned() {
                shared.release_unwanted(&mut st, name, owner, g.token);
            }
        }
        Out::Cancelled(_) => {
            // Every answer about the acquisition sent before the Cancel was handled has arrived
            // by now (one stream), and none comes after it.
            if let Some(acquire) = st.cancels.remove(&m.id) {
                st.abandoned.remove(&acquire);
            }
        }
        // Busy or an error for an abandoned acquisition, answers to calls nobody waits for.
        _ => {}
    }
}

#[async_trait]
impl Session for StreamSession {
    fn id(&self) -> String {
        format!("{:x}", self.shared.session)
    }

    fn lease(&self) -> Duration {
        self.shared.lease
    }

    fn lease_started(&self) -> Option<tokio::time::Instant> {
        Some(self.shared.lease_started)
    }

    async fn keep_alive(&self) -> Result<KeepAlive> {
        match self.call(In::KeepAlive(locksmith_proto::KeepAlive {}), false, None).await? {
            Out::KeepAlive(_) => Ok(KeepAlive::default()),
            other => Err(Error::Protocol(format!("unexpected answer to keep-alive: {other:?}"))),
        }
    }

    async fn acquire(&self, req: AcquireRequest) -> Result<Acquired> {
        let lock_delay_ms = req.lock_delay.map(millis).unwrap_or(0);
        let key = (req.name.as_str().to_string(), req.owner.clone());
        let (shared, permits) = req.mode.to_wire();
        let body = In::Acquire(locksmith_proto::Acquire {
            name: req.name.as_str().to_string(),
            owner: req.owner,
            wait: req.wait,
            lock_delay_ms,
            shared,
            permits,
            value: req.value.unwrap_or_default(),
        });
        match self.call(body, true, Some(key)).await? {
            Out::Granted(g) => {
                // One pushed message wakes exactly this waiter: the herd-freedom the bench checks.
                if g.queued {
                    locksmith_core::metrics::wakeup(self.shared.connector.scheme());
                }
                Ok(Acquired::Granted { token: g.token })
            }
            Out::Busy(_) => Ok(Acquired::Busy),
            other => Err(Error::Protocol(format!("unexpected answer to acquire: {other:?}"))),
        }
    }

    async fn release(&self, name: &LockName, owner: &str, token: u64) -> Result<bool> {
        let body =
            In::Release(locksmith_proto::Release { name: name.as_str().to_string(), owner: owner.to_string(), token });
        match self.call(body, true, None).await? {
            Out::Released(r) => Ok(r.was_held),
            other => Err(Error::Protocol(format!("unexpected answer to release: {other:?}"))),
        }
    }

    async fn close(&self) -> Result<()> {
        {
            let id = self.shared.id();
            let mut st = self.shared.state();
            st.closed = true;
            if let Some(tx) = st.tx.take() {
                let _ = tx.send(ClientMessage { id, body: Some(In::Close(locksmith_proto::Close {})) });
            }
            fail_all(&mut st, || Error::SessionExpired);
        }
        // A reconnect loop between attempts stops at once (see `reconnect`).
        self.shared.closing.notify_one();
        // The server ends our stream once it has handled `Close`; wait for that, so a process
        // that exits right after closing leaves nothing behind (callers bound this wait).
        let mut done = self.shared.done.subscribe();
        let _ = done.wait_for(|d| *d).await;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refusal(code: Code, message: &str) -> Error {
        server_error("locksmith://h:7531", &locksmith_proto::Error { code: code as i32, message: message.into() })
    }

    /// A refusal's kind is said once, and a refused permission is not called an authentication
    /// failure.
    #[test]
    fn refusals_say_their_kind_once() {
        assert_eq!(refusal(Code::InvalidArgument, "invalid argument: ttl").to_string(), "invalid argument: ttl");
        assert_eq!(
            refusal(Code::LimitExceeded, "limit exceeded: 10 waiters").to_string(),
            "limit exceeded: 10 waiters"
        );
        let denied = refusal(Code::PermissionDenied, "permission denied: ops may not lock \"x\"");
        assert_eq!(denied.to_string(), "backend locksmith://h:7531: permission denied: ops may not lock \"x\"");
    }
}
