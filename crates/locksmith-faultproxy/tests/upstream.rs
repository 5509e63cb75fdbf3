//! The proxy forwards the upstream's failures: a server that dies or is not up closes the
//! client's connection instead of leaving it hanging.

mod common;

use common::{closed_soon, round_trip, Echo};
use locksmith_faultproxy::FaultProxy;
use tokio::net::TcpStream;

/// When the upstream goes away, open connections through the proxy close.
#[tokio::test]
async fn upstream_going_away_closes_client_connections() {
    let echo = Echo::start().await;
    let proxy = FaultProxy::start(echo.addr).await.unwrap();
    let mut stream = TcpStream::connect(proxy.local_addr()).await.unwrap();
    assert_eq!(round_trip(&mut stream, b"up").await, b"up");
    drop(echo);
    assert!(closed_soon(&mut stream).await, "the client connection outlived its upstream");
    assert_eq!(proxy.stats().cut, 0, "an upstream close is not a cut");
}

/// With no upstream listening, a new connection is accepted and closed at once, and one opened
/// after the upstream comes back goes through.
#[tokio::test]
async fn upstream_down_closes_new_connections_until_it_is_back() {
    let echo = Echo::start().await;
    let addr = echo.addr;
    drop(echo);
    // The echo listener closes when its aborted task is dropped, at the runtime's next turn.
    tokio::task::yield_now().await;
    let proxy = FaultProxy::start(addr).await.unwrap();
    let mut stream = TcpStream::connect(proxy.local_addr()).await.unwrap();
    assert!(closed_soon(&mut stream).await, "a connection to a down upstream stayed open");

    let _echo = Echo::start_on(addr).await;
    let mut stream = TcpStream::connect(proxy.local_addr()).await.unwrap();
    assert_eq!(round_trip(&mut stream, b"back").await, b"back");
}
