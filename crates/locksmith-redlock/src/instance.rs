//! One Redis master: its own connection, (re)connected independently with short timeouts, so
//! that a dead or SIGSTOPped instance costs a missing vote and never blocks the others.

use std::future::Future;
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, ErrorKind, RedisError, RedisResult};
use tokio::time::Instant;

use crate::timing::Timeouts;
use crate::url::Addr;

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
}

impl<T> Reply<T> {
    pub(crate) fn reachable(&self) -> bool {
        !matches!(self, Reply::Down(_))
    }
}

struct Cached {
    /// The live connection and its generation (so a failure only discards the connection it
    /// happened on, not a newer one).
    conn: Option<(u64, MultiplexedConnection)>,
    generation: u64,
    failed_at: Option<Instant>,
    last_error: String,
}

/// One instance of the set.
pub(crate) struct Instance {
    pub(crate) addr: Addr,
    client: redis::Client,
    cached: tokio::sync::Mutex<Cached>,
}

impl std::fmt::Debug for Instance {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Instance").field("addr", &self.addr.to_string()).finish()
    }
}

impl Instance {
    /// No I/O: the redis client only parses its URL.
    pub(crate) fn new(addr: Addr, url: &str) -> RedisResult<Self> {
        let client = redis::Client::open(url)?;
        let cached = Cached { conn: None, generation: 0, failed_at: None, last_error: String::new() };
        Ok(Self { addr, client, cached: tokio::sync::Mutex::new(cached) })
    }

    /// Runs `op` on this instance's connection, connecting first if needed, bounded by `t`.
    pub(crate) async fn run<T, F, Fut>(&self, t: Timeouts, op: F) -> Reply<T>
    where
        F: FnOnce(MultiplexedConnection) -> Fut,
        Fut: Future<Output = RedisResult<T>>,
    {
        let (generation, conn) = match self.connection(t.connect).await {
            Ok(c) => c,
            Err(reason) => return Reply::Down(reason),
        };
        match tokio::time::timeout(t.command, op(conn)).await {
            Ok(Ok(v)) => Reply::Value(v),
            Ok(Err(e)) if answered(&e) => Reply::Refused(e.to_string()),
            Ok(Err(e)) => {
                if e.is_io_error() || e.is_connection_dropped() || e.is_unrecoverable_error() {
                    self.discard(generation).await;
                }
                Reply::Down(e.to_string())
            }
            // The connection is kept: a frozen instance answers in order once resumed, so a
            // later owner-checked release still runs after the command that timed out here.
            Err(_) => Reply::Down(format!("no answer within {:?}", t.command)),
        }
    }

    async fn connection(&self, timeout: Duration) -> Result<(u64, MultiplexedConnection), String> {
        let mut cached = self.cached.lock().await;
        if let Some((generation, conn)) = &cached.conn {
            return Ok((*generation, conn.clone()));
        }
        if let Some(at) = cached.failed_at {
            if at.elapsed() < RECONNECT_PAUSE {
                return Err(cached.last_error.clone());
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
            Ok(Err(e)) => format!("cannot connect: {e}"),
            Err(_) => format!("no connection within {timeout:?}"),
        };
        cached.failed_at = Some(Instant::now());
        cached.last_error = failure.clone();
        Err(failure)
    }

    async fn discard(&self, generation: u64) {
        let mut cached = self.cached.lock().await;
        if cached.conn.as_ref().is_some_and(|(g, _)| *g == generation) {
            cached.conn = None;
        }
    }
}

/// Whether the instance itself produced this error (so it is reachable).
fn answered(e: &RedisError) -> bool {
    matches!(e.kind(), ErrorKind::Server(_) | ErrorKind::Extension | ErrorKind::UnexpectedReturnType)
}
