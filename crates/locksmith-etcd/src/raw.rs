//! A thin etcd v3 client over the gRPC stubs generated from the project's own
//! `proto/etcd.proto` (compiled by protox: no system `protoc`).
//!
//! It offers exactly what the driver, its tests and `locksmith bench`'s raw-recipe baseline
//! need: ranges, puts, deletes, transactions (nested ones, and compares over key ranges), one-key
//! and prefix watches, and leases. Every call is a plain tonic call on a shared channel; bounding
//! them in time is the caller's business.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use locksmith_etcd::raw::Client;
//!
//! let mut c = Client::connect(&["http://127.0.0.1:2379".to_string()]).await?;
//! let lease = c.lease_grant(10).await?.id;
//! c.put("jobs/nightly/owner", "me", lease).await?;
//! let kvs = c.get_prefix("jobs/").await?.kvs;
//! assert_eq!(kvs.len(), 1);
//! # Ok(()) }
//! ```

use std::future::Future;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::metadata::{Ascii, MetadataValue};
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};
use tonic::{Status, Streaming};

pub use crate::options::{Credentials, EtcdOptions};

/// The generated message types and stubs (package `etcdserverpb`).
#[allow(missing_docs, unreachable_pub, clippy::all, clippy::pedantic)]
pub mod pb {
    tonic::include_proto!("etcdserverpb");
}

use pb::auth_client::AuthClient;
use pb::compare::{CompareResult, CompareTarget, TargetUnion};
use pb::kv_client::KvClient;
use pb::lease_client::LeaseClient;
use pb::range_request::{SortOrder, SortTarget};
use pb::request_op::Request as Op;
use pb::watch_client::WatchClient;
use pb::{
    Compare, DeleteRangeRequest, PutRequest, RangeRequest, RangeResponse, RequestOp, TxnRequest, TxnResponse,
    WatchCreateRequest, WatchRequest, WatchResponse,
};

/// How long connecting to one endpoint may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

/// A connection to an etcd cluster: one gRPC channel over its endpoints, and the auth token
/// when the cluster has authentication on. Cheap to clone (clones share the token).
#[derive(Clone)]
pub struct Client {
    channel: Channel,
    auth: Option<Arc<Auth>>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The token is a secret; the user is not.
        f.debug_struct("Client").field("user", &self.auth.as_ref().map(|a| a.credentials.user())).finish()
    }
}

/// The credentials and the current token (etcd's `simple` tokens expire; JWTs too).
struct Auth {
    credentials: Credentials,
    token: RwLock<Option<MetadataValue<Ascii>>>,
}

/// Whether etcd refused a call because its token is no longer valid (expired, or the server
/// restarted and forgot its simple tokens): authenticating again fixes it.
fn token_expired(s: &Status) -> bool {
    s.message().contains("invalid auth token") || s.message().contains("auth: revision in header is old")
}

impl Client {
    /// Connects to `endpoints` (`http://host:port`). At least one endpoint must accept a
    /// connection now, so an unreachable cluster fails here and fast; with several endpoints
    /// the channel then balances over all of them and reconnects on its own.
    ///
    /// # Errors
    /// The last endpoint's connection error, or an invalid endpoint.
    ///
    /// # Cancel safety
    /// Cancel safe: nothing is left behind.
    pub async fn connect(endpoints: &[String]) -> Result<Self, tonic::transport::Error> {
        let mut list = Vec::with_capacity(endpoints.len());
        for e in endpoints {
            list.push(endpoint(Endpoint::from_shared(e.clone())?));
        }
        Ok(Self { channel: connect_any(list).await?, auth: None })
    }

    /// Connects to `hosts` (`host:port`) with `options`: over TLS (`https://`, the host name
    /// checked against the server's certificate) when `options.tls` is set, and, with
    /// credentials, authenticates at once, so a wrong password is known here.
    ///
    /// # Errors
    /// The connection error ([`ConnectError::Transport`]) or the refused authentication
    /// ([`ConnectError::Status`]).
    ///
    /// # Cancel safety
    /// Cancel safe: nothing is left behind.
    pub async fn connect_with(hosts: &[(String, u16)], options: &EtcdOptions) -> Result<Self, ConnectError> {
        let mut list = Vec::with_capacity(hosts.len());
        for (host, port) in hosts {
            let authority = if host.contains(':') { format!("[{host}]:{port}") } else { format!("{host}:{port}") };
            let ep = match &options.tls {
                None => endpoint(Endpoint::from_shared(format!("http://{authority}"))?),
                Some(tls) => {
                    let mut config = ClientTlsConfig::new().domain_name(host.clone());
                    config = match &tls.ca {
                        Some(ca) => config.ca_certificate(Certificate::from_pem(ca)),
                        None => config.with_webpki_roots(),
                    };
                    if let Some((cert, key)) = &tls.identity {
                        config = config.identity(Identity::from_pem(cert, key));
                    }
                    endpoint(Endpoint::from_shared(format!("https://{authority}"))?).tls_config(config)?
                }
            };
            list.push(ep);
        }
        let channel = connect_any(list).await?;
        let auth =
            options.credentials.clone().map(|credentials| Arc::new(Auth { credentials, token: RwLock::new(None) }));
        let client = Self { channel, auth };
        client.authenticate().await.map_err(ConnectError::Status)?;
        Ok(client)
    }

    /// Exchanges the credentials for a fresh token (nothing to do without credentials).
    async fn authenticate(&self) -> Result<(), Status> {
        let Some(auth) = &self.auth else { return Ok(()) };
        let req = pb::AuthenticateRequest {
            name: auth.credentials.user().to_string(),
            password: auth.credentials.password().to_string(),
        };
        let token = AuthClient::new(self.channel.clone()).authenticate(req).await?.into_inner().token;
        let value = MetadataValue::try_from(token.as_str())
            .map_err(|_| Status::internal("etcd returned an auth token that is not valid metadata"))?;
        *auth.token.write().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(value);
        Ok(())
    }

    /// `msg` as a request carrying the current token.
    fn request<T>(&self, msg: T) -> tonic::Request<T> {
        let mut req = tonic::Request::new(msg);
        if let Some(auth) = &self.auth {
            if let Some(token) = auth.token.read().unwrap_or_else(std::sync::PoisonError::into_inner).clone() {
                req.metadata_mut().insert("token", token);
            }
        }
        req
    }

    /// Runs one call with the token; when etcd says the token is no longer valid, authenticates
    /// again and runs it once more.
    async fn unary<T, R, F, Fut>(&self, msg: T, call: F) -> Result<R, Status>
    where
        T: Clone,
        F: Fn(Channel, tonic::Request<T>) -> Fut,
        Fut: Future<Output = Result<tonic::Response<R>, Status>>,
    {
        match call(self.channel.clone(), self.request(msg.clone())).await {
            Err(s) if self.auth.is_some() && token_expired(&s) => {
                self.authenticate().await?;
                Ok(call(self.channel.clone(), self.request(msg)).await?.into_inner())
            }
            r => Ok(r?.into_inner()),
        }
    }

    /// Reads the keys in `req`'s range.
    ///
    /// # Errors
    /// The call's status.
    ///
    /// # Cancel safety
    /// Cancel safe: read only.
    pub async fn range(&mut self, req: RangeRequest) -> Result<RangeResponse, Status> {
        self.unary(req, |ch, r| async move { KvClient::new(ch).range(r).await }).await
    }

    /// Reads one key.
    ///
    /// # Errors
    /// The call's status.
    ///
    /// # Cancel safety
    /// Cancel safe: read only.
    pub async fn get(&mut self, key: impl Into<Vec<u8>>) -> Result<RangeResponse, Status> {
        self.range(RangeRequest { key: key.into(), ..Default::default() }).await
    }

    /// Reads every key under `prefix`, oldest create revision first.
    ///
    /// # Errors
    /// The call's status.
    ///
    /// # Cancel safety
    /// Cancel safe: read only.
    pub async fn get_prefix(&mut self, prefix: impl Into<Vec<u8>>) -> Result<RangeResponse, Status> {
        self.range(prefix_range(prefix.into()).sorted_by_create(true)).await
    }

    /// Writes `key` = `value`, attached to `lease` (0: none).
    ///
    /// # Errors
    /// The call's status.
    ///
    /// # Cancel safety
    /// Not cancel safe: the put may or may not have happened.
    pub async fn put(
        &mut self,
        key: impl Into<Vec<u8>>,
        value: impl Into<Vec<u8>>,
        lease: i64,
    ) -> Result<pb::PutResponse, Status> {
        let req = PutRequest { key: key.into(), value: value.into(), lease };
        self.unary(req, |ch, r| async move { KvClient::new(ch).put(r).await }).await
    }

    /// Deletes one key; the answer counts the keys deleted.
    ///
    /// # Errors
    /// The call's status.
    ///
    /// # Cancel safety
    /// Not cancel safe: the delete may or may not have happened.
    pub async fn delete(&mut self, key: impl Into<Vec<u8>>) -> Result<pb::DeleteRangeResponse, Status> {
        let req = DeleteRangeRequest { key: key.into(), range_end: Vec::new() };
        self.unary(req, |ch, r| async move { KvClient::new(ch).delete_range(r).await }).await
    }

    /// Runs a transaction.
    ///
    /// # Errors
    /// The call's status.
    ///
    /// # Cancel safety
    /// Not cancel safe: the transaction may or may not have been applied.
    pub async fn txn(&mut self, txn: TxnRequest) -> Result<TxnResponse, Status> {
        self.unary(txn, |ch, r| async move { KvClient::new(ch).txn(r).await }).await
    }

    /// Watches one key from `start_revision` (inclusive) on a stream of its own.
    ///
    /// # Errors
    /// The call's status.
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the watcher ends its stream.
    pub async fn watch(&mut self, key: impl Into<Vec<u8>>, start_revision: i64) -> Result<Watcher, Status> {
        self.watch_range(key.into(), Vec::new(), start_revision).await
    }

    /// Watches every key under `prefix` from `start_revision`.
    ///
    /// # Errors
    /// The call's status.
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the watcher ends its stream.
    pub async fn watch_prefix(&mut self, prefix: impl Into<Vec<u8>>, start_revision: i64) -> Result<Watcher, Status> {
        let prefix = prefix.into();
        let end = prefix_end(&prefix);
        self.watch_range(prefix, end, start_revision).await
    }

    async fn watch_range(&mut self, key: Vec<u8>, range_end: Vec<u8>, start_revision: i64) -> Result<Watcher, Status> {
        let create = WatchCreateRequest { key, range_end, start_revision };
        let req = WatchRequest { request_union: Some(pb::watch_request::RequestUnion::CreateRequest(create)) };
        let mut retried = false;
        loop {
            let (tx, rx) = mpsc::channel(1);
            tx.try_send(req.clone()).map_err(|_| Status::internal("watch request queue is full"))?;
            match WatchClient::new(self.channel.clone()).watch(self.request(ReceiverStream::new(rx))).await {
                Ok(r) => return Ok(Watcher { _requests: tx, stream: r.into_inner() }),
                Err(s) if !retried && self.auth.is_some() && token_expired(&s) => self.authenticate().await?,
                Err(s) => return Err(s),
            }
            retried = true;
        }
    }

    /// Grants a lease of `ttl_secs` seconds.
    ///
    /// # Errors
    /// The call's status.
    ///
    /// # Cancel safety
    /// Cancel safe in effect: an unused lease expires after its TTL.
    pub async fn lease_grant(&mut self, ttl_secs: i64) -> Result<pb::LeaseGrantResponse, Status> {
        let req = pb::LeaseGrantRequest { ttl: ttl_secs, id: 0 };
        self.unary(req, |ch, r| async move { LeaseClient::new(ch).lease_grant(r).await }).await
    }

    /// Revokes a lease, deleting every key attached to it.
    ///
    /// # Errors
    /// The call's status (`NOT_FOUND` when the lease is already gone).
    ///
    /// # Cancel safety
    /// Cancel safe in effect: the lease expires anyway.
    pub async fn lease_revoke(&mut self, id: i64) -> Result<pb::LeaseRevokeResponse, Status> {
        let req = pb::LeaseRevokeRequest { id };
        self.unary(req, |ch, r| async move { LeaseClient::new(ch).lease_revoke(r).await }).await
    }

    /// The time a lease has left (`ttl` −1: the lease does not exist).
    ///
    /// # Errors
    /// The call's status.
    ///
    /// # Cancel safety
    /// Cancel safe: read only.
    pub async fn lease_time_to_live(&mut self, id: i64) -> Result<pb::LeaseTimeToLiveResponse, Status> {
        let req = pb::LeaseTimeToLiveRequest { id, keys: false };
        self.unary(req, |ch, r| async move { LeaseClient::new(ch).lease_time_to_live(r).await }).await
    }

    /// Opens a keep-alive stream for lease `id`: each [`KeepAliveStream::renew`] is one request
    /// and its answer. The first request is sent with the opening (etcd answers the call only
    /// once it has a message to answer), and is answered to the first `renew`.
    ///
    /// # Errors
    /// The call's status.
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the stream ends it.
    pub async fn lease_keep_alive(&mut self, id: i64) -> Result<KeepAliveStream, Status> {
        let mut retried = false;
        loop {
            let (tx, rx) = mpsc::channel(1);
            tx.try_send(pb::LeaseKeepAliveRequest { id }).map_err(|_| Status::internal("keep-alive queue is full"))?;
            match LeaseClient::new(self.channel.clone()).lease_keep_alive(self.request(ReceiverStream::new(rx))).await {
                Ok(r) => return Ok(KeepAliveStream { id, requests: tx, stream: r.into_inner(), first_sent: true }),
                Err(s) if !retried && self.auth.is_some() && token_expired(&s) => self.authenticate().await?,
                Err(s) => return Err(s),
            }
            retried = true;
        }
    }
}

/// Why [`Client::connect_with`] failed.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// No endpoint could be connected (TLS failures are in the source chain).
    #[error("{0}")]
    Transport(#[from] tonic::transport::Error),
    /// The cluster answered, but refused to authenticate us.
    #[error("{}", .0.message())]
    Status(Status),
}

/// The settings every endpoint gets.
fn endpoint(ep: Endpoint) -> Endpoint {
    ep.connect_timeout(CONNECT_TIMEOUT)
        .tcp_nodelay(true)
        .http2_keep_alive_interval(Duration::from_secs(2))
        .keep_alive_timeout(Duration::from_secs(2))
}

/// A channel over `list`, after one endpoint accepted a connection.
async fn connect_any(list: Vec<Endpoint>) -> Result<Channel, tonic::transport::Error> {
    let n = list.len();
    for (i, ep) in list.iter().enumerate() {
        match ep.connect().await {
            Ok(channel) if n == 1 => return Ok(channel),
            Ok(_) => return Ok(Channel::balance_list(list.into_iter())),
            Err(e) if i + 1 == n => return Err(e),
            Err(_) => {}
        }
    }
    // No endpoint at all: the empty endpoint does not parse, which says so.
    Endpoint::from_shared(String::new()).map(|ep| ep.connect_lazy())
}

/// One watch on a stream of its own. The request side stays open while this lives (etcd ends
/// every watch of a stream whose client half-closes).
#[derive(Debug)]
pub struct Watcher {
    _requests: mpsc::Sender<WatchRequest>,
    stream: Streaming<WatchResponse>,
}

impl Watcher {
    /// The next answer: the creation notice, events, or a cancellation; `None` when the
    /// server ended the stream.
    ///
    /// # Errors
    /// The stream's status.
    ///
    /// # Cancel safety
    /// Cancel safe: a message not yet received stays in the stream.
    pub async fn message(&mut self) -> Result<Option<WatchResponse>, Status> {
        self.stream.message().await
    }
}

/// A lease keep-alive stream.
#[derive(Debug)]
pub struct KeepAliveStream {
    id: i64,
    requests: mpsc::Sender<pb::LeaseKeepAliveRequest>,
    stream: Streaming<pb::LeaseKeepAliveResponse>,
    /// The request sent with the opening is not answered yet.
    first_sent: bool,
}

impl KeepAliveStream {
    /// Sends one keep-alive and reads its answer (`ttl` ≤ 0: the lease is gone); `None` when
    /// the server ended the stream.
    ///
    /// # Errors
    /// The stream's status.
    ///
    /// # Cancel safety
    /// Not cancel safe: an answer to a cancelled call would be read by the next one. Drop the
    /// stream after a cancellation.
    pub async fn renew(&mut self) -> Result<Option<pb::LeaseKeepAliveResponse>, Status> {
        if !std::mem::take(&mut self.first_sent) {
            self.requests
                .send(pb::LeaseKeepAliveRequest { id: self.id })
                .await
                .map_err(|_| Status::unavailable("keep-alive stream closed"))?;
        }
        self.stream.message().await
    }
}

/// The smallest key greater than every key starting with `prefix` (etcd's prefix range end):
/// the prefix with its last byte below 0xff incremented and what follows dropped; `"\0"` (no
/// upper bound) when every byte is 0xff or the prefix is empty.
pub fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

/// A range over every key that starts with `prefix` (every key when it is empty).
pub fn prefix_range(prefix: Vec<u8>) -> RangeRequest {
    let range_end = prefix_end(&prefix);
    let key = if prefix.is_empty() { vec![0] } else { prefix };
    RangeRequest { key, range_end, ..Default::default() }
}

/// A range over `[start, end)`.
pub fn key_range(start: impl Into<Vec<u8>>, end: impl Into<Vec<u8>>) -> RangeRequest {
    RangeRequest { key: start.into(), range_end: end.into(), ..Default::default() }
}

impl RangeRequest {
    /// Sorted by create revision, oldest first (`ascending`) or newest first.
    #[must_use]
    pub fn sorted_by_create(mut self, ascending: bool) -> Self {
        self.set_sort_target(SortTarget::Create);
        self.set_sort_order(if ascending { SortOrder::Ascend } else { SortOrder::Descend });
        self
    }
}

impl Compare {
    /// `create_revision(key) == rev` (0: the key does not exist).
    pub fn create_revision_is(key: impl Into<Vec<u8>>, rev: i64) -> Self {
        Self {
            result: CompareResult::Equal as i32,
            target: CompareTarget::Create as i32,
            key: key.into(),
            target_union: Some(TargetUnion::CreateRevision(rev)),
            range_end: Vec::new(),
        }
    }

    /// No key in `[start, end)` (etcd 3.3+: a compare over a range holds for every key in it,
    /// and over no key at all it is made against an absent key, whose create revision is 0).
    pub fn range_is_empty(start: impl Into<Vec<u8>>, end: impl Into<Vec<u8>>) -> Self {
        Self { range_end: end.into(), ..Self::create_revision_is(start, 0) }
    }

    /// Every key in `[start, end)` has value `value` (etcd 3.3+). Fails when the range is empty:
    /// etcd cannot compare the value of a missing key.
    pub fn range_values_are(start: impl Into<Vec<u8>>, end: impl Into<Vec<u8>>, value: impl Into<Vec<u8>>) -> Self {
        Self {
            result: CompareResult::Equal as i32,
            target: CompareTarget::Value as i32,
            key: start.into(),
            target_union: Some(TargetUnion::Value(value.into())),
            range_end: end.into(),
        }
    }

    /// `lease(key) == lease`.
    pub fn lease_is(key: impl Into<Vec<u8>>, lease: i64) -> Self {
        Self {
            result: CompareResult::Equal as i32,
            target: CompareTarget::Lease as i32,
            key: key.into(),
            target_union: Some(TargetUnion::Lease(lease)),
            range_end: Vec::new(),
        }
    }
}

impl RequestOp {
    /// A read inside a transaction.
    pub fn range(req: RangeRequest) -> Self {
        Self { request: Some(Op::RequestRange(req)) }
    }

    /// A read of one key inside a transaction.
    pub fn get(key: impl Into<Vec<u8>>) -> Self {
        Self::range(RangeRequest { key: key.into(), ..Default::default() })
    }

    /// A put inside a transaction.
    pub fn put(key: impl Into<Vec<u8>>, value: impl Into<Vec<u8>>, lease: i64) -> Self {
        Self { request: Some(Op::RequestPut(PutRequest { key: key.into(), value: value.into(), lease })) }
    }

    /// A delete of one key inside a transaction.
    pub fn delete(key: impl Into<Vec<u8>>) -> Self {
        Self { request: Some(Op::RequestDeleteRange(DeleteRangeRequest { key: key.into(), range_end: Vec::new() })) }
    }

    /// A nested transaction (etcd 3.3+): its compares are decided at the same revision as the
    /// enclosing one's, so "if A then X else (if B then X else read)" is one atomic step.
    pub fn txn(txn: TxnRequest) -> Self {
        Self { request: Some(Op::RequestTxn(txn)) }
    }
}

impl pb::ResponseOp {
    /// The keys read, when this answers a range.
    pub fn range(&self) -> Option<&RangeResponse> {
        match &self.response {
            Some(pb::response_op::Response::ResponseRange(r)) => Some(r),
            _ => None,
        }
    }

    /// The nested transaction's answer, when this answers one.
    pub fn txn(&self) -> Option<&TxnResponse> {
        match &self.response {
            Some(pb::response_op::Response::ResponseTxn(r)) => Some(r),
            _ => None,
        }
    }
}

impl pb::ResponseHeader {
    /// The revision of an optional header (0 when absent).
    pub fn revision_of(h: Option<&Self>) -> i64 {
        h.map_or(0, |h| h.revision)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_ends_are_the_next_key_after_every_prefixed_key() {
        assert_eq!(prefix_end(b"jobs/"), b"jobs0");
        assert_eq!(prefix_end(b"a\xff"), b"b");
        assert_eq!(prefix_end(b"\xff\xff"), vec![0]);
        assert_eq!(prefix_end(b""), vec![0]);
    }
}
