//! The gRPC adapter: the `Locksmith` service over tonic, forwarding to [`Service`].

use std::pin::Pin;

use futures_util::{Stream, StreamExt};
use locksmith_proto::locksmith_server::{Locksmith, LocksmithServer};
use locksmith_proto::{
    AdminReleaseRequest, AdminReleaseResponse, ClientMessage, RevokedHold, ServerMessage, StatusRequest, StatusResponse,
};
use tonic::{Request, Response, Status, Streaming};

use crate::auth::{Auth, Principal};
use crate::connection::{serve_stream_as, Caller, InboundError, Recheck};
use crate::net_limits::NetLimits;
use crate::outbox::{Outbox, StreamEnd};
use crate::pb_impl::{self, StatusQuery};
use crate::service::Service;

/// Largest message a client may send: far above any valid one (a lock name is at most 256
/// bytes), small enough that a stream cannot make the server buffer much.
pub const MAX_MESSAGE_SIZE: usize = 64 * 1024;

/// The tonic service.
#[derive(Debug, Clone)]
pub struct Grpc {
    service: Service,
    auth: Option<Auth>,
    limits: NetLimits,
}

impl Grpc {
    /// Wraps `service` as a tonic server ready to be added to a router; every client may do
    /// everything.
    pub fn server(service: Service) -> LocksmithServer<Self> {
        Self::server_with_auth(service, None)
    }

    /// The same, with every call authenticated and authorized by `auth` when it is `Some`.
    pub fn server_with_auth(service: Service, auth: Option<Auth>) -> LocksmithServer<Self> {
        Self::server_with(service, auth, NetLimits::default())
    }

    /// The same, with `limits` on every stream (the outbox size, the time to `open`).
    pub fn server_with(service: Service, auth: Option<Auth>, limits: NetLimits) -> LocksmithServer<Self> {
        LocksmithServer::new(Self { service, auth, limits }).max_decoding_message_size(MAX_MESSAGE_SIZE)
    }

    /// `UNAVAILABLE` naming the leader (metadata [`LEADER_HEADER`]) when this node does not
    /// serve clients: a cluster follower. Clients retry at the leader.
    fn serving(&self) -> Result<(), Status> {
        let serving = self.service.serving();
        if serving.serving {
            return Ok(());
        }
        Err(not_serving(serving.leader))
    }

    /// The caller's principal (`None` without an auth policy), or `UNAUTHENTICATED`.
    fn principal<T>(&self, request: &Request<T>) -> Result<Option<Principal>, Status> {
        authenticate(self.auth.as_ref(), request)
    }
}

/// The principal of a call under `auth` (`None` without an auth policy): from its bearer token,
/// or failing that its client certificate; `UNAUTHENTICATED` when neither is known.
pub(crate) fn authenticate<T>(auth: Option<&Auth>, request: &Request<T>) -> Result<Option<Principal>, Status> {
    let Some(auth) = auth else { return Ok(None) };
    let bearer = bearer(request);
    let certs = request.peer_certs();
    let certificate = certs.as_ref().and_then(|c| c.first()).map(|c| c.as_ref());
    match auth.authenticate(bearer, certificate) {
        Some(p) => Ok(Some(p)),
        None if bearer.is_some() => Err(Status::unauthenticated("the bearer token is not known to this server")),
        None => Err(Status::unauthenticated(
            "authentication required: a bearer token (locksmith://…?token_file=FILE or LOCKSMITH_TOKEN_FILE) or a \
             client certificate listed in the server's policy",
        )),
    }
}

/// The bearer token of a call (`authorization: Bearer …`).
fn bearer<T>(request: &Request<T>) -> Option<&str> {
    request
        .metadata()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
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
        let principal = self.principal(&request)?;
        self.serving()?;
        let recheck = self.auth.clone().map(|auth| Recheck {
            auth,
            bearer: bearer(&request).map(str::to_string),
            certificate: request.peer_certs().and_then(|c| c.first().map(|c| c.as_ref().to_vec())),
        });
        let caller = Caller { principal, peer: request.remote_addr(), recheck };
        let inbound = request.into_inner().map(|r| r.map_err(inbound_error));
        let (out, rx) = Outbox::bounded(self.limits.max_queued_messages);
        tokio::spawn(serve_stream_as(self.service.clone(), inbound, out, caller, Some(self.limits.open_timeout)));
        let out = rx.map(|r| r.map_err(end_status));
        Ok(Response::new(Box::pin(out)))
    }

    type ObserveStream = Outbound;

    /// Follows one lock: its state now and after every change of its holders.
    ///
    /// # Cancel safety
    /// Cancel safe: it awaits nothing; the service feeds the stream until the client drops it.
    async fn observe(&self, request: Request<StatusRequest>) -> Result<Response<Outbound>, Status> {
        let principal = self.principal(&request)?;
        self.serving()?;
        // Checked again on every reload of the policy, as a session stream's.
        let recheck = self.auth.clone().map(|auth| Recheck {
            auth,
            bearer: bearer(&request).map(str::to_string),
            certificate: request.peer_certs().and_then(|c| c.first().map(|c| c.as_ref().to_vec())),
        });
        let name = match pb_impl::status_query(request.into_inner()) {
            Ok(StatusQuery::One(name)) => name,
            Ok(_) => return Err(Status::invalid_argument("observe needs a lock name")),
            Err(e) => return Err(Status::invalid_argument(e.to_string())),
        };
        if let Some(p) = &principal {
            if !p.may_observe(name.as_str()) {
                return Err(Status::permission_denied(format!("{} may not observe {:?}", p.name, name.as_str())));
            }
        }
        // Bounded like a session stream: an observer that does not read is cut off.
        let (out, rx) = Outbox::bounded(self.limits.max_queued_messages);
        self.service
            .observe(name.clone(), out)
            .await
            .map_err(|e| Status::unavailable(locksmith_core::Error::from(e).to_string()))?;
        let out = rx.map(|r| r.map_err(end_status));
        match (recheck, principal) {
            (Some(recheck), Some(principal)) => {
                Ok(Response::new(until_revoked(out, revoked(recheck, principal.name, name.as_str().to_string()))))
            }
            _ => Ok(Response::new(Box::pin(out))),
        }
    }

    /// One lock's state, or every lock's.
    ///
    /// # Cancel safety
    /// Cancel safe: read only.
    async fn status(&self, request: Request<StatusRequest>) -> Result<Response<StatusResponse>, Status> {
        let principal = self.principal(&request)?;
        self.serving()?;
        let query = pb_impl::status_query(request.into_inner()).map_err(|e| Status::invalid_argument(e.to_string()))?;
        if let (Some(p), StatusQuery::One(n)) = (&principal, &query) {
            if !p.may_observe(n.as_str()) {
                return Err(Status::permission_denied(format!("{} may not observe {:?}", p.name, n.as_str())));
            }
        }
        // A principal sees only what it may observe.
        let page = self.service.status_page(query, principal).await.map_err(|e| match e {
            crate::ServerError::NotServing { leader } => not_serving(leader),
            // The client's error text, as before there was a server error type.
            e => Status::unavailable(locksmith_core::Error::from(e).to_string()),
        })?;
        Ok(Response::new(page.into()))
    }

    /// An administrator's release (see [`Service::revoke`]): only an admin under a policy.
    ///
    /// # Cancel safety
    /// Not cancel safe: the release may happen although the answer is dropped.
    async fn admin_release(
        &self,
        request: Request<AdminReleaseRequest>,
    ) -> Result<Response<AdminReleaseResponse>, Status> {
        let principal = self.principal(&request)?;
        if let Some(p) = principal.as_ref().filter(|p| !p.is_admin()) {
            return Err(Status::permission_denied(format!(
                "{} may not release another client's lock (only an admin may)",
                p.name
            )));
        }
        self.serving()?;
        let by = principal.map_or_else(|| "-".to_string(), |p| p.name);
        let AdminReleaseRequest { name, session } = request.into_inner();
        let name = crate::machine::LockName::new(name).map_err(|e| Status::invalid_argument(e.to_string()))?;
        let revoked = self.service.revoke(name, session, &by).await.map_err(service_status)?;
        let revoked =
            revoked.into_iter().map(|h| RevokedHold { session: h.session, owner: h.owner, token: h.token }).collect();
        Ok(Response::new(AdminReleaseResponse { revoked }))
    }
}

/// Resolves, on a reload of the policy, when the credential of an observe stream of `name`
/// opened by `principal` no longer authenticates as it (`UNAUTHENTICATED`, as a session stream
/// whose credential was revoked) or may no longer observe `name` (`PERMISSION_DENIED`).
async fn revoked(recheck: Recheck, principal: String, name: String) -> Status {
    let mut changes = recheck.auth.changes();
    loop {
        if changes.changed().await.is_err() {
            // No policy can change any more.
            std::future::pending::<()>().await;
        }
        match recheck.auth.authenticate(recheck.bearer.as_deref(), recheck.certificate.as_deref()) {
            Some(p) if p.name == principal => {
                if !p.may_observe(&name) {
                    tracing::warn!(
                        principal,
                        lock = name,
                        "observe right revoked by the reloaded policy: stream ended"
                    );
                    return Status::permission_denied(format!(
                        "{principal} may no longer observe {name:?} (auth policy reloaded)"
                    ));
                }
            }
            _ => {
                tracing::warn!(
                    principal,
                    lock = name,
                    "credential revoked by the reloaded policy: observe stream ended"
                );
                return Status::unauthenticated("the credential of this stream was revoked (auth policy reloaded)");
            }
        }
    }
}

/// `out` until `revoked` resolves; then its status, and the end. Dropping the stream's
/// receiving end also tells the service to forget the observer at the lock's next change.
fn until_revoked(
    out: impl Stream<Item = Result<ServerMessage, Status>> + Send + 'static,
    revoked: impl std::future::Future<Output = Status> + Send + 'static,
) -> Outbound {
    let state = (Box::pin(out), Some(Box::pin(revoked)));
    Box::pin(futures_util::stream::unfold(state, |(mut out, revoked)| async move {
        let mut revoked = revoked?;
        tokio::select! {
            biased;
            status = &mut revoked => Some((Err(status), (out, None))),
            item = out.next() => item.map(|item| (item, (out, Some(revoked)))),
        }
    }))
}

/// What an error from tonic's inbound stream means. Decoding errors (a message over
/// [`MAX_MESSAGE_SIZE`], bytes that are not a `ClientMessage`, a string that is not UTF-8) are
/// statuses tonic makes itself; a broken transport's status carries the h2 or hyper error as
/// its source.
fn inbound_error(s: Status) -> InboundError {
    if std::error::Error::source(&s).is_some() {
        InboundError::Broken(s.message().to_string())
    } else {
        InboundError::Invalid(s.message().to_string())
    }
}

/// The status a stream the server ended closes with.
fn end_status(end: StreamEnd) -> Status {
    let message = end.to_string();
    match end {
        StreamEnd::NotReading { .. } => Status::resource_exhausted(message),
        StreamEnd::NoOpen(_) => Status::deadline_exceeded(message),
        StreamEnd::Invalid(_) => Status::invalid_argument(message),
        StreamEnd::Revoked => Status::unauthenticated(message),
        _ => Status::unavailable(message),
    }
}

/// The status for a service failure: a node that does not lead names the leader.
fn service_status(e: crate::ServerError) -> Status {
    match e {
        crate::ServerError::NotServing { leader } => not_serving(leader),
        e => Status::unavailable(locksmith_core::Error::from(e).to_string()),
    }
}

/// The metadata key of an `UNAVAILABLE` answer from a cluster node that does not lead: the
/// leader's `host:port`.
pub use locksmith_proto::LEADER_HEADER;

/// `UNAVAILABLE` saying this node does not lead, with the leader's address in [`LEADER_HEADER`]
/// when it is known.
pub(crate) fn not_serving(leader: Option<String>) -> Status {
    let mut status = Status::unavailable(crate::ServerError::NotServing { leader: leader.clone() }.to_string());
    if let Some(value) = leader.and_then(|l| tonic::metadata::MetadataValue::try_from(l).ok()) {
        status.metadata_mut().insert(LEADER_HEADER, value);
    }
    status
}
