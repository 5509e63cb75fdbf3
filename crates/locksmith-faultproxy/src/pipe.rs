//! One direction of a forwarded connection: a reader that stamps each chunk with its release
//! time, a bounded FIFO, and a writer that delivers chunks no earlier than that time and
//! never during a blackhole.

use std::io;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use crate::faults::{unblocked, Faults};

/// Largest chunk read at once.
const CHUNK: usize = 16 * 1024;
/// Chunks in flight per direction; bounds memory and lets TCP back-pressure reach the sender.
const IN_FLIGHT: usize = 64;

/// Forwards `from` to `to` until `from` ends, then half-closes `to` (as `copy_bidirectional`
/// does), adding the configured latency and holding bytes during a blackhole.
pub(crate) async fn forward<R, W>(
    from: R,
    to: W,
    ctrl: &watch::Receiver<Faults>,
    delivered: &AtomicU64,
) -> io::Result<()>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let (tx, rx) = mpsc::channel(IN_FLIGHT);
    tokio::try_join!(read_side(from, tx, ctrl.clone()), write_side(rx, to, ctrl.clone(), delivered))?;
    Ok(())
}

async fn read_side<R: AsyncRead + Unpin>(
    mut from: R,
    tx: mpsc::Sender<(Instant, Vec<u8>)>,
    mut ctrl: watch::Receiver<Faults>,
) -> io::Result<()> {
    let mut buf = vec![0; CHUNK];
    loop {
        // Not reading during a blackhole leaves the bytes in the sender's socket buffer, as a
        // lossy network would leave them to TCP retransmission.
        unblocked(&mut ctrl).await?;
        let n = from.read(&mut buf).await?;
        if n == 0 {
            // Dropping `tx` tells the writer to deliver what is queued, then half-close.
            return Ok(());
        }
        // The latency in force when the chunk arrives; FIFO delivery keeps order even if it
        // shrinks later.
        let release = Instant::now() + ctrl.borrow().latency;
        // An exact-size copy, so small queued messages do not each pin a full CHUNK.
        if tx.send((release, buf[..n].to_vec())).await.is_err() {
            // The writer failed; its error ends the connection.
            return Ok(());
        }
    }
}

async fn write_side<W: AsyncWrite + Unpin>(
    mut rx: mpsc::Receiver<(Instant, Vec<u8>)>,
    mut to: W,
    mut ctrl: watch::Receiver<Faults>,
    delivered: &AtomicU64,
) -> io::Result<()> {
    while let Some((release, buf)) = rx.recv().await {
        tokio::time::sleep_until(release).await;
        // Bytes read before a blackhole are held, then delivered after heal, like packets TCP
        // retransmits once the network is back.
        unblocked(&mut ctrl).await?;
        to.write_all(&buf).await?;
        delivered.fetch_add(buf.len() as u64, Relaxed);
    }
    to.shutdown().await
}
