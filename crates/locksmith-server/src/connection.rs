//! One session stream, whatever carries it (gRPC or an in-process channel): the first message
//! opens or resumes a session, the rest are forwarded in order. Closing the stream does not end
//! the session; its lease does (or an explicit `Close`).
//!
//! The stream is ended early, with a reason its transport can report (see [`StreamEnd`]), when
//! its first message does not come in time, when a message cannot be decoded, and when its
//! outbox overflows because the client does not read; the session lives on in every case.

use std::net::IpAddr;
use std::time::Duration;

use futures_util::{Stream, StreamExt};
use locksmith_proto::ClientMessage;
use tokio::sync::oneshot;

use crate::auth::Principal;
use crate::outbox::{OutboxWatch, StreamEnd};
use crate::pb_impl::{self, Invalid, Reply, Request};
use crate::service::{Command, Outbox, Service};
use crate::telemetry::{self, Limit};

/// How long a stream may take to send its first message (`open`) by default.
pub const DEFAULT_OPEN_TIMEOUT: Duration = Duration::from_secs(10);

/// Serves one session stream until it ends. `out` is usually an unbounded sender (`memory://`)
/// or a bounded [`Outbox`].
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
    serve_stream_as(service, inbound, out.into(), Caller::default(), DEFAULT_OPEN_TIMEOUT).await;
}

/// Why a transport could not hand over the next message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum InboundError {
    /// The client sent something that is not a message of the protocol: too large, not
    /// protobuf, a string that is not UTF-8. The stream is ended with this reason.
    Invalid(String),
    /// The transport broke (the client went away, the connection was reset).
    Broken(String),
}

/// Who is on the other end of a stream, as its transport knows it.
#[derive(Debug, Clone, Default)]
pub(crate) struct Caller {
    /// The authenticated principal (`None`: no auth policy).
    pub(crate) principal: Option<Principal>,
    /// The client's address.
    pub(crate) peer: Option<IpAddr>,
}

/// [`serve_stream`] for a `caller` the transport knows: with a principal the session is bound
/// to it (only it can resume the session) and every acquire is checked against its rights. The
/// first message must arrive within `open_timeout`.
///
/// # Cancel safety
/// As [`serve_stream`].
pub(crate) async fn serve_stream_as<S>(
    service: Service,
    mut inbound: S,
    out: Outbox,
    caller: Caller,
    open_timeout: Duration,
) where
    S: Stream<Item = Result<ClientMessage, InboundError>> + Unpin,
{
    let conn = service.new_conn_id();
    // Only the service holds the outbox once the session is open: its stream ends when the
    // service lets go of it (a `Close`, an expiry, a takeover), not when this task does.
    let watch = out.watch();
    let first = match tokio::time::timeout(open_timeout, inbound.next()).await {
        Ok(Some(Ok(first))) => first,
        Ok(Some(Err(e))) => return ended(&watch, None, e),
        Ok(None) => return,
        Err(_) => {
            telemetry::limit_hit(Limit::OpenTimeout);
            tracing::debug!(peer = ?caller.peer, "session stream sent no open in time; ended");
            return watch.end_with(StreamEnd::NoOpen(open_timeout));
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
    if !service.send(Command::Open { conn, id, open, out, reply }) {
        return watch.end_with(StreamEnd::Stopped);
    }
    let Ok(Some(session)) = opened.await else { return };
    loop {
        let next = tokio::select! {
            biased;
            end = watch.overflowed() => {
                let principal = caller.principal.as_ref().map_or("-", |p| p.name.as_str());
                tracing::warn!(session, principal, peer = ?caller.peer, "{end}");
                break;
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
                if !service.send(Command::Request { session, conn, id, request }) {
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
    service.send(Command::Detach { session, conn });
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
