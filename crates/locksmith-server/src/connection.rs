//! One session stream, whatever carries it (gRPC or an in-process channel): the first message
//! opens or resumes a session, the rest are forwarded in order. Closing the stream does not end
//! the session; its lease does (or an explicit `Close`).

use std::time::Duration;

use futures_util::{Stream, StreamExt};
use locksmith_proto::client_message::Body as In;
use locksmith_proto::{error::Code, ClientMessage};
use tokio::sync::oneshot;

use crate::service::{error_msg, Command, Outbox, Service};

/// Serves one session stream until it ends.
///
/// # Cancel safety
/// Cancel safe: dropping it is like the stream breaking; the session lives on until its lease
/// runs out or the client resumes it.
pub async fn serve_stream<S, E>(service: Service, mut inbound: S, out: Outbox)
where
    S: Stream<Item = Result<ClientMessage, E>> + Unpin,
    E: std::fmt::Display,
{
    let conn = service.new_conn_id();
    let Some(Ok(first)) = inbound.next().await else { return };
    let Some(In::Open(open)) = first.body else {
        let _ = out.send(error_msg(first.id, Code::InvalidArgument, "the first message must be open"));
        return;
    };
    let (reply, opened) = oneshot::channel();
    let resume = (open.resume_session != 0).then_some(open.resume_session);
    let ttl = Duration::from_millis(open.ttl_ms);
    if !service.send(Command::Open { conn, request: first.id, ttl, resume, out, reply }) {
        return;
    }
    let Ok(Some(session)) = opened.await else { return };
    while let Some(next) = inbound.next().await {
        match next {
            Ok(msg) => {
                if !service.send(Command::Request { session, conn, msg }) {
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
