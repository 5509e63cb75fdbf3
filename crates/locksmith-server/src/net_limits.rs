//! [`NetLimits`]: what one client may hold of the server's connections, streams and memory, and
//! how long the server waits for a silent peer. The lock machine's own limits (sessions, waiters,
//! TTLs) are [`machine::Limits`](crate::machine::Limits).

use std::time::Duration;

/// Bounds on clients' connections and streams (`locksmith serve --max-connections` and the
/// flags beside it). Every refusal is counted in
/// [`LIMIT_HITS`](crate::telemetry::LIMIT_HITS) or its own metric.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct NetLimits {
    /// Open client connections; one more is closed as soon as it is accepted. Each takes a file
    /// descriptor and an HTTP/2 connection's buffers.
    pub max_connections: usize,
    /// Open connections from one IP address; one more from it is closed as soon as it is
    /// accepted, so that one host cannot take every connection slot (every local process shares
    /// `127.0.0.1`).
    pub max_connections_per_address: usize,
    /// Concurrent streams (sessions and calls) on one HTTP/2 connection, announced in its
    /// settings; a client waits for a free one.
    pub max_streams_per_connection: u32,
    /// Messages queued for one session stream that its client does not read; then the stream
    /// is ended with `RESOURCE_EXHAUSTED` (the session lives on until its TTL).
    pub max_queued_messages: usize,
    /// A connection that has not begun its handshake in this time after it was accepted is
    /// closed: it must have sent the HTTP/2 preface and a frame header (33 bytes), over TLS
    /// 256 bytes, so a peer trickling a byte at a time does not keep it open.
    pub first_byte_timeout: Duration,
    /// A session stream whose first message (`open`) does not come in this time is ended.
    pub open_timeout: Duration,
    /// An HTTP/2 ping goes to a connection that has sent nothing for this long; `None`: none.
    pub keepalive_interval: Option<Duration>,
    /// A ping not answered in this time closes the connection.
    pub keepalive_timeout: Duration,
    /// TCP keepalive probes start after this much idle time (the kernel then closes a peer
    /// that is gone); `None`: off.
    pub tcp_keepalive: Option<Duration>,
}

impl Default for NetLimits {
    /// Room for thousands of clients (each `locksmith` client process uses one connection),
    /// with every per-client resource bounded: see the README's "Operating the server".
    fn default() -> Self {
        Self {
            max_connections: 10_000,
            max_connections_per_address: 1_000,
            max_streams_per_connection: 100,
            max_queued_messages: crate::outbox::DEFAULT_CAPACITY,
            first_byte_timeout: Duration::from_secs(10),
            open_timeout: Duration::from_secs(10),
            keepalive_interval: Some(Duration::from_secs(30)),
            keepalive_timeout: Duration::from_secs(10),
            tcp_keepalive: Some(Duration::from_secs(60)),
        }
    }
}

impl NetLimits {
    /// How long an accepted connection may stay silent once it has sent its first byte. A peer
    /// past its HTTP/2 handshake is pinged after `keepalive_interval` of silence and must answer
    /// within `keepalive_timeout`, so a live one is never silent for longer than their sum;
    /// twice the timeout leaves HTTP/2 the first word. What this catches is a peer that stalls
    /// inside the TLS or HTTP/2 handshake, where nobody pings it. `None` without keepalive.
    pub fn silence_limit(&self) -> Option<Duration> {
        self.keepalive_interval.map(|i| i + 2 * self.keepalive_timeout)
    }
}
