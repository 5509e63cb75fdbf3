//! Partitions: `cut` resets, `blackhole` stalls and holds bytes, `heal` ends both; dropping the
//! proxy ends everything.

mod common;

use std::time::Instant;

use common::{closed_soon, round_trip, stays_quiet, Echo, SOON};
use locksmith_faultproxy::FaultProxy;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// `cut` closes an open connection, closes new ones at once, and `heal` lets new ones through.
#[tokio::test]
async fn cut_closes_connections_until_heal() {
    let echo = Echo::start().await;
    let proxy = FaultProxy::start(echo.addr).await.unwrap();
    let mut before = TcpStream::connect(proxy.local_addr()).await.unwrap();
    assert_eq!(round_trip(&mut before, b"up").await, b"up");

    proxy.cut();
    assert!(closed_soon(&mut before).await, "an open connection survived the cut");

    // The handshake completes (the listener is there) but the connection is closed at once.
    let mut during = TcpStream::connect(proxy.local_addr()).await.unwrap();
    assert!(closed_soon(&mut during).await, "a new connection stayed open during the cut");

    proxy.heal();
    let mut after = TcpStream::connect(proxy.local_addr()).await.unwrap();
    assert_eq!(round_trip(&mut after, b"back").await, b"back");

    let stats = proxy.stats();
    assert_eq!((stats.accepted, stats.cut, stats.open), (3, 2, 1));
}

/// `blackhole` keeps connections open but silent (new ones too), and after `heal` the held
/// bytes arrive, in order.
#[tokio::test]
async fn blackhole_stalls_and_heal_delivers_held_bytes() {
    let echo = Echo::start().await;
    let proxy = FaultProxy::start(echo.addr).await.unwrap();
    let mut open = TcpStream::connect(proxy.local_addr()).await.unwrap();
    assert_eq!(round_trip(&mut open, b"up").await, b"up");

    proxy.blackhole();
    open.write_all(b"held-1").await.unwrap();
    let mut during = TcpStream::connect(proxy.local_addr()).await.unwrap();
    during.write_all(b"held-2").await.unwrap();
    assert!(stays_quiet(&mut open).await, "bytes moved (or the connection closed) during the blackhole");
    assert!(stays_quiet(&mut during).await, "a connection opened during the blackhole was not stalled");
    assert_eq!(proxy.stats().bytes_to_upstream, 2, "bytes were delivered during the blackhole");
    assert_eq!(echo.accepted(), 1, "the upstream saw a connection opened during the blackhole");
    open.write_all(b"+more").await.unwrap();

    proxy.heal();
    let mut back = [0; 11];
    tokio::time::timeout(SOON, open.read_exact(&mut back)).await.unwrap().unwrap();
    assert_eq!(&back, b"held-1+more");
    let mut back = [0; 6];
    tokio::time::timeout(SOON, during.read_exact(&mut back)).await.unwrap().unwrap();
    assert_eq!(&back, b"held-2");
    assert_eq!(echo.accepted(), 2);
    assert_eq!(proxy.stats().cut, 0);
}

/// A cut during a blackhole closes the stalled connections.
#[tokio::test]
async fn cut_ends_a_blackhole_by_closing_its_connections() {
    let echo = Echo::start().await;
    let proxy = FaultProxy::start(echo.addr).await.unwrap();
    let mut open = TcpStream::connect(proxy.local_addr()).await.unwrap();
    assert_eq!(round_trip(&mut open, b"up").await, b"up");
    proxy.blackhole();
    let mut stalled = TcpStream::connect(proxy.local_addr()).await.unwrap();
    proxy.cut();
    assert!(closed_soon(&mut open).await);
    assert!(closed_soon(&mut stalled).await);
}

/// Dropping the proxy closes its listener and every forwarded connection, even a stalled one.
#[tokio::test]
async fn dropping_the_proxy_closes_listener_and_connections() {
    let echo = Echo::start().await;
    let proxy = FaultProxy::start(echo.addr).await.unwrap();
    let addr = proxy.local_addr();
    let mut open = TcpStream::connect(addr).await.unwrap();
    assert_eq!(round_trip(&mut open, b"up").await, b"up");
    proxy.blackhole();
    let mut stalled = TcpStream::connect(addr).await.unwrap();

    drop(proxy);
    assert!(closed_soon(&mut open).await, "a forwarded connection outlived the proxy");
    assert!(closed_soon(&mut stalled).await, "a stalled connection outlived the proxy");
    // The abort is asynchronous: the listener closes at the runtime's next turn.
    let deadline = Instant::now() + SOON;
    loop {
        match TcpStream::connect(addr).await {
            Err(_) => break,
            Ok(_) if Instant::now() < deadline => tokio::task::yield_now().await,
            Ok(_) => panic!("the listener still accepts after the proxy was dropped"),
        }
    }
}
