//! One client connection: wait out a blackhole, connect upstream, forward both ways, and
//! reset both sockets when a cut comes.

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use tokio::net::TcpStream;
use tokio::sync::watch;

use crate::faults::{cut_since, unblocked, Faults};
use crate::pipe::forward;
use crate::stats::Counters;

/// Serves `client` until either side closes, a cut after `cuts` happens, or the proxy drops.
pub(crate) async fn serve(
    mut client: TcpStream,
    upstream: SocketAddr,
    ctrl: watch::Receiver<Faults>,
    cuts: u64,
    stats: Arc<Counters>,
) {
    let _open = stats.opened();
    let mut up = None;
    tokio::select! {
        // Biased: a cut wins over bytes that are ready in the same poll.
        biased;
        cut = cut_since(ctrl.clone(), cuts) => {
            if cut {
                stats.cut.fetch_add(1, Relaxed);
                reset(&client);
                if let Some(up) = &up {
                    reset(up);
                }
            }
            // Otherwise the proxy was dropped: the sockets close normally below.
        }
        done = run(&mut client, &mut up, upstream, &ctrl, &stats) => {
            if let Err(e) = done {
                // A failure on one side (upstream killed, refused, reset) reaches the other as a
                // reset, as it would without the proxy in between; clean EOFs were forwarded.
                tracing::debug!(%upstream, error = %e, "fault proxy connection failed");
                reset(&client);
                if let Some(up) = &up {
                    reset(up);
                }
            }
        }
    }
}

async fn run(
    client: &mut TcpStream,
    up: &mut Option<TcpStream>,
    upstream: SocketAddr,
    ctrl: &watch::Receiver<Faults>,
    stats: &Counters,
) -> io::Result<()> {
    // A connection opened during a blackhole stalls like a handshake lost in the network; the
    // upstream only sees it after heal.
    unblocked(&mut ctrl.clone()).await?;
    let upstream = up.insert(TcpStream::connect(upstream).await?);
    // Small lock-protocol messages must not wait for Nagle; the proxy adds delay on purpose only.
    client.set_nodelay(true)?;
    upstream.set_nodelay(true)?;
    let (client_read, client_write) = client.split();
    let (up_read, up_write) = upstream.split();
    tokio::try_join!(
        forward(client_read, up_write, ctrl, &stats.bytes_to_upstream),
        forward(up_read, client_write, ctrl, &stats.bytes_to_client),
    )?;
    Ok(())
}

/// Makes the coming close send RST instead of FIN, so the peer sees "connection reset" as on a
/// real network failure; it still closes (with FIN) if the option cannot be set.
pub(crate) fn reset(socket: &TcpStream) {
    if let Err(e) = socket.set_zero_linger() {
        tracing::debug!(error = %e, "could not set SO_LINGER 0; closing with FIN");
    }
}
