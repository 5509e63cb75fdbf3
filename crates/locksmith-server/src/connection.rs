//! One session stream, whatever carries it (gRPC or an in-process channel): the first message
//! opens or resumes a session, the rest are forwarded in order. Closing the stream does not end
//! the session; its lease does (or an explicit `Close`).
//!
//! The stream is ended early, with a reason its transport can report (see [`StreamEnd`]), when
//! its first message does not come in time, when a message cannot be decoded, and when its
//! outbox overflows because the client does not read; the session lives on in every case.

use std::net::SocketAddr;
use std::time::Duration;

use futures_util::{Stream, StreamExt};
use locksmith_proto::ClientMessage;
use tokio::sync::oneshot;

use crate::auth::Principal;
use crate::outbox::Outbox;
use crate::outbox::{OutboxWatch, StreamEnd};
use crate::pb_impl::{self, Invalid, Reply, Request};
use crate::service::{Command, Service};
use crate::telemetry::{self, Limit};

/// Serves one session stream until it ends. `out` is usually an unbounded sender (`memory://`)
/// or a bounded [`Outbox`]. The first message may take as long as it takes: an in-process
/// client is not a stranger holding a stream open (the gRPC transport bounds it).
///
/// # Cancel safety
/// Cancel safe: dropping it is like the stream breaking; the session lives on until its lease
/// runs out or the client resumes it.
pub async fn serve_stream<S, E>(service: Service, inbound: S, out: impl Into<Outbox>)
where
    S: Stream<Item = Result<ClientMessage, E>> + Unpin,
    E: std::fmt::Display,
{
    // What an error of an unknown transport means is unknown: it ends the stream, as a break.
    let inbound = inbound.map(|r| r.map_err(|e| InboundError::Broken(e.to_string())));
    serve_stream_as(service, inbound, out.into(), Caller::default(), None).await;
}

/// Why a transport could not hand over the next message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum InboundError {
    /// The client sent something that is not a message of the protocol: too large, not
    /// protobuf, a string that is not UTF-8. The stream is ended with this reason.
    // Only the gRPC transport (`cluster` feature) meets undecodable input.
    #[cfg_attr(not(feature = "cluster"), allow(dead_code))]
    Invalid(String),
    /// The transport broke (the client went away, the connection was reset).
    Broken(String),
}

/// Who is on the other end of a stream, as its transport knows it.
#[derive(Debug, Clone, Default)]
pub(crate) struct Caller {
    /// The authenticated principal (`None`: no auth policy).
    pub(crate) principal: Option<Principal>,
    /// The client's address and port: its connection.
    pub(crate) peer: Option<SocketAddr>,
    /// The credential to check again whenever the policy is reloaded (`None`: no policy).
    pub(crate) recheck: Option<Recheck>,
}

/// A stream's credential, checked again on every reload of the policy.
#[cfg(feature = "cluster")]
#[derive(Debug, Clone)]
pub(crate) struct Recheck {
    pub(crate) auth: crate::auth::Auth,
    pub(crate) bearer: Option<String>,
    pub(crate) certificate: Option<Vec<u8>>,
}

#[cfg(feature = "cluster")]
impl Recheck {
    /// A watch that changes on every reload of the policy.
    fn changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.auth.changes()
    }

    /// The principal the credential stands for under the policy in force (`None`: revoked).
    fn again(&self) -> Option<Principal> {
        self.auth.authenticate(self.bearer.as_deref(), self.certificate.as_deref())
    }
}

/// Without the `cluster` feature nothing authenticates a stream, so there is nothing to check
/// again: a credential that cannot exist.
#[cfg(not(feature = "cluster"))]
#[derive(Debug, Clone)]
pub(crate) enum Recheck {}

#[cfg(not(feature = "cluster"))]
impl Recheck {
    fn changes(&self) -> tokio::sync::watch::Receiver<u64> {
        match *self {}
    }

    fn again(&self) -> Option<Principal> {
        match *self {}
    }
}

/// Resolves when the policy was reloaded; never without a policy.
async fn reloaded(changes: &mut Option<tokio::sync::watch::Receiver<u64>>) {
    if let Some(rx) = changes {
        if rx.changed().await.is_ok() {
            return;
        }
    }
    std::future::pending().await
}

/// [`serve_stream`] for a `caller` the transport knows: with a principal the session is bound
/// to it (only it can resume the session) and every acquire is checked against its rights. The
/// first message must arrive within `open_timeout` (`None`: no limit).
///
/// # Cancel safety
/// As [`serve_stream`].
pub(crate) async fn serve_stream_as<S>(
    service: Service,
    mut inbound: S,
    out: Outbox,
    mut caller: Caller,
    open_timeout: Option<Duration>,
) where
    S: Stream<Item = Result<ClientMessage, InboundError>> + Unpin,
{
    let conn = service.new_conn_id();
    // Only the service holds the outbox once the session is open: its stream ends when the
    // service lets go of it (a `Close`, an expiry, a takeover), not when this task does.
    let watch = out.watch();
    let first = match open_timeout {
        Some(limit) => tokio::time::timeout(limit, inbound.next()).await.map_err(|_| limit),
        None => Ok(inbound.next().await),
    };
    let first = match first {
        Ok(Some(Ok(first))) => first,
        Ok(Some(Err(e))) => return ended(&watch, None, e),
        Ok(None) => return,
        Err(limit) => {
            telemetry::limit_hit(Limit::OpenTimeout);
            tracing::debug!(peer = ?caller.peer, "session stream sent no open in time; ended");
            return watch.end_with(StreamEnd::NoOpen(limit));
        }
    };
    let (id, open) = pb_impl::decode_open(first);
    let open = match open {
        Ok(mut open) => {
            open.principal = caller.principal.as_ref().map(|p| p.name.clone());
            open.peer = caller.peer;
            open
        }
        Err(e) => {
            if let Some(m) = Reply::Invalid(e).into_message(id) {
                out.deliver(m);
            }
            return;
        }
    };
    let (reply, opened) = oneshot::channel();
    if !service.send(Command::Open { conn, id, open, out, reply }).await {
        return watch.end_with(StreamEnd::Stopped);
    }
    let Ok(Some(session)) = opened.await else { return };
    let mut changes = caller.recheck.as_ref().map(Recheck::changes);
    // One wait for an overflow across all messages: made anew for each, it would join and
    // leave the outbox's waiter list (a lock each way) per message.
    let overflowed = watch.overflowed();
    tokio::pin!(overflowed);
    loop {
        let next = tokio::select! {
            biased;
            end = &mut overflowed => {
                let principal = caller.principal.as_ref().map_or("-", |p| p.name.as_str());
                tracing::warn!(session, principal, peer = ?caller.peer, "{end}");
                break;
            }
            () = reloaded(&mut changes) => {
                let Some(r) = &caller.recheck else { continue };
                let now = r.again();
                let was = caller.principal.as_ref().map(|p| p.name.as_str());
                if now.is_some() && now.as_ref().map(|p| p.name.as_str()) == was {
                    // Still known: its rights as the reloaded policy says.
                    caller.principal = now;
                    continue;
                }
                tracing::warn!(session, principal = was.unwrap_or("-"), peer = ?caller.peer,
                    "credential revoked by the reloaded policy: session closed, its holds released");
                watch.end_with(StreamEnd::Revoked);
                let close = Command::Request { session, conn, id: 0, request: Ok(Request::Close) };
                let _ = service.send(close).await;
                return;
            }
            next = inbound.next() => next,
        };
        match next {
            Some(Ok(msg)) => {
                // Decoded and validated here, on this stream's task: the service task gets
                // typed requests and spends its time on the lock logic.
                let (id, mut request) = pb_impl::decode_request(msg);
                if let (Some(p), Ok(Request::Acquire { name, .. })) = (&caller.principal, &request) {
                    if !p.may_lock(name.as_str()) {
                        request = Err(Invalid::Forbidden(format!("{} may not lock {:?}", p.name, name.as_str())));
                    }
                }
                if !service.send(Command::Request { session, conn, id, request }).await {
                    return watch.end_with(StreamEnd::Stopped);
                }
            }
            Some(Err(e)) => {
                ended(&watch, Some(session), e);
                break;
            }
            None => break,
        }
    }
    // The inbound half is dropped here: a client that does not read is not read either.
    service.send(Command::Detach { session, conn }).await;
}

/// Ends the stream on an error of its transport; a client that sent something invalid is told
/// what.
fn ended(watch: &OutboxWatch, session: Option<u64>, e: InboundError) {
    match e {
        InboundError::Broken(e) => tracing::debug!(session, error = %e, "session stream broke"),
        InboundError::Invalid(why) => {
            telemetry::invalid_message();
            tracing::debug!(session, error = %why, "session stream sent an invalid message; ended");
            watch.end_with(StreamEnd::Invalid(why));
        }
    }
}

#[cfg(test)]
mod tests {
    use futures_util::StreamExt;
    use locksmith_proto::client_message::Body as In;
    use locksmith_proto::server_message::Body as Out;
    use locksmith_proto::ServerMessage;
    use tokio::sync::mpsc;
    use tokio_stream::wrappers::UnboundedReceiverStream;

    use super::*;
    use crate::machine::Limits;
    use crate::outbox::OutboxStream;

    type Inbound = mpsc::UnboundedSender<Result<ClientMessage, InboundError>>;

    /// A bounded stream served on its own task: the client's sending side and the stream's
    /// receiving side.
    fn stream(service: &Service, open_timeout: Option<Duration>) -> (Inbound, OutboxStream) {
        let (tx, rx) = mpsc::unbounded_channel();
        let (out, stream) = Outbox::bounded(16);
        let serve =
            serve_stream_as(service.clone(), UnboundedReceiverStream::new(rx), out, Caller::default(), open_timeout);
        tokio::spawn(serve);
        (tx, stream)
    }

    fn open() -> ClientMessage {
        ClientMessage { id: 1, body: Some(In::Open(locksmith_proto::Open { ttl_ms: 10_000, ..Default::default() })) }
    }

    async fn next(s: &mut OutboxStream) -> Option<Result<ServerMessage, StreamEnd>> {
        tokio::time::timeout(Duration::from_secs(5), s.next()).await.expect("the stream neither spoke nor ended")
    }

    /// After `close` the stream ends although the client still has its sending half open: the
    /// connection task does not hold the stream open (it once did, and clients waited 10 s).
    #[tokio::test]
    async fn a_closed_session_ends_its_stream_while_the_client_still_sends() {
        let service = Service::start_in_memory(Limits::default());
        let (tx, mut s) = stream(&service, None);
        tx.send(Ok(open())).unwrap();
        assert!(matches!(next(&mut s).await, Some(Ok(m)) if matches!(m.body, Some(Out::Opened(_)))));
        tx.send(Ok(ClientMessage { id: 2, body: Some(In::Close(locksmith_proto::Close {})) })).unwrap();
        assert!(next(&mut s).await.is_none());
    }

    /// A message the transport could not decode ends the stream with its reason, after the
    /// answers already queued; the session is detached, not closed.
    #[tokio::test]
    async fn an_undecodable_message_ends_the_stream_with_its_reason() {
        let service = Service::start_in_memory(Limits::default());
        let (tx, mut s) = stream(&service, None);
        tx.send(Ok(open())).unwrap();
        tx.send(Ok(ClientMessage { id: 2, body: Some(In::KeepAlive(locksmith_proto::KeepAlive {})) })).unwrap();
        tx.send(Err(InboundError::Invalid("not UTF-8".into()))).unwrap();
        assert!(matches!(next(&mut s).await, Some(Ok(m)) if m.id == 1));
        assert!(matches!(next(&mut s).await, Some(Ok(m)) if m.id == 2));
        assert_eq!(next(&mut s).await, Some(Err(StreamEnd::Invalid("not UTF-8".into()))));
        assert!(next(&mut s).await.is_none());

        // A transport that broke is nobody's fault: the stream just ends.
        let (tx, mut s) = stream(&service, None);
        tx.send(Ok(open())).unwrap();
        tx.send(Err(InboundError::Broken("reset".into()))).unwrap();
        assert!(matches!(next(&mut s).await, Some(Ok(_))));
        assert!(next(&mut s).await.is_none());
    }

    /// A lease runs out on time with no request arriving, also when a later session's shorter
    /// lease moved the service's next deadline earlier: its waiter is granted by the timer.
    #[tokio::test(start_paused = true)]
    async fn a_lease_runs_out_on_time_without_any_request() {
        let service = Service::start_in_memory(Limits::default());
        let open_for = |tx: &Inbound, ttl_ms: u64| {
            let open = locksmith_proto::Open { ttl_ms, ..Default::default() };
            tx.send(Ok(ClientMessage { id: 1, body: Some(In::Open(open)) })).unwrap();
        };
        let acquire = |tx: &Inbound, owner: &str| {
            let a =
                locksmith_proto::Acquire { name: "x".into(), owner: owner.into(), wait: true, ..Default::default() };
            tx.send(Ok(ClientMessage { id: 2, body: Some(In::Acquire(a)) })).unwrap();
        };
        let (waiter, mut waiter_out) = stream(&service, None);
        open_for(&waiter, 60_000);
        assert!(matches!(next(&mut waiter_out).await, Some(Ok(m)) if matches!(m.body, Some(Out::Opened(_)))));
        let (holder, mut holder_out) = stream(&service, None);
        open_for(&holder, 2_000);
        assert!(matches!(next(&mut holder_out).await, Some(Ok(m)) if matches!(m.body, Some(Out::Opened(_)))));
        acquire(&holder, "h");
        assert!(matches!(next(&mut holder_out).await, Some(Ok(m)) if matches!(m.body, Some(Out::Granted(_)))));
        acquire(&waiter, "w");

        tokio::time::sleep(Duration::from_millis(1_900)).await;
        assert!(
            tokio::time::timeout(Duration::ZERO, waiter_out.next()).await.is_err(),
            "granted before the lease ran out"
        );
        let granted = tokio::time::timeout(Duration::from_millis(200), waiter_out.next()).await;
        assert!(
            matches!(granted, Ok(Some(Ok(ref m))) if m.id == 2 && matches!(m.body, Some(Out::Granted(ref g)) if g.queued)),
            "{granted:?}"
        );
    }

    /// Without `open` in time the stream ends with [`StreamEnd::NoOpen`]; without a limit
    /// (in-process transports) it waits.
    #[tokio::test(start_paused = true)]
    async fn a_stream_without_open_ends_after_the_open_timeout_if_there_is_one() {
        let service = Service::start_in_memory(Limits::default());
        let (_tx, mut s) = stream(&service, Some(Duration::from_secs(10)));
        assert_eq!(s.next().await, Some(Err(StreamEnd::NoOpen(Duration::from_secs(10)))));

        let (_tx, mut s) = stream(&service, None);
        assert!(tokio::time::timeout(Duration::from_secs(3600), s.next()).await.is_err());
    }
}
