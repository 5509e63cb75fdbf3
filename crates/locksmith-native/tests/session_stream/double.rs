//! The transport double: a [`Connector`] to a real lock service running in this process
//! (`locksmith_server::Service`, the one `memory://` runs), with a relay on each stream that a
//! test can break, refuse, and hold back, and that logs every message it carries.
//!
//! ```text
//!   StreamSession ──tx──▶ [up relay]   ──▶ serve_stream ──▶ Service (machine)
//!                 ◀──rx── [down relay] ◀── outbox      ◀──┘
//! ```
//!
//! - [`Link::break_streams`] ends every live stream of the link the way a reset connection
//!   does: the session reads an error and then the end; what the relays had in hand or queued
//!   is lost in both directions, and the server sees its inbound end (and detaches the stream).
//! - [`Link::refuse`] makes `connect` fail with `Unavailable` until it is lifted.
//! - [`Link::hold_answers`] / [`Link::hold_requests`] stop the down / up relays of every stream
//!   of the link (also streams opened later) before they deliver the next message; lifting the
//!   hold delivers what waited, in order.
//!
//! Several links share one server, so a test gives each session its own link and faults only
//! the one under test. Nothing here sleeps: tests wait for logged events ([`Link::wait`]) or
//! for the server's state ([`Server::wait_status`]), and time only passes when a test lets it.

use std::convert::Infallible;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use futures_util::StreamExt;
use locksmith_core::{Backend, Error, HolderStatus, LockName, LockStatus, Result, Session};
use locksmith_native::testing::{open_session, Connector, Transport};
use locksmith_proto::client_message::Body as In;
use locksmith_proto::server_message::Body as Out;
use locksmith_proto::{ClientMessage, ServerMessage};
use locksmith_server::machine::{Limits, LockView};
use locksmith_server::Service;
use tokio::sync::{mpsc, watch};
use tokio::task::AbortHandle;
use tokio_stream::wrappers::UnboundedReceiverStream;

/// One in-process lock service.
#[derive(Debug, Clone)]
pub struct Server {
    service: Service,
}

impl Server {
    /// A fresh service on the current runtime (and its clock: paused in most tests).
    pub fn start() -> Self {
        Self { service: Service::start_in_memory(Limits::default()) }
    }

    /// A new link (connector) to this server, with its own faults and log.
    pub fn link(&self) -> Link {
        Link(Arc::new(LinkInner {
            service: self.service.clone(),
            refuse: AtomicBool::new(false),
            hold_answers: watch::channel(false).0,
            hold_requests: watch::channel(false).0,
            state: Mutex::new(LinkState::default()),
            changed: watch::channel(0).0,
        }))
    }

    /// The server's view of `name`, `None` if it does not know the lock.
    pub async fn status(&self, name: &str) -> Option<LockView> {
        let name = LockName::new(name).expect("valid lock name");
        self.service.status(Some(name)).await.expect("service running").pop()
    }

    /// Waits until the server's view of `name` satisfies `pred`, without letting time pass:
    /// requests reach the service through the stream's task, so a state change may take a few
    /// scheduler turns after a relay delivered it.
    pub async fn wait_status(
        &self,
        name: &str,
        what: &str,
        pred: impl Fn(Option<&LockView>) -> bool,
    ) -> Option<LockView> {
        let mut last = None;
        for _ in 0..10_000 {
            last = self.status(name).await;
            if pred(last.as_ref()) {
                return last;
            }
            tokio::task::yield_now().await;
        }
        panic!("server never reached {what} on {name:?}; last status {last:?}");
    }

    /// Waiters queued on `name` (0 for an unknown lock).
    pub async fn waiters(&self, name: &str) -> u64 {
        self.status(name).await.map_or(0, |v| v.waiters)
    }

    /// `(session, owner, token)` of `name`'s holder.
    pub async fn holder(&self, name: &str) -> Option<(u64, String, u64)> {
        self.status(name).await.and_then(|v| v.holder).map(|(s, o, t, _)| (s, o, t))
    }

    /// The last token issued for `name` (0 if never granted).
    pub async fn last_token(&self, name: &str) -> u64 {
        self.status(name).await.map_or(0, |v| v.last_token)
    }
}

/// Something a link's relays or `connect` did, in order.
#[derive(Debug, Clone)]
#[allow(dead_code)] // every variant is logged; each test reads the ones it asserts on
pub enum Event {
    /// A `connect` call; `stream` is `None` when it was refused.
    Connect { stream: Option<usize> },
    /// A client message the up relay delivered to the server on `stream`.
    ToServer { stream: usize, msg: ClientMessage },
    /// A server message the down relay took from the server on `stream` (held or not).
    FromServer { stream: usize, msg: ServerMessage },
    /// A server message the down relay delivered to the client on `stream`.
    ToClient { stream: usize, msg: ServerMessage },
    /// `stream` was broken by the test.
    Broken { stream: usize },
}

#[derive(Default)]
struct LinkState {
    log: Vec<Event>,
    streams: usize,
    /// Live streams: number, relays, and a way to push the reset error to the client (weak:
    /// once the server ends a stream, the client must see its end).
    live: Vec<(usize, AbortHandle, AbortHandle, mpsc::WeakUnboundedSender<Result<ServerMessage>>)>,
}

struct LinkInner {
    service: Service,
    refuse: AtomicBool,
    hold_answers: watch::Sender<bool>,
    hold_requests: watch::Sender<bool>,
    state: Mutex<LinkState>,
    /// Bumped after every logged event, so waiters re-check their condition.
    changed: watch::Sender<u64>,
}

impl LinkInner {
    fn state(&self) -> MutexGuard<'_, LinkState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn log(&self, e: Event) {
        self.state().log.push(e);
        self.changed.send_modify(|n| *n += 1);
    }
}

/// A connector with faults; cheap to clone (clones share faults and log).
#[derive(Clone)]
pub struct Link(Arc<LinkInner>);

impl std::fmt::Debug for Link {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Link").field("streams", &self.0.state().streams).finish_non_exhaustive()
    }
}

impl Link {
    /// Opens a session over this link.
    pub async fn open(&self, ttl: Duration) -> Box<dyn Session> {
        open_session(Arc::new(self.clone()), ttl).await.expect("session opens")
    }

    /// A backend whose sessions use this link, for tests through the engine (`Client`).
    pub fn backend(&self) -> Arc<dyn Backend> {
        Arc::new(LinkBackend(self.clone()))
    }

    /// Breaks every live stream (see the module doc).
    pub fn break_streams(&self) {
        let live = std::mem::take(&mut self.0.state().live);
        for (stream, up, down, to_client) in live {
            if let Some(to_client) = to_client.upgrade() {
                let _ = to_client.send(Err(Error::Unavailable {
                    backend: "test double".into(),
                    message: "stream reset by the test".into(),
                }));
            }
            up.abort();
            down.abort();
            self.0.log(Event::Broken { stream });
        }
    }

    /// Refuses (`true`) or accepts new connections.
    pub fn refuse(&self, refuse: bool) {
        self.0.refuse.store(refuse, Ordering::SeqCst);
    }

    /// Holds back (`true`) or delivers server messages, on every stream of this link.
    pub fn hold_answers(&self, hold: bool) {
        self.0.hold_answers.send_replace(hold);
    }

    /// Holds back (`true`) or delivers client messages, on every stream of this link.
    pub fn hold_requests(&self, hold: bool) {
        self.0.hold_requests.send_replace(hold);
    }

    /// Everything logged so far.
    pub fn log(&self) -> Vec<Event> {
        self.0.state().log.clone()
    }

    /// Streams opened so far (the last one's number).
    pub fn streams(&self) -> usize {
        self.0.state().streams
    }

    /// `connect` calls so far, refused ones included.
    pub fn connects(&self) -> usize {
        self.log().iter().filter(|e| matches!(e, Event::Connect { .. })).count()
    }

    /// Waits, without letting time pass, until the log satisfies `pred`; returns the log.
    pub async fn wait(&self, what: &str, pred: impl Fn(&[Event]) -> bool) -> Vec<Event> {
        let mut rx = self.0.changed.subscribe();
        loop {
            {
                let st = self.0.state();
                if pred(&st.log) {
                    return st.log.clone();
                }
            }
            // Bounded in virtual time, so a missing event fails the test instead of hanging it.
            match tokio::time::timeout(Duration::from_secs(600), rx.changed()).await {
                Ok(Ok(())) => {}
                _ => panic!("never saw {what}; log: {:#?}", self.log()),
            }
        }
    }

    /// Waits until the client has received `opened` on stream `stream`: the session is (re)open
    /// there.
    pub async fn wait_opened(&self, stream: usize) {
        self.wait(&format!("opened on stream {stream}"), |log| {
            log.iter().any(|e| {
                matches!(e, Event::ToClient { stream: s, msg: ServerMessage { body: Some(Out::Opened(_)), .. } } if *s == stream)
            })
        })
        .await;
    }

    /// Waits until the server has sent (possibly held) a message with id `id` on `stream`
    /// whose body satisfies `pred`.
    pub async fn wait_from_server(&self, stream: usize, id: u64, pred: impl Fn(&Out) -> bool) -> Out {
        let log = self
            .wait(&format!("server message {id} on stream {stream}"), |log| {
                log.iter().any(|e| matches!(e, Event::FromServer { stream: s, msg } if *s == stream && msg.id == id && msg.body.as_ref().is_some_and(&pred)))
            })
            .await;
        log.into_iter()
            .find_map(|e| match e {
                Event::FromServer { stream: s, msg } if s == stream && msg.id == id => msg.body.filter(&pred),
                _ => None,
            })
            .expect("found above")
    }

    /// Client messages delivered to the server, with their stream.
    pub fn to_server(&self) -> Vec<(usize, ClientMessage)> {
        self.log()
            .into_iter()
            .filter_map(|e| match e {
                Event::ToServer { stream, msg } => Some((stream, msg)),
                _ => None,
            })
            .collect()
    }

    /// Server messages delivered to the client, with their stream.
    pub fn to_client(&self) -> Vec<(usize, ServerMessage)> {
        self.log()
            .into_iter()
            .filter_map(|e| match e {
                Event::ToClient { stream, msg } => Some((stream, msg)),
                _ => None,
            })
            .collect()
    }

    /// The id of the last acquire of `name` the client sent that reached the server.
    pub fn acquire_id(&self, name: &str) -> Option<u64> {
        self.to_server().into_iter().rev().find_map(|(_, m)| match m.body {
            Some(In::Acquire(a)) if a.name == name => Some(m.id),
            _ => None,
        })
    }
}

#[async_trait]
impl Connector for Link {
    fn describe(&self) -> String {
        "test-double://".into()
    }

    fn scheme(&self) -> &'static str {
        "memory"
    }

    async fn connect(&self) -> Result<Transport> {
        let inner = &self.0;
        if inner.refuse.load(Ordering::SeqCst) {
            inner.log(Event::Connect { stream: None });
            return Err(Error::Unavailable { backend: self.describe(), message: "connection refused (test)".into() });
        }
        let (client_tx, mut from_client) = mpsc::unbounded_channel::<ClientMessage>();
        let (to_server, server_in) = mpsc::unbounded_channel::<ClientMessage>();
        let (server_out, mut from_server) = mpsc::unbounded_channel::<ServerMessage>();
        let (to_client, client_rx) = mpsc::unbounded_channel::<Result<ServerMessage>>();
        let inbound = UnboundedReceiverStream::new(server_in).map(Ok::<_, Infallible>);
        tokio::spawn(locksmith_server::serve_stream(inner.service.clone(), inbound, server_out));
        let stream = {
            let mut st = inner.state();
            st.streams += 1;
            st.streams
        };
        inner.log(Event::Connect { stream: Some(stream) });

        let link = inner.clone();
        let up = tokio::spawn(async move {
            let mut hold = link.hold_requests.subscribe();
            while let Some(msg) = from_client.recv().await {
                let _ = hold.wait_for(|h| !*h).await;
                link.log(Event::ToServer { stream, msg: msg.clone() });
                if to_server.send(msg).is_err() {
                    return;
                }
            }
        });
        let link = inner.clone();
        let weak = to_client.downgrade();
        let down = tokio::spawn(async move {
            let mut hold = link.hold_answers.subscribe();
            while let Some(msg) = from_server.recv().await {
                link.log(Event::FromServer { stream, msg: msg.clone() });
                let _ = hold.wait_for(|h| !*h).await;
                link.log(Event::ToClient { stream, msg: msg.clone() });
                if to_client.send(Ok(msg)).is_err() {
                    return;
                }
            }
        });
        inner.state().live.push((stream, up.abort_handle(), down.abort_handle(), weak));
        Ok(Transport { tx: client_tx, rx: UnboundedReceiverStream::new(client_rx).boxed() })
    }
}

/// A backend over a link, so tests can go through the engine (`Client`, `Guard`).
#[derive(Debug)]
struct LinkBackend(Link);

#[async_trait]
impl Backend for LinkBackend {
    fn describe(&self) -> String {
        self.0.describe()
    }

    fn scheme(&self) -> &'static str {
        "memory"
    }

    async fn open_session(&self, ttl: Duration) -> Result<Box<dyn Session>> {
        open_session(Arc::new(self.0.clone()), ttl).await
    }

    async fn status(&self, name: Option<&LockName>) -> Result<Vec<LockStatus>> {
        let views = self.0 .0.service.status(name.cloned()).await.map_err(|e| Error::Backend(e.to_string()))?;
        Ok(views
            .into_iter()
            .map(|v| {
                let holder = v.holder.map(|(s, o, t, left)| HolderStatus::new(format!("{s:x}"), o, t, left));
                LockStatus::new(v.name, holder, v.waiters, v.last_token)
            })
            .collect())
    }
}
