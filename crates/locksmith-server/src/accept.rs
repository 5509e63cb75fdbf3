//! Accepting client connections within bounds: at most `max_connections` open (one more is
//! closed at once), TCP keepalive and `TCP_NODELAY` on each, a connection that stays silent
//! closed (see [`Conn`]), and an accept loop that backs off instead of spinning when the process
//! is out of file descriptors.

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use futures_util::Stream;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tonic::transport::server::{Connected, TcpConnectInfo};

use crate::net_limits::NetLimits;
use crate::telemetry::{self, Limit};

/// The first pause after `accept` failed for lack of descriptors or memory; it doubles up to
/// [`MAX_BACKOFF`] while the failures go on.
const FIRST_BACKOFF: Duration = Duration::from_millis(5);
const MAX_BACKOFF: Duration = Duration::from_secs(1);

/// What a peer must have sent within the first byte timeout for its handshake to count as
/// begun in earnest: the HTTP/2 client preface and one frame header (33 bytes; a real client
/// sends its SETTINGS with them), or over TLS a ClientHello and the client's next flight (a
/// rustls ClientHello alone is over 200 bytes). A peer trickling a byte every few seconds never
/// gets there and is closed, instead of holding its slot forever.
const HANDSHAKE_BYTES_PLAIN: u64 = 33;
const HANDSHAKE_BYTES_TLS: u64 = 256;

/// The connections `listener` accepts, as a stream for tonic's `serve_with_incoming`. It never
/// yields an error (tonic would stop serving on one): failures are handled here.
pub(crate) fn incoming(
    listener: TcpListener,
    limits: &NetLimits,
    tls: bool,
) -> impl Stream<Item = Result<Conn, std::convert::Infallible>> + Send + 'static {
    let acceptor = Acceptor {
        listener,
        slots: Arc::new(Semaphore::new(limits.max_connections.min(Semaphore::MAX_PERMITS))),
        max: limits.max_connections,
        per_address: Arc::new(Mutex::new(HashMap::new())),
        max_per_address: limits.max_connections_per_address,
        crowded: false,
        first_byte: limits.first_byte_timeout,
        silence: limits.silence_limit(),
        tcp_keepalive: limits.tcp_keepalive,
        handshake_bytes: if tls { HANDSHAKE_BYTES_TLS } else { HANDSHAKE_BYTES_PLAIN },
        failing: None,
        full: false,
    };
    futures_util::stream::unfold(acceptor, |mut a| async move {
        let conn = a.next().await;
        Some((Ok(conn), a))
    })
}

struct Acceptor {
    listener: TcpListener,
    slots: Arc<Semaphore>,
    max: usize,
    /// Open connections by peer address (entries at zero are removed).
    per_address: Arc<Mutex<HashMap<IpAddr, usize>>>,
    max_per_address: usize,
    /// Whether connections are being refused for `max_connections_per_address` (logged once
    /// per burst).
    crowded: bool,
    first_byte: Duration,
    silence: Option<Duration>,
    tcp_keepalive: Option<Duration>,
    handshake_bytes: u64,
    /// While `accept` keeps failing for lack of resources: since when, how often, the pause.
    failing: Option<(Instant, u64, Duration)>,
    /// Whether connections are being refused for `max_connections` (logged once per burst).
    full: bool,
}

impl Acceptor {
    /// The next connection within bounds.
    ///
    /// # Cancel safety
    /// Cancel safe: a connection accepted is returned by the same poll.
    async fn next(&mut self) -> Conn {
        loop {
            let (stream, peer) = match self.listener.accept().await {
                Ok(accepted) => accepted,
                Err(e) => {
                    self.failed(e).await;
                    continue;
                }
            };
            if let Some((since, failures, _)) = self.failing.take() {
                tracing::info!(failures, after = ?since.elapsed(), "accepting connections again");
            }
            let Ok(permit) = self.slots.clone().try_acquire_owned() else {
                telemetry::limit_hit(Limit::Connections);
                if !std::mem::replace(&mut self.full, true) {
                    tracing::warn!(max = self.max, %peer, "connection limit reached (--max-connections): new connections are closed at once");
                }
                continue;
            };
            if std::mem::replace(&mut self.full, false) {
                tracing::info!(max = self.max, "below the connection limit again");
            }
            let Some(address) = AddressSlot::take(&self.per_address, peer.ip(), self.max_per_address) else {
                telemetry::limit_hit(Limit::ConnectionsPerAddress);
                if !std::mem::replace(&mut self.crowded, true) {
                    tracing::warn!(max = self.max_per_address, %peer, "connection limit per address reached (--max-connections-per-address): its new connections are closed at once");
                }
                continue;
            };
            self.crowded = false;
            self.configure(&stream);
            telemetry::connection_opened();
            return Conn::new(stream, (permit, address), self.first_byte, self.silence, self.handshake_bytes);
        }
    }

    /// Handles a failed `accept`. Out of descriptors or memory, the pending connection stays in
    /// the backlog and the next call fails the same way at once: pause (doubling, up to a
    /// second) and log once per burst instead of spinning a core. Anything else concerns one
    /// connection only (aborted before it was accepted…): go on.
    async fn failed(&mut self, e: io::Error) {
        let resources = matches!(
            e.raw_os_error(),
            Some(nix::libc::EMFILE | nix::libc::ENFILE | nix::libc::ENOBUFS | nix::libc::ENOMEM)
        );
        telemetry::accept_error(resources);
        if !resources {
            tracing::debug!(error = %e, "accept failed");
            return;
        }
        let (_, failures, pause) = self.failing.get_or_insert_with(|| {
            tracing::warn!(error = %e, "cannot accept connections (out of file descriptors or memory); retrying with back-off");
            (Instant::now(), 0, FIRST_BACKOFF)
        });
        *failures += 1;
        let now = *pause;
        *pause = (*pause * 2).min(MAX_BACKOFF);
        tokio::time::sleep(now).await;
    }

    fn configure(&self, stream: &TcpStream) {
        // With our own listener tonic's `tcp_nodelay` does not apply: without it Nagle holds
        // small answers back until the peer's delayed ACK (~40 ms).
        if let Err(e) = stream.set_nodelay(true) {
            tracing::debug!(error = %e, "cannot set TCP_NODELAY");
        }
        if let Some(idle) = self.tcp_keepalive {
            let keepalive = socket2::TcpKeepalive::new()
                .with_time(idle)
                .with_interval(Duration::from_secs(10).min(idle))
                .with_retries(3);
            if let Err(e) = socket2::SockRef::from(stream).set_tcp_keepalive(&keepalive) {
                tracing::debug!(error = %e, "cannot set TCP keepalive");
            }
        }
    }
}

/// One of the connections an address may hold; given back when dropped.
#[derive(Debug)]
struct AddressSlot {
    map: Arc<Mutex<HashMap<IpAddr, usize>>>,
    ip: IpAddr,
}

impl AddressSlot {
    fn take(map: &Arc<Mutex<HashMap<IpAddr, usize>>>, ip: IpAddr, max: usize) -> Option<Self> {
        let mut counts = map.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let count = counts.entry(ip).or_insert(0);
        if *count >= max {
            return None;
        }
        *count += 1;
        Some(Self { map: map.clone(), ip })
    }
}

impl Drop for AddressSlot {
    fn drop(&mut self) {
        let mut counts = self.map.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(count) = counts.get_mut(&self.ip) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                counts.remove(&self.ip);
            }
        }
    }
}

/// An accepted connection holding one of the `max_connections` slots until it is dropped. It
/// closes itself (its reads fail with `TimedOut`) when the peer sends no byte within the first
/// byte timeout, or, after that, stays silent past the silence limit (see
/// [`NetLimits::silence_limit`]).
///
/// Its connection info is tonic's own [`TcpConnectInfo`], so `Request::remote_addr` and, under
/// TLS (tonic wraps it), `Request::peer_certs` work as with a plain `TcpStream`.
#[derive(Debug)]
pub(crate) struct Conn {
    stream: TcpStream,
    _slot: (OwnedSemaphorePermit, AddressSlot),
    /// When the peer last sent a byte (`None`: not yet its first `handshake_bytes`).
    last_read: Option<Instant>,
    /// Bytes still due before the first byte timeout (see [`HANDSHAKE_BYTES_PLAIN`]).
    handshake_due: u64,
    first_byte: Duration,
    silence: Option<Duration>,
    /// Armed while a read waits; `None` once the silence limit is off.
    timer: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl Conn {
    fn new(
        stream: TcpStream,
        slot: (OwnedSemaphorePermit, AddressSlot),
        first_byte: Duration,
        silence: Option<Duration>,
        handshake_bytes: u64,
    ) -> Self {
        let timer = Some(Box::pin(tokio::time::sleep(first_byte)));
        Self { stream, _slot: slot, last_read: None, handshake_due: handshake_bytes, first_byte, silence, timer }
    }

    /// Whether the peer has been silent for too long; re-arms the timer when it has not.
    fn timed_out(&mut self, cx: &mut Context<'_>) -> Option<Limit> {
        let (limit, which) = match self.last_read {
            None => (self.first_byte, Limit::FirstByte),
            Some(_) => (self.silence?, Limit::Silence),
        };
        let timer = self.timer.as_mut()?;
        loop {
            if timer.as_mut().poll(cx).is_pending() {
                return None;
            }
            // Reads re-arm lazily: the timer fires at the old deadline and is moved on from
            // the last byte seen, so reading costs no timer update.
            let deadline = self.last_read.map_or(timer.deadline(), |t| tokio::time::Instant::from_std(t + limit));
            if deadline <= tokio::time::Instant::now() {
                return Some(which);
            }
            timer.as_mut().reset(deadline);
        }
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        telemetry::connection_closed();
    }
}

impl Connected for Conn {
    type ConnectInfo = TcpConnectInfo;

    fn connect_info(&self) -> TcpConnectInfo {
        self.stream.connect_info()
    }
}

impl AsyncRead for Conn {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        match Pin::new(&mut this.stream).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                let read = (buf.filled().len() - before) as u64;
                if this.handshake_due > 0 {
                    this.handshake_due = this.handshake_due.saturating_sub(read);
                    if this.handshake_due == 0 {
                        if this.silence.is_none() {
                            this.timer = None;
                        }
                        this.last_read = Some(Instant::now());
                    }
                } else if read > 0 {
                    this.last_read = Some(Instant::now());
                }
                Poll::Ready(Ok(()))
            }
            Poll::Pending => match this.timed_out(cx) {
                None => Poll::Pending,
                Some(limit) => {
                    telemetry::limit_hit(limit);
                    let peer = this.stream.peer_addr().ok();
                    let what = match limit {
                        Limit::FirstByte => "did not begin its handshake in time",
                        _ => "fell silent before its handshake was done",
                    };
                    tracing::debug!(?peer, "connection {what}; closed");
                    this.timer = None;
                    Poll::Ready(Err(io::Error::new(io::ErrorKind::TimedOut, format!("the client {what}"))))
                }
            },
            ready => ready,
        }
    }
}

impl AsyncWrite for Conn {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }
}
