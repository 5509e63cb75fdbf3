//! An echo server on loopback for the proxy tests, and small socket helpers.

#![allow(dead_code)] // each test file uses a different subset

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// How long a test waits for something that should happen at once on loopback; generous for a
/// loaded 2-core CI box.
pub const SOON: Duration = Duration::from_secs(3);
/// How long a read must stay silent to count as stalled.
pub const QUIET: Duration = Duration::from_millis(300);

/// A TCP echo server on `127.0.0.1`, stopped (listener and connections) on drop.
pub struct Echo {
    pub addr: SocketAddr,
    accepted: Arc<AtomicUsize>,
    task: JoinHandle<()>,
}

impl Echo {
    pub async fn start() -> Echo {
        Echo::start_on("127.0.0.1:0".parse().unwrap()).await
    }

    /// On a given address, e.g. to restart where a dropped one was.
    pub async fn start_on(addr: SocketAddr) -> Echo {
        let listener = TcpListener::bind(addr).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let accepted = Arc::new(AtomicUsize::new(0));
        let counter = accepted.clone();
        let task = tokio::spawn(async move {
            let mut conns = tokio::task::JoinSet::new();
            while let Ok((mut socket, _)) = listener.accept().await {
                counter.fetch_add(1, Ordering::SeqCst);
                conns.spawn(async move {
                    let (mut r, mut w) = socket.split();
                    // Echo until EOF, then half-close back so the client sees EOF too.
                    let _ = tokio::io::copy(&mut r, &mut w).await;
                    let _ = w.shutdown().await;
                });
            }
        });
        Echo { addr, accepted, task }
    }

    /// Connections this server has accepted so far.
    pub fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }
}

impl Drop for Echo {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Writes `msg` and reads the same number of bytes back.
pub async fn round_trip(stream: &mut TcpStream, msg: &[u8]) -> Vec<u8> {
    stream.write_all(msg).await.unwrap();
    let mut back = vec![0; msg.len()];
    tokio::time::timeout(SOON, stream.read_exact(&mut back)).await.expect("echo within SOON").unwrap();
    back
}

/// True when the peer closed the stream (EOF or reset) within [`SOON`].
pub async fn closed_soon(stream: &mut TcpStream) -> bool {
    let mut buf = [0; 64];
    loop {
        match tokio::time::timeout(SOON, stream.read(&mut buf)).await {
            Err(_) => return false,
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            // Bytes still in flight before the close; keep reading.
            Ok(Ok(_)) => continue,
        }
    }
}

/// True when nothing arrives (and the stream is not closed) for [`QUIET`].
pub async fn stays_quiet(stream: &mut TcpStream) -> bool {
    let mut buf = [0; 64];
    tokio::time::timeout(QUIET, stream.read(&mut buf)).await.is_err()
}
