//! The proxy handle: a loopback listener, its accept loop, and the fault switches.

use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::{JoinHandle, JoinSet};

use crate::conn;
use crate::faults::{Faults, Mode};
use crate::stats::{Counters, ProxyStats};

/// A TCP proxy on `127.0.0.1` in front of one upstream `host:port`, whose faults can be
/// switched at any time: [`cut`](Self::cut), [`blackhole`](Self::blackhole),
/// [`set_latency`](Self::set_latency), [`heal`](Self::heal).
///
/// Dropping it stops it: the listener closes and every forwarded connection ends (both
/// sockets closed), whatever fault is in force.
#[derive(Debug)]
pub struct FaultProxy {
    addr: SocketAddr,
    upstream: SocketAddr,
    ctrl: watch::Sender<Faults>,
    stats: Arc<Counters>,
    accept: JoinHandle<()>,
}

impl FaultProxy {
    /// Listens on `127.0.0.1:0` (loopback only, a free port) and forwards every connection to
    /// `upstream`, with no fault. The upstream is connected once per client connection, when
    /// it is accepted (after heal if a blackhole is in force), so it need not be up yet; if it
    /// refuses, the client connection is reset. A reset or error on either side resets the
    /// other; a clean close (EOF) is forwarded as a half-close.
    ///
    /// Must be called inside a Tokio runtime: the proxy's tasks run on it.
    ///
    /// # Cancel safety
    /// Cancel safe: nothing is spawned before the listener is bound, and a listener dropped
    /// by cancellation closes.
    ///
    /// # Errors
    /// The I/O error of binding the listener.
    pub async fn start(upstream: SocketAddr) -> io::Result<FaultProxy> {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await?;
        let addr = listener.local_addr()?;
        let (ctrl, watching) = watch::channel(Faults::NONE);
        let stats = Arc::new(Counters::default());
        let accept = tokio::spawn(accept_loop(listener, upstream, watching, stats.clone()));
        tracing::debug!(%addr, %upstream, "fault proxy started");
        Ok(FaultProxy { addr, upstream, ctrl, stats, accept })
    }

    /// The address clients connect to instead of the upstream.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The address connections are forwarded to.
    pub fn upstream(&self) -> SocketAddr {
        self.upstream
    }

    /// Partition, reset flavour: every open connection is reset now (both its client and its
    /// upstream socket, with RST), and new connections are accepted and reset at once, until
    /// [`heal`](Self::heal). Replaces a blackhole.
    pub fn cut(&self) {
        tracing::debug!(addr = %self.addr, "fault proxy: cut");
        self.ctrl.send_modify(|f| {
            f.mode = Mode::Cut;
            f.cuts += 1;
        });
    }

    /// Partition, blackhole flavour: connections stay open but no byte moves either way, and
    /// new connections are accepted and stalled (the upstream is not connected yet), until
    /// [`heal`](Self::heal) or [`cut`](Self::cut).
    ///
    /// Bytes are held, not lost: those already read by the proxy are delivered after heal,
    /// the rest wait in the senders' socket buffers. That is what TCP does over a real
    /// partition (it retransmits lost segments once the path is back), so a peer sees a
    /// stall, then late data, never a gap. A sender that keeps writing fills the buffers and
    /// blocks, as it would on a real network.
    pub fn blackhole(&self) {
        tracing::debug!(addr = %self.addr, "fault proxy: blackhole");
        self.ctrl.send_modify(|f| f.mode = Mode::Blackhole);
    }

    /// Delays every chunk by `delay` in each direction (so a round trip takes at least twice
    /// `delay`), keeping byte order; [`Duration::ZERO`] removes the delay. A chunk gets the
    /// delay in force when the proxy reads it. Latency combines with the partitions and
    /// outlives [`heal`](Self::heal). Connection set-up is not delayed: the client's handshake
    /// is with the proxy, and the upstream is connected at once; the first bytes pay the delay.
    pub fn set_latency(&self, delay: Duration) {
        tracing::debug!(addr = %self.addr, ?delay, "fault proxy: latency");
        self.ctrl.send_modify(|f| f.latency = delay);
    }

    /// Ends a cut or a blackhole; new connections go through and held bytes are delivered.
    /// The latency stays as set.
    pub fn heal(&self) {
        tracing::debug!(addr = %self.addr, "fault proxy: heal");
        self.ctrl.send_modify(|f| f.mode = Mode::Pass);
    }

    /// Counters so far.
    pub fn stats(&self) -> ProxyStats {
        self.stats.snapshot()
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        // Aborting the accept task drops the listener and the JoinSet, which aborts every
        // connection task and so closes their sockets.
        self.accept.abort();
    }
}

async fn accept_loop(listener: TcpListener, upstream: SocketAddr, ctrl: watch::Receiver<Faults>, stats: Arc<Counters>) {
    let mut conns = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((socket, _)) => {
                    stats.accepted.fetch_add(1, Relaxed);
                    let faults = *ctrl.borrow();
                    if faults.mode == Mode::Cut {
                        stats.cut.fetch_add(1, Relaxed);
                        conn::reset(&socket);
                        continue;
                    }
                    conns.spawn(conn::serve(socket, upstream, ctrl.clone(), faults.cuts, stats.clone()));
                }
                Err(e) => {
                    // Out of descriptors and the like: retry shortly rather than spin or stop.
                    tracing::warn!(error = %e, "fault proxy accept failed");
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            },
            // Reap finished connections so the set does not grow with every connection.
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
}
