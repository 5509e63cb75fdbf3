//! One session stream, whatever carries it (gRPC or an in-process channel): the first message
//! opens or resumes a session, the rest are forwarded in order. Closing the stream does not end
//! the session; its lease does (or an explicit `Close`).

use futures_util::{Stream, StreamExt};
use locksmith_proto::ClientMessage;
use tokio::sync::oneshot;

use crate::auth::Principal;
use crate::pb_impl::{self, Invalid, Reply, Request};
use crate::service::{Command, Outbox, Service};

/// Serves one session stream until it ends.
///
/// # Cancel safety
/// Cancel safe: dropping it is like the stream breaking; the session lives on until its lease
/// runs out or the client resumes it.
pub async fn serve_stream<S, E>(service: Service, inbound: S, out: Outbox)
where
    S: Stream<Item = Result<ClientMessage, E>> + Unpin,
    E: std::fmt::Display,
{
    serve_stream_as(service, inbound, out, None).await;
}

/// [`serve_stream`] for an authenticated `principal` (`None`: no auth policy): the session is
/// bound to it (only it can resume the session) and every acquire is checked against its rights.
///
/// # Cancel safety
/// As [`serve_stream`].
pub(crate) async fn serve_stream_as<S, E>(service: Service, mut inbound: S, out: Outbox, principal: Option<Principal>)
where
    S: Stream<Item = Result<ClientMessage, E>> + Unpin,
    E: std::fmt::Display,
{
    let conn = service.new_conn_id();
    let Some(Ok(first)) = inbound.next().await else { return };
    let (id, open) = pb_impl::decode_open(first);
    let open = match open {
        Ok(mut open) => {
            open.principal = principal.as_ref().map(|p| p.name.clone());
            open
        }
        Err(e) => {
            if let Some(m) = Reply::Invalid(e).into_message(id) {
                let _ = out.send(m);
            }
            return;
        }
    };
    let (reply, opened) = oneshot::channel();
    if !service.send(Command::Open { conn, id, open, out, reply }) {
        return;
    }
    let Ok(Some(session)) = opened.await else { return };
    while let Some(next) = inbound.next().await {
        match next {
            Ok(msg) => {
                // Decoded and validated here, on this stream's task: the service task gets
                // typed requests and spends its time on the lock logic.
                let (id, mut request) = pb_impl::decode_request(msg);
                if let (Some(p), Ok(Request::Acquire { name, .. })) = (&principal, &request) {
                    if !p.may_lock(name.as_str()) {
                        request = Err(Invalid::Forbidden(format!("{} may not lock {:?}", p.name, name.as_str())));
                    }
                }
                if !service.send(Command::Request { session, conn, id, request }) {
                    return;
                }
            }
            Err(e) => {
                tracing::debug!(session, error = %e, "session stream broke");
                break;
            }
        }
    }
    service.send(Command::Detach { session, conn });
}
