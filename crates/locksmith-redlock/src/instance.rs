//! One Redis master: its own connection, (re)connected independently with short timeouts, so
//! that a dead or SIGSTOPped instance costs a missing vote and never blocks the others.

use std::future::Future;
use std::time::Duration;

use locksmith_core::Error;
use locksmith_redis::connect;
use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, ErrorKind, RedisError, RedisResult};
use tokio::time::Instant;

use crate::timing::Timeouts;

/// After a failed connect, fail fast for this long instead of queueing another connect: callers
/// that waited behind the failed attempt get their missing vote at once.
const RECONNECT_PAUSE: Duration = Duration::from_millis(100);

/// What one instance answered to one command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Reply<T> {
    /// A regular answer.
    Value(T),
    /// The instance answered with an error (WRONGTYPE, LOADING, script error…): reachable,
    /// but no vote.
    Refused(String),
    /// No answer: connect failed, connection dropped, or the command timed out.
    Down(String),
    /// The instance refused our configuration or credentials (a certificate that does not
    /// verify, a wrong password, NOPERM): no vote, and retrying will not change that.
    Denied(Denial),
}

impl<T> Reply<T> {
    /// Whether the instance took part: answered, or refused the command itself. An instance
    /// that is down or refuses us cannot vote.
    pub(crate) fn reachable(&self) -> bool {
        matches!(self, Reply::Value(_) | Reply::Refused(_))
    }
}

/// Why an instance refused us: an [`Error::Auth`] or [`Error::Config`] in a form that can be
/// cloned into every reply of a round.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Denial {
    /// Auth (credentials, permissions) rather than Config (TLS settings).
    pub(crate) auth: bool,
    /// What is wrong, without the backend's name or any secret.
    pub(crate) message: String,
}

impl Denial {
    /// The denial in `e`, if `e` is one.
    fn of(e: &Error) -> Option<Self> {
        match e {
            Error::Auth { message, .. } => Some(Self { auth: true, message: message.clone() }),
            Error::Config { message, .. } => Some(Self { auth: false, message: message.clone() }),
            _ => None,
        }
    }
}

/// Why there is no connection.
#[derive(Debug, Clone)]
enum Failure {
    Down(String),
    Denied(Denial),
}

impl Failure {
    fn reply<T>(self) -> Reply<T> {
        match self {
            Failure::Down(reason) => Reply::Down(reason),
            Failure::Denied(d) => Reply::Denied(d),
        }
    }
}

struct Cached {
    /// The live connection and its generation (so a failure only discards the connection it
    /// happened on, not a newer one).
    conn: Option<(u64, MultiplexedConnection)>,
    generation: u64,
    failed_at: Option<Instant>,
    last_failure: Failure,
}

/// One instance of the set.
pub(crate) struct Instance {
    /// `host:port`, for messages.
    pub(crate) addr: String,
    client: redis::Client,
    /// The client as named in messages (no password).
    describe: String,
    tls: bool,
    cached: tokio::sync::Mutex<Cached>,
}

impl std::fmt::Debug for Instance {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Instance").field("addr", &self.addr.to_string()).finish()
    }
}

impl Instance {
    /// No I/O.
    pub(crate) fn new(client: redis::Client) -> Self {
        let cached = Cached { conn: None, generation: 0, failed_at: None, last_failure: Failure::Down(String::new()) };
        let (addr, describe, tls) =
            (client.get_connection_info().addr().to_string(), connect::describe(&client), connect::is_tls(&client));
        Self { addr, client, describe, tls, cached: tokio::sync::Mutex::new(cached) }
    }

    /// `e` classified: a denial when it is an Auth or Config error, the error otherwise.
    fn classify(&self, e: &RedisError) -> Result<Denial, Error> {
        let e = connect::classify(e, &self.describe, self.tls);
        Denial::of(&e).ok_or(e)
    }

    /// Runs `op` on this instance's connection, connecting first if needed, bounded by `t`.
    pub(crate) async fn run<T, F, Fut>(&self, t: Timeouts, op: F) -> Reply<T>
    where
        F: FnOnce(MultiplexedConnection) -> Fut,
        Fut: Future<Output = RedisResult<T>>,
    {
        let (generation, conn) = match self.connection(t.connect).await {
            Ok(c) => c,
            Err(failure) => return failure.reply(),
        };
        match tokio::time::timeout(t.command, op(conn)).await {
            Ok(Ok(v)) => Reply::Value(v),
            Ok(Err(e)) => match self.classify(&e) {
                // NOAUTH, NOPERM: the instance is there but will not let us vote.
                Ok(denial) => Reply::Denied(denial),
                Err(_) if answered(&e) => Reply::Refused(e.to_string()),
                Err(_) => {
                    if e.is_io_error() || e.is_connection_dropped() || e.is_unrecoverable_error() {
                        self.discard(generation).await;
                    }
                    Reply::Down(e.to_string())
                }
            },
            // The connection is kept: a frozen instance answers in order once resumed, so a
            // later owner-checked release still runs after the command that timed out here.
            Err(_) => Reply::Down(format!("no answer within {:?}", t.command)),
        }
    }

    async fn connection(&self, timeout: Duration) -> Result<(u64, MultiplexedConnection), Failure> {
        let mut cached = self.cached.lock().await;
        if let Some((generation, conn)) = &cached.conn {
            return Ok((*generation, conn.clone()));
        }
        if let Some(at) = cached.failed_at {
            if at.elapsed() < RECONNECT_PAUSE {
                return Err(cached.last_failure.clone());
            }
        }
        // Our own timeouts bound every command, per call; the connection's own would apply one
        // TTL's limits to every session sharing it.
        let config = AsyncConnectionConfig::new().set_connection_timeout(Some(timeout)).set_response_timeout(None);
        let attempt = self.client.get_multiplexed_async_connection_with_config(&config);
        let failure = match tokio::time::timeout(timeout, attempt).await {
            Ok(Ok(conn)) => {
                cached.generation += 1;
                cached.conn = Some((cached.generation, conn.clone()));
                cached.failed_at = None;
                return Ok((cached.generation, conn));
            }
            Ok(Err(e)) => match self.classify(&e) {
                Ok(denial) => Failure::Denied(denial),
                // The classified text: it carries hints (plain to a TLS port, and the like).
                Err(e) => Failure::Down(format!("cannot connect: {}", unavailable_reason(&e))),
            },
            Err(_) => Failure::Down(format!("no connection within {timeout:?}")),
        };
        cached.failed_at = Some(Instant::now());
        cached.last_failure = failure.clone();
        Err(failure)
    }

    async fn discard(&self, generation: u64) {
        let mut cached = self.cached.lock().await;
        if cached.conn.as_ref().is_some_and(|(g, _)| *g == generation) {
            cached.conn = None;
        }
    }
}

/// The reason inside an Unavailable error (the backend is named by the caller).
fn unavailable_reason(e: &Error) -> String {
    match e {
        Error::Unavailable { message, .. } => message.clone(),
        other => other.to_string(),
    }
}

/// Whether the instance itself produced this error (so it is reachable).
fn answered(e: &RedisError) -> bool {
    matches!(e.kind(), ErrorKind::Server(_) | ErrorKind::Extension | ErrorKind::UnexpectedReturnType)
}
