//! The gRPC adapter: the `Locksmith` service over tonic, forwarding to [`Service`].

use std::pin::Pin;

use futures_util::{Stream, StreamExt};
use locksmith_proto::locksmith_server::{Locksmith, LocksmithServer};
use locksmith_proto::{ClientMessage, ServerMessage, StatusRequest, StatusResponse};
use tokio_stream::wrappers::UnboundedReceiverStream;
use tonic::{Request, Response, Status, Streaming};

use crate::connection::serve_stream;
use crate::pb_impl;
use crate::service::Service;

/// The tonic service.
#[derive(Debug, Clone)]
pub struct Grpc {
    service: Service,
}

impl Grpc {
    /// Wraps `service` as a tonic server ready to be added to a router.
    pub fn server(service: Service) -> LocksmithServer<Self> {
        LocksmithServer::new(Self { service }).max_decoding_message_size(64 * 1024)
    }
}

type Outbound = Pin<Box<dyn Stream<Item = Result<ServerMessage, Status>> + Send>>;

#[tonic::async_trait]
impl Locksmith for Grpc {
    type SessionStream = Outbound;

    /// Serves one session stream on its own task.
    ///
    /// # Cancel safety
    /// Cancel safe: it awaits nothing; the stream is served by a spawned task until it ends.
    async fn session(&self, request: Request<Streaming<ClientMessage>>) -> Result<Response<Outbound>, Status> {
        let inbound = request.into_inner();
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(serve_stream(self.service.clone(), inbound, tx));
        let out = UnboundedReceiverStream::new(rx).map(Ok);
        Ok(Response::new(Box::pin(out)))
    }

    /// One lock's state, or every lock's.
    ///
    /// # Cancel safety
    /// Cancel safe: read only.
    async fn status(&self, request: Request<StatusRequest>) -> Result<Response<StatusResponse>, Status> {
        let name = pb_impl::status_name(request.into_inner()).map_err(|e| Status::invalid_argument(e.to_string()))?;
        // The client's error text, as before there was a server error type.
        let views = self
            .service
            .status(name)
            .await
            .map_err(|e| Status::unavailable(locksmith_core::Error::from(e).to_string()))?;
        let locks = views.into_iter().map(Into::into).collect();
        Ok(Response::new(StatusResponse { locks }))
    }
}
